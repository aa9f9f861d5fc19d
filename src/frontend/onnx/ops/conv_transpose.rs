//! `ConvTranspose`: the gradient of a convolution with respect to its input, written as
//! a convolution: the input spread out by the strides (zeros between its elements),
//! padded by `dilation (k - 1) - pads` on each side (cropped where that is negative,
//! grown by `output_padding` at the end), and convolved at stride 1 with the weight
//! flipped in space and its in and out channels swapped per group. `Col2Im`, which
//! sums sliding blocks back into an image, spreads each kernel offset's blocks alike.

use super::{input_ints, Cx};
use crate::frontend::onnx::node::{invalid, unsupported, Node, Out};
use crate::ir::{BinaryOp, ConvAttrs, Op, Shape, SliceRange, ValueId};

pub fn conv_transpose(cx: &mut Cx, node: &Node) -> Out {
    let (x, w, bias) = (node.input(0)?, node.input(1)?, node.opt(2));
    let (xs, ws) = (cx.b.shape(x), cx.b.shape(w));
    let (Some(xd), Some(wd)) = (xs.as_known(), ws.as_known()) else {
        return unsupported(format!("ConvTranspose of symbolic {xs} or {ws}"));
    };
    let n = xd.len().saturating_sub(2);
    if n == 0 || wd.len() != n + 2 {
        return invalid(format!("ConvTranspose wants [N, C, spatial...] and a weight [C, M/group, k...], got {xs} and {ws}"));
    }
    let (input, kernel) = (&xd[2..], &wd[2..]);
    let groups = node.int("group", 1)?;
    if groups < 1 || xd[1] != wd[0] || wd[0] % groups as u64 != 0 {
        return invalid(format!("{} input channels do not fit the weight {ws} in {groups} group(s)", xd[1]));
    }
    let g = groups as u64;
    let list = |name: &str, default: i64| -> Result<Vec<i64>, crate::frontend::onnx::node::Fail> {
        match node.ints(name)? {
            None => Ok(vec![default; n]),
            Some(v) if v.len() == n => Ok(v),
            Some(v) => invalid(format!("{name} {v:?} are not {n} numbers")),
        }
    };
    let (stride, dilation, out_pad) = (list("strides", 1)?, list("dilations", 1)?, list("output_padding", 0)?);
    if stride.iter().chain(&dilation).any(|&v| v < 1) || out_pad.iter().any(|&v| v < 0) {
        return invalid("strides and dilations must be positive, output_padding not negative");
    }
    // The full output size before padding is taken off, per axis.
    let full: Vec<i64> = (0..n).map(|i| stride[i] * (input[i] as i64 - 1) + out_pad[i] + (kernel[i] as i64 - 1) * dilation[i] + 1).collect();
    let auto_pad = node.string_or("auto_pad", "NOTSET")?;
    let wanted = match (node.ints("output_shape")?, auto_pad.as_str()) {
        (Some(s), _) => Some(s.get(s.len().saturating_sub(n)..).unwrap_or_default().to_vec()),
        (None, "SAME_UPPER" | "SAME_LOWER") => Some((0..n).map(|i| input[i] as i64 * stride[i]).collect()),
        _ => None,
    };
    let pads: Vec<(i64, i64)> = match wanted {
        Some(out) if out.len() == n => (0..n)
            .map(|i| {
                let total = full[i] - out[i];
                // Floor division, as ONNX's reference: a negative total grows the output.
                let half = total.div_euclid(2);
                if auto_pad == "SAME_UPPER" { (half, total - half) } else { (total - half, half) }
            })
            .collect(),
        Some(out) => return invalid(format!("output_shape {out:?} does not have {n} spatial sizes")),
        None => match node.ints("pads")? {
            None => vec![(0, 0); n],
            Some(p) if p.len() == 2 * n => (0..n).map(|i| (p[i], p[n + i])).collect(),
            Some(p) => return invalid(format!("pads {p:?} are not {} numbers", 2 * n)),
        },
    };
    if pads.iter().enumerate().any(|(i, &(lo, hi))| full[i] - lo - hi < 1) {
        return invalid(format!("pads {pads:?} leave no output of the full size {full:?}"));
    }
    let spread = spread(cx, x, &xd, &stride)?;
    // Padding of the spread input: d (k - 1) - pad, and output_padding at the end.
    let mut padding = Vec::with_capacity(n);
    // where that is negative, the spread input is cropped instead.
    let mut crop = vec![SliceRange::FULL; n + 2];
    let spread_dims = cx.b.shape(spread).as_known().expect("a static shape spread");
    for i in 0..n {
        let edge = (kernel[i] as i64 - 1) * dilation[i];
        let (lo, hi) = (edge - pads[i].0, edge - pads[i].1 + out_pad[i]);
        padding.push((lo.max(0) as u64, hi.max(0) as u64));
        if lo < 0 || hi < 0 {
            crop[i + 2] = SliceRange { start: Some((-lo).max(0)), stop: Some(spread_dims[i + 2] as i64 - (-hi).max(0)), step: 1 };
        }
    }
    let cropped = if crop.iter().all(SliceRange::is_full) { spread } else { cx.b.op(Op::Slice { ranges: crop }, vec![spread])? };
    // [C, M/g, k...] as [g, C/g, M/g, k...] -> [g, M/g, C/g, k...] -> [M, C/g, k...], flipped.
    let (c, mg) = (wd[0], wd[1]);
    let mut grouped = vec![g, c / g, mg];
    grouped.extend(kernel);
    let wg = cx.b.reshape(w, Shape::known(&grouped))?;
    let mut perm = vec![0, 2, 1];
    perm.extend(3..n + 3);
    let wt = cx.b.transpose(wg, perm)?;
    let mut merged = vec![g * mg, c / g];
    merged.extend(kernel);
    let wm = cx.b.reshape(wt, Shape::known(&merged))?;
    let mut flip = vec![SliceRange::FULL; n + 2];
    for r in flip.iter_mut().skip(2) {
        *r = SliceRange { start: None, stop: None, step: -1 };
    }
    let wf = cx.b.op(Op::Slice { ranges: flip }, vec![wm])?;
    let attrs = ConvAttrs { stride: vec![1; n], padding, dilation: dilation.iter().map(|&d| d as u64).collect(), groups: g };
    let mut args = vec![cropped, wf];
    if let Some(bias) = bias {
        args.push(super::nn::conv_bias(cx, bias, n)?);
    }
    Ok(vec![cx.b.op(Op::Conv(attrs), args)?])
}

