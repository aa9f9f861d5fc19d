//! The transformer's operators: Attention (opset 23), RMSNormalization and
//! RotaryEmbedding. Attention is built from the builder's attention parts
//! (`attention_scores`, `causal_mask`, `attention_mask`, `attend`), so that the
//! `attention` pass makes one kernel of it as of Mithril's attention.

use super::nn::{convert, stash_type};
use super::{axis, Cx};
use crate::frontend::onnx::node::{invalid, unsupported, Fail, Node, Out};
use crate::frontend::onnx::tensor;
use crate::ir::{BinaryOp, Dim, Dtype, Op, ReduceKind, Shape, SliceRange, UnaryOp, ValueId};

/// `softmax(q kᵀ · scale + bias) v` per head, `scale` by default `1/√head_size`:
/// - 3-D inputs `[B, L, H·D]` are split into `q_num_heads` and `kv_num_heads` heads
///   `[B, H, L, D]` (and Y merged back); 4-D ones are that already;
/// - `past_key`/`past_value` go before K and V along the sequence, giving the
///   `present_key`/`present_value` outputs;
/// - grouped-query heads: query head `h` reads key/value head `h / (Hq/Hkv)`, the query
///   viewed `[B, Hkv, Hq/Hkv, L, D]` against key and value `[B, Hkv, 1, S, D]`;
/// - `softcap` makes the scores `softcap · tanh(scores / softcap)` before the bias;
/// - the bias: `is_causal` hides key `j` from query `i` where `j > i + past`;
///   `attn_mask` is bool (true keeps) or added, its last axis padded with -inf (false)
///   up to the keys'; `nonpad_kv_seqlen` (opset 24) hides each batch's keys from its
///   count on;
/// - output 3 is the scores scaled (`qk_matmul_output_mode` 0), softcapped (1), biased
///   (2) or their softmax (3); `softmax_precision` computes the softmax in that type.
pub fn attention(cx: &mut Cx, node: &Node) -> Out {
    let (q, k, v) = (node.input(0)?, node.input(1)?, node.input(2)?);
    let rank = cx.b.rank(q);
    if cx.b.rank(k) != rank || cx.b.rank(v) != rank || !(rank == 3 || rank == 4) {
        let [q, k, v] = [q, k, v].map(|x| cx.b.shape(x));
        return invalid(format!("Attention wants Q, K and V all 3-D or all 4-D, got {q}, {k} and {v}"));
    }
    let (q, mut k, mut v) = if rank == 3 {
        let (Some(hq), Some(hkv)) = (node.int_opt("q_num_heads")?, node.int_opt("kv_num_heads")?) else {
            return invalid("Attention of 3-D inputs needs q_num_heads and kv_num_heads");
        };
        (split_heads(cx, q, hq)?, split_heads(cx, k, hkv)?, split_heads(cx, v, hkv)?)
    } else {
        (q, k, v)
    };
    let past = match (node.opt(4), node.opt(5)) {
        (Some(pk), Some(pv)) => {
            let lengths = [pk, k, pv, v].map(|x| cx.b.shape(x).0.get(2).and_then(Dim::known));
            let [Some(past), Some(_), Some(_), Some(_)] = lengths else {
                return unsupported("Attention's past_key/past_value with a symbolic sequence length (the IR concatenates known lengths only)");
            };
            k = cx.b.op(Op::Concat { axis: 2 }, vec![pk, k])?;
            v = cx.b.op(Op::Concat { axis: 2 }, vec![pv, v])?;
            past
        }
        (None, None) => 0,
        _ => return invalid("Attention takes past_key and past_value together"),
    };
    let present = [k, v];
    let [hq, hkv, hv] = [q, k, v].map(|x| cx.b.shape(x).0[1].known());
    let (Some(hq), Some(hkv)) = (hq, hkv) else { return unsupported("Attention with a symbolic number of heads") };
    if hv != Some(hkv) || hkv == 0 || hq % hkv != 0 {
        let [k, v] = [k, v].map(|x| cx.b.shape(x));
        return invalid(format!("Attention's {hq} query heads do not share key and value heads {k} and {v} evenly"));
    }
    let group = hq / hkv;
    let (q, k, v) = if group > 1 { (group_heads(cx, q, hkv, group)?, group_heads(cx, k, hkv, 1)?, group_heads(cx, v, hkv, 1)?) } else { (q, k, v) };
    let scale = if node.has("scale") { Some(node.float("scale", 1.0)?) } else { None };
    let mut scores = cx.b.attention_scores(q, k, scale)?;
    let dtype = cx.b.dtype(scores);
    let mut qk = vec![scores];
    let softcap = node.float("softcap", 0.0)?;
    if softcap > 0.0 {
        let c = cx.b.scalar(dtype, softcap);
        let s = cx.b.binary(BinaryOp::Div, scores, c)?;
        let t = cx.b.unary(UnaryOp::Tanh, s)?;
        scores = cx.b.binary(BinaryOp::Mul, t, c)?;
    }
    qk.push(scores);
    if node.int("is_causal", 0)? != 0 {
        scores = if past == 0 { cx.b.causal_mask(scores)? } else { causal_after(cx, scores, past)? };
    }
    if let Some(mask) = node.opt(3) {
        let mask = fit_mask(cx, mask, scores, hkv, group)?;
        scores = cx.b.attention_mask(scores, mask)?;
    }
    if let Some(counts) = node.opt(6) {
        scores = hide_padding(cx, scores, counts)?;
    }
    qk.push(scores);
    let last = cx.b.rank(scores) - 1;
    let precision = match node.int_opt("softmax_precision")? {
        None => dtype,
        Some(code) => match i32::try_from(code).map(tensor::dtype) {
            Ok(Ok(d)) if d.is_float() => d,
            _ => return invalid(format!("softmax_precision {code} is not a float type mithrilc has")),
        },
    };
    let y = if precision == dtype {
        cx.b.attend(scores, v)?
    } else {
        let wide = cx.b.cast(scores, precision)?;
        let p = cx.b.softmax(wide, last)?;
        let p = cx.b.cast(p, dtype)?;
        qk.push(p);
        cx.b.matmul(p, v)?
    };
    let y = ungroup(cx, y, hq)?;
    let y = if rank == 3 { merge_heads(cx, y)? } else { y };
    let mut outs = vec![y, present[0], present[1]];
    if node.outputs() > 3 {
        let mode = node.int("qk_matmul_output_mode", 0)?;
        if mode == 3 && qk.len() == 3 {
            // attend's softmax again, which simplify merges.
            qk.push(cx.b.softmax(scores, last)?);
        }
        let Some(&out) = usize::try_from(mode).ok().and_then(|m| qk.get(m)) else { return invalid(format!("qk_matmul_output_mode {mode} is not 0, 1, 2 or 3")) };
        outs.push(ungroup(cx, out, hq)?);
    }
    Ok(outs)
}

