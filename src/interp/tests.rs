//! Tests of the interpreter: every op on small tensors with hand-computed results, and
//! whole graphs through `run`, including its error messages.

use std::collections::BTreeMap;

use super::*;
use crate::error::ErrorKind;
use crate::ir::verify::verify;
use crate::ir::*;

fn t(dtype: Dtype, shape: &[u64], data: &[f64]) -> Tensor {
    Tensor::new(dtype, shape.to_vec(), data.to_vec())
}
fn f64t(shape: &[u64], data: &[f64]) -> Tensor {
    t(Dtype::F64, shape, data)
}
fn i64t(shape: &[u64], data: &[f64]) -> Tensor {
    t(Dtype::I64, shape, data)
}
fn boolt(shape: &[u64], data: &[f64]) -> Tensor {
    t(Dtype::Bool, shape, data)
}

/// Evaluates `op` with the result type its shape rule gives.
fn eval(op: Op, args: &[&Tensor]) -> Result<Tensor> {
    let types: Vec<TensorType> = args.iter().map(|a| TensorType::new(a.dtype, Shape::known(&a.shape))).collect();
    let refs: Vec<&TensorType> = types.iter().collect();
    let ty = infer(&op, &refs, &TensorType::new(Dtype::F64, Shape::scalar()), &[]).expect("shape rule accepts the test");
    eval_op(&op, args, &ty, &[])
}

fn ok(op: Op, args: &[&Tensor]) -> Tensor {
    eval(op, args).expect("op evaluates")
}

fn err(op: Op, args: &[&Tensor]) -> String {
    let e = eval(op, args).expect_err("op fails");
    assert_eq!(e.kind, ErrorKind::User);
    e.to_string()
}

/// Elementwise comparison within a relative tolerance of 1e-14, NaN equal to NaN.
fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
    for (g, w) in got.iter().zip(want) {
        let same = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-14 * w.abs().max(1e-300);
        assert!(same, "got {got:?}, want {want:?}");
    }
}

fn unary(u: UnaryOp, x: &Tensor) -> Vec<f64> {
    ok(Op::Unary(u), &[x]).data
}

fn binary(b: BinaryOp, l: &Tensor, r: &Tensor) -> Tensor {
    ok(Op::Binary(b), &[l, r])
}

#[test]
fn unary_functions() {
    let x = f64t(&[5], &[-2.0, -0.5, 0.0, 0.5, 2.0]);
    close(&unary(UnaryOp::Neg, &x), &[2.0, 0.5, 0.0, -0.5, -2.0]);
    close(&unary(UnaryOp::Abs, &x), &[2.0, 0.5, 0.0, 0.5, 2.0]);
    close(&unary(UnaryOp::Sign, &x), &[-1.0, -1.0, 0.0, 1.0, 1.0]);
    close(&unary(UnaryOp::Floor, &x), &[-2.0, -1.0, 0.0, 0.0, 2.0]);
    close(&unary(UnaryOp::Relu, &x), &[0.0, 0.0, 0.0, 0.5, 2.0]);
    close(&unary(UnaryOp::Composite(Composite::Sigmoid), &x), &[0.11920292202211755, 0.3775406687981454, 0.5, 0.6224593312018546, 0.8807970779778823]);
    close(&unary(UnaryOp::Tanh, &x), &[-0.9640275800758169, -0.46211715726000974, 0.0, 0.46211715726000974, 0.9640275800758169]);
    close(&unary(UnaryOp::Composite(Composite::Gelu), &x), &[-0.04550026389635844, -0.15426876936299344, 0.0, 0.34573123063700656, 1.9544997361036416]);
    close(&unary(UnaryOp::Composite(Composite::GeluTanh), &x), &[-0.04540230591222494, -0.15428599017485606, 0.0, 0.34571400982514394, 1.954597694087775]);
    close(&unary(UnaryOp::Composite(Composite::Softplus), &x), &[0.1269280110429725, 0.4740769841801067, std::f64::consts::LN_2, 0.9740769841801067, 2.1269280110429727]);

    let y = f64t(&[3], &[1.0, 4.0, std::f64::consts::PI / 2.0]);
    close(&unary(UnaryOp::Exp, &f64t(&[2], &[0.0, 1.0])), &[1.0, std::f64::consts::E]);
    close(&unary(UnaryOp::Log, &y)[..2], &[0.0, 4f64.ln()]);
    close(&unary(UnaryOp::Sqrt, &y)[..2], &[1.0, 2.0]);
    close(&unary(UnaryOp::Sin, &y)[2..], &[1.0]);
    close(&unary(UnaryOp::Cos, &f64t(&[1], &[0.0])), &[1.0]);
    close(&unary(UnaryOp::Not, &boolt(&[2], &[1.0, 0.0])), &[0.0, 1.0]);
    let isnan = ok(Op::Unary(UnaryOp::IsNan), &[&f64t(&[2], &[f64::NAN, 1.0])]);
    assert_eq!((isnan.dtype, isnan.data), (Dtype::Bool, vec![1.0, 0.0]));
}

#[test]
fn unary_edge_cases_are_stable() {
    let big = f64t(&[2], &[-1000.0, 1000.0]);
    close(&unary(UnaryOp::Composite(Composite::Sigmoid), &big), &[0.0, 1.0]);
    close(&unary(UnaryOp::Composite(Composite::Softplus), &big), &[0.0, 1000.0]);
    // The erfc form keeps GELU's tiny negative tail instead of cancelling to 0.
    close(&unary(UnaryOp::Composite(Composite::Gelu), &f64t(&[1], &[-10.0])), &[-7.619853024160593e-23]);
    let nan = f64t(&[1], &[f64::NAN]);
    assert!(unary(UnaryOp::Relu, &nan)[0].is_nan());
    assert!(unary(UnaryOp::Sign, &nan)[0].is_nan());
    // Transcendental functions of integers give f32.
    let e = ok(Op::Unary(UnaryOp::Exp), &[&i64t(&[1], &[1.0])]);
    assert_eq!((e.dtype, e.data), (Dtype::F32, vec![std::f64::consts::E as f32 as f64]));
}

