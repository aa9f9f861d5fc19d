//! Reverse-mode automatic differentiation: appends the backward graph.
//!
//! For every float model output `NAME` the graph gains an input `output_grad/NAME` (the
//! output's cotangent, as Mithril's `evaluate(..., output_gradients=...)` takes it), and
//! for every parameter differentiated an output `grad/NAME`: the sum over outputs of
//! the vector-Jacobian products. A model with a loss output (a Mithril TrainModel's
//! `final_cost`) is differentiated through the loss alone, with a cotangent of one,
//! and takes no `output_grad` inputs. The backward graph is made of ordinary IR ops, so it
//! runs through the same passes and targets as the forward graph.
//!
//! [`vjp`] is the one place that says how each op differentiates, in terms of other
//! ops. An op it cannot differentiate is an error naming the node, never a wrong
//! gradient; ops with no gradient (comparisons, `floor`, indices) pass none on.

use std::collections::{BTreeSet, HashMap};

use crate::error::{Error, ErrorKind, Result};
use crate::ir::*;
use crate::ir::builder::Builder;
use crate::passes::shape::describe_node;

/// Which parameters to differentiate with respect to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Wrt {
    /// No gradients: the pass does nothing.
    #[default]
    None,
    /// Every parameter (what Mithril marks differentiable).
    AllParams,
    /// These parameters, by name.
    Params(Vec<String>),
}

/// The input that carries output `name`'s cotangent.
pub fn output_grad_name(name: &str) -> String {
    format!("output_grad/{name}")
}

/// The output that carries parameter `name`'s gradient.
pub fn grad_name(name: &str) -> String {
    format!("grad/{name}")
}

/// Appends the backward graph for `wrt` (see the module documentation).
pub fn run(graph: &mut Graph, wrt: &Wrt) -> Result<()> {
    let targets: Vec<ValueId> = match wrt {
        Wrt::None => return Ok(()),
        Wrt::AllParams => graph.params().collect(),
        Wrt::Params(names) => {
            // The parameters by name, looked up once per name asked for.
            let mut params: HashMap<&str, ValueId> = HashMap::new();
            for v in graph.params() {
                if let Some(name) = &graph.node(v).name {
                    params.entry(name.as_str()).or_insert(v);
                }
            }
            let mut out = Vec::new();
            for name in names {
                let v = params.get(name.as_str()).copied().ok_or_else(|| {
                    let params: Vec<String> = graph.params().filter_map(|p| graph.node(p).name.clone()).collect();
                    Error::user(format!("--grad {name}: the model has no parameter `{name}`"))
                        .note(format!("its parameters: {}", if params.is_empty() { "none".to_string() } else { params.join(", ") }))
                })?;
                out.push(v);
            }
            out
        }
    };
    // Values that depend on a target: only they carry gradients.
    let mut active = vec![false; graph.nodes.len()];
    for &t in &targets {
        active[t.index()] = true;
    }
    for v in graph.ids() {
        let n = graph.node(v);
        if n.op != Op::StopGradient && n.ty.dtype.is_float() && n.args.iter().any(|a| active[a.index()]) {
            active[v.index()] = true;
        }
    }
    let forward = graph.nodes.len();
    let mut b = Builder::rewriting(std::mem::take(graph), "autodiff");
    let mut cot: Vec<Option<ValueId>> = vec![None; forward];
    // A model with a loss is differentiated through its loss alone, with a cotangent
    // of one (Mithril's TrainModel); otherwise every float output's cotangent is an
    // input, like Mithril's `output_gradients`.
    let outputs = b.graph.outputs.clone();
    let has_loss = outputs.iter().any(|o| o.loss);
    for out in &outputs {
        let ty = b.graph.ty(out.value).clone();
        if !ty.dtype.is_float() || has_loss && !out.loss {
            continue;
        }
        let seed = if out.loss {
            b.scalar(ty.dtype, 1.0)
        } else {
            b.input(&output_grad_name(&out.name), ty)
        };
        if active[out.value.index()] {
            b.accumulate(&mut cot, out.value, seed)?;
        }
    }
    for i in (0..forward).rev() {
        let v = ValueId(i as u32);
        let Some(dy) = cot[i] else { continue };
        let node = b.graph.node(v).clone();
        let needs: Vec<bool> = node.args.iter().map(|a| active[a.index()]).collect();
        if !needs.contains(&true) {
            continue;
        }
        b.origin = match &node.origin {
            Some(o) => format!("gradient of {} ({o})", node.op.name()),
            None => format!("gradient of {}", node.op.name()),
        };
        let grads = vjp(&mut b, v, &node, dy, &needs).map_err(|e| match e.kind {
            ErrorKind::Internal => e,
            _ => e.context(format!("cannot differentiate {}", describe_node(&b.graph, v))),
        })?;
        for ((&a, g), need) in node.args.iter().zip(grads).zip(needs) {
            if let (Some(g), true) = (g, need) {
                b.accumulate(&mut cot, a, g)?;
            }
        }
    }
    b.origin.clear();
    let mut seen = BTreeSet::new();
    for &t in &targets {
        if !seen.insert(t) {
            continue;
        }
        let name = b.graph.node(t).name.clone().unwrap_or_default();
        let g = match cot[t.index()] {
            Some(g) => g,
            // A parameter no output depends on: its gradient is zero.
            None => {
                let ty = b.graph.ty(t).clone();
                let zero = b.scalar(ty.dtype, 0.0);
                b.op(Op::BroadcastTo { shape: ty.shape }, vec![zero])?
            }
        };
        b.graph.outputs.push(Output { name: grad_name(&name), value: g, loss: false });
    }
    *graph = b.finish();
    Ok(())
}

