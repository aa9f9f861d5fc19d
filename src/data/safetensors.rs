//! `.safetensors` files, decoded with the `safetensors` crate.
//!
//! The crate checks the header (offsets, sizes, overflow) against the buffer; this module
//! converts each little-endian tensor into a [`Tensor`]. i8, i16, u8 and u16 become i32;
//! u32 becomes i64. u64, complex and the sub-byte and 8-bit float formats are user errors
//! naming the file, the tensor and its dtype. Tensors are returned sorted by name.

use std::path::Path;

use ::safetensors::{Dtype as StDtype, SafeTensors};
use indexmap::IndexMap;

use crate::error::{Error, Result};
use crate::ir::Dtype;
use crate::tensor::Tensor;

fn tensor_error(file: &Path, name: &str, msg: impl std::fmt::Display) -> Error {
    crate::user_error!("cannot read {}: tensor '{name}': {msg}", file.display())
}

/// Decodes every tensor of the safetensors `bytes` read from `file`, sorted by name.
pub(super) fn decode(bytes: &[u8], file: &Path) -> Result<IndexMap<String, Tensor>> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| {
        crate::user_error!("cannot read {}: not a valid .safetensors file: {e}", file.display())
    })?;
    let mut views = st.tensors();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = IndexMap::with_capacity(views.len());
    for (name, view) in views {
        let shape: Vec<u64> = view.shape().iter().map(|&d| d as u64).collect();
        let Some((dtype, data)) = decode_data(view.dtype(), view.data()) else {
            return Err(tensor_error(
                file,
                &name,
                format!(
                    "unsupported dtype {} (supported: F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, BOOL)",
                    view.dtype()
                ),
            ));
        };
        let numel = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        if numel != Some(data.len() as u64) {
            return Err(tensor_error(
                file,
                &name,
                format!("shape {shape:?} does not match its {} bytes of data", view.data().len()),
            ));
        }
        out.insert(name, Tensor::new(dtype, shape, data));
    }
    Ok(out)
}

/// The mithrilc dtype and the values of little-endian `bytes` of safetensors dtype `st`,
/// or `None` when the dtype is unsupported.
fn decode_data(st: StDtype, bytes: &[u8]) -> Option<(Dtype, Vec<f64>)> {
    fn each<const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> f64) -> Vec<f64> {
        bytes
            .chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                f(a)
            })
            .collect()
    }
    let decoded = match st {
        StDtype::BOOL => (Dtype::Bool, each::<1>(bytes, |b| if b[0] != 0 { 1.0 } else { 0.0 })),
        StDtype::U8 => (Dtype::I32, each::<1>(bytes, |b| f64::from(b[0]))),
        StDtype::I8 => (Dtype::I32, each::<1>(bytes, |b| f64::from(i8::from_le_bytes(b)))),
        StDtype::I16 => (Dtype::I32, each::<2>(bytes, |b| f64::from(i16::from_le_bytes(b)))),
        StDtype::U16 => (Dtype::I32, each::<2>(bytes, |b| f64::from(u16::from_le_bytes(b)))),
        StDtype::I32 => (Dtype::I32, each::<4>(bytes, |b| f64::from(i32::from_le_bytes(b)))),
        StDtype::U32 => (Dtype::I64, each::<4>(bytes, |b| f64::from(u32::from_le_bytes(b)))),
        // i64 beyond 2^53 rounds to the nearest f64, as the host tensor documents.
        StDtype::I64 => (Dtype::I64, each::<8>(bytes, |b| i64::from_le_bytes(b) as f64)),
        StDtype::F16 => (Dtype::F16, each::<2>(bytes, |b| half::f16::from_le_bytes(b).to_f64())),
        StDtype::BF16 => (Dtype::Bf16, each::<2>(bytes, |b| half::bf16::from_le_bytes(b).to_f64())),
        StDtype::F32 => (Dtype::F32, each::<4>(bytes, |b| f64::from(f32::from_le_bytes(b)))),
        StDtype::F64 => (Dtype::F64, each::<8>(bytes, f64::from_le_bytes)),
        StDtype::U64
        | StDtype::C64
        | StDtype::F4
        | StDtype::F6_E2M3
        | StDtype::F6_E3M2
        | StDtype::F8_E5M2
        | StDtype::F8_E4M3
        | StDtype::F8_E8M0
        | StDtype::F8_E4M3FNUZ
        | StDtype::F8_E5M2FNUZ => return None,
        // `safetensors::Dtype` is non-exhaustive: a dtype added later is unsupported too.
        _ => return None,
    };
    Some(decoded)
}
