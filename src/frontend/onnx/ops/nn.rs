//! Convolution, pooling, normalizations and softmax.

use super::{axis, Cx};
use crate::frontend::onnx::node::{invalid, unsupported, Fail, Node, Out};
use crate::frontend::onnx::tensor;
use crate::ir::{BinaryOp, ConvAttrs, Dim, Dtype, Op, PoolAttrs, PoolKind, ReduceKind, Shape, SliceRange, UnaryOp, ValueId};

/// The spatial sizes of `x` (its dimensions after batch and channel), known.
pub(super) fn spatial(cx: &Cx, x: ValueId, op: &str) -> Result<Vec<u64>, Fail> {
    let shape = cx.b.shape(x);
    if shape.rank() < 3 {
        return invalid(format!("{op} wants [N, C, spatial...], got {shape}"));
    }
    match Shape(shape.0[2..].to_vec()).as_known() {
        Some(s) => Ok(s),
        None => unsupported(format!("{op} over symbolic spatial dimensions {shape}")),
    }
}

/// The window attributes every convolution and pooling shares: strides, dilations
/// and the padding (`pads`, or what `auto_pad` makes), per spatial dimension.
struct Window {
    stride: Vec<u64>,
    dilation: Vec<u64>,
    padding: Vec<(u64, u64)>,
}

fn window(node: &Node, input: &[u64], kernel: &[u64]) -> Result<Window, Fail> {
    let n = input.len();
    let list = |name: &str| -> Result<Vec<u64>, Fail> {
        match node.ints(name)? {
            None => Ok(vec![1; n]),
            Some(v) if v.len() == n && v.iter().all(|&x| x >= 1) => Ok(v.iter().map(|&x| x as u64).collect()),
            Some(v) => invalid(format!("{name} {v:?} are not {n} positive numbers")),
        }
    };
    let (stride, dilation) = (list("strides")?, list("dilations")?);
    let auto_pad = node.string_or("auto_pad", "NOTSET")?;
    let padding = match auto_pad.as_str() {
        "NOTSET" => match node.ints("pads")? {
            None => vec![(0, 0); n],
            Some(p) if p.len() == 2 * n && p.iter().all(|&x| x >= 0) => (0..n).map(|i| (p[i] as u64, p[n + i] as u64)).collect(),
            Some(p) => return invalid(format!("pads {p:?} are not {} non-negative numbers", 2 * n)),
        },
        "VALID" => vec![(0, 0); n],
        "SAME_UPPER" | "SAME_LOWER" => (0..n)
            .map(|i| {
                let out = input[i].div_ceil(stride[i]);
                let span = (kernel[i] - 1) * dilation[i] + 1;
                let total = ((out.saturating_sub(1)) * stride[i] + span).saturating_sub(input[i]);
                let small = total / 2;
                if auto_pad == "SAME_UPPER" { (small, total - small) } else { (total - small, small) }
            })
            .collect(),
        other => return invalid(format!("auto_pad {other:?} is not NOTSET, VALID, SAME_UPPER or SAME_LOWER")),
    };
    Ok(Window { stride, dilation, padding })
}

pub fn conv(cx: &mut Cx, node: &Node) -> Out {
    let (x, w, bias) = (node.input(0)?, node.input(1)?, node.opt(2));
    Ok(vec![convolution(cx, node, x, w, bias)?])
}

