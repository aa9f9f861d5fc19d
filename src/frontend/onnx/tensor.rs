//! `TensorProto`s as arrays: element types, inline data (`raw_data` or the typed
//! fields) and external data (another file beside the model, mapped).
//!
//! Every size comes from the file and is checked: the element count against the
//! bytes present, an external file's `offset` and `length` against its size, and its
//! `location` against the model's folder, which it may not leave.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use prost::Message;

use super::proto::tensor_proto::{DataLocation, DataType};
use super::proto::TensorProto;
use crate::error::{Error, Result};
use crate::ir::Dtype;
use crate::tensor::{Backing, RawTensor};

/// The IR's element type for an ONNX `DataType` code, or why there is none.
pub fn dtype(code: i32) -> std::result::Result<Dtype, String> {
    let t = DataType::try_from(code).map_err(|_| format!("unknown ONNX element type {code}"))?;
    Ok(match t {
        DataType::Float => Dtype::F32,
        DataType::Double => Dtype::F64,
        DataType::Float16 => Dtype::F16,
        DataType::Bfloat16 => Dtype::Bf16,
        DataType::Int32 => Dtype::I32,
        DataType::Int64 => Dtype::I64,
        DataType::Bool => Dtype::Bool,
        DataType::Int8 => Dtype::I8,
        DataType::Uint8 => Dtype::U8,
        DataType::Int16 => Dtype::I16,
        DataType::Uint16 => Dtype::U16,
        DataType::Uint32 => Dtype::U32,
        DataType::Uint64 => Dtype::U64,
        DataType::Float8e4m3fn => Dtype::F8E4M3Fn,
        DataType::Float8e4m3fnuz => Dtype::F8E4M3Fnuz,
        DataType::Float8e5m2 => Dtype::F8E5M2,
        DataType::Float8e5m2fnuz => Dtype::F8E5M2Fnuz,
        DataType::Float4e2m1 => Dtype::F4E2M1,
        DataType::Int4 => Dtype::I4,
        DataType::Uint4 => Dtype::U4,
        DataType::Int2 => Dtype::I2,
        DataType::Uint2 => Dtype::U2,
        other => return Err(format!("element type {} is not supported (mithrilc's are {})", type_name(other), TYPES_READ)),
    })
}

/// The ONNX element types read, by ONNX's names (the error that refuses another lists them).
const TYPES_READ: &str = "float32, float64, float16, bfloat16, float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz, float4e2m1, int2, int4, int8, int16, int32, int64, uint2, uint4, uint8, uint16, uint32, uint64 and bool";

/// ONNX's name of an element type, in lower case (`uint8`, `float8e4m3fn`).
fn type_name(t: DataType) -> String {
    let name = t.as_str_name().to_ascii_lowercase();
    match name.as_str() {
        "float" => "float32".into(),
        "double" => "float64".into(),
        _ => name,
    }
}

/// External files a model's tensors are in, mapped once each.
#[derive(Default)]
pub struct External {
    maps: HashMap<PathBuf, Arc<dyn Backing>>,
}

/// Reads a tensor of a model whose file is `model_path` (mapped as `file`; inline
/// `raw_data` is a view of it, external data a view of its own file).
pub fn read(t: &TensorProto, model_path: &Path, file: &super::model::File, external: &mut External) -> Result<RawTensor> {
    let dtype = dtype(t.data_type.unwrap_or(0)).map_err(Error::user)?;
    let shape = dims(&t.dims)?;
    let numel = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or_else(|| Error::user(format!("shape {shape:?} has too many elements")))?;
    let size = numel.checked_mul(dtype.size() as u64).and_then(|s| usize::try_from(s).ok()).ok_or_else(|| Error::user(format!("shape {shape:?} is too large")))?;
    let short = |held: usize| Error::user(format!("its data holds {held} bytes, and {dtype}{shape:?} takes {size}"));
    if t.data_location == Some(DataLocation::External as i32) {
        let (backing, range) = external.locate(t, model_path)?;
        let len = range.len();
        if dtype.bits() < 8 {
            return unpacked(dtype, shape, numel, &backing.bytes()[range]);
        }
        return RawTensor::new(dtype, shape.clone(), backing, range).ok_or_else(|| short(len));
    }
    if dtype.bits() < 8 {
        return unpacked(dtype, shape, numel, &packed_bytes(t));
    }
    if let Some(raw) = &t.raw_data {
        return match file.range_of(raw) {
            Some(range) => RawTensor::new(dtype, shape.clone(), file.backing.clone(), range).ok_or_else(|| short(raw.len())),
            None => RawTensor::owned(dtype, shape.clone(), raw.to_vec()).ok_or_else(|| short(raw.len())),
        };
    }
    let bytes = typed_bytes(t, dtype, numel)?;
    let held = bytes.len();
    RawTensor::owned(dtype, shape.clone(), bytes).ok_or_else(|| short(held))
}

