//! Sampling at computed coordinates: `GridSample` (gathers at a grid's points,
//! interpolated) and `AffineGrid` (the grid of an affine map), in any number of
//! spatial dimensions; `RoiAlign` (bilinear samples pooled per region) and
//! `DeformConv` (a convolution whose taps sample at moved places).

use super::index::{dims, gather_rows, iota, known};
use super::{input_ints, Cx};
use crate::frontend::onnx::node::{invalid, unsupported, Fail, Node, Out};
use crate::ir::{BinaryOp, Dtype, Op, ReduceKind, Shape, SliceRange, UnaryOp, ValueId};
use crate::tensor::Tensor;

type Res<T> = std::result::Result<T, Fail>;

/// How a coordinate outside the input is read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// Arithmetic on float tensors of one type, for the coordinate formulas.
struct F<'a, 'b> {
    cx: &'a mut Cx<'b>,
    dtype: Dtype,
}

impl F<'_, '_> {
    fn c(&mut self, v: f64) -> ValueId {
        self.cx.b.scalar(self.dtype, v)
    }
    fn op(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> Res<ValueId> {
        Ok(self.cx.b.binary(op, a, b)?)
    }
    fn opc(&mut self, op: BinaryOp, a: ValueId, c: f64) -> Res<ValueId> {
        let c = self.c(c);
        self.op(op, a, c)
    }
    fn floor(&mut self, a: ValueId) -> Res<ValueId> {
        Ok(self.cx.b.unary(UnaryOp::Floor, a)?)
    }
    fn select(&mut self, c: ValueId, a: ValueId, b: ValueId) -> Res<ValueId> {
        Ok(self.cx.b.select(c, a, b)?)
    }
    /// `x` clamped to `[lo, hi]`.
    fn clamp(&mut self, x: ValueId, lo: f64, hi: f64) -> Res<ValueId> {
        let x = self.opc(BinaryOp::Max, x, lo)?;
        self.opc(BinaryOp::Min, x, hi)
    }
    /// `x` reflected at `lo` and `hi` until it lies between them (ONNX's
    /// `_gs_reflect`): the distance past a border, folded by whole ranges, is measured
    /// from that border, or from the other one after an odd number of folds.
    fn reflect(&mut self, x: ValueId, lo: f64, hi: f64) -> Res<ValueId> {
        let range = hi - lo;
        if range <= 0.0 {
            return Ok(self.cx.b.full(self.dtype, self.cx.b.shape(x), lo)?);
        }
        let fold = |f: &mut Self, past: ValueId, from: f64, other: f64, sign: f64| -> Res<ValueId> {
            let q = f.opc(BinaryOp::Div, past, range)?;
            let n = f.floor(q)?;
            let whole = f.opc(BinaryOp::Mul, n, range)?;
            let r = f.op(BinaryOp::Sub, past, whole)?;
            let half = f.opc(BinaryOp::Mul, n, 0.5)?;
            let half = f.floor(half)?;
            let twice = f.opc(BinaryOp::Mul, half, 2.0)?;
            let even = f.op(BinaryOp::Eq, twice, n)?;
            let sr = f.opc(BinaryOp::Mul, r, sign)?;
            let near = f.opc(BinaryOp::Add, sr, from)?;
            let nsr = f.opc(BinaryOp::Mul, r, -sign)?;
            let far = f.opc(BinaryOp::Add, nsr, other)?;
            f.select(even, near, far)
        };
        let lo_c = self.c(lo);
        let below = self.op(BinaryOp::Sub, lo_c, x)?;
        let from_lo = fold(self, below, lo, hi, 1.0)?;
        let above = self.opc(BinaryOp::Sub, x, hi)?;
        let from_hi = fold(self, above, hi, lo, -1.0)?;
        let is_below = self.opc(BinaryOp::Lt, x, lo)?;
        let is_above = self.opc(BinaryOp::Gt, x, hi)?;
        let y = self.select(is_above, from_hi, x)?;
        self.select(is_below, from_lo, y)
    }
}

/// Cubic convolution weights (Keys, a = -0.75) of the taps at -1, 0, 1, 2 from
/// `floor(x)`, for `t = x - floor(x)`.
fn cubic_weights(f: &mut F, t: ValueId) -> Res<[ValueId; 4]> {
    const A: f64 = -0.75;
    // Near taps (|d| <= 1): (A + 2)|d|³ - (A + 3)|d|² + 1; far (1 < |d| < 2):
    // A|d|³ - 5A|d|² + 8A|d| - 4A.
    let poly = |f: &mut F, d: ValueId, near: bool| -> Res<ValueId> {
        let k: [f64; 4] = if near { [A + 2.0, -(A + 3.0), 0.0, 1.0] } else { [A, -5.0 * A, 8.0 * A, -4.0 * A] };
        let mut acc = f.c(k[0]);
        for &c in &k[1..] {
            let m = f.op(BinaryOp::Mul, acc, d)?;
            acc = f.opc(BinaryOp::Add, m, c)?;
        }
        Ok(acc)
    };
    let one = f.c(1.0);
    let two = f.c(2.0);
    let t1 = f.opc(BinaryOp::Add, t, 1.0)?;
    let u = f.op(BinaryOp::Sub, one, t)?;
    let u2 = f.op(BinaryOp::Sub, two, t)?;
    Ok([poly(f, t1, false)?, poly(f, t, true)?, poly(f, u, true)?, poly(f, u2, false)?])
}

/// `GridSample` (opsets 16 and 20): `X` `[N, C, d...]` read at `grid` `[N, o..., D]`
/// (normalized coordinates in [-1, 1], the last spatial dimension's first), giving
/// `[N, C, o...]`. Modes `nearest` (halves to even), `linear`/`bilinear` and
/// `cubic`/`bicubic`; padding `zeros`, `border` and `reflection`; `align_corners`.
/// Each interpolation tap is one gather of channel rows, weighted.
pub fn grid_sample(cx: &mut Cx, node: &Node) -> Out {
    let (x, grid) = (node.input(0)?, node.input(1)?);
    let (xd, gd) = (dims(cx, x, "GridSample")?, dims(cx, grid, "GridSample")?);
    let d = xd.len().saturating_sub(2);
    if d == 0 || gd.len() != d + 2 || gd[0] != xd[0] || gd[d + 1] != d as u64 {
        return invalid(format!("GridSample takes X [N, C, d...] and a grid [N, o..., {d}], got {} and {}", cx.b.shape(x), cx.b.shape(grid)));
    }
    let taps_of = match node.string_or("mode", if node.opset >= 20 { "linear" } else { "bilinear" })?.as_str() {
        "nearest" => 1,
        "linear" | "bilinear" => 2,
        "cubic" | "bicubic" => 4,
        m => return invalid(format!("GridSample's mode is nearest, linear or cubic, got {m:?}")),
    };
    let padding = match node.string_or("padding_mode", "zeros")?.as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        p => return invalid(format!("GridSample's padding_mode is zeros, border or reflection, got {p:?}")),
    };
    let align = node.int("align_corners", 0)? != 0;
    let (n, c) = (xd[0], xd[1]);
    let space = &xd[2..];
    let out: Vec<u64> = gd[..d + 1].to_vec();
    let dtype = cx.b.dtype(grid);
    let mut f = F { cx, dtype };
    // Per spatial axis: its taps (index as i64, weight).
    let mut axes: Vec<Vec<(ValueId, ValueId)>> = Vec::new();
    for (i, &len) in space.iter().enumerate() {
        let at = super::shape::take(f.cx, grid, d + 1, (d - 1 - i) as u64, 1)?;
        let g = f.cx.b.reshape(at, Shape::known(&out))?;
        let len_f = len as f64;
        // Unnormalized: (g + 1)/2 (len - 1), or ((g + 1) len - 1)/2.
        let g1 = f.opc(BinaryOp::Add, g, 1.0)?;
        let mut pos = if align { f.opc(BinaryOp::Mul, g1, (len_f - 1.0) / 2.0)? } else {
            let s = f.opc(BinaryOp::Mul, g1, len_f)?;
            let s = f.opc(BinaryOp::Sub, s, 1.0)?;
            f.opc(BinaryOp::Mul, s, 0.5)?
        };
        if taps_of == 1 {
            pos = round_half_even(&mut f, pos)?;
        }
        let (lo, hi) = if align { (0.0, len_f - 1.0) } else { (-0.5, len_f - 0.5) };
        pos = match padding {
            Padding::Zeros => pos,
            // (Only a coordinate outside [lo, hi] moves: one in [-0.5, 0) stays.)
            Padding::Border => {
                let clamped = f.clamp(pos, 0.0, len_f - 1.0)?;
                let below = f.opc(BinaryOp::Lt, pos, lo)?;
                let above = f.opc(BinaryOp::Gt, pos, hi)?;
                let outside = f.op(BinaryOp::Or, below, above)?;
                f.select(outside, clamped, pos)?
            }
            Padding::Reflection => f.reflect(pos, lo, hi)?,
        };
        axes.push(axis_taps(&mut f, pos, len_f, taps_of, padding, (lo, hi))?);
    }
    // X as rows of channels [N, d..., C]; each combination of taps is one gather.
    let cx = f.cx;
    let mut perm = vec![0];
    perm.extend(2..d + 2);
    perm.push(1);
    let rows = cx.b.transpose(x, perm)?;
    let mut rd = vec![n];
    rd.extend(space);
    rd.push(c);
    let batch = iota(cx, &out, 0)?;
    let sum = gather_taps(cx, rows, &rd, batch, &axes, &out)?;
    // [N, o..., C] back to [N, C, o...].
    let mut back = vec![0, d + 1];
    back.extend(1..d + 1);
    Ok(vec![cx.b.transpose(sum, back)?])
}

