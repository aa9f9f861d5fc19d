//! Indexing: gathers and scatters by index tensors (GatherElements, GatherND,
//! ScatterElements, ScatterND, Scatter), masks (Trilu, OneHot), scans (CumSum, CumProd),
//! selections (TopK, Compress), ReverseSequence and CenterCropPad.
//!
//! The IR has `gather` (NumPy's `take` along one axis) and neither scatter nor sort, so:
//! an index given per element becomes a flat offset into the data (`index * stride`
//! plus an `iota` per other axis, negative indices wrapped with `where`) and one
//! `gather`; a scatter compares every position of the data with every update's target
//! (a one-hot mask over one extra axis) and reduces over the updates; a scan is
//! `log2(n)` shifted adds or products (Hillis and Steele); TopK takes the `k` best one
//! at a time.

use super::{axis, input_floats, input_ints, Cx};
use crate::error::Result;
use crate::frontend::onnx::node::{invalid, unsupported, Fail, Node, Out};
use crate::ir::{ArgKind, BinaryOp, Dim, Dtype, Op, ReduceKind, Shape, SliceRange, UnaryOp, ValueId};
use crate::tensor::Tensor;

/// The dimensions of `v`, which `op` needs known, and whose element count (and so every
/// flat offset into it) an i64 holds.
pub(super) fn dims(cx: &Cx, v: ValueId, op: &str) -> std::result::Result<Vec<u64>, Fail> {
    let shape = cx.b.shape(v);
    let Some(d) = shape.as_known() else { return unsupported(format!("{op} of symbolic {shape}")) };
    match d.iter().try_fold(1u64, |n, &x| n.checked_mul(x)) {
        Some(n) if n <= i64::MAX as u64 => Ok(d),
        _ => invalid(format!("{op} of {shape}, which has more elements than an i64 counts")),
    }
}

/// `x` as i64 (a `cast` unless it is already).
fn int64(cx: &mut Cx, x: ValueId) -> Result<ValueId> {
    if cx.b.dtype(x) == Dtype::I64 { Ok(x) } else { cx.b.cast(x, Dtype::I64) }
}

/// Static dimensions as [`Dim`]s.
pub(super) fn known(d: &[u64]) -> Vec<Dim> {
    d.iter().map(|&n| Dim::Known(n)).collect()
}

/// `v`'s dimensions, symbolic ones included, for an op whose index arithmetic takes
/// them (the sizes then computed at run time).
fn any_dims(cx: &Cx, v: ValueId, op: &str) -> std::result::Result<Vec<Dim>, Fail> {
    let shape = cx.b.shape(v);
    if shape.as_known().is_some() {
        return Ok(known(&dims(cx, v, op)?));
    }
    Ok(shape.0)
}

/// A length as an i64 scalar: a constant, or computed at run time for a symbolic one.
fn length(cx: &mut Cx, len: &Dim) -> Result<ValueId> {
    match len {
        Dim::Known(n) => Ok(cx.b.scalar(Dtype::I64, *n as f64)),
        d => cx.dim_value(d, false),
    }
}

/// Indices into an axis of `len`, negative ones counted from its end:
/// `where(i < 0, i + len, i)`, as i64.
fn wrap(cx: &mut Cx, i: ValueId, len: &Dim) -> Result<ValueId> {
    let i = int64(cx, i)?;
    let zero = cx.b.scalar(Dtype::I64, 0.0);
    let n = length(cx, len)?;
    let negative = cx.b.binary(BinaryOp::Lt, i, zero)?;
    let up = cx.b.binary(BinaryOp::Add, i, n)?;
    cx.b.select(negative, up, i)
}

/// Whether the (wrapped) indices `i` lie in an axis of `len`, and-ed into `all`.
fn in_range(cx: &mut Cx, i: ValueId, len: &Dim, all: Option<ValueId>) -> Result<ValueId> {
    let zero = cx.b.scalar(Dtype::I64, 0.0);
    let n = length(cx, len)?;
    let (lo, hi) = (cx.b.binary(BinaryOp::Ge, i, zero)?, cx.b.binary(BinaryOp::Lt, i, n)?);
    let ok = cx.b.binary(BinaryOp::And, lo, hi)?;
    match all {
        Some(all) => cx.b.binary(BinaryOp::And, all, ok),
        None => Ok(ok),
    }
}

/// Each position's index along `axis` of `dims`, as i64.
pub(super) fn iota(cx: &mut Cx, dims: &[u64], axis: usize) -> Result<ValueId> {
    iota_over(cx, &known(dims), axis)
}

/// [`iota`] over dimensions that may be symbolic.
fn iota_over(cx: &mut Cx, dims: &[Dim], axis: usize) -> Result<ValueId> {
    cx.b.op(Op::Iota { shape: Shape(dims.to_vec()), axis, dtype: Dtype::I64 }, vec![])
}

/// `dims` with `d` inserted at `at`.
fn inserted(dims: &[u64], at: usize, d: u64) -> Vec<u64> {
    let mut v = dims.to_vec();
    v.insert(at, d);
    v
}

/// `x` moved `by` places along `ax` (towards its end, or its front when `back`), the
/// places left filled with `fill`: a slice and a constant pad.
fn shift(cx: &mut Cx, x: ValueId, ax: usize, by: u64, back: bool, fill: f64) -> Result<ValueId> {
    let shape = cx.b.shape(x);
    let n = shape.0[ax].known().unwrap_or(0);
    if by >= n {
        let dtype = cx.b.dtype(x);
        return cx.b.full(dtype, shape, fill);
    }
    let mut ranges = vec![SliceRange::FULL; shape.rank()];
    let mut pads = vec![(0, 0); shape.rank()];
    let keep = (n - by) as i64;
    if back {
        ranges[ax] = SliceRange { start: Some(by as i64), stop: Some(n as i64), step: 1 };
        pads[ax] = (0, by);
    } else {
        ranges[ax] = SliceRange { start: Some(0), stop: Some(keep), step: 1 };
        pads[ax] = (by, 0);
    }
    let kept = cx.b.op(Op::Slice { ranges }, vec![x])?;
    cx.b.op(Op::Pad { pads, value: fill }, vec![kept])
}

/// The flat row `sum coords[m] * stride[m]` of the leading axes `lead` (row-major), each
/// coordinate an i64 tensor; the coordinates broadcast together.
fn offset(cx: &mut Cx, coords: &[ValueId], lead: &[Dim]) -> Result<ValueId> {
    let mut sum: Option<ValueId> = None;
    for (t, &c) in coords.iter().enumerate() {
        let stride = Dim::product(&lead[t + 1..]).map_err(crate::error::Error::user)?;
        let term = if stride.is_one() {
            c
        } else {
            let s = length(cx, &stride)?;
            cx.b.binary(BinaryOp::Mul, c, s)?
        };
        sum = Some(match sum {
            Some(acc) => cx.b.binary(BinaryOp::Add, acc, term)?,
            None => term,
        });
    }
    Ok(sum.unwrap_or_else(|| cx.b.scalar(Dtype::I64, 0.0)))
}

