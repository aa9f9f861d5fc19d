//! The weights blob every target loads: each parameter at its offset in the program's
//! weights layout ([`Storage::Weight`]), in the layout the program stores it in
//! (`lower::Layout`: row-major unless a target's pass chose another; the transforms are
//! the C target's, [`stored_values`]), little-endian.

use crate::error::{Error, Result};
use crate::ir::Dtype;
use crate::codegen::c::layout::stored_values;
use crate::lower::{Program, Storage};
use crate::tensor::Tensor;

/// The weights blob in the layout of the program's weight offsets.
pub fn weights_blob(p: &Program, values: &std::collections::BTreeMap<String, Tensor>) -> Result<Vec<u8>> {
    let mut blob = vec![0u8; p.weights_size as usize];
    for port in &p.weights {
        let (name, shape) = (&port.name, &port.shape);
        let t = values.get(name).ok_or_else(|| Error::user(format!("no value for the parameter `{name}`")))?;
        if &t.shape != shape {
            return Err(Error::user(format!("parameter `{name}` has shape {:?}, the model needs {:?}", t.shape, shape)));
        }
        let b = &p.buffers[port.buf.0];
        let Storage::Weight { offset } = b.storage else { return Err(Error::internal(format!("weight {name} is not in the blob"))) };
        let stored = stored_values(t, port.layout);
        let end = offset as usize + stored.data.len() * b.dtype.size();
        let Some(slot) = blob.get_mut(offset as usize..end) else {
            return Err(Error::internal(format!("weight {name} does not fit the blob")));
        };
        write_elements(&stored.data, b.dtype, slot);
    }
    Ok(blob)
}

/// Writes `values` as little-endian elements of `dtype` at the start of `out` (which
/// the weights' layout sized for them).
pub(crate) fn write_elements(values: &[f64], dtype: Dtype, out: &mut [u8]) {
    fn put<const N: usize>(values: &[f64], out: &mut [u8], bytes: impl Fn(f64) -> [u8; N]) {
        for (&x, slot) in values.iter().zip(out.chunks_exact_mut(N)) {
            slot.copy_from_slice(&bytes(x));
        }
    }
    match dtype {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => put(values, out, |x| (x as f32).to_le_bytes()),
        Dtype::F64 => put(values, out, f64::to_le_bytes),
        Dtype::I32 => put(values, out, |x| (x as i32).to_le_bytes()),
        Dtype::I64 => put(values, out, |x| (x as i64).to_le_bytes()),
        Dtype::Bool => put(values, out, |x| [u8::from(x != 0.0)]),
    }
}

/// `weights.bin` for a GPU target (`target`, for messages), whose weights live in
/// memory the caller fills: written with `--weights file` when parameter values were
/// given; none with `--weights safetensors`, whose demo reads the parameters from a
/// safetensors file at run time; `--weights embed` (the C target's) refused.
pub fn device_weights(target: &str, p: &Program, opts: &crate::codegen::c::Options) -> Result<Option<(String, Vec<u8>)>> {
    use crate::backend::WeightsMode;
    match (opts.mode, &opts.weights) {
        (WeightsMode::Embed | WeightsMode::EmbedC, _) => Err(Error::user(format!(
            "--weights embed and embed-c are the C target's: the {target} target's weights live in memory the caller fills (--weights file or safetensors)"
        ))),
        (WeightsMode::Safetensors, _) | (WeightsMode::File, None) => Ok(None),
        (WeightsMode::File, Some(values)) => Ok(Some(("weights.bin".to_string(), weights_blob(p, values)?))),
    }
}
