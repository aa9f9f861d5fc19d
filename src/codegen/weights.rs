//! The weights blob every target loads: each parameter at its offset in the program's
//! weights layout ([`Storage::Weight`]), in the layout the program stores it in
//! (`lower::Layout`: row-major unless a target's pass chose another; the transforms are
//! the C target's, [`stored_values`]), little-endian, its elements narrowed where the
//! program stores the weight narrow ([`Stored`]: [`narrow`]); and [`blob_values`], the
//! same layout read back (`export-weights`).

use std::collections::BTreeMap;

use crate::codegen::c::layout::stored_values;
use crate::error::{Error, Result};
use crate::ir::Dtype;
use crate::lower::{Layout, Program, Storage, Stored, Q8_BLOCK};
use crate::tensor::{write_elements, RawTensor, Tensor};

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
        let bytes = port.stored_bytes(stored.len() as u64, b.dtype).and_then(|n| n.checked_add(offset)).and_then(|end| usize::try_from(end).ok());
        let Some(slot) = bytes.and_then(|end| blob.get_mut(offset as usize..end)) else {
            return Err(Error::internal(format!("weight {name} does not fit the blob")));
        };
        match port.stored {
            Stored::F32 if port.layout == Layout::RowMajor && t.dtype == b.dtype => slot.copy_from_slice(t.bytes()),
            Stored::F32 => write_elements(stored, b.dtype, slot),
            narrowed => narrow(stored, narrowed, depth(port), slot),
        }
        t.release();
    }
    Ok(blob)
}

/// A fingerprint of the blob's layout: each parameter's name, dtype, shape, offset and
/// stored layout. The generated header carries it (`<NAME>_WEIGHTS_LAYOUT`), so
/// `export-weights` can tell a blob of another build from its own where both have the
/// same size (a matrix in panels and the same one row-major, say).
pub fn layout_fingerprint(p: &Program) -> u64 {
    let mut text = String::new();
    for port in &p.weights {
        let b = &p.buffers[port.buf.0];
        let offset = match b.storage {
            Storage::Weight { offset } => offset,
            _ => u64::MAX,
        };
        text.push_str(&format!("{:?}|{}|{:?}|{}|{:?}", port.name, b.dtype, port.shape, offset, port.layout));
        // (f32, the form of every weight before --quantize, adds nothing: fingerprints of
        // earlier builds stay as they were)
        if port.stored != Stored::F32 {
            text.push_str(&format!("|{}", port.stored.name()));
        }
        text.push('\n');
    }
    crate::hash::fnv1a(text.as_bytes())
}

/// What to give when a blob does not fit the model: the flags decide its layout.
pub const FLAGS_NOTE: &str = "give the model and the flags it was compiled with (--shape, --grad, --target, --weight-layout, --max, --quantize)";

/// The parameter values in `blob`, a weights blob of program `p` (after a training step
/// updated it, say): [`weights_blob`] inverted, in the program's parameter order. Where a
/// parameter's values went is found by laying out its element numbers with
/// [`stored_values`] itself, so the layout rules are never written twice: a layout that
/// only moves elements (row-major, transposed, panels and their zero padding) is undone
/// exactly; one that mixes them (Winograd) is refused. A weight stored narrow is read
/// back as the f32 values it stores ([`widen`]): the approximations the library
/// computes with, not the values it was compiled from.
pub fn blob_values(p: &Program, blob: &[u8]) -> Result<Vec<(String, Tensor)>> {
    if blob.len() as u64 != p.weights_size {
        return Err(Error::user(format!("the blob holds {} bytes, and the model's weights take {}", blob.len(), p.weights_size))
            .note(FLAGS_NOTE));
    }
    let mut out = Vec::with_capacity(p.weights.len());
    for port in &p.weights {
        let name = &port.name;
        let b = &p.buffers[port.buf.0];
        let Storage::Weight { offset } = b.storage else { return Err(Error::internal(format!("weight {name} is not in the blob"))) };
        let n = port.shape.iter().product::<u64>() as usize;
        // Element i stored as i + 1; the layout's padding stays 0.
        let numbers = RawTensor::from_tensor(&Tensor { dtype: Dtype::F64, shape: port.shape.clone(), data: (1..=n).map(|i| i as f64).collect() });
        let order: Vec<f64> = stored_values(&numbers, port.layout).collect();
        let end = port.stored_bytes(order.len() as u64, b.dtype).and_then(|n| n.checked_add(offset)).and_then(|end| usize::try_from(end).ok());
        let slot = end.and_then(|end| blob.get(offset as usize..end));
        let stored = slot.and_then(|slot| match port.stored {
            Stored::F32 => read_elements(slot, b.dtype),
            narrowed => widen(slot, narrowed, depth(port), order.len()),
        });
        let stored = stored.filter(|s| s.len() == order.len());
        let Some(stored) = stored else { return Err(Error::internal(format!("weight {name} does not fill its place in the blob"))) };
        let mut values = vec![None; n];
        for (&number, &x) in order.iter().zip(&stored) {
            if number == 0.0 {
                continue;
            }
            let slot = (number.fract() == 0.0 && number >= 1.0).then(|| values.get_mut(number as usize - 1)).flatten().filter(|v| v.is_none());
            let Some(slot) = slot else { return Err(mixed_layout(name, port.layout)) };
            *slot = Some(x);
        }
        let data: Option<Vec<f64>> = values.into_iter().collect();
        let data = data.ok_or_else(|| mixed_layout(name, port.layout))?;
        out.push((name.clone(), Tensor { dtype: b.dtype, shape: port.shape.clone(), data }));
    }
    Ok(out)
}