/// `data[c0, .., c(n-1), :, ..]` at every position of `grid`, where `coords` index the
/// first `n` axes of `data` (dimensions `d`) and broadcast to `grid`: data viewed as rows
/// `[d0 * .. * d(n-1), rest]`, one `gather` of the rows at [`offset`]. The result is
/// `grid ++ d[n..]`. Where `valid` (from [`in_range`]) is false, the row read is one
/// past the last, so that the gather fails (as ONNX has an index out of range) instead
/// of reading another row.
pub(super) fn gather_rows(cx: &mut Cx, data: ValueId, d: &[Dim], coords: &[ValueId], valid: Option<ValueId>, grid: &[Dim]) -> Result<ValueId> {
    let n = coords.len();
    let rows = Dim::product(&d[..n]).map_err(crate::error::Error::user)?;
    let mut flat_dims = vec![rows.clone()];
    flat_dims.extend_from_slice(&d[n..]);
    let flat = cx.b.reshape(data, Shape(flat_dims))?;
    let mut at = offset(cx, coords, &d[..n])?;
    if let Some(valid) = valid {
        let past = length(cx, &rows)?;
        at = cx.b.select(valid, at, past)?;
    }
    if cx.b.shape(at) != Shape(grid.to_vec()) {
        at = cx.b.broadcast_to(at, Shape(grid.to_vec()))?;
    }
    cx.b.op(Op::Gather { axis: 0 }, vec![flat, at])
}

/// The components of `indices` `[.., m]` along its last axis, each of shape `[..]` and
/// wrapped into its axis of `into` (`into[j]` for component `j`), and whether all of
/// them are in range.
fn components(cx: &mut Cx, indices: ValueId, q: &[Dim], into: &[Dim]) -> Result<(Vec<ValueId>, Option<ValueId>)> {
    let k = q.len() - 1;
    let mut out = Vec::with_capacity(into.len());
    let mut valid = None;
    for (j, len) in into.iter().enumerate() {
        let mut ranges = vec![SliceRange::FULL; q.len()];
        ranges[k] = SliceRange { start: Some(j as i64), stop: Some(j as i64 + 1), step: 1 };
        let c = cx.b.op(Op::Slice { ranges }, vec![indices])?;
        let c = cx.b.reshape(c, Shape(q[..k].to_vec()))?;
        let c = wrap(cx, c, len)?;
        valid = Some(in_range(cx, c, len, valid)?);
        out.push(c);
    }
    Ok((out, valid))
}

/// `GatherElements`: `y[i] = data[i with i[axis] = indices[i]]`, one gather of the
/// flattened data at `indices * stride[axis] + sum(iota_m * stride_m)`.
pub fn gather_elements(cx: &mut Cx, node: &Node) -> Out {
    let (data, indices) = (node.input(0)?, node.input(1)?);
    let (d, grid) = (dims(cx, data, "GatherElements")?, dims(cx, indices, "GatherElements")?);
    let ax = axis(node.int("axis", 0)?, d.len())?;
    if grid.len() != d.len() || (0..d.len()).any(|m| m != ax && grid[m] > d[m]) {
        return invalid(format!("indices {grid:?} do not fit data {d:?} along axis {ax}"));
    }
    let at = wrap(cx, indices, &Dim::Known(d[ax]))?;
    let valid = in_range(cx, at, &Dim::Known(d[ax]), None)?;
    let mut coords = Vec::with_capacity(d.len());
    for m in 0..d.len() {
        coords.push(if m == ax { at } else { iota(cx, &grid, m)? });
    }
    Ok(vec![gather_rows(cx, data, &known(&d), &coords, Some(valid), &known(&grid))?])
}

/// `GatherND` with `batch_dims` b: indices `[q.., m]` pick slices
/// `data[batch.., i0, .., i(m-1), :]`, one gather of the rows of data viewed as
/// `[prod(d[..b + m]), prod(d[b + m..])]`.
pub fn gather_nd(cx: &mut Cx, node: &Node) -> Out {
    let (data, indices) = (node.input(0)?, node.input(1)?);
    let (d, q) = (any_dims(cx, data, "GatherND")?, any_dims(cx, indices, "GatherND")?);
    let b = node.int("batch_dims", 0)?;
    let Some(m) = q.last().map_or(Some(0), Dim::known) else { return unsupported(format!("GatherND with indices {} of a symbolic last dimension", cx.b.shape(indices))) };
    let m = m as usize;
    let b = usize::try_from(b).ok().filter(|&b| b < q.len() && b + m <= d.len() && q[..b] == d[..b]);
    let Some(b) = b else { return invalid(format!("indices {} and batch_dims {} do not fit data {}", cx.b.shape(indices), node.int("batch_dims", 0)?, cx.b.shape(data))) };
    let grid = &q[..q.len() - 1];
    let mut coords = Vec::with_capacity(b + m);
    for t in 0..b {
        coords.push(iota_over(cx, grid, t)?);
    }
    let (picked, valid) = components(cx, indices, &q, &d[b..b + m])?;
    coords.extend(picked);
    Ok(vec![gather_rows(cx, data, &d, &coords, valid, grid)?])
}

/// `data` (`[pre, K, post]`) with `updates` written at `target` along `ax`; target
/// and updates are `[pre, J, post]` (target's `post` may be 1s, which broadcast), the
/// target an i64 position along `ax` (one outside `0..K` writes nothing, where ONNX calls
/// it an error). The mask
/// `hit[pre, k, j, post] = (k == target[pre, j, post])` is reduced over `j`:
/// `none` keeps the last update to each position (as ONNX's reference writes them in
/// order; ONNX leaves duplicates undefined), `add` and `mul` combine them with the data, `max` and `min` take the extreme
/// of the data and them.
fn scatter_along(cx: &mut Cx, data: ValueId, target: ValueId, updates: ValueId, ax: usize, reduction: &str) -> std::result::Result<ValueId, Fail> {
    let (d, t, u) = (dims(cx, data, "a scatter")?, dims(cx, target, "a scatter")?, dims(cx, updates, "a scatter")?);
    if t[ax] == 0 {
        return Ok(data);
    }
    let dtype = cx.b.dtype(data);
    let mask = inserted(&t, ax, d[ax]);
    let at = cx.b.reshape(target, Shape::known(&inserted(&t, ax, 1)))?;
    let k = iota(cx, &mask, ax)?;
    let hit = cx.b.binary(BinaryOp::Eq, k, at)?;
    let ups = cx.b.reshape(updates, Shape::known(&inserted(&u, ax, 1)))?;
    let over = vec![ax + 1];
    Ok(match reduction {
        "none" => {
            // The last update landing on each position (-1 for none), then one gather
            // of the updates at it: no mask as large as the updates times the data.
            let j = iota(cx, &mask, ax + 1)?;
            let none = cx.b.scalar(Dtype::I64, -1.0);
            let writes = cx.b.select(hit, j, none)?;
            let last = cx.b.reduce(ReduceKind::Max, writes, over, false)?;
            let written = cx.b.binary(BinaryOp::Gt, last, none)?;
            let zero = cx.b.scalar(Dtype::I64, 0.0);
            let from = cx.b.binary(BinaryOp::Max, last, zero)?;
            let mut coords = Vec::with_capacity(d.len());
            for m in 0..d.len() {
                coords.push(if m == ax { from } else { iota(cx, &d, m)? });
            }
            let value = gather_rows(cx, updates, &known(&u), &coords, None, &known(&d))?;
            cx.b.select(written, value, data)?
        }
        "add" | "mul" => {
            let (kind, op, unit) = if reduction == "add" { (ReduceKind::Sum, BinaryOp::Add, 0.0) } else { (ReduceKind::Prod, BinaryOp::Mul, 1.0) };
            let unit = cx.b.scalar(dtype, unit);
            let picked = cx.b.select(hit, ups, unit)?;
            let combined = cx.b.reduce(kind, picked, over, false)?;
            cx.b.binary(op, data, combined)?
        }
        "max" | "min" => {
            // Where no update lands the data stands in, so the reduction has no identity
            // to need; the data still joins where every update lands.
            let (kind, op) = if reduction == "max" { (ReduceKind::Max, BinaryOp::Max) } else { (ReduceKind::Min, BinaryOp::Min) };
            let own = cx.b.reshape(data, Shape::known(&inserted(&d, ax + 1, 1)))?;
            let picked = cx.b.select(hit, ups, own)?;
            let extreme = cx.b.reduce(kind, picked, over, false)?;
            cx.b.binary(op, data, extreme)?
        }
        other => return invalid(format!("reduction {other:?} is not none, add, mul, max or min")),
    })
}

