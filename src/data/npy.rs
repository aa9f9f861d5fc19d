//! One NumPy `.npy` array: decoding it from bytes into a [`RawTensor`] and encoding a
//! tensor back, both through the `npyz` crate.
//!
//! Decoding accepts the element types mithrilc holds, each as itself: float16/32/64,
//! int8/16/32/64, uint8/16/32/64 and bool. A little-endian, row-major array is a view
//! of the bytes it was decoded from; any other is converted into memory: Fortran-order
//! arrays are transposed into row-major order, big-endian data is converted by `npyz`.
//! Anything else (f128, complex, strings, records, objects) is a user error naming the
//! file, the array and the NumPy dtype. Every size taken from
//! a header is checked against the bytes actually present before anything is allocated.

use std::io::{self, Write};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use npyz::{DType, Endianness, NpyFile, NpyHeader, Order, TypeChar, TypeStr, WriteOptions, WriterBuilder};

use crate::error::{Error, Result};
use crate::ir::Dtype;
use crate::tensor::{Backing, RawTensor, Tensor};

/// The element types read from a `.npy` file, each with the Rust type `npyz` reads it as.
#[derive(Debug, Clone, Copy)]
enum Elem {
    F16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
}

impl Elem {
    /// The supported element type with this NumPy type code and size, if any.
    fn from_type_str(ts: &TypeStr) -> Option<Elem> {
        let elem = match (ts.type_char(), ts.size_field()) {
            (TypeChar::Float, 2) => Elem::F16,
            (TypeChar::Float, 4) => Elem::F32,
            (TypeChar::Float, 8) => Elem::F64,
            (TypeChar::Int, 1) => Elem::I8,
            (TypeChar::Int, 2) => Elem::I16,
            (TypeChar::Int, 4) => Elem::I32,
            (TypeChar::Int, 8) => Elem::I64,
            (TypeChar::Uint, 1) => Elem::U8,
            (TypeChar::Uint, 2) => Elem::U16,
            (TypeChar::Uint, 4) => Elem::U32,
            (TypeChar::Uint, 8) => Elem::U64,
            (TypeChar::Bool, 1) => Elem::Bool,
            // `TypeChar` is non-exhaustive; every other code and size is unsupported.
            _ => return None,
        };
        Some(elem)
    }

    /// The mithrilc dtype the values are stored as.
    fn dtype(self) -> Dtype {
        match self {
            Elem::F16 => Dtype::F16,
            Elem::F32 => Dtype::F32,
            Elem::F64 => Dtype::F64,
            Elem::I8 => Dtype::I8,
            Elem::I16 => Dtype::I16,
            Elem::I32 => Dtype::I32,
            Elem::I64 => Dtype::I64,
            Elem::U8 => Dtype::U8,
            Elem::U16 => Dtype::U16,
            Elem::U32 => Dtype::U32,
            Elem::U64 => Dtype::U64,
            Elem::Bool => Dtype::Bool,
        }
    }

    /// Size of one element in the file, in bytes.
    fn size(self) -> u64 {
        match self {
            Elem::I8 | Elem::U8 | Elem::Bool => 1,
            Elem::F16 | Elem::I16 | Elem::U16 => 2,
            Elem::F32 | Elem::I32 | Elem::U32 => 4,
            Elem::F64 | Elem::I64 | Elem::U64 => 8,
        }
    }
}

/// The user error for array `name` of `file`.
fn array_error(file: &Path, name: &str, msg: impl std::fmt::Display) -> Error {
    crate::user_error!("cannot read {}: array '{name}': {msg}", file.display())
}

/// Longest stretch of an error message from a parser that is kept: the header parser
/// quotes the header line, which a hostile file can make gigabytes long.
const MAX_PARSER_MESSAGE: usize = 300;

