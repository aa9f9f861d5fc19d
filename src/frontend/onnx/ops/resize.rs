//! Resizing: `Resize` (opset 10 on) and `Upsample` (opsets 7 to 9), in every mode:
//! nearest (each `nearest_mode`), linear (per axis: bilinear, trilinear) and cubic
//! (`cubic_coeff_a`, `exclude_outside`), with or without `antialias`, under every
//! `coordinate_transformation_mode`, from `scales` or `sizes` (with `axes` and
//! `keep_aspect_ratio_policy`).
//!
//! Resizing is separable, and along one axis the source positions and weights depend
//! only on the sizes, so they are computed when compiling, as ONNX's reference computes
//! them (`onnx/reference/ops/op_resize.py`, `_interpolate_1d_along_axis`): each output
//! position reads a few taps (source index, weight). One axis is then one `gather` per
//! tap, by a constant index vector, times a constant weight vector, summed; a nearest
//! mode is one gather and no arithmetic. `tf_crop_and_resize` sets the positions whose
//! source lies outside the input to `extrapolation_value` with one `where`.

use super::{axis, input_floats, input_ints, Cx};
use crate::error::Result;
use crate::frontend::onnx::node::{invalid, unsupported, Fail, Node, Out};
use crate::ir::{BinaryOp, Dtype, Op, ValueId};
use crate::tensor::Tensor;

/// Where an output position's source lies (`coordinate_transformation_mode`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Coordinates {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    /// Opsets 11 and 12 only.
    TfHalfPixelForNn,
    TfCropAndResize,
}

/// How a nearest resize rounds a source position between two inputs (`nearest_mode`).
#[derive(Debug, Clone, Copy)]
enum Rounding {
    PreferFloor,
    PreferCeil,
    Floor,
    Ceil,
    /// `Upsample` and `Resize` before opset 11, as ONNX Runtime has them: down when
    /// enlarging, up when shrinking.
    Legacy,
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Nearest(Rounding),
    Linear,
    /// The cubic convolution with coefficient `a`.
    Cubic(f64),
}

/// One node's resampling filter.
struct Filter {
    mode: Mode,
    antialias: bool,
    exclude_outside: bool,
}

/// The most output positions along one axis (whose taps are computed when compiling).
const MAX_POSITIONS: u64 = 1 << 24;

/// One output position's taps: (source index, weight).
type Taps = Vec<(u64, f64)>;

/// The source position of output `y` along an axis of `input` resized by `scale` to
/// `output`; `roi` is the axis' (start, end), for `tf_crop_and_resize`. The reference's
/// `_compute_x_ori`, in its order of operations (`width` is the unrounded output size).
fn source(c: Coordinates, y: f64, scale: f64, input: u64, output: u64, roi: (f64, f64)) -> f64 {
    let n = input as f64;
    let width = scale * n;
    match c {
        Coordinates::AlignCorners if width == 1.0 => 0.0,
        Coordinates::AlignCorners => y * (n - 1.0) / (width - 1.0),
        Coordinates::Asymmetric => y / scale,
        Coordinates::TfCropAndResize => {
            let at = if width == 1.0 { (roi.1 - roi.0) * (n - 1.0) / 2.0 } else { y * (roi.1 - roi.0) * (n - 1.0) / (width - 1.0) };
            at + roi.0 * (n - 1.0)
        }
        Coordinates::PytorchHalfPixel if width == 1.0 => -0.5,
        Coordinates::PytorchHalfPixel | Coordinates::HalfPixel => (y + 0.5) / scale - 0.5,
        Coordinates::HalfPixelSymmetric => {
            let adjustment = output as f64 / width;
            let offset = n / 2.0 * (1.0 - adjustment);
            offset + (y + 0.5) / scale - 0.5
        }
        Coordinates::TfHalfPixelForNn => (y + 0.5) / scale,
    }
}

