//! Host tensors: concrete arrays used for constants, the interpreter and data files.
//!
//! Elements are stored as `f64` whatever the dtype: every f32/f16/bf16/i32/bool value,
//! and every i64 up to 2^53, is exact in f64. Values are rounded to their dtype when a
//! tensor is made with [`Tensor::new`], so an f32 tensor holds exactly f32 values.

use crate::ir::Dtype;

#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub data: Vec<f64>,
}

impl Tensor {
    /// A tensor of `dtype`, rounding every element to that dtype.
    ///
    /// The caller guarantees `data.len()` is the product of `shape` (checked in debug).
    pub fn new(dtype: Dtype, shape: Vec<u64>, mut data: Vec<f64>) -> Tensor {
        debug_assert_eq!(Some(data.len() as u64), shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)));
        for x in &mut data {
            *x = round_to(dtype, *x);
        }
        Tensor { dtype, shape, data }
    }

    pub fn scalar(dtype: Dtype, value: f64) -> Tensor {
        Tensor::new(dtype, Vec::new(), vec![value])
    }

    pub fn numel(&self) -> usize {
        self.data.len()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<usize> {
        strides(&self.shape)
    }
}

/// Row-major strides (in elements) of a shape.
pub fn strides(shape: &[u64]) -> Vec<usize> {
    let mut out = vec![0usize; shape.len()];
    let mut acc = 1usize;
    for i in (0..shape.len()).rev() {
        out[i] = acc;
        acc *= shape[i] as usize;
    }
    out
}

/// Rounds `x` to the nearest value representable in `dtype` (ints truncate toward zero,
/// as a C cast does; bool is `x != 0`).
pub fn round_to(dtype: Dtype, x: f64) -> f64 {
    match dtype {
        Dtype::F64 => x,
        Dtype::F32 => x as f32 as f64,
        Dtype::F16 => half::f16::from_f64(x).to_f64(),
        Dtype::Bf16 => half::bf16::from_f64(x).to_f64(),
        Dtype::I32 => {
            if x.is_nan() { 0.0 } else { x.trunc().clamp(i32::MIN as f64, i32::MAX as f64) }
        }
        Dtype::I64 => {
            if x.is_nan() { 0.0 } else { x.trunc().clamp(i64::MIN as f64, i64::MAX as f64) }
        }
        Dtype::Bool => {
            if x != 0.0 { 1.0 } else { 0.0 }
        }
    }
}