/// `x` with `stride - 1` zeros between its elements along each spatial axis: each axis
/// of size `d` becomes `[d, 1]`, padded to `[d, s]`, merged to `d s` and cut to
/// `(d - 1) s + 1`.
fn spread(cx: &mut Cx, x: ValueId, dims: &[u64], stride: &[i64]) -> crate::error::Result<ValueId> {
    if stride.iter().all(|&s| s == 1) {
        return Ok(x);
    }
    let n = stride.len();
    let mut split = dims[..2].to_vec();
    let mut pads = vec![(0, 0), (0, 0)];
    let mut merged = dims[..2].to_vec();
    let mut cut = vec![SliceRange::FULL; n + 2];
    for i in 0..n {
        let (d, s) = (dims[i + 2], stride[i] as u64);
        split.extend([d, 1]);
        pads.extend([(0, 0), (0, s - 1)]);
        merged.push(d * s);
        cut[i + 2] = SliceRange { start: Some(0), stop: Some(((d.max(1) - 1) * s + 1) as i64), step: 1 };
    }
    let v = cx.b.reshape(x, Shape::known(&split))?;
    let v = cx.b.op(Op::Pad { pads, value: 0.0 }, vec![v])?;
    let v = cx.b.reshape(v, Shape::known(&merged))?;
    cx.b.op(Op::Slice { ranges: cut }, vec![v])
}

