//! Matrix products: `MatMul` (NumPy's matmul, as the IR's), `Gemm` and `Einsum`.

use super::Cx;
use crate::frontend::onnx::node::{invalid, unsupported, Node, Out};
use crate::ir::{BinaryOp, Dim, Shape, ValueId};

pub fn matmul(cx: &mut Cx, node: &Node) -> Out {
    Ok(vec![cx.b.matmul(node.input(0)?, node.input(1)?)?])
}

/// `alpha A' B' + beta C`, `A'` and `B'` transposed as `transA` and `transB` say. The
/// common case (`B` transposed, no scaling) is the shared linear layer, which the
/// passes know.
pub fn gemm(cx: &mut Cx, node: &Node) -> Out {
    let (a, b_in, c) = (node.input(0)?, node.input(1)?, node.opt(2));
    let (alpha, beta) = (node.float("alpha", 1.0)?, node.float("beta", 1.0)?);
    let (ta, tb) = (node.int("transA", 0)? != 0, node.int("transB", 0)? != 0);
    let a = if ta { cx.b.transpose(a, vec![1, 0])? } else { a };
    if tb && alpha == 1.0 && beta == 1.0 {
        return Ok(vec![cx.b.linear(a, b_in, c)?]);
    }
    let bm = if tb { cx.b.transpose(b_in, vec![1, 0])? } else { b_in };
    let mut y = cx.b.matmul(a, bm)?;
    let dtype = cx.b.dtype(y);
    if alpha != 1.0 {
        let s = cx.b.scalar(dtype, alpha);
        y = cx.b.binary(BinaryOp::Mul, y, s)?;
    }
    if let Some(c) = c {
        let c = if beta != 1.0 {
            let s = cx.b.scalar(dtype, beta);
            cx.b.binary(BinaryOp::Mul, c, s)?
        } else {
            c
        };
        y = cx.b.binary(BinaryOp::Add, y, c)?;
    }
    Ok(vec![y])
}

/// `Einsum` where it is products, sums and transposes: each operand's subscripts (an
/// ellipsis standing for its leading axes) name its axes, a letter twice in one
/// operand taking its diagonal. Operands are taken left to right: letters neither in
/// the output nor in an operand still to come are summed away first, then the two
/// operands become one batched product `[batch, free_a, summed] x [batch, summed,
/// free_b]`; the result is transposed into the output's order.
pub fn einsum(cx: &mut Cx, node: &Node) -> Out {
    let Some(equation) = node.string("equation")? else { return invalid("Einsum has no equation") };
    let args = node.all_inputs();
    let ranks: Vec<usize> = args.iter().map(|&a| cx.b.rank(a)).collect();
    let (inputs, output) = match parse_einsum(&equation, &ranks) {
        Ok(parsed) => parsed,
        Err(why) => return unsupported(format!("Einsum {equation:?}: {why}")),
    };
    let mut terms = Vec::with_capacity(args.len());
    for (x, letters) in args.into_iter().zip(inputs) {
        terms.push(diagonal(cx, x, letters)?);
    }
    terms.reverse();
    let (mut acc, mut acc_letters) = terms.pop().expect("one operand at least");
    loop {
        // Letters of acc that nothing later needs are summed now.
        let later: Vec<char> = terms.iter().flat_map(|(_, l)| l.clone()).chain(output.iter().copied()).collect();
        let (v, l) = sum_unneeded(cx, acc, &acc_letters, &later)?;
        (acc, acc_letters) = (v, l);
        let Some((next, next_letters)) = terms.pop() else { break };
        let after: Vec<char> = terms.iter().flat_map(|(_, l)| l.clone()).chain(output.iter().copied()).collect();
        let (nv, nl) = sum_unneeded(cx, next, &next_letters, &[after.clone(), acc_letters.clone()].concat())?;
        (acc, acc_letters) = contract(cx, (acc, &acc_letters), (nv, &nl), &after)?;
    }
    let perm: Vec<usize> = output.iter().map(|c| acc_letters.iter().position(|x| x == c).expect("output letters are kept")).collect();
    let y = if perm.iter().enumerate().all(|(i, &p)| i == p) && perm.len() == acc_letters.len() { acc } else { cx.b.transpose(acc, perm)? };
    Ok(vec![y])
}

/// The subscripts of each operand and of the output, an ellipsis expanded into
/// letters of its own (`0`, `1`, ... for the leading axes it covers).
fn parse_einsum(equation: &str, ranks: &[usize]) -> Result<(Vec<Vec<char>>, Vec<char>), String> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let parts: Vec<&str> = lhs.split(',').collect();
    if parts.len() != ranks.len() {
        return Err(format!("{} operands for {} inputs", parts.len(), ranks.len()));
    }
    let mut ellipsis_rank = 0;
    let mut inputs = Vec::new();
    for (p, &rank) in parts.iter().zip(ranks) {
        let letters: Vec<char> = p.replace("...", "").chars().collect();
        if letters.iter().any(|c| !c.is_ascii_alphabetic()) {
            return Err(format!("subscripts {p:?} are not letters"));
        }
        let expanded = if p.contains("...") {
            let n = rank.checked_sub(letters.len()).ok_or("more subscripts than axes")?;
            ellipsis_rank = ellipsis_rank.max(n);
            let (before, after) = p.split_once("...").expect("contains");
            let lead: Vec<char> = (0..n).map(|i| char::from_digit((ellipsis_rank - n + i) as u32, 10).unwrap_or('9')).collect();
            [before.chars().collect::<Vec<_>>(), lead, after.chars().collect()].concat()
        } else {
            if letters.len() != rank {
                return Err(format!("subscripts {p:?} for a rank-{rank} operand"));
            }
            letters
        };
        inputs.push(expanded);
    }
    let ell: Vec<char> = (0..ellipsis_rank).map(|i| char::from_digit(i as u32, 10).unwrap_or('9')).collect();
    let output = match rhs {
        Some(r) => {
            let (before, after) = r.split_once("...").map_or((r.as_str(), ""), |(b, a)| (b, a));
            let mut out: Vec<char> = before.chars().collect();
            if r.contains("...") {
                out.extend(&ell);
            }
            out.extend(after.chars());
            out
        }
        None => {
            // Implicit: the ellipsis, then the letters used once, in order.
            let all: Vec<char> = inputs.iter().flatten().copied().filter(|c| c.is_ascii_alphabetic()).collect();
            let mut once: Vec<char> = all.iter().copied().filter(|c| all.iter().filter(|x| *x == c).count() == 1).collect();
            once.sort_unstable();
            [ell, once].concat()
        }
    };
    if let Some(c) = output.iter().find(|c| !inputs.iter().flatten().any(|x| x == *c)) {
        return Err(format!("the output's {c:?} is in no operand"));
    }
    Ok((inputs, output))
}

