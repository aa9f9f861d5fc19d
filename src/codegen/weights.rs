//! The weights blob every target loads: each parameter at its offset in the program's
//! weights layout ([`Storage::Weight`]), in the layout the program stores it in
//! (`lower::Layout`: row-major unless a target's pass chose another; the transforms are
//! the C target's, [`stored_values`]), little-endian.

use std::collections::BTreeMap;

use crate::codegen::c::layout::stored_values;
use crate::error::{Error, Result};
use crate::lower::{Layout, Program, Storage};
use crate::tensor::{write_elements, RawTensor};

/// The weights blob in the layout of the program's weight offsets. Each parameter is
/// converted from its file's type into the blob's one element at a time (a row-major one
/// of the same type is copied), and its file pages are let go once written: the blob
/// and one parameter are all that is in memory.
pub fn weights_blob(p: &Program, values: &BTreeMap<String, RawTensor>) -> Result<Vec<u8>> {
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
        let end = offset as usize + stored.len() * b.dtype.size();
        let Some(slot) = blob.get_mut(offset as usize..end) else {
            return Err(Error::internal(format!("weight {name} does not fit the blob")));
        };
        if port.layout == Layout::RowMajor && t.dtype == b.dtype {
            slot.copy_from_slice(t.bytes());
        } else {
            write_elements(stored, b.dtype, slot);
        }
        t.release();
    }
    Ok(blob)
}

/// `weights.bin` for a GPU target (`target`, for messages), whose weights live in
/// memory the caller fills: written with `--weights file` when parameter values were
/// given; none with `--weights safetensors`, whose demo reads the parameters from a
/// safetensors file at run time; `--weights embed` (the C target's) refused.
pub fn device_weights(target: &str, p: &Program, opts: &crate::codegen::c::Options) -> Result<Option<(String, Vec<u8>)>> {
    use crate::backend::WeightsMode;
    match (opts.mode, &opts.weights) {
        (WeightsMode::Embed, _) => Err(Error::user(format!(
            "--weights embed is the C target's: the {target} target's weights live in memory the caller fills (--weights file or safetensors)"
        ))),
        (WeightsMode::Safetensors, _) | (WeightsMode::File, None) => Ok(None),
        (WeightsMode::File, Some(values)) => Ok(Some(("weights.bin".to_string(), weights_blob(p, values)?))),
    }
}