/// The input a nearest resize reads for source position `x` (before clamping): `x`
/// itself when whole, else `floor(x)` or the one after as the rounding says.
fn nearest(rounding: Rounding, x: f64, scale: f64) -> i64 {
    let down = x.floor();
    if x == down {
        return down as i64;
    }
    let ratio = x - down;
    let up = match rounding {
        Rounding::PreferFloor => ratio > 0.5,
        Rounding::PreferCeil => ratio >= 0.5,
        Rounding::Floor => false,
        Rounding::Ceil => true,
        Rounding::Legacy => scale < 1.0,
    };
    down as i64 + i64::from(up)
}

/// The cubic convolution kernel at distance `x` (Keys, with coefficient `a`).
fn cubic(a: f64, x: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        (a + 2.0) * x * x * x - (a + 3.0) * x * x + 1.0
    } else if x < 2.0 {
        a * x * x * x - 5.0 * a * x * x + 8.0 * a * x - 4.0 * a
    } else {
        0.0
    }
}

/// The weights of the window around a source position `ratio` past its left
/// neighbour (in `(0, 1]`): the reference's `_linear_coeffs`, `_cubic_coeffs` and
/// their antialiased forms, which widen the kernel by `1 / scale` when shrinking.
fn coefficients(filter: &Filter, ratio: f64, scale: f64) -> Vec<f64> {
    let s = scale.min(1.0);
    let normalized = |c: Vec<f64>| {
        let sum: f64 = c.iter().sum();
        c.into_iter().map(|v| v / sum).collect()
    };
    match (filter.mode, filter.antialias) {
        (Mode::Linear, false) => vec![1.0 - ratio, ratio],
        (Mode::Linear, true) => {
            let start = (-1.0 / s).floor() as i64 + 1;
            normalized((start..2 - start).map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0)).collect())
        }
        (Mode::Cubic(a), false) => {
            let (r, q) = (ratio, 1.0 - ratio);
            vec![
                ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                ((a + 2.0) * q - (a + 3.0)) * q * q + 1.0,
                ((a * (q + 1.0) - 5.0 * a) * (q + 1.0) + 8.0 * a) * (q + 1.0) - 4.0 * a,
            ]
        }
        (Mode::Cubic(a), true) => {
            let start = (-2.0 / s).floor() as i64 + 1;
            normalized((start..2 - start).map(|i| cubic(a, s * (i as f64 - ratio))).collect())
        }
        (Mode::Nearest(_), _) => vec![1.0],
    }
}

/// The taps of an interpolating filter at source position `x` in an axis of `input`:
/// the window of the reference's `_interpolate_1d_along_axis` (the `n` inputs nearest
/// `x`, the smaller on a tie), weights outside the input dropped and the rest
/// renormalized when `exclude_outside`, indices clamped into the input (the
/// reference's edge padding) and equal ones merged.
fn interpolate(filter: &Filter, x: f64, scale: f64, input: u64) -> Taps {
    let ratio = if x == x.floor() { 1.0 } else { x - x.floor() };
    let mut coeffs = coefficients(filter, ratio, scale);
    let n = coeffs.len() as i64;
    let pad = (n + 1) / 2;
    let padded = x + pad as f64;
    let frac = padded - padded.floor();
    let offset = if n % 2 == 0 {
        if frac == 0.0 { -(n / 2) } else { 1 - n / 2 }
    } else if frac <= 0.5 {
        -((n - 1) / 2)
    } else {
        1 - (n - 1) / 2
    };
    let start = padded.floor() as i64 + offset - pad;
    let last = input as i64 - 1;
    if filter.exclude_outside {
        for (i, c) in coeffs.iter_mut().enumerate() {
            if !(0..=last).contains(&(start + i as i64)) {
                *c = 0.0;
            }
        }
        let sum: f64 = coeffs.iter().sum();
        let sum = if sum == 0.0 { 1.0 } else { sum };
        coeffs.iter_mut().for_each(|c| *c /= sum);
    }
    let mut taps: Taps = Vec::new();
    for (i, &c) in coeffs.iter().enumerate().filter(|(_, &c)| c != 0.0) {
        let at = (start + i as i64).clamp(0, last) as u64;
        match taps.iter_mut().find(|(j, _)| *j == at) {
            Some(tap) => tap.1 += c,
            None => taps.push((at, c)),
        }
    }
    taps
}

