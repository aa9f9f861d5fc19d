//! Shapes and data movement: reshapes, transposes, broadcasts, concatenation,
//! splitting, slicing, gathering, tiling and padding.

use super::{axes, axis, input_dims, input_floats, input_ints, show_dims, Cx};
use crate::frontend::onnx::node::{invalid, unsupported, Node, Out};
use crate::ir::builder::resolve_infer_dim;
use crate::ir::{BinaryOp, Dim, Dtype, Op, Poly, Shape, SliceRange, ValueId};

/// `Identity` and `Dropout` (at inference, the identity; its mask all true).
pub fn identity(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    if node.op_type == "Dropout" {
        let training = match node.opt(2) {
            Some(_) => input_ints(cx, node, 2)?.is_some_and(|t| t.iter().any(|&v| v != 0)),
            None => node.opset < 7 && node.int("is_test", 0)? == 0,
        };
        // The ratio: an attribute before opset 12, an input since (default 1/2).
        let ratio = if node.opset < 12 { node.float("ratio", 0.5)? } else { input_floats(cx, node, 1)?.and_then(|r| r.first().copied()).unwrap_or(0.5) };
        if training && ratio != 0.0 {
            return unsupported("Dropout in training mode (random)");
        }
        if node.outputs() > 1 {
            let shape = cx.b.shape(x);
            let mask = cx.b.full(crate::ir::Dtype::Bool, shape, 1.0)?;
            return Ok(vec![x, mask]);
        }
    }
    Ok(vec![x])
}

/// `Reshape` to its `shape` input (or attribute before opset 5): `0` copies the
/// input's dimension (unless `allowzero`), `-1` is inferred.
pub fn reshape(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let target = if node.opset < 5 { node.ints("shape")?.map(|l| l.into_iter().map(Poly::constant).collect()) } else { input_dims(cx, node, 1)? };
    let Some(target) = target else { return invalid("Reshape has no shape") };
    let (input, shown) = (cx.b.shape(x), show_dims(&target));
    let allow_zero = node.int("allowzero", 0)? != 0;
    let mut dims = Vec::with_capacity(target.len());
    for (i, d) in target.iter().enumerate() {
        dims.push(match d.as_constant() {
            Some(-1) => None,
            Some(0) if !allow_zero => Some(input.0.get(i).cloned().ok_or_else(|| crate::error::Error::user(format!("shape {shown} copies dimension {i} of {input}, which has none")))?),
            _ => match Dim::from_poly(d.clone()) {
                Some(d) => Some(d),
                None => return invalid(format!("shape {shown} has dimension {d}")),
            },
        });
    }
    let shape = resolve_infer_dim(&input, &dims).map_err(|e| crate::error::Error::user(format!("cannot reshape {input} to {shown}: {e}")))?;
    Ok(vec![cx.b.reshape(x, shape)?])
}

/// `Flatten` at `axis`: `[prod(dims[..axis]), prod(dims[axis..])]`.
pub fn flatten(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    let rank = shape.rank();
    let ax = node.int("axis", 1)?;
    let ax = if ax == rank as i64 { rank } else { axis(ax, rank)? };
    let merge = |dims: &[Dim]| Dim::product(dims).map_err(crate::error::Error::user);
    let (outer, inner) = (merge(&shape.0[..ax])?, merge(&shape.0[ax..])?);
    Ok(vec![cx.b.reshape(x, Shape(vec![outer, inner]))?])
}

/// The axes of `Squeeze`/`Unsqueeze`: an attribute before opset 13, an input since.
fn listed_axes(cx: &mut Cx, node: &Node) -> Result<Option<Vec<i64>>, crate::frontend::onnx::node::Fail> {
    if node.opset < 13 { node.ints("axes") } else { input_ints(cx, node, 1) }
}

