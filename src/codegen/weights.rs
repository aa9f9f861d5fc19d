//! The weights blob every target loads: each parameter at its offset in the program's
//! weights layout ([`Storage::Weight`]), in the layout the program stores it in
//! ([`Layout`]), little-endian.

use crate::error::{Error, Result};
use crate::ir::Dtype;
use crate::lower::{Layout, Program, Storage, PANEL};
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

/// A parameter's values in the order its layout stores them (row-major ones as they
/// are: a large parameter is not copied).
pub(crate) fn stored_values(t: &Tensor, layout: Layout) -> std::borrow::Cow<'_, Tensor> {
    let (n, k) = (t.shape.first().copied().unwrap_or(1) as usize, t.shape.get(1).copied().unwrap_or(1) as usize);
    let data = match layout {
        Layout::RowMajor => return std::borrow::Cow::Borrowed(t),
        // [N, K] as [K, N]: element (j, i) of the transpose is t[i, j].
        Layout::Transposed => (0..k * n).map(|x| t.data[(x % n) * k + x / n]).collect(),
        // [K, N] in column panels: panel q, row kk, lane l is column q*PANEL + l
        // (MR_PANEL_INDEX; runtime_facts checks that the runtime reads what this writes).
        Layout::Panels => {
            let w = PANEL as usize;
            let mut data = vec![0.0; n.div_ceil(w) * w * k];
            for i in 0..n {
                for j in 0..k {
                    data[(i / w) * k * w + j * w + i % w] = t.data[i * k + j];
                }
            }
            data
        }
        // [O, C, 3, 3] as [36, O, C]: G g G^T for each (o, c), as mr_winograd_weights_f32
        // (bit for bit: runtime_facts).
        Layout::Winograd => {
            const G: [[f64; 3]; 6] = [
                [1.0 / 4.0, 0.0, 0.0],
                [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
                [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
                [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
                [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
                [0.0, 0.0, 1.0],
            ];
            let (o, c) = (n, k);
            let mut data = vec![0.0; 36 * o * c];
            for (oc, g) in t.data.chunks_exact(9).enumerate() {
                for (xi, u) in data.iter_mut().skip(oc).step_by(o * c).enumerate() {
                    let (i, j) = (xi / 6, xi % 6);
                    *u = (0..9).map(|ab| G[i][ab / 3] * g[ab] * G[j][ab % 3]).sum();
                }
            }
            data
        }
    };
    std::borrow::Cow::Owned(Tensor { dtype: t.dtype, shape: vec![data.len() as u64], data })
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