/// What [`vjp`] does for `op`, for the docs' op table: `yes`, `zero` (no gradient
/// flows through it), or the cases it does not cover yet.
pub fn support(op: &Op) -> &'static str {
    match op {
        Op::Input | Op::Param | Op::Constant(_) | Op::Iota { .. } | Op::StopGradient | Op::ArgReduce { .. } => "zero",
        Op::Unary(UnaryOp::Sign | UnaryOp::Floor | UnaryOp::Not | UnaryOp::IsNan) => "zero",
        Op::Binary(b) if !matches!(b, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Pow | BinaryOp::Max | BinaryOp::Min) => "zero",
        Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. } | Op::MatMul | Op::Conv(_) | Op::Pool(_) => "yes",
        Op::Reduce { .. } | Op::Variance { .. } => "yes",
        Op::Softmax { .. } | Op::Reshape { .. } | Op::Transpose { .. } | Op::BroadcastTo { .. } | Op::Concat { .. } | Op::Pad { .. } => "yes",
        Op::Slice { .. } | Op::Gather { .. } => "yes",
    }
}

/// What the VJPs build beyond single nodes, on the shared [`Builder`]: the graph
/// being differentiated, every node marked with its origin (`gradient of ...`).
trait Gradients {
    fn mul(&mut self, x: ValueId, y: ValueId) -> Result<ValueId>;
    fn scale(&mut self, x: ValueId, c: f64) -> Result<ValueId>;
    fn mask(&mut self, cond: ValueId, x: ValueId) -> Result<ValueId>;
    fn reshaped(&mut self, x: ValueId, shape: Shape) -> Result<ValueId>;
    fn permuted(&mut self, x: ValueId, perm: Vec<usize>) -> Result<ValueId>;
    fn regroup(&mut self, x: ValueId, split: &[u64], perm: &[usize], joined: &[u64], rest: &[u64]) -> Result<ValueId>;
    fn sum(&mut self, x: ValueId, axes: Vec<usize>, keepdim: bool) -> Result<ValueId>;
    fn unbroadcast(&mut self, dy: ValueId, shape: &Shape) -> Result<ValueId>;
    fn expand(&mut self, dy: ValueId, shape: &Shape, axes: &[usize]) -> Result<ValueId>;
    fn accumulate(&mut self, cot: &mut [Option<ValueId>], v: ValueId, g: ValueId) -> Result<()>;
    fn pad_or_crop(&mut self, x: ValueId, axis: usize, lo: i64, hi: i64) -> Result<ValueId>;
    fn dilate(&mut self, x: ValueId, strides: &[u64]) -> Result<ValueId>;
    fn spread(&mut self, x: ValueId, axis: usize, s: u64) -> Result<ValueId>;
    fn unslice(&mut self, g: ValueId, ranges: &[SliceRange], shape: &[u64]) -> Result<ValueId>;
}

impl Gradients for Builder {
    fn mul(&mut self, x: ValueId, y: ValueId) -> Result<ValueId> {
        self.binary(BinaryOp::Mul, x, y)
    }

    /// `x * c` for a constant `c` of `x`'s type.
    fn scale(&mut self, x: ValueId, c: f64) -> Result<ValueId> {
        let c = self.scalar(self.graph.ty(x).dtype, c);
        self.mul(x, c)
    }

    /// `cond ? x : 0`.
    fn mask(&mut self, cond: ValueId, x: ValueId) -> Result<ValueId> {
        let zero = self.scalar(self.graph.ty(x).dtype, 0.0);
        self.op(Op::Where, vec![cond, x, zero])
    }

    /// `x` reshaped, with no node when it has the shape already.
    fn reshaped(&mut self, x: ValueId, shape: Shape) -> Result<ValueId> {
        if self.graph.ty(x).shape == shape {
            return Ok(x);
        }
        self.op(Op::Reshape { shape }, vec![x])
    }

