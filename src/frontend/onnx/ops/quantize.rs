//! Quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear, and the
//! integer and quantized products MatMulInteger, ConvInteger, QLinearMatMul and
//! QLinearConv, as compositions of casts, arithmetic, matrix products and convolutions,
//! computed as ONNX's reference computes them:
//! - quantizing divides in the operands' type (or `precision`'s), rounds half to even,
//!   adds the zero point and clamps to the type's range (a float8 type saturates as
//!   Cast does, float4 adds the zero point and converts);
//! - dequantizing subtracts the zero point and multiplies by the scale in f32;
//! - integer products are exact: matrix products in i32 (as ONNX's are), convolutions
//!   in f64 (exact for every 8- and 16-bit operand: mithrilc's integer convolutions
//!   have no kernels), then i32;
//! - the quantized products rescale the exact product by (scale_a scale_b / scale_y),
//!   computed in the scales' type, in f64 (NumPy's type for i32 times a float).
//!
//! A scale or zero point is a scalar, a vector along `axis` (per axis), or, with
//! `block_size`, a tensor of the input's rank whose `axis` counts blocks ([`along`]).

use super::elementwise::{round_half_even, saturating_cast};
use super::nn::convolution;
use super::Cx;
use crate::frontend::onnx::node::{invalid, unsupported, Fail, Node, Out};
use crate::frontend::onnx::tensor;
use crate::ir::{BinaryOp, Dim, Dtype, Op, ReduceKind, Shape, SliceRange, ValueId};

type Result<T> = std::result::Result<T, Fail>;

/// Scale or zero point `v` as it applies to a tensor of `shape`: a scalar (or a single
/// element) as a scalar; a vector along `axis` (ONNX's, negative from the end: read only
/// here, a scalar's default axis 1 may lie past a vector's rank); with `block`
/// (`block_size` > 0), a tensor of the same rank whose `axis` has one element per block
/// of `block` elements, each repeated over its block (the last block may be short).
fn along(cx: &mut Cx, v: ValueId, shape: &Shape, axis: i64, block: u64) -> Result<ValueId> {
    let vs = cx.b.shape(v);
    if vs.rank() == 0 {
        return Ok(v);
    }
    if vs.numel() == Some(1) {
        return Ok(cx.b.reshape(v, Shape::scalar())?);
    }
    let axis = super::axis(axis, shape.rank())?;
    if block == 0 {
        if vs.rank() != 1 {
            return invalid(format!("a scale or zero point of shape {vs} is neither a scalar nor a vector along axis {axis} of {shape}"));
        }
        let mut dims = vec![Dim::Known(1); shape.rank()];
        dims[axis] = vs.0[0].clone();
        return Ok(cx.b.reshape(v, Shape(dims))?);
    }
    if vs.rank() != shape.rank() {
        return invalid(format!("a blocked scale or zero point of shape {vs} has not the rank of {shape}"));
    }
    let (Some(blocks), Some(len)) = (vs.0[axis].known(), shape.0[axis].known()) else {
        return unsupported(format!("blocked quantization along a symbolic axis ({vs} for {shape})"));
    };
    if blocks != len.div_ceil(block) {
        return invalid(format!("{blocks} blocks of {block} along axis {axis} do not cover {len} elements"));
    }
    // [.., blocks, 1, ..] broadcast to [.., blocks, block, ..], merged, cut to len.
    let mut one = vs.0.clone();
    one.insert(axis + 1, Dim::Known(1));
    let r = cx.b.reshape(v, Shape(one.clone()))?;
    one[axis + 1] = Dim::Known(block);
    let spread = cx.b.broadcast_to(r, Shape(one))?;
    let mut merged = vs.0.clone();
    merged[axis] = Dim::Known(blocks * block);
    let m = cx.b.reshape(spread, Shape(merged))?;
    if blocks * block == len {
        return Ok(m);
    }
    let mut ranges = vec![SliceRange { start: None, stop: None, step: 1 }; shape.rank()];
    ranges[axis].stop = Some(len as i64);
    Ok(cx.b.op(Op::Slice { ranges }, vec![m])?)
}

