//! `decompose`: rewrites each composite op ([`Composite`]) that a target does not claim
//! into the primitives it is made of, by one named rule per composite ([`expand`]).
//!
//! It runs once per target, between the shared graph passes and the target
//! (`pipeline::emit`), so a composite stays whole where the target's library computes
//! it (C's `mr_sigmoidf`, ggml's `ggml_sigmoid`, HLO's `logistic`) and works everywhere
//! else. A rule's nodes carry the composite's origin and, when it had one, its name; they
//! compute in the composite's result type (an integer argument is cast first, as the
//! composite's shape rule converts it). Each rule is written in a form that is stable for
//! large |x| (no overflow into NaN, no cancellation where the interpreter's kernel has
//! none), and its test compares it with the interpreter's kernel on awkward values.

use crate::error::{Error, Result};
use crate::ir::builder::Builder;
use crate::ir::*;

/// Rewrites every composite of `graph` that `claims` does not claim into primitives.
/// A graph with none is left as it is.
pub fn run(graph: &mut Graph, claims: impl Fn(Composite) -> bool) -> Result<()> {
    let unclaimed = |n: &Node| matches!(n.op, Op::Unary(UnaryOp::Composite(c)) if !claims(c));
    // A rule may use another composite: each round expands one level, and the rules
    // nest less deep than there are composites.
    for _ in 0..=Composite::ALL.len() {
        if !graph.nodes.iter().any(unclaimed) {
            return Ok(());
        }
        rewrite(graph, &unclaimed)?;
    }
    Err(Error::internal("decompose: the rules use each other in a circle"))
}

/// Whether `graph` has a composite that `claims` does not claim (that [`run`] rewrites).
pub fn needed(graph: &Graph, claims: impl Fn(Composite) -> bool) -> bool {
    graph.nodes.iter().any(|n| matches!(n.op, Op::Unary(UnaryOp::Composite(c)) if !claims(c)))
}

/// One round: the graph rebuilt with each node that `unclaimed` picks replaced by its
/// rule's nodes.
fn rewrite(graph: &mut Graph, unclaimed: &impl Fn(&Node) -> bool) -> Result<()> {
    let old = std::mem::take(graph);
    // The constants keep their ids; a rule's constants are added after them.
    let fresh = Graph { name: old.name, consts: old.consts, warnings: old.warnings, ..Graph::default() };
    let mut b = Builder::rewriting(fresh, "decompose");
    let mut map: Vec<ValueId> = Vec::with_capacity(old.nodes.len());
    for node in old.nodes {
        let args: Vec<ValueId> = node.args.iter().map(|a| map[a.index()]).collect();
        let composite = match node.op {
            Op::Unary(UnaryOp::Composite(c)) if unclaimed(&node) => Some(c),
            _ => None,
        };
        let Some(c) = composite else {
            let v = b.graph.push(node.op, args, node.ty);
            let n = &mut b.graph.nodes[v.index()];
            (n.name, n.origin) = (node.name, node.origin);
            map.push(v);
            continue;
        };
        let start = b.graph.nodes.len();
        let x = match b.dtype(args[0]) == node.ty.dtype {
            true => args[0],
            false => b.cast(args[0], node.ty.dtype)?,
        };
        let y = expand(&mut b, c, x)?;
        if b.graph.ty(y) != &node.ty {
            return Err(Error::internal(format!("decompose: the rule for {} made {}, not {}", c.name(), b.graph.ty(y), node.ty)));
        }
        for n in &mut b.graph.nodes[start..] {
            n.origin.clone_from(&node.origin);
        }
        if y.index() >= start {
            b.graph.nodes[y.index()].name = node.name;
        }
        map.push(y);
    }
    b.graph.outputs = old.outputs.into_iter().map(|o| Output { value: map[o.value.index()], ..o }).collect();
    *graph = b.finish();
    Ok(())
}

