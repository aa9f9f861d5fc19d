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

/// Integer promotion is NumPy's: this table is `numpy.promote_types` (NumPy 2.x) for
/// every pair of integer types, row by column, in the order of `INTS`.
#[test]
fn integer_promotion_is_numpys() {
    use Dtype::*;
    const INTS: [Dtype; 8] = [I8, U8, I16, U16, I32, U32, I64, U64];
    let numpy: [[Dtype; 8]; 8] = [
        [I8, I16, I16, I32, I32, I64, I64, F64],
        [I16, U8, I16, U16, I32, U32, I64, U64],
        [I16, I16, I16, I32, I32, I64, I64, F64],
        [I32, U16, I32, U16, I32, U32, I64, U64],
        [I32, I32, I32, I32, I32, I64, I64, F64],
        [I64, U32, I64, U32, I64, U32, I64, U64],
        [I64, I64, I64, I64, I64, I64, I64, F64],
        [F64, U64, F64, U64, F64, U64, F64, U64],
    ];
    for (a, row) in INTS.iter().zip(numpy) {
        for (b, want) in INTS.iter().zip(row) {
            assert_eq!(Dtype::promote(*a, *b), want, "{a} with {b}");
        }
    }
    // Bool gives way; an integer with a float gives the float (not NumPy's f64 for
    // i32 with f32, as before these types).
    for d in INTS {
        assert_eq!(Dtype::promote(Bool, d), d);
        assert_eq!(Dtype::promote(d, F32), F32);
        assert_eq!(Dtype::promote(F16, d), F16);
    }
    assert_eq!(Dtype::promote(F16, Bf16), F32);
    assert_eq!(Dtype::promote(F64, F32), F64);
}

#[test]
fn integer_types_sizes_signs_and_names() {
    use Dtype::*;
    let rows = [(I8, "i8", 1, true), (U8, "u8", 1, false), (I16, "i16", 2, true), (U16, "u16", 2, false), (I32, "i32", 4, true), (U32, "u32", 4, false), (I64, "i64", 8, true), (U64, "u64", 8, false)];
    for (d, name, size, signed) in rows {
        assert_eq!((d.name(), d.size(), d.is_int(), d.is_signed_int(), d.is_unsigned_int(), d.is_float()), (name, size, true, signed, !signed, false));
        assert_eq!(Dtype::from_name(name), Some(d));
    }
    assert_eq!(U8.int_range(), Some((0.0, 255.0)));
    assert_eq!(I16.int_range(), Some((-32768.0, 32767.0)));
    assert_eq!(Bool.int_range(), None);
    assert!(!Bool.is_int());
}

/// A graph of the new types prints and reads back, constants included.
#[test]
fn integer_types_print_and_read_back() {
    let text = "graph g {\n  %0 = input \"x\" : u8[3]\n  %1 = constant {value = [250, 7, 0]} : u8[3]\n  %2 = add %0, %1 : u8[3]\n  %3 = cast %2 {to = u64} : u64[3]\n  %4 = constant {value = [-3, 4, 5]} : i16[3]\n  %5 = mul %3, %3 : u64[3]\n  %6 = cast %4 {to = i8} : i8[3]\n  %7 = cast %6 {to = u16} : u16[3]\n  %8 = cast %7 {to = u32} : u32[3]\n  output \"y\" = %5\n  output \"z\" = %8\n}\n";
    let g = parse(text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(print(&g), text);
}
