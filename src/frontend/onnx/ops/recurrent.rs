//! Recurrent layers (RNN, GRU, LSTM), unrolled over the sequence, whose length must be
//! known when compiling. The input projection of every step is one product (`x Wᵀ +
//! b` over the whole sequence); each step then adds its state's product with `Rᵀ` and
//! applies the gates. Directions `forward`, `reverse` and `bidirectional`, layouts 0
//! and 1, `clip`, GRU's `linear_before_reset`, LSTM's peepholes, and the activation
//! functions below are read; `sequence_lens` (known or not) in forward direction only:
//! past its end a batch entry's state stops and its outputs are 0.

use super::index::dims;
use super::shape::take;
use super::Cx;
use crate::frontend::onnx::node::{invalid, unsupported, Fail, Node, Out};
use crate::ir::{BinaryOp, Composite, Op, Shape, UnaryOp, ValueId};

type Res<T> = std::result::Result<T, Fail>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rnn,
    Gru,
    Lstm,
}

impl Kind {
    /// Gates stacked in `W` and `R`: RNN's one, GRU's z, r, h, LSTM's i, o, f, c.
    fn gates(self) -> u64 {
        match self {
            Kind::Rnn => 1,
            Kind::Gru => 3,
            Kind::Lstm => 4,
        }
    }