/// The error for a parameter whose stored form is not a rearrangement of its values.
fn mixed_layout(name: &str, layout: Layout) -> Error {
    Error::user(format!("parameter `{name}` is stored in the {layout:?} layout, which mixes its values: they cannot be read back exactly"))
        .note("compile with --weight-layout plain for a weights.bin that exports (with --grad it always is)")
}

/// The little-endian elements of `dtype` that fill `bytes`, as [`write_elements`] writes
/// them (read by [`RawTensor`]'s own element reader); `None` when `bytes` is not a whole
/// number of them.
fn read_elements(bytes: &[u8], dtype: Dtype) -> Option<Vec<f64>> {
    let numel = bytes.len() / dtype.size();
    RawTensor::owned(dtype, vec![numel as u64], bytes.to_vec()).map(|t| t.values().collect())
}

/// The rows of a weight's stored matrix that [`Stored::Int8`] needs (the operand `[K,
/// N]` of a weight `[N, K]` in panels: its K; of a convolution's `[O, C, KH, KW]`,
/// C*KH*KW); the sequence forms need none.
fn depth(port: &crate::lower::Port) -> usize {
    if port.shape.len() < 2 {
        return 0;
    }
    port.shape[1..].iter().product::<u64>() as usize
}

/// Writes `values` (f32 elements, in the order a layout stores them) into `out` narrowed
/// to `stored` (`mithril_runtime.h`'s `MR_F16`, `MR_BF16`, `MR_Q8_0`, `MR_INT8`): each
/// value rounded to f32 first, then to nearest even for f16 and bf16; for q8_0, blocks
/// of 32 consecutive elements (the last may be shorter), `ceil(n / 32)` f32 scales
/// `max|x| / 127` and then one byte per element, `x / scale` rounded half away from zero
/// and clamped to [-127, 127] (0 for a block of zeros); for int8, `values` are the
/// panels of a `[depth, N]` operand ([`narrow_int8`]). `out` holds exactly the bytes
/// they take ([`Stored::bytes`], [`crate::lower::int8_panels_bytes`]).
pub fn narrow(values: impl ExactSizeIterator<Item = f64>, stored: Stored, depth: usize, out: &mut [u8]) {
    let values = values.map(|x| x as f32);
    match stored {
        Stored::F32 => write_elements(values.map(f64::from), Dtype::F32, out),
        Stored::F16 => write_elements(values.map(f64::from), Dtype::F16, out),
        Stored::Bf16 => write_elements(values.map(f64::from), Dtype::Bf16, out),
        Stored::Q8_0 => {
            let values: Vec<f32> = values.collect();
            let (scales, codes) = out.split_at_mut(values.len().div_ceil(Q8_BLOCK as usize) * 4);
            for ((block, scale), code) in values.chunks(Q8_BLOCK as usize).zip(scales.chunks_exact_mut(4)).zip(codes.chunks_mut(Q8_BLOCK as usize)) {
                let d = block.iter().fold(0.0f32, |m, x| m.max(x.abs())) / 127.0;
                scale.copy_from_slice(&d.to_le_bytes());
                for (x, q) in block.iter().zip(code) {
                    *q = (q8_code(*x, d) as i8) as u8;
                }
            }
        }
        Stored::Int8 => narrow_int8(&values.collect::<Vec<f32>>(), depth, out),
    }
}