/// A parser's message cut to [`MAX_PARSER_MESSAGE`] characters.
fn clip(msg: impl std::fmt::Display) -> String {
    let msg = msg.to_string();
    match msg.char_indices().nth(MAX_PARSER_MESSAGE) {
        Some((i, _)) => format!("{} ...", &msg[..i]),
        None => msg,
    }
}

/// Refuses a header whose shape has an element count that overflows `u64`, before
/// `npyz` sees it: npyz multiplies the dimensions (and forms prefix products for the
/// strides) unchecked, which panics in debug builds. The header is parsed with the same
/// Python-literal parser npyz uses; anything malformed is left for npyz to report.
fn precheck_shape(bytes: &[u8], file: &Path, name: &str) -> Result<()> {
    // Magic (6 bytes), version (2), then the header length: 2 bytes little-endian in
    // version 1, 4 bytes in versions 2 and 3.
    if bytes.get(..6) != Some(b"\x93NUMPY".as_slice()) {
        return Ok(());
    }
    let len_size = match bytes.get(6) {
        Some(1) => 2,
        Some(_) | None => 4,
    };
    let Some(len_bytes) = bytes.get(8..8 + len_size) else { return Ok(()) };
    let header_len = len_bytes.iter().rev().fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
    let start = 8 + len_size;
    let Some(text) = bytes.get(start..start.saturating_add(header_len)) else {
        // Refused here so that npyz does not first allocate the claimed length.
        return Err(array_error(
            file,
            name,
            format!("invalid .npy data: the header claims {header_len} bytes but the file ends first"),
        ));
    };
    let Ok(text) = std::str::from_utf8(text) else { return Ok(()) };
    let Ok(py_literal::Value::Dict(entries)) = text.trim_end().parse::<py_literal::Value>() else {
        return Ok(());
    };
    for (key, value) in &entries {
        let (py_literal::Value::String(key), py_literal::Value::Tuple(dims) | py_literal::Value::List(dims)) =
            (key, value)
        else {
            continue;
        };
        if key != "shape" {
            continue;
        }
        // Every partial product of the dimensions is zero or at most the product of the
        // non-zero ones, so that product fitting in u64 keeps all of npyz's in range.
        let mut product: Option<u64> = Some(1);
        for dim in dims {
            let py_literal::Value::Integer(dim) = dim else { continue };
            // Negative or oversized dimensions are npyz's to reject; zeros are skipped.
            let Ok(d) = u64::try_from(dim) else { continue };
            if d != 0 {
                product = product.and_then(|p| p.checked_mul(d));
            }
        }
        if product.is_none() {
            return Err(array_error(
                file,
                name,
                format!("invalid .npy data: the element count of shape {} overflows", clip(value)),
            ));
        }
    }
    Ok(())
}