/// The attributes every QuantizeLinear and DequantizeLinear form shares: the axis
/// (default 1) and the block size (default 0: per tensor or per axis).
fn axis_and_block(node: &Node) -> Result<(i64, u64)> {
    let ax = node.int("axis", 1)?;
    let block = node.int("block_size", 0)?;
    if block < 0 {
        return invalid(format!("block_size {block} is negative"));
    }
    Ok((ax, block as u64))
}

/// The element type `output_dtype` names, if the attribute is there and not 0.
fn output_dtype(node: &Node) -> Result<Option<Dtype>> {
    match node.int("output_dtype", 0)? {
        0 => Ok(None),
        code => tensor::dtype(code as i32).map(Some).or_else(unsupported),
    }
}

/// `x` cast to `to` (nothing when it is of that type already).
fn cast(cx: &mut Cx, x: ValueId, to: Dtype) -> Result<ValueId> {
    Ok(if cx.b.dtype(x) == to { x } else { cx.b.cast(x, to)? })
}

/// `op(a, b)` with `b` cast to `a`'s type.
fn with(cx: &mut Cx, op: BinaryOp, a: ValueId, b: ValueId) -> Result<ValueId> {
    let b = cast(cx, b, cx.b.dtype(a))?;
    Ok(cx.b.binary(op, a, b)?)
}

/// `x` (a float of integer values) clamped to integer type `to`'s range and cast to it.
fn clamp_to(cx: &mut Cx, x: ValueId, to: Dtype) -> Result<ValueId> {
    let Some((lo, hi)) = to.int_range() else { return invalid(format!("{to} is not an integer type")) };
    let d = cx.b.dtype(x);
    let (lo, hi) = (cx.b.scalar(d, lo), cx.b.scalar(d, hi));
    let y = cx.b.binary(BinaryOp::Max, x, lo)?;
    let y = cx.b.binary(BinaryOp::Min, y, hi)?;
    Ok(cx.b.cast(y, to)?)
}

/// Integer `x` rounded half to even and clamped to `to` (float `x` of `to`'s values).
fn requantize(cx: &mut Cx, x: ValueId, zero_point: Option<ValueId>, to: Dtype) -> Result<ValueId> {
    let r = round_half_even(cx, x)?;
    let r = match zero_point {
        Some(z) => with(cx, BinaryOp::Add, r, z)?,
        None => r,
    };
    clamp_to(cx, r, to)
}

/// `QuantizeLinear` (opsets 10 to 25): y = saturate(round(x / scale) + zero_point),
/// per tensor, per axis or blocked, to the zero point's type (else `output_dtype`'s,
/// else u8).
pub fn quantize_linear(cx: &mut Cx, node: &Node) -> Out {
    let (x, scale, zp) = (node.input(0)?, node.input(1)?, node.opt(2));
    let (ax, block) = axis_and_block(node)?;
    let to = match (zp, output_dtype(node)?) {
        (Some(z), Some(d)) if cx.b.dtype(z) != d => return invalid(format!("output_dtype {d} is not the zero point's type {}", cx.b.dtype(z))),
        (Some(z), _) => cx.b.dtype(z),
        (None, Some(d)) => d,
        (None, None) => Dtype::U8,
    };
    if !(to.is_narrow_float() || to.is_int() && to.bits() <= 16) {
        return invalid(format!("QuantizeLinear to {to}, which is not a quantized type"));
    }
    // x / scale in `precision`'s type if given, else in the operands' common type.
    let ct = match node.int("precision", 0)? {
        0 => Dtype::promote(cx.b.dtype(x), cx.b.dtype(scale)),
        code => tensor::dtype(code as i32).or_else(unsupported)?,
    };
    let shape = cx.b.shape(x);
    let s = along(cx, scale, &shape, ax, block)?;
    let (xc, sc) = (cast(cx, x, ct)?, cast(cx, s, ct)?);
    let q = cx.b.binary(BinaryOp::Div, xc, sc)?;
    let z = zp.map(|z| along(cx, z, &shape, ax, block)).transpose()?;
    let y = if to.is_int() {
        // Rounded and clamped in f32 at least (f16 holds neither 65535 nor every sum).
        let q = if matches!(ct, Dtype::F64) { q } else { cast(cx, q, Dtype::F32)? };
        requantize(cx, q, z, to)?
    } else if to == Dtype::F4E2M1 {
        let q = match z {
            Some(z) => with(cx, BinaryOp::Add, q, z)?,
            None => q,
        };
        cx.b.cast(q, to)?
    } else if node.int("saturate", 1)? != 0 {
        saturating_cast(cx, q, to)?
    } else {
        cx.b.cast(q, to)?
    };
    Ok(vec![y])
}

