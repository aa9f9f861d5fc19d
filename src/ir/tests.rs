//! The text form of the IR made from the op table: every op prints and reads back, and
//! bad attributes are reported on their line.

use super::parse::parse;
use super::print::print;
use super::*;
use crate::tensor::Tensor;

/// One node of each op of the catalogue, printed and read back: the same ops, the same
/// text. A row whose printer and parser disagree fails here.
#[test]
fn every_op_prints_and_reads_back() {
    let mut g = Graph::new("all");
    let x = g.push(Op::Input, vec![], TensorType::new(Dtype::F32, Shape::scalar()));
    g.nodes[0].name = Some("x".into());
    for op in Op::catalogue() {
        let v = match op {
            Op::Constant(_) => g.add_const(Tensor::new(Dtype::F32, vec![2], vec![1.5, -2.0])),
            // The example's shape and dtype are the node's type.
            Op::Iota { .. } => g.push(op, vec![], TensorType::new(Dtype::I32, Shape::scalar())),
            _ => g.push(op.clone(), vec![x; op.arity().0], TensorType::new(Dtype::F32, Shape::scalar())),
        };
        g.nodes[v.index()].name = Some(format!("v{}", v.0));
    }
    let text = print(&g);
    let back = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for (a, b) in g.nodes.iter().zip(&back.nodes) {
        assert_eq!(a.op, b.op, "{} reads back as another op", a.op.name());
    }
    assert_eq!(print(&back), text);
}

/// Every kind of attribute value, in the forms the printer writes, reads back to the
/// same text.
#[test]
fn attribute_values_read_back_byte_for_byte() {
    let text = "graph attrs {
  %0 = input \"x\" : f32[4, 6]
  %1 = constant {value = [1.0, -inf, NaN]} : f32[3]
  %2 = cast %0 {to = bf16} : bf16[4, 6]
  %3 = argmax %0 {axis = none, keepdim = true} : i64[1, 1]
  %4 = argmin %0 {axis = 1, keepdim = false} : i64[4]
  %5 = variance %0 {axes = [0, 1], keepdim = false, correction = 1.5} : f32[]
  %6 = slice %0 {ranges = [1:, -3::2]} : f32[3, 2]
  %7 = pad %0 {pads = [(0, 1), (2, 3)], value = -inf} : f32[5, 11]
  %8 = reshape %0 : f32[24]  // \"flat\"
  %9 = iota {axis = 1} : i64[2, B]  // from iota (Iota)
  %10 = avg_pool %0 {kernel = [2], stride = [1], padding = [(1, 0)], dilation = [2]} : f32[4, 5]
  %11 = concat %0, %0, %0 {axis = 0} : f32[12, 6]
  output \"y\" = %7
  loss \"l\" = %5
}
";
    let g = parse(text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(g.nodes[6].op, Op::Slice { ranges: vec![SliceRange { start: Some(1), stop: None, step: 1 }, SliceRange { start: Some(-3), stop: None, step: 2 }] });
    assert_eq!(g.nodes[9].op, Op::Iota { shape: Shape(vec![Dim::Known(2), Dim::Sym("B".into())]), axis: 1, dtype: Dtype::I64 });
    assert_eq!(print(&g), text);
}

/// Each wrong line is reported with its number and what is wrong, whole.
#[test]
fn bad_attributes_are_reported_on_their_line() {
    let cases = [
        ("%1 = frobnicate %0 : f32[2]", "IR line 3: unknown op `frobnicate`"),
        ("%1 = softmax %0 : f32[2]", "IR line 3: softmax needs `axis = ...`"),
        ("%1 = softmax %0 {axis = -1} : f32[2]", "IR line 3: softmax axis: expected an index, got `-1`"),
        ("%1 = reduce_sum %0 {axes = [0], keepdim = yes} : f32[]", "IR line 3: reduce_sum keepdim: expected `true` or `false`, got `yes`"),
        ("%1 = cast %0 {to = f8} : f32[2]", "IR line 3: cast to: expected an element type, got `f8`"),
        ("%1 = pad %0 {pads = [(1, 2, 3)], value = 0} : f32[8]", "IR line 3: pad pads: expected a pair `(a, b)`, got `(1, 2, 3)`"),
        ("%1 = slice %0 {ranges = [1:2:3:4]} : f32[1]", "IR line 3: slice ranges: expected a slice `start:stop` or `start:stop:step`, got `1:2:3:4`"),
        ("%1 = transpose %0 {perm = 0} : f32[2]", "IR line 3: transpose perm: expected a list, got `0`"),
        ("%1 = constant {value = [1.0, 2.0]} : f32[3]", "IR line 3: a constant of type f32[3] cannot hold 2 values"),
        ("%1 = constant {id = 0} : f32[3]", "IR line 3: constant needs `value = ...`"),
    ];
    for (line, want) in cases {
        let text = format!("graph bad {{\n  %0 = input \"x\" : f32[2]\n  {line}\n}}\n");
        let got = parse(&text).map(|_| ()).unwrap_err().to_string();
        assert_eq!(got, want, "for `{line}`");
    }
}