/// Decodes the `.npy` bytes `range` of `backing`, array `name` read from `file` (the
/// path is for messages).
pub(super) fn decode(backing: &Arc<dyn Backing>, range: Range<usize>, file: &Path, name: &str) -> Result<RawTensor> {
    let bytes = backing.bytes().get(range.clone()).unwrap_or_default();
    precheck_shape(bytes, file, name)?;
    let mut rest = bytes;
    let header = NpyHeader::from_reader(&mut rest)
        .map_err(|e| array_error(file, name, format!("invalid .npy data: {}", clip(e))))?;

    let dtype = header.dtype();
    let (elem, endianness) = match &dtype {
        DType::Plain(ts) => (Elem::from_type_str(ts), ts.endianness()),
        DType::Array(..) | DType::Record(_) => (None, Endianness::Little),
    };
    let Some(elem) = elem else {
        return Err(array_error(
            file,
            name,
            format!(
                "unsupported dtype {} (supported: float16/32/64, int8/16/32/64, uint8/16/32/64, bool)",
                dtype.descr()
            ),
        ));
    };

    let shape = header.shape().to_vec();
    let numel = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    let nbytes = numel.and_then(|n| n.checked_mul(elem.size()));
    let Some(nbytes) = nbytes else {
        return Err(array_error(file, name, format!("shape {shape:?} is too large")));
    };
    if nbytes != rest.len() as u64 {
        return Err(array_error(
            file,
            name,
            format!(
                "shape {shape:?} of {} needs {nbytes} bytes of data but the file has {}",
                dtype.descr(),
                rest.len()
            ),
        ));
    }
    let order = header.order();
    // Bool is read through npyz, which refuses bytes other than 0 and 1.
    let as_stored = !matches!(elem, Elem::Bool);
    if as_stored && endianness != Endianness::Big && order == Order::C {
        let data = range.end - rest.len()..range.end;
        return RawTensor::new(elem.dtype(), shape, backing.clone(), data)
            .ok_or_else(|| crate::internal_error!("{}: array '{name}' does not fit its bytes", file.display()));
    }
    let npy = NpyFile::with_header(header, rest);
    let out_dtype = elem.dtype();
    // Each element goes through its own type's bytes (`to_le_bytes`), never an f64, so
    // i64 and u64 beyond 2^53 stay exact.
    let read = match elem {
        Elem::F16 => read_as(npy, |x: half::f16| x.to_le_bytes()),
        Elem::F32 => read_as(npy, |x: f32| x.to_le_bytes()),
        Elem::F64 => read_as(npy, |x: f64| x.to_le_bytes()),
        Elem::I8 => read_as(npy, |x: i8| x.to_le_bytes()),
        Elem::I16 => read_as(npy, |x: i16| x.to_le_bytes()),
        Elem::I32 => read_as(npy, |x: i32| x.to_le_bytes()),
        Elem::I64 => read_as(npy, |x: i64| x.to_le_bytes()),
        Elem::U8 => read_as(npy, |x: u8| x.to_le_bytes()),
        Elem::U16 => read_as(npy, |x: u16| x.to_le_bytes()),
        Elem::U32 => read_as(npy, |x: u32| x.to_le_bytes()),
        Elem::U64 => read_as(npy, |x: u64| x.to_le_bytes()),
        Elem::Bool => read_as(npy, |x: bool| [u8::from(x)]),
    };
    let data = read.map_err(|e| array_error(file, name, format!("invalid .npy data: {e}")))?;

    let data = match order {
        Order::C => data,
        Order::Fortran => fortran_to_c(&shape, &data, out_dtype.size()),
    };
    RawTensor::owned(out_dtype, shape, data).ok_or_else(|| crate::internal_error!("{}: array '{name}' does not fit its bytes", file.display()))
}

/// Reads every element as `T` and appends its `N` little-endian bytes.
fn read_as<T: npyz::Deserialize, const N: usize>(npy: NpyFile<&[u8]>, bytes: impl Fn(T) -> [u8; N]) -> io::Result<Vec<u8>> {
    let reader = npy.data::<T>().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    let mut out = Vec::with_capacity(reader.len() as usize * N);
    for value in reader {
        out.extend_from_slice(&bytes(value?));
    }
    Ok(out)
}

/// Reorders column-major (Fortran) elements of `size` bytes of `shape` into row-major
/// order.
///
/// Element `(i0, .., in)` sits at offset `sum(ik * prod(shape[..k]))` in the file. The
/// caller has checked that `data` holds the product of `shape` elements.
fn fortran_to_c(shape: &[u64], data: &[u8], size: usize) -> Vec<u8> {
    let rank = shape.len();
    let mut f_strides = vec![0u64; rank];
    let mut acc = 1u64;
    for k in 0..rank {
        f_strides[k] = acc;
        acc = acc.saturating_mul(shape[k]);
    }
    let mut out = Vec::with_capacity(data.len());
    let mut index = vec![0u64; rank];
    for _ in 0..data.len() / size {
        let offset = index.iter().zip(&f_strides).map(|(i, s)| i * s).sum::<u64>() as usize * size;
        out.extend_from_slice(&data[offset..offset + size]);
        // Advance the row-major multi-index: the last axis fastest.
        for k in (0..rank).rev() {
            index[k] += 1;
            if index[k] < shape[k] {
                break;
            }
            index[k] = 0;
        }
    }
    out
}

