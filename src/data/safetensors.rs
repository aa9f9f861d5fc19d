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

/// The safetensors bytes of `tensors`, each in its own dtype (bool `BOOL`, f16 `F16`,
/// bf16 `BF16`, ...), little-endian, laid out in name order. The header is JSON with
/// sorted keys and no metadata, padded with spaces to a multiple of 8 bytes, so the
/// same tensors always give the same bytes. Names must be distinct.
pub(super) fn encode(tensors: &[(String, Tensor)]) -> Result<Vec<u8>> {
    let mut sorted: Vec<&(String, Tensor)> = tensors.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(crate::user_error!("cannot write safetensors: tensor name '{}' is used twice", w[0].0));
    }
    let mut header = std::collections::BTreeMap::new();
    let mut data = Vec::new();
    for (name, t) in sorted {
        let start = data.len();
        match t.dtype {
            Dtype::F32 => t.data.iter().for_each(|&x| data.extend((x as f32).to_le_bytes())),
            Dtype::F64 => t.data.iter().for_each(|&x| data.extend(x.to_le_bytes())),
            Dtype::F16 => t.data.iter().for_each(|&x| data.extend(half::f16::from_f64(x).to_le_bytes())),
            Dtype::Bf16 => t.data.iter().for_each(|&x| data.extend(half::bf16::from_f64(x).to_le_bytes())),
            Dtype::I32 => t.data.iter().for_each(|&x| data.extend((x as i32).to_le_bytes())),
            Dtype::I64 => t.data.iter().for_each(|&x| data.extend((x as i64).to_le_bytes())),
            Dtype::Bool => t.data.iter().for_each(|&x| data.push(u8::from(x != 0.0))),
        }
        let dtype = match t.dtype {
            Dtype::F32 => "F32",
            Dtype::F64 => "F64",
            Dtype::F16 => "F16",
            Dtype::Bf16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::I64 => "I64",
            Dtype::Bool => "BOOL",
        };
        header.insert(name.clone(), serde_json::json!({"dtype": dtype, "shape": t.shape, "data_offsets": [start, data.len()]}));
    }
    let mut json = serde_json::to_string(&header).map_err(|e| crate::internal_error!("safetensors header: {e}"))?;
    while json.len() % 8 != 0 {
        json.push(' ');
    }
    let mut out = Vec::with_capacity(8 + json.len() + data.len());
    out.extend((json.len() as u64).to_le_bytes());
    out.extend(json.into_bytes());
    out.extend(data);
    Ok(out)
}