/// The convolution of `x` by `w` (plus `bias`, `[M]`) as a `Conv`-like `node`'s
/// attributes say (`pads`, `auto_pad`, `strides`, `dilations`, `group`): Conv's, and
/// the integer and quantized convolutions' (`quantize.rs`).
pub(super) fn convolution(cx: &mut Cx, node: &Node, x: ValueId, w: ValueId, bias: Option<ValueId>) -> Result<ValueId, Fail> {
    let input = spatial(cx, x, node.op_type)?;
    let wshape = cx.b.shape(w);
    let Some(kernel) = Shape(wshape.0.get(2..).unwrap_or_default().to_vec()).as_known() else {
        return unsupported(format!("Conv with weight {wshape}"));
    };
    if kernel.len() != input.len() {
        return invalid(format!("the weight {wshape} has {} spatial dimensions, and the input {}", kernel.len(), input.len()));
    }
    let win = window(node, &input, &kernel)?;
    let groups = node.int("group", 1)?;
    if groups < 1 {
        return invalid(format!("group {groups} is not positive"));
    }
    let attrs = ConvAttrs { stride: win.stride, padding: win.padding, dilation: win.dilation, groups: groups as u64 };
    let mut args = vec![x, w];
    if let Some(bias) = bias {
        args.push(conv_bias(cx, bias, input.len())?);
    }
    Ok(cx.b.op(Op::Conv(attrs), args)?)
}

/// `CausalConvWithState`: a depthwise 1-d convolution of `[batch, channels, length]`
/// (weight `[channels, 1, k]`) over the input after `past_state` (`[batch, channels,
/// k - 1]`, zeros without one), so output `t` sees inputs up to `t`; then the optional
/// bias and `activation` (`silu`, or its alias `swish`: `y sigmoid(y)`). The second
/// output, the next call's state, is the last `k - 1` positions of that padded input.
pub fn causal_conv_with_state(cx: &mut Cx, node: &Node) -> Out {
    let (x, w) = (node.input(0)?, node.input(1)?);
    let (xs, ws) = (cx.b.shape(x), cx.b.shape(w));
    let (Some(&[batch, channels, length]), Some(&[wc, 1, k])) = (xs.as_known().as_deref(), ws.as_known().as_deref()) else {
        return invalid(format!("CausalConvWithState takes [batch, channels, length] and a weight [channels, 1, k], got {xs} and {ws}"));
    };
    if wc != channels || k == 0 {
        return invalid(format!("CausalConvWithState's weight {ws} does not fit the input {xs}"));
    }
    let past = match node.opt(3) {
        Some(p) => p,
        None => cx.b.full(cx.b.dtype(x), Shape::known(&[batch, channels, k - 1]), 0.0)?,
    };
    let padded = if k > 1 { cx.b.op(Op::Concat { axis: 2 }, vec![past, x])? } else { x };
    let attrs = ConvAttrs { stride: vec![1], padding: vec![(0, 0)], dilation: vec![1], groups: channels };
    let mut args = vec![padded, w];
    if let Some(bias) = node.opt(2) {
        args.push(conv_bias(cx, bias, 1)?);
    }
    let mut y = cx.b.op(Op::Conv(attrs), args)?;
    match node.string_or("activation", "none")?.as_str() {
        "none" => {}
        "silu" | "swish" => {
            let s = cx.b.unary(UnaryOp::Composite(crate::ir::Composite::Sigmoid), y)?;
            y = cx.b.binary(BinaryOp::Mul, y, s)?;
        }
        a => return invalid(format!("CausalConvWithState's activation is none, silu or swish, got {a:?}")),
    }
    let state = super::shape::take(cx, padded, 2, length, k - 1)?;
    Ok(vec![y, state])
}

/// A convolution's bias `[M]` as the IR's conv takes it from Mithril's layers:
/// `[1, M, 1, ...]`, broadcast onto the output `[N, M, spatial...]`. A bias that is a
/// reshape of a `[1, M, 1, ...]` weight (`b.view(-1)`) becomes that weight again
/// (`simplify` composes the two reshapes): the same graph as Mithril's.
pub(super) fn conv_bias(cx: &mut Cx, bias: ValueId, spatial: usize) -> crate::error::Result<ValueId> {
    let mut dims = vec![Dim::Known(1)];
    dims.extend(cx.b.shape(bias).0);
    dims.extend(std::iter::repeat_n(Dim::Known(1), spatial));
    cx.b.reshape(bias, Shape(dims))
}