/// One spatial axis's interpolation taps for coordinates `pos` (already moved into
/// range by the padding mode) over an axis of `len`: 1 (nearest: the coordinate
/// truncated), 2 (linear) or 4 (cubic) `(index as i64, weight)` pairs; each index is
/// read as `padding` says (`lo`, `hi`: the reflection borders), and under zeros
/// padding an index outside the axis reads index 0 with weight 0.
fn axis_taps(f: &mut F, pos: ValueId, len_f: f64, taps_of: usize, padding: Padding, (lo, hi): (f64, f64)) -> Res<Vec<(ValueId, ValueId)>> {
    let (base, weights): (ValueId, Vec<ValueId>) = match taps_of {
        // int() of the coordinate: truncation toward zero.
        1 => {
            let a = f.cx.b.unary(UnaryOp::Abs, pos)?;
            let fl = f.floor(a)?;
            let s = f.cx.b.unary(UnaryOp::Sign, pos)?;
            (f.op(BinaryOp::Mul, s, fl)?, vec![f.c(1.0)])
        }
        2 => {
            let fl = f.floor(pos)?;
            let t = f.op(BinaryOp::Sub, pos, fl)?;
            let one = f.c(1.0);
            (fl, vec![f.op(BinaryOp::Sub, one, t)?, t])
        }
        _ => {
            let fl = f.floor(pos)?;
            let t = f.op(BinaryOp::Sub, pos, fl)?;
            let first = f.opc(BinaryOp::Sub, fl, 1.0)?;
            (first, cubic_weights(f, t)?.to_vec())
        }
    };
    let mut taps = Vec::new();
    for (k, w) in weights.into_iter().enumerate() {
        let idx = f.opc(BinaryOp::Add, base, k as f64)?;
        // The index read: in range, or the border's, or reflected; zeros padding
        // reads index 0 with weight 0.
        let (idx, w) = match padding {
            Padding::Border => (f.clamp(idx, 0.0, len_f - 1.0)?, w),
            Padding::Reflection => {
                let r = f.reflect(idx, lo, hi)?;
                let a = f.cx.b.unary(UnaryOp::Abs, r)?;
                let fl = f.floor(a)?;
                let s = f.cx.b.unary(UnaryOp::Sign, r)?;
                let t = f.op(BinaryOp::Mul, s, fl)?;
                (f.clamp(t, 0.0, len_f - 1.0)?, w)
            }
            Padding::Zeros => {
                let ge = f.opc(BinaryOp::Ge, idx, 0.0)?;
                let lt = f.opc(BinaryOp::Lt, idx, len_f)?;
                let inside = f.op(BinaryOp::And, ge, lt)?;
                let zero = f.c(0.0);
                let w = f.select(inside, w, zero)?;
                (f.select(inside, idx, zero)?, w)
            }
        };
        taps.push((f.cx.b.cast(idx, Dtype::I64)?, w));
    }
    Ok(taps)
}