/// `x / scale` rounded half away from zero and clamped to [-127, 127]; 0 where the
/// scale is 0 (q8_0's blocks, int8's columns).
fn q8_code(x: f32, scale: f32) -> i32 {
    if scale == 0.0 {
        0
    } else {
        (x / scale).round().clamp(-127.0, 127.0) as i32
    }
}

/// Where column `t` of panel `p`, row `k`, of a `[K, N]` operand (K rounded up to `k4`)
/// has its code among [`Stored::Int8`]'s codes: quads of 4 consecutive k per column
/// (`mithril_runtime.h`'s `mr_gemm_i8_mt`).
fn int8_code_at(p: usize, t: usize, k: usize, k4: usize) -> usize {
    let panel = crate::lower::PANEL as usize;
    p * k4 * panel + k / 4 * 4 * panel + t * 4 + k % 4
}

/// [`Stored::Int8`]: the panels of a `[k, N]` operand (`values` in their order, `k` rows
/// of `PANEL` each) as, for each of their columns, a scale `max|x| / 127` (f32), the sum
/// of its codes (i32), then the codes (q8_0's rounding) in quads of 4 consecutive k,
/// zero past k.
fn narrow_int8(values: &[f32], k: usize, out: &mut [u8]) {
    let panel = crate::lower::PANEL as usize;
    let cols = values.len() / k.max(1);
    let k4 = k.next_multiple_of(4);
    let (scales, rest) = out.split_at_mut(cols * 4);
    let (sums, codes) = rest.split_at_mut(cols * 4);
    codes.fill(0);
    for c in 0..cols {
        let (p, t) = (c / panel, c % panel);
        let column = (0..k).map(|r| values[(p * k + r) * panel + t]);
        let d = column.clone().fold(0.0f32, |m, x| m.max(x.abs())) / 127.0;
        // (wrapping: exact for the depths int8 takes, INT8_MAX_K)
        let mut sum = 0i32;
        for (r, x) in column.enumerate() {
            let q = q8_code(x, d);
            codes[int8_code_at(p, t, r, k4)] = (q as i8) as u8;
            sum = sum.wrapping_add(q);
        }
        scales[c * 4..c * 4 + 4].copy_from_slice(&d.to_le_bytes());
        sums[c * 4..c * 4 + 4].copy_from_slice(&sum.to_le_bytes());
    }
}

/// The `n` f32 values stored narrow in `bytes` as [`narrow`] writes them (what
/// `mr_dequantize` gives, or for int8 the scale times the code); `None` when `bytes` is
/// not their size.
pub fn widen(bytes: &[u8], stored: Stored, depth: usize, n: usize) -> Option<Vec<f64>> {
    let size = match stored {
        Stored::Int8 => crate::lower::int8_panels_bytes(depth as u64, (n / depth.max(1)) as u64),
        _ => stored.bytes(n as u64, Dtype::F32),
    };
    if size != Some(bytes.len() as u64) || (stored == Stored::Int8 && n % depth.max(1) != 0) {
        return None;
    }
    match stored {
        Stored::F32 => read_elements(bytes, Dtype::F32),
        Stored::F16 => read_elements(bytes, Dtype::F16),
        Stored::Bf16 => read_elements(bytes, Dtype::Bf16),
        Stored::Q8_0 => {
            let (scales, codes) = bytes.split_at(n.div_ceil(Q8_BLOCK as usize) * 4);
            let scale = |e: usize| f32::from_le_bytes([0, 1, 2, 3].map(|i| scales[e / Q8_BLOCK as usize * 4 + i]));
            Some(codes.iter().enumerate().map(|(e, &q)| f64::from(scale(e) * f32::from(q as i8))).collect())
        }
        Stored::Int8 => {
            let panel = crate::lower::PANEL as usize;
            let (k, k4) = (depth, depth.next_multiple_of(4));
            let cols = n / k.max(1);
            let codes = &bytes[cols * 8..];
            let value = |e: usize| {
                let (p, r, t) = (e / (k * panel), e / panel % k, e % panel);
                let c = p * panel + t;
                let scale = f32::from_le_bytes([0, 1, 2, 3].map(|i| bytes[c * 4 + i]));
                f64::from(scale * f32::from(codes[int8_code_at(p, t, r, k4)] as i8))
            };
            Some((0..n).map(value).collect())
        }
    }
}