#[test]
fn binary_broadcasts_size_one_dims() {
    let col = f64t(&[2, 1], &[10.0, 20.0]);
    let row = f64t(&[3], &[1.0, 2.0, 3.0]);
    let sum = binary(BinaryOp::Add, &col, &row);
    assert_eq!(sum.shape, vec![2, 3]);
    close(&sum.data, &[11.0, 12.0, 13.0, 21.0, 22.0, 23.0]);
    let diff = binary(BinaryOp::Sub, &row, &col);
    close(&diff.data, &[-9.0, -8.0, -7.0, -19.0, -18.0, -17.0]);
    // [2, 1, 2] with [3, 1]: both operands broadcast.
    let a = f64t(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = f64t(&[3, 1], &[1.0, 10.0, 100.0]);
    let prod = binary(BinaryOp::Mul, &a, &b);
    assert_eq!(prod.shape, vec![2, 3, 2]);
    close(&prod.data, &[1.0, 2.0, 10.0, 20.0, 100.0, 200.0, 3.0, 4.0, 30.0, 40.0, 300.0, 400.0]);
    let scalar = f64t(&[], &[2.0]);
    close(&binary(BinaryOp::Div, &row, &scalar).data, &[0.5, 1.0, 1.5]);
    close(&binary(BinaryOp::Pow, &scalar, &row).data, &[2.0, 4.0, 8.0]);
}

#[test]
fn binary_arithmetic_and_comparisons() {
    let a = f64t(&[4], &[1.0, -3.0, f64::NAN, 2.0]);
    let b = f64t(&[4], &[2.0, -4.0, 0.0, 2.0]);
    close(&binary(BinaryOp::Max, &a, &b).data, &[2.0, -3.0, f64::NAN, 2.0]);
    close(&binary(BinaryOp::Min, &a, &b).data, &[1.0, -4.0, f64::NAN, 2.0]);
    let cmp = |op| binary(op, &a, &b).data;
    assert_eq!(cmp(BinaryOp::Eq), vec![0.0, 0.0, 0.0, 1.0]);
    assert_eq!(cmp(BinaryOp::Ne), vec![1.0, 1.0, 1.0, 0.0]);
    assert_eq!(cmp(BinaryOp::Lt), vec![1.0, 0.0, 0.0, 0.0]);
    assert_eq!(cmp(BinaryOp::Le), vec![1.0, 0.0, 0.0, 1.0]);
    assert_eq!(cmp(BinaryOp::Gt), vec![0.0, 1.0, 0.0, 0.0]);
    assert_eq!(cmp(BinaryOp::Ge), vec![0.0, 1.0, 0.0, 1.0]);
    assert_eq!(binary(BinaryOp::Lt, &a, &b).dtype, Dtype::Bool);

    let p = boolt(&[4], &[0.0, 0.0, 1.0, 1.0]);
    let q = boolt(&[4], &[0.0, 1.0, 0.0, 1.0]);
    assert_eq!(binary(BinaryOp::And, &p, &q).data, vec![0.0, 0.0, 0.0, 1.0]);
    assert_eq!(binary(BinaryOp::Or, &p, &q).data, vec![0.0, 1.0, 1.0, 1.0]);
    assert_eq!(binary(BinaryOp::Xor, &p, &q).data, vec![0.0, 1.0, 1.0, 0.0]);
}

#[test]
fn floor_division_rounds_toward_negative_infinity() {
    let a = i64t(&[5], &[7.0, -7.0, 7.0, -7.0, 5.0]);
    let b = i64t(&[5], &[2.0, 2.0, -2.0, -2.0, 0.0]);
    // Python: 7//2, -7//2, 7//-2, -7//-2, and NumPy's 0 for integer division by zero.
    assert_eq!(binary(BinaryOp::FloorDiv, &a, &b).data, vec![3.0, -4.0, -4.0, 3.0, 0.0]);
    let fa = f64t(&[3], &[7.0, -7.0, 1.0]);
    let fb = f64t(&[3], &[2.0, 2.0, 0.0]);
    assert_eq!(binary(BinaryOp::FloorDiv, &fa, &fb).data, vec![3.0, -4.0, f64::INFINITY]);
    // Integer powers stay exact; negative integer exponents are refused, as in NumPy.
    assert_eq!(binary(BinaryOp::Pow, &i64t(&[2], &[3.0, -2.0]), &i64t(&[2], &[3.0, 3.0])).data, vec![27.0, -8.0]);
    assert_eq!(
        err(Op::Binary(BinaryOp::Pow), &[&i64t(&[1], &[2.0]), &i64t(&[1], &[-1.0])]),
        "integers to negative integer powers are not allowed (exponent -1)"
    );
}

#[test]
fn shifts_work_in_the_operand_width() {
    let i32t = |d: &[f64]| t(Dtype::I32, &[d.len() as u64], d);
    let l = binary(BinaryOp::Shl, &i32t(&[1.0, 1.0, 3.0, 1.0]), &i32t(&[3.0, 31.0, 32.0, -1.0]));
    assert_eq!(l.data, vec![8.0, -2147483648.0, 0.0, 0.0]);
    let r = binary(BinaryOp::Shr, &i32t(&[-8.0, 8.0, -8.0, 8.0]), &i32t(&[1.0, 2.0, 40.0, 40.0]));
    assert_eq!(r.data, vec![-4.0, 2.0, -1.0, 0.0]);
    let big = binary(BinaryOp::Shl, &i64t(&[1], &[1.0]), &i64t(&[1], &[40.0]));
    assert_eq!(big.data, vec![(1u64 << 40) as f64]);
}

#[test]
fn where_broadcasts_all_three() {
    let cond = boolt(&[3], &[1.0, 0.0, 1.0]);
    let a = f64t(&[2, 1], &[1.0, 2.0]);
    let b = f64t(&[], &[-1.0]);
    let out = ok(Op::Where, &[&cond, &a, &b]);
    assert_eq!(out.shape, vec![2, 3]);
    assert_eq!(out.data, vec![1.0, -1.0, 1.0, 2.0, -1.0, 2.0]);
}

#[test]
fn cast_rounds_and_truncates() {
    let x = f64t(&[4], &[1.7, -1.7, 0.0, 1.0 / 3.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::I32 }, &[&x]).data, vec![1.0, -1.0, 0.0, 0.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::Bool }, &[&x]).data, vec![1.0, 1.0, 0.0, 1.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::F32 }, &[&x]).data[3], 0.3333333432674408);
}