    /// `x` transposed, with no node for the identity permutation.
    fn permuted(&mut self, x: ValueId, perm: Vec<usize>) -> Result<ValueId> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x);
        }
        self.op(Op::Transpose { perm }, vec![x])
    }

    /// `x` reshaped to [split..., rest...], its first `perm.len()` axes permuted, and
    /// reshaped to [joined..., rest...]: channels regrouped.
    fn regroup(&mut self, x: ValueId, split: &[u64], perm: &[usize], joined: &[u64], rest: &[u64]) -> Result<ValueId> {
        let with_rest = |head: &[u64]| Shape::known(&[head, rest].concat());
        let r = self.reshaped(x, with_rest(split))?;
        let t = self.permuted(r, perm.iter().copied().chain(perm.len()..perm.len() + rest.len()).collect())?;
        self.reshaped(t, with_rest(joined))
    }

    fn sum(&mut self, x: ValueId, axes: Vec<usize>, keepdim: bool) -> Result<ValueId> {
        if axes.is_empty() {
            return Ok(x);
        }
        self.op(Op::Reduce { kind: ReduceKind::Sum, axes, keepdim }, vec![x])
    }

    /// Sums `dy` down to `shape`, undoing NumPy broadcasting (the VJP of a broadcast).
    fn unbroadcast(&mut self, dy: ValueId, shape: &Shape) -> Result<ValueId> {
        let from = self.shape(dy);
        if &from == shape {
            return Ok(dy);
        }
        let lead = from.rank() - shape.rank();
        let axes: Vec<usize> = (0..from.rank())
            .filter(|&i| i < lead || (shape.dims()[i - lead].is_one() && !from.dims()[i].is_one()))
            .collect();
        let summed = self.sum(dy, axes, true)?;
        self.reshaped(summed, shape.clone())
    }

    /// `dy` (shaped like a reduction of `shape` over `axes`) broadcast back to `shape`.
    fn expand(&mut self, dy: ValueId, shape: &Shape, axes: &[usize]) -> Result<ValueId> {
        let kept = Shape(shape.dims().iter().enumerate().map(|(i, d)| if axes.contains(&i) { Dim::Known(1) } else { d.clone() }).collect());
        let r = self.reshaped(dy, kept)?;
        if self.shape(r) == *shape {
            return Ok(r);
        }
        self.op(Op::BroadcastTo { shape: shape.clone() }, vec![r])
    }

    /// Adds `g` to `v`'s cotangent.
    fn accumulate(&mut self, cot: &mut [Option<ValueId>], v: ValueId, g: ValueId) -> Result<()> {
        let shape = self.shape(v);
        let mut g = self.unbroadcast(g, &shape)?;
        let dtype = self.graph.ty(v).dtype;
        if self.graph.ty(g).dtype != dtype {
            g = self.op(Op::Cast { to: dtype }, vec![g])?;
        }
        cot[v.index()] = Some(match cot[v.index()] {
            None => g,
            Some(prev) => self.binary(BinaryOp::Add, prev, g)?,
        });
        Ok(())
    }

    /// Pads (positive) or crops (negative) `x` along `axis` by `lo` before and `hi` after.
    fn pad_or_crop(&mut self, x: ValueId, axis: usize, lo: i64, hi: i64) -> Result<ValueId> {
        let rank = self.graph.ty(x).rank();
        let mut x = x;
        if lo > 0 || hi > 0 {
            let mut pads = vec![(0, 0); rank];
            pads[axis] = (lo.max(0) as u64, hi.max(0) as u64);
            x = self.op(Op::Pad { pads, value: 0.0 }, vec![x])?;
        }
        if lo < 0 || hi < 0 {
            let mut ranges = vec![SliceRange::FULL; rank];
            ranges[axis] = SliceRange { start: Some((-lo).max(0)), stop: if hi < 0 { Some(hi) } else { None }, step: 1 };
            x = self.op(Op::Slice { ranges }, vec![x])?;
        }
        Ok(x)
    }

    /// `x` with `s - 1` zeros inserted between neighbours along each trailing spatial
    /// axis (`strides[i]` for axis `2 + i`): the VJP of a strided window's sampling.
    fn dilate(&mut self, x: ValueId, strides: &[u64]) -> Result<ValueId> {
        if strides.iter().all(|&s| s == 1) {
            return Ok(x);
        }
        let mut y = x;
        for (i, &s) in strides.iter().enumerate() {
            y = self.spread(y, 2 + i, s)?;
        }
        Ok(y)
    }

    /// `x` with `s - 1` zeros between neighbours along `axis` (length L to (L-1)s + 1):
    /// [.., L, ..] as [.., L, 1, ..], padded to [.., L, s, ..], flattened and cropped.
    fn spread(&mut self, x: ValueId, axis: usize, s: u64) -> Result<ValueId> {
        let shape = known(&self.shape(x))?;
        if s == 1 || shape[axis] == 0 {
            return Ok(x);
        }
        let mut split = shape.clone();
        split.insert(axis + 1, 1);
        let r = self.reshaped(x, Shape::known(&split))?;
        let mut pads = vec![(0, 0); split.len()];
        pads[axis + 1] = (0, s - 1);
        let p = self.op(Op::Pad { pads, value: 0.0 }, vec![r])?;
        let mut flat = shape;
        flat[axis] *= s;
        let y = self.reshaped(p, Shape::known(&flat))?;
        self.pad_or_crop(y, axis, 0, -(s as i64 - 1))
    }

    /// The VJP of a slice of a `shape`d value: `g` put back where `ranges` took it
    /// from, zeros elsewhere.
    fn unslice(&mut self, g: ValueId, ranges: &[SliceRange], shape: &[u64]) -> Result<ValueId> {
        let mut g = g;
        for (axis, r) in ranges.iter().enumerate() {
            let (start, step, len) = r.resolve(shape[axis]).map_err(Error::internal)?;
            if r.is_full() {
                continue;
            }
            if len == 0 {
                // Nothing taken: the gradient is zero.
                let dtype = self.graph.ty(g).dtype;
                let zero = self.scalar(dtype, 0.0);
                return self.op(Op::BroadcastTo { shape: Shape::known(shape) }, vec![zero]);
            }
            // A negative step takes elements in reverse: reverse the cotangent, so it
            // runs forwards from the last element taken.
            let first = if step < 0 {
                let mut ranges = vec![SliceRange::FULL; shape.len()];
                ranges[axis] = SliceRange { start: None, stop: None, step: -1 };
                g = self.op(Op::Slice { ranges }, vec![g])?;
                start + step * (len as i64 - 1)
            } else {
                start
            };
            let s = step.unsigned_abs();
            g = self.spread(g, axis, s)?;
            let hi = shape[axis] as i64 - first - ((len as i64 - 1) * s as i64 + 1);
            g = self.pad_or_crop(g, axis, first, hi)?;
        }
        Ok(g)
    }
}

/// The VJP of composite `c` of `a`, given `dy`, as that of its decomposition: the
/// primitives computing `c(a)` (`decompose::expand`) appended to the backward graph,
/// and differentiated back to `a` in reverse order, as [`run`] does the whole graph.
fn through_decomposition(b: &mut Builder, c: Composite, a: ValueId, dy: ValueId) -> Result<ValueId> {
    let start = b.graph.nodes.len();
    let y = crate::passes::decompose::expand(b, c, a)?;
    let end = b.graph.nodes.len();
    // Values of the decomposition that depend on `a`: only they carry gradients.
    let mut active = vec![false; end];
    active[a.index()] = true;
    for i in start..end {
        let n = &b.graph.nodes[i];
        active[i] = n.ty.dtype.is_float() && n.args.iter().any(|u| active[u.index()]);
    }
    let mut cot: Vec<Option<ValueId>> = vec![None; end];
    cot[y.index()] = Some(dy);
    for i in (start..end).rev() {
        let Some(g) = cot[i] else { continue };
        let node = b.graph.nodes[i].clone();
        let needs: Vec<bool> = node.args.iter().map(|u| active[u.index()]).collect();
        if !needs.contains(&true) {
            continue;
        }
        let grads = vjp(b, ValueId(i as u32), &node, g, &needs)?;
        for ((&u, g), need) in node.args.iter().zip(grads).zip(needs) {
            if let (Some(g), true) = (g, need) {
                b.accumulate(&mut cot, u, g)?;
            }
        }
    }
    cot[a.index()].ok_or_else(|| Error::internal(format!("the decomposition of {} does not depend on its argument", c.name())))
}

