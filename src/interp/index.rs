//! Index arithmetic shared by the kernels: row-major walks over a shape that track a
//! flat offset into some (possibly strided, broadcast or reversed) view of a buffer.
//!
//! Every layout op (transpose, slice, broadcast, pad) and every broadcasting elementwise
//! op is one [`Offsets`] walk with the right strides, so the index arithmetic lives in
//! one place instead of being re-derived per op.

use crate::tensor::strides;

/// Number of elements of a shape whose data already exists (so the product fits).
pub fn numel(shape: &[u64]) -> usize {
    shape.iter().map(|&d| d as usize).product()
}

/// Row-major strides in elements, signed so that views may walk backwards.
pub fn signed_strides(shape: &[u64]) -> Vec<isize> {
    strides(shape).into_iter().map(|s| s as isize).collect()
}

/// Strides that read a tensor of `shape` as if broadcast to `out` (NumPy rules, aligned
/// at the trailing dimension): size-1 and missing dimensions get stride 0.
pub fn broadcast_strides(shape: &[u64], out: &[u64]) -> Vec<isize> {
    let own = signed_strides(shape);
    let lead = out.len() - shape.len();
    (0..out.len())
        .map(|i| if i < lead || shape[i - lead] == 1 { 0 } else { own[i - lead] })
        .collect()
}

/// Splits `shape` around `axis` into (elements before, length of the axis, elements after),
/// the loop bounds of every "along one axis" kernel.
pub fn split_at_axis(shape: &[u64], axis: usize) -> (usize, usize, usize) {
    (numel(&shape[..axis]), shape[axis] as usize, numel(&shape[axis + 1..]))
}

/// The multi-index of row-major position `flat` in `shape`.
pub fn unravel(mut flat: usize, shape: &[u64]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        let n = shape[d] as usize;
        idx[d] = flat % n;
        flat /= n;
    }
    idx
}

/// Walks every index of a shape in row-major order and yields, for each, the offset
/// `base + sum(idx[d] * strides[d])`.
///
/// The caller chooses strides that keep every offset inside its buffer; a negative
/// offset would be a bug in the caller, caught in debug builds.
pub struct Offsets {
    shape: Vec<usize>,
    strides: Vec<isize>,
    idx: Vec<usize>,
    current: isize,
    left: usize,
}

impl Offsets {
    pub fn new(shape: &[u64], base: isize, strides: &[isize]) -> Offsets {
        debug_assert_eq!(shape.len(), strides.len());
        Offsets {
            shape: shape.iter().map(|&d| d as usize).collect(),
            strides: strides.to_vec(),
            idx: vec![0; shape.len()],
            current: base,
            left: numel(shape),
        }
    }
}

impl Iterator for Offsets {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        let out = self.current;
        self.left -= 1;
        if self.left > 0 {
            // Odometer step: bump the innermost index, carrying outwards.
            for d in (0..self.shape.len()).rev() {
                self.idx[d] += 1;
                self.current += self.strides[d];
                if self.idx[d] < self.shape[d] {
                    break;
                }
                self.current -= self.strides[d] * self.shape[d] as isize;
                self.idx[d] = 0;
            }
        }
        debug_assert!(out >= 0, "strided walk left its buffer");
        Some(out as usize)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Offsets {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_walk_row_major_views() {
        let plain: Vec<usize> = Offsets::new(&[2, 3], 0, &[3, 1]).collect();
        assert_eq!(plain, vec![0, 1, 2, 3, 4, 5]);
        // The transpose of a [2, 3] tensor.
        let transposed: Vec<usize> = Offsets::new(&[3, 2], 0, &[1, 3]).collect();
        assert_eq!(transposed, vec![0, 3, 1, 4, 2, 5]);
        // A reversed vector of 4 elements.
        let reversed: Vec<usize> = Offsets::new(&[4], 3, &[-1]).collect();
        assert_eq!(reversed, vec![3, 2, 1, 0]);
        assert_eq!(Offsets::new(&[], 7, &[]).collect::<Vec<_>>(), vec![7]);
        assert_eq!(Offsets::new(&[2, 0], 0, &[0, 1]).count(), 0);
    }

    #[test]
    fn broadcast_strides_zero_size_one_and_missing_dims() {
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
        assert_eq!(broadcast_strides(&[], &[2]), vec![0]);
        assert_eq!(split_at_axis(&[2, 3, 4], 1), (2, 3, 4));
        assert_eq!(unravel(5, &[2, 3]), vec![1, 2]);
    }
}