/// The NumPy dtype a tensor of `dtype` is written as (NumPy's `dtype.str`). bf16 has
/// no NumPy dtype, so it is written as f32, which holds every bf16 value exactly. Nor
/// have the narrow floats: each element is written as its code, a `u1` (what
/// `a.view(np.uint8)` gives of an ml_dtypes array, and what the C target holds); the
/// 4- and 2-bit integers are written as `i1` and `u1` values.
pub fn npy_descr(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F32 | Dtype::Bf16 => "<f4",
        Dtype::F64 => "<f8",
        Dtype::F16 => "<f2",
        Dtype::I32 => "<i4",
        Dtype::I64 => "<i8",
        Dtype::Bool => "|b1",
        Dtype::I8 => "|i1",
        Dtype::U8 => "|u1",
        Dtype::I16 => "<i2",
        Dtype::U16 => "<u2",
        Dtype::U32 => "<u4",
        Dtype::U64 => "<u8",
        Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz | Dtype::F4E2M1 => "|u1",
        Dtype::I4 | Dtype::I2 => "|i1",
        Dtype::U4 | Dtype::U2 => "|u1",
    }
}

/// Writes `t` as a little-endian, C-order `.npy` array to `w`. The caller has checked
/// that `t.data` holds the product of `t.shape` elements (npyz refuses any other count).
pub(super) fn encode<W: Write>(w: W, t: &Tensor) -> io::Result<()> {
    let descr = npy_descr(t.dtype);
    let data = t.data.iter().copied();
    match t.dtype {
        Dtype::F32 | Dtype::Bf16 => write_as(w, descr, &t.shape, data.map(|x| x as f32)),
        Dtype::F64 => write_as(w, descr, &t.shape, data),
        Dtype::F16 => write_as(w, descr, &t.shape, data.map(half::f16::from_f64)),
        // Integer tensors hold whole values within range (see `Tensor::new`).
        Dtype::I32 => write_as(w, descr, &t.shape, data.map(|x| x as i32)),
        Dtype::I64 => write_as(w, descr, &t.shape, data.map(|x| x as i64)),
        Dtype::Bool => write_as(w, descr, &t.shape, data.map(|x| x != 0.0)),
        Dtype::I8 => write_as(w, descr, &t.shape, data.map(|x| x as i8)),
        Dtype::U8 => write_as(w, descr, &t.shape, data.map(|x| x as u8)),
        Dtype::I16 => write_as(w, descr, &t.shape, data.map(|x| x as i16)),
        Dtype::U16 => write_as(w, descr, &t.shape, data.map(|x| x as u16)),
        Dtype::U32 => write_as(w, descr, &t.shape, data.map(|x| x as u32)),
        Dtype::U64 => write_as(w, descr, &t.shape, data.map(|x| x as u64)),
        Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz | Dtype::F4E2M1 => write_as(w, descr, &t.shape, data.map(|x| crate::narrow::encode(t.dtype, x))),
        Dtype::I4 | Dtype::I2 => write_as(w, descr, &t.shape, data.map(|x| x as i8)),
        Dtype::U4 | Dtype::U2 => write_as(w, descr, &t.shape, data.map(|x| x as u8)),
    }
}

fn write_as<W: Write, T: npyz::Serialize>(
    w: W,
    descr: &str,
    shape: &[u64],
    values: impl Iterator<Item = T>,
) -> io::Result<()> {
    let ts: TypeStr =
        descr.parse().map_err(|e| io::Error::other(format!("internal error: bad dtype {descr}: {e}")))?;
    let mut writer = WriteOptions::<T>::new().dtype(DType::Plain(ts)).shape(shape).writer(w).begin_nd()?;
    writer.extend(values)?;
    writer.finish()
}