/// `[B, L, H·D]` as heads `[B, H, L, D]`.
fn split_heads(cx: &mut Cx, x: ValueId, heads: i64) -> Result<ValueId, Fail> {
    let s = cx.b.shape(x);
    let Some(hidden) = s.0[2].known() else { return unsupported(format!("heads of a symbolic hidden size {s}")) };
    if heads < 1 || hidden % heads as u64 != 0 {
        return invalid(format!("the hidden size {hidden} of {s} does not split into {heads} heads"));
    }
    let h = heads as u64;
    let split = cx.b.reshape(x, Shape(vec![s.0[0].clone(), s.0[1].clone(), Dim::Known(h), Dim::Known(hidden / h)]))?;
    Ok(cx.b.transpose(split, vec![0, 2, 1, 3])?)
}

/// Heads `[B, H, L, D]` merged back: `[B, L, H·D]`.
fn merge_heads(cx: &mut Cx, y: ValueId) -> Result<ValueId, Fail> {
    let t = cx.b.transpose(y, vec![0, 2, 1, 3])?;
    Ok(cx.b.flatten(t, 2, 3)?)
}

/// `[B, H, S, D]` viewed `[B, groups, H/groups, S, D]`.
fn group_heads(cx: &mut Cx, x: ValueId, groups: u64, per_group: u64) -> Result<ValueId, Fail> {
    let mut dims = cx.b.shape(x).0;
    dims.splice(1..2, [Dim::Known(groups), Dim::Known(per_group)]);
    Ok(cx.b.reshape(x, Shape(dims))?)
}

/// Grouped heads `[B, G, H/G, ...]` as `[B, H, ...]`; ungrouped ones as they are.
fn ungroup(cx: &mut Cx, x: ValueId, heads: u64) -> Result<ValueId, Fail> {
    let mut dims = cx.b.shape(x).0;
    if dims.len() == 4 {
        return Ok(x);
    }
    dims.splice(1..3, [Dim::Known(heads)]);
    Ok(cx.b.reshape(x, Shape(dims))?)
}