/// `DequantizeLinear` (opsets 10 to 25): y = (x - zero_point) scale in f32, to the
/// scale's type (or `output_dtype`'s). A float8 or float4 input has no zero point to
/// subtract (ONNX's is zero).
pub fn dequantize_linear(cx: &mut Cx, node: &Node) -> Out {
    let (x, scale, zp) = (node.input(0)?, node.input(1)?, node.opt(2));
    let (ax, block) = axis_and_block(node)?;
    let to = output_dtype(node)?.unwrap_or(cx.b.dtype(scale));
    let shape = cx.b.shape(x);
    let ct = Dtype::promote(Dtype::F32, cx.b.dtype(scale));
    let mut dx = cast(cx, x, ct)?;
    if let (Some(z), false) = (zp, cx.b.dtype(x).is_narrow_float()) {
        let z = along(cx, z, &shape, ax, block)?;
        dx = with(cx, BinaryOp::Sub, dx, z)?;
    }
    let s = along(cx, scale, &shape, ax, block)?;
    let y = with(cx, BinaryOp::Mul, dx, s)?;
    Ok(vec![cast(cx, y, to)?])
}

/// `DynamicQuantizeLinear`: u8 quantization of `x` over the range [min(x, 0),
/// max(x, 0)]: y, the scale (f32) and the zero point (u8), in f32 as ONNX computes them.
pub fn dynamic_quantize_linear(cx: &mut Cx, node: &Node) -> Out {
    use BinaryOp::*;
    let x = node.input(0)?;
    let x = cast(cx, x, Dtype::F32)?;
    let all: Vec<usize> = (0..cx.b.rank(x)).collect();
    let zero = cx.b.scalar(Dtype::F32, 0.0);
    let hi = cx.b.reduce(ReduceKind::Max, x, all.clone(), false)?;
    let hi = cx.b.binary(Max, hi, zero)?;
    let lo = cx.b.reduce(ReduceKind::Min, x, all, false)?;
    let lo = cx.b.binary(Min, lo, zero)?;
    // scale = (max == min ? 1 : max - min) / 255
    let range = cx.b.binary(Sub, hi, lo)?;
    let flat = cx.b.binary(Eq, hi, lo)?;
    let one = cx.b.scalar(Dtype::F32, 1.0);
    let range = cx.b.select(flat, one, range)?;
    let qmax = cx.b.scalar(Dtype::F32, 255.0);
    let scale = cx.b.binary(Div, range, qmax)?;
    // zero point = round(clamp(0 - min / scale, 0, 255))
    let m = cx.b.binary(Div, lo, scale)?;
    let zp = cx.b.binary(Sub, zero, m)?;
    let zp = cx.b.binary(Max, zp, zero)?;
    let zp = cx.b.binary(Min, zp, qmax)?;
    let zp = round_half_even(cx, zp)?;
    let q = cx.b.binary(Div, x, scale)?;
    let y = requantize(cx, q, Some(zp), Dtype::U8)?;
    let zp = cx.b.cast(zp, Dtype::U8)?;
    Ok(vec![y, scale, zp])
}

