//! The reference interpreter: the meaning of every IR op, as plain code that computes
//! in f64, and a graph runner on top of it. `mithrilc run` uses it and every target is
//! tested against it, so it favours being obviously right over being fast.
//!
//! **Architecture Invariant:** every op's result is rounded to the node's dtype
//! ([`Tensor::new`] rounds), and nothing else is: an f32 graph behaves like a real f32
//! program whose ops each accumulate in f64 and round once at the end.
//!
//! [`eval_op`] is the one `match` over [`Op`]; the kernels live in files by op family
//! (`elementwise`, `matmul`, `window`, `reduce`, `layout`) over the shared index helpers
//! in `index`. Kernels may assume their arguments have the shapes the shape rule
//! demands: `eval_op` re-derives the result type from the arguments and refuses to run
//! a kernel when it disagrees with the node's type.

mod elementwise;
mod index;
mod layout;
mod matmul;
mod reduce;
mod special;
#[cfg(test)]
mod tests;
mod window;

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::error::Result;
use crate::ir::{Graph, Op, Shape, TensorType, ValueId};
use crate::passes::shape::{describe_node, infer};
use crate::tensor::{Constant, Tensor};
use crate::{internal_error, user_error};

pub use special::{erf, erfc};

/// The largest tensor the interpreter makes (2^30 elements, 8 GiB as f64).
pub const MAX_ELEMENTS: u64 = 1 << 30;

/// Evaluates one op on concrete tensors. `ty` is the node's result type (fully static
/// shape); `consts` is `graph.consts`. Inputs and parameters have no meaning here (their
/// values come from the caller; see [`run`]).
pub fn eval_op(op: &Op, args: &[&Tensor], ty: &TensorType, consts: &[Constant]) -> Result<Tensor> {
    let out = check_operands(op, args, ty, consts)?;
    let data = match op {
        Op::Input | Op::Param => {
            return Err(internal_error!("eval_op: {} values are fed by the caller, not evaluated", op.name()))
        }
        Op::Constant(c) => {
            let t = consts.get(c.0 as usize).ok_or_else(|| internal_error!("constant #{} does not exist", c.0))?;
            return Ok(t.to_tensor());
        }
        Op::Unary(u) => elementwise::unary(*u, args[0]),
        Op::Binary(b) => elementwise::binary(*b, args[0], args[1], &out, ty.dtype)?,
        Op::Where => elementwise::select(args[0], args[1], args[2], &out),
        Op::Cast { to } => elementwise::cast(args[0], *to),
        Op::MatMul => matmul::matmul(args[0], args[1], &out, ty.dtype),
        Op::Conv(attrs) => window::conv(attrs, args[0], args[1], args.get(2).copied(), &out),
        Op::Pool(attrs) => window::pool(attrs, args[0], &out),
        Op::Reduce { kind, axes, keepdim: _ } => reduce::reduce(*kind, args[0], axes)?,
        Op::ArgReduce { kind, axis, keepdim: _ } => reduce::arg_reduce(*kind, args[0], *axis)?,
        Op::Variance { axes, keepdim: _, correction } => reduce::variance(args[0], axes, *correction),
        Op::Softmax { axis } => reduce::softmax(args[0], *axis),
        Op::Reshape { .. } | Op::StopGradient => args[0].data.clone(),
        Op::Transpose { perm } => layout::transpose(args[0], perm),
        Op::BroadcastTo { .. } => layout::broadcast_to(args[0], &out),
        Op::Slice { ranges } => layout::slice(args[0], ranges)?,
        Op::Concat { axis } => layout::concat(args, *axis),
        Op::Gather { axis } => layout::gather(args[0], args[1], *axis)?,
        Op::Iota { axis, .. } => layout::iota(&out, *axis),
        Op::Pad { pads, value } => layout::pad(args[0], pads, *value, &out),
    };
    Ok(Tensor::new(ty.dtype, out, data))
}

