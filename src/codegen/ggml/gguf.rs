//! A GGUF writer (format version 3, as ggml's `gguf.h` reads it): metadata key/value
//! pairs, then tensor infos, then the tensors' data, each at an offset aligned to
//! [`ALIGNMENT`] bytes from the start of the data section. All numbers little-endian.
//!
//! No crate on crates.io writes GGUF without pulling in a whole inference framework
//! (candle's reader/writer lives inside `candle-core`); this file is the small writer
//! mithrilc needs. `tests/ggml_target.rs` reads its output back with ggml's own
//! `gguf_*` functions.
//!
//! Tensor dimensions are in ggml's order: `dims[0]` is the contiguous one (`ne0`), the
//! reverse of a row-major shape.

use half::{bf16, f16};

/// The data section's alignment (GGUF's default, also written as `general.alignment`).
pub const ALIGNMENT: usize = 32;

/// The longest tensor name ggml keeps (`GGML_MAX_NAME` is 64, with the terminating NUL).
pub const MAX_NAME: usize = 63;

/// A metadata value (the types mithrilc writes).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U32(u32),
    I32(i32),
    Str(String),
    /// An array of strings.
    Strs(Vec<String>),
}

impl Value {
    /// GGUF's type code (`enum gguf_type`).
    fn code(&self) -> u32 {
        match self {
            Value::U32(_) => 4,
            Value::I32(_) => 5,
            Value::Str(_) => 8,
            Value::Strs(_) => 9,
        }
    }
}

/// The element types mithrilc stores (`enum ggml_type` codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorType {
    F32,
    F16,
    /// bfloat16 (the f32's upper half, rounded to nearest even as ggml's
    /// `ggml_compute_fp32_to_bf16`).
    Bf16,
    /// Blocks of 32: an f16 scale and 32 signed bytes (34 bytes).
    Q8_0,
    /// Blocks of 32: an f16 scale and 32 4-bit values offset by 8 (18 bytes).
    Q4_0,
    /// 32-bit integers (gather indices).
    I32,
}

impl TensorType {
    pub fn code(self) -> u32 {
        match self {
            TensorType::F32 => 0,
            TensorType::F16 => 1,
            TensorType::Q4_0 => 2,
            TensorType::Q8_0 => 8,
            TensorType::I32 => 26,
            TensorType::Bf16 => 30,
        }
    }

    /// ggml's name for the type (`GGML_TYPE_<NAME>`).
    pub fn ggml_name(self) -> &'static str {
        match self {
            TensorType::F32 => "F32",
            TensorType::F16 => "F16",
            TensorType::Q4_0 => "Q4_0",
            TensorType::Q8_0 => "Q8_0",
            TensorType::I32 => "I32",
            TensorType::Bf16 => "BF16",
        }
    }

    /// Elements per block (a row's length must be a multiple of it).
    pub fn block(self) -> usize {
        match self {
            TensorType::F32 | TensorType::F16 | TensorType::Bf16 | TensorType::I32 => 1,
            TensorType::Q8_0 | TensorType::Q4_0 => 32,
        }
    }

    /// `values` (row-major, rows of `dims[0]`) in this type, as ggml stores it, taken
    /// one block at a time (a checkpoint's mapped values go straight into the bytes).
    /// Their number must be a multiple of [`Self::block`].
    pub fn encode(self, values: impl IntoIterator<Item = f32>) -> Vec<u8> {
        let mut out = Vec::new();
        let mut block = Vec::with_capacity(32);
        for x in values {
            match self {
                TensorType::F32 => out.extend(x.to_le_bytes()),
                TensorType::F16 => out.extend(f16::from_f32(x).to_le_bytes()),
                TensorType::Bf16 => out.extend(bf16::from_f32(x).to_le_bytes()),
                TensorType::I32 => out.extend((x as i32).to_le_bytes()),
                TensorType::Q8_0 | TensorType::Q4_0 => {
                    block.push(x);
                    if block.len() == 32 {
                        out.extend(if self == TensorType::Q8_0 { quantize_q8_0(&block) } else { quantize_q4_0(&block) });
                        block.clear();
                    }
                }
            }
        }
        out
    }
}

/// One block of Q8_0, as ggml's `quantize_row_q8_0_ref`: scale `max|x| / 127`, each
/// value rounded to the nearest multiple of it.
fn quantize_q8_0(block: &[f32]) -> Vec<u8> {
    let amax = block.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut out = f16::from_f32(d).to_le_bytes().to_vec();
    out.extend(block.iter().map(|x| ((x * id).round() as i8) as u8));
    out
}