/// The packed elements of a tensor of a sub-byte type: its `raw_data`, else the low
/// byte of each `int32_data` entry (each holds a byte's worth of elements).
fn packed_bytes(t: &TensorProto) -> std::borrow::Cow<'_, [u8]> {
    match &t.raw_data {
        Some(raw) => std::borrow::Cow::Borrowed(&raw[..]),
        None => std::borrow::Cow::Owned(t.int32_data.iter().map(|&v| v as u8).collect()),
    }
}

/// A tensor of sub-byte type `dtype` from its packed elements (several a byte, low bits
/// first), one byte each as mithrilc holds them.
fn unpacked(dtype: Dtype, shape: Vec<u64>, numel: u64, packed: &[u8]) -> Result<RawTensor> {
    let per = (8 / dtype.bits()) as u64;
    let n = usize::try_from(numel).map_err(|_| Error::user(format!("shape {shape:?} is too large")))?;
    let bytes = crate::narrow::unpack(dtype, packed, n)
        .ok_or_else(|| Error::user(format!("its data holds {} bytes, and {dtype}{shape:?} takes {} ({per} elements a byte)", packed.len(), numel.div_ceil(per))))?;
    RawTensor::owned(dtype, shape.clone(), bytes).ok_or_else(|| Error::internal(format!("unpacked {dtype}{shape:?} has another size")))
}

/// Dimensions from the file: none negative.
fn dims(dims: &[i64]) -> Result<Vec<u64>> {
    dims.iter().map(|&d| u64::try_from(d).map_err(|_| Error::user(format!("dimension {d} is negative")))).collect()
}

/// The elements of the typed fields (`float_data`, `int32_data`, ...) as
/// little-endian bytes of `dtype`; their count must be `numel` (checked by the caller
/// through the byte count).
fn typed_bytes(t: &TensorProto, dtype: Dtype, numel: u64) -> Result<Vec<u8>> {
    let held = match dtype {
        Dtype::F32 => t.float_data.len(),
        Dtype::F64 => t.double_data.len(),
        Dtype::I64 => t.int64_data.len(),
        Dtype::U32 | Dtype::U64 => t.uint64_data.len(),
        Dtype::I8 | Dtype::U8 | Dtype::I16 | Dtype::U16 | Dtype::I32 | Dtype::Bool | Dtype::F16 | Dtype::Bf16 => t.int32_data.len(),
        Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz => t.int32_data.len(),
        // (read packed, by `unpacked`)
        Dtype::F4E2M1 | Dtype::I4 | Dtype::U4 | Dtype::I2 | Dtype::U2 => return Err(Error::internal(format!("{dtype} is read packed"))),
    };
    if held as u64 != numel {
        return Err(Error::user(format!("it holds {held} elements, and its shape {:?} has {numel}", t.dims)));
    }
    let mut out = Vec::with_capacity(held * dtype.size());
    match dtype {
        Dtype::F32 => t.float_data.iter().for_each(|v| out.extend(v.to_le_bytes())),
        Dtype::F64 => t.double_data.iter().for_each(|v| out.extend(v.to_le_bytes())),
        Dtype::I64 => t.int64_data.iter().for_each(|v| out.extend(v.to_le_bytes())),
        Dtype::I32 => t.int32_data.iter().for_each(|v| out.extend(v.to_le_bytes())),
        Dtype::Bool => t.int32_data.iter().for_each(|&v| out.push(u8::from(v != 0))),
        // The narrow integers in an int32 each, uint32 and uint64 in a uint64 each: the
        // low bytes (`as` keeps them).
        Dtype::I8 => t.int32_data.iter().for_each(|&v| out.extend((v as i8).to_le_bytes())),
        Dtype::U8 => t.int32_data.iter().for_each(|&v| out.extend((v as u8).to_le_bytes())),
        Dtype::I16 => t.int32_data.iter().for_each(|&v| out.extend((v as i16).to_le_bytes())),
        Dtype::U16 => t.int32_data.iter().for_each(|&v| out.extend((v as u16).to_le_bytes())),
        Dtype::U32 => t.uint64_data.iter().for_each(|&v| out.extend((v as u32).to_le_bytes())),
        Dtype::U64 => t.uint64_data.iter().for_each(|&v| out.extend(v.to_le_bytes())),
        // The 16 bits of each half float, in an int32 each.
        Dtype::F16 | Dtype::Bf16 => t.int32_data.iter().for_each(|&v| out.extend((v as u16).to_le_bytes())),
        // The 8 bits of each float8, in an int32 each.
        Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz => t.int32_data.iter().for_each(|&v| out.push(v as u8)),
        Dtype::F4E2M1 | Dtype::I4 | Dtype::U4 | Dtype::I2 | Dtype::U2 => {}
    }
    Ok(out)
}

