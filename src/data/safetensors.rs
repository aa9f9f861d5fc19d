//! `.safetensors` files, decoded with the `safetensors` crate.
//!
//! The crate checks the header (offsets, sizes, overflow) against the buffer; each
//! tensor of a type mithrilc has (f16, bf16, f32, f64, and the signed and unsigned
//! integers of 8 to 64 bits) is a view of that buffer in its own dtype; bool is made 0
//! or 1, in memory. Complex and the sub-byte and 8-bit float formats are user errors
//! naming the file, the tensor and its dtype. Tensors are returned sorted by
//! name.

use std::path::Path;
use std::sync::Arc;

use ::safetensors::{Dtype as StDtype, SafeTensors};
use indexmap::IndexMap;

use crate::error::{Error, Result};
use crate::ir::Dtype;
use crate::tensor::{write_elements, Backing, RawTensor};

fn tensor_error(file: &Path, name: &str, msg: impl std::fmt::Display) -> Error {
    crate::user_error!("cannot read {}: tensor '{name}': {msg}", file.display())
}

/// Decodes every tensor of the safetensors bytes `backing` read from `file`, sorted by
/// name.
pub(super) fn decode(backing: &Arc<dyn Backing>, file: &Path) -> Result<IndexMap<String, RawTensor>> {
    let bytes = backing.bytes();
    let st = SafeTensors::deserialize(bytes).map_err(|e| {
        crate::user_error!("cannot read {}: not a valid .safetensors file: {e}", file.display())
    })?;
    let mut views = st.tensors();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = IndexMap::with_capacity(views.len());
    for (name, view) in views {
        let shape: Vec<u64> = view.shape().iter().map(|&d| d as u64).collect();
        let data = view.data();
        let start = data.as_ptr() as usize - bytes.as_ptr() as usize;
        let mismatch = || tensor_error(file, &name, format!("shape {shape:?} does not match its {} bytes of data", data.len()));
        let t = match stored_as(view.dtype()) {
            Some(Stored::AsIs(dtype)) => RawTensor::new(dtype, shape.clone(), backing.clone(), start..start + data.len()),
            Some(Stored::Widened(dtype, size, decode)) => {
                let mut out = vec![0u8; data.len() / size * dtype.size()];
                write_elements(data.chunks_exact(size).map(decode), dtype, &mut out);
                // A trailing partial element is a mismatch, not dropped.
                RawTensor::owned(dtype, shape.clone(), out).filter(|_| data.len() % size == 0)
            }
            None => {
                return Err(tensor_error(
                    file,
                    &name,
                    format!(
                        "unsupported dtype {} (supported: F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL, F8_E4M3, F8_E4M3FNUZ, F8_E5M2, F8_E5M2FNUZ)",
                        view.dtype()
                    ),
                ))
            }
        };
        out.insert(name.clone(), t.ok_or_else(mismatch)?);
    }
    Ok(out)
}

/// How a safetensors dtype is held.
enum Stored {
    /// As the file stores it.
    AsIs(Dtype),
    /// Converted into this dtype from elements of this many bytes, each read by the
    /// function.
    Widened(Dtype, usize, fn(&[u8]) -> f64),
}

/// How tensors of safetensors dtype `st` are held, or `None` when it is unsupported.
fn stored_as(st: StDtype) -> Option<Stored> {
    let stored = match st {
        StDtype::F16 => Stored::AsIs(Dtype::F16),
        StDtype::BF16 => Stored::AsIs(Dtype::Bf16),
        StDtype::F32 => Stored::AsIs(Dtype::F32),
        StDtype::F64 => Stored::AsIs(Dtype::F64),
        StDtype::I32 => Stored::AsIs(Dtype::I32),
        StDtype::I64 => Stored::AsIs(Dtype::I64),
        StDtype::BOOL => Stored::Widened(Dtype::Bool, 1, |b| f64::from(u8::from(b[0] != 0))),
        StDtype::U8 => Stored::AsIs(Dtype::U8),
        StDtype::I8 => Stored::AsIs(Dtype::I8),
        StDtype::I16 => Stored::AsIs(Dtype::I16),
        StDtype::U16 => Stored::AsIs(Dtype::U16),
        StDtype::U32 => Stored::AsIs(Dtype::U32),
        StDtype::U64 => Stored::AsIs(Dtype::U64),
        StDtype::F8_E4M3 => Stored::AsIs(Dtype::F8E4M3Fn),
        StDtype::F8_E4M3FNUZ => Stored::AsIs(Dtype::F8E4M3Fnuz),
        StDtype::F8_E5M2 => Stored::AsIs(Dtype::F8E5M2),
        StDtype::F8_E5M2FNUZ => Stored::AsIs(Dtype::F8E5M2Fnuz),
        // (F4 packs two elements a byte)
        StDtype::C64 | StDtype::F4 | StDtype::F6_E2M3 | StDtype::F6_E3M2 | StDtype::F8_E8M0 => return None,
        // `safetensors::Dtype` is non-exhaustive: a dtype added later is unsupported too.
        _ => return None,
    };
    Some(stored)
}