/// The `reduction` attribute of a scatter (`none` before opset 16, and for `Scatter`).
fn reduction(node: &Node) -> std::result::Result<String, Fail> {
    if node.op_type == "Scatter" { Ok("none".into()) } else { node.string_or("reduction", "none") }
}

/// `ScatterElements` (and `Scatter`, its name before opset 11): `y = data`, then
/// `y[i with i[axis] = indices[i]] = updates[i]` (or combined by `reduction`). Indices
/// shorter than the data on the other axes are padded with -1 (no target).
pub fn scatter_elements(cx: &mut Cx, node: &Node) -> Out {
    let (data, indices, updates) = (node.input(0)?, node.input(1)?, node.input(2)?);
    let op = node.op_type;
    let (d, s) = (dims(cx, data, op)?, dims(cx, indices, op)?);
    let ax = axis(node.int("axis", 0)?, d.len())?;
    if s.len() != d.len() || dims(cx, updates, op)? != s || (0..d.len()).any(|m| m != ax && s[m] > d[m]) {
        return invalid(format!("indices {s:?} and updates {} do not fit data {d:?} along axis {ax}", cx.b.shape(updates)));
    }
    let mut target = wrap(cx, indices, &Dim::Known(d[ax]))?;
    let mut updates = updates;
    let pads: Vec<(u64, u64)> = (0..d.len()).map(|m| if m == ax { (0, 0) } else { (0, d[m] - s[m]) }).collect();
    if pads.iter().any(|p| p.1 > 0) {
        target = cx.b.op(Op::Pad { pads: pads.clone(), value: -1.0 }, vec![target])?;
        updates = cx.b.op(Op::Pad { pads, value: 0.0 }, vec![updates])?;
    }
    Ok(vec![scatter_along(cx, data, target, updates, ax, &reduction(node)?)?])
}

/// `ScatterND`: indices `[q.., m]` name slices `data[i0, .., i(m-1), :]` that `updates`
/// `[q.., d[m..]]` replace (or are combined with): a scatter of rows of data viewed as
/// `[prod(d[..m]), prod(d[m..])]`.
pub fn scatter_nd(cx: &mut Cx, node: &Node) -> Out {
    let (data, indices, updates) = (node.input(0)?, node.input(1)?, node.input(2)?);
    let (d, q, u) = (dims(cx, data, "ScatterND")?, dims(cx, indices, "ScatterND")?, dims(cx, updates, "ScatterND")?);
    let m = q.last().copied().unwrap_or(0) as usize;
    let lead = &q[..q.len().saturating_sub(1)];
    if q.is_empty() || m > d.len() || u[..] != [lead, &d[m..]].concat()[..] {
        return invalid(format!("indices {q:?} and updates {u:?} do not fit data {d:?}"));
    }
    // A target with a component out of range writes nothing (ONNX calls it an error).
    let (coords, valid) = components(cx, indices, &known(&q), &known(&d[..m]))?;
    let mut rows = offset(cx, &coords, &known(&d[..m]))?;
    if let Some(valid) = valid {
        let nowhere = cx.b.scalar(Dtype::I64, -1.0);
        rows = cx.b.select(valid, rows, nowhere)?;
    }
    let count: u64 = lead.iter().product();
    let rows = cx.b.reshape(rows, Shape::known(&[count, 1]))?;
    let (p, s) = (d[..m].iter().product::<u64>(), d[m..].iter().product::<u64>());
    let flat = cx.b.reshape(data, Shape::known(&[p, s]))?;
    let ups = cx.b.reshape(updates, Shape::known(&[count, s]))?;
    let y = scatter_along(cx, flat, rows, ups, 0, &reduction(node)?)?;
    Ok(vec![cx.b.reshape(y, Shape::known(&d))?])
}

/// `Trilu`: `x` where `j - i >= k` (upper) or `j - i <= k` (lower) over its last two
/// axes `[i, j]`, zero elsewhere; `k` may be computed at run time.
pub fn trilu(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    let r = shape.rank();
    if r < 2 {
        return invalid(format!("Trilu needs a rank-2 or higher input, got {shape}"));
    }
    let square = Shape(shape.0[r - 2..].to_vec());
    let rows = cx.b.op(Op::Iota { shape: square.clone(), axis: 0, dtype: Dtype::I64 }, vec![])?;
    let cols = cx.b.op(Op::Iota { shape: square, axis: 1, dtype: Dtype::I64 }, vec![])?;
    let diagonal = cx.b.binary(BinaryOp::Sub, cols, rows)?;
    let k = match node.opt(1) {
        Some(k) => int64(cx, k)?,
        None => cx.b.scalar(Dtype::I64, 0.0),
    };
    let cmp = if node.int("upper", 1)? != 0 { BinaryOp::Ge } else { BinaryOp::Le };
    let keep = cx.b.binary(cmp, diagonal, k)?;
    let zero = cx.b.scalar(cx.b.dtype(x), 0.0);
    Ok(vec![cx.b.select(keep, x, zero)?])
}