impl External {
    /// The mapped file and byte range of an external tensor: its `location` (inside the
    /// model's folder), `offset` (default 0) and `length` (default: to the end).
    fn locate(&mut self, t: &TensorProto, model_path: &Path) -> Result<(Arc<dyn Backing>, std::ops::Range<usize>)> {
        let key = |k: &str| t.external_data.iter().find(|e| e.key.as_deref() == Some(k)).and_then(|e| e.value.clone());
        let location = key("location").ok_or_else(|| Error::user("its external data has no location"))?;
        let number = |k: &str| -> Result<Option<usize>> {
            key(k).map(|v| v.trim().parse::<usize>().map_err(|_| Error::user(format!("its external data's {k} {v:?} is not a byte count")))).transpose()
        };
        let (offset, length) = (number("offset")?.unwrap_or(0), number("length")?);
        let path = inside_model_folder(model_path, &location)?;
        let backing = match self.maps.get(&path) {
            Some(b) => b.clone(),
            None => {
                let b = crate::data::map_file(&path)?;
                self.maps.insert(path.clone(), b.clone());
                b
            }
        };
        let held = backing.bytes().len();
        let end = match length {
            Some(len) => offset.checked_add(len),
            None => Some(held),
        };
        match end {
            Some(end) if offset <= end && end <= held => Ok((backing, offset..end)),
            _ => Err(Error::user(format!(
                "its external data ({location}, offset {offset}, length {}) lies past the end of the file ({held} bytes)",
                length.map_or("to the end".to_string(), |l| l.to_string())
            ))),
        }
    }
}

/// The file `location` names, relative to the model's folder, which it may not leave
/// (no absolute path, no `..`, no link out of it).
fn inside_model_folder(model_path: &Path, location: &str) -> Result<PathBuf> {
    let leaves = || Error::user(format!("its external data's location {location:?} is outside the model's folder")).note("ONNX external data must lie in the model's folder or below it");
    let rel = Path::new(location);
    if location.is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(leaves());
    }
    let folder = model_path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let path = folder.join(rel);
    let cannot = |p: &Path, e: std::io::Error| Error::user(format!("cannot read {}: {}", p.display(), crate::error::io_message(&e)));
    let (real_folder, real) = (folder.canonicalize().map_err(|e| cannot(folder, e))?, path.canonicalize().map_err(|e| cannot(&path, e))?);
    if !real.starts_with(&real_folder) {
        return Err(leaves());
    }
    Ok(real)
}