/// `x` cast to `to` less its zero point `zp` (as it applies along `axis`), if any.
fn centred(cx: &mut Cx, x: ValueId, zp: Option<ValueId>, axis: i64, to: Dtype) -> Result<ValueId> {
    let shape = cx.b.shape(x);
    let xc = cast(cx, x, to)?;
    match zp {
        Some(z) => {
            let z = along(cx, z, &shape, axis, 0)?;
            with(cx, BinaryOp::Sub, xc, z)
        }
        None => Ok(xc),
    }
}

/// The exact i32 product (a - a_zero_point)(b - b_zero_point), a's zero point per row
/// (or one), b's per column (or one): MatMulInteger's, and QLinearMatMul's before it
/// rescales.
fn integer_matmul(cx: &mut Cx, a: ValueId, azp: Option<ValueId>, b: ValueId, bzp: Option<ValueId>) -> Result<ValueId> {
    let (ra, rb) = (cx.b.rank(a), cx.b.rank(b));
    let a = centred(cx, a, azp, ra as i64 - 2, Dtype::I32)?;
    let b = centred(cx, b, bzp, rb as i64 - 1, Dtype::I32)?;
    Ok(cx.b.matmul(a, b)?)
}

/// `MatMulInteger`: the product of two 8-bit integer tensors less their zero points,
/// exact in i32.
pub fn matmul_integer(cx: &mut Cx, node: &Node) -> Out {
    let (a, b) = (node.input(0)?, node.input(1)?);
    Ok(vec![integer_matmul(cx, a, node.opt(2), b, node.opt(3))?])
}

/// The exact convolution of (x - x_zero_point) by (w - w_zero_point), w's zero point
/// per output channel (or one), in f64 (integer convolutions have no kernels; every
/// sum of 8- or 16-bit products an i32 holds, f64 holds exactly).
fn integer_conv(cx: &mut Cx, node: &Node, x: ValueId, xzp: Option<ValueId>, w: ValueId, wzp: Option<ValueId>, bias: Option<ValueId>) -> Result<ValueId> {
    let x = centred(cx, x, xzp, 1, Dtype::F64)?;
    let w = centred(cx, w, wzp, 0, Dtype::F64)?;
    let bias = bias.map(|b| cast(cx, b, Dtype::F64)).transpose()?;
    convolution(cx, node, x, w, bias)
}

/// `ConvInteger`: the convolution of 8-bit integer tensors less their zero points, in
/// i32.
pub fn conv_integer(cx: &mut Cx, node: &Node) -> Out {
    let (x, w) = (node.input(0)?, node.input(1)?);
    let y = integer_conv(cx, node, x, node.opt(2), w, node.opt(3), None)?;
    Ok(vec![cx.b.cast(y, Dtype::I32)?])
}

/// The exact integer product `p` (i32 or f64) rescaled to the output's quantization:
/// round(p (scale_a scale_b / scale_y) + zero_point_y), clamped to its type, the
/// factor computed in the scales' type and the rest in f64. Each scale applies along
/// the output's `axes` (a's, b's, y's).
fn rescale(cx: &mut Cx, p: ValueId, scales: [ValueId; 3], axes: [i64; 3], yzp: Option<ValueId>, to: Dtype) -> Result<ValueId> {
    let shape = cx.b.shape(p);
    let [sa, sb, sy] = [0, 1, 2].map(|i| along(cx, scales[i], &shape, axes[i], 0));
    let f = with(cx, BinaryOp::Mul, sa?, sb?)?;
    let f = with(cx, BinaryOp::Div, f, sy?)?;
    let p = cast(cx, p, Dtype::F64)?;
    let d = with(cx, BinaryOp::Mul, p, f)?;
    let z = yzp.map(|z| along(cx, z, &shape, axes[2], 0)).transpose()?;
    requantize(cx, d, z, to)
}