/// `OneHot`: `values[1]` where the position along the new axis `axis` equals the index
/// (negative ones counted from `depth`, in every opset as ONNX Runtime has it; out of
/// range, none), `values[0]` elsewhere; `depth` is needed when
/// compiling, the values may come at run time.
pub fn one_hot(cx: &mut Cx, node: &Node) -> Out {
    let (indices, values) = (node.input(0)?, node.input(2)?);
    let depth = match input_floats(cx, node, 1)?.as_deref() {
        Some(&[d]) if d >= 0.0 && d.trunc() <= u32::MAX as f64 => d.trunc() as u64,
        Some(other) => return invalid(format!("OneHot's depth {other:?} is not one non-negative number")),
        None => return invalid("OneHot has no depth"),
    };
    if cx.b.shape(values) != Shape::known(&[2]) {
        return invalid(format!("OneHot's values are {}, not [off, on]", cx.b.shape(values)));
    }
    let mut shape = cx.b.shape(indices);
    let ax = axis(node.int("axis", -1)?, shape.rank() + 1)?;
    shape.0.insert(ax, Dim::Known(depth));
    let at = wrap(cx, indices, &Dim::Known(depth))?;
    let hit = cx.b.one_hot(at, shape, ax)?;
    let pick = |cx: &mut Cx, i: i64| -> Result<ValueId> {
        let v = cx.b.op(Op::Slice { ranges: vec![SliceRange { start: Some(i), stop: Some(i + 1), step: 1 }] }, vec![values])?;
        cx.b.reshape(v, Shape::scalar())
    };
    let (off, on) = (pick(cx, 0)?, pick(cx, 1)?);
    Ok(vec![cx.b.select(hit, on, off)?])
}

/// `CumSum` and `CumProd` along `axis` (an input needed when compiling): the inclusive
/// scan of Hillis and Steele, `y += shift(y, s)` for `s = 1, 2, 4, ..` below the
/// axis' length; `exclusive` scans `x` shifted by one, `reverse` shifts towards the
/// front.
pub fn cumulative(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    let ax = match input_ints(cx, node, 1)?.as_deref() {
        Some(&[a]) => axis(a, shape.rank())?,
        Some(other) => return invalid(format!("{}'s axis {other:?} is not one integer", node.op_type)),
        None => return invalid(format!("{} has no axis", node.op_type)),
    };
    let Some(n) = shape.0[ax].known() else { return unsupported(format!("{} along the symbolic axis {ax} of {shape}", node.op_type)) };
    let (op, unit) = if node.op_type == "CumSum" { (BinaryOp::Add, 0.0) } else { (BinaryOp::Mul, 1.0) };
    let back = node.int("reverse", 0)? != 0;
    let mut y = if node.int("exclusive", 0)? != 0 { shift(cx, x, ax, 1, back, unit)? } else { x };
    let mut by = 1;
    while by < n {
        let moved = shift(cx, y, ax, by, back, unit)?;
        y = cx.b.binary(op, y, moved)?;
        by *= 2;
    }
    Ok(vec![y])
}

/// The largest `k` TopK takes (each of the `k` rounds is a pass over the input).
const TOP_K_ROUNDS: u64 = 1024;

/// `TopK` with `k` known when compiling: `k` rounds, each taking the best value not yet
/// taken (`reduce_max`, or `reduce_min` when not `largest`) and the first position
/// holding it (`argmax` of the match); values and indices are concatenated in order, so
/// the output is sorted (which `sorted = 0` allows). NaN counts as the extreme value,
/// as the IR's max and min have it.
pub fn top_k(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    let ax = axis(node.int("axis", -1)?, shape.rank())?;
    let k = if node.opset < 10 { node.int_opt("k")? } else { input_ints(cx, node, 1)?.and_then(|k| k.first().copied()) };
    let Some(n) = shape.0[ax].known() else { return unsupported(format!("TopK along the symbolic axis {ax} of {shape}")) };
    let Some(k) = k else { return invalid("TopK has no k") };
    if !(0..=n as i64).contains(&k) {
        return invalid(format!("TopK's k {k} is not in 0..={n}"));
    }
    let k = k as u64;
    if k > TOP_K_ROUNDS {
        return unsupported(format!("TopK with k = {k}: more than {TOP_K_ROUNDS} rounds of selection"));
    }
    let largest = node.int("largest", 1)? != 0;
    let dtype = cx.b.dtype(x);
    if k == 0 {
        let mut ranges = vec![SliceRange::FULL; shape.rank()];
        ranges[ax] = SliceRange { start: Some(0), stop: Some(0), step: 1 };
        let empty = cx.b.op(Op::Slice { ranges }, vec![x])?;
        return Ok(vec![empty, cx.b.cast(empty, Dtype::I64)?]);
    }
    // What a taken position holds in the next rounds: never better than another.
    // (An integer type's limits: 2^bits - 1 of u64 is 2^64 as f64, which stands for it.)
    let bits = 8 * dtype.size() as i32;
    let (low, high) = match dtype {
        d if d.is_float() => (f64::NEG_INFINITY, f64::INFINITY),
        d if d.is_signed_int() => (-(2f64.powi(bits - 1)), 2f64.powi(bits - 1) - 1.0),
        d if d.is_unsigned_int() => (0.0, 2f64.powi(bits) - 1.0),
        d => return unsupported(format!("TopK of {d}")),
    };
    let worst = cx.b.scalar(dtype, if largest { low } else { high });
    let kind = if largest { ReduceKind::Max } else { ReduceKind::Min };
    let mut kept = shape.clone();
    kept.0[ax] = Dim::Known(1);
    let (mut values, mut indices) = (Vec::new(), Vec::new());
    let mut taken: Option<ValueId> = None;
    for round in 0..k {
        let (best, at) = best_open(cx, x, taken, worst, kind, ax)?;
        values.push(best);
        indices.push(cx.b.reshape(at, kept.clone())?);
        if round + 1 < k {
            let hit = cx.b.one_hot(at, shape.clone(), ax)?;
            taken = Some(match taken {
                Some(t) => cx.b.binary(BinaryOp::Or, t, hit)?,
                None => hit,
            });
        }
    }
    let join = |cx: &mut Cx, parts: Vec<ValueId>| if parts.len() == 1 { Ok(parts[0]) } else { cx.b.op(Op::Concat { axis: ax }, parts) };
    Ok(vec![join(cx, values)?, join(cx, indices)?])
}

/// One round of TopK: the best (`kind`) of `x` along `ax` where not `taken` (`worst`
/// stands there), kept as a size-1 axis, and the first position not taken that holds
/// it (NaN matching NaN), without the axis.
fn best_open(cx: &mut Cx, x: ValueId, taken: Option<ValueId>, worst: ValueId, kind: ReduceKind, ax: usize) -> Result<(ValueId, ValueId)> {
    let open = match taken {
        Some(t) => cx.b.select(t, worst, x)?,
        None => x,
    };
    let best = cx.b.reduce(kind, open, vec![ax], true)?;
    let mut here = cx.b.binary(BinaryOp::Eq, x, best)?;
    if cx.b.dtype(x).is_float() {
        let (xn, bn) = (cx.b.unary(UnaryOp::IsNan, x)?, cx.b.unary(UnaryOp::IsNan, best)?);
        let both = cx.b.binary(BinaryOp::And, xn, bn)?;
        here = cx.b.binary(BinaryOp::Or, here, both)?;
    }
    if let Some(t) = taken {
        let free = cx.b.unary(UnaryOp::Not, t)?;
        here = cx.b.binary(BinaryOp::And, here, free)?;
    }
    let score = cx.b.cast(here, Dtype::I32)?;
    let at = cx.b.op(Op::ArgReduce { kind: ArgKind::ArgMax, axis: Some(ax), keepdim: false }, vec![score])?;
    Ok((best, at))
}