/// Checks that the kernels' assumptions hold: every argument's data matches its shape,
/// and the shape rule applied to the arguments gives exactly `ty`, which is static.
/// Returns the result shape. A failure is a bug in whoever built the graph or the call.
fn check_operands(op: &Op, args: &[&Tensor], ty: &TensorType, consts: &[Constant]) -> Result<Vec<u64>> {
    let out = ty
        .shape
        .as_known()
        .ok_or_else(|| internal_error!("eval_op: {} result type {ty} is not static", op.name()))?;
    // The interpreter holds every element as an f64: refuse a result it cannot hold
    // instead of letting the allocation abort the process.
    match ty.shape.numel() {
        Some(n) if n <= MAX_ELEMENTS => {}
        _ => {
            return Err(user_error!(
                "the result {ty} of {} has more than {MAX_ELEMENTS} elements, more than the interpreter holds ({} GiB as f64)",
                op.name(),
                (MAX_ELEMENTS * 8) >> 30
            ))
        }
    }
    for (i, a) in args.iter().enumerate() {
        let n = a.shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        if n != Some(a.data.len() as u64) {
            return Err(internal_error!(
                "eval_op: argument {i} of {} has shape {} but {} elements",
                op.name(),
                Shape::known(&a.shape),
                a.data.len()
            ));
        }
    }
    let arg_types: Vec<TensorType> =
        args.iter().map(|a| TensorType::new(a.dtype, Shape::known(&a.shape))).collect();
    let arg_refs: Vec<&TensorType> = arg_types.iter().collect();
    let inferred = infer(op, &arg_refs, ty, consts).map_err(|e| internal_error!("eval_op: {}: {e}", op.name()))?;
    if inferred != *ty {
        let shown: Vec<String> = arg_types.iter().map(TensorType::to_string).collect();
        return Err(internal_error!(
            "eval_op: {} of ({}) gives {inferred}, but the node says {ty}",
            op.name(),
            shown.join(", ")
        ));
    }
    Ok(out)
}

/// Runs the whole graph. `feeds` maps input and parameter names to tensors (extra
/// entries are ignored). Returns one `(name, tensor)` per `graph.outputs` entry, in order.
///
/// Every intermediate is dropped after its last use, so a large model holds only the
/// values that are still live (plus the feeds, which are borrowed, not copied).
pub fn run(graph: &Graph, feeds: &BTreeMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
    for node in &graph.nodes {
        if let Some(sym) = node.ty.shape.symbols().first() {
            return Err(user_error!("graph has symbolic dimension {sym}; bind it first"));
        }
    }
    let last_use = last_uses(graph)?;
    let mut values: Vec<Option<Cow<Tensor>>> = vec![None; graph.nodes.len()];
    for v in graph.ids() {
        let node = graph.node(v);
        let value = if matches!(node.op, Op::Input | Op::Param) {
            feed(graph, v, feeds)?
        } else if let Op::Constant(c) = node.op {
            // Widened from the constant's own dtype to f64, as the kernels compute.
            let t = graph.consts.get(c.0 as usize).ok_or_else(|| internal_error!("constant #{} does not exist", c.0))?;
            if t.dtype() != node.ty.dtype || Shape::known(t.shape()) != node.ty.shape {
                return Err(internal_error!("interp: constant #{} is {}{} but %{} says {}", c.0, t.dtype(), Shape::known(t.shape()), v.0, node.ty));
            }
            Cow::Owned(t.to_tensor())
        } else {
            let args = node
                .args
                .iter()
                .map(|a| {
                    values.get(a.index()).and_then(Option::as_deref).ok_or_else(|| {
                        internal_error!("interp: %{} is used by %{} but was never computed or already freed", a.0, v.0)
                    })
                })
                .collect::<Result<Vec<&Tensor>>>()?;
            let t = eval_op(&node.op, &args, &node.ty, &graph.consts)
                .map_err(|e| e.context(describe_node(graph, v)))?;
            Cow::Owned(t)
        };
        values[v.index()] = Some(value);
        for a in node.args.iter().chain(std::iter::once(&v)) {
            if last_use[a.index()] == Some(v.index()) {
                values[a.index()] = None;
            }
        }
    }
    graph
        .outputs
        .iter()
        .map(|o| {
            let t = values.get(o.value.index()).and_then(Option::as_deref).ok_or_else(|| {
                internal_error!("interp: output {:?} refers to %{}, which has no value", o.name, o.value.0)
            })?;
            Ok((o.name.clone(), t.clone()))
        })
        .collect()
}