    /// The activation functions of one direction by default (f; f, g; f, g, h).
    fn activations(self) -> &'static [&'static str] {
        match self {
            Kind::Rnn => &["Tanh"],
            Kind::Gru => &["Sigmoid", "Tanh"],
            Kind::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// One of the `activations`, with the `activation_alpha`/`activation_beta` it takes.
struct Activation {
    name: String,
    alpha: f64,
    beta: f64,
}

impl Activation {
    /// Whether the function takes an alpha and a beta (consumed from the attributes'
    /// lists in order, by the functions that take them).
    fn params(name: &str) -> (bool, bool) {
        match name {
            "Affine" | "ScaledTanh" | "HardSigmoid" => (true, true),
            "LeakyRelu" | "ThresholdedRelu" | "Elu" => (true, false),
            _ => (false, false),
        }
    }

    fn apply(&self, cx: &mut Cx, x: ValueId) -> Res<ValueId> {
        use BinaryOp::*;
        let d = cx.b.dtype(x);
        let (alpha, beta, zero, one) = (cx.b.scalar(d, self.alpha), cx.b.scalar(d, self.beta), cx.b.scalar(d, 0.0), cx.b.scalar(d, 1.0));
        Ok(match self.name.as_str() {
            "Tanh" => cx.b.unary(UnaryOp::Tanh, x)?,
            "Sigmoid" => cx.b.unary(UnaryOp::Composite(Composite::Sigmoid), x)?,
            "Relu" => cx.b.unary(UnaryOp::Relu, x)?,
            "Softsign" => {
                let a = cx.b.unary(UnaryOp::Abs, x)?;
                let d = cx.b.binary(Add, a, one)?;
                cx.b.binary(Div, x, d)?
            }
            "Softplus" => cx.b.unary(UnaryOp::Composite(Composite::Softplus), x)?,
            "Affine" => {
                let ax = cx.b.binary(Mul, x, alpha)?;
                cx.b.binary(Add, ax, beta)?
            }
            "ScaledTanh" => {
                let bx = cx.b.binary(Mul, x, beta)?;
                let t = cx.b.unary(UnaryOp::Tanh, bx)?;
                cx.b.binary(Mul, t, alpha)?
            }
            "HardSigmoid" => {
                let ax = cx.b.binary(Mul, x, alpha)?;
                let axb = cx.b.binary(Add, ax, beta)?;
                let lo = cx.b.binary(Max, axb, zero)?;
                cx.b.binary(Min, lo, one)?
            }
            "LeakyRelu" => {
                let ax = cx.b.binary(Mul, x, alpha)?;
                let pos = cx.b.binary(Gt, x, zero)?;
                cx.b.select(pos, x, ax)?
            }
            "ThresholdedRelu" => {
                let above = cx.b.binary(Gt, x, alpha)?;
                cx.b.select(above, x, zero)?
            }
            "Elu" => {
                let e = cx.b.unary(UnaryOp::Exp, x)?;
                let em1 = cx.b.binary(Sub, e, one)?;
                let neg = cx.b.binary(Mul, em1, alpha)?;
                let pos = cx.b.binary(Gt, x, zero)?;
                cx.b.select(pos, x, neg)?
            }
            other => return unsupported(format!("activation function {other}")),
        })
    }
}

/// The node's activation functions, `per` for each direction, in order.
fn activations(node: &Node, kind: Kind, directions: usize) -> Res<Vec<Activation>> {
    let names = match node.strings("activations")? {
        Some(list) => list,
        None => kind.activations().iter().cycle().take(kind.activations().len() * directions).map(|s| s.to_string()).collect(),
    };
    if names.len() != kind.activations().len() * directions {
        return invalid(format!("{} of {directions} direction(s) takes {} activation functions, got {}", node.op_type, kind.activations().len() * directions, names.len()));
    }
    let (mut alphas, mut betas) = (node.floats("activation_alpha")?.unwrap_or_default().into_iter(), node.floats("activation_beta")?.unwrap_or_default().into_iter());
    let mut out = Vec::new();
    for name in names {
        let (a, b) = Activation::params(&name);
        // ONNX's defaults where the lists run out (those of the operators of the names).
        let alpha = if a { alphas.next() } else { None }.unwrap_or(if name == "LeakyRelu" { 0.01 } else if name == "HardSigmoid" { 0.2 } else { 1.0 });
        let beta = if b { betas.next() } else { None }.unwrap_or(if name == "HardSigmoid" { 0.5 } else { 0.0 });
        out.push(Activation { name, alpha, beta });
    }
    Ok(out)
}

/// What every step of one direction reads.
struct Direction {
    /// `x Wᵀ + b` for the whole sequence, `[seq, batch, gates * hidden]` (GRU's `b`
    /// without `R`'s bias, which its h gate needs apart).
    xw: ValueId,
    /// `Rᵀ`, `[hidden, gates * hidden]`.
    rt: ValueId,
    /// `R`'s bias (GRU), `[gates * hidden]`.
    rb: Option<ValueId>,
    /// LSTM's peepholes i, o, f, each `[hidden]`.
    peep: Option<[ValueId; 3]>,
    acts: Vec<Activation>,
}

pub fn rnn(cx: &mut Cx, node: &Node) -> Out {
    recurrent(cx, node, Kind::Rnn)
}

pub fn gru(cx: &mut Cx, node: &Node) -> Out {
    recurrent(cx, node, Kind::Gru)
}

pub fn lstm(cx: &mut Cx, node: &Node) -> Out {
    recurrent(cx, node, Kind::Lstm)
}

fn recurrent(cx: &mut Cx, node: &Node, kind: Kind) -> Out {
    let op = node.op_type;
    let (x, w, r) = (node.input(0)?, node.input(1)?, node.input(2)?);
    let layout = node.int("layout", 0)?;
    if !(0..=1).contains(&layout) {
        return invalid(format!("{op}'s layout is 0 or 1, got {layout}"));
    }
    let reverse: &[bool] = match node.string_or("direction", "forward")?.as_str() {
        "forward" => &[false],
        "reverse" => &[true],
        "bidirectional" => &[false, true],
        d => return invalid(format!("{op}'s direction is forward, reverse or bidirectional, got {d:?}")),
    };
    if kind == Kind::Lstm && node.int("input_forget", 0)? != 0 {
        return unsupported("LSTM with input_forget");
    }
    let x = if layout == 1 { cx.b.transpose(x, vec![1, 0, 2])? } else { x };
    let (xd, rd) = (dims(cx, x, op)?, dims(cx, r, op)?);
    let (g, dirs) = (kind.gates(), reverse.len() as u64);
    let [seq, batch, _] = xd[..] else { return invalid(format!("{op}'s X is [seq, batch, input], got {}", cx.b.shape(node.input(0)?))) };
    let &[rdirs, rows, hidden] = &rd[..] else { return invalid(format!("{op}'s R is [directions, gates * hidden, hidden], got {}", cx.b.shape(r))) };
    if rdirs != dirs || rows != g * hidden || node.int_opt("hidden_size")?.is_some_and(|h| h as u64 != hidden) {
        return invalid(format!("{op}'s R is {}, and {dirs} direction(s) of {g} gate(s) of hidden size {hidden} take [{dirs}, {}, {hidden}]", cx.b.shape(r), g * hidden));
    }
    if seq == 0 {
        return unsupported(format!("{op} of an empty sequence"));
    }
    let clip = if node.has("clip") { Some(node.float("clip", 0.0)?) } else { None };
    let lbr = kind == Kind::Gru && node.int("linear_before_reset", 0)? != 0;
    let mut acts = activations(node, kind, reverse.len())?.into_iter();
    let dtype = cx.b.dtype(x);
    // Past a batch entry's length its state stops and its outputs are 0.
    let lengths = match node.opt(4) {
        None => None,
        Some(_) if reverse.contains(&true) => return unsupported(format!("{op} with sequence_lens in direction reverse or bidirectional")),
        Some(l) => Some(cx.b.reshape(l, Shape::known(&[batch, 1]))?),
    };
    // Initial states, [directions, batch, hidden] (layout 1: [batch, directions, hidden]).
    let initial = |cx: &mut Cx, i: usize| -> Res<Option<ValueId>> {
        Ok(match node.opt(i) {
            Some(v) if layout == 1 => Some(cx.b.transpose(v, vec![1, 0, 2])?),
            v => v,
        })
    };
    let (h0, c0) = (initial(cx, 5)?, if kind == Kind::Lstm { initial(cx, 6)? } else { None });
    let mut ys = Vec::new();
    let (mut hs, mut cs) = (Vec::new(), Vec::new());
    for (d, &rev) in reverse.iter().enumerate() {
        let d = d as u64;
        let pick = |cx: &mut Cx, v: ValueId, shape: &[u64]| -> Res<ValueId> {
            let one = take(cx, v, 0, d, 1)?;
            Ok(cx.b.reshape(one, Shape::known(shape))?)
        };
        let wd = pick(cx, w, &[g * hidden, xd[2]])?;
        let rdm = pick(cx, r, &[g * hidden, hidden])?;
        let rt = cx.b.transpose(rdm, vec![1, 0])?;
        let (wb, rb) = match node.opt(3) {
            Some(b) => {
                let bd = pick(cx, b, &[2 * g * hidden])?;
                (Some(take(cx, bd, 0, 0, g * hidden)?), Some(take(cx, bd, 0, g * hidden, g * hidden)?))
            }
            None => (None, None),
        };
        let (bias, rb) = match (wb, rb) {
            (Some(wb), Some(rb)) if kind != Kind::Gru => (Some(cx.b.binary(BinaryOp::Add, wb, rb)?), None),
            other => other,
        };
        let xw = cx.b.linear(x, wd, bias)?;
        let peep = match node.opt(7).filter(|_| kind == Kind::Lstm) {
            Some(p) => {
                let pd = pick(cx, p, &[3 * hidden])?;
                Some([take(cx, pd, 0, 0, hidden)?, take(cx, pd, 0, hidden, hidden)?, take(cx, pd, 0, 2 * hidden, hidden)?])
            }
            None => None,
        };
        let dir = Direction { xw, rt, rb, peep, acts: acts.by_ref().take(kind.activations().len()).collect() };
        let state = |cx: &mut Cx, v: Option<ValueId>| -> Res<ValueId> {
            match v {
                Some(v) => pick(cx, v, &[batch, hidden]),
                None => Ok(cx.b.full(dtype, Shape::known(&[batch, hidden]), 0.0)?),
            }
        };
        let (mut h, mut c) = (state(cx, h0)?, state(cx, c0)?);
        let mut outs = vec![None; seq as usize];
        let order: Vec<u64> = if rev { (0..seq).rev().collect() } else { (0..seq).collect() };
        for t in order {
            let xt = take(cx, dir.xw, 0, t, 1)?;
            let xt = cx.b.reshape(xt, Shape::known(&[batch, g * hidden]))?;
            let (h_new, c_new) = step(cx, kind, &dir, xt, h, c, clip, lbr, hidden)?;
            let y = match lengths {
                Some(l) => {
                    let tt = cx.b.scalar(cx.b.dtype(l), t as f64);
                    let live = cx.b.binary(BinaryOp::Gt, l, tt)?;
                    h = cx.b.select(live, h_new, h)?;
                    c = cx.b.select(live, c_new, c)?;
                    let zero = cx.b.scalar(dtype, 0.0);
                    cx.b.select(live, h_new, zero)?
                }
                None => {
                    (h, c) = (h_new, c_new);
                    h_new
                }
            };
            outs[t as usize] = Some(cx.b.reshape(y, Shape::known(&[1, 1, batch, hidden]))?);
        }
        let outs: Vec<ValueId> = outs.into_iter().flatten().collect();
        ys.push(concat(cx, outs, 0)?);
        hs.push(cx.b.reshape(h, Shape::known(&[1, batch, hidden]))?);
        cs.push(cx.b.reshape(c, Shape::known(&[1, batch, hidden]))?);
    }
    let (mut y, mut yh, mut yc) = (concat(cx, ys, 1)?, concat(cx, hs, 0)?, concat(cx, cs, 0)?);
    if layout == 1 {
        y = cx.b.transpose(y, vec![2, 0, 1, 3])?;
        yh = cx.b.transpose(yh, vec![1, 0, 2])?;
        yc = cx.b.transpose(yc, vec![1, 0, 2])?;
    }
    Ok(if kind == Kind::Lstm { vec![y, yh, yc] } else { vec![y, yh] })
}

/// `parts` joined along `axis` (one part is itself).
fn concat(cx: &mut Cx, parts: Vec<ValueId>, axis: usize) -> Res<ValueId> {
    Ok(if parts.len() == 1 { parts[0] } else { cx.b.op(Op::Concat { axis }, parts)? })
}

/// One time step: the new hidden state and (LSTM) cell state from the step's input
/// projection `xt` `[batch, gates * hidden]` and the previous states.
#[allow(clippy::too_many_arguments)]
fn step(cx: &mut Cx, kind: Kind, dir: &Direction, xt: ValueId, h: ValueId, c: ValueId, clip: Option<f64>, lbr: bool, hidden: u64) -> Res<(ValueId, ValueId)> {
    use BinaryOp::*;
    let dtype = cx.b.dtype(xt);
    // The activation's argument, clipped to [-clip, clip] when asked.
    let act = |cx: &mut Cx, k: usize, v: ValueId| -> Res<ValueId> {
        let v = match clip {
            Some(c) => {
                let (lo, hi) = (cx.b.scalar(dtype, -c), cx.b.scalar(dtype, c));
                let v = cx.b.binary(Max, v, lo)?;
                cx.b.binary(Min, v, hi)?
            }
            None => v,
        };
        dir.acts[k].apply(cx, v)
    };
    let gate = |cx: &mut Cx, v: ValueId, k: u64| -> Res<ValueId> { Ok(take(cx, v, 1, k * hidden, hidden)?) };
    match kind {
        Kind::Rnn => {
            let hr = cx.b.matmul(h, dir.rt)?;
            let pre = cx.b.binary(Add, xt, hr)?;
            Ok((act(cx, 0, pre)?, c))
        }
        Kind::Lstm => {
            let hr = cx.b.matmul(h, dir.rt)?;
            let pre = cx.b.binary(Add, xt, hr)?;
            let [mut i, mut o, mut f, cc] = [gate(cx, pre, 0)?, gate(cx, pre, 1)?, gate(cx, pre, 2)?, gate(cx, pre, 3)?];
            if let Some([pi, _, pf]) = dir.peep {
                let (ic, fc) = (cx.b.binary(Mul, pi, c)?, cx.b.binary(Mul, pf, c)?);
                (i, f) = (cx.b.binary(Add, i, ic)?, cx.b.binary(Add, f, fc)?);
            }
            let (i, f, cc) = (act(cx, 0, i)?, act(cx, 0, f)?, act(cx, 1, cc)?);
            let (kept, added) = (cx.b.binary(Mul, f, c)?, cx.b.binary(Mul, i, cc)?);
            let c_new = cx.b.binary(Add, kept, added)?;
            if let Some([_, po, _]) = dir.peep {
                let oc = cx.b.binary(Mul, po, c_new)?;
                o = cx.b.binary(Add, o, oc)?;
            }
            let o = act(cx, 0, o)?;
            let hc = act(cx, 2, c_new)?;
            Ok((cx.b.binary(Mul, o, hc)?, c_new))
        }
        Kind::Gru => {
            // z and r from x and h; h's candidate from x and r ⊙ h (or r ⊙ (h Rₕᵀ + Rbₕ)).
            let rt_zr = take(cx, dir.rt, 1, 0, 2 * hidden)?;
            let rt_h = take(cx, dir.rt, 1, 2 * hidden, hidden)?;
            let rb = |cx: &mut Cx, k: u64, n: u64| -> Res<Option<ValueId>> { dir.rb.map(|b| Ok(take(cx, b, 0, k * hidden, n * hidden)?)).transpose() };
            let mut hzr = cx.b.matmul(h, rt_zr)?;
            if let Some(b) = rb(cx, 0, 2)? {
                hzr = cx.b.binary(Add, hzr, b)?;
            }
            let z_pre = gate(cx, xt, 0)?;
            let hz = gate(cx, hzr, 0)?;
            let z_pre = cx.b.binary(Add, z_pre, hz)?;
            let r_pre = gate(cx, xt, 1)?;
            let hr = gate(cx, hzr, 1)?;
            let r_pre = cx.b.binary(Add, r_pre, hr)?;
            let (z, rg) = (act(cx, 0, z_pre)?, act(cx, 0, r_pre)?);
            let bh = rb(cx, 2, 1)?;
            let recur = if lbr {
                let mut p = cx.b.matmul(h, rt_h)?;
                if let Some(b) = bh {
                    p = cx.b.binary(Add, p, b)?;
                }
                cx.b.binary(Mul, rg, p)?
            } else {
                let rh = cx.b.binary(Mul, rg, h)?;
                let p = cx.b.matmul(rh, rt_h)?;
                match bh {
                    Some(b) => cx.b.binary(Add, p, b)?,
                    None => p,
                }
            };
            let xh = gate(cx, xt, 2)?;
            let h_pre = cx.b.binary(Add, xh, recur)?;
            let cand = act(cx, 1, h_pre)?;
            // (1 - z) ⊙ cand + z ⊙ h = cand + z ⊙ (h - cand)
            let diff = cx.b.binary(Sub, h, cand)?;
            let zd = cx.b.binary(Mul, z, diff)?;
            Ok((cx.b.binary(Add, cand, zd)?, c))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::index::tests::{check, run, t, Arg, A};
    use crate::ir::Dtype;
    use crate::tensor::Tensor;

    /// Values in [-0.5, 0.5) that differ from each other.
    fn values(n: u64, seed: u64) -> Vec<f64> {
        (0..n).map(|i| ((i * 7919 + seed * 104_729) % 97) as f64 / 97.0 - 0.5).collect()
    }

    fn f32s(shape: &[u64], data: Vec<f64>) -> Tensor {
        t(Dtype::F32, shape, &data)
    }

    /// `x` `[seq, rest...]` with its first axis reversed.
    fn reversed(x: &Tensor) -> Tensor {
        let row = (x.data.len() as u64 / x.shape[0]) as usize;
        let data = x.data.chunks(row).rev().flatten().copied().collect();
        Tensor::new(x.dtype, x.shape.clone(), data)
    }

    /// `x` `[dirs, rest...]` (or `[seq, dirs, rest...]` when `seq_first`), direction `d`.
    fn direction(x: &Tensor, d: usize, seq_first: bool) -> Vec<f64> {
        let (outer, dirs) = if seq_first { (x.shape[0] as usize, x.shape[1] as usize) } else { (1, x.shape[0] as usize) };
        let inner = x.data.len() / outer / dirs;
        (0..outer).flat_map(|o| x.data[(o * dirs + d) * inner..][..inner].to_vec()).collect()
    }

    /// A bidirectional layer is a forward one and a reverse one side by side, and the
    /// reverse one is the forward one over the reversed sequence, its outputs reversed
    /// back: for each operator, with `clip` (and GRU's `linear_before_reset`).
    #[test]
    fn bidirectional_is_forward_beside_reversed_forward() {
        let (seq, batch, input, hidden) = (4u64, 2u64, 3u64, 2u64);
        for (op, g) in [("RNN", 1), ("GRU", 3), ("LSTM", 4)] {
            let x = f32s(&[seq, batch, input], values(seq * batch * input, 1));
            let w = values(2 * g * hidden * input, 2);
            let r = values(2 * g * hidden * hidden, 3);
            let b = values(2 * 2 * g * hidden, 4);
            let half = |v: &[f64], d: usize| v[d * v.len() / 2..(d + 1) * v.len() / 2].to_vec();
            let attrs = |dir: &'static str| vec![("hidden_size", A::I(hidden as i64)), ("direction", A::S(dir)), ("clip", A::F(0.3)), ("linear_before_reset", A::I(1))];
            let attrs = |dir| attrs(dir).into_iter().filter(|(n, _)| op == "GRU" || *n != "linear_before_reset").collect::<Vec<_>>();
            let layer = |x: &Tensor, dirs: u64, w: Vec<f64>, r: Vec<f64>, b: Vec<f64>, dir: &'static str| {
                let args = vec![
                    Arg::Fed(x.clone()),
                    Arg::Known(f32s(&[dirs, g * hidden, input], w)),
                    Arg::Known(f32s(&[dirs, g * hidden, hidden], r)),
                    Arg::Known(f32s(&[dirs, 2 * g * hidden], b)),
                ];
                run(op, 14, &attrs(dir), args, 2).unwrap_or_else(|e| panic!("{op}: {e}"))
            };
            let both = layer(&x, 2, w.clone(), r.clone(), b.clone(), "bidirectional");
            let fwd = layer(&x, 1, half(&w, 0), half(&r, 0), half(&b, 0), "forward");
            let back = layer(&reversed(&x), 1, half(&w, 1), half(&r, 1), half(&b, 1), "forward");
            let rev = layer(&x, 1, half(&w, 1), half(&r, 1), half(&b, 1), "reverse");
            assert_eq!(both[0].shape, [seq, 2, batch, hidden], "{op}");
            check(&f32s(&[seq, batch, hidden], direction(&both[0], 0, true)), &[seq, batch, hidden], &fwd[0].data);
            let back_y = reversed(&back[0]);
            check(&f32s(&[seq, batch, hidden], direction(&both[0], 1, true)), &[seq, batch, hidden], &back_y.data);
            check(&rev[0], &[seq, 1, batch, hidden], &back_y.data);
            check(&f32s(&[batch, hidden], direction(&both[1], 1, false)), &[batch, hidden], &back[1].data);
        }
    }

    /// An RNN of one unit against the formula, `h = tanh(clip(w x + r h + wb + rb))`;
    /// with `sequence_lens` [3, 1] the second sequence stops after its first step
    /// (outputs 0 after, its last state that of step 0).
    #[test]
    fn rnn_steps_clip_and_stop_at_sequence_ends() {
        let xs = [0.5, -2.0, 1.5, 0.25, -1.0, 3.0];
        let (w, r, wb, rb, clip) = (0.8, -0.6, 0.1, -0.05, 1.0);
        let x = f32s(&[3, 2, 1], xs.to_vec());
        let args = |lens: bool| {
            let mut a = vec![Arg::Fed(x.clone()), Arg::Known(f32s(&[1, 1, 1], vec![w])), Arg::Known(f32s(&[1, 1, 1], vec![r])), Arg::Known(f32s(&[1, 2], vec![wb, rb]))];
            if lens {
                a.push(Arg::Fed(t(Dtype::I32, &[2], &[3.0, 1.0])));
            }
            a
        };
        let attrs = [("hidden_size", A::I(1)), ("clip", A::F(clip as f32))];
        let mut want = vec![0.0; 6];
        let mut h = [0.0f64; 2];
        for s in 0..3 {
            for bi in 0..2 {
                let pre: f64 = w * xs[s * 2 + bi] + r * h[bi] + wb + rb;
                h[bi] = pre.clamp(-clip, clip).tanh();
                want[s * 2 + bi] = h[bi];
            }
        }
        let out = run("RNN", 14, &attrs, args(false), 2).unwrap();
        check(&out[0], &[3, 1, 2, 1], &want);
        let stopped = run("RNN", 14, &attrs, args(true), 2).unwrap();
        let first = want[1];
        want[3] = 0.0;
        want[5] = 0.0;
        check(&stopped[0], &[3, 1, 2, 1], &want);
        check(&stopped[1], &[1, 2, 1], &[h[0], first]);
    }
}
