//! Layout kernels: ops that move elements without computing on them (transpose,
//! broadcast, slice, concat, gather, pad) and `iota`, which makes indices.
//!
//! Transpose, broadcast and slice are reads through a strided view ([`Offsets`]); pad is
//! a write through one; concat and gather copy contiguous runs.

use super::index::{broadcast_strides, numel, signed_strides, split_at_axis, Offsets};
use crate::error::Result;
use crate::internal_error;
use crate::ir::SliceRange;
use crate::tensor::Tensor;
use crate::user_error;

/// Reads `x` through the view (`shape`, `base`, `strides`) in row-major order.
fn view(x: &Tensor, shape: &[u64], base: isize, strides: &[isize]) -> Vec<f64> {
    Offsets::new(shape, base, strides).map(|i| x.data[i]).collect()
}

/// Output dimension `i` is input dimension `perm[i]`.
pub fn transpose(x: &Tensor, perm: &[usize]) -> Vec<f64> {
    let own = signed_strides(&x.shape);
    let shape: Vec<u64> = perm.iter().map(|&p| x.shape[p]).collect();
    let strides: Vec<isize> = perm.iter().map(|&p| own[p]).collect();
    view(x, &shape, 0, &strides)
}

pub fn broadcast_to(x: &Tensor, out: &[u64]) -> Vec<f64> {
    view(x, out, 0, &broadcast_strides(&x.shape, out))
}

/// Python slicing per dimension: the view starts at each range's first index and steps
/// by its step (negative steps walk backwards).
pub fn slice(x: &Tensor, ranges: &[SliceRange]) -> Result<Vec<f64>> {
    let own = signed_strides(&x.shape);
    let mut base = 0isize;
    let mut shape = Vec::with_capacity(ranges.len());
    let mut strides = Vec::with_capacity(ranges.len());
    for (d, r) in ranges.iter().enumerate() {
        // The shape rule resolved the same range, so failing here is a bug.
        let (start, step, count) = r.resolve(x.shape[d]).map_err(|e| internal_error!("slice: {e}"))?;
        if count > 0 {
            base += start as isize * own[d];
        }
        shape.push(count);
        strides.push(step as isize * own[d]);
    }
    Ok(view(x, &shape, base, &strides))
}

/// Concatenation along `axis`: for each position before the axis, each argument
/// contributes one contiguous run (its extent along the axis times everything after).
pub fn concat(args: &[&Tensor], axis: usize) -> Vec<f64> {
    let outer = numel(&args[0].shape[..axis]);
    let runs: Vec<usize> = args.iter().map(|a| numel(&a.shape[axis..])).collect();
    let mut result = Vec::with_capacity(outer * runs.iter().sum::<usize>());
    for o in 0..outer {
        for (a, &run) in args.iter().zip(&runs) {
            result.extend_from_slice(&a.data[o * run..(o + 1) * run]);
        }
    }
    result
}

/// NumPy `take(data, indices, axis)`. Negative indices count from the end; anything
/// outside `-len..len` is the user's error (NumPy raises an IndexError too).
pub fn gather(data: &Tensor, indices: &Tensor, axis: usize) -> Result<Vec<f64>> {
    let (outer, len, inner) = split_at_axis(&data.shape, axis);
    let rows = indices
        .data
        .iter()
        .map(|&i| {
            let bound = len as f64;
            let j = if i < 0.0 { i + bound } else { i };
            if (0.0..bound).contains(&j) {
                Ok(j as usize)
            } else {
                Err(user_error!("gather index {i} is out of range for axis {axis} of size {len}"))
            }
        })
        .collect::<Result<Vec<usize>>>()?;
    let mut result = Vec::with_capacity(outer * rows.len() * inner);
    for o in 0..outer {
        for &j in &rows {
            let start = (o * len + j) * inner;
            result.extend_from_slice(&data.data[start..start + inner]);
        }
    }
    Ok(result)
}

/// Each element is its own index along `axis`.
pub fn iota(shape: &[u64], axis: usize) -> Vec<f64> {
    let (outer, len, inner) = split_at_axis(shape, axis);
    let mut result = Vec::with_capacity(outer * len * inner);
    for _ in 0..outer {
        for k in 0..len {
            result.extend(std::iter::repeat_n(k as f64, inner));
        }
    }
    result
}

/// Constant padding: the output is filled with `value`, then `x` is written through a
/// view of the output that starts after the leading pads.
pub fn pad(x: &Tensor, pads: &[(u64, u64)], value: f64, out: &[u64]) -> Vec<f64> {
    let out_strides = signed_strides(out);
    let base: isize = pads.iter().zip(&out_strides).map(|(&(lo, _), &s)| lo as isize * s).sum();
    let mut result = vec![value; numel(out)];
    for (&v, i) in x.data.iter().zip(Offsets::new(&x.shape, base, &out_strides)) {
        result[i] = v;
    }
    result
}