/// A pooling node's window (`kernel_shape` and what [`window`] reads) over `input`:
/// windows past the end (`ceil_mode`) are extra end padding. Also the explicit padding
/// alone (`pads` or `auto_pad`'s).
pub(super) fn pool_window(node: &Node, input: &[u64], kind: PoolKind) -> Result<(PoolAttrs, Vec<(u64, u64)>), Fail> {
    let Some(kernel) = node.ints("kernel_shape")? else { return invalid(format!("{} has no kernel_shape", node.op_type)) };
    if kernel.len() != input.len() || kernel.iter().any(|&k| k < 1) {
        return invalid(format!("kernel_shape {kernel:?} does not fit the input's {} spatial dimensions", input.len()));
    }
    let kernel: Vec<u64> = kernel.iter().map(|&k| k as u64).collect();
    let win = window(node, input, &kernel)?;
    let explicit = win.padding.clone();
    let mut padding = win.padding;
    if node.int("ceil_mode", 0)? != 0 {
        for i in 0..input.len() {
            let span = (kernel[i] - 1) * win.dilation[i] + 1;
            let padded = input[i] + padding[i].0 + padding[i].1;
            if padded < span {
                continue;
            }
            let mut out = (padded - span).div_ceil(win.stride[i]) + 1;
            // The last window must start inside the input or its front padding.
            if (out - 1) * win.stride[i] >= input[i] + padding[i].0 {
                out -= 1;
            }
            padding[i].1 += ((out - 1) * win.stride[i] + span).saturating_sub(padded);
        }
    }
    Ok((PoolAttrs { kind, kernel, stride: win.stride, padding, dilation: win.dilation }, explicit))
}

/// `MaxPool` and `AveragePool`. Windows past the end (`ceil_mode`) are extra end
/// padding; an average that leaves padding out of its count (`count_include_pad = 0`,
/// ONNX's default), or counts only the explicit padding, divides the IR's average
/// (which counts every tap) by the same average of ones.
pub fn pool(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let input = spatial(cx, x, node.op_type)?;
    let kind = if node.op_type == "MaxPool" { PoolKind::Max } else { PoolKind::Avg };
    let (attrs, explicit) = pool_window(node, &input, kind)?;
    let padding = attrs.padding.clone();
    let y = cx.b.op(Op::Pool(attrs.clone()), vec![x])?;
    if kind == PoolKind::Max {
        if node.outputs() > 1 {
            let indices = max_indices(cx, x, y, &attrs, node.int("storage_order", 0)? != 0)?;
            return Ok(vec![y, indices]);
        }
        return Ok(vec![y]);
    }
    let include_pad = node.int("count_include_pad", 0)? != 0;
    let counted = if include_pad { explicit } else { vec![(0, 0); input.len()] };
    if counted == padding {
        return Ok(vec![y]);
    }
    // Ones where a tap counts (the input, and the explicit padding when it counts),
    // pooled the same way: the fraction of the window that counts.
    let dtype = cx.b.dtype(x);
    let mut dims = vec![Dim::Known(1), Dim::Known(1)];
    dims.extend(input.iter().map(|&d| Dim::Known(d)));
    let mut ones = cx.b.full(dtype, Shape(dims), 1.0)?;
    if counted.iter().any(|&(lo, hi)| lo + hi > 0) {
        let mut pads = vec![(0, 0), (0, 0)];
        pads.extend(&counted);
        ones = cx.b.op(Op::Pad { pads, value: 1.0 }, vec![ones])?;
    }
    let rest: Vec<(u64, u64)> = padding.iter().zip(&counted).map(|(p, c)| (p.0 - c.0, p.1 - c.1)).collect();
    let share = cx.b.op(Op::Pool(PoolAttrs { padding: rest, ..attrs }), vec![ones])?;
    Ok(vec![cx.b.binary(BinaryOp::Div, y, share)?])
}