/// The scores `[.., L, T]` with key `j` hidden from query `i` where `j > i + past` (the
/// queries are the last `L` of `T` positions): [`Builder::causal_mask`]'s nodes, the
/// rows offset by `past`.
///
/// [`Builder::causal_mask`]: crate::ir::builder::Builder::causal_mask
fn causal_after(cx: &mut Cx, scores: ValueId, past: u64) -> Result<ValueId, Fail> {
    let s = cx.b.shape(scores);
    let lt = Shape(s.0[s.rank() - 2..].to_vec());
    let rows = cx.b.op(Op::Iota { shape: lt.clone(), axis: 0, dtype: Dtype::I32 }, vec![])?;
    let offset = cx.b.scalar(Dtype::I32, past as f64);
    let rows = cx.b.binary(BinaryOp::Add, rows, offset)?;
    let cols = cx.b.op(Op::Iota { shape: lt, axis: 1, dtype: Dtype::I32 }, vec![])?;
    let keep = cx.b.binary(BinaryOp::Le, cols, rows)?;
    let bias = cx.b.mask_bias(keep, cx.b.dtype(scores))?;
    Ok(cx.b.binary(BinaryOp::Add, scores, bias)?)
}

/// `attn_mask` fitted to the scores: its last axis padded to the keys' (with -inf, or
/// false), and, for grouped heads, its head axis split as the query's was.
fn fit_mask(cx: &mut Cx, mask: ValueId, scores: ValueId, groups: u64, per_group: u64) -> Result<ValueId, Fail> {
    let (ms, ss) = (cx.b.shape(mask), cx.b.shape(scores));
    let (Some(m), Some(t)) = (ms.0.last().cloned(), ss.0.last().cloned()) else { return invalid("Attention's attn_mask is a scalar") };
    if ms.rank() > 4 {
        return invalid(format!("Attention's attn_mask {ms} has more than 4 dimensions"));
    }
    let mut mask = mask;
    if m != t {
        let (Some(m), Some(t)) = (m.known(), t.known()) else { return unsupported(format!("Attention's attn_mask {ms} for symbolic keys {ss}")) };
        if m > t {
            return invalid(format!("Attention's attn_mask {ms} is longer than the {t} keys"));
        }
        let mut pads = vec![(0, 0); ms.rank()];
        pads[ms.rank() - 1] = (0, t - m);
        let value = if cx.b.dtype(mask) == Dtype::Bool { 0.0 } else { f64::NEG_INFINITY };
        mask = cx.b.op(Op::Pad { pads, value }, vec![mask])?;
    }
    if per_group == 1 || ms.rank() < 3 {
        return Ok(mask);
    }
    let mut dims = cx.b.shape(mask).0;
    while dims.len() < 4 {
        dims.insert(0, Dim::Known(1));
    }
    let split = match dims[1].known() {
        Some(1) => [Dim::Known(1), Dim::Known(1)],
        Some(h) if h == groups * per_group => [Dim::Known(groups), Dim::Known(per_group)],
        _ => return invalid(format!("Attention's attn_mask {ms} does not broadcast over {} heads", groups * per_group)),
    };
    dims.splice(1..2, split);
    Ok(cx.b.reshape(mask, Shape(dims))?)
}

/// The scores with each batch's keys from its count in `counts` `[B]` on hidden:
/// positions along the keys `< counts`, over `[B, 1, .., 1, T]`.
fn hide_padding(cx: &mut Cx, scores: ValueId, counts: ValueId) -> Result<ValueId, Fail> {
    let s = cx.b.shape(scores);
    let r = s.rank();
    let mut dims = vec![Dim::Known(1); r];
    dims[0] = s.0[0].clone();
    let per_batch = cx.b.reshape(counts, Shape(dims.clone()))?;
    dims[r - 1] = s.0[r - 1].clone();
    let positions = cx.b.op(Op::Iota { shape: Shape(dims), axis: r - 1, dtype: cx.b.dtype(counts) }, vec![])?;
    let keep = cx.b.binary(BinaryOp::Lt, positions, per_batch)?;
    Ok(cx.b.attention_mask(scores, keep)?)
}

