//! The optimizers of domain `ai.onnx.preview.training` (Adagrad, Adam, Momentum): one
//! update step of each of several tensors, elementwise. The inputs are the learning
//! rate `R` and the step count `T` (scalars, read at run time), then each tensor's
//! `X`, its gradient `G` and its state (`V`, `H`), grouped by kind: `X1 X2 G1 G2 ...`.
//! The outputs are grouped alike: every `X_new`, then every `V_new`, then `H_new`.

use super::Cx;
use crate::frontend::onnx::node::{invalid, Node, Out};
use crate::ir::{BinaryOp, UnaryOp, ValueId};

/// Elementwise arithmetic in one float type (`X`'s) for the update formulas.
struct Step<'a, 'b> {
    cx: &'a mut Cx<'b>,
    x: ValueId,
}

type R<T> = crate::error::Result<T>;

impl Step<'_, '_> {
    fn c(&mut self, v: f64) -> ValueId {
        let d = self.cx.b.dtype(self.x);
        self.cx.b.scalar(d, v)
    }
    /// `v` in `X`'s type (R and T come as f32 and i64).
    fn like(&mut self, v: ValueId) -> R<ValueId> {
        let d = self.cx.b.dtype(self.x);
        super::nn::convert(self.cx, v, d)
    }
    fn bin(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> R<ValueId> {
        self.cx.b.binary(op, a, b)
    }
    /// `a * k`.
    fn scale(&mut self, a: ValueId, k: f64) -> R<ValueId> {
        let k = self.c(k);
        self.bin(BinaryOp::Mul, a, k)
    }
    /// `a * ka + b * kb`.
    fn mix(&mut self, a: ValueId, ka: f64, b: ValueId, kb: f64) -> R<ValueId> {
        let (a, b) = (self.scale(a, ka)?, self.scale(b, kb)?);
        self.bin(BinaryOp::Add, a, b)
    }
    /// `sqrt(h) + eps`.
    fn root(&mut self, h: ValueId, eps: f64) -> R<ValueId> {
        let s = self.cx.b.unary(UnaryOp::Sqrt, h)?;
        let e = self.c(eps);
        self.bin(BinaryOp::Add, s, e)
    }
    /// `where(t > 0, a, b)`, `t` the step count.
    fn if_started(&mut self, t: ValueId, a: ValueId, b: ValueId) -> R<ValueId> {
        let zero = self.cx.b.scalar(self.cx.b.dtype(t), 0.0);
        let started = self.bin(BinaryOp::Gt, t, zero)?;
        self.cx.b.select(started, a, b)
    }
}

/// The node's tensor groups: `kinds` groups of `n` tensors after `R` and `T`.
fn groups(node: &Node, kinds: usize) -> std::result::Result<(usize, Vec<ValueId>), crate::frontend::onnx::node::Fail> {
    let inputs = node.all_inputs();
    let n = inputs.len().saturating_sub(2) / kinds;
    if n == 0 || inputs.len() != 2 + n * kinds {
        return invalid(format!("{} takes R, T and {kinds} tensors per optimized tensor, got {} inputs", node.op_type, inputs.len()));
    }
    Ok((n, inputs))
}

/// `Adagrad`: `g' = norm_coefficient x + g`, `h' = h + g'^2`,
/// `x' = x - R / (1 + T decay_factor) g' / (sqrt(h') + epsilon)`.
pub fn adagrad(cx: &mut Cx, node: &Node) -> Out {
    let (decay, eps, norm) = (node.float("decay_factor", 0.0)?, node.float("epsilon", 1e-6)?, node.float("norm_coefficient", 0.0)?);
    let (n, inputs) = groups(node, 3)?;
    let (mut xs, mut hs) = (Vec::new(), Vec::new());
    for i in 0..n {
        let (x, g, h) = (inputs[2 + i], inputs[2 + n + i], inputs[2 + 2 * n + i]);
        let mut s = Step { cx, x };
        let (r, t) = (s.like(inputs[0])?, s.like(inputs[1])?);
        let gr = s.mix(x, norm, g, 1.0)?;
        let g2 = s.bin(BinaryOp::Mul, gr, gr)?;
        let h_new = s.bin(BinaryOp::Add, h, g2)?;
        let denom = s.root(h_new, eps)?;
        let decayed = s.scale(t, decay)?;
        let one = s.c(1.0);
        let decayed = s.bin(BinaryOp::Add, decayed, one)?;
        let rate = s.bin(BinaryOp::Div, r, decayed)?;
        let step = s.bin(BinaryOp::Mul, rate, gr)?;
        let step = s.bin(BinaryOp::Div, step, denom)?;
        xs.push(s.bin(BinaryOp::Sub, x, step)?);
        hs.push(h_new);
    }
    Ok([xs, hs].concat())
}

/// `Adam`: `g' = norm_coefficient x + g`, `v' = alpha v + (1 - alpha) g'`,
/// `h' = beta h + (1 - beta) g'^2`, the rate `R sqrt(1 - beta^T) / (1 - alpha^T)`
/// (`R` at `T = 0`), `x' = (1 - norm_coefficient_post) (x - rate v' / (sqrt(h') +
/// epsilon))`.
pub fn adam(cx: &mut Cx, node: &Node) -> Out {
    let (alpha, beta, eps) = (node.float("alpha", 0.9)?, node.float("beta", 0.999)?, node.float("epsilon", 1e-6)?);
    let (norm, post) = (node.float("norm_coefficient", 0.0)?, node.float("norm_coefficient_post", 0.0)?);
    let (n, inputs) = groups(node, 4)?;
    let (mut xs, mut vs, mut hs) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let (x, g, v, h) = (inputs[2 + i], inputs[2 + n + i], inputs[2 + 2 * n + i], inputs[2 + 3 * n + i]);
        let mut s = Step { cx, x };
        let (r, t) = (s.like(inputs[0])?, s.like(inputs[1])?);
        let gr = s.mix(x, norm, g, 1.0)?;
        let v_new = s.mix(v, alpha, gr, 1.0 - alpha)?;
        let g2 = s.bin(BinaryOp::Mul, gr, gr)?;
        let h_new = s.mix(h, beta, g2, 1.0 - beta)?;
        let denom = s.root(h_new, eps)?;
        // 1 - k^T for k = beta, alpha
        let one = s.c(1.0);
        let corrected = |s: &mut Step, k: f64| -> R<ValueId> {
            let k = s.c(k);
            let p = s.bin(BinaryOp::Pow, k, t)?;
            s.bin(BinaryOp::Sub, one, p)
        };
        let (cb, ca) = (corrected(&mut s, beta)?, corrected(&mut s, alpha)?);
        let root = s.cx.b.unary(UnaryOp::Sqrt, cb)?;
        let rate = s.bin(BinaryOp::Mul, r, root)?;
        let rate = s.bin(BinaryOp::Div, rate, ca)?;
        let rate = s.if_started(inputs[1], rate, r)?;
        let q = s.bin(BinaryOp::Div, v_new, denom)?;
        let step = s.bin(BinaryOp::Mul, rate, q)?;
        let moved = s.bin(BinaryOp::Sub, x, step)?;
        xs.push(s.scale(moved, 1.0 - post)?);
        vs.push(v_new);
        hs.push(h_new);
    }
    Ok([xs, vs, hs].concat())
}