/// The sum over every combination of one tap per axis (`axes`, from [`axis_taps`]) of
/// the rows of `rows` (`rd`: `[N, d..., C]`) at the taps' indices, weighted by the
/// product of their weights: `[out..., C]`, `batch` indexing the first axis.
fn gather_taps(cx: &mut Cx, rows: ValueId, rd: &[u64], batch: ValueId, axes: &[Vec<(ValueId, ValueId)>], out: &[u64]) -> Res<ValueId> {
    let mut sum: Option<ValueId> = None;
    let total: usize = axes.iter().map(Vec::len).product();
    for combo in 0..total {
        let (mut coords, mut weight, mut rest) = (vec![batch], None, combo);
        for taps in axes {
            let (idx, w) = taps[rest % taps.len()];
            rest /= taps.len();
            coords.push(idx);
            weight = Some(match weight {
                Some(acc) => cx.b.binary(BinaryOp::Mul, acc, w)?,
                None => w,
            });
        }
        let read = gather_rows(cx, rows, &known(rd), &coords, None, &known(out))?;
        let mut wd = out.to_vec();
        wd.push(1);
        let w = cx.b.broadcast_to(weight.expect("at least one spatial axis"), Shape::known(out))?;
        let w = cx.b.reshape(w, Shape::known(&wd))?;
        let w = super::nn::convert(cx, w, cx.b.dtype(rows))?;
        let term = cx.b.binary(BinaryOp::Mul, read, w)?;
        sum = Some(match sum {
            Some(acc) => cx.b.binary(BinaryOp::Add, acc, term)?,
            None => term,
        });
    }
    Ok(sum.expect("at least one tap"))
}