/// `Col2Im` (opset 18): columns `[N, C k0 k1 .., L]` of sliding blocks (`L` = the block
/// count of `image_shape` under `strides`, `pads` and `dilations`, as im2col makes them)
/// summed back into `[N, C, image_shape..]`: for each kernel offset, its blocks spread
/// by the strides and padded to where the offset puts them in the padded image; the
/// sum of all offsets, cropped by the pads. `image_shape` and `block_shape` must be
/// known when compiling.
pub fn col2im(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let (Some(image), Some(kernel)) = (input_ints(cx, node, 1)?, input_ints(cx, node, 2)?) else { return invalid("Col2Im needs image_shape and block_shape") };
    let n = image.len();
    let ones = vec![1; n];
    let (dil, stride) = (node.ints("dilations")?.unwrap_or_else(|| ones.clone()), node.ints("strides")?.unwrap_or(ones));
    let pads = node.ints("pads")?.unwrap_or_else(|| vec![0; 2 * n]);
    let xs = cx.b.shape(x);
    let Some(xd) = xs.as_known() else { return unsupported(format!("Col2Im of symbolic {xs}")) };
    let sizes_ok = [&image, &kernel, &dil, &stride].iter().all(|v| v.len() == n && v.iter().all(|&d| (1..=1 << 24).contains(&d))) && pads.len() == 2 * n && pads.iter().all(|&p| (0..=1 << 24).contains(&p));
    let k: u64 = kernel.iter().map(|&k| k as u64).product();
    if n == 0 || !sizes_ok || xd.len() != 3 || xd[1] % k != 0 {
        return invalid(format!("Col2Im of {xs} into image_shape {image:?} by block_shape {kernel:?} (dilations {dil:?}, pads {pads:?}, strides {stride:?})"));
    }
    // Per axis: the padded size, the block count and the extent of the spread blocks.
    let (mut padded, mut blocks) = (Vec::new(), Vec::new());
    for i in 0..n {
        let p = image[i] + pads[i] + pads[n + i];
        let span = dil[i] * (kernel[i] - 1) + 1;
        if p < span {
            return invalid(format!("Col2Im: block_shape {kernel:?} (dilations {dil:?}) does not fit the padded image along axis {i}"));
        }
        padded.push(p as u64);
        blocks.push(((p - span) / stride[i] + 1) as u64);
    }
    if blocks.iter().product::<u64>() != xd[2] {
        return invalid(format!("Col2Im: {xs} holds {} blocks, and image_shape {image:?} makes {blocks:?}", xd[2]));
    }
    let (batch, c) = (xd[0], xd[1] / k);
    let mut split = vec![batch, c];
    split.extend(kernel.iter().map(|&k| k as u64));
    split.extend(&blocks);
    let v = cx.b.reshape(x, Shape::known(&split))?;
    let mut part_dims = vec![batch, c];
    part_dims.extend(&blocks);
    let mut sum: Option<ValueId> = None;
    for offset in 0..k {
        // The kernel offset's coordinates, the last axis fastest.
        let (mut at, mut rest) = (vec![0; n], offset);
        for i in (0..n).rev() {
            at[i] = rest % kernel[i] as u64;
            rest /= kernel[i] as u64;
        }
        let mut ranges = vec![SliceRange::FULL; 2 * n + 2];
        for i in 0..n {
            ranges[2 + i] = SliceRange { start: Some(at[i] as i64), stop: Some(at[i] as i64 + 1), step: 1 };
        }
        let part = cx.b.op(Op::Slice { ranges }, vec![v])?;
        let part = cx.b.reshape(part, Shape::known(&part_dims))?;
        let spread = spread(cx, part, &part_dims, &stride)?;
        let mut place = vec![(0, 0), (0, 0)];
        for i in 0..n {
            let before = at[i] * dil[i] as u64;
            let extent = (blocks[i] - 1) * stride[i] as u64 + 1;
            place.push((before, padded[i] - before - extent));
        }
        let placed = cx.b.op(Op::Pad { pads: place, value: 0.0 }, vec![spread])?;
        sum = Some(match sum {
            Some(acc) => cx.b.binary(BinaryOp::Add, acc, placed)?,
            None => placed,
        });
    }
    let mut crop = vec![SliceRange::FULL; n + 2];
    for i in 0..n {
        crop[i + 2] = SliceRange { start: Some(pads[i]), stop: Some(pads[i] + image[i]), step: 1 };
    }
    Ok(vec![cx.b.op(Op::Slice { ranges: crop }, vec![sum.expect("a kernel of at least one element")])?])
}