fn known(shape: &Shape) -> Result<Vec<u64>> {
    shape.as_known().ok_or_else(|| Error::user(format!("its gradient needs static shapes here, not {shape}")))
}

/// How many elements a reduction of `shape` over `axes` combines.
fn reduced_count(shape: &Shape, axes: &[usize]) -> Result<u64> {
    axes.iter().try_fold(1u64, |n, &i| {
        let d = shape.dims()[i].known().ok_or_else(|| Error::user(format!("its gradient needs a static size along axis {i} of {shape}")))?;
        n.checked_mul(d).ok_or_else(|| Error::user(format!("{shape} has more elements than a 64-bit index can count")))
    })
}

/// The vector-Jacobian product of node `v` (`node`): given `dy`, the cotangent of its
/// value, the cotangent of each argument (`None`: zero, or not needed). Only arguments
/// with `needs[i]` are computed.
fn vjp(b: &mut Builder, v: ValueId, node: &Node, dy: ValueId, needs: &[bool]) -> Result<Vec<Option<ValueId>>> {
    let x = |i: usize| node.args[i];
    let y = v;
    Ok(match &node.op {
        Op::Input | Op::Param | Op::Constant(_) | Op::Iota { .. } | Op::StopGradient | Op::ArgReduce { .. } => {
            vec![None; node.args.len()]
        }
        Op::Unary(u) => {
            let a = x(0);
            let g = match u {
                UnaryOp::Neg => b.unary(UnaryOp::Neg, dy)?,
                UnaryOp::Abs => {
                    let s = b.unary(UnaryOp::Sign, a)?;
                    b.mul(dy, s)?
                }
                UnaryOp::Sign | UnaryOp::Floor | UnaryOp::Not | UnaryOp::IsNan => return Ok(vec![None]),
                UnaryOp::Exp => b.mul(dy, y)?,
                UnaryOp::Log => b.binary(BinaryOp::Div, dy, a)?,
                UnaryOp::Sqrt => {
                    let h = b.scale(dy, 0.5)?;
                    b.binary(BinaryOp::Div, h, y)?
                }
                UnaryOp::Sin => {
                    let c = b.unary(UnaryOp::Cos, a)?;
                    b.mul(dy, c)?
                }
                UnaryOp::Cos => {
                    let s = b.unary(UnaryOp::Sin, a)?;
                    let n = b.unary(UnaryOp::Neg, s)?;
                    b.mul(dy, n)?
                }
                UnaryOp::Tanh => {
                    // dy * (1 - y^2)
                    let y2 = b.mul(y, y)?;
                    let one = b.scalar(b.graph.ty(y).dtype, 1.0);
                    let d = b.binary(BinaryOp::Sub, one, y2)?;
                    b.mul(dy, d)?
                }
                UnaryOp::Atan => {
                    // dy / (1 + x^2)
                    let x2 = b.mul(a, a)?;
                    let one = b.scalar(b.graph.ty(a).dtype, 1.0);
                    let d = b.binary(BinaryOp::Add, one, x2)?;
                    b.binary(BinaryOp::Div, dy, d)?
                }
                UnaryOp::Relu => {
                    let zero = b.scalar(b.graph.ty(a).dtype, 0.0);
                    let pos = b.binary(BinaryOp::Gt, a, zero)?;
                    b.mask(pos, dy)?
                }
                UnaryOp::Erf => {
                    // 2 / sqrt(pi) exp(-x^2)
                    let x2 = b.mul(a, a)?;
                    let n = b.unary(UnaryOp::Neg, x2)?;
                    let e = b.unary(UnaryOp::Exp, n)?;
                    let d = b.scale(e, 2.0 / std::f64::consts::PI.sqrt())?;
                    b.mul(dy, d)?
                }
                // The composites' own VJPs, where they are simpler than their
                // decompositions'; any other is differentiated through its decomposition.
                UnaryOp::Composite(c) => match c {
                    Composite::Sigmoid => {
                        let one = b.scalar(b.graph.ty(y).dtype, 1.0);
                        let c = b.binary(BinaryOp::Sub, one, y)?;
                        let d = b.mul(y, c)?;
                        b.mul(dy, d)?
                    }
                    Composite::Gelu => {
                        // Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2
                        let t = b.scale(a, std::f64::consts::FRAC_1_SQRT_2)?;
                        let e = b.unary(UnaryOp::Erf, t)?;
                        let one = b.scalar(b.graph.ty(a).dtype, 1.0);
                        let e1 = b.binary(BinaryOp::Add, e, one)?;
                        let cdf = b.scale(e1, 0.5)?;
                        let x2 = b.mul(a, a)?;
                        let m = b.scale(x2, -0.5)?;
                        let ex = b.unary(UnaryOp::Exp, m)?;
                        let pdf = b.scale(ex, 1.0 / (2.0 * std::f64::consts::PI).sqrt())?;
                        let xp = b.mul(a, pdf)?;
                        let d = b.binary(BinaryOp::Add, cdf, xp)?;
                        b.mul(dy, d)?
                    }
                    Composite::GeluTanh => {
                        // u = c (x + k x^3), t = tanh u:
                        // d = (1 + t) / 2 + x (1 - t^2) c (1 + 3 k x^2) / 2
                        let (c, k) = ((2.0 / std::f64::consts::PI).sqrt(), 0.044715);
                        let dt = b.graph.ty(a).dtype;
                        let x2 = b.mul(a, a)?;
                        let x3 = b.mul(x2, a)?;
                        let kx3 = b.scale(x3, k)?;
                        let inner = b.binary(BinaryOp::Add, a, kx3)?;
                        let u = b.scale(inner, c)?;
                        let t = b.unary(UnaryOp::Tanh, u)?;
                        let one = b.scalar(dt, 1.0);
                        let t1 = b.binary(BinaryOp::Add, one, t)?;
                        let first = b.scale(t1, 0.5)?;
                        let t2 = b.mul(t, t)?;
                        let sech2 = b.binary(BinaryOp::Sub, one, t2)?;
                        let kx2 = b.scale(x2, 3.0 * k)?;
                        let du = b.binary(BinaryOp::Add, one, kx2)?;
                        let du = b.scale(du, 0.5 * c)?;
                        let xs = b.mul(a, sech2)?;
                        let second = b.mul(xs, du)?;
                        let d = b.binary(BinaryOp::Add, first, second)?;
                        b.mul(dy, d)?
                    }
                    Composite::Softplus => {
                        let s = b.unary(UnaryOp::Composite(Composite::Sigmoid), a)?;
                        b.mul(dy, s)?
                    }
                    #[allow(unreachable_patterns)] // the composites without a VJP of their own
                    _ => through_decomposition(b, *c, a, dy)?,
                },
            };
            vec![Some(g)]
        }
        Op::Binary(op) => {
            let (l, r) = (x(0), x(1));
            let (gl, gr) = match op {
                BinaryOp::Add => (Some(dy), Some(dy)),
                BinaryOp::Sub => (Some(dy), if needs[1] { Some(b.unary(UnaryOp::Neg, dy)?) } else { None }),
                BinaryOp::Mul => (
                    if needs[0] { Some(b.mul(dy, r)?) } else { None },
                    if needs[1] { Some(b.mul(dy, l)?) } else { None },
                ),
                BinaryOp::Div => {
                    let gl = b.binary(BinaryOp::Div, dy, r)?;
                    let gr = if needs[1] {
                        // -dy * l / r^2 = -(dy / r) * y
                        let t = b.mul(gl, y)?;
                        Some(b.unary(UnaryOp::Neg, t)?)
                    } else {
                        None
                    };
                    (Some(gl), gr)
                }
                BinaryOp::Pow => {
                    let gl = if needs[0] {
                        // dy * r * l^(r - 1)
                        let one = b.scalar(b.graph.ty(r).dtype, 1.0);
                        let rm1 = b.binary(BinaryOp::Sub, r, one)?;
                        let p = b.binary(BinaryOp::Pow, l, rm1)?;
                        let d = b.mul(r, p)?;
                        Some(b.mul(dy, d)?)
                    } else {
                        None
                    };
                    let gr = if needs[1] {
                        // dy * y * log(l)
                        let lg = b.unary(UnaryOp::Log, l)?;
                        let d = b.mul(y, lg)?;
                        Some(b.mul(dy, d)?)
                    } else {
                        None
                    };
                    (gl, gr)
                }
                BinaryOp::Max | BinaryOp::Min => {
                    // The larger (smaller) argument gets it; a tie splits it evenly, as
                    // JAX and Torch do (Mithril's NumPy backend has no gradient for
                    // these), which gives Mithril's subgradients of the losses built on
                    // them: 0.5 for a hinge at its margin, q - 0.5 for a quantile loss.
                    let cmp = if *op == BinaryOp::Max { BinaryOp::Gt } else { BinaryOp::Lt };
                    let tie = b.binary(BinaryOp::Eq, l, r)?;
                    let half = b.scale(dy, 0.5)?;
                    let zero = b.scalar(b.graph.ty(dy).dtype, 0.0);
                    let side = |b: &mut Builder, win: ValueId| -> Result<ValueId> {
                        let lose = b.op(Op::Where, vec![tie, half, zero])?;
                        b.op(Op::Where, vec![win, dy, lose])
                    };
                    let gl = if needs[0] {
                        let win = b.binary(cmp, l, r)?;
                        Some(side(b, win)?)
                    } else {
                        None
                    };
                    let gr = if needs[1] {
                        let win = b.binary(cmp, r, l)?;
                        Some(side(b, win)?)
                    } else {
                        None
                    };
                    (gl, gr)
                }
                _ => (None, None),
            };
            vec![gl, gr]
        }
        Op::Where => {
            let c = x(0);
            let zero = b.scalar(b.graph.ty(dy).dtype, 0.0);
            let ga = if needs[1] { Some(b.op(Op::Where, vec![c, dy, zero])?) } else { None };
            let gb = if needs[2] { Some(b.op(Op::Where, vec![c, zero, dy])?) } else { None };
            vec![None, ga, gb]
        }
        Op::Cast { .. } => {
            let from = b.graph.ty(x(0)).dtype;
            vec![if from.is_float() { Some(b.op(Op::Cast { to: from }, vec![dy])?) } else { None }]
        }
        Op::MatMul => matmul_vjp(b, x(0), x(1), dy, needs)?,
        Op::Conv(attrs) => conv_vjp(b, node, attrs, dy, needs)?,
        Op::Pool(attrs) => vec![Some(pool_vjp(b, x(0), y, attrs, dy)?)],
        Op::Reduce { kind, axes, keepdim } => {
            let a = x(0);
            let shape = b.shape(a);
            let spread = |b: &mut Builder, t: ValueId| b.expand(t, &shape, axes);
            let g = match kind {
                ReduceKind::Sum => spread(b, dy)?,
                ReduceKind::Mean => {
                    let s = b.scale(dy, 1.0 / reduced_count(&shape, axes)? as f64)?;
                    spread(b, s)?
                }
                ReduceKind::Max | ReduceKind::Min => {
                    // Split evenly among the elements equal to the extreme, as Mithril's
                    // `reduce_max_grad` (and JAX and Torch) do.
                    let yb = spread(b, y)?;
                    let hit = b.binary(BinaryOp::Eq, a, yb)?;
                    let ones = b.op(Op::Cast { to: b.graph.ty(dy).dtype }, vec![hit])?;
                    let count = b.op(Op::Reduce { kind: ReduceKind::Sum, axes: axes.clone(), keepdim: *keepdim }, vec![ones])?;
                    let share = b.binary(BinaryOp::Div, dy, count)?;
                    let shareb = spread(b, share)?;
                    b.mask(hit, shareb)?
                }
                ReduceKind::Prod => {
                    // The product of the other elements: y / x, except at a zero, where
                    // it is the product of the rest (zero when another element is zero too).
                    let dt = b.graph.ty(a).dtype;
                    let zero = b.scalar(dt, 0.0);
                    let one = b.scalar(dt, 1.0);
                    let is_zero = b.binary(BinaryOp::Eq, a, zero)?;
                    let nonzero = b.op(Op::Where, vec![is_zero, one, a])?;
                    let flags = b.op(Op::Cast { to: dt }, vec![is_zero])?;
                    let zeros = b.op(Op::Reduce { kind: ReduceKind::Sum, axes: axes.clone(), keepdim: *keepdim }, vec![flags])?;
                    let lone = b.binary(BinaryOp::Eq, zeros, one)?;
                    let rest = b.op(Op::Reduce { kind: ReduceKind::Prod, axes: axes.clone(), keepdim: *keepdim }, vec![nonzero])?;
                    let rest = b.mask(lone, rest)?;
                    let (yb, restb) = (spread(b, y)?, spread(b, rest)?);
                    let others = b.binary(BinaryOp::Div, yb, nonzero)?;
                    let d = b.op(Op::Where, vec![is_zero, restb, others])?;
                    let dyb = spread(b, dy)?;
                    b.mul(dyb, d)?
                }
            };
            vec![Some(g)]
        }
        Op::Variance { axes, correction, .. } => {
            // dy * 2 (x - mean) / (n - correction)
            let a = x(0);
            let shape = b.shape(a);
            let n = reduced_count(&shape, axes)?;
            let mean = b.op(Op::Reduce { kind: ReduceKind::Mean, axes: axes.clone(), keepdim: true }, vec![a])?;
            let centered = b.binary(BinaryOp::Sub, a, mean)?;
            let s = b.scale(centered, 2.0 / (n as f64 - correction))?;
            let dyb = b.expand(dy, &shape, axes)?;
            vec![Some(b.mul(dyb, s)?)]
        }
        Op::Softmax { axis } => {
            // y * (dy - sum(dy * y, axis))
            let p = b.mul(dy, y)?;
            let s = b.sum(p, vec![*axis], true)?;
            let d = b.binary(BinaryOp::Sub, dy, s)?;
            vec![Some(b.mul(y, d)?)]
        }
        Op::Reshape { .. } => {
            let shape = b.shape(x(0));
            vec![Some(b.reshaped(dy, shape)?)]
        }
        Op::Transpose { perm } => {
            let mut inv = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            vec![Some(b.permuted(dy, inv)?)]
        }
        Op::BroadcastTo { .. } => vec![Some(dy)], // summed back by `accumulate`
        Op::Slice { ranges } => {
            let shape = known(&b.shape(x(0)))?;
            vec![Some(b.unslice(dy, ranges, &shape)?)]
        }
        Op::Pad { pads, .. } => {
            let mut g = dy;
            for (axis, &(lo, hi)) in pads.iter().enumerate() {
                if (lo, hi) != (0, 0) {
                    g = b.pad_or_crop(g, axis, -(lo as i64), -(hi as i64))?;
                }
            }
            vec![Some(g)]
        }
        Op::Concat { axis } => {
            let mut out = Vec::new();
            let mut start = 0i64;
            let total = known(&b.shape(dy))?[*axis] as i64;
            for (i, &a) in node.args.iter().enumerate() {
                let n = known(&b.shape(a))?[*axis] as i64;
                out.push(if needs[i] { Some(b.pad_or_crop(dy, *axis, -start, -(total - start - n))?) } else { None });
                start += n;
            }
            out
        }
        Op::Gather { axis } => {
            // d data = one_hot(indices)^T @ dy, over the flattened indices, batched over
            // the dimensions before `axis`.
            let (data, idx) = (x(0), x(1));
            let dshape = known(&b.shape(data))?;
            let count = known(&b.shape(idx))?.iter().product::<u64>();
            let before: u64 = dshape[..*axis].iter().product();
            let rest: u64 = dshape[axis + 1..].iter().product();
            let flat_idx = b.reshaped(idx, Shape::known(&[count, 1]))?;
            let idx_dtype = b.graph.ty(idx).dtype;
            let iota = b.op(Op::Iota { shape: Shape::known(&[count, dshape[*axis]]), axis: 1, dtype: idx_dtype }, vec![])?;
            let hit = b.binary(BinaryOp::Eq, iota, flat_idx)?;
            let dt = b.graph.ty(dy).dtype;
            let onehot = b.op(Op::Cast { to: dt }, vec![hit])?;
            let oh_t = b.permuted(onehot, vec![1, 0])?;
            let dy2 = if *axis == 0 { b.reshaped(dy, Shape::known(&[count, rest]))? } else { b.reshaped(dy, Shape::known(&[before, count, rest]))? };
            let g = b.op(Op::MatMul, vec![oh_t, dy2])?;
            vec![Some(b.reshaped(g, Shape::known(&dshape))?), None]
        }
    })
}