/// The one header key that names no tensor: the file's metadata. A tensor of this name
/// would make a file no strict reader opens (mithrilc's included).
pub(super) const RESERVED: &str = "__metadata__";

/// Why a tensor named [`RESERVED`] cannot be written to the safetensors file `file`.
pub(super) fn reserved_error(file: &str) -> Error {
    Error::user(format!("cannot write {file}: an array named `{RESERVED}`: the format reserves that key for the file's metadata"))
        .note("write a .npz, which holds an array of any name")
}

/// The safetensors bytes of `tensors`, each in its own dtype (bool `BOOL`, f16 `F16`,
/// bf16 `BF16`, ...), little-endian, laid out in name order. The header is JSON with
/// sorted keys and no metadata, padded with spaces to a multiple of 8 bytes, so the
/// same tensors always give the same bytes. Names must be distinct.
///
/// The header is written first, from the tensors' sizes, so each tensor's bytes are
/// copied once, straight into the file's bytes, and a mapped checkpoint's pages are
/// let go as soon as they are copied: writing the file takes about its own size in
/// memory (issue 21: compiling gpt_block for XLA peaked at 3.2 times its weights).
pub(super) fn encode(tensors: &[(String, RawTensor)]) -> Result<Vec<u8>> {
    let mut sorted: Vec<&(String, RawTensor)> = tensors.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(crate::user_error!("cannot write safetensors: tensor name '{}' is used twice", w[0].0));
    }
    if sorted.iter().any(|(name, _)| name == RESERVED) {
        return Err(reserved_error("safetensors"));
    }
    let mut header = std::collections::BTreeMap::new();
    let mut end = 0usize;
    for (name, t) in &sorted {
        let start = end;
        end = start.checked_add(t.bytes().len()).ok_or_else(|| crate::user_error!("cannot write safetensors: the tensors take more bytes than this machine can address"))?;
        let dtype = dtype_name(t.dtype).ok_or_else(|| {
            crate::user_error!("cannot write safetensors: tensor '{name}' is {}, which safetensors has no type for (of the narrow types it has f8e4m3fn, f8e4m3fnuz, f8e5m2 and f8e5m2fnuz)", t.dtype)
        })?;
        header.insert(name.clone(), serde_json::json!({"dtype": dtype, "shape": t.shape, "data_offsets": [start, end]}));
    }
    let mut json = serde_json::to_string(&header).map_err(|e| crate::internal_error!("safetensors header: {e}"))?;
    while json.len() % 8 != 0 {
        json.push(' ');
    }
    let mut out = Vec::with_capacity(8 + json.len() + end);
    out.extend((json.len() as u64).to_le_bytes());
    out.extend(json.into_bytes());
    for (_, t) in sorted {
        out.extend_from_slice(t.bytes());
        t.release();
    }
    Ok(out)
}

/// The safetensors name of an element type (`F32`, `BF16`, `U8`, `F8_E4M3`, ...), if
/// it has one: float4 and the 4- and 2-bit integers have none that holds one element a
/// byte (safetensors' `F4` packs two).
pub fn dtype_name(d: Dtype) -> Option<&'static str> {
    Some(match d {
        Dtype::F32 => "F32",
        Dtype::F64 => "F64",
        Dtype::F16 => "F16",
        Dtype::Bf16 => "BF16",
        Dtype::I32 => "I32",
        Dtype::I64 => "I64",
        Dtype::Bool => "BOOL",
        Dtype::I8 => "I8",
        Dtype::U8 => "U8",
        Dtype::I16 => "I16",
        Dtype::U16 => "U16",
        Dtype::U32 => "U32",
        Dtype::U64 => "U64",
        Dtype::F8E4M3Fn => "F8_E4M3",
        Dtype::F8E4M3Fnuz => "F8_E4M3FNUZ",
        Dtype::F8E5M2 => "F8_E5M2",
        Dtype::F8E5M2Fnuz => "F8_E5M2FNUZ",
        Dtype::F4E2M1 | Dtype::I4 | Dtype::U4 | Dtype::I2 | Dtype::U2 => return None,
    })
}