/// `FlexAttention` (domain `ai.onnx.preview`): `softmax(q kᵀ · scale) v` over rank-4
/// heads (`scale` by default `1/√head_size`), grouped-query heads as in `Attention`,
/// the scores and softmax in `softmax_precision` (by default f32, or f64 for f64
/// inputs). Its `score_mod` and `prob_mod`, graphs applied to every score or
/// probability, are refused.
pub fn flex_attention(cx: &mut Cx, node: &Node) -> Out {
    if let Some(m) = ["score_mod", "prob_mod"].into_iter().find(|m| node.has(m)) {
        return unsupported(format!("FlexAttention's {m} (a graph applied to the scores or probabilities)"));
    }
    let (q, k, v) = (node.input(0)?, node.input(1)?, node.input(2)?);
    let [qd, kd, vd] = [q, k, v].map(|x| cx.b.shape(x).as_known().unwrap_or_default());
    let (&[_, hq, _, e], &[_, hkv, _, _], &[_, _, _, _]) = (&qd[..], &kd[..], &vd[..]) else {
        return invalid(format!("FlexAttention takes rank-4 Q, K and V of known sizes, got {}, {} and {}", cx.b.shape(q), cx.b.shape(k), cx.b.shape(v)));
    };
    if hkv == 0 || hq % hkv != 0 {
        return invalid(format!("FlexAttention's {hq} query heads are not a multiple of its {hkv} key/value heads"));
    }
    let out = cx.b.dtype(q);
    let wide = match node.int_opt("softmax_precision")? {
        Some(t) => match tensor::dtype(t as i32) {
            Ok(d) if d.is_float() => d,
            _ => return invalid(format!("FlexAttention's softmax_precision {t} is not a float type")),
        },
        None if out == Dtype::F64 => Dtype::F64,
        None => Dtype::F32,
    };
    let scale = if node.has("scale") { node.float("scale", 1.0)? } else { 1.0 / (e as f64).sqrt() };
    let group = hq / hkv;
    let [q, k, v] = [q, k, v].map(|x| convert(cx, x, wide));
    let (q, k, v) = (q?, k?, v?);
    let (q, k, v) = if group > 1 { (group_heads(cx, q, hkv, group)?, group_heads(cx, k, hkv, 1)?, group_heads(cx, v, hkv, 1)?) } else { (q, k, v) };
    let scores = cx.b.attention_scores(q, k, Some(scale))?;
    let y = cx.b.attend(scores, v)?;
    let y = ungroup(cx, y, hq)?;
    Ok(vec![convert(cx, y, out)?])
}

/// `LinearAttention` (opset 27), its recurrence unrolled over the sequence (known when
/// compiling), in f32 as ONNX's reference computes it. Per key/value head a state
/// `S` `[d_k, d_v]` (from `past_state`, else zeros) takes, at each step `t`:
/// `S ← S · exp(decay_t)` (update rules `gated`, `gated_delta`; decay per head or per
/// key dimension), `v_t ← beta_t (v_t - k_tᵀ S)` (`delta`, `gated_delta`), then
/// `S ← S + k_t ⊗ v_t`; query head `h` reads its group's state, `o_t = scale · q_t S`
/// (`scale` by default `1/√d_k`). Outputs: `[B, T, Hq·d_v]` and the last state.
pub fn linear_attention(cx: &mut Cx, node: &Node) -> Out {
    let (q, k, v, past, decay, beta) = (node.input(0)?, node.input(1)?, node.input(2)?, node.opt(3), node.opt(4), node.opt(5));
    let rule = node.string_or("update_rule", "gated_delta")?;
    let (gating, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        r => return invalid(format!("LinearAttention's update_rule is linear, gated, delta or gated_delta, got {r:?}")),
    };
    if gating != decay.is_some() || delta != beta.is_some() {
        return invalid(format!("LinearAttention's update rule {rule} takes {} decay and {} beta", if gating { "a" } else { "no" }, if delta { "a" } else { "no" }));
    }
    let (hq, hkv) = (node.int("q_num_heads", 0)?, node.int("kv_num_heads", 0)?);
    if hq <= 0 || hkv <= 0 || hq % hkv != 0 {
        return invalid(format!("LinearAttention's q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})"));
    }
    let (hq, hkv) = (hq as u64, hkv as u64);
    let [qd, kd, vd] = [q, k, v].map(|x| cx.b.shape(x).as_known().unwrap_or_default());
    let (&[b, t, qw], &[_, _, kw], &[_, _, vw]) = (&qd[..], &kd[..], &vd[..]) else {
        return invalid(format!("LinearAttention takes query, key and value [B, T, H·D] of known sizes, got {}, {} and {}", cx.b.shape(q), cx.b.shape(k), cx.b.shape(v)));
    };
    let (dk, dv, group) = (qw / hq, vw / hkv, hq / hkv);
    if kw != hkv * dk {
        return invalid(format!("LinearAttention's key {} does not hold {hkv} heads of the query's head size {dk}", cx.b.shape(k)));
    }
    let out_dtype = cx.b.dtype(q);
    let wide = |cx: &mut Cx, x: ValueId| -> Result<ValueId, Fail> { Ok(convert(cx, x, Dtype::F32)?) };
    let (q, k, v) = (wide(cx, q)?, wide(cx, k)?, wide(cx, v)?);
    let q4 = split_heads(cx, q, hq as i64)?;
    let qg = group_heads(cx, q4, hkv, group)?;
    let k4 = split_heads(cx, k, hkv as i64)?;
    let v4 = split_heads(cx, v, hkv as i64)?;
    // [B, T, H·n] as [B, H, T, n], for decay (n = d_k or 1) and beta (H = Hkv or 1, n = 1).
    let per_head = |cx: &mut Cx, x: ValueId, what: &str, heads: &[u64]| -> Result<ValueId, Fail> {
        let last = cx.b.shape(x).as_known().and_then(|d| d.get(2).copied()).unwrap_or(0);
        let (h, n) = match heads.iter().find(|&&h| last == h || last == h * dk && what == "decay") {
            Some(&h) => (h, last / h),
            None => return invalid(format!("LinearAttention's {what} {} does not fit {hkv} key/value heads", cx.b.shape(x))),
        };
        let x = wide(cx, x)?;
        let x = cx.b.reshape(x, Shape::known(&[b, t, h, n]))?;
        Ok(cx.b.transpose(x, vec![0, 2, 1, 3])?)
    };
    let decay4 = decay.map(|d| per_head(cx, d, "decay", &[hkv])).transpose()?;
    let beta4 = beta.map(|d| per_head(cx, d, "beta", &[hkv, 1])).transpose()?;
    let mut state = match past {
        Some(p) => wide(cx, p)?,
        None => cx.b.full(Dtype::F32, Shape::known(&[b, hkv, dk, dv]), 0.0)?,
    };
    let scale = match node.float("scale", 0.0)? {
        s if s == 0.0 => 1.0 / (dk as f64).sqrt(),
        s => s,
    };
    let at = |cx: &mut Cx, x: ValueId, axis: usize, i: u64| -> Result<ValueId, Fail> { Ok(super::shape::take(cx, x, axis, i, 1)?) };
    let mut outs = Vec::new();
    for i in 0..t {
        let (kt, mut vt) = (at(cx, k4, 2, i)?, at(cx, v4, 2, i)?);
        if let Some(d) = decay4 {
            let g = at(cx, d, 2, i)?;
            let g = cx.b.transpose_last(g)?;
            let e = cx.b.unary(UnaryOp::Exp, g)?;
            state = cx.b.binary(BinaryOp::Mul, state, e)?;
        }
        if let Some(bt) = beta4 {
            let retrieved = cx.b.matmul(kt, state)?;
            let diff = cx.b.binary(BinaryOp::Sub, vt, retrieved)?;
            let bt = at(cx, bt, 2, i)?;
            vt = cx.b.binary(BinaryOp::Mul, bt, diff)?;
        }
        let kcol = cx.b.transpose_last(kt)?;
        let outer = cx.b.matmul(kcol, vt)?;
        state = cx.b.binary(BinaryOp::Add, state, outer)?;
        let qt = at(cx, qg, 3, i)?;
        let qt = cx.b.reshape(qt, Shape::known(&[b, hkv, group, dk]))?;
        let o = cx.b.matmul(qt, state)?;
        let s = cx.b.scalar(Dtype::F32, scale);
        let o = cx.b.binary(BinaryOp::Mul, o, s)?;
        outs.push(cx.b.reshape(o, Shape::known(&[b, hq, 1, dv]))?);
    }
    let y = if outs.len() == 1 { outs[0] } else { cx.b.op(Op::Concat { axis: 2 }, outs)? };
    let y = merge_heads(cx, y)?;
    let state_dtype = past.map_or(out_dtype, |p| cx.b.dtype(p));
    Ok(vec![convert(cx, y, out_dtype)?, convert(cx, state, state_dtype)?])
}