/// `x` rounded to the nearest integer, halves to even (NumPy's `rint`).
fn round_half_even(f: &mut F, x: ValueId) -> Res<ValueId> {
    let h = f.opc(BinaryOp::Add, x, 0.5)?;
    let r = f.floor(h)?;
    let diff = f.op(BinaryOp::Sub, r, x)?;
    let tie = f.opc(BinaryOp::Eq, diff, 0.5)?;
    let half = f.opc(BinaryOp::Mul, r, 0.5)?;
    let half = f.floor(half)?;
    let even = f.opc(BinaryOp::Mul, half, 2.0)?;
    let odd = f.op(BinaryOp::Ne, even, r)?;
    let down = f.op(BinaryOp::And, tie, odd)?;
    let r1 = f.opc(BinaryOp::Sub, r, 1.0)?;
    f.select(down, r1, r)
}

/// `AffineGrid` (opset 20): the normalized coordinates `[N, d..., D]` (the last
/// spatial dimension's first) that `theta` `[N, D, D + 1]` maps the output grid of
/// `size` `[N, C, d...]` to: each point's base coordinates `(x_D, .., x_1, 1)` times
/// `thetaᵀ`. The base runs over [-1, 1] at the pixels' corners (`align_corners`) or
/// centres.
pub fn affine_grid(cx: &mut Cx, node: &Node) -> Out {
    let theta = node.input(0)?;
    let Some(size) = input_ints(cx, node, 1)? else { return invalid("AffineGrid needs its size") };
    let td = dims(cx, theta, "AffineGrid")?;
    let d = size.len().saturating_sub(2);
    if !(2..=3).contains(&d) || td != [size[0] as u64, d as u64, d as u64 + 1] || size.iter().any(|&s| s < 1 || s > 1 << 24) {
        return invalid(format!("AffineGrid takes theta [N, D, D + 1] and a size [N, C, d...] of D = 2 or 3 dimensions, got {} and {size:?}", cx.b.shape(theta)));
    }
    let align = node.int("align_corners", 0)? != 0;
    let space: Vec<u64> = size[2..].iter().map(|&s| s as u64).collect();
    let points: u64 = space.iter().product();
    let coord = |i: u64, len: u64| -> f64 {
        match (align, len) {
            (_, 1) if align => -1.0,
            (true, _) => -1.0 + 2.0 * i as f64 / (len - 1) as f64,
            (false, _) => (2.0 * i as f64 + 1.0) / len as f64 - 1.0,
        }
    };
    // One row (x_D, .., x_1, 1) per point, in row-major order of the spatial dimensions.
    let mut base = Vec::with_capacity((points * (d as u64 + 1)) as usize);
    for p in 0..points {
        let mut rest = p;
        let mut at = vec![0; d];
        for (k, &len) in space.iter().enumerate().rev() {
            at[k] = rest % len;
            rest /= len;
        }
        base.extend((0..d).rev().map(|k| coord(at[k], space[k])));
        base.push(1.0);
    }
    let dtype = cx.b.dtype(theta);
    let base = cx.b.constant(Tensor::new(dtype, vec![points, d as u64 + 1], base));
    let tt = cx.b.transpose_last(theta)?;
    let g = cx.b.matmul(base, tt)?;
    let mut gd = vec![size[0] as u64];
    gd.extend(&space);
    gd.push(d as u64);
    Ok(vec![cx.b.reshape(g, Shape::known(&gd))?])
}