pub fn squeeze(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    let drop = match listed_axes(cx, node)? {
        Some(list) => axes(&list, shape.rank())?,
        None => (0..shape.rank()).filter(|&i| shape.0[i].is_one()).collect(),
    };
    if let Some(&bad) = drop.iter().find(|&&i| !shape.0[i].is_one()) {
        return invalid(format!("cannot squeeze axis {bad} of {shape}: its size is not 1"));
    }
    let dims = shape.0.iter().enumerate().filter(|(i, _)| !drop.contains(i)).map(|(_, d)| d.clone()).collect();
    Ok(vec![cx.b.reshape(x, Shape(dims))?])
}

pub fn unsqueeze(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    let Some(list) = listed_axes(cx, node)? else { return invalid("Unsqueeze has no axes") };
    let rank = shape.rank() + list.len();
    let add = axes(&list, rank)?;
    let mut rest = shape.0.into_iter();
    let dims = (0..rank).map(|i| if add.contains(&i) { Dim::Known(1) } else { rest.next().expect("rank counts them") }).collect();
    Ok(vec![cx.b.reshape(x, Shape(dims))?])
}

pub fn transpose(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let rank = cx.b.rank(x);
    let perm = match node.ints("perm")? {
        Some(p) => p.iter().map(|&a| axis(a, rank)).collect::<Result<Vec<_>, _>>()?,
        None => (0..rank).rev().collect(),
    };
    Ok(vec![cx.b.transpose(x, perm)?])
}

/// `Expand`: broadcast to the NumPy broadcast of the input's shape and `shape`.
pub fn expand(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let Some(target) = input_dims(cx, node, 1)? else { return invalid("Expand has no shape") };
    let Some(given) = target.iter().map(|d| Dim::from_poly(d.clone())).collect::<Option<Vec<_>>>() else {
        return invalid(format!("Expand's shape {} has a negative dimension", show_dims(&target)));
    };
    let given = Shape(given);
    let out = crate::passes::shape::broadcast(&cx.b.shape(x), &given).map_err(crate::error::Error::user)?;
    Ok(vec![cx.b.broadcast_to(x, out)?])
}

pub fn concat(cx: &mut Cx, node: &Node) -> Out {
    let args = node.all_inputs();
    let Some(&first) = args.first() else { return invalid("Concat has no inputs") };
    let Some(ax) = node.int_opt("axis")? else { return invalid("Concat has no axis") };
    let ax = axis(ax, cx.b.rank(first))?;
    Ok(vec![cx.b.op(Op::Concat { axis: ax }, args)?])
}

/// One slice along `ax` of `x`, `start..start + len`.
pub(super) fn take(cx: &mut Cx, x: ValueId, ax: usize, start: u64, len: u64) -> crate::error::Result<ValueId> {
    let mut ranges = vec![SliceRange::FULL; cx.b.rank(x)];
    ranges[ax] = SliceRange { start: Some(start as i64), stop: Some((start + len) as i64), step: 1 };
    cx.b.op(Op::Slice { ranges }, vec![x])
}

/// `Split` along `axis` into the sizes `split` gives (an attribute before opset 13,
/// an input since), or into `num_outputs` (or as many outputs as there are) equal
/// parts, the last smaller.
pub fn split(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    let ax = axis(node.int("axis", 0)?, shape.rank())?;
    let Some(len) = shape.0[ax].known() else { return unsupported(format!("Split along symbolic axis {ax} of {shape}")) };
    let sizes = if node.opset < 13 { node.ints("split")? } else { input_ints(cx, node, 1)? };
    let sizes: Vec<u64> = match sizes {
        Some(s) if s.iter().all(|&v| v >= 0) && s.iter().sum::<i64>() as u64 == len => s.iter().map(|&v| v as u64).collect(),
        Some(s) => return invalid(format!("split sizes {s:?} do not add up to {len}")),
        None => {
            let parts = node.int_opt("num_outputs")?.map_or(node.proto.output.len() as u64, |n| n.max(1) as u64);
            let each = len.div_ceil(parts.max(1));
            (0..parts).map(|i| each.min(len.saturating_sub(i * each))).collect()
        }
    };
    let mut outs = Vec::with_capacity(sizes.len());
    let mut at = 0;
    for s in sizes {
        outs.push(take(cx, x, ax, at, s)?);
        at += s;
    }
    Ok(outs)
}