/// NumPy matmul's VJP: `da = dy @ b^T`, `db = a^T @ dy`, with rank-1 operands promoted
/// to matrices and broadcast batch dimensions summed back (by `accumulate`).
fn matmul_vjp(b: &mut Builder, a: ValueId, m: ValueId, dy: ValueId, needs: &[bool]) -> Result<Vec<Option<ValueId>>> {
    let (sa, sm) = (b.shape(a), b.shape(m));
    let a2 = if sa.rank() == 1 { b.reshaped(a, Shape(vec![Dim::Known(1), sa.dims()[0].clone()]))? } else { a };
    let m2 = if sm.rank() == 1 { b.reshaped(m, Shape(vec![sm.dims()[0].clone(), Dim::Known(1)]))? } else { m };
    // dy with the promoted dimensions back
    let mut dshape = b.shape(dy).0;
    if sa.rank() == 1 {
        let at = dshape.len() - if sm.rank() == 1 { 0 } else { 1 };
        dshape.insert(at, Dim::Known(1));
    }
    if sm.rank() == 1 {
        dshape.push(Dim::Known(1));
    }
    let dy2 = b.reshaped(dy, Shape(dshape))?;
    let swap = |rank: usize| -> Vec<usize> {
        let mut p: Vec<usize> = (0..rank).collect();
        p.swap(rank - 2, rank - 1);
        p
    };
    // lhs @ rhs, summed back over `like`'s broadcast batch dimensions, in `shape`
    let product = |b: &mut Builder, lhs: ValueId, rhs: ValueId, like: ValueId, shape: Shape| -> Result<ValueId> {
        let g = b.op(Op::MatMul, vec![lhs, rhs])?;
        let g = b.unbroadcast(g, &b.shape(like))?;
        b.reshaped(g, shape)
    };
    let ga = if needs[0] {
        let mt = b.permuted(m2, swap(b.graph.ty(m2).rank()))?;
        Some(product(b, dy2, mt, a2, sa)?)
    } else {
        None
    };
    let gm = if needs[1] {
        let at = b.permuted(a2, swap(b.graph.ty(a2).rank()))?;
        Some(product(b, at, dy2, m2, sm)?)
    } else {
        None
    };
    Ok(vec![ga, gm])
}