/// MaxPool's second output: where in `x` each window's maximum `y` is, as a flat
/// index into `x` (row-major, or with the spatial axes column-major under
/// `storage_order` 1), the first in the window's row-major order among equals. Each
/// window tap is a strided slice of `x` padded with -inf (and of the indices, padded
/// with -1); the first tap equal to `y` gives the index.
fn max_indices(cx: &mut Cx, x: ValueId, y: ValueId, attrs: &PoolAttrs, column_major: bool) -> Result<ValueId, Fail> {
    let (xs, ys) = (cx.b.shape(x), cx.b.shape(y));
    let (Some(xd), Some(yd)) = (xs.as_known(), ys.as_known()) else { return unsupported(format!("MaxPool's Indices of symbolic {xs}")) };
    let n = xd.len() - 2;
    // Each element's flat index: batch and channel row-major, then the spatial axes.
    let mut strides = vec![0u64; xd.len()];
    let mut step = 1u64;
    let order: Vec<usize> = if column_major { (2..xd.len()).chain([1, 0]).collect() } else { (0..xd.len()).rev().collect() };
    for &a in &order {
        strides[a] = step;
        step = step.checked_mul(xd[a]).ok_or_else(|| Fail::Error(crate::error::Error::user(format!("MaxPool's Indices of {xs}: too many elements"))))?;
    }
    let mut flat: Option<ValueId> = None;
    for (a, &s) in strides.iter().enumerate() {
        let i = cx.b.op(Op::Iota { shape: Shape::known(&xd), axis: a, dtype: Dtype::I64 }, vec![])?;
        let s = cx.b.scalar(Dtype::I64, s as f64);
        let term = cx.b.binary(BinaryOp::Mul, i, s)?;
        flat = Some(match flat {
            Some(acc) => cx.b.binary(BinaryOp::Add, acc, term)?,
            None => term,
        });
    }
    let mut pads = vec![(0, 0), (0, 0)];
    pads.extend(&attrs.padding);
    let xp = cx.b.op(Op::Pad { pads: pads.clone(), value: f64::NEG_INFINITY }, vec![x])?;
    let ip = cx.b.op(Op::Pad { pads, value: -1.0 }, vec![flat.expect("a rank of at least 3")])?;
    let taps: u64 = attrs.kernel.iter().product();
    let (mut found, mut at): (Option<ValueId>, Option<ValueId>) = (None, None);
    for tap in 0..taps {
        let mut ranges = vec![SliceRange::FULL; n + 2];
        let mut rest = tap;
        for i in (0..n).rev() {
            let k = rest % attrs.kernel[i];
            rest /= attrs.kernel[i];
            let start = k * attrs.dilation[i];
            ranges[i + 2] = SliceRange { start: Some(start as i64), stop: Some((start + (yd[i + 2] - 1) * attrs.stride[i] + 1) as i64), step: attrs.stride[i] as i64 };
        }
        let xt = cx.b.op(Op::Slice { ranges: ranges.clone() }, vec![xp])?;
        let it = cx.b.op(Op::Slice { ranges }, vec![ip])?;
        let mut hit = cx.b.binary(BinaryOp::Eq, xt, y)?;
        if let Some(f) = found {
            let open = cx.b.unary(UnaryOp::Not, f)?;
            hit = cx.b.binary(BinaryOp::And, hit, open)?;
        }
        at = Some(match at {
            Some(a) => cx.b.select(hit, it, a)?,
            None => it,
        });
        found = Some(match found {
            Some(f) => cx.b.binary(BinaryOp::Or, f, hit)?,
            None => hit,
        });
    }
    Ok(at.expect("a window of at least one tap"))
}

pub fn global_pool(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let rank = cx.b.rank(x);
    let kind = if node.op_type == "GlobalMaxPool" { ReduceKind::Max } else { ReduceKind::Mean };
    Ok(vec![cx.b.reduce(kind, x, (2..rank).collect(), true)?])
}

/// A per-channel vector `[C]` shaped to broadcast onto `[N, C, spatial...]`.
fn per_channel(cx: &mut Cx, v: ValueId, rank: usize) -> crate::error::Result<ValueId> {
    let mut dims = cx.b.shape(v).0;
    dims.extend(std::iter::repeat_n(Dim::Known(1), rank.saturating_sub(2)));
    cx.b.reshape(v, Shape(dims))
}

