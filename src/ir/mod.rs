//! The IR: a flat, typed SSA graph in an arena.
//!
//! **Architecture Invariant:** a [`Graph`] is a list of [`Node`]s in definition order;
//! each node defines exactly one value, named by its index ([`ValueId`]), and its
//! arguments are values defined earlier. Inputs, parameters and constants are nodes
//! too, so the list order is a valid execution order. The verifier checks this after
//! the frontend and after every pass.

#[macro_use]
mod declare;
mod attr;
mod dim;
pub mod builder;
mod op;
pub mod parse;
pub mod print;
pub mod stats;
#[cfg(test)]
mod tests;
mod types;
pub mod verify;

pub use attr::*;
pub use op::*;
pub use types::*;

use crate::tensor::{Constant, Tensor};

/// A value of the graph: the index of the node that defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub op: Op,
    pub args: Vec<ValueId>,
    pub ty: TensorType,
    /// The name of an input, parameter or named intermediate (`None` for temporaries).
    pub name: Option<String>,
    /// Where the op came from in the source model, e.g. `submodels.m_3 (Linear)`.
    pub origin: Option<String>,
}

/// A named model output.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub name: String,
    pub value: ValueId,
    /// A scalar the model is trained to minimize (Mithril's `final_cost`): the
    /// autodiff pass differentiates it with a cotangent of one, not a given one.
    pub loss: bool,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Graph {
    pub name: String,
    pub nodes: Vec<Node>,
    pub consts: Vec<Constant>,
    pub outputs: Vec<Output>,
    /// Where this graph deliberately computes something other than the model's own
    /// framework would (each names the model node); the command line prints them.
    pub warnings: Vec<Warning>,
}

/// A deliberate difference from the source framework's semantics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub message: String,
    /// It concerns gradients only: said when gradients are derived.
    pub gradient_only: bool,
}

impl Graph {
    pub fn new(name: impl Into<String>) -> Graph {
        Graph { name: name.into(), ..Graph::default() }
    }

    pub fn node(&self, v: ValueId) -> &Node {
        &self.nodes[v.index()]
    }

    pub fn ty(&self, v: ValueId) -> &TensorType {
        &self.nodes[v.index()].ty
    }

    /// Appends a node; the caller is responsible for `ty` being the op's result type
    /// (the shape pass and the verifier check it).
    pub fn push(&mut self, op: Op, args: Vec<ValueId>, ty: TensorType) -> ValueId {
        let id = ValueId(u32::try_from(self.nodes.len()).expect("graph larger than 2^32 nodes"));
        self.nodes.push(Node { op, args, ty, name: None, origin: None });
        id
    }

    pub fn add_const(&mut self, t: Tensor) -> ValueId {
        self.add_constant(Constant::from(t))
    }

    pub fn add_constant(&mut self, c: Constant) -> ValueId {
        let cid = ConstId(self.consts.len() as u32);
        let ty = TensorType::new(c.dtype(), Shape::known(c.shape()));
        self.consts.push(c);
        self.push(Op::Constant(cid), Vec::new(), ty)
    }

    pub fn ids(&self) -> impl Iterator<Item = ValueId> {
        (0..self.nodes.len() as u32).map(ValueId)
    }

    /// Data inputs, in order of definition.
    pub fn inputs(&self) -> impl Iterator<Item = ValueId> + '_ {
        self.ids().filter(|&v| self.node(v).op == Op::Input)
    }

    /// Parameters, in order of definition.
    pub fn params(&self) -> impl Iterator<Item = ValueId> + '_ {
        self.ids().filter(|&v| self.node(v).op == Op::Param)
    }

    /// The input or parameter with this name.
    pub fn find_arg(&self, name: &str) -> Option<ValueId> {
        self.ids().find(|&v| {
            let n = self.node(v);
            matches!(n.op, Op::Input | Op::Param) && n.name.as_deref() == Some(name)
        })
    }
}