/// Convolution's VJP, as convolutions with the same groups:
/// - input: the full correlation of `dy` (zeros inserted for the stride) with the
///   flipped weight, its channels transposed within each group, padded or cropped
///   back to the input's size;
/// - weight: the correlation of the (padded) input with `dy`, batch and channels
///   swapped (the batch joins each group's channels), stride and dilation swapped,
///   cropped to the kernel's size;
/// - bias: `dy` summed over everything but the channels.
fn conv_vjp(b: &mut Builder, node: &Node, attrs: &ConvAttrs, dy: ValueId, needs: &[bool]) -> Result<Vec<Option<ValueId>>> {
    let (x, w) = (node.args[0], node.args[1]);
    let n = attrs.stride.len();
    let groups = attrs.groups;
    let xs = known(&b.shape(x))?;
    let ws = known(&b.shape(w))?;
    let ys = known(&b.shape(dy))?;
    let (o_per, c_per) = (ws[0] / groups, ws[1]);
    let swap01: Vec<usize> = [1, 0].into_iter().chain(2..2 + n).collect();
    let mut out = vec![None; node.args.len()];
    if needs[0] && xs.contains(&0) {
        // An empty input (its windows lie in the padding) has an empty gradient; the
        // full convolution below would have no window to run.
        let zero = b.scalar(b.graph.ty(x).dtype, 0.0);
        out[0] = Some(b.op(Op::BroadcastTo { shape: Shape::known(&xs) }, vec![zero])?);
    } else if needs[0] {
        let mut g = b.dilate(dy, &attrs.stride)?;
        for i in 0..n {
            let (k, d, s) = (ws[2 + i] as i64, attrs.dilation[i] as i64, attrs.stride[i] as i64);
            let (p_lo, h, oh) = (attrs.padding[i].0 as i64, xs[2 + i] as i64, ys[2 + i] as i64);
            let lo = d * (k - 1) - p_lo;
            let hi = h - 1 + p_lo - (oh - 1) * s;
            g = b.pad_or_crop(g, 2 + i, lo, hi)?;
        }
        // w [O, C/G, k...] flipped, as [G, O/G, C/G, k...] -> [G, C/G, O/G, k...] -> [C, O/G, k...]
        let mut ranges = vec![SliceRange::FULL; 2];
        ranges.extend((0..n).map(|_| SliceRange { start: None, stop: None, step: -1 }));
        let flipped = b.op(Op::Slice { ranges }, vec![w])?;
        let wt = if groups == 1 {
            b.permuted(flipped, swap01.clone())?
        } else {
            b.regroup(flipped, &[groups, o_per, c_per], &[0, 2, 1], &[groups * c_per, o_per], &ws[2..])?
        };
        let full = ConvAttrs { stride: vec![1; n], padding: vec![(0, 0); n], dilation: attrs.dilation.clone(), groups };
        out[0] = Some(b.op(Op::Conv(full), vec![g, wt])?);
    }
    if needs[1] {
        // x [N, C, H...] as [N, G, C/G, H...] -> [C/G, G, N, H...] -> [C/G, G*N, H...]
        // (padded), correlated in G groups with dy^T [O, N, OH...]: [C/G, O, >= k...]
        let xt = if groups == 1 {
            b.permuted(x, swap01.clone())?
        } else {
            b.regroup(x, &[xs[0], groups, c_per], &[2, 1, 0], &[c_per, groups * xs[0]], &xs[2..])?
        };
        let dyt = b.permuted(dy, swap01.clone())?;
        let swapped = ConvAttrs { stride: attrs.dilation.clone(), padding: attrs.padding.clone(), dilation: attrs.stride.clone(), groups };
        let mut g = b.op(Op::Conv(swapped), vec![xt, dyt])?;
        let gs = known(&b.shape(g))?;
        for i in 0..n {
            g = b.pad_or_crop(g, 2 + i, 0, ws[2 + i] as i64 - gs[2 + i] as i64)?;
        }
        out[1] = Some(b.permuted(g, swap01)?);
    }
    if node.args.len() > 2 && needs[2] {
        out[2] = Some(dy); // summed to the bias's shape by `accumulate`
    }
    Ok(out)
}