/// `(x - mean) / sqrt(var + epsilon) * scale + B`, per channel. In inference the mean
/// and variance are the inputs; in training (`training_mode` since opset 14, before it
/// when more than Y is asked for) they are the batch's, over every axis but the
/// channel (the variance without correction: [`Builder::layer_norm`]'s), and the
/// outputs after Y are the running statistics `input * momentum + batch * (1 -
/// momentum)`, then (before opset 14) the batch's own. Before opset 9, `spatial = 0`
/// keeps statistics per activation (`[C, D1, ...]`, over the batch axis only).
///
/// [`Builder::layer_norm`]: crate::ir::builder::Builder::layer_norm
pub fn batch_norm(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let rank = cx.b.rank(x);
    let [scale, bias, mean, var] = [1, 2, 3, 4].map(|i| node.input(i));
    let (scale, bias, mean, var) = (scale?, bias?, mean?, var?);
    let eps = node.float("epsilon", 1e-5)?;
    let training = if node.opset >= 14 { node.int("training_mode", 0)? != 0 } else { node.outputs() > 1 };
    let per_activation = node.opset < 9 && node.int("spatial", 1)? == 0;
    let shaped = |cx: &mut Cx, v: ValueId| if per_activation { Ok(v) } else { per_channel(cx, v, rank) };
    let (scale, bias) = (shaped(cx, scale)?, shaped(cx, bias)?);
    if training {
        let axes: Vec<usize> = if per_activation { vec![0] } else { (0..rank).filter(|&a| a != 1).collect() };
        let y = cx.b.layer_norm(x, axes.clone(), eps, Some(scale), Some(bias))?;
        // The same nodes as layer_norm's mean and variance, which simplify merges.
        let batch_mean = cx.b.reduce(ReduceKind::Mean, x, axes.clone(), true)?;
        let batch_var = cx.b.variance(x, axes, true, 0.0)?;
        let momentum = node.float("momentum", 0.9)?;
        let mut outs = vec![y];
        for (running, batch) in [(mean, batch_mean), (var, batch_var)] {
            let batch = cx.b.reshape(batch, cx.b.shape(running))?;
            let dtype = cx.b.dtype(running);
            let (m, rest) = (cx.b.scalar(dtype, momentum), cx.b.scalar(dtype, 1.0 - momentum));
            let kept = cx.b.binary(BinaryOp::Mul, running, m)?;
            let new = cx.b.binary(BinaryOp::Mul, batch, rest)?;
            outs.push(cx.b.binary(BinaryOp::Add, kept, new)?);
        }
        if node.opset < 14 {
            for v in [batch_mean, batch_var] {
                let shape = cx.b.shape(mean);
                outs.push(cx.b.reshape(v, shape)?);
            }
        }
        return Ok(outs);
    }
    let (mean, var) = (shaped(cx, mean)?, shaped(cx, var)?);
    let dtype = cx.b.dtype(var);
    let e = cx.b.scalar(dtype, eps);
    let ve = cx.b.binary(BinaryOp::Add, var, e)?;
    let sd = cx.b.unary(UnaryOp::Sqrt, ve)?;
    let centered = cx.b.binary(BinaryOp::Sub, x, mean)?;
    let normed = cx.b.binary(BinaryOp::Div, centered, sd)?;
    let scaled = cx.b.binary(BinaryOp::Mul, normed, scale)?;
    Ok(vec![cx.b.binary(BinaryOp::Add, scaled, bias)?])
}

/// Normalization over the spatial axes, per sample and channel.
pub fn instance_norm(cx: &mut Cx, node: &Node) -> Out {
    let (x, scale, bias) = (node.input(0)?, node.input(1)?, node.input(2)?);
    let rank = cx.b.rank(x);
    let eps = node.float("epsilon", 1e-5)?;
    let (scale, bias) = (per_channel(cx, scale, rank)?, per_channel(cx, bias, rank)?);
    Ok(vec![cx.b.layer_norm(x, (2..rank).collect(), eps, Some(scale), Some(bias))?])
}