/// `QLinearMatMul`: the product of quantized a and b, requantized to y's scale and
/// zero point (and type: the zero point's, else a's).
pub fn qlinear_matmul(cx: &mut Cx, node: &Node) -> Out {
    let (a, sa, azp, b, sb, bzp, sy) = (node.input(0)?, node.input(1)?, node.opt(2), node.input(3)?, node.input(4)?, node.opt(5), node.input(6)?);
    let yzp = node.opt(7);
    let to = yzp.map_or(cx.b.dtype(a), |z| cx.b.dtype(z));
    let p = integer_matmul(cx, a, azp, b, bzp)?;
    let r = cx.b.rank(p) as i64;
    let (rows, cols) = (r - 2, r - 1);
    Ok(vec![rescale(cx, p, [sa, sb, sy], [rows, cols, cols], yzp, to)?])
}

/// `QLinearConv`: the convolution of quantized x by quantized w (plus an i32 bias),
/// requantized to y's scale and zero point (and type: the zero point's, else x's);
/// w's scale and zero point per output channel or one.
pub fn qlinear_conv(cx: &mut Cx, node: &Node) -> Out {
    let (x, sx, xzp, w, sw, wzp, sy) = (node.input(0)?, node.input(1)?, node.opt(2), node.input(3)?, node.input(4)?, node.opt(5), node.input(6)?);
    let (yzp, bias) = (node.opt(7), node.opt(8));
    let to = yzp.map_or(cx.b.dtype(x), |z| cx.b.dtype(z));
    let p = integer_conv(cx, node, x, xzp, w, wzp, bias)?;
    Ok(vec![rescale(cx, p, [sx, sw, sy], [1, 1, 1], yzp, to)?])
}

#[cfg(test)]
mod tests {
    use super::super::attention::tests::{load, Attr};
    use crate::ir::Dtype;
    use crate::tensor::Tensor;

    /// The interpreter's first output of a model of one `op` node on `inputs`.
    fn run(op: &str, inputs: &[(&str, Tensor)], attrs: &[(&str, Attr)], opset: i64) -> Tensor {
        let specs: Vec<(&str, Dtype, &[u64])> = inputs.iter().map(|(n, t)| (*n, t.dtype, t.shape.as_slice())).collect();
        let g = load(op, &specs, &["y"], attrs, opset).unwrap();
        let feeds = inputs.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
        crate::interp::run(&g, &feeds).unwrap().remove(0).1
    }

    fn t(dtype: Dtype, shape: &[u64], data: &[f64]) -> Tensor {
        Tensor::new(dtype, shape.to_vec(), data.to_vec())
    }

    #[test]
    fn quantize_rounds_half_to_even_adds_the_zero_point_and_saturates() {
        let x = t(Dtype::F32, &[6], &[0.0, 2.5, 3.5, -2.5, 300.0, -300.0]);
        let y = run("QuantizeLinear", &[("x", x), ("s", t(Dtype::F32, &[], &[1.0])), ("z", t(Dtype::U8, &[], &[128.0]))], &[], 13);
        assert_eq!((y.dtype, y.data), (Dtype::U8, vec![128.0, 130.0, 132.0, 126.0, 255.0, 0.0]));
        // Blocked along axis 1 by 2 (the last block short), to output_dtype int8.
        let x = t(Dtype::F32, &[2, 5], &[1.0, 2.0, 3.0, 4.0, 5.0, -1.0, -2.0, -3.0, -4.0, -5.0]);
        let s = t(Dtype::F32, &[2, 3], &[1.0, 2.0, 4.0, 1.0, 1.0, 1.0]);
        let y = run("QuantizeLinear", &[("x", x), ("s", s)], &[("axis", Attr::Int(1)), ("block_size", Attr::Int(2)), ("output_dtype", Attr::Int(3))], 21);
        assert_eq!((y.dtype, y.data), (Dtype::I8, vec![1.0, 2.0, 2.0, 2.0, 1.0, -1.0, -2.0, -3.0, -4.0, -5.0]));
        // To float8 e4m3fn, saturating by default: 1000 is 448.
        let x = t(Dtype::F32, &[3], &[1000.0, 0.3, -1e9]);
        let y = run("QuantizeLinear", &[("x", x), ("s", t(Dtype::F32, &[], &[1.0])), ("z", t(Dtype::F8E4M3Fn, &[], &[0.0]))], &[], 19);
        assert_eq!((y.dtype, y.data), (Dtype::F8E4M3Fn, vec![448.0, 0.3125, -448.0]));
    }