/// `weights.bin` for a GPU target (`target`, for messages), whose weights live in
/// memory the caller fills: written with `--weights file` when parameter values were
/// given; none with `--weights safetensors`, whose demo reads the parameters from a
/// safetensors file at run time. (`--weights embed` is the C target's alone: its
/// capabilities say so, and the pipeline refuses it before any target emits.)
pub fn device_weights(target: &str, p: &Program, opts: &crate::codegen::c::Options) -> Result<Option<(String, Vec<u8>)>> {
    use crate::backend::WeightsMode;
    match (opts.mode, &opts.weights) {
        (WeightsMode::Embed | WeightsMode::EmbedC, _) => Err(Error::internal(format!("the {target} target cannot embed its weights: its capabilities refuse --weights embed"))),
        (WeightsMode::Safetensors, _) | (WeightsMode::File, None) => Ok(None),
        (WeightsMode::File, Some(values)) => Ok(Some(("weights.bin".to_string(), weights_blob(p, values)?))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A weight in each layout that only moves values (the panels one zero-padded from 3
    /// to 32 columns), and an f64 and an i32 one.
    const MOVED: &str = r#"program m {
  %b0 = weight @0 "a" : f32[6]
  %b1 = weight @64 transposed "t" : f32[6]
  %b2 = weight @128 panels "p" : f32[64]
  %b3 = weight @384 "d" : f64[2]
  %b4 = weight @448 "i" : i32[3]
  param "a" = %b0 [2, 3]
  param "t" = %b1 [3, 2] transposed
  param "p" = %b2 [3, 2] panels
  param "d" = %b3 [2]
  param "i" = %b4 [3]
}
// weights 512 bytes
"#;

    /// A 3x3 convolution weight stored Winograd-transformed.
    const MIXED: &str = r#"program m {
  %b0 = weight @0 winograd "g" : f32[36]
  param "g" = %b0 [1, 1, 3, 3] winograd
}
// weights 192 bytes
"#;

    fn counting(dtype: Dtype, shape: &[u64]) -> Tensor {
        let n = shape.iter().product::<u64>();
        Tensor::new(dtype, shape.to_vec(), (0..n).map(|i| i as f64 * 2.0 - 3.0).collect())
    }

    #[test]
    fn blob_values_reads_back_what_weights_blob_wrote() {
        let p = crate::lower::parse::parse(MOVED).expect("the program parses");
        let values: Vec<(String, Tensor)> = [("a", Dtype::F32, vec![2, 3]), ("t", Dtype::F32, vec![3, 2]), ("p", Dtype::F32, vec![3, 2]), ("d", Dtype::F64, vec![2]), ("i", Dtype::I32, vec![3])]
            .into_iter()
            .map(|(name, dtype, shape)| (name.to_string(), counting(dtype, &shape)))
            .collect();
        let blob = weights_blob(&p, &values.iter().map(|(n, t)| (n.clone(), RawTensor::from_tensor(t))).collect()).expect("the blob");
        // The transposed weight is not stored as given: reading it back undoes something.
        assert_ne!(blob[64..64 + 24], blob[0..24]);
        assert_eq!(blob_values(&p, &blob).expect("read back"), values);

        let err = blob_values(&p, &blob[..500]).unwrap_err();
        assert_eq!(err.to_string(), "the blob holds 500 bytes, and the model's weights take 512\n  note: give the model and the flags it was compiled with (--shape, --grad, --target, --weight-layout, --max, --quantize)");

        let p = crate::lower::parse::parse(MIXED).expect("the program parses");
        let blob = weights_blob(&p, &[("g".to_string(), RawTensor::from_tensor(&counting(Dtype::F32, &[1, 1, 3, 3])))].into_iter().collect()).expect("the blob");
        let err = blob_values(&p, &blob).unwrap_err();
        assert_eq!((err.kind, err.message.as_str()), (crate::ErrorKind::User, "parameter `g` is stored in the Winograd layout, which mixes its values: they cannot be read back exactly"));
    }

    #[test]
    fn narrow_writes_the_runtimes_forms_and_widen_reads_them_back() {
        // q8_0: a block of 32 whose largest magnitude is 127 has scale 1; ties round away
        // from zero; the short last block gets its own scale; a block of zeros scale 0.
        let mut values = vec![0.0; 32 + 2];
        values[..4].copy_from_slice(&[127.0, -63.5, 2.4, -2.6]);
        values[32..].copy_from_slice(&[0.5, -0.25]);
        let mut out = vec![0u8; Stored::Q8_0.bytes(34, Dtype::F32).unwrap() as usize];
        assert_eq!(out.len(), 4 * 2 + 34);
        narrow(values.iter().copied(), Stored::Q8_0, 0, &mut out);
        assert_eq!(f32::from_le_bytes(out[0..4].try_into().unwrap()), 1.0);
        assert_eq!(f32::from_le_bytes(out[4..8].try_into().unwrap()), 0.5 / 127.0);
        assert_eq!(out[8..12].iter().map(|&b| b as i8).collect::<Vec<_>>(), [127, -64, 2, -3]);
        assert!(out[12..40].iter().all(|&b| b == 0));
        assert_eq!(out[40..].iter().map(|&b| b as i8).collect::<Vec<_>>(), [127, -64]);
        let back = widen(&out, Stored::Q8_0, 0, 34).unwrap();
        assert_eq!(back[..4], [127.0, -64.0, 2.0, -3.0]);
        assert_eq!(back[32], f64::from(0.5f32 / 127.0 * 127.0));
        let mut zeros = vec![0u8; 4 + 3];
        narrow([0.0; 3].into_iter(), Stored::Q8_0, 0, &mut zeros);
        assert_eq!(zeros, [0; 7]);
        // f16 and bf16 round to nearest even (1 + 2^-11 is a tie in f16, 1 + 2^-8 in bf16)
        // and overflow to infinity; widen gives the narrow value.
        for (stored, tie, big) in [(Stored::F16, 1.0 + 2f64.powi(-11), 1e5), (Stored::Bf16, 1.0 + 2f64.powi(-8), 1e39)] {
            let mut out = vec![0u8; 6];
            narrow([tie, -1.5, big].into_iter(), stored, 0, &mut out);
            let back = widen(&out, stored, 0, 3).unwrap();
            assert_eq!(back[..2], [1.0, -1.5], "{stored:?}");
            assert!(back[2].is_infinite() || stored == Stored::Bf16 && big as f32 == f32::INFINITY, "{stored:?}: {}", back[2]);
        }
        assert_eq!(widen(&[0; 5], Stored::F16, 0, 3), None);
    }

    /// int8's panels: per column a scale `max|x| / 127` and the sum of the codes, the codes
    /// in quads of 4 consecutive k (zero past K and in padding columns); widening gives
    /// each element as scale times code, within half a step of its value.
    #[test]
    fn int8_panels_hold_column_scales_sums_and_quads_of_codes() {
        // the operand [5, 33] of a weight [33, 5]: 2 panels of 32 columns, K rounded to 8
        let (k, n, panel) = (5usize, 33usize, crate::lower::PANEL as usize);
        let value = |r: usize, j: usize| if j == 1 || j >= n { 0.0 } else { (r as f64 - 2.0) * (j as f64 + 1.0) / 4.0 };
        let values: Vec<f64> = (0..2 * k * panel).map(|e| value(e / panel % k, e / (k * panel) * panel + e % panel)).collect();
        let mut out = vec![0xAAu8; crate::lower::int8_panels_bytes(k as u64, n as u64).unwrap() as usize];
        assert_eq!(out.len(), 64 * (8 + 8));
        narrow(values.iter().copied(), Stored::Int8, k, &mut out);
        let f32_at = |i: usize| f32::from_le_bytes(out[i..i + 4].try_into().unwrap());
        let i32_at = |i: usize| i32::from_le_bytes(out[i..i + 4].try_into().unwrap());
        let code = |p: usize, t: usize, r: usize| out[64 * 8 + int8_code_at(p, t, r, 8)] as i8;
        // column 0: (r - 2) / 4, scale 0.5 / 127; -0.25 is -63.5 steps, rounded away from 0
        assert_eq!(f32_at(0), 0.5f32 / 127.0);
        assert_eq!((0..8).map(|r| code(0, 0, r)).collect::<Vec<_>>(), [-127, -64, 0, 64, 127, 0, 0, 0]);
        assert_eq!(i32_at(64 * 4), 0);
        // column 3: (r - 2), scale 2 / 127, codes sum to 0; column 1 and the padding: zero
        assert_eq!((f32_at(12), i32_at(64 * 4 + 12)), (2.0f32 / 127.0, 0));
        assert_eq!((0..5).map(|r| code(0, 3, r)).collect::<Vec<_>>(), [-127, -64, 0, 64, 127]);
        for (p, t) in [(0, 1), (1, 1), (1, 31)] {
            assert_eq!(f32_at(4 * (p * 32 + t)), 0.0);
            assert!((0..8).all(|r| code(p, t, r) == 0), "column {t} of panel {p}");
        }
        // column 32 (panel 1, column 0): 33 (r - 2) / 4, its own scale
        assert_eq!(f32_at(4 * 32), 33.0 * 0.5f32 / 127.0);
        assert_eq!(code(1, 0, 4), 127);
        let back = widen(&out, Stored::Int8, k, values.len()).unwrap();
        for (e, (&got, &want)) in back.iter().zip(&values).enumerate() {
            let step = f64::from(f32_at(4 * (e / (k * panel) * panel + e % panel)));
            assert!((got - want).abs() <= step / 2.0 + 1e-6 * want.abs(), "element {e}: {got} for {want}");
        }
        assert_eq!(widen(&out[1..], Stored::Int8, k, values.len()), None);
        assert_eq!(widen(&out, Stored::Int8, k, values.len() - 1), None);
    }

    /// A program whose weights `--quantize q8_0` narrowed: the blob holds them narrow at
    /// their offsets, and reading it back gives the values they store.
    #[test]
    fn narrowed_weights_are_written_and_read_back_as_stored() {
        let text = MOVED.replace("%b2 = weight @128 panels \"p\"", "%b2 = weight @128 panels q8_0 \"p\"").replace("[3, 2] panels", "[3, 2] panels q8_0");
        let p = crate::lower::parse::parse(&text).expect("the program parses");
        assert_eq!(p.weights[2].stored, Stored::Q8_0);
        let values: Vec<(String, Tensor)> = [("a", Dtype::F32, vec![2, 3]), ("t", Dtype::F32, vec![3, 2]), ("p", Dtype::F32, vec![3, 2]), ("d", Dtype::F64, vec![2]), ("i", Dtype::I32, vec![3])]
            .into_iter()
            .map(|(name, dtype, shape)| (name.to_string(), counting(dtype, &shape)))
            .collect();
        let blob = weights_blob(&p, &values.iter().map(|(n, t)| (n.clone(), RawTensor::from_tensor(t))).collect()).expect("the blob");
        // 64 elements in two blocks (each a k-row of the panel: -3, 1, 5 then -1, 3, 7): two
        // scales, then 64 bytes; the rest of its slot zero.
        let q = &blob[128..128 + 72];
        assert_eq!([0, 4].map(|i| f32::from_le_bytes(q[i..i + 4].try_into().unwrap())), [5.0 / 127.0, 7.0 / 127.0]);
        assert!(blob[128 + 72..384].iter().all(|&b| b == 0));
        let back = blob_values(&p, &blob).expect("read back");
        for ((name, got), (_, want)) in back.iter().zip(&values) {
            let exact = name != "p";
            for (g, w) in got.data.iter().zip(&want.data) {
                assert!(if exact { g == w } else { (g - w).abs() <= 7.0 / 127.0 / 2.0 * 1.0001 }, "{name}: {g} for {w}");
            }
        }
        assert_ne!(layout_fingerprint(&p), layout_fingerprint(&crate::lower::parse::parse(MOVED).unwrap()));
    }
}