#[test]
fn matmul_of_matrices_and_vectors() {
    let a = f64t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f64t(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
    let v = f64t(&[3], &[1.0, 2.0, 3.0]);
    let ab = ok(Op::MatMul, &[&a, &b]);
    assert_eq!((ab.shape, ab.data), (vec![2, 2], vec![58.0, 64.0, 139.0, 154.0]));
    // Rank-1 left acts as a row [1, 3], and that dimension is removed again.
    let vb = ok(Op::MatMul, &[&v, &b]);
    assert_eq!((vb.shape, vb.data), (vec![2], vec![58.0, 64.0]));
    // Rank-1 right acts as a column [3, 1].
    let av = ok(Op::MatMul, &[&a, &v]);
    assert_eq!((av.shape, av.data), (vec![2], vec![14.0, 32.0]));
    let vv = ok(Op::MatMul, &[&v, &f64t(&[3], &[4.0, 5.0, 6.0])]);
    assert_eq!((vv.shape, vv.data), (vec![], vec![32.0]));
}

#[test]
fn matmul_broadcasts_batch_dims() {
    // l: [2, 1, 2, 2] = (I, 2I); r: [3, 2, 2] = diag(j, j+1) for j = 0, 1, 2.
    let l = f64t(&[2, 1, 2, 2], &[1.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 2.0]);
    let r = f64t(&[3, 2, 2], &[0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 2.0, 2.0, 0.0, 0.0, 3.0]);
    let out = ok(Op::MatMul, &[&l, &r]);
    assert_eq!(out.shape, vec![2, 3, 2, 2]);
    let mut want = Vec::new();
    for scale in [1.0, 2.0] {
        want.extend(r.data.iter().map(|x| scale * x));
    }
    assert_eq!(out.data, want);
    // A rank-1 left operand against a batch of matrices: [2] @ [3, 2, 2] -> [3, 2].
    let v = ok(Op::MatMul, &[&f64t(&[2], &[1.0, 1.0]), &r]);
    assert_eq!((v.shape, v.data), (vec![3, 2], vec![0.0, 1.0, 1.0, 2.0, 2.0, 3.0]));
}

fn conv_attrs(stride: &[u64], padding: &[(u64, u64)], dilation: &[u64], groups: u64) -> ConvAttrs {
    ConvAttrs { stride: stride.to_vec(), padding: padding.to_vec(), dilation: dilation.to_vec(), groups }
}

#[test]
fn conv2d_with_stride_and_padding() {
    // x[r][c] = 4r + c on a 4x4 image; a 2x2 kernel of ones, stride 2, padding 1.
    let x = f64t(&[1, 1, 4, 4], &(0..16).map(f64::from).collect::<Vec<_>>());
    let w = f64t(&[1, 1, 2, 2], &[1.0; 4]);
    let out = ok(Op::Conv(conv_attrs(&[2, 2], &[(1, 1), (1, 1)], &[1, 1], 1)), &[&x, &w]);
    assert_eq!(out.shape, vec![1, 1, 3, 3]);
    // Windows cover rows {-1,0}, {1,2}, {3,4} (and the same columns); -1 and 4 are padding.
    assert_eq!(out.data, vec![0.0, 3.0, 3.0, 12.0, 30.0, 18.0, 12.0, 27.0, 15.0]);
}

#[test]
fn conv1d_with_dilation_is_not_flipped() {
    let x = f64t(&[1, 1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let w = f64t(&[1, 1, 2], &[1.0, 10.0]);
    let out = ok(Op::Conv(conv_attrs(&[1], &[(0, 0)], &[2], 1)), &[&x, &w]);
    // out[i] = x[i] + 10 x[i+2]
    assert_eq!((out.shape, out.data), (vec![1, 1, 3], vec![31.0, 42.0, 53.0]));
}

#[test]
fn conv_groups_see_only_their_channels() {
    // Two channels, two groups: output 0 = [1, 1] on channel 0, output 1 = [1, -1] on channel 1.
    let x = f64t(&[1, 2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let w = f64t(&[2, 1, 2], &[1.0, 1.0, 1.0, -1.0]);
    let bias = f64t(&[2, 1], &[10.0, 20.0]);
    let attrs = conv_attrs(&[1], &[(0, 0)], &[1], 2);
    let out = ok(Op::Conv(attrs.clone()), &[&x, &w]);
    assert_eq!((out.shape, out.data), (vec![1, 2, 2], vec![3.0, 5.0, -1.0, -1.0]));
    let biased = ok(Op::Conv(attrs), &[&x, &w, &bias]);
    assert_eq!(biased.data, vec![13.0, 15.0, 19.0, 19.0]);
    // The same weights in one group mix both channels: output 0 = ch0 + ch1 summed over taps.
    let w1 = f64t(&[1, 2, 2], &[1.0, 1.0, 1.0, -1.0]);
    let mixed = ok(Op::Conv(conv_attrs(&[1], &[(0, 0)], &[1], 1)), &[&x, &w1]);
    assert_eq!(mixed.data, vec![3.0 - 1.0, 5.0 - 1.0]);
}

fn pool(kind: PoolKind, kernel: &[u64], stride: &[u64], padding: &[(u64, u64)], dilation: &[u64]) -> Op {
    Op::Pool(PoolAttrs {
        kind,
        kernel: kernel.to_vec(),
        stride: stride.to_vec(),
        padding: padding.to_vec(),
        dilation: dilation.to_vec(),
    })
}

#[test]
fn pools_with_padding() {
    let x = f64t(&[1, 1, 4], &[1.0, -2.0, 3.0, -4.0]);
    // Windows: [pad, 1], [-2, 3], [-4, pad].
    let max = ok(pool(PoolKind::Max, &[2], &[2], &[(1, 1)], &[1]), &[&x]);
    assert_eq!((max.shape, max.data), (vec![1, 1, 3], vec![1.0, 3.0, -4.0]));
    let avg = ok(pool(PoolKind::Avg, &[2], &[2], &[(1, 1)], &[1]), &[&x]);
    assert_eq!(avg.data, vec![0.5, 0.5, -2.0]);
}

#[test]
fn pools_in_two_dims_and_with_dilation() {
    let x = f64t(&[1, 1, 3, 3], &(1..=9).map(f64::from).collect::<Vec<_>>());
    let max = ok(pool(PoolKind::Max, &[2, 2], &[1, 1], &[(0, 0); 2], &[1, 1]), &[&x]);
    assert_eq!((max.shape, max.data), (vec![1, 1, 2, 2], vec![5.0, 6.0, 8.0, 9.0]));
    let avg = ok(pool(PoolKind::Avg, &[2, 2], &[1, 1], &[(0, 0); 2], &[1, 1]), &[&x]);
    assert_eq!(avg.data, vec![3.0, 4.0, 6.0, 7.0]);
    let y = f64t(&[1, 5], &[1.0, 5.0, 2.0, 4.0, 3.0]);
    let dilated = ok(pool(PoolKind::Max, &[2], &[1], &[(0, 0)], &[2]), &[&y]);
    assert_eq!((dilated.shape, dilated.data), (vec![1, 3], vec![2.0, 5.0, 3.0]));
    // Integer max pooling stays integer.
    assert_eq!(ok(pool(PoolKind::Max, &[2], &[2], &[(0, 0)], &[1]), &[&i64t(&[1, 4], &[1.0, 2.0, 3.0, 4.0])]).dtype, Dtype::I64);
}

fn reduce(kind: ReduceKind, axes: &[usize], keepdim: bool, x: &Tensor) -> Tensor {
    ok(Op::Reduce { kind, axes: axes.to_vec(), keepdim }, &[x])
}

#[test]
fn reductions_over_axes() {
    let x = f64t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(reduce(ReduceKind::Sum, &[0], false, &x).data, vec![5.0, 7.0, 9.0]);
    let rows = reduce(ReduceKind::Sum, &[1], true, &x);
    assert_eq!((rows.shape, rows.data), (vec![2, 1], vec![6.0, 15.0]));
    let all = reduce(ReduceKind::Sum, &[0, 1], false, &x);
    assert_eq!((all.shape, all.data), (vec![], vec![21.0]));
    assert_eq!(reduce(ReduceKind::Mean, &[1], false, &x).data, vec![2.0, 5.0]);
    assert_eq!(reduce(ReduceKind::Max, &[0], false, &x).data, vec![4.0, 5.0, 6.0]);
    assert_eq!(reduce(ReduceKind::Min, &[1], false, &x).data, vec![1.0, 4.0]);
    assert_eq!(reduce(ReduceKind::Prod, &[1], false, &x).data, vec![6.0, 120.0]);
    // An empty axis list reduces nothing.
    assert_eq!(reduce(ReduceKind::Sum, &[], false, &x), x);
    // Three dims, reducing the outer two.
    let y = f64t(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    assert_eq!(reduce(ReduceKind::Sum, &[0, 1], false, &y).data, vec![16.0, 20.0]);
    assert!(reduce(ReduceKind::Max, &[0], false, &f64t(&[2], &[1.0, f64::NAN])).data[0].is_nan());
    // Mean of integers is a float.
    assert_eq!(reduce(ReduceKind::Mean, &[0], false, &i64t(&[2], &[1.0, 2.0])).data, vec![1.5]);
    assert_eq!(reduce(ReduceKind::Sum, &[1], false, &f64t(&[2, 0], &[])).data, vec![0.0, 0.0]);
    assert_eq!(
        err(Op::Reduce { kind: ReduceKind::Max, axes: vec![1], keepdim: false }, &[&f64t(&[2, 0], &[])]),
        "reduce_max over an empty dimension of [2, 0] has no identity"
    );
}

#[test]
fn argmax_takes_the_first_of_ties() {
    let x = f64t(&[2, 3], &[1.0, 3.0, 3.0, 2.0, 2.0, 1.0]);
    let arg = |kind, axis| ok(Op::ArgReduce { kind, axis, keepdim: false }, &[&x]);
    let rows = arg(ArgKind::ArgMax, Some(1));
    assert_eq!((rows.dtype, rows.shape, rows.data), (Dtype::I64, vec![2], vec![1.0, 0.0]));
    assert_eq!(arg(ArgKind::ArgMax, Some(0)).data, vec![1.0, 0.0, 0.0]);
    assert_eq!(arg(ArgKind::ArgMin, Some(1)).data, vec![0.0, 2.0]);
    let flat = arg(ArgKind::ArgMax, None);
    assert_eq!((flat.shape, flat.data), (vec![], vec![1.0]));
    assert_eq!(arg(ArgKind::ArgMin, None).data, vec![0.0]);
    let kept = ok(Op::ArgReduce { kind: ArgKind::ArgMax, axis: None, keepdim: true }, &[&x]);
    assert_eq!(kept.shape, vec![1, 1]);
    let nan = f64t(&[4], &[1.0, f64::NAN, 5.0, f64::NAN]);
    assert_eq!(ok(Op::ArgReduce { kind: ArgKind::ArgMax, axis: Some(0), keepdim: false }, &[&nan]).data, vec![1.0]);
    assert_eq!(
        err(Op::ArgReduce { kind: ArgKind::ArgMax, axis: None, keepdim: false }, &[&f64t(&[0], &[])]),
        "argmax of an empty sequence (shape [0])"
    );
}

#[test]
fn variance_with_correction() {
    let x = f64t(&[2, 4], &[1.0, 2.0, 3.0, 4.0, 2.0, 2.0, 2.0, 2.0]);
    let var = |correction| ok(Op::Variance { axes: vec![1], keepdim: false, correction }, &[&x]).data;
    // Mean 2.5, squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5.
    close(&var(1.0), &[5.0 / 3.0, 0.0]);
    close(&var(0.0), &[1.25, 0.0]);
    let all = ok(Op::Variance { axes: vec![0, 1], keepdim: true, correction: 0.0 }, &[&x]);
    // Mean 2.25; squares 1.5625 + 0.0625 + 0.5625 + 3.0625 + 4 * 0.0625 = 5.5.
    assert_eq!(all.shape, vec![1, 1]);
    close(&all.data, &[5.5 / 8.0]);
}

#[test]
fn softmax_rows_sum_to_one() {
    let x = f64t(&[2, 3], &[-1.0, 0.0, 1.0, 1000.0, 1000.0, 1000.0]);
    let out = ok(Op::Softmax { axis: 1 }, &[&x]);
    close(&out.data[..1], &[0.09003057317038046]);
    close(&out.data[3..], &[1.0 / 3.0; 3]);
    for row in out.data.chunks(3) {
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-15);
    }
    let cols = ok(Op::Softmax { axis: 0 }, &[&f64t(&[2, 2], &[0.0, 5.0, 2f64.ln(), 5.0])]);
    close(&cols.data, &[1.0 / 3.0, 0.5, 2.0 / 3.0, 0.5]);
}

#[test]
fn reshape_transpose_broadcast_and_identity() {
    let x = f64t(&[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let r = ok(Op::Reshape { shape: Shape::known(&[3, 2]) }, &[&x]);
    assert_eq!((r.shape, r.data.clone()), (vec![3, 2], x.data.clone()));
    let tr = ok(Op::Transpose { perm: vec![1, 0] }, &[&x]);
    assert_eq!((tr.shape, tr.data), (vec![3, 2], vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]));
    // [2, 3, 4] with perm [2, 0, 1]: out[k][i][j] = in[i][j][k].
    let y = f64t(&[2, 3, 4], &(0..24).map(f64::from).collect::<Vec<_>>());
    let ty = ok(Op::Transpose { perm: vec![2, 0, 1] }, &[&y]);
    assert_eq!(ty.shape, vec![4, 2, 3]);
    assert_eq!(&ty.data[..7], &[0.0, 4.0, 8.0, 12.0, 16.0, 20.0, 1.0]);
    let b = ok(Op::BroadcastTo { shape: Shape::known(&[2, 3]) }, &[&f64t(&[3], &[1.0, 2.0, 3.0])]);
    assert_eq!(b.data, vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    assert_eq!(ok(Op::StopGradient, &[&x]), x);
}

fn range(start: Option<i64>, stop: Option<i64>, step: i64) -> SliceRange {
    SliceRange { start, stop, step }
}

#[test]
fn slices_with_negative_steps() {
    let x = f64t(&[5], &[0.0, 1.0, 2.0, 3.0, 4.0]);
    let s = |r| ok(Op::Slice { ranges: vec![r] }, &[&x]).data;
    assert_eq!(s(range(None, None, -2)), vec![4.0, 2.0, 0.0]);
    assert_eq!(s(range(Some(-2), None, 1)), vec![3.0, 4.0]);
    assert_eq!(s(range(Some(3), Some(0), -1)), vec![3.0, 2.0, 1.0]);
    assert_eq!(s(range(Some(3), Some(1), 1)), Vec::<f64>::new());
    // x2[1:, ::-1] on a [3, 3] tensor.
    let x2 = f64t(&[3, 3], &(0..9).map(f64::from).collect::<Vec<_>>());
    let out = ok(Op::Slice { ranges: vec![range(Some(1), None, 1), range(None, None, -1)] }, &[&x2]);
    assert_eq!((out.shape, out.data), (vec![2, 3], vec![5.0, 4.0, 3.0, 8.0, 7.0, 6.0]));
}

#[test]
fn concat_along_an_inner_axis() {
    let a = f64t(&[2, 1], &[1.0, 2.0]);
    let b = f64t(&[2, 2], &[3.0, 4.0, 5.0, 6.0]);
    let out = ok(Op::Concat { axis: 1 }, &[&a, &b, &a]);
    assert_eq!((out.shape, out.data), (vec![2, 4], vec![1.0, 3.0, 4.0, 1.0, 2.0, 5.0, 6.0, 2.0]));
    let rows = ok(Op::Concat { axis: 0 }, &[&b, &b]);
    assert_eq!(rows.shape, vec![4, 2]);
}

#[test]
fn gather_with_negative_indices() {
    let data = f64t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let rows = ok(Op::Gather { axis: 0 }, &[&data, &i64t(&[3], &[2.0, -1.0, 0.0])]);
    assert_eq!((rows.shape, rows.data), (vec![3, 2], vec![5.0, 6.0, 5.0, 6.0, 1.0, 2.0]));
    // Along axis 1 with [1, 2] indices: the result is [3, 1, 2].
    let cols = ok(Op::Gather { axis: 1 }, &[&data, &i64t(&[1, 2], &[1.0, 0.0])]);
    assert_eq!((cols.shape, cols.data), (vec![3, 1, 2], vec![2.0, 1.0, 4.0, 3.0, 6.0, 5.0]));
    assert_eq!(
        err(Op::Gather { axis: 0 }, &[&data, &i64t(&[1], &[3.0])]),
        "gather index 3 is out of range for axis 0 of size 3"
    );
    assert_eq!(
        err(Op::Gather { axis: 0 }, &[&data, &i64t(&[1], &[-4.0])]),
        "gather index -4 is out of range for axis 0 of size 3"
    );
}

#[test]
fn iota_and_pad() {
    let iota = |axis| ok(Op::Iota { shape: Shape::known(&[2, 3]), axis, dtype: Dtype::I32 }, &[]);
    assert_eq!(iota(1).data, vec![0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
    assert_eq!(iota(0).data, vec![0.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    assert_eq!(iota(0).dtype, Dtype::I32);
    let x = f64t(&[1, 2], &[1.0, 2.0]);
    let out = ok(Op::Pad { pads: vec![(1, 0), (0, 2)], value: 9.0 }, &[&x]);
    assert_eq!((out.shape, out.data), (vec![2, 4], vec![9.0, 9.0, 9.0, 9.0, 1.0, 2.0, 9.0, 9.0]));
}

#[test]
fn constants_inputs_and_inconsistent_types() {
    let c = f64t(&[2], &[1.0, 2.0]);
    let ty = TensorType::new(Dtype::F64, Shape::known(&[2]));
    let out = eval_op(&Op::Constant(ConstId(0)), &[], &ty, &[Constant::from(&c)]).unwrap();
    assert_eq!(out, c);
    let input = eval_op(&Op::Input, &[], &ty, &[]).unwrap_err();
    assert_eq!(input.kind, ErrorKind::Internal);
    assert_eq!(input.message, "eval_op: input values are fed by the caller, not evaluated");
    // A node type that disagrees with the arguments is refused before any kernel runs.
    let wrong = eval_op(&Op::Unary(UnaryOp::Neg), &[&c], &TensorType::new(Dtype::F64, Shape::known(&[3])), &[]).unwrap_err();
    assert_eq!(wrong.kind, ErrorKind::Internal);
    assert_eq!(wrong.message, "eval_op: neg of (f64[2]) gives f64[2], but the node says f64[3]");
}

/// `y = x @ w + c` and `total = sum(y)`, f32, with a named input and parameter.
fn tiny_graph() -> Graph {
    let f32s = |dims: &[u64]| TensorType::new(Dtype::F32, Shape::known(dims));
    let mut g = Graph::new("tiny");
    let x = g.push(Op::Input, vec![], f32s(&[2, 2]));
    g.nodes[x.index()].name = Some("x".into());
    let w = g.push(Op::Param, vec![], f32s(&[2, 2]));
    g.nodes[w.index()].name = Some("w".into());
    let c = g.add_const(t(Dtype::F32, &[2], &[0.5, -1.0]));
    let m = g.push(Op::MatMul, vec![x, w], f32s(&[2, 2]));
    let y = g.push(Op::Binary(BinaryOp::Add), vec![m, c], f32s(&[2, 2]));
    let total = g.push(Op::Reduce { kind: ReduceKind::Sum, axes: vec![0, 1], keepdim: false }, vec![y], f32s(&[]));
    g.outputs = vec![Output { name: "y".into(), value: y, loss: false }, Output { name: "total".into(), value: total, loss: false }];
    verify(&g).unwrap();
    g
}

fn feeds(entries: &[(&str, Tensor)]) -> BTreeMap<String, Tensor> {
    entries.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

#[test]
fn run_evaluates_a_whole_graph() {
    let g = tiny_graph();
    let x = t(Dtype::F32, &[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let w = t(Dtype::F32, &[2, 2], &[1.0, 0.0, 0.0, 2.0]);
    let out = run(&g, &feeds(&[("x", x.clone()), ("w", w.clone()), ("unused", w.clone())])).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0], ("y".to_string(), t(Dtype::F32, &[2, 2], &[1.5, 3.0, 3.5, 7.0])));
    assert_eq!(out[1], ("total".to_string(), t(Dtype::F32, &[], &[15.0])));
    // An f64 feed for an f32 input is rounded to f32 on the way in.
    let x64 = f64t(&[2, 2], &[1.0 + 1e-12, 2.0, 3.0, 4.0]);
    let out64 = run(&g, &feeds(&[("x", x64), ("w", w)])).unwrap();
    assert_eq!(out64[0].1.data, vec![1.5, 3.0, 3.5, 7.0]);
}

#[test]
fn run_reports_bad_feeds() {
    let g = tiny_graph();
    let good = t(Dtype::F32, &[2, 2], &[1.0; 4]);
    let fail = |f: BTreeMap<String, Tensor>| {
        let e = run(&g, &f).unwrap_err();
        assert_eq!(e.kind, ErrorKind::User);
        e.to_string()
    };
    assert_eq!(fail(feeds(&[("x", good.clone())])), "no value was given for parameter `w` (f32[2, 2])");
    assert_eq!(
        fail(feeds(&[("x", t(Dtype::F32, &[2, 3], &[0.0; 6])), ("w", good.clone())])),
        "input `x` is declared f32[2, 2] but was given a tensor of shape [2, 3]"
    );
    assert_eq!(
        fail(feeds(&[("x", i64t(&[2, 2], &[0.0; 4])), ("w", good.clone())])),
        "input `x` is declared f32[2, 2] but was given i64 values"
    );
    let broken = Tensor { dtype: Dtype::F32, shape: vec![2, 2], data: vec![0.0; 3] };
    assert_eq!(
        fail(feeds(&[("x", broken), ("w", good)])),
        "the value for input `x` has shape [2, 2] but holds 3 elements"
    );
}

#[test]
fn run_refuses_symbolic_dims_and_names_failing_nodes() {
    let mut g = Graph::new("sym");
    let x = g.push(Op::Input, vec![], TensorType::new(Dtype::F32, Shape(vec![Dim::Sym("B".into()), Dim::Known(4)])));
    g.nodes[x.index()].name = Some("x".into());
    g.outputs = vec![Output { name: "x".into(), value: x, loss: false }];
    let e = run(&g, &BTreeMap::new()).unwrap_err();
    assert_eq!(e.to_string(), "graph has symbolic dimension B; bind it first");

    let mut g = Graph::new("gather");
    let table = g.add_const(f64t(&[3], &[1.0, 2.0, 3.0]));
    let idx = g.push(Op::Input, vec![], TensorType::new(Dtype::I64, Shape::known(&[1])));
    g.nodes[idx.index()].name = Some("idx".into());
    let out = g.push(Op::Gather { axis: 0 }, vec![table, idx], TensorType::new(Dtype::F64, Shape::known(&[1])));
    g.outputs = vec![Output { name: "out".into(), value: out, loss: false }];
    verify(&g).unwrap();
    let e = run(&g, &feeds(&[("idx", i64t(&[1], &[5.0]))])).unwrap_err();
    assert_eq!(e.to_string(), "%2 = gather: gather index 5 is out of range for axis 0 of size 3");
    let fine = run(&g, &feeds(&[("idx", i64t(&[1], &[-1.0]))])).unwrap();
    assert_eq!(fine[0].1.data, vec![3.0]);
}

#[test]
fn f32_graphs_round_every_result_to_f32() {
    let f32s = TensorType::new(Dtype::F32, Shape::known(&[2]));
    let mut g = Graph::new("round");
    let a = g.push(Op::Input, vec![], f32s.clone());
    g.nodes[a.index()].name = Some("a".into());
    let b = g.push(Op::Input, vec![], f32s.clone());
    g.nodes[b.index()].name = Some("b".into());
    let sum = g.push(Op::Binary(BinaryOp::Add), vec![a, b], f32s.clone());
    let third = g.push(Op::Binary(BinaryOp::Div), vec![a, b], f32s);
    g.outputs = vec![Output { name: "sum".into(), value: sum, loss: false }, Output { name: "third".into(), value: third, loss: false }];
    let av = t(Dtype::F32, &[2], &[1.0, 1.0]);
    let bv = t(Dtype::F32, &[2], &[1e-8, 3.0]);
    let out = run(&g, &feeds(&[("a", av), ("b", bv)])).unwrap();
    // In f64, 1 + 1e-8 != 1; in f32 it rounds back to 1.
    assert_eq!(out[0].1.data[0], 1.0);
    assert_eq!(out[1].1.data[1], (1.0f32 / 3.0f32) as f64);
    assert_ne!(out[1].1.data[1], 1.0 / 3.0);
}

#[test]
fn intermediates_are_freed_after_their_last_use() {
    let g = tiny_graph();
    // x, w and c die at their single use; the matmul dies at the add; y and total are outputs.
    assert_eq!(last_uses(&g).unwrap(), vec![Some(3), Some(3), Some(4), Some(4), None, None]);
}

fn ints(dtype: Dtype, data: &[f64]) -> Tensor {
    t(dtype, &[data.len() as u64], data)
}

/// Integer arithmetic wraps in the result type, as C's fixed-width integers (and
/// NumPy's) do: u8 200 + 100 is 44, i8 100 + 100 is -56.
#[test]
fn narrow_integer_arithmetic_wraps() {
    let (a, b) = (ints(Dtype::U8, &[200.0, 3.0, 0.0, 255.0]), ints(Dtype::U8, &[100.0, 5.0, 1.0, 255.0]));
    assert_eq!(binary(BinaryOp::Add, &a, &b).data, vec![44.0, 8.0, 1.0, 254.0]);
    assert_eq!(binary(BinaryOp::Sub, &a, &b).data, vec![100.0, 254.0, 255.0, 0.0]);
    assert_eq!(binary(BinaryOp::Mul, &a, &b).data, vec![32.0, 15.0, 0.0, 1.0]);
    assert_eq!(unary(UnaryOp::Neg, &a), vec![56.0, 253.0, 0.0, 1.0]);
    let i = ints(Dtype::I8, &[100.0, -128.0, -5.0, 127.0]);
    assert_eq!(binary(BinaryOp::Add, &i, &i).data, vec![-56.0, 0.0, -10.0, -2.0]);
    assert_eq!(unary(UnaryOp::Neg, &i), vec![-100.0, -128.0, 5.0, -127.0]);
    assert_eq!(unary(UnaryOp::Abs, &i), vec![100.0, -128.0, 5.0, 127.0]);
    // u16 * u16 wraps modulo 2^16 (C computes it in uint32_t).
    let w = ints(Dtype::U16, &[65535.0, 300.0]);
    assert_eq!(binary(BinaryOp::Mul, &w, &w).data, vec![1.0, 24464.0]);
    // u32 and i32 products are exact before wrapping (not rounded through an f64).
    let u = ints(Dtype::U32, &[4294967295.0, 123456789.0]);
    assert_eq!(binary(BinaryOp::Mul, &u, &u).data, vec![1.0, (123456789u64 * 123456789 % (1 << 32)) as f64]);
    let s = ints(Dtype::I32, &[2147483647.0, -2147483648.0]);
    assert_eq!(binary(BinaryOp::Add, &s, &ints(Dtype::I32, &[1.0, -1.0])).data, vec![-2147483648.0, 2147483647.0]);
    assert_eq!(binary(BinaryOp::Mul, &s, &s).data, vec![1.0, 0.0]);
    // Powers wrap too: 3^20 modulo 2^8, and (-2)^7 in i8.
    assert_eq!(binary(BinaryOp::Pow, &ints(Dtype::U8, &[3.0]), &ints(Dtype::U8, &[20.0])).data, vec![(3u64.pow(20) % 256) as f64]);
    assert_eq!(binary(BinaryOp::Pow, &ints(Dtype::I8, &[-2.0, -2.0]), &ints(Dtype::I8, &[7.0, 8.0])).data, vec![-128.0, 0.0]);
    // Mixed operands promote as NumPy's: u8 and i8 to i16, without wrapping.
    let m = binary(BinaryOp::Add, &ints(Dtype::U8, &[255.0]), &ints(Dtype::I8, &[-128.0]));
    assert_eq!((m.dtype, m.data), (Dtype::I16, vec![127.0]));
    // Comparisons, max and min of unsigned values.
    let (p, q) = (ints(Dtype::U32, &[4294967295.0, 7.0]), ints(Dtype::U32, &[0.0, 9.0]));
    assert_eq!(binary(BinaryOp::Gt, &p, &q).data, vec![1.0, 0.0]);
    assert_eq!(binary(BinaryOp::Max, &p, &q).data, vec![4294967295.0, 9.0]);
    assert_eq!(binary(BinaryOp::Min, &p, &q).data, vec![0.0, 7.0]);
}

#[test]
fn integer_division_and_shifts_of_every_width() {
    // Unsigned floor division truncates; by zero it gives 0, as signed division does.
    let (a, b) = (ints(Dtype::U8, &[7.0, 255.0, 9.0]), ints(Dtype::U8, &[2.0, 16.0, 0.0]));
    assert_eq!(binary(BinaryOp::FloorDiv, &a, &b).data, vec![3.0, 15.0, 0.0]);
    // -128 // -1 is 128, which wraps to -128 in i8 (NumPy gives the same).
    let (c, d) = (ints(Dtype::I8, &[-128.0, -7.0]), ints(Dtype::I8, &[-1.0, 2.0]));
    assert_eq!(binary(BinaryOp::FloorDiv, &c, &d).data, vec![-128.0, -4.0]);
    // u64 beyond i64's range divides as unsigned (u64::MAX's f64 image is 2^64).
    let big = ints(Dtype::U64, &[u64::MAX as f64, 1e19]);
    assert_eq!(binary(BinaryOp::FloorDiv, &big, &ints(Dtype::U64, &[2.0, 10.0])).data, vec![(u64::MAX / 2) as f64, 1e18]);
    // Shifts in the type's width: u8 1 << 7 is 128, 1 << 8 gives 0; i8 1 << 7 is -128;
    // right shifts are logical for unsigned types and arithmetic for signed ones.
    let one = ints(Dtype::U8, &[1.0, 1.0, 255.0, 255.0]);
    assert_eq!(binary(BinaryOp::Shl, &one, &ints(Dtype::U8, &[7.0, 8.0, 4.0, 200.0])).data, vec![128.0, 0.0, 240.0, 0.0]);
    assert_eq!(binary(BinaryOp::Shr, &one, &ints(Dtype::U8, &[0.0, 1.0, 4.0, 9.0])).data, vec![1.0, 0.0, 15.0, 0.0]);
    let i = ints(Dtype::I8, &[1.0, -128.0, -128.0, 64.0]);
    assert_eq!(binary(BinaryOp::Shl, &i, &ints(Dtype::I8, &[7.0, 1.0, 0.0, 1.0])).data, vec![-128.0, 0.0, -128.0, -128.0]);
    assert_eq!(binary(BinaryOp::Shr, &i, &ints(Dtype::I8, &[1.0, 7.0, 8.0, -1.0])).data, vec![0.0, -1.0, -1.0, 0.0]);
    let u = ints(Dtype::U64, &[u64::MAX as f64, 1.0]);
    assert_eq!(binary(BinaryOp::Shr, &u, &ints(Dtype::U64, &[60.0, 64.0])).data, vec![15.0, 0.0]);
    assert_eq!(binary(BinaryOp::Shl, &ints(Dtype::U64, &[1.0]), &ints(Dtype::U64, &[63.0])).data, vec![(1u64 << 63) as f64]);
}

/// `and`, `or`, `xor` and `not` are bitwise on integers, in the operand width (NumPy's
/// `&`, `|`, `^`, `~`), and stay logical on bools.
#[test]
fn logical_ops_are_bitwise_on_integers() {
    let (a, b) = (ints(Dtype::U8, &[12.0, 255.0, 0.0]), ints(Dtype::U8, &[10.0, 1.0, 0.0]));
    assert_eq!(binary(BinaryOp::And, &a, &b).data, vec![8.0, 1.0, 0.0]);
    assert_eq!(binary(BinaryOp::Or, &a, &b).data, vec![14.0, 255.0, 0.0]);
    assert_eq!(binary(BinaryOp::Xor, &a, &b).data, vec![6.0, 254.0, 0.0]);
    assert_eq!(unary(UnaryOp::Not, &a), vec![243.0, 0.0, 255.0]);
    // Two's complement in the signed types: -1 is all ones, ~x is -x - 1.
    let (c, d) = (ints(Dtype::I16, &[-1.0, -32768.0, 5.0]), ints(Dtype::I16, &[1234.0, -1.0, -6.0]));
    assert_eq!(binary(BinaryOp::And, &c, &d).data, vec![1234.0, -32768.0, 0.0]);
    assert_eq!(binary(BinaryOp::Xor, &c, &d).data, vec![-1235.0, 32767.0, -1.0]);
    assert_eq!(unary(UnaryOp::Not, &c), vec![0.0, 32767.0, -6.0]);
    let big = ints(Dtype::U64, &[u64::MAX as f64, (1u64 << 63) as f64]);
    assert_eq!(binary(BinaryOp::And, &big, &ints(Dtype::U64, &[(1u64 << 40) as f64, 3.0])).data, vec![(1u64 << 40) as f64, 0.0]);
    assert_eq!(unary(UnaryOp::Not, &ints(Dtype::U64, &[0.0])), vec![u64::MAX as f64]);
    // Operands of different integer types promote; bools stay logical.
    let mixed = binary(BinaryOp::Or, &ints(Dtype::I8, &[-128.0]), &ints(Dtype::I32, &[256.0]));
    assert_eq!((mixed.dtype, mixed.data), (Dtype::I32, vec![-128.0]));
    let (p, q) = (boolt(&[3], &[1.0, 1.0, 0.0]), boolt(&[3], &[1.0, 0.0, 0.0]));
    assert_eq!(binary(BinaryOp::Xor, &p, &q).data, vec![0.0, 1.0, 0.0]);
    assert_eq!(unary(UnaryOp::Not, &p), vec![0.0, 0.0, 1.0]);
}

#[test]
fn casts_between_integers_wrap_and_floats_saturate() {
    let i = ints(Dtype::I32, &[300.0, -1.0, 65535.0, -129.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::U8 }, &[&i]).data, vec![44.0, 255.0, 255.0, 127.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::I8 }, &[&i]).data, vec![44.0, -1.0, -1.0, 127.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::I16 }, &[&i]).data, vec![300.0, -1.0, -1.0, -129.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::U32 }, &[&i]).data, vec![300.0, 4294967295.0, 65535.0, 4294967167.0]);
    // 64 bits: -1 is u64::MAX, and u64::MAX back is -1 (through the bits, not the f64).
    let m = ok(Op::Cast { to: Dtype::U64 }, &[&i64t(&[1], &[-1.0])]);
    assert_eq!(m.data, vec![u64::MAX as f64]);
    assert_eq!(ok(Op::Cast { to: Dtype::I64 }, &[&m]).data, vec![-1.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::I32 }, &[&i64t(&[1], &[4294967296.0 + 7.0])]).data, vec![7.0]);
    // Floats truncate toward zero and saturate, NaN as 0 (C leaves these undefined).
    let x = f64t(&[6], &[300.5, -3.5, 254.9, f64::NAN, f64::INFINITY, -0.5]);
    assert_eq!(ok(Op::Cast { to: Dtype::U8 }, &[&x]).data, vec![255.0, 0.0, 254.0, 0.0, 255.0, 0.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::I8 }, &[&x]).data, vec![127.0, -3.0, 127.0, 0.0, 127.0, 0.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::U64 }, &[&x]).data, vec![300.0, 0.0, 254.0, 0.0, u64::MAX as f64, 0.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::I32 }, &[&f64t(&[1], &[3e9])]).data, vec![2147483647.0]);
    // Bools are 0 and 1; integers become bools by != 0.
    assert_eq!(ok(Op::Cast { to: Dtype::U16 }, &[&boolt(&[2], &[1.0, 0.0])]).data, vec![1.0, 0.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::Bool }, &[&ints(Dtype::U8, &[0.0, 200.0])]).data, vec![0.0, 1.0]);
}

#[test]
fn integer_sums_products_and_matmuls_wrap() {
    let x = t(Dtype::U8, &[2, 3], &[200.0, 100.0, 1.0, 16.0, 16.0, 2.0]);
    assert_eq!(reduce(ReduceKind::Sum, &[1], false, &x).data, vec![45.0, 34.0]);
    assert_eq!(reduce(ReduceKind::Prod, &[1], false, &x).data, vec![32.0, 0.0]);
    assert_eq!(reduce(ReduceKind::Max, &[1], false, &x).data, vec![200.0, 16.0]);
    let p = ints(Dtype::U32, &[4294967295.0, 4294967295.0, 3.0]);
    assert_eq!(reduce(ReduceKind::Prod, &[0], false, &p).data, vec![3.0]);
    // [1, 3] x [3, 1] of u32: 4294967295^2 + 1 + 2*2^31 = 2^64 - 2^33 + 2^32 + 2 wraps.
    let a = t(Dtype::U32, &[1, 3], &[4294967295.0, 1.0, 2.0]);
    let b = t(Dtype::U32, &[3, 1], &[4294967295.0, 1.0, 2147483648.0]);
    assert_eq!(ok(Op::MatMul, &[&a, &b]).data, vec![2.0]);
    let c = t(Dtype::I8, &[1, 2], &[100.0, 100.0]);
    assert_eq!(ok(Op::MatMul, &[&c, &t(Dtype::I8, &[2, 1], &[2.0, 1.0])]).data, vec![44.0]);
}

/// An integer feed for a wider integer input that holds all its values is taken (u8
/// data for an i32 input, as data files gave before they kept u8); one that may not
/// fit is refused.
#[test]
fn integer_feeds_widen_only_when_every_value_fits() {
    let mut g = Graph::new("widen");
    let x = g.push(Op::Input, vec![], TensorType::new(Dtype::I32, Shape::known(&[2])));
    g.nodes[x.index()].name = Some("x".into());
    g.outputs = vec![Output { name: "y".into(), value: x, loss: false }];
    let out = run(&g, &feeds(&[("x", ints(Dtype::U8, &[255.0, 0.0]))])).expect("u8 into i32");
    assert_eq!((out[0].1.dtype, &out[0].1.data), (Dtype::I32, &vec![255.0, 0.0]));
    assert_eq!(run(&g, &feeds(&[("x", ints(Dtype::U32, &[1.0, 2.0]))])).unwrap_err().to_string(), "input `x` is declared i32[2] but was given u32 values");
    assert_eq!(run(&g, &feeds(&[("x", boolt(&[2], &[1.0, 0.0]))])).unwrap_err().to_string(), "input `x` is declared i32[2] but was given bool values");
}

/// The narrow floats and the 4- and 2-bit integers, against ONNX's reference (its
/// node tests' values: test_cast_FLOAT_to_FLOAT8E4M3FN, _no_saturate_, _to_INT4, ...).
#[test]
fn casts_to_the_narrow_types_are_onnxs() {
    let x = f64t(&[8], &[0.4789254665374756, 0.8191054463386536, 1e6, 1e-7, f64::NAN, f64::INFINITY, -1e-7, -1e6]);
    let nan = f64::NAN;
    // Without saturation (the IR's cast; ONNX's saturate=0): NaN past the largest value,
    // e5m2's infinity; no negative zero in the fnuz types.
    let cases: [(Dtype, [f64; 8]); 4] = [
        (Dtype::F8E4M3Fn, [0.46875, 0.8125, nan, 0.0, nan, nan, -0.0, nan]),
        (Dtype::F8E4M3Fnuz, [0.46875, 0.8125, nan, 0.0, nan, nan, 0.0, nan]),
        (Dtype::F8E5M2, [0.5, 0.875, f64::INFINITY, 0.0, nan, f64::INFINITY, -0.0, f64::NEG_INFINITY]),
        (Dtype::F8E5M2Fnuz, [0.5, 0.875, nan, 0.0, nan, nan, 0.0, nan]),
    ];
    for (d, want) in cases {
        let got = ok(Op::Cast { to: d }, &[&x]);
        assert_eq!(got.dtype, d);
        for (g, w) in got.data.iter().zip(want) {
            assert!(g.to_bits() == w.to_bits() || g.is_nan() && w.is_nan(), "{d}: {:?}, expected {want:?}", got.data);
        }
    }
    // float4 saturates (it has no infinity or NaN), ties to even.
    let f4 = ok(Op::Cast { to: Dtype::F4E2M1 }, &[&f64t(&[6], &[0.25, -3.5, 9.0, 1.05, f64::INFINITY, 0.75])]);
    assert_eq!(f4.data, vec![0.0, -4.0, 6.0, 1.0, 6.0, 1.0]);
    // Floats to the 4- and 2-bit integers truncate and wrap (ml_dtypes' conversion).
    let v = f64t(&[7], &[-9.0, -8.0, 7.0, 8.0, 15.5, -0.5, f64::NAN]);
    assert_eq!(ok(Op::Cast { to: Dtype::I4 }, &[&v]).data, vec![7.0, -8.0, 7.0, -8.0, -1.0, 0.0, 0.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::U4 }, &[&v]).data, vec![7.0, 8.0, 7.0, 8.0, 15.0, 0.0, 0.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::I2 }, &[&v]).data, vec![-1.0, 0.0, -1.0, 0.0, -1.0, 0.0, 0.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::U2 }, &[&v]).data, vec![3.0, 0.0, 3.0, 0.0, 3.0, 0.0, 0.0]);
    // Integers to them wrap through the bits, and back widen exactly.
    let i = ints(Dtype::I32, &[-9.0, 17.0, 3.0]);
    let i4 = ok(Op::Cast { to: Dtype::I4 }, &[&i]);
    assert_eq!(i4.data, vec![7.0, 1.0, 3.0]);
    assert_eq!(ok(Op::Cast { to: Dtype::I8 }, &[&i4]).data, vec![7.0, 1.0, 3.0]);
    // Arithmetic in i4 wraps to 4 bits, in f8e4m3fn rounds each result.
    let a = t(Dtype::I4, &[3], &[7.0, -8.0, 5.0]);
    let b = t(Dtype::I4, &[3], &[1.0, -1.0, 5.0]);
    assert_eq!(binary(BinaryOp::Add, &a, &b).data, vec![-8.0, 7.0, -6.0]);
    assert_eq!(binary(BinaryOp::Mul, &a, &b).data, vec![7.0, -8.0, -7.0]);
    let p = t(Dtype::F8E4M3Fn, &[2], &[448.0, 0.5]);
    let q = t(Dtype::F8E4M3Fn, &[2], &[32.0, 0.0625]);
    let s = binary(BinaryOp::Add, &p, &q);
    assert!(s.data[0].is_nan(), "448 + 32 is past e4m3fn's largest value: {:?}", s.data);
    assert_eq!(s.data[1], 0.5625);
}