/// `RoiAlign` (opsets 10 and 16) with a fixed `sampling_ratio`: for each region of
/// `rois` `[R, 4]` (x1, y1, x2, y2, times `spatial_scale`, less half a pixel under
/// `half_pixel`) in the image `batch_indices[r]` of `X` `[N, C, H, W]`, each of the
/// `output_height x output_width` bins averages (`avg`) or takes the largest (`max`) of
/// `sampling_ratio²` bilinear samples, as ONNX's reference computes them: a sample
/// past the border by more than a pixel is 0, one nearer is clamped; `max` takes the
/// largest weighted corner of each sample. An adaptive grid (`sampling_ratio` 0)
/// depends on the regions' sizes and is refused.
pub fn roi_align(cx: &mut Cx, node: &Node) -> Out {
    let (x, rois, batch) = (node.input(0)?, node.input(1)?, node.input(2)?);
    let xd = dims(cx, x, "RoiAlign")?;
    let rd = dims(cx, rois, "RoiAlign")?;
    let (&[n, c, h, w], &[r, 4]) = (&xd[..], &rd[..]) else {
        return invalid(format!("RoiAlign takes X [N, C, H, W] and rois [R, 4], got {} and {}", cx.b.shape(x), cx.b.shape(rois)));
    };
    let grid = node.int("sampling_ratio", 0)?;
    if grid <= 0 {
        return unsupported("RoiAlign with an adaptive sampling_ratio (0): its sample count depends on the regions' sizes");
    }
    let (oh, ow) = (node.int("output_height", 1)?, node.int("output_width", 1)?);
    if oh < 1 || ow < 1 || grid > 64 {
        return invalid(format!("RoiAlign's output {oh} x {ow} with sampling_ratio {grid}"));
    }
    let (grid, oh, ow) = (grid as u64, oh as u64, ow as u64);
    let max = match node.string_or("mode", "avg")?.as_str() {
        "avg" => false,
        "max" => true,
        m => return invalid(format!("RoiAlign's mode is avg or max, got {m:?}")),
    };
    let half_pixel = match node.string_or("coordinate_transformation_mode", if node.opset >= 16 { "half_pixel" } else { "output_half_pixel" })?.as_str() {
        "half_pixel" => true,
        "output_half_pixel" => false,
        m => return invalid(format!("RoiAlign's coordinate_transformation_mode is half_pixel or output_half_pixel, got {m:?}")),
    };
    let scale = node.float("spatial_scale", 1.0)?;
    let dtype = cx.b.dtype(rois);
    let mut f = F { cx, dtype };
    // Per axis (y, then x): the samples' corners [R, P, 1] or [R, 1, P] (P = bins x grid).
    let mut axes = Vec::new();
    for (k, (len, bins)) in [(h, oh), (w, ow)].into_iter().enumerate() {
        let col = |f: &mut F, i: u64| -> Res<ValueId> {
            let v = super::shape::take(f.cx, rois, 1, i, 1)?;
            let v = f.opc(BinaryOp::Mul, v, scale)?;
            f.opc(BinaryOp::Sub, v, if half_pixel { 0.5 } else { 0.0 })
        };
        let (start, end) = (col(&mut f, 1 - k as u64)?, col(&mut f, 3 - k as u64)?);
        let mut size = f.op(BinaryOp::Sub, end, start)?;
        if !half_pixel {
            size = f.opc(BinaryOp::Max, size, 1.0)?;
        }
        let bin = f.opc(BinaryOp::Div, size, bins as f64)?;
        let p = bins * grid;
        let offsets: Vec<f64> = (0..p).map(|i| (i / grid) as f64 + ((i % grid) as f64 + 0.5) / grid as f64).collect();
        let offsets = f.cx.b.constant(Tensor::new(dtype, vec![1, p], offsets));
        let at = f.op(BinaryOp::Mul, bin, offsets)?;
        let at = f.op(BinaryOp::Add, start, at)?;
        let len_f = len as f64;
        let lo_ok = f.opc(BinaryOp::Ge, at, -1.0)?;
        let hi_ok = f.opc(BinaryOp::Le, at, len_f)?;
        let valid = f.op(BinaryOp::And, lo_ok, hi_ok)?;
        let at = f.clamp(at, 0.0, len_f - 1.0)?;
        let low = f.floor(at)?;
        let high = f.opc(BinaryOp::Add, low, 1.0)?;
        let high = f.opc(BinaryOp::Min, high, len_f - 1.0)?;
        let l = f.op(BinaryOp::Sub, at, low)?;
        let one = f.c(1.0);
        let hw = f.op(BinaryOp::Sub, one, l)?;
        let shape: &[u64] = if k == 0 { &[r, p, 1] } else { &[r, 1, p] };
        let mut shaped = Vec::new();
        for v in [low, high, hw, l, valid] {
            shaped.push(f.cx.b.reshape(v, Shape::known(shape))?);
        }
        axes.push(shaped);
    }
    let cx = f.cx;
    let (ph, pw) = (oh * grid, ow * grid);
    let valid = cx.b.binary(BinaryOp::And, axes[0][4], axes[1][4])?;
    let rows = cx.b.transpose(x, vec![0, 2, 3, 1])?;
    let b = super::nn::convert(cx, batch, Dtype::I64)?;
    let b = cx.b.reshape(b, Shape::known(&[r, 1, 1]))?;
    let out = [r, ph, pw];
    let mut corners = Vec::new();
    for (yi, xi) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let (yc, xc) = (cx.b.cast(axes[0][yi], Dtype::I64)?, cx.b.cast(axes[1][xi], Dtype::I64)?);
        let read = gather_rows(cx, rows, &known(&[n, h, w, c]), &[b, yc, xc], None, &known(&out))?;
        let wt = cx.b.binary(BinaryOp::Mul, axes[0][2 + yi], axes[1][2 + xi])?;
        let zero = cx.b.scalar(dtype, 0.0);
        let wt = cx.b.select(valid, wt, zero)?;
        let wt = cx.b.reshape(wt, Shape::known(&[r, ph, pw, 1]))?;
        let wt = super::nn::convert(cx, wt, cx.b.dtype(x))?;
        corners.push(cx.b.binary(BinaryOp::Mul, read, wt)?);
    }
    let combine = if max { BinaryOp::Max } else { BinaryOp::Add };
    let mut s = corners[0];
    for &v in &corners[1..] {
        s = cx.b.binary(combine, s, v)?;
    }
    let s = cx.b.reshape(s, Shape::known(&[r, oh, grid, ow, grid, c]))?;
    let y = if max {
        cx.b.reduce(ReduceKind::Max, s, vec![2, 4], false)?
    } else {
        let sum = cx.b.reduce(ReduceKind::Sum, s, vec![2, 4], false)?;
        let count = cx.b.scalar(cx.b.dtype(x), (grid * grid) as f64);
        cx.b.binary(BinaryOp::Div, sum, count)?
    };
    Ok(vec![cx.b.transpose(y, vec![0, 3, 1, 2])?])
}