/// `Compress` by a `condition` known when compiling: a gather of the positions where it
/// holds, along `axis` or of the flattened input.
pub fn compress(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let Some(condition) = input_floats(cx, node, 1)? else { return invalid("Compress has no condition") };
    let keep: Vec<f64> = condition.iter().enumerate().filter(|(_, &c)| c != 0.0).map(|(i, _)| i as f64).collect();
    let (x, ax) = match node.int_opt("axis")? {
        Some(a) => (x, axis(a, cx.b.rank(x))?),
        None => {
            let all = Dim::product(&cx.b.shape(x).0).map_err(crate::error::Error::user)?;
            (cx.b.reshape(x, Shape(vec![all]))?, 0)
        }
    };
    let shape = cx.b.shape(x);
    if let (Some(&last), Some(n)) = (keep.last(), shape.0.get(ax).and_then(Dim::known)) {
        if last as u64 >= n {
            return invalid(format!("Compress's condition selects position {last} of an axis of {n}"));
        }
    }
    let at = cx.b.constant(Tensor::new(Dtype::I64, vec![keep.len() as u64], keep));
    Ok(vec![cx.b.op(Op::Gather { axis: ax }, vec![x, at])?])
}

/// `ReverseSequence`: along `time_axis`, the first `sequence_lens[b]` elements of each
/// batch `b` reversed: a gather at time `t < len ? len - 1 - t : t` (the lengths may
/// come at run time).
pub fn reverse_sequence(cx: &mut Cx, node: &Node) -> Out {
    let (x, lens) = (node.input(0)?, node.input(1)?);
    let d = dims(cx, x, "ReverseSequence")?;
    let r = d.len();
    let (bx, tx) = (axis(node.int("batch_axis", 1)?, r)?, axis(node.int("time_axis", 0)?, r)?);
    if bx == tx || cx.b.shape(lens) != Shape::known(&[d[bx]]) {
        return invalid(format!("batch_axis {bx}, time_axis {tx} and sequence_lens {} do not fit {d:?}", cx.b.shape(lens)));
    }
    // Only the axes up to the later of the two need coordinates; the rest move whole.
    let grid = &d[..bx.max(tx) + 1];
    let mut per_batch = vec![1; grid.len()];
    per_batch[bx] = d[bx];
    let lens = int64(cx, lens)?;
    let len = cx.b.reshape(lens, Shape::known(&per_batch))?;
    let t = iota(cx, grid, tx)?;
    let one = cx.b.scalar(Dtype::I64, 1.0);
    let within = cx.b.binary(BinaryOp::Lt, t, len)?;
    let end = cx.b.binary(BinaryOp::Sub, len, one)?;
    let back = cx.b.binary(BinaryOp::Sub, end, t)?;
    let source = cx.b.select(within, back, t)?;
    // A length past the time axis reads out of range: the gather fails.
    let valid = in_range(cx, source, &Dim::Known(d[tx]), None)?;
    let mut coords = Vec::with_capacity(grid.len());
    for m in 0..grid.len() {
        coords.push(if m == tx { source } else { iota(cx, grid, m)? });
    }
    Ok(vec![gather_rows(cx, x, &known(&d), &coords, Some(valid), &known(grid))?])
}

/// `CenterCropPad` to `shape` on `axes`: each axis longer than its target is cropped
/// around its centre (one slice), each shorter padded with zeros around it (one pad);
/// an odd difference puts the extra element at the end.
pub fn center_crop_pad(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    let r = shape.rank();
    let Some(target) = input_ints(cx, node, 1)? else { return invalid("CenterCropPad has no shape") };
    let on: Vec<usize> = match node.ints("axes")? {
        Some(list) => list.iter().map(|&a| axis(a, r)).collect::<std::result::Result<_, _>>()?,
        None => (0..r).collect(),
    };
    if target.len() != on.len() || target.iter().any(|&t| t < 0) {
        return invalid(format!("shape {target:?} does not fit axes {on:?} of {shape}"));
    }
    let mut ranges = vec![SliceRange::FULL; r];
    let mut pads = vec![(0, 0); r];
    for (&a, &t) in on.iter().zip(&target) {
        let t = t as u64;
        let Some(n) = shape.0[a].known() else { return unsupported(format!("CenterCropPad of the symbolic axis {a} of {shape}")) };
        if n > t {
            let start = (n - t) / 2;
            ranges[a] = SliceRange { start: Some(start as i64), stop: Some((start + t) as i64), step: 1 };
        } else if n < t {
            let before = (t - n) / 2;
            pads[a] = (before, t - n - before);
        }
    }
    let mut y = x;
    if ranges.iter().any(|s| !s.is_full()) {
        y = cx.b.op(Op::Slice { ranges }, vec![y])?;
    }
    if pads.iter().any(|&(lo, hi)| lo + hi > 0) {
        y = cx.b.op(Op::Pad { pads, value: 0.0 }, vec![y])?;
    }
    Ok(vec![y])
}

/// One-node models built here and run through the interpreter, for what ONNX's node
/// tests leave out. The expected values are onnxruntime 1.22's (ONNX's reference agrees
/// unless a test says otherwise); `resize.rs` builds its models with these helpers too.
/// `TensorScatter` (opset 24): `update` `[B, .., S, ..]` written into `past_cache`
/// `[B, .., M, ..]` along `axis` (default -2, not the batch axis) from each batch
/// entry's `write_indices[b]` (default 0) on; mode `circular` wraps positions modulo M.
/// Each cache position `p` reads the update at `p - w[b]` (modulo M when circular)
/// where that lies below S, and keeps the cache elsewhere.
pub fn tensor_scatter(cx: &mut Cx, node: &Node) -> Out {
    let (cache, update) = (node.input(0)?, node.input(1)?);
    let (cd, ud) = (dims(cx, cache, "TensorScatter")?, dims(cx, update, "TensorScatter")?);
    let ax = axis(node.int("axis", -2)?, cd.len())?;
    let fits = ud.len() == cd.len() && ud.iter().zip(&cd).enumerate().all(|(i, (u, c))| if i == ax { u <= c } else { u == c });
    if ax == 0 || !fits {
        return invalid(format!("TensorScatter of update {} into {} along axis {ax}", cx.b.shape(update), cx.b.shape(cache)));
    }
    let circular = match node.string_or("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        m => return invalid(format!("TensorScatter's mode is linear or circular, got {m:?}")),
    };
    let (m, s) = (cd[ax] as f64, ud[ax]);
    let mut pos = iota(cx, &cd, ax)?;
    if let Some(w) = node.opt(2) {
        let w = int64(cx, w)?;
        let mut wd = vec![1; cd.len()];
        wd[0] = cd[0];
        let w = cx.b.reshape(w, Shape::known(&wd))?;
        pos = cx.b.binary(BinaryOp::Sub, pos, w)?;
    }
    if circular {
        // pos - M floor(pos / M)
        let mm = cx.b.scalar(Dtype::I64, m);
        let q = cx.b.binary(BinaryOp::FloorDiv, pos, mm)?;
        let qm = cx.b.binary(BinaryOp::Mul, q, mm)?;
        pos = cx.b.binary(BinaryOp::Sub, pos, qm)?;
    }
    let valid = in_range(cx, pos, &Dim::Known(s), None)?;
    let zero = cx.b.scalar(Dtype::I64, 0.0);
    let at = cx.b.select(valid, pos, zero)?;
    let coords = (0..cd.len()).map(|i| if i == ax { Ok(at) } else { iota(cx, &cd, i) }).collect::<Result<Vec<_>>>()?;
    let read = gather_rows(cx, update, &known(&ud), &coords, None, &known(&cd))?;
    Ok(vec![cx.b.select(valid, read, cache)?])
}