/// One block of Q4_0, as ggml's `quantize_row_q4_0_ref`: the value of largest
/// magnitude `m` sets the scale `d = m / -8`; each value becomes `x / d + 8` truncated
/// to 0..15, the first 16 in the low nibbles, the last 16 in the high ones.
fn quantize_q4_0(block: &[f32]) -> Vec<u8> {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &x in block {
        if amax < x.abs() {
            amax = x.abs();
            max = x;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = |x: f32| ((x * id + 8.5) as i32).min(15) as u8;
    let mut out = f16::from_f32(d).to_le_bytes().to_vec();
    out.extend((0..16).map(|j| q(block[j]) | (q(block[j + 16]) << 4)));
    out
}

/// A tensor to write: its name (at most [`MAX_NAME`] bytes), its dimensions in ggml's
/// order and its data already encoded in `ty`.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: TensorType,
    pub data: Vec<u8>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn pad(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(ALIGNMENT) {
        out.push(0);
    }
}

/// The GGUF file of `metadata` (in the order given, after `general.alignment`) and
/// `tensors` (in the order given). The file is allocated at its size up front and each
/// tensor's data dropped once copied into it, so writing takes about the file's size in
/// memory, not twice it.
pub fn write(metadata: &[(String, Value)], tensors: Vec<Tensor>) -> Vec<u8> {
    let data_bytes: usize = tensors.iter().map(|t| t.data.len().next_multiple_of(ALIGNMENT)).sum();
    let mut out = Vec::with_capacity(data_bytes + 4096 + tensors.iter().map(|t| t.name.len() + 64).sum::<usize>());
    out.extend(b"GGUF");
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64 + 1).to_le_bytes());
    let alignment = ("general.alignment".to_string(), Value::U32(ALIGNMENT as u32));
    for (key, value) in std::iter::once(&alignment).chain(metadata) {
        put_str(&mut out, key);
        out.extend(value.code().to_le_bytes());
        match value {
            Value::U32(x) => out.extend(x.to_le_bytes()),
            Value::I32(x) => out.extend(x.to_le_bytes()),
            Value::Str(s) => put_str(&mut out, s),
            Value::Strs(v) => {
                out.extend(Value::Str(String::new()).code().to_le_bytes());
                out.extend((v.len() as u64).to_le_bytes());
                for s in v {
                    put_str(&mut out, s);
                }
            }
        }
    }
    let mut offset = 0usize;
    for t in &tensors {
        put_str(&mut out, &t.name);
        out.extend((t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(t.ty.code().to_le_bytes());
        out.extend((offset as u64).to_le_bytes());
        offset += t.data.len().next_multiple_of(ALIGNMENT);
    }
    pad(&mut out);
    for t in tensors {
        out.extend(t.data);
        pad(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_follows_the_spec() {
        let t = |name: &str, n: usize| Tensor { name: name.into(), dims: vec![n as u64], ty: TensorType::F32, data: TensorType::F32.encode(vec![1.5; n]) };
        let bytes = write(&[("general.architecture".into(), Value::Str("mithrilc".into()))], vec![t("a", 3), t("b", 1)]);
        assert_eq!(&bytes[..4], b"GGUF");
        assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 3);
        assert_eq!(u64::from_le_bytes(bytes[8..16].try_into().unwrap()), 2);
        assert_eq!(u64::from_le_bytes(bytes[16..24].try_into().unwrap()), 2);
        // The data section starts aligned; b's data is 32 bytes after a's (12 bytes, padded).
        assert_eq!(bytes.len() % ALIGNMENT, 0);
        let data = bytes.len() - 2 * ALIGNMENT;
        assert_eq!(&bytes[data..data + 4], &1.5f32.to_le_bytes());
        assert_eq!(&bytes[data + 12..data + 32], &[0u8; 20]);
        assert_eq!(&bytes[data + 32..data + 36], &1.5f32.to_le_bytes());
    }

    #[test]
    fn quantized_blocks_match_ggml_reference_rounding() {
        let x: Vec<f32> = (0..32).map(|i| i as f32 - 12.0).collect();
        let q8 = TensorType::Q8_0.encode(x.iter().copied());
        assert_eq!(q8.len(), 34);
        let d = f16::from_le_bytes([q8[0], q8[1]]).to_f32();
        assert!((d - 19.0 / 127.0).abs() < 1e-4);
        assert_eq!(q8[2] as i8, -80); // -12 / (19/127) = -80.2
        let q4 = TensorType::Q4_0.encode(x.iter().copied());
        assert_eq!(q4.len(), 18);
        let d = f16::from_le_bytes([q4[0], q4[1]]).to_f32();
        assert_eq!(d, 19.0 / -8.0);
        // x[0] = -12: -12 / d + 8.5 = 13.55 -> 13; x[16] = 4: 4 / d + 8.5 = 6.81 -> 6.
        assert_eq!(q4[2], 13 | (6 << 4));
    }
}
