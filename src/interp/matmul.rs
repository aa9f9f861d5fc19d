//! NumPy `matmul`: batched matrix products whose leading (batch) dimensions broadcast,
//! with rank-1 operands promoted to a row (left) or column (right) matrix.
//!
//! The product is an i,k,j loop: each left element scales one contiguous row of the
//! right matrix into one contiguous output row, which keeps the inner loop over memory
//! in order (and vectorisable) and still accumulates every sum in f64. A product of
//! integers accumulates their two's-complement bits, wrapping as C's does.

use super::elementwise::{from_bits, to_bits};
use super::index::{broadcast_strides, numel, Offsets};
use crate::ir::Dtype;
use crate::tensor::Tensor;

/// `out` is the result shape (with promoted dimensions already removed), `dtype` the
/// result's element type.
pub fn matmul(l: &Tensor, r: &Tensor, out: &[u64], dtype: Dtype) -> Vec<f64> {
    // Promote: a rank-1 left operand [k] acts as [1, k], a rank-1 right operand as [k, 1].
    let lshape: Vec<u64> = if l.rank() == 1 { vec![1, l.shape[0]] } else { l.shape.clone() };
    let rshape: Vec<u64> = if r.rank() == 1 { vec![r.shape[0], 1] } else { r.shape.clone() };
    let (lr, rr) = (lshape.len(), rshape.len());
    let (m, k, n) = (lshape[lr - 2] as usize, lshape[lr - 1] as usize, rshape[rr - 1] as usize);

    // The batch shape is the broadcast of both operands' leading dimensions, which is the
    // output shape without its matrix dimensions.
    let batch_rank = (lr - 2).max(rr - 2);
    let batch = &out[..batch_rank];
    let scale = |strides: Vec<isize>, size: usize| -> Vec<isize> {
        strides.into_iter().map(|s| s * size as isize).collect()
    };
    let lstrides = scale(broadcast_strides(&lshape[..lr - 2], batch), m * k);
    let rstrides = scale(broadcast_strides(&rshape[..rr - 2], batch), k * n);

    let batches = Offsets::new(batch, 0, &lstrides).zip(Offsets::new(batch, 0, &rstrides));
    if dtype.is_int() {
        let (lb, rb): (Vec<u64>, Vec<u64>) = (l.data.iter().map(|&x| to_bits(dtype, x)).collect(), r.data.iter().map(|&x| to_bits(dtype, x)).collect());
        let mut result = vec![0u64; numel(batch) * m * n];
        for (b, (lbase, rbase)) in batches.enumerate() {
            for i in 0..m {
                let row = &mut result[(b * m + i) * n..(b * m + i + 1) * n];
                for p in 0..k {
                    let a = lb[lbase + i * k + p];
                    for (acc, &w) in row.iter_mut().zip(&rb[rbase + p * n..rbase + (p + 1) * n]) {
                        *acc = acc.wrapping_add(a.wrapping_mul(w));
                    }
                }
            }
        }
        return result.into_iter().map(|v| from_bits(dtype, v)).collect();
    }
    let mut result = vec![0.0; numel(batch) * m * n];
    for (b, (lbase, rbase)) in batches.enumerate() {
        for i in 0..m {
            let row = &mut result[(b * m + i) * n..(b * m + i + 1) * n];
            for p in 0..k {
                let a = l.data[lbase + i * k + p];
                let rrow = &r.data[rbase + p * n..rbase + (p + 1) * n];
                for (acc, &w) in row.iter_mut().zip(rrow) {
                    *acc += a * w;
                }
            }
        }
    }
    result
}
