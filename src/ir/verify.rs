//! The verifier: structural invariants of a [`Graph`], checked after the frontend and
//! after every pass. A failure here is a bug in mithrilc, never in the user's model.

use super::*;
use crate::error::{Error, Result};
use crate::passes::shape;

/// Checks that every argument is defined before use, arities and types agree with the
/// shape rules, inputs and parameters are named uniquely, and outputs exist.
pub fn verify(graph: &Graph) -> Result<()> {
    let fail = |v: ValueId, msg: String| {
        Err(Error::internal(format!("IR verifier: {}: {msg}", shape::describe_node(graph, v))))
    };
    let mut names = std::collections::BTreeSet::new();
    for v in graph.ids() {
        let node = graph.node(v);
        for a in &node.args {
            if a.index() >= v.index() {
                return fail(v, format!("argument %{} is not defined before use", a.0));
            }
        }
        if matches!(node.op, Op::Input | Op::Param) {
            match &node.name {
                None => return fail(v, "inputs and parameters must be named".into()),
                Some(n) if !names.insert(n.clone()) => return fail(v, format!("name {n:?} is used twice")),
                Some(_) => {}
            }
        }
        let args: Vec<&TensorType> = node.args.iter().map(|a| graph.ty(*a)).collect();
        match shape::infer(&node.op, &args, &node.ty, &graph.consts) {
            Ok(ty) if ty == node.ty => {}
            Ok(ty) => return fail(v, format!("recorded type {} differs from the inferred {}", node.ty, ty)),
            Err(e) => return fail(v, e),
        }
    }
    let mut out_names = std::collections::BTreeSet::new();
    for o in &graph.outputs {
        if o.value.index() >= graph.nodes.len() {
            return Err(Error::internal(format!("IR verifier: output {:?} refers to a missing value", o.name)));
        }
        if !out_names.insert(&o.name) {
            return Err(Error::internal(format!("IR verifier: output name {:?} is used twice", o.name)));
        }
        let ty = graph.ty(o.value);
        if o.loss && (!ty.dtype.is_float() || ty.shape.rank() != 0) {
            return Err(Error::internal(format!("IR verifier: loss {:?} is {ty}, not a float scalar", o.name)));
        }
    }
    Ok(())
}