/// `x` resampled along `ax` to the taps of each output position: one `gather` per tap
/// and, unless every tap is one input at weight 1, a weight and a sum; positions marked
/// `outside` set to `extrapolation`.
fn resample(cx: &mut Cx, x: ValueId, ax: usize, taps: &[Taps], outside: &[bool], extrapolation: f64) -> Result<ValueId> {
    let m = taps.len() as u64;
    let dtype = cx.b.dtype(x);
    let mut along = vec![1; cx.b.rank(x)];
    along[ax] = m;
    let plain = taps.iter().all(|t| matches!(t.as_slice(), [(_, w)] if *w == 1.0));
    let width = taps.iter().map(Vec::len).max().unwrap_or(0);
    let mut y: Option<ValueId> = None;
    for j in 0..width {
        // A position with fewer taps reads its first input again, at weight 0.
        let index = taps.iter().map(|t| t.get(j).or(t.first()).map_or(0.0, |&(i, _)| i as f64)).collect();
        let index = cx.b.constant(Tensor::new(Dtype::I64, vec![m], index));
        let mut term = cx.b.op(Op::Gather { axis: ax }, vec![x, index])?;
        if !plain {
            let w = taps.iter().map(|t| t.get(j).map_or(0.0, |&(_, w)| w)).collect();
            let w = cx.b.constant(Tensor::new(dtype, along.clone(), w));
            term = cx.b.binary(BinaryOp::Mul, term, w)?;
        }
        y = Some(match y {
            Some(acc) => cx.b.binary(BinaryOp::Add, acc, term)?,
            None => term,
        });
    }
    let y = match y {
        Some(y) => y,
        None => {
            let mut shape = cx.b.shape(x);
            shape.0[ax] = crate::ir::Dim::Known(m);
            cx.b.full(dtype, shape, 0.0)?
        }
    };
    if !outside.contains(&true) {
        return Ok(y);
    }
    let mask = cx.b.constant(Tensor::new(Dtype::Bool, along, outside.iter().map(|&o| f64::from(u8::from(o))).collect()));
    let e = cx.b.scalar(dtype, extrapolation);
    cx.b.select(mask, e, y)
}