/// `(x - mean) / sqrt(var + epsilon) * scale + B` over the axes from `axis` on, in
/// the precision `stash_type` names where it is wider than x's; the optional outputs
/// are that mean and `1 / sqrt(var + epsilon)` (size-1 axes kept, of the stash type),
/// built as [`Builder::layer_norm`] builds them so that `simplify` computes each once.
///
/// [`Builder::layer_norm`]: crate::ir::builder::Builder::layer_norm
pub fn layer_norm(cx: &mut Cx, node: &Node) -> Out {
    let (x, scale, bias) = (node.input(0)?, node.input(1)?, node.opt(2));
    let rank = cx.b.rank(x);
    let axes: Vec<usize> = (axis(node.int("axis", -1)?, rank)?..rank).collect();
    let eps = node.float("epsilon", 1e-5)?;
    let dtype = cx.b.dtype(x);
    let (compute, stash) = stash_type(node, dtype)?;
    let xs = convert(cx, x, compute)?;
    let y = cx.b.layer_norm(xs, axes.clone(), eps, Some(scale), bias)?;
    let mut outs = vec![convert(cx, y, dtype)?];
    if node.outputs() > 1 {
        let mean = cx.b.reduce(ReduceKind::Mean, xs, axes.clone(), true)?;
        let var = cx.b.variance(xs, axes, true, 0.0)?;
        let e = cx.b.scalar(cx.b.dtype(var), eps);
        let ve = cx.b.binary(BinaryOp::Add, var, e)?;
        let sd = cx.b.unary(UnaryOp::Sqrt, ve)?;
        let inv = cx.b.reciprocal(sd)?;
        outs.push(convert(cx, mean, stash)?);
        outs.push(convert(cx, inv, stash)?);
    }
    Ok(outs)
}

/// The element type `stash_type` names (float32 by default) for a normalization's
/// statistics, and the type it computes in: the wider of that and x's (`dtype`).
pub(super) fn stash_type(node: &Node, dtype: Dtype) -> Result<(Dtype, Dtype), Fail> {
    let code = node.int("stash_type", 1)?;
    let stash = match i32::try_from(code).map(tensor::dtype) {
        Ok(Ok(d)) if d.is_float() => d,
        _ => return invalid(format!("stash_type {code} is not a float type mithrilc has")),
    };
    Ok((if stash.size() > dtype.size() { stash } else { dtype }, stash))
}

/// `v` as `dtype`: itself when it has that type, else a cast.
pub(super) fn convert(cx: &mut Cx, v: ValueId, dtype: Dtype) -> crate::error::Result<ValueId> {
    if cx.b.dtype(v) == dtype { Ok(v) } else { cx.b.cast(v, dtype) }
}

/// Over each group of channels: `[N, C, ...]` viewed as `[N, G, C/G * ...]`. The
/// scale and bias are per group before opset 21, per channel since.
pub fn group_norm(cx: &mut Cx, node: &Node) -> Out {
    let (x, scale, bias) = (node.input(0)?, node.input(1)?, node.input(2)?);
    let shape = cx.b.shape(x);
    let (Some(groups), Some(dims)) = (node.int_opt("num_groups")?, shape.as_known()) else {
        return unsupported(format!("GroupNormalization of {shape} (symbolic, or no num_groups)"));
    };
    let (rank, c) = (dims.len(), dims.get(1).copied().unwrap_or(0));
    if groups < 1 || c % groups as u64 != 0 {
        return invalid(format!("{c} channels do not split into {groups} groups"));
    }
    let g = groups as u64;
    let eps = node.float("epsilon", 1e-5)?;
    let per_group: u64 = dims[1..].iter().product::<u64>() / g;
    let grouped = cx.b.reshape(x, Shape::known(&[dims[0], g, per_group]))?;
    let normed = cx.b.layer_norm(grouped, vec![2], eps, None, None)?;
    let (scale, bias, normed) = if node.opset < 21 {
        let s = cx.b.reshape(scale, Shape::known(&[g, 1]))?;
        let b = cx.b.reshape(bias, Shape::known(&[g, 1]))?;
        let scaled = cx.b.binary(BinaryOp::Mul, normed, s)?;
        let shifted = cx.b.binary(BinaryOp::Add, scaled, b)?;
        return Ok(vec![cx.b.reshape(shifted, Shape::known(&dims))?]);
    } else {
        (per_channel(cx, scale, rank)?, per_channel(cx, bias, rank)?, cx.b.reshape(normed, Shape::known(&dims))?)
    };
    let scaled = cx.b.binary(BinaryOp::Mul, normed, scale)?;
    Ok(vec![cx.b.binary(BinaryOp::Add, scaled, bias)?])
}

