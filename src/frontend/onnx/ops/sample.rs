//! Sampling at computed coordinates: `GridSample` (gathers at a grid's points,
//! interpolated) and `AffineGrid` (the grid of an affine map), in any number of
//! spatial dimensions.

use super::index::{dims, gather_rows, iota};
use super::{input_ints, Cx};
use crate::frontend::onnx::node::{invalid, Fail, Node, Out};
use crate::ir::{BinaryOp, Dtype, Shape, UnaryOp, ValueId};
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
                (first, cubic_weights(&mut f, t)?.to_vec())
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
        axes.push(taps);
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
    let mut sum: Option<ValueId> = None;
    let total: usize = axes.iter().map(Vec::len).product();
    for combo in 0..total {
        let (mut coords, mut weight, mut rest) = (vec![batch], None, combo);
        for taps in &axes {
            let (idx, w) = taps[rest % taps.len()];
            rest /= taps.len();
            coords.push(idx);
            weight = Some(match weight {
                Some(acc) => cx.b.binary(BinaryOp::Mul, acc, w)?,
                None => w,
            });
        }
        let read = gather_rows(cx, rows, &rd, &coords, None, &out)?;
        let mut wd = out.clone();
        wd.push(1);
        let w = cx.b.broadcast_to(weight.expect("at least one spatial axis"), Shape::known(&out))?;
        let w = cx.b.reshape(w, Shape::known(&wd))?;
        let w = super::nn::convert(cx, w, cx.b.dtype(x))?;
        let term = cx.b.binary(BinaryOp::Mul, read, w)?;
        sum = Some(match sum {
            Some(acc) => cx.b.binary(BinaryOp::Add, acc, term)?,
            None => term,
        });
    }
    // [N, o..., C] back to [N, C, o...].
    let mut back = vec![0, d + 1];
    back.extend(1..d + 1);
    Ok(vec![cx.b.transpose(sum.expect("at least one tap"), back)?])
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