    #[test]
    fn dequantize_per_axis() {
        let x = t(Dtype::I8, &[2, 3], &[-128.0, 0.0, 127.0, 1.0, 2.0, 3.0]);
        let s = t(Dtype::F32, &[2], &[0.5, 2.0]);
        let z = t(Dtype::I8, &[2], &[0.0, 1.0]);
        let y = run("DequantizeLinear", &[("x", x), ("s", s), ("z", z)], &[("axis", Attr::Int(0))], 13);
        assert_eq!((y.dtype, y.data), (Dtype::F32, vec![-64.0, 0.0, 63.5, 0.0, 2.0, 4.0]));
    }

    #[test]
    fn integer_products_are_exact_and_requantized() {
        // (A - 1)(B - [0, 1]) in i32: 254 * 255 - 3 = 64767.
        let a = t(Dtype::U8, &[2, 2], &[255.0, 0.0, 1.0, 2.0]);
        let b = t(Dtype::U8, &[2, 2], &[255.0, 1.0, 3.0, 4.0]);
        let y = run("MatMulInteger", &[("a", a), ("b", b), ("az", t(Dtype::U8, &[], &[1.0])), ("bz", t(Dtype::U8, &[2], &[0.0, 1.0]))], &[], 10);
        assert_eq!((y.dtype, y.data), (Dtype::I32, vec![64767.0, -3.0, 3.0, 3.0]));
        // [10, 20] . [3 - 1, 5 - 1] = 100, times 0.5 * 0.25 / 0.5, plus 100: 125.
        let f = |x: f64| t(Dtype::F32, &[], &[x]);
        let u = |x: f64| t(Dtype::U8, &[], &[x]);
        let inputs = [
            ("a", t(Dtype::U8, &[1, 2], &[10.0, 20.0])),
            ("sa", f(0.5)),
            ("za", u(0.0)),
            ("b", t(Dtype::U8, &[2, 1], &[3.0, 5.0])),
            ("sb", f(0.25)),
            ("zb", u(1.0)),
            ("sy", f(0.5)),
            ("zy", u(100.0)),
        ];
        let y = run("QLinearMatMul", &inputs, &[], 21);
        assert_eq!((y.dtype, y.data), (Dtype::U8, vec![125.0]));
        // ConvInteger: a 1x1 kernel of 3 less its zero point 1, over x less 2.
        let x = t(Dtype::U8, &[1, 1, 2, 2], &[2.0, 3.0, 4.0, 255.0]);
        let w = t(Dtype::U8, &[1, 1, 1, 1], &[3.0]);
        let y = run("ConvInteger", &[("x", x), ("w", w), ("xz", u(2.0)), ("wz", u(1.0))], &[], 10);
        assert_eq!((y.dtype, y.data), (Dtype::I32, vec![0.0, 2.0, 4.0, 506.0]));
    }

    #[test]
    fn dynamic_quantization_of_a_range() {
        // Range [-1, 3] (0 included): scale 4/255, zero point round(255/4) = 64.
        let x = t(Dtype::F32, &[3], &[-1.0, 0.0, 3.0]);
        let specs: [(&str, Dtype, &[u64]); 1] = [("x", Dtype::F32, &[3])];
        let g = load("DynamicQuantizeLinear", &specs, &["y", "scale", "zp"], &[], 11).unwrap();
        let out = crate::interp::run(&g, &[("x".to_string(), x)].into_iter().collect()).unwrap();
        let scale = (4.0f32 / 255.0) as f64;
        assert_eq!(out[1].1.data, vec![scale]);
        assert_eq!(out[2].1.data, vec![64.0]);
        assert_eq!(out[0].1.data, vec![0.0, 64.0, 255.0]);
    }
}
