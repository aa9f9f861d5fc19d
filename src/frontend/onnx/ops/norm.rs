//! More normalizations: Lp, mean-variance and local response normalization, and Lp
//! pooling (over `nn`'s pooling window).

use super::nn::{pool_window, spatial};
use super::{axes, axis, Cx};
use crate::frontend::onnx::node::{invalid, unsupported, Node, Out};
use crate::ir::{BinaryOp, Dim, Op, PoolAttrs, PoolKind, ReduceKind, Shape, UnaryOp};

/// `x / ||x||_p` along `axis` (`p` 1: the sum of `|x|`, 2: the root of the sum of
/// `x²`), zero where the norm is zero (opset 22 says so; before, it divided by zero).
pub fn lp_normalization(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let ax = axis(node.int("axis", -1)?, cx.b.rank(x))?;
    let norm = match node.int("p", 2)? {
        1 => {
            let a = cx.b.unary(UnaryOp::Abs, x)?;
            cx.b.reduce(ReduceKind::Sum, a, vec![ax], true)?
        }
        2 => {
            let sq = cx.b.binary(BinaryOp::Mul, x, x)?;
            let s = cx.b.reduce(ReduceKind::Sum, sq, vec![ax], true)?;
            cx.b.unary(UnaryOp::Sqrt, s)?
        }
        p => return invalid(format!("LpNormalization's p is 1 or 2, got {p}")),
    };
    let zero = cx.b.scalar(cx.b.dtype(x), 0.0);
    let is_zero = cx.b.binary(BinaryOp::Eq, norm, zero)?;
    let y = cx.b.binary(BinaryOp::Div, x, norm)?;
    Ok(vec![cx.b.select(is_zero, zero, y)?])
}

/// `(x - mean) / (sqrt(var) + 1e-9)` over `axes` (default `[0, 2, 3]`), the variance
/// without correction (the function ONNX defines it by).
pub fn mean_variance_normalization(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let list = node.ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    let axes = axes(&list, cx.b.rank(x))?;
    let mean = cx.b.reduce(ReduceKind::Mean, x, axes.clone(), true)?;
    let centered = cx.b.binary(BinaryOp::Sub, x, mean)?;
    let var = cx.b.variance(x, axes, true, 0.0)?;
    let sd = cx.b.unary(UnaryOp::Sqrt, var)?;
    let eps = cx.b.scalar(cx.b.dtype(sd), 1e-9);
    let den = cx.b.binary(BinaryOp::Add, sd, eps)?;
    Ok(vec![cx.b.binary(BinaryOp::Div, centered, den)?])
}

/// `x / (bias + alpha / size · square_sum)^beta`, `square_sum` the sum of `x²` over the
/// `size` channels around each (`floor((size-1)/2)` before it, `ceil((size-1)/2)`
/// after): an average pool of `x²` viewed `[N, 1, C, D1·…·Dk]`, along the channels with
/// its zero padding counted, is `square_sum / size`.
pub fn lrn(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    let size = match node.int_opt("size")? {
        Some(s) if s >= 1 => s as u64,
        other => return invalid(format!("LRN needs a positive size, got {other:?}")),
    };
    if shape.rank() < 2 {
        return invalid(format!("LRN wants [N, C, ...], got {shape}"));
    }
    let (alpha, beta, bias) = (node.float("alpha", 1e-4)?, node.float("beta", 0.75)?, node.float("bias", 1.0)?);
    let Some(dims) = Shape(shape.0[1..].to_vec()).as_known() else { return unsupported(format!("LRN over symbolic channels or spatial dimensions {shape}")) };
    let rest = dims[1..].iter().product::<u64>();
    let sq = cx.b.binary(BinaryOp::Mul, x, x)?;
    let view = cx.b.reshape(sq, Shape(vec![shape.0[0].clone(), Dim::Known(1), Dim::Known(dims[0]), Dim::Known(rest)]))?;
    let before = (size - 1) / 2;
    let window = PoolAttrs { kind: PoolKind::Avg, kernel: vec![size, 1], stride: vec![1, 1], padding: vec![(before, size - 1 - before), (0, 0)], dilation: vec![1, 1] };
    let avg = cx.b.op(Op::Pool(window), vec![view])?;
    let avg = cx.b.reshape(avg, shape)?;
    let dtype = cx.b.dtype(x);
    let (a, b, k) = (cx.b.scalar(dtype, alpha), cx.b.scalar(dtype, beta), cx.b.scalar(dtype, bias));
    let scaled = cx.b.binary(BinaryOp::Mul, avg, a)?;
    let base = cx.b.binary(BinaryOp::Add, scaled, k)?;
    let den = cx.b.binary(BinaryOp::Pow, base, b)?;
    Ok(vec![cx.b.binary(BinaryOp::Div, x, den)?])
}

/// `(Σ over the window of |x|^p)^(1/p)`, every window attribute as AveragePool's: the
/// average pool of `|x|^p`, which counts the zero padding, times the window's size.
pub fn lp_pool(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let input = spatial(cx, x, "LpPool")?;
    let p = node.int("p", 2)?;
    if p < 1 {
        return invalid(format!("LpPool's p is at least 1, got {p}"));
    }
    let (window, _) = pool_window(node, &input, PoolKind::Avg)?;
    let taps: u64 = window.kernel.iter().product();
    let dtype = cx.b.dtype(x);
    let a = cx.b.unary(UnaryOp::Abs, x)?;
    let (power, root, count) = (cx.b.scalar(dtype, p as f64), cx.b.scalar(dtype, 1.0 / p as f64), cx.b.scalar(dtype, taps as f64));
    let powered = cx.b.binary(BinaryOp::Pow, a, power)?;
    let avg = cx.b.op(Op::Pool(window), vec![powered])?;
    let sum = cx.b.binary(BinaryOp::Mul, avg, count)?;
    Ok(vec![cx.b.binary(BinaryOp::Pow, sum, root)?])
}