/// The rule for composite `c`: appends the nodes computing `c(x)` to `b` (`x` of the
/// composite's float result type) and returns the last. Each arm's first line is its
/// identity.
pub fn expand(b: &mut Builder, c: Composite, x: ValueId) -> Result<ValueId> {
    use BinaryOp as B;
    let t = b.dtype(x);
    let scalar = |b: &mut Builder, v: f64| b.scalar(t, v);
    match c {
        // sigmoid(x) = 1 / (1 + e) for x >= 0, else e / (1 + e), with e = exp(-|x|) <= 1:
        // nothing overflows, and tiny results for x << 0 keep their precision.
        Composite::Sigmoid => {
            let a = b.unary(UnaryOp::Abs, x)?;
            let n = b.unary(UnaryOp::Neg, a)?;
            let e = b.unary(UnaryOp::Exp, n)?;
            let one = scalar(b, 1.0);
            let den = b.binary(B::Add, e, one)?;
            let s = b.binary(B::Div, one, den)?;
            let zero = scalar(b, 0.0);
            let pos = b.binary(B::Ge, x, zero)?;
            let es = b.binary(B::Mul, e, s)?;
            b.select(pos, s, es)
        }
        // gelu(x) = (x / 2) (1 + erf(x / sqrt 2)), halved first so that 2x cannot
        // overflow. (For x << 0, 1 + erf cancels: the result is close in absolute terms,
        // below |x| times the type's epsilon, not in relative ones.)
        Composite::Gelu => {
            let k = scalar(b, std::f64::consts::FRAC_1_SQRT_2);
            let s = b.binary(B::Mul, x, k)?;
            let e = b.unary(UnaryOp::Erf, s)?;
            let one = scalar(b, 1.0);
            let e1 = b.binary(B::Add, e, one)?;
            let half = scalar(b, 0.5);
            let h = b.binary(B::Mul, x, half)?;
            b.binary(B::Mul, h, e1)
        }
        // gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x +
        // 0.044715 x^3): the second form does not cancel for x << 0.
        Composite::GeluTanh => {
            let x2 = b.binary(B::Mul, x, x)?;
            let x3 = b.binary(B::Mul, x2, x)?;
            let k = scalar(b, 0.044715);
            let kx3 = b.binary(B::Mul, x3, k)?;
            let inner = b.binary(B::Add, x, kx3)?;
            let m = scalar(b, -2.0 * (2.0 / std::f64::consts::PI).sqrt());
            let arg = b.binary(B::Mul, inner, m)?;
            let e = b.unary(UnaryOp::Exp, arg)?;
            let one = scalar(b, 1.0);
            let den = b.binary(B::Add, e, one)?;
            b.binary(B::Div, x, den)
        }
        // softplus(x) = log1p(exp(-|x|)) + max(x, 0), with log1p(u) = u log(w) / (w - 1)
        // for w = 1 + u != 1, and u where w rounds to 1 (Goldberg's form: relative
        // precision kept for x << 0, where log(1 + u) would round to 0).
        Composite::Softplus => {
            let a = b.unary(UnaryOp::Abs, x)?;
            let n = b.unary(UnaryOp::Neg, a)?;
            let u = b.unary(UnaryOp::Exp, n)?;
            let one = scalar(b, 1.0);
            let w = b.binary(B::Add, u, one)?;
            let lw = b.unary(UnaryOp::Log, w)?;
            let ulw = b.binary(B::Mul, u, lw)?;
            let w1 = b.binary(B::Sub, w, one)?;
            let q = b.binary(B::Div, ulw, w1)?;
            let tiny = b.binary(B::Eq, w, one)?;
            let log1p = b.select(tiny, u, q)?;
            let zero = scalar(b, 0.0);
            let pos = b.binary(B::Max, x, zero)?;
            b.binary(B::Add, log1p, pos)
        }
        // mish(x) = x tanh(softplus(x)): softplus is the target's own where it claims it,
        // else its rule's.
        Composite::Mish => {
            let s = b.unary(UnaryOp::Composite(Composite::Softplus), x)?;
            let t = b.unary(UnaryOp::Tanh, s)?;
            b.binary(B::Mul, x, t)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    /// Awkward arguments: zero of both signs, small and large magnitudes of both signs,
    /// the extremes of f32, infinities and NaN.
    const AWKWARD: &[f64] = &[
        0.0, -0.0, 1e-30, -1e-30, 1e-7, -1e-7, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, 5.0, -5.0, 8.0, -8.0, 10.0, -10.0, 15.0, -15.0, 20.0, -20.0, 30.0,
        -30.0, 50.0, -50.0, 88.0, -88.0, 89.0, -89.0, 100.0, -100.0, 1e4, -1e4, 1e13, -1e13, 3.4e38, -3.4e38, f64::INFINITY, f64::NEG_INFINITY, f64::NAN,
    ];

    /// `c` of every awkward value in `dtype`, computed by the interpreter's kernel and by
    /// the decomposed graph on the interpreter: (x, kernel, decomposed) for each.
    fn both(c: Composite, dtype: Dtype) -> Vec<(f64, f64, f64)> {
        let mut g = Graph::new("c");
        let ty = TensorType::new(dtype, Shape::known(&[AWKWARD.len() as u64]));
        let x = g.push(Op::Input, vec![], ty.clone());
        g.nodes[x.index()].name = Some("x".into());
        let y = g.push(Op::Unary(UnaryOp::Composite(c)), vec![x], ty);
        g.nodes[y.index()].origin = Some("m_0 (Activation)".into());
        g.outputs.push(Output { name: "y".into(), value: y, loss: false });
        let feeds = [("x".to_string(), Tensor::new(dtype, vec![AWKWARD.len() as u64], AWKWARD.to_vec()))].into_iter().collect();
        let want = crate::interp::run(&g, &feeds).unwrap();
        let mut d = g.clone();
        run(&mut d, |_| false).unwrap();
        crate::ir::verify::verify(&d).unwrap();
        assert!(d.nodes.iter().all(|n| !matches!(n.op, Op::Unary(UnaryOp::Composite(_)))), "{}", crate::ir::print::print(&d));
        assert!(d.nodes[1..].iter().all(|n| n.origin.as_deref() == Some("m_0 (Activation)")), "{}", crate::ir::print::print(&d));
        let got = crate::interp::run(&d, &feeds).unwrap();
        let x = feeds["x"].data.clone();
        x.into_iter().zip(&want[0].1.data).zip(&got[0].1.data).map(|((x, &w), &g)| (x, w, g)).collect()
    }

    /// Every awkward value `x` of `c`'s decomposition is within `eps (rel |kernel| + abs
    /// |x|) + tiny |x|` of the interpreter's kernel, `eps` the type's epsilon and `tiny`
    /// its smallest subnormal (an intermediate that rounds to a subnormal keeps no
    /// relative precision), in f32 and f64; NaN exactly where the kernel's is, and
    /// infinities equal.
    fn check(c: Composite, rel: f64, abs: f64) {
        let types = [(Dtype::F32, f64::from(f32::EPSILON), f64::from(f32::from_bits(1))), (Dtype::F64, f64::EPSILON, f64::from_bits(1))];
        for (dtype, eps, tiny) in types {
            let bad: Vec<String> = both(c, dtype)
                .into_iter()
                .filter(|&(x, w, g)| {
                    let same = w == g || w.is_nan() && g.is_nan();
                    !same && (w.is_nan() || g.is_nan() || w.is_infinite() || g.is_infinite() || (w - g).abs() > eps * (rel * w.abs() + abs * x.abs()) + tiny * x.abs())
                })
                .map(|(x, w, g)| format!("{dtype} {}({x:e}): kernel {w:e}, decomposed {g:e}", c.name()))
                .collect();
            assert!(bad.is_empty(), "{}", bad.join("\n"));
        }
    }

    #[test]
    fn sigmoid_rule_matches_the_kernel() {
        check(Composite::Sigmoid, 4.0, 0.0);
    }

    #[test]
    fn gelu_rule_matches_the_kernel() {
        // 1 + erf cancels for x << 0: close in absolute terms there, not relative ones.
        check(Composite::Gelu, 4.0, 2.0);
    }

    #[test]
    fn gelu_tanh_rule_matches_the_kernel() {
        // exp's rounding error grows with its argument, up to about 700 in f64.
        check(Composite::GeluTanh, 512.0, 0.0);
    }

    #[test]
    fn softplus_rule_matches_the_kernel() {
        check(Composite::Softplus, 4.0, 0.0);
    }

    #[test]
    fn mish_rule_matches_the_kernel() {
        check(Composite::Mish, 4.0, 0.0);
    }

    /// A claimed composite stays, an integer argument is cast first, and a graph without
    /// unclaimed composites is not touched.
    #[test]
    fn claimed_composites_stay_and_integers_are_cast() {
        let text = "graph g {\n  %0 = input \"x\" : i32[3]\n  %1 = sigmoid %0 : f32[3]\n  %2 = softplus %1 : f32[3]\n  output \"y\" = %2\n}\n";
        let mut g = crate::ir::parse::parse(text).unwrap();
        run(&mut g, |c| c == Composite::Softplus).unwrap();
        crate::ir::verify::verify(&g).unwrap();
        let printed = crate::ir::print::print(&g);
        assert!(printed.contains("= cast %0 {to = f32} : f32[3]") && printed.contains("softplus") && !printed.contains("sigmoid"), "{printed}");
        let before = g.clone();
        run(&mut g, |c| c == Composite::Softplus).unwrap();
        assert_eq!(g, before);
    }
}