/// `Softmax`, `LogSoftmax` and `Hardmax` along `axis` (since opset 13), or, before,
/// over the input flattened to `[prod(dims[..axis]), prod(dims[axis..])]`.
pub fn softmax(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let rank = cx.b.rank(x);
    if node.opset >= 13 {
        let ax = axis(node.int("axis", -1)?, rank.max(1))?;
        return Ok(vec![along(cx, node.op_type, x, ax)?]);
    }
    let ax = axis(node.int("axis", 1)?, rank.max(1))?;
    let shape = cx.b.shape(x);
    let Some(dims) = shape.as_known() else { return unsupported(format!("{} (opset {}) of symbolic {shape}", node.op_type, node.opset)) };
    let (rows, cols) = (dims[..ax].iter().product::<u64>(), dims[ax..].iter().product::<u64>());
    let flat = cx.b.reshape(x, Shape::known(&[rows, cols]))?;
    let y = along(cx, node.op_type, flat, 1)?;
    Ok(vec![cx.b.reshape(y, shape)?])
}

fn along(cx: &mut Cx, op: &str, x: ValueId, ax: usize) -> crate::error::Result<ValueId> {
    match op {
        "Softmax" => cx.b.softmax(x, ax),
        "LogSoftmax" => cx.b.log_softmax(x, ax),
        _ => {
            // One at the first maximum, zero elsewhere.
            let i = cx.b.op(Op::ArgReduce { kind: crate::ir::ArgKind::ArgMax, axis: Some(ax), keepdim: false }, vec![x])?;
            let shape = cx.b.shape(x);
            let hit = cx.b.one_hot(i, shape, ax)?;
            let dtype = cx.b.dtype(x);
            cx.b.cast(hit, dtype)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::attention::tests::{load, Attr};
    use crate::ir::{Dtype, Graph, Op, ReduceKind};

    /// How many means and variances `graph` computes after `simplify`.
    fn statistics(mut graph: Graph) -> (usize, usize) {
        crate::passes::simplify::run(&mut graph).unwrap();
        let means = graph.nodes.iter().filter(|n| matches!(n.op, Op::Reduce { kind: ReduceKind::Mean, .. })).count();
        let variances = graph.nodes.iter().filter(|n| matches!(n.op, Op::Variance { .. })).count();
        (means, variances)
    }

    #[test]
    fn statistics_outputs_reuse_the_normalizations_own() {
        const F32: Dtype = Dtype::F32;
        let ln = load("LayerNormalization", &[("x", F32, &[2, 3, 4]), ("scale", F32, &[4]), ("bias", F32, &[4])], &["y", "mean", "inv_std"], &[("epsilon", Attr::Float(1e-3))], 17).unwrap();
        assert_eq!(statistics(ln), (1, 1));
        let inputs: &[(&str, Dtype, &[u64])] = &[("x", F32, &[2, 3, 4, 5]), ("scale", F32, &[3]), ("bias", F32, &[3]), ("mean", F32, &[3]), ("var", F32, &[3])];
        let bn = load("BatchNormalization", inputs, &["y", "running_mean", "running_var"], &[("training_mode", Attr::Int(1))], 15).unwrap();
        assert_eq!(statistics(bn), (1, 1));
    }
}