/// `x / sqrt(mean(x²) + epsilon) · scale`, the mean over the axes from `axis` on,
/// computed in the wider of x's type and `stash_type`'s.
pub fn rms_norm(cx: &mut Cx, node: &Node) -> Out {
    let (x, scale) = (node.input(0)?, node.input(1)?);
    let rank = cx.b.rank(x);
    let axes: Vec<usize> = (axis(node.int("axis", -1)?, rank)?..rank).collect();
    let eps = node.float("epsilon", 1e-5)?;
    let dtype = cx.b.dtype(x);
    let xs = convert(cx, x, stash_type(node, dtype)?.0)?;
    let sq = cx.b.binary(BinaryOp::Mul, xs, xs)?;
    let ms = cx.b.reduce(ReduceKind::Mean, sq, axes, true)?;
    let e = cx.b.scalar(cx.b.dtype(ms), eps);
    let mse = cx.b.binary(BinaryOp::Add, ms, e)?;
    let rms = cx.b.unary(UnaryOp::Sqrt, mse)?;
    let normed = cx.b.binary(BinaryOp::Div, xs, rms)?;
    let y = cx.b.binary(BinaryOp::Mul, normed, scale)?;
    Ok(vec![convert(cx, y, dtype)?])
}

/// Each head's first `rotary_embedding_dim` features (default: all) rotated in pairs
/// `(x1, x2)`, the two halves (or, `interleaved`, the even and odd features), to
/// `(cos·x1 - sin·x2, sin·x1 + cos·x2)`; `cos` and `sin` are `[B, S, dim/2]`, or their
/// rows `position_ids` `[B, S]` of caches `[positions, dim/2]`. X is `[B, H, S, D]`, or
/// `[B, S, num_heads·D]`.
pub fn rotary_embedding(cx: &mut Cx, node: &Node) -> Out {
    let (x, cos, sin) = (node.input(0)?, node.input(1)?, node.input(2)?);
    let shape = cx.b.shape(x);
    let xh = match shape.rank() {
        4 => x,
        3 => {
            let Some(heads) = node.int_opt("num_heads")? else { return invalid("RotaryEmbedding of a 3-D input needs num_heads") };
            split_heads(cx, x, heads)?
        }
        _ => return invalid(format!("RotaryEmbedding wants [B, H, S, D] or [B, S, hidden], got {shape}")),
    };
    let Some(d) = cx.b.shape(xh).0[3].known() else { return unsupported(format!("RotaryEmbedding with a symbolic head size {shape}")) };
    let r = match node.int("rotary_embedding_dim", 0)? {
        0 => d,
        r if r > 0 && r as u64 <= d && r % 2 == 0 => r as u64,
        r => return invalid(format!("rotary_embedding_dim {r} is not an even size up to the head size {d}")),
    };
    let (cos, sin) = match node.opt(3) {
        Some(ids) => (cx.b.op(Op::Gather { axis: 0 }, vec![cos, ids])?, cx.b.op(Op::Gather { axis: 0 }, vec![sin, ids])?),
        None => (cos, sin),
    };
    let mut cs = cx.b.shape(cos).0;
    if cs.len() != 3 || cs[2] != Dim::Known(r / 2) {
        return invalid(format!("RotaryEmbedding's cos and sin are [B, S, {}], got {}", r / 2, Shape(cs)));
    }
    cs.insert(1, Dim::Known(1));
    let (cos, sin) = (cx.b.reshape(cos, Shape(cs.clone()))?, cx.b.reshape(sin, Shape(cs))?);
    let interleaved = node.int("interleaved", 0)? != 0;
    let (x1, x2) = if interleaved {
        (slice_last(cx, xh, 0, r, 2)?, slice_last(cx, xh, 1, r, 2)?)
    } else {
        (slice_last(cx, xh, 0, r / 2, 1)?, slice_last(cx, xh, r / 2, r, 1)?)
    };
    let [cx1, sx2, sx1, cx2] = [(cos, x1), (sin, x2), (sin, x1), (cos, x2)].map(|(a, b)| cx.b.binary(BinaryOp::Mul, a, b));
    let real = cx.b.binary(BinaryOp::Sub, cx1?, sx2?)?;
    let imag = cx.b.binary(BinaryOp::Add, sx1?, cx2?)?;
    let rotated = if interleaved {
        // The pairs back in place: [.., r/2, 2] as [.., r].
        let mut pair = cx.b.shape(real).0;
        pair.push(Dim::Known(1));
        let (re, im) = (cx.b.reshape(real, Shape(pair.clone()))?, cx.b.reshape(imag, Shape(pair))?);
        let pairs = cx.b.op(Op::Concat { axis: 4 }, vec![re, im])?;
        cx.b.flatten(pairs, 3, 4)?
    } else {
        cx.b.op(Op::Concat { axis: 3 }, vec![real, imag])?
    };
    let y = if r < d {
        let kept = slice_last(cx, xh, r, d, 1)?;
        cx.b.op(Op::Concat { axis: 3 }, vec![rotated, kept])?
    } else {
        rotated
    };
    Ok(vec![if shape.rank() == 3 { merge_heads(cx, y)? } else { y }])
}