/// `x[:, i1, i2, .., :]` (one index along each axis after the first, for `at`'s
/// length), shaped `shape`.
fn pick(cx: &mut Cx, x: ValueId, at: &[u64], shape: &[u64]) -> Res<ValueId> {
    let mut ranges = vec![SliceRange::FULL; cx.b.rank(x)];
    for (i, &k) in at.iter().enumerate() {
        ranges[i + 1] = SliceRange { start: Some(k as i64), stop: Some(k as i64 + 1), step: 1 };
    }
    let v = cx.b.op(Op::Slice { ranges }, vec![x])?;
    Ok(cx.b.reshape(v, Shape::known(shape))?)
}

/// `DeformConv` (opset 19), 2-d: a convolution whose every tap reads `X` at its place
/// moved by `offset` `[N, offset_group·kh·kw·2, oh, ow]` (dy, dx per tap), sampled
/// bilinearly with zeros outside, times `mask` (default 1); the samples of all taps
/// `[N, oh·ow, C·kh·kw]` then multiply the weight per group, as im2col does.
pub fn deform_conv(cx: &mut Cx, node: &Node) -> Out {
    let (x, wt, offset, bias, mask) = (node.input(0)?, node.input(1)?, node.input(2)?, node.opt(3), node.opt(4));
    let (xd, wd, od) = (dims(cx, x, "DeformConv")?, dims(cx, wt, "DeformConv")?, dims(cx, offset, "DeformConv")?);
    let (&[n, c, h, w], &[oc, cg, kh, kw], &[_, _, oh, ow]) = (&xd[..], &wd[..], &od[..]) else {
        return unsupported(format!("DeformConv of {} by {} (2-d only)", cx.b.shape(x), cx.b.shape(wt)));
    };
    let (group, og) = (node.int("group", 1)?.max(1) as u64, node.int("offset_group", 1)?.max(1) as u64);
    let two = |name: &str, default: i64| -> Res<Vec<i64>> { Ok(node.ints(name)?.unwrap_or_else(|| vec![default; 2])) };
    let (dil, stride) = (two("dilations", 1)?, two("strides", 1)?);
    let pads = node.ints("pads")?.unwrap_or_else(|| vec![0; 4]);
    if c != cg * group || oc % group != 0 || c % og != 0 || od[1] != og * kh * kw * 2 || od[0] != n || dil.len() != 2 || stride.len() != 2 || pads.len() != 4 {
        return invalid(format!("DeformConv of {} by {} with offset {} (group {group}, offset_group {og})", cx.b.shape(x), cx.b.shape(wt), cx.b.shape(offset)));
    }
    let dtype = cx.b.dtype(offset);
    let off = cx.b.reshape(offset, Shape::known(&[n, og, kh, kw, 2, oh, ow]))?;
    let mask = match mask {
        Some(m) => Some(cx.b.reshape(m, Shape::known(&[n, og, kh, kw, oh, ow]))?),
        None => None,
    };
    let rows = cx.b.transpose(x, vec![0, 2, 3, 1])?;
    let out = [n, oh, ow];
    let batch = iota(cx, &out, 0)?;
    let per = c / og;
    // Each tap's samples [N, oh, ow, C], in the order (channel, kh, kw) of the weight.
    let mut taps = Vec::new();
    for a in 0..kh {
        for b in 0..kw {
            let mut groups = Vec::new();
            for g in 0..og {
                let rows_g = super::shape::take(cx, rows, 3, g * per, per)?;
                let mut f = F { cx, dtype };
                let mut axes = Vec::new();
                for (k, (len, base_step, start, tap)) in [(h, stride[0], -pads[0], a as i64 * dil[0]), (w, stride[1], -pads[1], b as i64 * dil[1])].into_iter().enumerate() {
                    let d = pick(f.cx, off, &[g, a, b, k as u64], &out)?;
                    let pos = f.cx.b.op(Op::Iota { shape: Shape::known(&out), axis: k + 1, dtype }, vec![])?;
                    let pos = f.opc(BinaryOp::Mul, pos, base_step as f64)?;
                    let pos = f.opc(BinaryOp::Add, pos, (start + tap) as f64)?;
                    let pos = f.op(BinaryOp::Add, pos, d)?;
                    axes.push(axis_taps(&mut f, pos, len as f64, 2, Padding::Zeros, (0.0, 0.0))?);
                }
                let cx = f.cx;
                let mut s = gather_taps(cx, rows_g, &[n, h, w, per], batch, &axes, &out)?;
                if let Some(m) = mask {
                    let mg = pick(cx, m, &[g, a, b], &[n, oh, ow, 1])?;
                    let mg = super::nn::convert(cx, mg, cx.b.dtype(x))?;
                    s = cx.b.binary(BinaryOp::Mul, s, mg)?;
                }
                groups.push(s);
            }
            let s = if groups.len() == 1 { groups[0] } else { cx.b.op(Op::Concat { axis: 3 }, groups)? };
            taps.push(cx.b.reshape(s, Shape::known(&[n, oh, ow, c, 1]))?);
        }
    }
    let cols = if taps.len() == 1 { taps[0] } else { cx.b.op(Op::Concat { axis: 4 }, taps)? };
    // Per group: its channels' columns [N, oh·ow, C/group·kh·kw] times its weights.
    let cols = cx.b.reshape(cols, Shape::known(&[n, oh * ow, group, cg * kh * kw]))?;
    let wm = cx.b.reshape(wt, Shape::known(&[group, oc / group, cg * kh * kw]))?;
    let mut outs = Vec::new();
    for g in 0..group {
        let cg_cols = super::shape::take(cx, cols, 2, g, 1)?;
        let cg_cols = cx.b.reshape(cg_cols, Shape::known(&[n, oh * ow, cg * kh * kw]))?;
        let wg = super::shape::take(cx, wm, 0, g, 1)?;
        let wg = cx.b.reshape(wg, Shape::known(&[oc / group, cg * kh * kw]))?;
        outs.push(cx.b.linear(cg_cols, wg, None)?);
    }
    let y = if outs.len() == 1 { outs[0] } else { cx.b.op(Op::Concat { axis: 2 }, outs)? };
    let y = cx.b.transpose(y, vec![0, 2, 1])?;
    let mut y = cx.b.reshape(y, Shape::known(&[n, oc, oh, ow]))?;
    if let Some(bias) = bias {
        let bias = super::nn::conv_bias(cx, bias, 2)?;
        y = cx.b.binary(BinaryOp::Add, y, bias)?;
    }
    Ok(vec![y])
}