/// `Slice` by `starts`, `ends`, `axes` and `steps` (attributes before opset 10, inputs
/// since), clamped as ONNX says.
pub fn slice(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    let rank = shape.rank();
    let constants = |l: Option<Vec<i64>>| l.map(|l| l.into_iter().map(Poly::constant).collect::<Vec<_>>());
    let (starts, ends, ax, steps) = if node.opset < 10 {
        (constants(node.ints("starts")?), constants(node.ints("ends")?), node.ints("axes")?, None)
    } else {
        (input_dims(cx, node, 1)?, input_dims(cx, node, 2)?, input_ints(cx, node, 3)?, input_ints(cx, node, 4)?)
    };
    let (Some(starts), Some(ends)) = (starts, ends) else { return invalid("Slice needs starts and ends") };
    let n = starts.len();
    let ax = ax.unwrap_or_else(|| (0..n as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; n]);
    if ends.len() != n || ax.len() != n || steps.len() != n {
        return invalid("Slice's starts, ends, axes and steps differ in length");
    }
    let mut ranges = vec![SliceRange::FULL; rank];
    // Axes sliced to a symbolic end: (axis, start, length).
    let mut to_symbol = Vec::new();
    for i in 0..n {
        let a = axis(ax[i], rank)?;
        let step = steps[i];
        if step == 0 {
            return invalid("Slice step 0");
        }
        let (Some(start), Some(end)) = (starts[i].as_constant(), ends[i].as_constant()) else {
            // `x[..., start:end]` with `end` symbolic (a length read with Shape): the
            // positions start, start + 1, ... gathered, as many as `end - start`. An end
            // past the axis, which ONNX clamps, fails the gather's index check at run time.
            let length = ends[i].sub(&starts[i]).ok().and_then(Dim::from_poly).filter(|d| d.poly().is_ok_and(|p| p.is_positive()));
            match (starts[i].as_constant(), length) {
                (Some(start), Some(length)) if step == 1 && start >= 0 => to_symbol.push((a, start, length)),
                _ => return unsupported(format!("Slice from {} to {} by {step}: a symbolic bound is taken only as the end of a slice by 1 from a constant start", starts[i], ends[i])),
            }
            continue;
        };
        let Some(dim) = shape.0[a].known() else { return unsupported(format!("Slice of symbolic axis {a} of {shape}")) };
        let dim = dim as i64;
        let norm = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
        let (start, end) = if step > 0 {
            (norm(start).clamp(0, dim), norm(end).clamp(0, dim))
        } else {
            (norm(start).clamp(0, dim - 1), norm(end).clamp(-1, dim - 1))
        };
        let span = if step > 0 { (end - start).max(0) } else { (start - end).max(0) };
        let count = (span + step.abs() - 1) / step.abs();
        let stop = start + count * step;
        // A stop before index 0 is "to the front", which Python's slice writes None.
        ranges[a] = SliceRange { start: Some(start), stop: (stop >= 0).then_some(stop), step };
        if count == 0 {
            ranges[a] = SliceRange { start: Some(0), stop: Some(0), step: 1 };
        }
    }
    let mut y = if ranges.iter().all(|r| *r == SliceRange::FULL) { x } else { cx.b.op(Op::Slice { ranges }, vec![x])? };
    for (a, start, length) in to_symbol {
        let mut at = cx.b.op(Op::Iota { shape: Shape(vec![length]), axis: 0, dtype: Dtype::I64 }, vec![])?;
        if start != 0 {
            let offset = cx.b.scalar(Dtype::I64, start as f64);
            at = cx.b.binary(BinaryOp::Add, at, offset)?;
        }
        y = cx.b.op(Op::Gather { axis: a }, vec![y, at])?;
    }
    Ok(vec![y])
}