/// `MaxUnpool`: `X` `[N, C, d..]` written into zeros of the pooled input's shape
/// (`(d - 1) stride - pads + kernel` per axis) at `I`, MaxPool's indices into that
/// tensor flattened (a scatter along it); then padded with zeros at the end of each axis
/// up to `output_shape` when given (known when compiling).
pub fn max_unpool(cx: &mut Cx, node: &Node) -> Out {
    let (x, at) = (node.input(0)?, node.input(1)?);
    let xd = dims(cx, x, "MaxUnpool")?;
    let n = xd.len().saturating_sub(2);
    let Some(kernel) = node.ints("kernel_shape")? else { return invalid("MaxUnpool has no kernel_shape") };
    let strides = node.ints("strides")?.unwrap_or_else(|| vec![1; n]);
    let pads = node.ints("pads")?.unwrap_or_else(|| vec![0; 2 * n]);
    if n == 0 || kernel.len() != n || strides.len() != n || pads.len() != 2 * n || cx.b.shape(at) != cx.b.shape(x) {
        return invalid(format!("MaxUnpool of {} at indices {} with kernel_shape {kernel:?}, strides {strides:?}, pads {pads:?}", cx.b.shape(x), cx.b.shape(at)));
    }
    let mut shape = xd[..2].to_vec();
    for i in 0..n {
        match (xd[i + 2] as i64 - 1).checked_mul(strides[i]).map(|v| v - pads[i] - pads[n + i] + kernel[i]) {
            Some(d) if (1..=1 << 40).contains(&d) => shape.push(d as u64),
            _ => return invalid(format!("MaxUnpool of {} with kernel_shape {kernel:?}, strides {strides:?} and pads {pads:?} has no output", cx.b.shape(x))),
        }
    }
    let (total, count): (u64, u64) = (shape.iter().product(), xd.iter().product());
    let dtype = cx.b.dtype(x);
    let zeros = cx.b.full(dtype, Shape::known(&[1, total, 1]), 0.0)?;
    let target = cx.b.reshape(at, Shape::known(&[1, count, 1]))?;
    let target = int64(cx, target)?;
    let values = cx.b.reshape(x, Shape::known(&[1, count, 1]))?;
    let flat = scatter_along(cx, zeros, target, values, 1, "none")?;
    let y = cx.b.reshape(flat, Shape::known(&shape))?;
    let Some(out) = input_ints(cx, node, 2)? else { return Ok(vec![y]) };
    if out.len() != shape.len() || out.iter().zip(&shape).any(|(&o, &s)| o < s as i64) {
        return invalid(format!("MaxUnpool's output_shape {out:?} is smaller than the unpooled {shape:?}"));
    }
    let grow = out.iter().zip(&shape).map(|(&o, &s)| (0, o as u64 - s)).collect();
    Ok(vec![cx.b.op(Op::Pad { pads: grow, value: 0.0 }, vec![y])?])
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;

    use prost::Message;

    use crate::frontend::onnx::proto::tensor_shape_proto::{dimension, Dimension};
    use crate::frontend::onnx::proto::type_proto::{self, Value};
    use crate::frontend::onnx::proto::{AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto};
    use crate::ir::Dtype;
    use crate::tensor::Tensor;

    /// An input of the node: fed at run time, an initializer (known when compiling), or
    /// left out.
    pub enum Arg {
        Fed(Tensor),
        Known(Tensor),
        Absent,
    }

    /// An attribute value.
    pub enum A {
        I(i64),
        F(f32),
        S(&'static str),
        Is(&'static [i64]),
        Fs(&'static [f32]),
    }

    pub fn t(dtype: Dtype, shape: &[u64], data: &[f64]) -> Tensor {
        Tensor::new(dtype, shape.to_vec(), data.to_vec())
    }

    /// ONNX's element type code and the little-endian bytes of `t`.
    fn encode(t: &Tensor) -> (i32, Vec<u8>) {
        let d = &t.data;
        match t.dtype {
            Dtype::F32 => (1, d.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect()),
            Dtype::I32 => (6, d.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect()),
            Dtype::I64 => (7, d.iter().flat_map(|&v| (v as i64).to_le_bytes()).collect()),
            Dtype::Bool => (9, d.iter().map(|&v| u8::from(v != 0.0)).collect()),
            other => panic!("no test encoding for {other}"),
        }
    }

    fn attribute(name: &str, a: &A) -> AttributeProto {
        let mut p = AttributeProto { name: Some(name.into()), ..Default::default() };
        match a {
            A::F(f) => (p.r#type, p.f) = (Some(1), Some(*f)),
            A::I(i) => (p.r#type, p.i) = (Some(2), Some(*i)),
            A::S(s) => (p.r#type, p.s) = (Some(3), Some(s.as_bytes().to_vec())),
            A::Fs(v) => (p.r#type, p.floats) = (Some(6), v.to_vec()),
            A::Is(v) => (p.r#type, p.ints) = (Some(7), v.to_vec()),
        }
        p
    }

    /// Runs `op` (opset `opset`, attributes `attrs`) on `args`, giving its first
    /// `outputs` outputs, or the whole error message (the model file named `m.onnx`).
    pub fn run(op: &str, opset: i64, attrs: &[(&str, A)], args: Vec<Arg>, outputs: usize) -> Result<Vec<Tensor>, String> {
        let mut graph = GraphProto { name: Some("g".into()), ..Default::default() };
        let mut feeds = BTreeMap::new();
        let mut inputs = Vec::new();
        for (i, arg) in args.into_iter().enumerate() {
            let name = format!("x{i}");
            match arg {
                Arg::Absent => {
                    inputs.push(String::new());
                    continue;
                }
                Arg::Known(t) => {
                    let (code, bytes) = encode(&t);
                    let dims = t.shape.iter().map(|&d| d as i64).collect();
                    graph.initializer.push(TensorProto { name: Some(name.clone()), data_type: Some(code), dims, raw_data: Some(bytes.into()), ..Default::default() });
                }
                Arg::Fed(t) => {
                    let dim = t.shape.iter().map(|&d| Dimension { value: Some(dimension::Value::DimValue(d as i64)), ..Default::default() }).collect();
                    let tensor = type_proto::Tensor { elem_type: Some(encode(&t).0), shape: Some(TensorShapeProto { dim }) };
                    graph.input.push(ValueInfoProto { name: Some(name.clone()), r#type: Some(TypeProto { value: Some(Value::TensorType(tensor)), ..Default::default() }), ..Default::default() });
                    feeds.insert(name.clone(), t);
                }
            }
            inputs.push(name);
        }
        let output: Vec<String> = (0..outputs).map(|k| format!("y{k}")).collect();
        graph.output = output.iter().map(|n| ValueInfoProto { name: Some(n.clone()), ..Default::default() }).collect();
        let attribute = attrs.iter().map(|(n, a)| attribute(n, a)).collect();
        graph.node.push(NodeProto { input: inputs, output, op_type: Some(op.into()), attribute, ..Default::default() });
        let model = ModelProto { ir_version: Some(8), opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }], graph: Some(graph), ..Default::default() };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        std::fs::write(&path, model.encode_to_vec()).unwrap();
        let shown = path.display().to_string();
        let fail = |e: crate::error::Error| e.to_string().replace(&shown, "m.onnx");
        let loaded = crate::frontend::onnx::import::load(&path, &Default::default()).map_err(fail)?;
        feeds.extend(loaded.weights.iter().map(|(n, w)| (n.clone(), w.to_tensor())));
        let out = crate::interp::run(&loaded.graph, &feeds).map_err(fail)?;
        Ok(out.into_iter().map(|(_, t)| t).collect())
    }

    /// `run`, which must succeed with one output.
    pub fn one(op: &str, opset: i64, attrs: &[(&str, A)], args: Vec<Arg>) -> Tensor {
        run(op, opset, attrs, args, 1).unwrap_or_else(|e| panic!("{op}: {e}")).remove(0)
    }

    /// `got` has `shape` and, within f32 rounding, `want`.
    pub fn check(got: &Tensor, shape: &[u64], want: &[f64]) {
        assert_eq!(got.shape, shape, "{got:?}");
        let near = got.data.iter().zip(want).all(|(g, w)| g == w || (g - w).abs() <= 1e-5 * w.abs().max(1.0));
        assert!(near && got.data.len() == want.len(), "got {:?}, want {want:?}", got.data);
    }

    fn f32s(shape: &[u64], data: &[f64]) -> Tensor {
        t(Dtype::F32, shape, data)
    }

    fn i64s(shape: &[u64], data: &[f64]) -> Tensor {
        t(Dtype::I64, shape, data)
    }

    fn iota(shape: &[u64]) -> Tensor {
        let n: u64 = shape.iter().product();
        f32s(shape, &(0..n).map(|i| i as f64).collect::<Vec<_>>())
    }

    use Arg::{Fed, Known};

    #[test]
    fn scatter_elements_with_short_indices_and_duplicates() {
        // Indices cover rows 0 and 1 of 3; row 0 writes column 3 twice (-1 is 3): the
        // last update wins.
        let y = one("ScatterElements", 18, &[("axis", A::I(1))], vec![Fed(iota(&[3, 4])), Fed(i64s(&[2, 2], &[1.0, -1.0, 3.0, 3.0])), Fed(f32s(&[2, 2], &[10.0, 11.0, 12.0, 13.0]))]);
        check(&y, &[3, 4], &[0.0, 10.0, 2.0, 11.0, 4.0, 5.0, 6.0, 13.0, 8.0, 9.0, 10.0, 11.0]);
        let y = one("ScatterElements", 18, &[("axis", A::I(0)), ("reduction", A::S("min"))], vec![Fed(iota(&[3, 4])), Fed(i64s(&[1, 3], &[2.0, 0.0, 2.0])), Fed(f32s(&[1, 3], &[-1.0, -2.0, 100.0]))]);
        check(&y, &[3, 4], &[0.0, -2.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, -1.0, 9.0, 10.0, 11.0]);
    }

    #[test]
    fn scatter_nd_of_rows_and_of_elements() {
        // [1, -1] and [1, 2] both name row [1, 2]: the last wins.
        let indices = i64s(&[3, 2], &[1.0, -1.0, 0.0, 0.0, 1.0, 2.0]);
        let updates = f32s(&[3, 4], &(1..=12).map(f64::from).collect::<Vec<_>>());
        let y = one("ScatterND", 18, &[], vec![Fed(iota(&[2, 3, 4])), Fed(indices), Fed(updates)]);
        let mut want: Vec<f64> = (0..24).map(f64::from).collect();
        want[..4].copy_from_slice(&[5.0, 6.0, 7.0, 8.0]);
        want[20..].copy_from_slice(&[9.0, 10.0, 11.0, 12.0]);
        check(&y, &[2, 3, 4], &want);
        let y = one("ScatterND", 16, &[("reduction", A::S("add"))], vec![Fed(iota(&[2, 3])), Fed(i64s(&[3, 2], &[0.0, 1.0, 0.0, 1.0, 1.0, -1.0])), Fed(f32s(&[3], &[10.0, 20.0, 30.0]))]);
        check(&y, &[2, 3], &[0.0, 31.0, 2.0, 3.0, 4.0, 35.0]);
        // [0, 3] is out of range (and not row [1, 0]): it writes nothing.
        let y = one("ScatterND", 13, &[], vec![Fed(iota(&[2, 3])), Fed(i64s(&[1, 2], &[0.0, 3.0])), Fed(f32s(&[1], &[-1.0]))]);
        check(&y, &[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    #[test]
    fn gathers_with_batch_dims_and_short_indices() {
        let y = one("GatherND", 13, &[("batch_dims", A::I(1))], vec![Fed(iota(&[2, 3, 4])), Fed(i64s(&[2, 2, 1], &[2.0, -3.0, 1.0, 1.0]))]);
        check(&y, &[2, 2, 4], &[8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0, 16.0, 17.0, 18.0, 19.0, 16.0, 17.0, 18.0, 19.0]);
        // Fewer rows of indices than of data (onnxruntime allows it; the reference not).
        let y = one("GatherElements", 13, &[("axis", A::I(1))], vec![Fed(iota(&[3, 4])), Fed(i64s(&[1, 3], &[3.0, -4.0, 1.0]))]);
        check(&y, &[1, 3], &[3.0, 0.0, 1.0]);
        // An index out of range fails, as ONNX has it, rather than read another row.
        let e = run("GatherElements", 13, &[("axis", A::I(1))], vec![Fed(iota(&[3, 4])), Fed(i64s(&[1, 1], &[4.0]))], 1).unwrap_err();
        assert_eq!(e, "%19 = gather (#0 (GatherElements)): gather index 12 is out of range for axis 0 of size 12");
        let e = run("GatherND", 13, &[], vec![Fed(iota(&[3, 4])), Fed(i64s(&[1, 2], &[0.0, -5.0]))], 1).unwrap_err();
        assert_eq!(e, "%33 = gather (#0 (GatherND)): gather index 12 is out of range for axis 0 of size 12");
    }

    #[test]
    fn top_k_breaks_ties_by_index_and_takes_infinities() {
        let inf = f64::INFINITY;
        let x = f32s(&[4, 3], &[1.0, -inf, 3.0, 5.0, -inf, 3.0, 5.0, -inf, -1.0, 0.0, -inf, 3.0]);
        let y = run("TopK", 11, &[("axis", A::I(0))], vec![Fed(x), Known(i64s(&[1], &[3.0]))], 2).unwrap();
        check(&y[0], &[3, 3], &[5.0, -inf, 3.0, 5.0, -inf, 3.0, 1.0, -inf, 3.0]);
        assert_eq!((y[1].dtype, &y[1].data[..]), (Dtype::I64, &[1.0, 0.0, 0.0, 2.0, 1.0, 1.0, 0.0, 2.0, 3.0][..]));
        let x = t(Dtype::I32, &[1, 5], &[4.0, 2.0, 2.0, 9.0, -7.0]);
        let y = run("TopK", 11, &[("axis", A::I(1)), ("largest", A::I(0))], vec![Fed(x), Known(i64s(&[1], &[4.0]))], 2).unwrap();
        assert_eq!((y[0].dtype, &y[0].data[..], &y[1].data[..]), (Dtype::I32, &[-7.0, 2.0, 2.0, 4.0][..], &[4.0, 1.0, 2.0, 0.0][..]));
        // Before opset 10, k is an attribute.
        let y = run("TopK", 9, &[("k", A::I(2))], vec![Fed(f32s(&[2, 3], &[1.0, 3.0, 2.0, 6.0, 5.0, 4.0]))], 2).unwrap();
        check(&y[0], &[2, 2], &[3.0, 2.0, 6.0, 5.0]);
        assert_eq!(y[1].data, [1.0, 2.0, 0.0, 1.0]);
    }

    #[test]
    fn one_hot_leaves_out_of_range_indices_off() {
        // 10 and -11 are outside [-10, 10): no position is on (the reference wraps them).
        let y = one("OneHot", 11, &[("axis", A::I(0))], vec![Fed(i64s(&[5], &[0.0, 10.0, -10.0, -11.0, 3.0])), Known(i64s(&[], &[10.0])), Fed(f32s(&[2], &[0.0, 1.0]))]);
        let mut want = vec![0.0; 50];
        for (depth, i) in [(0, 0), (0, 2), (3, 4)] {
            want[depth * 5 + i] = 1.0;
        }
        check(&y, &[10, 5], &want);
        let y = one("OneHot", 9, &[], vec![Fed(i64s(&[2], &[1.0, -1.0])), Known(f32s(&[1], &[4.0])), Fed(f32s(&[2], &[-1.0, 1.0]))]);
        check(&y, &[2, 4], &[-1.0, 1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 1.0]);
    }

    #[test]
    fn scans_of_odd_lengths() {
        let y = one("CumSum", 14, &[("reverse", A::I(1)), ("exclusive", A::I(1))], vec![Fed(iota(&[2, 5])), Known(t(Dtype::I32, &[], &[1.0]))]);
        check(&y, &[2, 5], &[10.0, 9.0, 7.0, 4.0, 0.0, 30.0, 24.0, 17.0, 9.0, 0.0]);
        let y = one("CumProd", 26, &[("exclusive", A::I(1))], vec![Fed(i64s(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])), Known(i64s(&[], &[0.0]))]);
        assert_eq!((y.dtype, &y.data[..]), (Dtype::I64, &[1.0, 1.0, 1.0, 2.0, 3.0, 8.0][..]));
    }

    #[test]
    fn reverse_sequence_trilu_compress_and_crop() {
        let y = one("ReverseSequence", 10, &[("batch_axis", A::I(0)), ("time_axis", A::I(1))], vec![Fed(iota(&[2, 4, 3])), Fed(i64s(&[2], &[3.0, 1.0]))]);
        let mut want: Vec<f64> = (0..24).map(f64::from).collect();
        want[..9].copy_from_slice(&[6.0, 7.0, 8.0, 3.0, 4.0, 5.0, 0.0, 1.0, 2.0]);
        check(&y, &[2, 4, 3], &want);
        // k at run time.
        let y = one("Trilu", 14, &[("upper", A::I(0))], vec![Fed(iota(&[3, 4])), Fed(i64s(&[], &[-1.0]))]);
        check(&y, &[3, 4], &[0.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0, 8.0, 9.0, 0.0, 0.0]);
        let condition = t(Dtype::Bool, &[6], &[0.0, 1.0, 0.0, 0.0, 1.0, 1.0]);
        check(&one("Compress", 11, &[], vec![Fed(iota(&[3, 4])), Known(condition)]), &[3], &[1.0, 4.0, 5.0]);
        let y = one("CenterCropPad", 18, &[("axes", A::Is(&[1, 0]))], vec![Fed(iota(&[3, 5])), Known(i64s(&[2], &[2.0, 6.0]))]);
        check(&y, &[6, 2], &[0.0, 0.0, 1.0, 2.0, 6.0, 7.0, 11.0, 12.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn what_cannot_be_compiled_is_said() {
        let e = run("TopK", 11, &[], vec![Fed(iota(&[4])), Fed(i64s(&[1], &[2.0]))], 2).unwrap_err();
        assert_eq!(e, "m.onnx: 1 of the model's 1 node(s) cannot be compiled:\n  node 0 (TopK): its input 1 (x1) is computed at run time, and TopK needs it known when compiling");
        let condition = t(Dtype::Bool, &[5], &[0.0, 0.0, 0.0, 0.0, 1.0]);
        let e = run("Compress", 11, &[("axis", A::I(1))], vec![Fed(iota(&[2, 4])), Known(condition)], 1).unwrap_err();
        assert_eq!(e, "m.onnx: node 0 (Compress): Compress's condition selects position 4 of an axis of 4");
        let e = run("TopK", 11, &[], vec![Fed(iota(&[4])), Known(i64s(&[1], &[5.0]))], 2).unwrap_err();
        assert_eq!(e, "m.onnx: node 0 (TopK): TopK's k 5 is not in 0..=4");
        let e = run("TopK", 11, &[], vec![Fed(iota(&[2000])), Known(i64s(&[1], &[1025.0]))], 2).unwrap_err();
        assert_eq!(e, "m.onnx: 1 of the model's 1 node(s) cannot be compiled:\n  node 0 (TopK): TopK with k = 1025: more than 1024 rounds of selection");
    }
}
