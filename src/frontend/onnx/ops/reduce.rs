//! Reductions: every `Reduce*` (axes as an attribute or, since opset 13 for
//! ReduceSum and 18 for the rest, an input; `keepdims`; `noop_with_empty_axes`) and
//! `ArgMax`/`ArgMin`.

use super::{axes, axis, input_ints, Cx};
use crate::frontend::onnx::node::{Node, Out};
use crate::ir::{ArgKind, BinaryOp, Op, ReduceKind, SliceRange, UnaryOp};

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
