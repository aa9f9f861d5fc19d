//! `simplify`: algebraic identities, constant folding, common-subexpression
//! elimination and dead-code elimination, in one walk over the graph plus a sweep.
//!
//! Each identity is a named rule with its equation; a rule applies only where it
//! keeps the value's type exactly (dtype and shape, broadcasting included). Inputs and
//! parameters are never removed: they are the model's interface.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::Hasher;

use crate::error::Result;
use crate::ir::*;
use crate::tensor::{Constant, Tensor};

/// Results up to this many elements are folded into constants (bigger ones, such as
/// an attention mask, are cheaper computed than stored).
const FOLD_LIMIT: u64 = 4096;

pub fn run(g: &mut Graph) -> Result<()> {
    let mut out = Graph { warnings: std::mem::take(&mut g.warnings), ..Graph::new(g.name.clone()) };
    let mut map: Vec<ValueId> = Vec::with_capacity(g.nodes.len());
    let mut seen: HashMap<String, ValueId> = HashMap::new();
    let mut consts = Consts::new(std::mem::take(&mut g.consts));
    for node in &g.nodes {
        let args: Vec<ValueId> = node.args.iter().map(|a| map[a.index()]).collect();
        let mut new = Node { op: node.op.clone(), args, ty: node.ty.clone(), name: node.name.clone(), origin: node.origin.clone() };
        if let Op::Constant(c) = new.op {
            // Constants are re-interned in the new graph.
            new.op = Op::Constant(consts.carry(c, &mut out));
        }
        // reshape(reshape(x)) == reshape(x)
        compose_reshapes(&out, &mut new);
        if let Some(v) = identity(&out, &new) {
            map.push(v);
            continue;
        }
        if let Some(t) = fold(&out, &new)? {
            new.op = Op::Constant(consts.interner.intern(&mut out, Constant::from(t)));
            new.args.clear();
        }
        // Inputs and parameters are distinct by name even when alike.
        let key = match new.op {
            Op::Input | Op::Param => None,
            _ => Some(format!("{:?} {:?} {}", new.op, new.args, new.ty)),
        };
        if let Some(&v) = key.as_ref().and_then(|k| seen.get(k)) {
            map.push(v);
            continue;
        }
        let v = ValueId(out.nodes.len() as u32);
        out.nodes.push(new);
        if let Some(k) = key {
            seen.insert(k, v);
        }
        map.push(v);
    }
    out.outputs = g.outputs.iter().map(|o| Output { name: o.name.clone(), value: map[o.value.index()], loss: o.loss }).collect();
    *g = sweep(out);
    Ok(())
}

/// The constants of a graph being rebuilt: each old constant is interned in the new
/// graph the first time a node uses it (a clone shares its elements).
struct Consts {
    old: Vec<Constant>,
    carried: Vec<Option<ConstId>>,
    interner: Interner,
}

impl Consts {
    fn new(old: Vec<Constant>) -> Consts {
        let carried = vec![None; old.len()];
        Consts { old, carried, interner: Interner::default() }
    }

    /// The id in `g` of the old graph's constant `c`.
    fn carry(&mut self, c: ConstId, g: &mut Graph) -> ConstId {
        let i = c.0 as usize;
        if let Some(id) = self.carried[i] {
            return id;
        }
        let id = self.interner.intern(g, self.old[i].clone());
        self.carried[i] = Some(id);
        id
    }
}

/// Finds a graph's constants by value through a hash of their bits, so interning is
/// not a scan of every constant (a model may have one per node).
#[derive(Default)]
struct Interner {
    by_hash: HashMap<u64, Vec<ConstId>>,
}

impl Interner {
    /// The constant's id, reusing one with the same bits.
    fn intern(&mut self, g: &mut Graph, t: Constant) -> ConstId {
        let mut h = DefaultHasher::new();
        t.hash_bits(&mut h);
        let bucket = self.by_hash.entry(h.finish()).or_default();
        if let Some(&id) = bucket.iter().find(|id| g.consts[id.0 as usize].same_bits(&t)) {
            return id;
        }
        let id = ConstId(g.consts.len() as u32);
        g.consts.push(t);
        bucket.push(id);
        id
    }
}

/// Every element of `v` equals `x` (a constant).
fn is_splat(g: &Graph, v: ValueId, x: f64) -> bool {
    match g.node(v).op {
        Op::Constant(c) => g.consts[c.0 as usize].values().all(|y| y == x),
        _ => false,
    }
}