/// An operand whose subscripts repeat a letter (`ii`) reduced to its diagonal: where
/// the two positions differ it is zeroed, and the second axis summed away.
fn diagonal(cx: &mut Cx, mut x: ValueId, mut letters: Vec<char>) -> crate::error::Result<(ValueId, Vec<char>)> {
    while let Some((p, q)) = (0..letters.len()).find_map(|q| letters[..q].iter().position(|&c| c == letters[q]).map(|p| (p, q))) {
        let shape = cx.b.shape(x);
        let iota = |cx: &mut Cx, axis| cx.b.op(crate::ir::Op::Iota { shape: shape.clone(), axis, dtype: crate::ir::Dtype::I64 }, vec![]);
        let (rows, cols) = (iota(cx, p)?, iota(cx, q)?);
        let on = cx.b.binary(BinaryOp::Eq, rows, cols)?;
        let zero = cx.b.scalar(cx.b.dtype(x), 0.0);
        let kept = cx.b.select(on, x, zero)?;
        x = cx.b.reduce(crate::ir::ReduceKind::Sum, kept, vec![q], false)?;
        letters.remove(q);
    }
    Ok((x, letters))
}

/// `x` summed over its letters not in `keep`.
fn sum_unneeded(cx: &mut Cx, x: ValueId, letters: &[char], keep: &[char]) -> crate::error::Result<(ValueId, Vec<char>)> {
    let axes: Vec<usize> = (0..letters.len()).filter(|&i| !keep.contains(&letters[i])).collect();
    if axes.is_empty() {
        return Ok((x, letters.to_vec()));
    }
    let kept = letters.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, c)| *c).collect();
    Ok((cx.b.reduce(crate::ir::ReduceKind::Sum, x, axes, false)?, kept))
}

/// The product of two operands over their shared letters not in `after` (summed),
/// batched over the shared letters in it: `[batch, free_a, summed] x [batch, summed,
/// free_b]` as one matmul, each operand transposed and reshaped into place.
fn contract(cx: &mut Cx, (a, la): (ValueId, &[char]), (b, lb): (ValueId, &[char]), after: &[char]) -> crate::error::Result<(ValueId, Vec<char>)> {
    let shared: Vec<char> = la.iter().copied().filter(|c| lb.contains(c)).collect();
    let batch: Vec<char> = shared.iter().copied().filter(|c| after.contains(c)).collect();
    let summed: Vec<char> = shared.iter().copied().filter(|c| !after.contains(c)).collect();
    let free_a: Vec<char> = la.iter().copied().filter(|c| !shared.contains(c)).collect();
    let free_b: Vec<char> = lb.iter().copied().filter(|c| !shared.contains(c)).collect();
    let dim = |cx: &Cx, v: ValueId, l: &[char], c: char| cx.b.shape(v).0[l.iter().position(|x| *x == c).expect("letter of the operand")].clone();
    let size = |cx: &Cx, v: ValueId, l: &[char], cs: &[char]| crate::ir::Dim::product(&cs.iter().map(|&c| dim(cx, v, l, c)).collect::<Vec<_>>()).map_err(crate::error::Error::user);
    let arrange = |cx: &mut Cx, v: ValueId, l: &[char], order: Vec<char>, dims: Vec<Dim>| -> crate::error::Result<ValueId> {
        let perm: Vec<usize> = order.iter().map(|c| l.iter().position(|x| x == c).expect("letter")).collect();
        let t = if perm.iter().enumerate().all(|(i, &p)| i == p) { v } else { cx.b.transpose(v, perm)? };
        cx.b.reshape(t, Shape(dims))
    };
    let batch_dims: Vec<Dim> = batch.iter().map(|&c| dim(cx, a, la, c)).collect();
    let (m, k, n) = (size(cx, a, la, &free_a)?, size(cx, a, la, &summed)?, size(cx, b, lb, &free_b)?);
    let am = arrange(cx, a, la, [batch.clone(), free_a.clone(), summed.clone()].concat(), [batch_dims.clone(), vec![m, k.clone()]].concat())?;
    let bm = arrange(cx, b, lb, [batch.clone(), summed.clone(), free_b.clone()].concat(), [batch_dims.clone(), vec![k, n]].concat())?;
    let y = cx.b.matmul(am, bm)?;
    let mut dims = batch_dims;
    dims.extend(free_a.iter().map(|&c| dim(cx, a, la, c)));
    dims.extend(free_b.iter().map(|&c| dim(cx, b, lb, c)));
    let y = cx.b.reshape(y, Shape(dims))?;
    Ok((y, [batch, free_a, free_b].concat()))
}
