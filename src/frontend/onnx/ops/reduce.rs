//! Reductions: every `Reduce*` (axes as an attribute or, since opset 13 for
//! ReduceSum and 18 for the rest, an input; `keepdims`; `noop_with_empty_axes`) and
//! `ArgMax`/`ArgMin`.

use super::{axes, axis, input_ints, Cx};
use crate::frontend::onnx::node::{Node, Out};
use crate::ir::{ArgKind, BinaryOp, Dim, Dtype, Op, ReduceKind, Shape, SliceRange, UnaryOp};

pub fn reduce(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let rank = cx.b.rank(x);
    let axes_as_input = node.opset >= if node.op_type == "ReduceSum" { 13 } else { 18 };
    let listed = if axes_as_input { input_ints(cx, node, 1)? } else { node.ints("axes")? };
    let keep = node.int("keepdims", 1)? != 0;
    let axes = match listed {
        Some(list) if !list.is_empty() => axes(&list, rank)?,
        // No axes: all of them, or none with noop_with_empty_axes.
        _ if axes_as_input && node.int("noop_with_empty_axes", 0)? != 0 => {
            let shape = cx.b.shape(x);
            return Ok(vec![cx.b.broadcast_to(x, shape)?]);
        }
        _ => (0..rank).collect(),
    };
    let shape = cx.b.shape(x);
    if axes.iter().any(|&a| shape.0[a] == Dim::Known(0)) {
        if let Some(identity) = empty_identity(node.op_type, cx.b.dtype(x)) {
            // Over no elements the extremes are their identities (ONNX since opset 18).
            let dims = shape.0.iter().enumerate().filter_map(|(i, d)| if !axes.contains(&i) { Some(d.clone()) } else { keep.then_some(Dim::Known(1)) }).collect();
            return Ok(vec![cx.b.full(cx.b.dtype(x), Shape(dims), identity)?]);
        }
    }
    let b = &mut cx.b;
    let sum = |b: &mut crate::ir::builder::Builder, v| b.reduce(ReduceKind::Sum, v, axes.clone(), keep);
    let y = match node.op_type {
        "ReduceSum" => sum(b, x)?,
        "ReduceMean" => b.reduce(ReduceKind::Mean, x, axes.clone(), keep)?,
        "ReduceMax" => b.reduce(ReduceKind::Max, x, axes.clone(), keep)?,
        "ReduceMin" => b.reduce(ReduceKind::Min, x, axes.clone(), keep)?,
        "ReduceProd" => b.reduce(ReduceKind::Prod, x, axes.clone(), keep)?,
        "ReduceL1" => {
            let a = b.unary(UnaryOp::Abs, x)?;
            sum(b, a)?
        }
        "ReduceL2" | "ReduceSumSquare" => {
            let sq = b.binary(BinaryOp::Mul, x, x)?;
            let s = sum(b, sq)?;
            if node.op_type == "ReduceL2" { b.unary(UnaryOp::Sqrt, s)? } else { s }
        }
        "ReduceLogSum" => {
            let s = sum(b, x)?;
            b.unary(UnaryOp::Log, s)?
        }
        // max + log(sum(exp(x - max))), stable for large x.
        "ReduceLogSumExp" => {
            let m = b.reduce(ReduceKind::Max, x, axes.clone(), true)?;
            let shifted = b.binary(BinaryOp::Sub, x, m)?;
            let e = b.unary(UnaryOp::Exp, shifted)?;
            let s = sum(b, e)?;
            let l = b.unary(UnaryOp::Log, s)?;
            let m = if keep { m } else { b.reduce(ReduceKind::Max, m, axes.clone(), false)? };
            b.binary(BinaryOp::Add, l, m)?
        }
        other => unreachable!("{other} is not registered as a reduction"),
    };
    Ok(vec![y])
}

/// What a max or min over no elements gives: the other end of the type's range.
fn empty_identity(op: &str, dtype: Dtype) -> Option<f64> {
    let (lo, hi) = match dtype {
        Dtype::I32 => (i32::MIN as f64, i32::MAX as f64),
        Dtype::I64 => (i64::MIN as f64, i64::MAX as f64),
        Dtype::Bool => (0.0, 1.0),
        _ => (f64::NEG_INFINITY, f64::INFINITY),
    };
    match op {
        "ReduceMax" | "ReduceLogSumExp" => Some(lo),
        "ReduceMin" => Some(hi),
        _ => None,
    }
}

/// `ArgMax`/`ArgMin` along `axis`; with `select_last_index`, the last of equal
/// extremes: the first of the axis reversed, counted back from the end.
pub fn arg_reduce(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let rank = cx.b.rank(x);
    let ax = axis(node.int("axis", 0)?, rank.max(1))?;
    let keepdim = node.int("keepdims", 1)? != 0;
    let kind = if node.op_type == "ArgMax" { ArgKind::ArgMax } else { ArgKind::ArgMin };
    if node.int("select_last_index", 0)? == 0 {
        return Ok(vec![cx.b.op(Op::ArgReduce { kind, axis: Some(ax), keepdim }, vec![x])?]);
    }
    let mut ranges = vec![SliceRange::FULL; rank];
    ranges[ax] = SliceRange { start: None, stop: None, step: -1 };
    let reversed = cx.b.op(Op::Slice { ranges }, vec![x])?;
    let i = cx.b.op(Op::ArgReduce { kind, axis: Some(ax), keepdim }, vec![reversed])?;
    let Some(n) = cx.b.shape(x).0[ax].known() else {
        return crate::frontend::onnx::node::unsupported("select_last_index along a symbolic axis");
    };
    let last = cx.b.scalar(crate::ir::Dtype::I64, n as f64 - 1.0);
    Ok(vec![cx.b.binary(BinaryOp::Sub, last, i)?])
}