/// Reads a serialized `TensorProto` file (ONNX's test data: `input_0.pb`) as one
/// array named by the tensor's name (or, without one, the file's stem).
pub fn read_tensor_file(path: &Path) -> Result<(String, RawTensor)> {
    let backing = crate::data::map_file(path)?;
    let t = TensorProto::decode(backing.bytes()).map_err(|e| Error::user(format!("{}: not a valid ONNX TensorProto: {e}", path.display())))?;
    let name = match t.name.as_deref() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
    };
    if t.data_location == Some(DataLocation::External as i32) {
        return Err(Error::user(format!("{}: tensor {name} has external data, which a data file may not", path.display())));
    }
    let dtype = dtype(t.data_type.unwrap_or(0)).map_err(|e| Error::user(format!("{}: tensor {name}: {e}", path.display())))?;
    let shape = dims(&t.dims).map_err(|e| e.context(format!("{}: tensor {name}", path.display())))?;
    if dtype.bits() < 8 {
        let numel = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).unwrap_or(u64::MAX);
        let t = unpacked(dtype, shape, numel, &packed_bytes(&t)).map_err(|e| e.context(format!("{}: tensor {name}", path.display())))?;
        return Ok((name, t));
    }
    let tensor = match &t.raw_data {
        Some(raw) => RawTensor::owned(dtype, shape.clone(), raw.to_vec()),
        None => {
            let numel = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).unwrap_or(u64::MAX);
            RawTensor::owned(dtype, shape.clone(), typed_bytes(&t, dtype, numel).map_err(|e| e.context(format!("{}: tensor {name}", path.display())))?)
        }
    };
    let tensor = tensor.ok_or_else(|| Error::user(format!("{}: tensor {name}: its data does not fill {dtype}{shape:?}", path.display())))?;
    Ok((name, tensor))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The integer types: int8 to uint16 in `int32_data`, uint32 and uint64 in
    /// `uint64_data`, each element's low bytes as the type's own (values beyond 2^53
    /// exactly), and the types that remain refused named with those that are read.
    #[test]
    fn integer_types_from_typed_fields() {
        let typed = |code: DataType, int32: Vec<i32>, uint64: Vec<u64>| {
            let t = TensorProto { data_type: Some(code as i32), dims: vec![2], int32_data: int32, uint64_data: uint64, ..Default::default() };
            let d = dtype(code as i32).expect("a type mithrilc has");
            (d, typed_bytes(&t, d, 2).expect("two elements"))
        };
        assert_eq!(typed(DataType::Int8, vec![-128, 127], vec![]), (Dtype::I8, vec![0x80, 0x7f]));
        assert_eq!(typed(DataType::Uint8, vec![0, 255], vec![]), (Dtype::U8, vec![0, 0xff]));
        assert_eq!(typed(DataType::Int16, vec![-2, 258], vec![]), (Dtype::I16, vec![0xfe, 0xff, 2, 1]));
        assert_eq!(typed(DataType::Uint16, vec![65535, 1], vec![]), (Dtype::U16, vec![0xff, 0xff, 1, 0]));
        assert_eq!(typed(DataType::Uint32, vec![], vec![4294967295, 256]), (Dtype::U32, vec![0xff, 0xff, 0xff, 0xff, 0, 1, 0, 0]));
        let big: Vec<u8> = [u64::MAX, (1 << 53) + 1].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(typed(DataType::Uint64, vec![], vec![u64::MAX, (1 << 53) + 1]), (Dtype::U64, big));
        // The count is of the type's own field.
        let t = TensorProto { data_type: Some(DataType::Uint32 as i32), dims: vec![2], int32_data: vec![1, 2], ..Default::default() };
        assert_eq!(typed_bytes(&t, Dtype::U32, 2).unwrap_err().to_string(), "it holds 0 elements, and its shape [2] has 2");
        assert_eq!(
            dtype(DataType::Float8e8m0 as i32).unwrap_err(),
            "element type float8e8m0 is not supported (mithrilc's are float32, float64, float16, bfloat16, float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz, float4e2m1, int2, int4, int8, int16, int32, int64, uint2, uint4, uint8, uint16, uint32, uint64 and bool)"
        );
    }

    /// The narrow types: float8 one a byte (raw) or an int32 each, the 4- and 2-bit
    /// types packed, low bits first, in `raw_data` or in the low byte of each
    /// `int32_data` entry (ONNX's test_cast_FLOAT_to_INT4 and _UINT2 outputs), a short
    /// last byte padded; a byte count that does not fit the shape refused.
    #[test]
    fn narrow_types_unpacked() {
        let read = |code: DataType, dims: Vec<i64>, raw: Option<Vec<u8>>, int32: Vec<i32>| {
            let t = TensorProto { data_type: Some(code as i32), dims, raw_data: raw.map(Into::into), int32_data: int32, name: Some("t".into()), ..Default::default() };
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.pb");
            std::fs::write(&path, t.encode_to_vec()).unwrap();
            read_tensor_file(&path).map(|(_, r)| r.to_tensor())
        };
        let i4 = read(DataType::Int4, vec![5], Some(vec![0x87, 0xa9, 0x0b]), vec![]).unwrap();
        assert_eq!((i4.dtype, i4.data), (Dtype::I4, vec![7.0, -8.0, -7.0, -6.0, -5.0]));
        let u2 = read(DataType::Uint2, vec![7, 1], None, vec![0x39, 0x39]).unwrap();
        assert_eq!((u2.dtype, u2.data), (Dtype::U2, vec![1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0]));
        let f4 = read(DataType::Float4e2m1, vec![3], Some(vec![0xe2, 0x07]), vec![]).unwrap();
        assert_eq!(f4.data, vec![1.0, -4.0, 6.0]);
        let f8 = read(DataType::Float8e4m3fn, vec![3], None, vec![0x7e, 0x2f, 0xfe]).unwrap();
        assert_eq!(f8.data, vec![448.0, 0.46875, -448.0]);
        let f8 = read(DataType::Float8e5m2, vec![2], Some(vec![0x7c, 0x3c]), vec![]).unwrap();
        assert_eq!(f8.data, vec![f64::INFINITY, 1.0]);
        let short = read(DataType::Int4, vec![5], Some(vec![0x87, 0xa9]), vec![]).unwrap_err().to_string();
        assert!(short.ends_with("tensor t: its data holds 2 bytes, and i4[5] takes 3 (2 elements a byte)"), "{short}");
    }
}