/// Pooling's VJP: each window's cotangent goes to its maximum (max pooling: to every
/// element equal to it, as for a max reduction) or is spread evenly over the whole
/// window, padding included (average pooling). Windows that tile the input are a
/// reshape away from a reduction; any other window is taken one kernel tap at a time:
/// a tap reads a strided slice of the padded input, so its share of the cotangent goes
/// back through that slice's VJP.
fn pool_vjp(b: &mut Builder, x: ValueId, y: ValueId, attrs: &PoolAttrs, dy: ValueId) -> Result<ValueId> {
    if attrs.stride == attrs.kernel && attrs.padding.iter().all(|&p| p == (0, 0)) && attrs.dilation.iter().all(|&d| d == 1) {
        return tiled_pool_vjp(b, x, y, attrs, dy);
    }
    let n = attrs.kernel.len();
    let xs = known(&b.shape(x))?;
    let ys = known(&b.shape(y))?;
    let lead = xs.len() - n;
    let mut padded = xs.clone();
    for i in 0..n {
        padded[lead + i] += attrs.padding[i].0 + attrs.padding[i].1;
    }
    let mut pads = vec![(0, 0); lead];
    pads.extend(&attrs.padding);
    // One strided slice and pad per tap: a window past a few thousand taps would build
    // a graph larger than any model's, so it is refused rather than unrolled.
    const MAX_TAPS: u64 = 1 << 12;
    let taps = attrs.kernel.iter().try_fold(1u64, |n, &k| n.checked_mul(k)).filter(|&t| t <= MAX_TAPS).ok_or_else(|| {
        Error::user(format!(
            "the gradient of a pooling window of kernel {:?} with stride {:?}, padding or dilation is not supported beyond {MAX_TAPS} taps",
            attrs.kernel, attrs.stride
        ))
    })?;
    let share = match attrs.kind {
        // Padding never wins a max.
        PoolKind::Max => b.op(Op::Pad { pads, value: f64::NEG_INFINITY }, vec![x])?,
        PoolKind::Avg => b.scale(dy, 1.0 / taps as f64)?,
    };
    let mut g: Option<ValueId> = None;
    for tap in 0..taps {
        // the tap's position in the window, last axis fastest
        let mut at = tap;
        let mut ranges = vec![SliceRange::FULL; lead + n];
        for i in (0..n).rev() {
            let (k, d, s) = (attrs.kernel[i], attrs.dilation[i], attrs.stride[i]);
            let start = (at % k * d) as i64;
            at /= k;
            let stop = start + ((ys[lead + i] - 1) * s) as i64 + 1;
            ranges[lead + i] = SliceRange { start: Some(start), stop: Some(stop), step: s as i64 };
        }
        let part = match attrs.kind {
            PoolKind::Max => {
                let seen = b.op(Op::Slice { ranges: ranges.clone() }, vec![share])?;
                let hit = b.binary(BinaryOp::Eq, seen, y)?;
                b.mask(hit, dy)?
            }
            PoolKind::Avg => share,
        };
        let part = b.unslice(part, &ranges, &padded)?;
        g = Some(match g {
            None => part,
            Some(sum) => b.binary(BinaryOp::Add, sum, part)?,
        });
    }
    let mut g = g.ok_or_else(|| Error::internal("a pooling window with no taps"))?;
    for i in 0..n {
        let (lo, hi) = attrs.padding[i];
        g = b.pad_or_crop(g, lead + i, -(lo as i64), -(hi as i64))?;
    }
    Ok(g)
}