/// `Momentum`: `g' = norm_coefficient x + g`, `v' = alpha v + beta' g'` (`beta' = 1`
/// at `T = 0`, else `beta`), and `x' = x - R v'` (mode `standard`) or
/// `x' = x - R (g' + alpha v')` (mode `nesterov`).
pub fn momentum(cx: &mut Cx, node: &Node) -> Out {
    if let Some(missing) = ["alpha", "beta", "mode", "norm_coefficient"].into_iter().find(|a| !node.has(a)) {
        return invalid(format!("Momentum needs attribute {missing}"));
    }
    let (alpha, beta, norm) = (node.float("alpha", 0.0)?, node.float("beta", 0.0)?, node.float("norm_coefficient", 0.0)?);
    let nesterov = match node.string_or("mode", "")?.as_str() {
        "standard" => false,
        "nesterov" => true,
        m => return invalid(format!("Momentum's mode is standard or nesterov, got {m:?}")),
    };
    let (n, inputs) = groups(node, 3)?;
    let (mut xs, mut vs) = (Vec::new(), Vec::new());
    for i in 0..n {
        let (x, g, v) = (inputs[2 + i], inputs[2 + n + i], inputs[2 + 2 * n + i]);
        let mut s = Step { cx, x };
        let r = s.like(inputs[0])?;
        let gr = s.mix(x, norm, g, 1.0)?;
        let (b, one) = (s.c(beta), s.c(1.0));
        let b = s.if_started(inputs[1], b, one)?;
        let av = s.scale(v, alpha)?;
        let bg = s.bin(BinaryOp::Mul, b, gr)?;
        let v_new = s.bin(BinaryOp::Add, av, bg)?;
        let dir = if nesterov { s.mix(gr, 1.0, v_new, alpha)? } else { v_new };
        let step = s.bin(BinaryOp::Mul, r, dir)?;
        xs.push(s.bin(BinaryOp::Sub, x, step)?);
        vs.push(v_new);
    }
    Ok([xs, vs].concat())
}