/// `x[..., start:stop:step]`.
fn slice_last(cx: &mut Cx, x: ValueId, start: u64, stop: u64, step: i64) -> crate::error::Result<ValueId> {
    let mut ranges = vec![SliceRange::FULL; cx.b.rank(x)];
    ranges[cx.b.rank(x) - 1] = SliceRange { start: Some(start as i64), stop: Some(stop as i64), step };
    cx.b.op(Op::Slice { ranges }, vec![x])
}

#[cfg(test)]
pub(super) mod tests {
    use std::path::PathBuf;

    use prost::Message;

    use crate::frontend::onnx::proto::attribute_proto::AttributeType;
    use crate::frontend::onnx::proto::tensor_shape_proto::{dimension, Dimension};
    use crate::frontend::onnx::proto::{type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto, ValueInfoProto};
    use crate::ir::builder::Builder;
    use crate::ir::{Dim, Dtype, Graph, Shape, TensorType};
    use crate::lower::{Kernel, Library};

    /// An attribute's value.
    pub enum Attr {
        Int(i64),
        Float(f32),
    }

    /// The file of a model of one node `op` (default domain, `opset`) reading graph
    /// inputs `(name, type, dims)` and writing `outputs`, in a folder kept while the
    /// first value lives.
    pub fn one_node(op: &str, inputs: &[(&str, Dtype, &[u64])], outputs: &[&str], attrs: &[(&str, Attr)], opset: i64) -> (tempfile::TempDir, PathBuf) {
        let code = |d: Dtype| match d {
            Dtype::F32 => 1,
            Dtype::U8 => 2,
            Dtype::I8 => 3,
            Dtype::I32 => 6,
            Dtype::I64 => 7,
            Dtype::Bool => 9,
            Dtype::F8E4M3Fn => 17,
            other => unreachable!("no test uses {other}"),
        };
        let input = |(name, dtype, dims): &(&str, Dtype, &[u64])| ValueInfoProto {
            name: Some(name.to_string()),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: Some(code(*dtype)),
                    shape: Some(TensorShapeProto { dim: dims.iter().map(|&d| Dimension { value: Some(dimension::Value::DimValue(d as i64)), ..Default::default() }).collect() }),
                })),
                ..Default::default()
            }),
            ..Default::default()
        };
        let attribute = attrs
            .iter()
            .map(|(name, value)| match value {
                Attr::Int(i) => AttributeProto { name: Some(name.to_string()), r#type: Some(AttributeType::Int as i32), i: Some(*i), ..Default::default() },
                Attr::Float(f) => AttributeProto { name: Some(name.to_string()), r#type: Some(AttributeType::Float as i32), f: Some(*f), ..Default::default() },
            })
            .collect();
        let node = NodeProto { input: inputs.iter().map(|i| i.0.to_string()).collect(), output: outputs.iter().map(|o| o.to_string()).collect(), op_type: Some(op.into()), attribute, ..Default::default() };
        let graph = GraphProto {
            name: Some("g".into()),
            node: vec![node],
            // An input named "" is a slot left out.
            input: inputs.iter().filter(|i| !i.0.is_empty()).map(input).collect(),
            output: outputs.iter().map(|o| ValueInfoProto { name: Some(o.to_string()), ..Default::default() }).collect(),
            ..Default::default()
        };
        let model = ModelProto { ir_version: Some(10), opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }], graph: Some(graph), ..Default::default() };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.onnx");
        std::fs::write(&path, model.encode_to_vec()).unwrap();
        (dir, path)
    }

    /// The graph the frontend reads from a model of one node, or its error's message.
    pub fn load(op: &str, inputs: &[(&str, Dtype, &[u64])], outputs: &[&str], attrs: &[(&str, Attr)], opset: i64) -> Result<Graph, String> {
        load_shaped(op, inputs, outputs, attrs, opset, &[])
    }

    /// [`load`], with some inputs' shapes given as `--shape` gives them.
    pub fn load_shaped(op: &str, inputs: &[(&str, Dtype, &[u64])], outputs: &[&str], attrs: &[(&str, Attr)], opset: i64, shapes: &[(&str, Shape)]) -> Result<Graph, String> {
        let (_dir, path) = one_node(op, inputs, outputs, attrs, opset);
        let opts = crate::frontend::Options { shapes: shapes.iter().map(|(n, s)| (n.to_string(), s.clone())).collect(), ..Default::default() };
        crate::frontend::load(&path, &opts).map(|m| m.graph).map_err(|e| e.to_string().replace(&path.display().to_string(), "model.onnx"))
    }

    /// The kernels `graph` compiles to (after the graph passes and the program
    /// pipeline) for a library with attention.
    fn kernels(mut graph: Graph) -> Vec<&'static str> {
        crate::passes::run_pipeline(&mut graph, crate::passes::PIPELINE, &Default::default(), |_, _| {}).unwrap();
        let library = Library { gemm: &[Dtype::F32], softmax: &[Dtype::F32], attention: &[Dtype::F32], attention_dim: 128, ..Default::default() };
        let opts = crate::lower::Options { library, ..Default::default() };
        let p = crate::passes::compile(&graph, &opts, &[], |_, _| {}).unwrap();
        p.steps
            .iter()
            .map(|s| match &s.kernel {
                Kernel::Attention { .. } => "attention",
                Kernel::Gemm { .. } => "gemm",
                Kernel::Softmax { .. } => "softmax",
                _ => "other",
            })
            .collect()
    }

    const F32: Dtype = Dtype::F32;

    #[test]
    fn attention_is_the_builders_and_one_kernel() {
        // 4-D, causal, with an additive mask: exactly Builder::attention's nodes.
        let qkvm: &[(&str, Dtype, &[u64])] = &[("q", F32, &[1, 2, 8, 16]), ("k", F32, &[1, 2, 8, 16]), ("v", F32, &[1, 2, 8, 16]), ("mask", F32, &[8, 8])];
        let onnx = load("Attention", qkvm, &["y"], &[("is_causal", Attr::Int(1))], 23).unwrap();
        let mut b = Builder::new("model");
        let [q, k, v, m] = [0, 1, 2, 3].map(|i| b.input(qkvm[i].0, TensorType::new(F32, Shape::known(qkvm[i].2))));
        b.origin = "#0 (Attention)".into();
        let y = b.attention(q, k, v, None, true, Some(m)).unwrap();
        b.graph.outputs.push(crate::ir::Output { name: "y".into(), value: y, loss: false });
        assert_eq!(crate::ir::print::print(&onnx), crate::ir::print::print(&b.graph));
        // 3-D heads split and merged, and grouped-query heads: one attention kernel, which
        // stores through the heads' transpose, and reads each key and value head once.
        let qkv = |hq: u64, hkv: u64| [("q", F32, [1, 8, hq * 16]), ("k", F32, [1, 8, hkv * 16]), ("v", F32, [1, 8, hkv * 16])];
        let heads = |hq, hkv| [("q_num_heads", Attr::Int(hq)), ("kv_num_heads", Attr::Int(hkv)), ("is_causal", Attr::Int(1))];
        let mha = qkv(2, 2).map(|(n, d, s)| (n, d, s.to_vec()));
        let mha: Vec<(&str, Dtype, &[u64])> = mha.iter().map(|(n, d, s)| (*n, *d, s.as_slice())).collect();
        assert_eq!(kernels(load("Attention", &mha, &["y"], &heads(2, 2), 23).unwrap()), ["attention"]);
        let gqa = qkv(4, 2).map(|(n, d, s)| (n, d, s.to_vec()));
        let gqa: Vec<(&str, Dtype, &[u64])> = gqa.iter().map(|(n, d, s)| (*n, *d, s.as_slice())).collect();
        let ks = kernels(load("Attention", &gqa, &["y"], &heads(4, 2), 23).unwrap());
        assert_eq!(ks.iter().filter(|k| **k != "other").collect::<Vec<_>>(), [&"attention"], "{ks:?}");
    }

    #[test]
    fn attention_says_what_it_needs() {
        let qkv: &[(&str, Dtype, &[u64])] = &[("q", F32, &[1, 8, 32]), ("k", F32, &[1, 8, 32]), ("v", F32, &[1, 8, 32])];
        assert_eq!(load("Attention", qkv, &["y"], &[], 23).unwrap_err(), "model.onnx: node 0 (Attention): Attention of 3-D inputs needs q_num_heads and kv_num_heads");
        let heads = [("q_num_heads", Attr::Int(3)), ("kv_num_heads", Attr::Int(3))];
        assert_eq!(load("Attention", qkv, &["y"], &heads, 23).unwrap_err(), "model.onnx: node 0 (Attention): the hidden size 32 of [1, 8, 32] does not split into 3 heads");
        let heads = [("q_num_heads", Attr::Int(2)), ("kv_num_heads", Attr::Int(2)), ("qk_matmul_output_mode", Attr::Int(4))];
        assert_eq!(
            load("Attention", qkv, &["y", "", "", "qk"], &heads, 23).unwrap_err(),
            "model.onnx: node 0 (Attention): qk_matmul_output_mode 4 is not 0, 1, 2 or 3"
        );
        let qkv4: &[(&str, Dtype, &[u64])] = &[("q", F32, &[1, 3, 8, 16]), ("k", F32, &[1, 2, 8, 16]), ("v", F32, &[1, 2, 8, 16])];
        assert_eq!(
            load("Attention", qkv4, &["y"], &[], 23).unwrap_err(),
            "model.onnx: node 0 (Attention): Attention's 3 query heads do not share key and value heads [1, 2, 8, 16] and [1, 2, 8, 16] evenly"
        );
        // A KV cache of symbolic length, as exports declare it.
        let cache: &[(&str, Dtype, &[u64])] = &[("q", F32, &[1, 2, 1, 16]), ("k", F32, &[1, 2, 1, 16]), ("v", F32, &[1, 2, 1, 16]), ("", F32, &[]), ("past_k", F32, &[1, 2, 7, 16]), ("past_v", F32, &[1, 2, 7, 16])];
        let sym = Shape(vec![Dim::Known(1), Dim::Known(2), Dim::Sym("P".into()), Dim::Known(16)]);
        assert_eq!(
            load_shaped("Attention", cache, &["y", "present_k", "present_v"], &[], 23, &[("past_k", sym.clone()), ("past_v", sym)]).unwrap_err(),
            "model.onnx: 1 of the model's 1 node(s) cannot be compiled:\n  node 0 (Attention): Attention's past_key/past_value with a symbolic sequence length (the IR concatenates known lengths only)"
        );
    }
}