/// Pooling's VJP for windows that tile the input (stride = kernel, no padding or
/// dilation): the input viewed as [.., OH, k, OW, k] against y and dy as
/// [.., OH, 1, OW, 1]; rows and columns past the last window get zero.
fn tiled_pool_vjp(b: &mut Builder, x: ValueId, y: ValueId, attrs: &PoolAttrs, dy: ValueId) -> Result<ValueId> {
    let n = attrs.kernel.len();
    let xs = known(&b.shape(x))?;
    let ys = known(&b.shape(y))?;
    let lead = xs.len() - n;
    let mut split = xs[..lead].to_vec();
    let mut ones = xs[..lead].to_vec();
    let mut covered = x;
    for i in 0..n {
        let k = attrs.kernel[i];
        covered = b.pad_or_crop(covered, lead + i, 0, -((xs[lead + i] - ys[lead + i] * k) as i64))?;
        split.extend([ys[lead + i], k]);
        ones.extend([ys[lead + i], 1]);
    }
    let xr = b.reshaped(covered, Shape::known(&split))?;
    let dyr = b.reshaped(dy, Shape::known(&ones))?;
    let dyb = b.op(Op::BroadcastTo { shape: Shape::known(&split) }, vec![dyr])?;
    let g = match attrs.kind {
        PoolKind::Max => {
            let yr = b.reshaped(y, Shape::known(&ones))?;
            let hit = b.binary(BinaryOp::Eq, xr, yr)?;
            b.mask(hit, dyb)?
        }
        PoolKind::Avg => b.scale(dyb, 1.0 / attrs.kernel.iter().product::<u64>() as f64)?,
    };
    let mut flat = xs[..lead].to_vec();
    flat.extend((0..n).map(|i| ys[lead + i] * attrs.kernel[i]));
    let mut g = b.reshaped(g, Shape::known(&flat))?;
    for i in 0..n {
        g = b.pad_or_crop(g, lead + i, 0, (xs[lead + i] - flat[lead + i]) as i64)?;
    }
    Ok(g)
}