/// For each value, the index of the last node that uses it: `Some(own index)` for a value
/// nobody uses (dropped as soon as it is made), `None` for graph outputs (never dropped).
fn last_uses(graph: &Graph) -> Result<Vec<Option<usize>>> {
    let mut last: Vec<Option<usize>> = (0..graph.nodes.len()).map(Some).collect();
    for (i, node) in graph.nodes.iter().enumerate() {
        for a in &node.args {
            if a.index() >= i {
                return Err(internal_error!("interp: %{i} uses %{}, which is not defined before it", a.0));
            }
            last[a.index()] = Some(i);
        }
    }
    for o in &graph.outputs {
        let slot = last
            .get_mut(o.value.index())
            .ok_or_else(|| internal_error!("interp: output {:?} refers to a missing value", o.name))?;
        *slot = None;
    }
    Ok(last)
}

/// The fed value of input or parameter `v`, checked against its declared type.
///
/// A float feed for a float input of another width (f64 data for an f32 input, say) is
/// rounded to the declared dtype, as a caller would cast at the boundary, and an integer
/// feed for an integer input that holds all its values (u8 data for an i32 input) is
/// taken as it is; any other dtype difference is an error, since converting ints or
/// bools could silently change meaning.
fn feed<'a>(graph: &Graph, v: ValueId, feeds: &'a BTreeMap<String, Tensor>) -> Result<Cow<'a, Tensor>> {
    let node = graph.node(v);
    let kind = if node.op == Op::Param { "parameter" } else { "input" };
    let name = node.name.as_deref().ok_or_else(|| internal_error!("interp: {} has no name", describe_node(graph, v)))?;
    let ty = &node.ty;
    let t = feeds.get(name).ok_or_else(|| user_error!("no value was given for {kind} `{name}` ({ty})"))?;
    let count = t.shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    if count != Some(t.data.len() as u64) {
        return Err(user_error!(
            "the value for {kind} `{name}` has shape {} but holds {} elements",
            Shape::known(&t.shape),
            t.data.len()
        ));
    }
    if Shape::known(&t.shape) != ty.shape {
        return Err(user_error!(
            "{kind} `{name}` is declared {ty} but was given a tensor of shape {}",
            Shape::known(&t.shape)
        ));
    }
    if t.dtype == ty.dtype {
        Ok(Cow::Borrowed(t))
    } else if t.dtype.is_float() && ty.dtype.is_float() {
        Ok(Cow::Owned(Tensor::new(ty.dtype, t.shape.clone(), t.data.clone())))
    } else if let Some(t) = ty.dtype.is_narrow_float().then(|| crate::data::from_stand_in(t, ty.dtype)).flatten() {
        // A narrow float's codes, as a .npy holds them (`data::npy_descr`).
        Ok(Cow::Owned(t))
    } else if t.dtype.is_int() && ty.dtype.is_int() && (crate::ir::Dtype::promote(t.dtype, ty.dtype) == ty.dtype || ty.dtype.bits() < 8 && crate::data::from_stand_in(t, ty.dtype).is_some()) {
        // (int8 or uint8 values for a 4- or 2-bit input, as a .npy holds them, when they fit)
        Ok(Cow::Owned(Tensor { dtype: ty.dtype, shape: t.shape.clone(), data: t.data.clone() }))
    } else {
        Err(user_error!("{kind} `{name}` is declared {ty} but was given {} values", t.dtype))
    }
}