/// A string attribute among `names`, mapped to `values`.
fn choice<T: Copy>(node: &Node, attr: &str, default: &str, names: &[(&str, T)]) -> std::result::Result<T, Fail> {
    let s = node.string_or(attr, default)?;
    match names.iter().find(|(n, _)| *n == s) {
        Some(&(_, v)) => Ok(v),
        None => invalid(format!("{attr} {s:?} is not one of {}", names.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "))),
    }
}

/// The node's filter and where its output positions' sources lie: before opset 11 (and
/// in `Upsample`) always asymmetric, nearest rounding as [`Rounding::Legacy`].
fn filter(node: &Node) -> std::result::Result<(Filter, Coordinates), Fail> {
    let legacy = node.op_type == "Upsample" || node.opset < 11;
    let (coordinates, rounding) = if legacy {
        (Coordinates::Asymmetric, Rounding::Legacy)
    } else {
        use Coordinates as C;
        let mut modes = vec![("half_pixel", C::HalfPixel), ("half_pixel_symmetric", C::HalfPixelSymmetric), ("pytorch_half_pixel", C::PytorchHalfPixel), ("align_corners", C::AlignCorners), ("asymmetric", C::Asymmetric), ("tf_crop_and_resize", C::TfCropAndResize)];
        if node.opset < 13 {
            modes.push(("tf_half_pixel_for_nn", C::TfHalfPixelForNn));
        }
        let c = choice(node, "coordinate_transformation_mode", "half_pixel", &modes)?;
        let rounding = choice(node, "nearest_mode", "round_prefer_floor", &[("round_prefer_floor", Rounding::PreferFloor), ("round_prefer_ceil", Rounding::PreferCeil), ("floor", Rounding::Floor), ("ceil", Rounding::Ceil)])?;
        (c, rounding)
    };
    let mode = match node.string_or("mode", "nearest")?.as_str() {
        "nearest" => Mode::Nearest(rounding),
        "linear" | "bilinear" | "trilinear" => Mode::Linear,
        "cubic" if !legacy => Mode::Cubic(node.float("cubic_coeff_a", -0.75)?),
        other => return invalid(format!("{} mode {other:?} is not nearest, linear or cubic", node.op_type)),
    };
    let filter = Filter { mode, antialias: node.int("antialias", 0)? != 0, exclude_outside: node.int("exclude_outside", 0)? != 0 };
    Ok((filter, coordinates))
}

/// Each axis' scale and output size (`None` for a symbolic axis left as it is), from
/// `scales` (`floor(scale * input)`) or `sizes` (under `keep_aspect_ratio_policy`
/// `not_larger` or `not_smaller`, one scale for all `axes`, `round(scale * input)`).
fn targets(cx: &mut Cx, node: &Node, axes: &[usize]) -> std::result::Result<(Vec<f64>, Vec<Option<u64>>), Fail> {
    let shape = cx.b.shape(node.input(0)?);
    let nonempty = |v: Option<Vec<f64>>| v.filter(|v| !v.is_empty());
    let (scales, sizes) = match (node.op_type, node.opset) {
        ("Upsample", ..=8) => (node.floats("scales")?, None),
        ("Upsample", _) | (_, ..=10) => (input_floats(cx, node, 1)?, None),
        _ => (nonempty(if node.opt(2).is_some() { input_floats(cx, node, 2)? } else { None }), input_ints(cx, node, 3)?),
    };
    let known = |a: usize| match shape.0[a].known() {
        Some(n) => Ok(n),
        None => unsupported(format!("{} of the symbolic axis {a} of {shape}", node.op_type)),
    };
    let mut scale = vec![1.0; shape.rank()];
    let mut output: Vec<Option<u64>> = shape.0.iter().map(|d| d.known()).collect();
    match (scales, sizes.filter(|s| !s.is_empty())) {
        (Some(s), None) if s.len() == axes.len() => {
            let least = if node.op_type == "Upsample" { 1.0 } else { f64::MIN_POSITIVE };
            for (&a, &f) in axes.iter().zip(&s) {
                if !(f >= least && f.is_finite()) {
                    return invalid(format!("{} scale {f} is not {}", node.op_type, if least == 1.0 { "at least 1" } else { "positive" }));
                }
                scale[a] = f;
                if f != 1.0 {
                    output[a] = Some((f * known(a)? as f64).floor() as u64);
                }
            }
        }
        (None, Some(z)) if z.len() == axes.len() => {
            let mut ratios = Vec::with_capacity(axes.len());
            for (&a, &size) in axes.iter().zip(&z) {
                let n = known(a)?;
                if size < 0 || n == 0 {
                    return invalid(format!("size {size} for axis {a} of {shape}"));
                }
                ratios.push(size as f64 / n as f64);
            }
            let shared = match node.string_or("keep_aspect_ratio_policy", "stretch")?.as_str() {
                "stretch" => None,
                "not_larger" => ratios.iter().copied().reduce(f64::min),
                "not_smaller" => ratios.iter().copied().reduce(f64::max),
                other => return invalid(format!("keep_aspect_ratio_policy {other:?} is not stretch, not_larger or not_smaller")),
            };
            for ((&a, &size), ratio) in axes.iter().zip(&z).zip(ratios) {
                scale[a] = shared.unwrap_or(ratio);
                output[a] = Some(if shared.is_some() { (scale[a] * known(a)? as f64 + 0.5) as u64 } else { size as u64 });
            }
        }
        _ => return invalid(format!("{} needs either scales or sizes, one per axis of {axes:?}", node.op_type)),
    }
    Ok((scale, output))
}

/// Each axis' region of interest (start, end), from the `roi` input of
/// `tf_crop_and_resize` (starts then ends, one per axis of `axes`).
fn region(cx: &mut Cx, node: &Node, rank: usize, axes: &[usize]) -> std::result::Result<Vec<(f64, f64)>, Fail> {
    let mut roi = vec![(0.0, 1.0); rank];
    let v = input_floats(cx, node, 1)?.unwrap_or_default();
    if v.len() != 2 * axes.len() {
        return invalid(format!("tf_crop_and_resize needs a roi of {} numbers, and the node gives {}", 2 * axes.len(), v.len()));
    }
    for (i, &a) in axes.iter().enumerate() {
        roi[a] = (v[i], v[axes.len() + i]);
    }
    Ok(roi)
}

/// `Resize` and `Upsample`: each axis whose size or source positions change resampled
/// in turn (see the module's doc), its taps per output position computed here.
pub fn resize(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let (shape, dtype) = (cx.b.shape(x), cx.b.dtype(x));
    let (filter, coordinates) = filter(node)?;
    if !matches!(filter.mode, Mode::Nearest(_)) && !dtype.is_float() {
        return unsupported(format!("{} of {dtype} by interpolation (integers are resized by nearest only: ONNX Runtime and the reference round them differently)", node.op_type));
    }
    let axes: Vec<usize> = match node.ints("axes")? {
        Some(list) => super::axes(&list, shape.rank()).and(list.iter().map(|&a| axis(a, shape.rank())).collect())?,
        None => (0..shape.rank()).collect(),
    };
    let (scale, output) = targets(cx, node, &axes)?;
    let cropped = coordinates == Coordinates::TfCropAndResize;
    let roi = if cropped { region(cx, node, shape.rank(), &axes)? } else { vec![(0.0, 1.0); shape.rank()] };
    let extrapolation = node.float("extrapolation_value", 0.0)?;
    let mut y = x;
    for &a in &axes {
        let (Some(n), Some(m), s) = (shape.0[a].known(), output[a], scale[a]) else { continue };
        if m > MAX_POSITIONS {
            return unsupported(format!("{} to {m} positions along axis {a}: more than the {MAX_POSITIONS} whose taps mithrilc computes when compiling", node.op_type));
        }
        // The reference's test for an axis left as it is.
        if (s - 1.0).abs() <= 1e-9 * s.max(1.0) && m == n && roi[a] == (0.0, 1.0) {
            continue;
        }
        if n == 0 {
            return invalid(format!("cannot resize the empty axis {a} of {shape} to {m}"));
        }
        let (mut taps, mut outside) = (Vec::with_capacity(m as usize), Vec::with_capacity(m as usize));
        for o in 0..m {
            let at = source(coordinates, o as f64, s, n, m, roi[a]);
            outside.push(cropped && (at < 0.0 || at > (n - 1) as f64));
            taps.push(match filter.mode {
                Mode::Nearest(rounding) => vec![(nearest(rounding, at, s).clamp(0, n as i64 - 1) as u64, 1.0)],
                _ => interpolate(&filter, at, s, n),
            });
        }
        y = resample(cx, y, a, &taps, &outside, extrapolation)?;
    }
    Ok(vec![y])
}

/// Resizes the node tests leave out (old opsets, other ranks and types); the expected
/// values are onnxruntime 1.22's.
#[cfg(test)]
mod tests {
    use super::super::index::tests::{check, one, run, t, Arg, A};
    use crate::ir::Dtype;
    use Arg::{Absent, Fed, Known};

    /// `[1, 1, 3, 5]`: 1 to 15.
    fn image() -> Arg {
        Fed(t(Dtype::F32, &[1, 1, 3, 5], &(1..=15).map(f64::from).collect::<Vec<_>>()))
    }

    fn scales(s: &[f64]) -> Arg {
        Known(t(Dtype::F32, &[s.len() as u64], s))
    }

    fn sizes(s: &[f64]) -> Arg {
        Known(t(Dtype::I64, &[s.len() as u64], s))
    }

    #[test]
    fn before_opset_11_nearest_rounds_down_when_enlarging_and_up_when_shrinking() {
        let y = one("Resize", 10, &[("mode", A::S("nearest"))], vec![image(), scales(&[1.0, 1.0, 0.6, 0.5])]);
        check(&y, &[1, 1, 1, 2], &[1.0, 3.0]);
        let y = one("Resize", 10, &[("mode", A::S("nearest"))], vec![image(), scales(&[1.0, 1.0, 1.5, 1.7])]);
        let row = |r: f64| [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 5.0].map(|v| v + 5.0 * r);
        check(&y, &[1, 1, 4, 8], &[row(0.0), row(0.0), row(1.0), row(2.0)].concat());
        let y = one("Upsample", 9, &[("mode", A::S("nearest"))], vec![image(), scales(&[1.0, 1.0, 2.0, 1.0])]);
        let rows: Vec<f64> = (0..6).flat_map(|r| (1..=5).map(move |c| f64::from(c + 5 * (r / 2)))).collect();
        check(&y, &[1, 1, 6, 5], &rows);
    }

    #[test]
    fn before_opset_11_linear_is_asymmetric() {
        let y = one("Resize", 10, &[("mode", A::S("linear"))], vec![image(), scales(&[1.0, 1.0, 1.5, 0.6])]);
        let third = 1.0 / 3.0;
        check(&y, &[1, 1, 4, 3], &[1.0, 2.0 + 2.0 * third, 4.0 + third, 4.0 + third, 6.0, 7.0 + 2.0 * third, 7.0 + 2.0 * third, 9.0 + third, 11.0, 11.0, 12.0 + 2.0 * third, 14.0 + third]);
        let y = one("Upsample", 7, &[("mode", A::S("linear")), ("scales", A::Fs(&[1.0, 1.0, 2.0, 1.5]))], vec![image()]);
        let row = |first: f64| (0..7).map(|c| (first + c as f64 / 1.5).min(first + 4.0)).collect::<Vec<_>>();
        check(&y, &[1, 1, 6, 7], &[row(1.0), row(3.5), row(6.0), row(8.5), row(11.0), row(11.0)].concat());
    }

    #[test]
    fn opset_11_tf_half_pixel_for_nn() {
        let attrs = [("mode", A::S("nearest")), ("coordinate_transformation_mode", A::S("tf_half_pixel_for_nn"))];
        let y = one("Resize", 11, &attrs, vec![image(), Known(t(Dtype::F32, &[0], &[])), scales(&[1.0, 1.0, 1.5, 0.6])]);
        check(&y, &[1, 1, 4, 3], &[2.0, 3.0, 5.0, 7.0, 8.0, 10.0, 12.0, 13.0, 15.0, 12.0, 13.0, 15.0]);
    }

    #[test]
    fn cubic_excluding_outside_and_trilinear() {
        let attrs = [("mode", A::S("cubic")), ("coordinate_transformation_mode", A::S("pytorch_half_pixel")), ("exclude_outside", A::I(1))];
        let y = one("Resize", 13, &attrs, vec![image(), Absent, Absent, sizes(&[1.0, 1.0, 4.0, 3.0])]);
        check(&y, &[1, 1, 4, 3], &[0.832_570_7, 2.599_236_7, 4.365_904, 3.718_446_3, 5.485_112, 7.251_779_6, 8.748_221, 10.514_888, 12.281_555, 11.634_097, 13.400_763_5, 15.167_429]);
        let x = Fed(t(Dtype::F32, &[1, 1, 2, 3, 4], &(0..24).map(f64::from).collect::<Vec<_>>()));
        let attrs = [("mode", A::S("linear")), ("coordinate_transformation_mode", A::S("align_corners"))];
        let y = one("Resize", 19, &attrs, vec![x, Absent, Absent, sizes(&[1.0, 1.0, 3.0, 2.0, 5.0])]);
        let want: Vec<f64> = [0.0, 8.0, 6.0, 14.0, 12.0, 20.0].iter().flat_map(|&s| (0..5).map(move |c| s + 0.75 * c as f64)).collect();
        check(&y, &[1, 1, 3, 2, 5], &want);
    }

    #[test]
    fn nearest_of_integers_on_listed_axes_and_crops() {
        let x = Fed(t(Dtype::I32, &[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]));
        let y = one("Resize", 19, &[("mode", A::S("nearest")), ("axes", A::Is(&[1])), ("nearest_mode", A::S("ceil"))], vec![x, Absent, scales(&[1.7])]);
        assert_eq!((y.dtype, y.shape.as_slice(), y.data.as_slice()), (Dtype::I32, &[2, 5][..], &[0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 4.0, 4.0, 5.0, 5.0][..]));
        let attrs = [("mode", A::S("linear")), ("antialias", A::I(1)), ("axes", A::Is(&[2, 3])), ("keep_aspect_ratio_policy", A::S("not_smaller"))];
        let y = one("Resize", 18, &attrs, vec![image(), Absent, Absent, sizes(&[2.0, 2.0])]);
        check(&y, &[1, 1, 2, 3], &[3.0, 4.444_444_7, 5.888_889, 9.666_667, 11.111_111, 12.555_555]);
        let attrs = [("mode", A::S("nearest")), ("coordinate_transformation_mode", A::S("tf_crop_and_resize")), ("extrapolation_value", A::F(-1.0)), ("axes", A::Is(&[3]))];
        let y = one("Resize", 19, &attrs, vec![image(), Known(t(Dtype::F32, &[2], &[-0.2, 0.9])), Absent, sizes(&[4.0])]);
        check(&y, &[1, 1, 3, 4], &[-1.0, 2.0, 3.0, 5.0, -1.0, 7.0, 8.0, 10.0, -1.0, 12.0, 13.0, 15.0]);
    }

    #[test]
    fn what_cannot_be_resized_is_said() {
        let e = run("Upsample", 9, &[], vec![image(), scales(&[1.0, 1.0, 2.0, 0.5])], 1).unwrap_err();
        assert_eq!(e, "m.onnx: node 0 (Upsample): Upsample scale 0.5 is not at least 1");
        let e = run("Resize", 13, &[], vec![image(), Absent, scales(&[1.0, 1.0, 1e8, 1.0])], 1).unwrap_err();
        assert_eq!(e, "m.onnx: 1 of the model's 1 node(s) cannot be compiled:\n  node 0 (Resize): Resize to 300000000 positions along axis 2: more than the 16777216 whose taps mithrilc computes when compiling");
        let e = run("Resize", 13, &[], vec![image(), Absent, scales(&[1.0, 1.0, 2.0, 2.0]), sizes(&[1.0, 1.0, 6.0, 10.0])], 1).unwrap_err();
        assert_eq!(e, "m.onnx: node 0 (Resize): Resize needs either scales or sizes, one per axis of [0, 1, 2, 3]");
        let x = Fed(t(Dtype::I32, &[2, 3], &[0.0; 6]));
        let e = run("Resize", 13, &[("mode", A::S("linear"))], vec![x, Absent, scales(&[1.0, 2.0])], 1).unwrap_err();
        assert_eq!(e, "m.onnx: 1 of the model's 1 node(s) cannot be compiled:\n  node 0 (Resize): Resize of i32 by interpolation (integers are resized by nearest only: ONNX Runtime and the reference round them differently)");
    }
}
