//! Losses over `[N, C, d1, ...]` scores and class indices `[N, d1, ...]`:
//! NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss. A class is picked with the
//! builder's `pick` (a one-hot mask and a sum, no gather: an `ignore_index` outside
//! the classes reads nothing), the cross entropy through `log_softmax_parts` as
//! Mithril's has it.

use super::Cx;
use crate::frontend::onnx::node::{invalid, Fail, Node, Out};
use crate::ir::{BinaryOp, Dim, ReduceKind, Shape, UnaryOp, ValueId};

/// `loss[n, d...] = -input[n, target[n, d...], d...] · weight[target[n, d...]]`, then
/// reduced as [`reduce`] says.
pub fn nll_loss(cx: &mut Cx, node: &Node) -> Out {
    let (x, target) = classes(cx, node)?;
    let picked = cx.b.pick(x, target, 1)?;
    let lost = cx.b.unary(UnaryOp::Neg, picked)?;
    Ok(vec![reduce(cx, node, lost, x, target)?])
}

/// NegativeLogLikelihoodLoss of `log_softmax(scores)` along the classes, per sample
/// `log(Σ exp(x - max)) - (x - max)[target]`, then weighted and reduced as [`reduce`]
/// says; the optional second output is the log-probabilities.
pub fn softmax_cross_entropy(cx: &mut Cx, node: &Node) -> Out {
    let (x, target) = classes(cx, node)?;
    let (norm, lse) = cx.b.log_softmax_parts(x, 1)?;
    let label = cx.b.pick(norm, target, 1)?;
    let lse_per_sample = cx.b.reshape(lse, cx.b.shape(label))?;
    let lost = cx.b.binary(BinaryOp::Sub, lse_per_sample, label)?;
    let mut outs = vec![reduce(cx, node, lost, x, target)?];
    if node.outputs() > 1 {
        // `log_softmax`'s last node.
        outs.push(cx.b.binary(BinaryOp::Sub, norm, lse)?);
    }
    Ok(outs)
}

/// The scores `[N, C, d...]` and integer targets `[N, d...]`.
fn classes(cx: &mut Cx, node: &Node) -> Result<(ValueId, ValueId), Fail> {
    let (x, target) = (node.input(0)?, node.input(1)?);
    let (xs, ts) = (cx.b.shape(x), cx.b.shape(target));
    if xs.rank() < 2 || ts.rank() + 1 != xs.rank() || !cx.b.dtype(target).is_int() {
        return invalid(format!("{} wants scores [N, C, d...] and integer targets [N, d...], got {} and {}", node.op_type, cx.b.graph.ty(x), cx.b.graph.ty(target)));
    }
    Ok((x, target))
}

/// The per-sample losses `lost` times `weight[target]` (input 2, when given), zero where
/// the target is `ignore_index`, then as `reduction` says: `none`; `sum`; or `mean`,
/// the sum divided by the sum of the weights applied (without a weight input, the
/// number of samples not ignored).
fn reduce(cx: &mut Cx, node: &Node, lost: ValueId, x: ValueId, target: ValueId) -> Result<ValueId, Fail> {
    let dtype = cx.b.dtype(lost);
    let weight = match node.opt(2) {
        Some(w) => {
            // Along the class axis, broadcast to the scores, and picked as they are.
            let mut dims = vec![Dim::Known(1); cx.b.rank(x)];
            dims[1] = cx.b.shape(x).0[1].clone();
            let w = cx.b.reshape(w, Shape(dims))?;
            let w = cx.b.broadcast_to(w, cx.b.shape(x))?;
            Some(cx.b.pick(w, target, 1)?)
        }
        None => None,
    };
    let mut loss = match weight {
        Some(w) => cx.b.binary(BinaryOp::Mul, lost, w)?,
        None => lost,
    };
    let mut applied = weight;
    if let Some(ii) = node.int_opt("ignore_index")? {
        let ignored = cx.b.scalar(cx.b.dtype(target), ii as f64);
        let keep = cx.b.binary(BinaryOp::Ne, target, ignored)?;
        let zero = cx.b.scalar(dtype, 0.0);
        loss = cx.b.select(keep, loss, zero)?;
        let w = match weight {
            Some(w) => w,
            None => cx.b.scalar(dtype, 1.0),
        };
        applied = Some(cx.b.select(keep, w, zero)?);
    }
    let all: Vec<usize> = (0..cx.b.rank(loss)).collect();
    let reduction = node.string_or("reduction", "mean")?;
    Ok(match (reduction.as_str(), applied) {
        ("none", _) => loss,
        ("sum", _) => cx.b.reduce(ReduceKind::Sum, loss, all, false)?,
        ("mean", None) => cx.b.reduce(ReduceKind::Mean, loss, all, false)?,
        ("mean", Some(w)) => {
            let total = cx.b.reduce(ReduceKind::Sum, loss, all.clone(), false)?;
            let weights = cx.b.reduce(ReduceKind::Sum, w, all, false)?;
            cx.b.binary(BinaryOp::Div, total, weights)?
        }
        (other, _) => return invalid(format!("reduction {other:?} is not none, sum or mean")),
    })
}