pub fn gather(cx: &mut Cx, node: &Node) -> Out {
    let (data, indices) = (node.input(0)?, node.input(1)?);
    let ax = axis(node.int("axis", 0)?, cx.b.rank(data))?;
    Ok(vec![cx.b.op(Op::Gather { axis: ax }, vec![data, indices])?])
}

/// `Tile`: `[d0, d1]` viewed as `[1, d0, 1, d1]`, broadcast to `[r0, d0, r1, d1]`
/// and merged to `[r0 d0, r1 d1]`.
pub fn tile(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    let Some(repeats) = input_ints(cx, node, 1)? else { return invalid("Tile has no repeats") };
    let Some(dims) = shape.as_known() else { return unsupported(format!("Tile of symbolic {shape}")) };
    if repeats.len() != dims.len() || repeats.iter().any(|&r| r < 0) {
        return invalid(format!("repeats {repeats:?} do not fit {shape}"));
    }
    let spread: Vec<u64> = dims.iter().flat_map(|&d| [1, d]).collect();
    let wide: Vec<u64> = dims.iter().zip(&repeats).flat_map(|(&d, &r)| [r as u64, d]).collect();
    let out: Vec<u64> = dims.iter().zip(&repeats).map(|(&d, &r)| d * r as u64).collect();
    let v = cx.b.reshape(x, Shape::known(&spread))?;
    let v = cx.b.broadcast_to(v, Shape::known(&wide))?;
    Ok(vec![cx.b.reshape(v, Shape::known(&out))?])
}