#[cfg(test)]
mod tests {
    use super::super::index::tests::{check, one, t, Arg, A};
    use crate::ir::Dtype;

    /// With zero offsets and no mask a deformable convolution is the convolution:
    /// with groups, offset groups, strides, dilations and padding.
    #[test]
    fn deform_conv_with_zero_offsets_is_conv() {
        let (n, c, h, w, oc, group) = (2u64, 4u64, 6u64, 5u64, 6u64, 2u64);
        let x: Vec<f64> = (0..n * c * h * w).map(|i| ((i * 37) % 11) as f64 / 11.0 - 0.4).collect();
        let wt: Vec<f64> = (0..oc * (c / group) * 2 * 3).map(|i| ((i * 13) % 7) as f64 / 7.0 - 0.5).collect();
        let attrs = || vec![("kernel_shape", A::Is(&[2, 3])), ("pads", A::Is(&[1, 0, 0, 1])), ("strides", A::Is(&[2, 1])), ("dilations", A::Is(&[1, 2])), ("group", A::I(group as i64))];
        let args = || vec![Arg::Fed(t(Dtype::F32, &[n, c, h, w], &x)), Arg::Known(t(Dtype::F32, &[oc, c / group, 2, 3], &wt))];
        let conv = one("Conv", 19, &attrs(), args());
        let (oh, ow) = (conv.shape[2], conv.shape[3]);
        let mut da = attrs();
        da.push(("offset_group", A::I(2)));
        let mut dargs = args();
        dargs.push(Arg::Fed(t(Dtype::F32, &[n, 2 * 2 * 3 * 2, oh, ow], &vec![0.0; (n * 24 * oh * ow) as usize])));
        let deform = one("DeformConv", 19, &da, dargs);
        check(&deform, &conv.shape, &conv.data);
    }
}