/// A .npy holds a narrow float as its codes and a 4- or 2-bit integer as int8/uint8
/// values (`data::npy_descr`): a u8 feed for a float8 input is its codes, an i8 feed for
/// an i4 input is taken when every value fits, and refused when one does not.
#[test]
fn narrow_inputs_take_their_npy_stand_ins() {
    let input = |d: Dtype| {
        let mut g = Graph::new("narrow");
        let x = g.push(Op::Input, vec![], TensorType::new(d, Shape::known(&[2])));
        g.nodes[x.index()].name = Some("x".into());
        g.outputs = vec![Output { name: "y".into(), value: x, loss: false }];
        g
    };
    let f8 = run(&input(Dtype::F8E4M3Fn), &feeds(&[("x", ints(Dtype::U8, &[0x7e as f64, 0xb8 as f64]))])).expect("codes");
    assert_eq!((f8[0].1.dtype, &f8[0].1.data), (Dtype::F8E4M3Fn, &vec![448.0, -1.0]));
    let g = input(Dtype::I4);
    let i4 = run(&g, &feeds(&[("x", ints(Dtype::I8, &[-8.0, 7.0]))])).expect("fits");
    assert_eq!((i4[0].1.dtype, &i4[0].1.data), (Dtype::I4, &vec![-8.0, 7.0]));
    assert_eq!(run(&g, &feeds(&[("x", ints(Dtype::I8, &[8.0, 0.0]))])).unwrap_err().to_string(), "input `x` is declared i4[2] but was given i8 values");
}