/// `Pad` in every mode: `constant` (the IR's pad), and `edge`, `reflect` and `wrap`
/// as slices concatenated, one axis at a time; negative pads crop.
pub fn pad(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    let rank = shape.rank();
    let (pads, value) = if node.opset < 11 {
        (node.ints("pads")?.or(node.ints("paddings")?), node.float("value", 0.0)?)
    } else {
        let value = input_floats(cx, node, 2)?.and_then(|v| v.first().copied()).unwrap_or(0.0);
        (input_ints(cx, node, 1)?, value)
    };
    let Some(pads) = pads else { return invalid("Pad has no pads") };
    let on: Vec<usize> = match if node.opset >= 18 { input_ints(cx, node, 3)? } else { None } {
        Some(list) => list.iter().map(|&a| axis(a, rank)).collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * on.len() {
        return invalid(format!("pads {pads:?} are not two per padded axis of {shape}"));
    }
    let Some(dims) = shape.as_known() else { return unsupported(format!("Pad of symbolic {shape}")) };
    let mode = node.string_or("mode", "constant")?;
    let mut y = x;
    let mut sizes = dims.clone();
    // Crops first (negative pads), then growth.
    for (k, &a) in on.iter().enumerate() {
        let (lo, hi) = (pads[k], pads[on.len() + k]);
        if lo < 0 || hi < 0 {
            let (cut_lo, cut_hi) = ((-lo).max(0) as u64, (-hi).max(0) as u64);
            let keep = sizes[a].checked_sub(cut_lo + cut_hi).ok_or_else(|| crate::error::Error::user(format!("pads {pads:?} crop more than {shape} holds")))?;
            y = take(cx, y, a, cut_lo, keep)?;
            sizes[a] = keep;
        }
    }
    let grow: Vec<(usize, u64, u64)> = on.iter().enumerate().map(|(k, &a)| (a, pads[k].max(0) as u64, pads[on.len() + k].max(0) as u64)).filter(|&(_, lo, hi)| lo + hi > 0).collect();
    if grow.is_empty() {
        return Ok(vec![y]);
    }
    if mode == "constant" {
        let mut all = vec![(0, 0); rank];
        for &(a, lo, hi) in &grow {
            all[a] = (lo, hi);
        }
        return Ok(vec![cx.b.op(Op::Pad { pads: all, value }, vec![y])?]);
    }
    for (a, lo, hi) in grow {
        let n = sizes[a];
        let parts: Vec<ValueId> = match mode.as_str() {
            "edge" if n > 0 => {
                let first = take(cx, y, a, 0, 1)?;
                let last = take(cx, y, a, n - 1, 1)?;
                let mut front = cx.b.shape(first);
                front.0[a] = Dim::Known(lo);
                let mut back = cx.b.shape(last);
                back.0[a] = Dim::Known(hi);
                vec![cx.b.broadcast_to(first, front)?, y, cx.b.broadcast_to(last, back)?]
            }
            "reflect" if lo < n && hi < n => {
                let mut ranges = vec![SliceRange::FULL; rank];
                ranges[a] = SliceRange { start: Some(lo as i64), stop: Some(0), step: -1 };
                let front = cx.b.op(Op::Slice { ranges: ranges.clone() }, vec![y])?;
                ranges[a] = SliceRange { start: Some(n as i64 - 2), stop: Some(n as i64 - 2 - hi as i64), step: -1 };
                if n as i64 - 2 - hi as i64 <= -1 {
                    ranges[a].stop = None;
                }
                let back = cx.b.op(Op::Slice { ranges }, vec![y])?;
                vec![front, y, back]
            }
            "wrap" if lo <= n && hi <= n => {
                let front = take(cx, y, a, n - lo, lo)?;
                let back = take(cx, y, a, 0, hi)?;
                vec![front, y, back]
            }
            "edge" | "reflect" | "wrap" => return unsupported(format!("{mode} padding of ({lo}, {hi}) on an axis of {n}")),
            other => return invalid(format!("Pad mode {other:?} is not constant, reflect, edge or wrap")),
        };
        let parts: Vec<ValueId> = parts.into_iter().filter(|&p| cx.b.shape(p).0[a] != Dim::Known(0)).collect();
        y = if parts.len() == 1 { parts[0] } else { cx.b.op(Op::Concat { axis: a }, parts)? };
        sizes[a] = n + lo + hi;
    }
    Ok(vec![y])
}

/// `DepthToSpace` (`DCR` or `CRD` order) and `SpaceToDepth`, as a reshape, a
/// transpose and a reshape.
pub fn depth_to_space(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    let Some(&[n, c, h, w]) = shape.as_known().as_deref() else { return unsupported(format!("DepthToSpace of {shape}")) };
    let b = node.int("blocksize", 0)?;
    if b < 1 || c % (b * b) as u64 != 0 {
        return invalid(format!("blocksize {b} does not divide {c} channels"));
    }
    let b = b as u64;
    let (split, perm) = if node.string_or("mode", "DCR")? == "CRD" {
        (vec![n, c / (b * b), b, b, h, w], vec![0, 1, 4, 2, 5, 3])
    } else {
        (vec![n, b, b, c / (b * b), h, w], vec![0, 3, 4, 1, 5, 2])
    };
    let v = cx.b.reshape(x, Shape::known(&split))?;
    let v = cx.b.transpose(v, perm)?;
    Ok(vec![cx.b.reshape(v, Shape::known(&[n, c / (b * b), h * b, w * b]))?])
}

pub fn space_to_depth(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    let Some(&[n, c, h, w]) = shape.as_known().as_deref() else { return unsupported(format!("SpaceToDepth of {shape}")) };
    let b = node.int("blocksize", 0)?;
    if b < 1 || h % b as u64 != 0 || w % b as u64 != 0 {
        return invalid(format!("blocksize {b} does not divide {shape}"));
    }
    let b = b as u64;
    let v = cx.b.reshape(x, Shape::known(&[n, c, h / b, b, w / b, b]))?;
    let v = cx.b.transpose(v, vec![0, 3, 5, 1, 2, 4])?;
    Ok(vec![cx.b.reshape(v, Shape::known(&[n, c * b * b, h / b, w / b]))?])
}
