//! Reductions: sum/mean/max/min/prod over a set of axes, argmax/argmin, variance and
//! softmax. All accumulate in f64, in row-major order of the input, but sums and
//! products of integers, which accumulate their two's-complement bits and wrap as C's
//! do.
//!
//! The output of a reduction is laid out the same with or without `keepdim` (the kept
//! size-1 dimensions do not move any element), so the kernels ignore `keepdim`.

use super::elementwise::{from_bits, max_nan, min_nan, to_bits};
use super::index::{numel, split_at_axis, Offsets};
use crate::error::Result;
use crate::ir::{ArgKind, ReduceKind, Shape};
use crate::tensor::{strides, Tensor};
use crate::user_error;

/// How the elements of `shape` fall into the outputs of a reduction over `axes`:
/// a walk over the input yielding each element's output slot, the number of outputs,
/// and the number of elements reduced into each.
fn slots(shape: &[u64], axes: &[usize]) -> (Offsets, usize, usize) {
    let kept: Vec<u64> = shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
    let slot_strides: Vec<isize> = strides(&kept)
        .into_iter()
        .enumerate()
        .map(|(i, s)| if axes.contains(&i) { 0 } else { s as isize })
        .collect();
    let count = axes.iter().map(|&a| shape[a] as usize).product();
    (Offsets::new(shape, 0, &slot_strides), numel(&kept), count)
}

pub fn reduce(kind: ReduceKind, x: &Tensor, axes: &[usize]) -> Result<Vec<f64>> {
    let (walk, outputs, count) = slots(&x.shape, axes);
    let (init, combine): (f64, fn(f64, f64) -> f64) = match kind {
        ReduceKind::Sum | ReduceKind::Mean => (0.0, |a, v| a + v),
        ReduceKind::Prod => (1.0, |a, v| a * v),
        ReduceKind::Max => (f64::NEG_INFINITY, max_nan),
        ReduceKind::Min => (f64::INFINITY, min_nan),
    };
    if count == 0 && outputs > 0 && matches!(kind, ReduceKind::Max | ReduceKind::Min) {
        // NumPy: "zero-size array to reduction operation maximum which has no identity".
        return Err(user_error!(
            "{} over an empty dimension of {} has no identity",
            kind.name(),
            Shape::known(&x.shape)
        ));
    }
    let d = x.dtype;
    if d.is_int() && matches!(kind, ReduceKind::Sum | ReduceKind::Prod) {
        let (init, combine): (u64, fn(u64, u64) -> u64) = if kind == ReduceKind::Sum { (0, u64::wrapping_add) } else { (1, u64::wrapping_mul) };
        let mut acc = vec![init; outputs];
        for (&v, slot) in x.data.iter().zip(walk) {
            acc[slot] = combine(acc[slot], to_bits(d, v));
        }
        return Ok(acc.into_iter().map(|v| from_bits(d, v)).collect());
    }
    let mut acc = vec![init; outputs];
    for (&v, slot) in x.data.iter().zip(walk) {
        acc[slot] = combine(acc[slot], v);
    }
    if kind == ReduceKind::Mean {
        // An empty mean is 0/0 = NaN, as in NumPy.
        for a in &mut acc {
            *a /= count as f64;
        }
    }
    Ok(acc)
}

/// Index of the first maximum (minimum) along `axis`, or in the flattened tensor for
/// `None`. NaN counts as the extreme value, and the first NaN wins, as in NumPy.
pub fn arg_reduce(kind: ArgKind, x: &Tensor, axis: Option<usize>) -> Result<Vec<f64>> {
    let (outer, len, inner) = match axis {
        Some(a) => split_at_axis(&x.shape, a),
        None => (1, x.numel(), 1),
    };
    if len == 0 && outer * inner > 0 {
        return Err(user_error!("{} of an empty sequence (shape {})", kind.name(), Shape::known(&x.shape)));
    }
    let better = |v: f64, best: f64| -> bool {
        let strictly = match kind {
            ArgKind::ArgMax => v > best,
            ArgKind::ArgMin => v < best,
        };
        strictly || (v.is_nan() && !best.is_nan())
    };
    let mut result = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        // Scan the axis for all `inner` positions at once, so reads stay contiguous.
        let row = |k: usize| &x.data[(o * len + k) * inner..(o * len + k + 1) * inner];
        let mut best: Vec<f64> = if len > 0 { row(0).to_vec() } else { Vec::new() };
        let mut index = vec![0usize; best.len()];
        for k in 1..len {
            for (i, &v) in row(k).iter().enumerate() {
                if better(v, best[i]) {
                    best[i] = v;
                    index[i] = k;
                }
            }
        }
        result.extend(index.into_iter().map(|k| k as f64));
    }
    Ok(result)
}

/// `sum((x - mean)^2) / (N - correction)` over `axes`, two passes in f64. A divisor of
/// zero or less is clamped to 0 (giving inf or NaN), as NumPy does for `ddof >= N`.
pub fn variance(x: &Tensor, axes: &[usize], correction: f64) -> Vec<f64> {
    let (walk, outputs, count) = slots(&x.shape, axes);
    let slot_of: Vec<usize> = walk.collect();
    let mut mean = vec![0.0; outputs];
    for (&v, &s) in x.data.iter().zip(&slot_of) {
        mean[s] += v;
    }
    for m in &mut mean {
        *m /= count as f64;
    }
    let mut squares = vec![0.0; outputs];
    for (&v, &s) in x.data.iter().zip(&slot_of) {
        squares[s] += (v - mean[s]) * (v - mean[s]);
    }
    let divisor = (count as f64 - correction).max(0.0);
    squares.into_iter().map(|s| s / divisor).collect()
}

/// `exp(x - max) / sum(exp(x - max))` along `axis`.
pub fn softmax(x: &Tensor, axis: usize) -> Vec<f64> {
    let (outer, len, inner) = split_at_axis(&x.shape, axis);
    let mut result = vec![0.0; x.numel()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * len + k) * inner + i;
            let max = (0..len).map(|k| x.data[at(k)]).fold(f64::NEG_INFINITY, max_nan);
            let mut sum = 0.0;
            for k in 0..len {
                let e = (x.data[at(k)] - max).exp();
                result[at(k)] = e;
                sum += e;
            }
            for k in 0..len {
                result[at(k)] /= sum;
            }
        }
    }
    result
}