/// reshape(reshape(x)) == reshape(x): a view of a view is one view of the source (a
/// weight stored in one layout and viewed through another, as ONNX's 1-D conv bias of
/// a `[1, C, 1, 1]` parameter); [`identity`] then drops it where it gives x's shape. The
/// inner reshape goes when nothing else reads it.
fn compose_reshapes(g: &Graph, n: &mut Node) {
    if let Op::Reshape { .. } = n.op {
        let inner = g.node(n.args[0]);
        if let Op::Reshape { .. } = inner.op {
            n.args[0] = inner.args[0];
        }
    }
}

/// An existing value equal to `n`, by a named rule.
fn identity(g: &Graph, n: &Node) -> Option<ValueId> {
    let same_type = |v: ValueId| *g.ty(v) == n.ty;
    // The operand of a commutative op whose other operand is the op's unit.
    let beside_unit = |unit: f64| {
        let (a, b) = (n.args[0], n.args[1]);
        if is_splat(g, b, unit) && same_type(a) {
            Some(a)
        } else if is_splat(g, a, unit) && same_type(b) {
            Some(b)
        } else {
            None
        }
    };
    match &n.op {
        // x * 1 == x, 1 * x == x
        Op::Binary(BinaryOp::Mul) => beside_unit(1.0),
        // x + 0 == x, 0 + x == x
        Op::Binary(BinaryOp::Add) => beside_unit(0.0),
        // x - 0 == x, x / 1 == x
        Op::Binary(BinaryOp::Sub) if is_splat(g, n.args[1], 0.0) && same_type(n.args[0]) => Some(n.args[0]),
        Op::Binary(BinaryOp::Div) if is_splat(g, n.args[1], 1.0) && same_type(n.args[0]) => Some(n.args[0]),
        // cast(x: T) to T == x; reshape(x) to x's shape == x; transpose by the identity == x
        Op::Cast { .. } | Op::Reshape { .. } | Op::BroadcastTo { .. } if same_type(n.args[0]) => Some(n.args[0]),
        Op::Transpose { perm } if perm.iter().enumerate().all(|(i, &p)| i == p) => Some(n.args[0]),
        // slice taking everything == x
        Op::Slice { ranges } if same_type(n.args[0]) && ranges.iter().all(|r| r.step == 1) => Some(n.args[0]),
        _ => None,
    }
}

/// `n` evaluated at compile time, when all its arguments are constants and the result
/// is small.
fn fold(g: &Graph, n: &Node) -> Result<Option<Tensor>> {
    let foldable = match n.op {
        Op::Input | Op::Param | Op::Constant(_) | Op::StopGradient => false,
        _ => !n.args.is_empty() && n.args.iter().all(|a| matches!(g.node(*a).op, Op::Constant(_))),
    };
    if !foldable || n.ty.shape.numel().is_none_or(|k| k > FOLD_LIMIT) {
        return Ok(None);
    }
    // Widened to f64 tensors, as the interpreter computes.
    let args: Vec<Tensor> = n
        .args
        .iter()
        .map(|a| match g.node(*a).op {
            Op::Constant(c) => g.consts[c.0 as usize].to_tensor(),
            _ => unreachable!("checked above: every argument is a constant"),
        })
        .collect();
    let args: Vec<&Tensor> = args.iter().collect();
    Ok(Some(crate::interp::eval_op(&n.op, &args, &n.ty, &g.consts)?))
}

/// Keeps what the outputs need (plus every input and parameter), renumbered in order.
fn sweep(g: Graph) -> Graph {
    let mut live = vec![false; g.nodes.len()];
    for o in &g.outputs {
        live[o.value.index()] = true;
    }
    for i in (0..g.nodes.len()).rev() {
        if matches!(g.nodes[i].op, Op::Input | Op::Param) {
            live[i] = true;
        }
        if live[i] {
            for a in &g.nodes[i].args {
                live[a.index()] = true;
            }
        }
    }
    let mut out = Graph { warnings: g.warnings, ..Graph::new(g.name.clone()) };
    let mut map = vec![ValueId(0); g.nodes.len()];
    let mut consts = Consts::new(g.consts);
    for (i, node) in g.nodes.into_iter().enumerate() {
        if !live[i] {
            continue;
        }
        let mut node = node;
        node.args = node.args.iter().map(|a| map[a.index()]).collect();
        if let Op::Constant(c) = node.op {
            node.op = Op::Constant(consts.carry(c, &mut out));
        }
        map[i] = ValueId(out.nodes.len() as u32);
        out.nodes.push(node);
    }
    out.outputs = g.outputs.iter().map(|o| Output { name: o.name.clone(), value: map[o.value.index()], loss: o.loss }).collect();
    out
}
