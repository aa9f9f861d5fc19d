//! Host tensors: concrete arrays used for the interpreter and data files, and the
//! constants of the IR and of compiled programs.
//!
//! A [`Tensor`] stores its elements as `f64` whatever the dtype: every f32/f16/bf16/
//! i8/u8/i16/u16/i32/u32/bool value, and every i64 and u64 up to 2^53 in magnitude, is
//! exact in f64 (larger 64-bit integers round to the nearest f64: the interpreter's
//! one inexactness; files and weights keep them exactly, see [`RawTensor`]). Values are rounded to
//! their dtype when a tensor is made with [`Tensor::new`], so an f32 tensor holds
//! exactly f32 values. A [`Constant`] holds the same values in their own dtype (an f32
//! constant takes 4 bytes per element, not 8) and shares them between clones: a model
//! may embed constants of many megabytes, which the graph, its copies and the program
//! all hold. A [`RawTensor`] is a tensor as a file stores it (little-endian elements of
//! its dtype, often in a mapped file): parameters on their way from a checkpoint to a
//! weights blob, which never take the f64 form.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::sync::Arc;

use crate::ir::Dtype;

#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub data: Vec<f64>,
}

impl Tensor {
    /// A tensor of `dtype`, rounding every element to that dtype.
    ///
    /// The caller guarantees `data.len()` is the product of `shape` (checked in debug).
    pub fn new(dtype: Dtype, shape: Vec<u64>, mut data: Vec<f64>) -> Tensor {
        debug_assert_eq!(Some(data.len() as u64), shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)));
        for x in &mut data {
            *x = round_to(dtype, *x);
        }
        Tensor { dtype, shape, data }
    }

    pub fn scalar(dtype: Dtype, value: f64) -> Tensor {
        Tensor::new(dtype, Vec::new(), vec![value])
    }

    pub fn numel(&self) -> usize {
        self.data.len()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<usize> {
        strides(&self.shape)
    }
}

/// Row-major strides (in elements) of a shape.
pub fn strides(shape: &[u64]) -> Vec<usize> {
    let mut out = vec![0usize; shape.len()];
    let mut acc = 1usize;
    for i in (0..shape.len()).rev() {
        out[i] = acc;
        acc *= shape[i] as usize;
    }
    out
}

/// Rounds `x` to a value of `dtype`: floats to the nearest value, bool to `x != 0`.
/// An integer type takes the value truncated toward zero (NaN as 0) and, for the
/// types of up to 32 bits, wrapped modulo 2^bits into the type's range, as C converts
/// an integer to a narrower integer type (`(uint8_t)300 == 44`, `(int8_t)200 == -56`),
/// so that an integer op's result wraps as C's does. i64 and u64 saturate instead: an
/// f64 holds their values exactly only up to 2^53 in magnitude, and i64::MAX and
/// u64::MAX round to 2^63 and 2^64, which must stay the maxima. Infinities and values
/// beyond 2^64 in magnitude, which no integer op produces, saturate too.
///
/// A float converted to an integer type by a cast saturates: [`float_to_int`].
pub fn round_to(dtype: Dtype, x: f64) -> f64 {
    match dtype {
        Dtype::F64 => x,
        Dtype::F32 => x as f32 as f64,
        Dtype::F16 => half::f16::from_f64(x).to_f64(),
        Dtype::Bf16 => half::bf16::from_f64(x).to_f64(),
        Dtype::Bool => {
            if x != 0.0 { 1.0 } else { 0.0 }
        }
        Dtype::I8 | Dtype::U8 | Dtype::I16 | Dtype::U16 | Dtype::I32 | Dtype::U32 | Dtype::I64 | Dtype::U64 => wrap_int(dtype, x),
        Dtype::I4 | Dtype::U4 | Dtype::I2 | Dtype::U2 => wrap_int(dtype, x),
        Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz | Dtype::F4E2M1 => crate::narrow::round(dtype, x),
    }
}

/// [`round_to`] for an integer type.
fn wrap_int(dtype: Dtype, x: f64) -> f64 {
    let Some((lo, hi)) = dtype.int_range() else { return x };
    if x.is_nan() {
        return 0.0;
    }
    // (+ 0.0: truncation leaves -0.0 for -0.5, and an integer has no sign of zero)
    let t = x.trunc() + 0.0;
    if (lo..=hi).contains(&t) {
        return t;
    }
    let bits = dtype.bits();
    if bits == 64 || t.abs() >= 18446744073709551616.0 {
        return t.clamp(lo, hi);
    }
    // |t| < 2^64: exact in an i128, and wrapped there.
    let m = (t as i128).rem_euclid(1i128 << bits);
    let m = if dtype.is_signed_int() && m >= 1i128 << (bits - 1) { m - (1i128 << bits) } else { m };
    m as f64
}

/// A float converted to integer type `dtype` as a cast converts it (in the interpreter
/// and in every target): truncated toward zero, saturating at the type's limits, NaN
/// as 0. C leaves an out-of-range conversion undefined; mithrilc defines it this way
/// (`mithril_ops.h`'s `mr_f2*` helpers compute the same). The 4- and 2-bit integers
/// wrap instead, as ONNX's reference (ml_dtypes) converts to them: truncated, then
/// modulo 2^bits, NaN and infinities as 0. Any other `dtype` is [`round_to`]'s.
pub fn float_to_int(dtype: Dtype, x: f64) -> f64 {
    match dtype.int_range() {
        Some(_) if dtype.bits() < 8 && !x.is_finite() => 0.0,
        Some(_) if dtype.bits() < 8 => round_to(dtype, x % 256.0),
        Some(_) if x.is_nan() => 0.0,
        Some((lo, hi)) => x.trunc().clamp(lo, hi) + 0.0,
        None => round_to(dtype, x),
    }
}

/// A constant tensor of the IR ([`crate::ir::Graph::consts`]) or of a compiled
/// program: its elements in its own dtype, shared by its clones. Made from a
/// [`Tensor`] (whose values are already rounded to the dtype), so it holds exactly
/// the same values; [`Constant::to_tensor`] widens them back for the interpreter.
#[derive(Clone)]
pub struct Constant {
    shape: Vec<u64>,
    data: Arc<Elements>,
}

/// Elements in their own type (the variant is the dtype).
enum Elements {
    F64(Vec<f64>),
    F32(Vec<f32>),
    F16(Vec<half::f16>),
    Bf16(Vec<half::bf16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    I16(Vec<i16>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    /// A type of 8 bits or fewer of [`crate::narrow`], each element as the byte
    /// [`crate::narrow::to_byte`] makes.
    Narrow(Dtype, Vec<u8>),
}

impl Constant {
    /// A constant of `dtype` with the given values, each rounded to `dtype` as
    /// [`Tensor::new`] rounds it. The caller guarantees `data.len()` is the product of
    /// `shape` (checked in debug).
    pub fn from_values(dtype: Dtype, shape: Vec<u64>, data: impl ExactSizeIterator<Item = f64>) -> Constant {
        debug_assert_eq!(Some(data.len() as u64), shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)));
        let data = match dtype {
            Dtype::F64 => Elements::F64(data.collect()),
            Dtype::F32 => Elements::F32(data.map(|x| x as f32).collect()),
            Dtype::F16 => Elements::F16(data.map(half::f16::from_f64).collect()),
            Dtype::Bf16 => Elements::Bf16(data.map(half::bf16::from_f64).collect()),
            // Through `round_to`: truncation toward zero, NaN as 0, wrapped (saturated
            // for 64 bits) into the type's range.
            Dtype::I32 => Elements::I32(data.map(|x| round_to(Dtype::I32, x) as i32).collect()),
            Dtype::I64 => Elements::I64(data.map(|x| round_to(Dtype::I64, x) as i64).collect()),
            Dtype::Bool => Elements::Bool(data.map(|x| x != 0.0).collect()),
            Dtype::I8 => Elements::I8(data.map(|x| round_to(Dtype::I8, x) as i8).collect()),
            Dtype::U8 => Elements::U8(data.map(|x| round_to(Dtype::U8, x) as u8).collect()),
            Dtype::I16 => Elements::I16(data.map(|x| round_to(Dtype::I16, x) as i16).collect()),
            Dtype::U16 => Elements::U16(data.map(|x| round_to(Dtype::U16, x) as u16).collect()),
            Dtype::U32 => Elements::U32(data.map(|x| round_to(Dtype::U32, x) as u32).collect()),
            Dtype::U64 => Elements::U64(data.map(|x| round_to(Dtype::U64, x) as u64).collect()),
            Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz | Dtype::F4E2M1 | Dtype::I4 | Dtype::U4 | Dtype::I2 | Dtype::U2 => {
                Elements::Narrow(dtype, data.map(|x| crate::narrow::to_byte(dtype, x)).collect())
            }
        };
        Constant { shape, data: Arc::new(data) }
    }

    pub fn scalar(dtype: Dtype, value: f64) -> Constant {
        Constant::from_values(dtype, Vec::new(), std::iter::once(value))
    }

    pub fn dtype(&self) -> Dtype {
        match &*self.data {
            Elements::F64(_) => Dtype::F64,
            Elements::F32(_) => Dtype::F32,
            Elements::F16(_) => Dtype::F16,
            Elements::Bf16(_) => Dtype::Bf16,
            Elements::I32(_) => Dtype::I32,
            Elements::I64(_) => Dtype::I64,
            Elements::Bool(_) => Dtype::Bool,
            Elements::I8(_) => Dtype::I8,
            Elements::U8(_) => Dtype::U8,
            Elements::I16(_) => Dtype::I16,
            Elements::U16(_) => Dtype::U16,
            Elements::U32(_) => Dtype::U32,
            Elements::U64(_) => Dtype::U64,
            Elements::Narrow(d, _) => *d,
        }
    }

    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    pub fn numel(&self) -> usize {
        match &*self.data {
            Elements::F64(v) => v.len(),
            Elements::F32(v) => v.len(),
            Elements::F16(v) => v.len(),
            Elements::Bf16(v) => v.len(),
            Elements::I32(v) => v.len(),
            Elements::I64(v) => v.len(),
            Elements::Bool(v) => v.len(),
            Elements::I8(v) => v.len(),
            Elements::U8(v) => v.len(),
            Elements::I16(v) => v.len(),
            Elements::U16(v) => v.len(),
            Elements::U32(v) => v.len(),
            Elements::U64(v) => v.len(),
            Elements::Narrow(_, v) => v.len(),
        }
    }

    /// Element `i` (row-major), as the f64 a [`Tensor`] would hold.
    pub fn get(&self, i: usize) -> Option<f64> {
        Some(match &*self.data {
            Elements::F64(v) => *v.get(i)?,
            Elements::F32(v) => f64::from(*v.get(i)?),
            Elements::F16(v) => v.get(i)?.to_f64(),
            Elements::Bf16(v) => v.get(i)?.to_f64(),
            Elements::I32(v) => f64::from(*v.get(i)?),
            Elements::I64(v) => *v.get(i)? as f64,
            Elements::Bool(v) => f64::from(u8::from(*v.get(i)?)),
            Elements::I8(v) => f64::from(*v.get(i)?),
            Elements::U8(v) => f64::from(*v.get(i)?),
            Elements::I16(v) => f64::from(*v.get(i)?),
            Elements::U16(v) => f64::from(*v.get(i)?),
            Elements::U32(v) => f64::from(*v.get(i)?),
            Elements::U64(v) => *v.get(i)? as f64,
            Elements::Narrow(d, v) => crate::narrow::from_byte(*d, *v.get(i)?),
        })
    }

    /// Every element in row-major order, as the f64s a [`Tensor`] would hold.
    pub fn values(&self) -> Box<dyn Iterator<Item = f64> + '_> {
        match &*self.data {
            Elements::F64(v) => Box::new(v.iter().copied()),
            Elements::F32(v) => Box::new(v.iter().map(|&x| f64::from(x))),
            Elements::F16(v) => Box::new(v.iter().map(|x| x.to_f64())),
            Elements::Bf16(v) => Box::new(v.iter().map(|x| x.to_f64())),
            Elements::I32(v) => Box::new(v.iter().map(|&x| f64::from(x))),
            Elements::I64(v) => Box::new(v.iter().map(|&x| x as f64)),
            Elements::Bool(v) => Box::new(v.iter().map(|&x| f64::from(u8::from(x)))),
            Elements::I8(v) => Box::new(v.iter().map(|&x| f64::from(x))),
            Elements::U8(v) => Box::new(v.iter().map(|&x| f64::from(x))),
            Elements::I16(v) => Box::new(v.iter().map(|&x| f64::from(x))),
            Elements::U16(v) => Box::new(v.iter().map(|&x| f64::from(x))),
            Elements::U32(v) => Box::new(v.iter().map(|&x| f64::from(x))),
            Elements::U64(v) => Box::new(v.iter().map(|&x| x as f64)),
            Elements::Narrow(d, v) => Box::new(v.iter().map(|&b| crate::narrow::from_byte(*d, b))),
        }
    }

    /// The values widened to a [`Tensor`] (for the interpreter and constant folding).
    pub fn to_tensor(&self) -> Tensor {
        Tensor { dtype: self.dtype(), shape: self.shape.clone(), data: self.values().collect() }
    }

    /// The same dtype, shape and element bits (NaNs with the same payload are the
    /// same; 0.0 and -0.0 are not).
    pub fn same_bits(&self, other: &Constant) -> bool {
        if self.shape != other.shape {
            return false;
        }
        match (&*self.data, &*other.data) {
            (Elements::F64(a), Elements::F64(b)) => a.iter().map(|x| x.to_bits()).eq(b.iter().map(|x| x.to_bits())),
            (Elements::F32(a), Elements::F32(b)) => a.iter().map(|x| x.to_bits()).eq(b.iter().map(|x| x.to_bits())),
            (Elements::F16(a), Elements::F16(b)) => a.iter().map(|x| x.to_bits()).eq(b.iter().map(|x| x.to_bits())),
            (Elements::Bf16(a), Elements::Bf16(b)) => a.iter().map(|x| x.to_bits()).eq(b.iter().map(|x| x.to_bits())),
            (Elements::I32(a), Elements::I32(b)) => a == b,
            (Elements::I64(a), Elements::I64(b)) => a == b,
            (Elements::Bool(a), Elements::Bool(b)) => a == b,
            (Elements::I8(a), Elements::I8(b)) => a == b,
            (Elements::U8(a), Elements::U8(b)) => a == b,
            (Elements::I16(a), Elements::I16(b)) => a == b,
            (Elements::U16(a), Elements::U16(b)) => a == b,
            (Elements::U32(a), Elements::U32(b)) => a == b,
            (Elements::U64(a), Elements::U64(b)) => a == b,
            (Elements::Narrow(d, a), Elements::Narrow(e, b)) => d == e && a == b,
            _ => false,
        }
    }

    /// Hashes what [`Constant::same_bits`] compares.
    pub fn hash_bits<H: Hasher>(&self, h: &mut H) {
        self.dtype().hash(h);
        self.shape.hash(h);
        match &*self.data {
            Elements::F64(v) => v.iter().for_each(|x| x.to_bits().hash(h)),
            Elements::F32(v) => v.iter().for_each(|x| x.to_bits().hash(h)),
            Elements::F16(v) => v.iter().for_each(|x| x.to_bits().hash(h)),
            Elements::Bf16(v) => v.iter().for_each(|x| x.to_bits().hash(h)),
            Elements::I32(v) => v.hash(h),
            Elements::I64(v) => v.hash(h),
            Elements::Bool(v) => v.hash(h),
            Elements::I8(v) => v.hash(h),
            Elements::U8(v) => v.hash(h),
            Elements::I16(v) => v.hash(h),
            Elements::U16(v) => v.hash(h),
            Elements::U32(v) => v.hash(h),
            Elements::U64(v) => v.hash(h),
            Elements::Narrow(_, v) => v.hash(h),
        }
    }

    /// The same dtype, shape, and elements that print alike with `{:?}` (bit for bit,
    /// or both NaN): what comparing two tensors by their debug text decided.
    pub fn same_text(&self, other: &Constant) -> bool {
        self.dtype() == other.dtype()
            && self.shape == other.shape
            && self.values().zip(other.values()).all(|(a, b)| a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan())
    }
}

impl From<Tensor> for Constant {
    fn from(t: Tensor) -> Constant {
        Constant::from_values(t.dtype, t.shape, t.data.into_iter())
    }
}

impl From<&Tensor> for Constant {
    fn from(t: &Tensor) -> Constant {
        Constant::from_values(t.dtype, t.shape.clone(), t.data.iter().copied())
    }
}

/// Equal as tensors are: the same dtype and shape, and elements equal as f64
/// (so 0.0 == -0.0 and NaN != NaN).
impl PartialEq for Constant {
    fn eq(&self, other: &Constant) -> bool {
        self.dtype() == other.dtype() && self.shape == other.shape && self.values().eq(other.values())
    }
}

/// A summary, not the elements: constants can be large, and a debug string of every
/// element is never what a message or a lookup key wants.
impl fmt::Debug for Constant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Constant({}{:?})", self.dtype(), self.shape)
    }
}

/// Where a [`RawTensor`]'s bytes live: a file mapped into memory, or bytes in memory.
pub trait Backing: Send + Sync {
    fn bytes(&self) -> &[u8];
    /// Says the bytes of `range` will not be read again soon: a mapped file's pages
    /// leave the process's memory (a later read brings them back from the file).
    fn release(&self, _range: Range<usize>) {}
}

impl Backing for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// A tensor as little-endian elements of its dtype (bool one byte, f16 and bf16 two),
/// the way checkpoints store them. It has no f64 form: its elements are read one at a
/// time ([`RawTensor::values`]) and written straight into another type's bytes, so a
/// checkpoint on its way into a weights blob takes about its own size in memory (the
/// interpreter widens it with [`RawTensor::to_tensor`]). Clones share the bytes.
#[derive(Clone)]
pub struct RawTensor {
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    backing: Arc<dyn Backing>,
    range: Range<usize>,
}

impl RawTensor {
    /// The tensor whose elements are the bytes `range` of `backing`, or `None` unless
    /// they are exactly the product of `shape` elements of `dtype`.
    pub fn new(dtype: Dtype, shape: Vec<u64>, backing: Arc<dyn Backing>, range: Range<usize>) -> Option<RawTensor> {
        let numel = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
        let fits = backing.bytes().get(range.clone()).is_some();
        (fits && numel.checked_mul(dtype.size() as u64) == Some(range.len() as u64)).then_some(RawTensor { dtype, shape, backing, range })
    }

    /// The tensor whose elements are `bytes` (see [`RawTensor::new`]).
    pub fn owned(dtype: Dtype, shape: Vec<u64>, bytes: Vec<u8>) -> Option<RawTensor> {
        let range = 0..bytes.len();
        RawTensor::new(dtype, shape, Arc::new(bytes), range)
    }

    /// A tensor's values in its dtype.
    pub fn from_tensor(t: &Tensor) -> RawTensor {
        let mut bytes = vec![0u8; t.data.len() * t.dtype.size()];
        write_elements(t.data.iter().copied(), t.dtype, &mut bytes);
        let range = 0..bytes.len();
        RawTensor { dtype: t.dtype, shape: t.shape.clone(), backing: Arc::new(bytes), range }
    }

    /// The little-endian elements.
    pub fn bytes(&self) -> &[u8] {
        &self.backing.bytes()[self.range.clone()]
    }

    pub fn numel(&self) -> usize {
        self.range.len() / self.dtype.size()
    }

    /// Element `i` (row-major) as an f64, which holds every value of every dtype
    /// exactly but i64 and u64 beyond 2^53. The caller guarantees `i < numel()`.
    pub fn get(&self, i: usize) -> f64 {
        let n = self.dtype.size();
        element(self.dtype, &self.bytes()[i * n..(i + 1) * n])
    }

    /// Every element in row-major order, one at a time.
    pub fn values(&self) -> impl ExactSizeIterator<Item = f64> + '_ {
        let dtype = self.dtype;
        self.bytes().chunks_exact(dtype.size()).map(move |b| element(dtype, b))
    }

    /// The values widened to a [`Tensor`] (for the interpreter).
    pub fn to_tensor(&self) -> Tensor {
        Tensor { dtype: self.dtype, shape: self.shape.clone(), data: self.values().collect() }
    }

    /// The same values in `dtype` (rounded to nearest where it is narrower): the
    /// tensor itself when it is of `dtype` already.
    pub fn converted(&self, dtype: Dtype) -> RawTensor {
        if dtype == self.dtype {
            return self.clone();
        }
        let mut bytes = vec![0u8; self.numel() * dtype.size()];
        write_elements(self.values(), dtype, &mut bytes);
        RawTensor::owned(dtype, self.shape.clone(), bytes).expect("as many elements as the tensor")
    }

    /// Lets a mapped file's pages of this tensor leave memory until it is read again.
    pub fn release(&self) {
        self.backing.release(self.range.clone());
    }
}

/// A summary, not the elements (as [`Constant`]'s).
impl fmt::Debug for RawTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RawTensor({}{:?})", self.dtype, self.shape)
    }
}

/// The element of `dtype` whose little-endian bytes are `b` (`dtype.size()` of them).
fn element(dtype: Dtype, b: &[u8]) -> f64 {
    fn le<const N: usize>(b: &[u8]) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        a
    }
    match dtype {
        Dtype::F64 => f64::from_le_bytes(le(b)),
        Dtype::F32 => f64::from(f32::from_le_bytes(le(b))),
        Dtype::F16 => half::f16::from_le_bytes(le(b)).to_f64(),
        Dtype::Bf16 => half::bf16::from_le_bytes(le(b)).to_f64(),
        Dtype::I32 => f64::from(i32::from_le_bytes(le(b))),
        Dtype::I64 => i64::from_le_bytes(le(b)) as f64,
        Dtype::Bool => f64::from(u8::from(b[0] != 0)),
        Dtype::I8 => f64::from(b[0] as i8),
        Dtype::U8 => f64::from(b[0]),
        Dtype::I16 => f64::from(i16::from_le_bytes(le(b))),
        Dtype::U16 => f64::from(u16::from_le_bytes(le(b))),
        Dtype::U32 => f64::from(u32::from_le_bytes(le(b))),
        Dtype::U64 => u64::from_le_bytes(le(b)) as f64,
        Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz | Dtype::F4E2M1 | Dtype::I4 | Dtype::U4 | Dtype::I2 | Dtype::U2 => {
            crate::narrow::from_byte(dtype, b[0])
        }
    }
}

/// Writes `values` as little-endian elements of `dtype` (rounded to it as
/// [`round_to`] rounds) at the start of `out`, which has room for them.
pub fn write_elements(values: impl Iterator<Item = f64>, dtype: Dtype, out: &mut [u8]) {
    fn put<const N: usize>(values: impl Iterator<Item = f64>, out: &mut [u8], bytes: impl Fn(f64) -> [u8; N]) {
        for (x, slot) in values.zip(out.chunks_exact_mut(N)) {
            slot.copy_from_slice(&bytes(x));
        }
    }
    match dtype {
        Dtype::F64 => put(values, out, f64::to_le_bytes),
        Dtype::F32 => put(values, out, |x| (x as f32).to_le_bytes()),
        Dtype::F16 => put(values, out, |x| half::f16::from_f64(x).to_le_bytes()),
        Dtype::Bf16 => put(values, out, |x| half::bf16::from_f64(x).to_le_bytes()),
        Dtype::I32 => put(values, out, |x| (round_to(Dtype::I32, x) as i32).to_le_bytes()),
        Dtype::I64 => put(values, out, |x| (round_to(Dtype::I64, x) as i64).to_le_bytes()),
        Dtype::Bool => put(values, out, |x| [u8::from(x != 0.0)]),
        Dtype::I8 => put(values, out, |x| (round_to(Dtype::I8, x) as i8).to_le_bytes()),
        Dtype::U8 => put(values, out, |x| (round_to(Dtype::U8, x) as u8).to_le_bytes()),
        Dtype::I16 => put(values, out, |x| (round_to(Dtype::I16, x) as i16).to_le_bytes()),
        Dtype::U16 => put(values, out, |x| (round_to(Dtype::U16, x) as u16).to_le_bytes()),
        Dtype::U32 => put(values, out, |x| (round_to(Dtype::U32, x) as u32).to_le_bytes()),
        Dtype::U64 => put(values, out, |x| (round_to(Dtype::U64, x) as u64).to_le_bytes()),
        Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz | Dtype::F4E2M1 | Dtype::I4 | Dtype::U4 | Dtype::I2 | Dtype::U2 => {
            put(values, out, |x| [crate::narrow::to_byte(dtype, x)])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_wrap_as_c_converts_them() {
        // Up to 32 bits, modulo 2^bits into the type's range, after truncation.
        assert_eq!(round_to(Dtype::U8, 300.0), 44.0);
        assert_eq!(round_to(Dtype::U8, -1.0), 255.0);
        assert_eq!(round_to(Dtype::U8, -2.9), 254.0);
        assert_eq!(round_to(Dtype::I8, 200.0), -56.0);
        assert_eq!(round_to(Dtype::I8, -129.0), 127.0);
        assert_eq!(round_to(Dtype::I16, 32768.0), -32768.0);
        assert_eq!(round_to(Dtype::U16, 65536.0 * 3.0 + 5.0), 5.0);
        assert_eq!(round_to(Dtype::I32, 2147483648.0), -2147483648.0);
        assert_eq!(round_to(Dtype::U32, -1.0), 4294967295.0);
        assert_eq!(round_to(Dtype::U32, 2.5), 2.0);
        // 64 bits saturate: i64::MAX's f64 image stays the maximum.
        assert_eq!(round_to(Dtype::I64, i64::MAX as f64), i64::MAX as f64);
        assert_eq!(round_to(Dtype::I64, 1e30), i64::MAX as f64);
        assert_eq!(round_to(Dtype::U64, -1.0), 0.0);
        assert_eq!(round_to(Dtype::U64, u64::MAX as f64), u64::MAX as f64);
        // NaN is 0; infinities and values beyond 2^64 saturate.
        for d in [Dtype::I8, Dtype::U8, Dtype::I16, Dtype::U16, Dtype::I32, Dtype::U32, Dtype::I64, Dtype::U64] {
            let (lo, hi) = d.int_range().expect("an integer type");
            assert_eq!(round_to(d, f64::NAN), 0.0, "{d}");
            assert_eq!((round_to(d, f64::INFINITY), round_to(d, f64::NEG_INFINITY)), (hi, lo), "{d}");
            assert_eq!((round_to(d, 1e20), round_to(d, -1e20)), (hi, lo), "{d}");
            assert_eq!((round_to(d, lo), round_to(d, hi)), (lo, hi), "{d}");
        }
    }

    #[test]
    fn floats_saturate_into_integers() {
        assert_eq!(float_to_int(Dtype::U8, 300.5), 255.0);
        assert_eq!(float_to_int(Dtype::U8, -3.5), 0.0);
        assert_eq!(float_to_int(Dtype::U8, 254.9), 254.0);
        assert_eq!(float_to_int(Dtype::I8, -1e9), -128.0);
        assert_eq!(float_to_int(Dtype::I8, -7.9), -7.0);
        assert_eq!(float_to_int(Dtype::U16, 70000.0), 65535.0);
        assert_eq!(float_to_int(Dtype::I16, f64::NAN), 0.0);
        assert_eq!(float_to_int(Dtype::U32, 5e9), 4294967295.0);
        assert_eq!(float_to_int(Dtype::U64, 1e30), u64::MAX as f64);
        assert_eq!(float_to_int(Dtype::U64, -1e30), 0.0);
        assert_eq!(float_to_int(Dtype::I32, 3e9), 2147483647.0);
        assert_eq!(float_to_int(Dtype::F32, 0.1), 0.1f32 as f64);
    }

    #[test]
    fn raw_elements_of_every_integer_type() {
        let cases: [(Dtype, Vec<f64>, Vec<u8>); 6] = [
            (Dtype::I8, vec![-128.0, 127.0], vec![0x80, 0x7f]),
            (Dtype::U8, vec![0.0, 255.0], vec![0, 0xff]),
            (Dtype::I16, vec![-2.0, 258.0], vec![0xfe, 0xff, 2, 1]),
            (Dtype::U16, vec![65535.0, 1.0], vec![0xff, 0xff, 1, 0]),
            (Dtype::U32, vec![4294967295.0, 256.0], vec![0xff, 0xff, 0xff, 0xff, 0, 1, 0, 0]),
            (Dtype::U64, vec![9007199254740992.0, 1.0], [9007199254740992u64, 1].iter().flat_map(|x| x.to_le_bytes()).collect()),
        ];
        for (d, values, bytes) in cases {
            let t = Tensor::new(d, vec![2], values.clone());
            let raw = RawTensor::from_tensor(&t);
            assert_eq!(raw.bytes(), bytes.as_slice(), "{d}");
            assert_eq!(raw.to_tensor(), t, "{d}");
            let c = Constant::from(&t);
            assert_eq!((c.dtype(), c.values().collect::<Vec<_>>()), (d, t.data.clone()), "{d}");
            assert!(c.same_bits(&Constant::from(&t)), "{d}");
            // Converted to another type, values wrap as `round_to` says.
            let wrapped = raw.converted(Dtype::U8);
            assert_eq!(wrapped.to_tensor().data, t.data.iter().map(|&x| round_to(Dtype::U8, x)).collect::<Vec<_>>(), "{d}");
        }
        // u64 beyond 2^53 are read from bytes exactly (and rounded only as f64s).
        let raw = RawTensor::owned(Dtype::U64, vec![1], u64::MAX.to_le_bytes().to_vec()).expect("8 bytes");
        assert_eq!(raw.get(0), u64::MAX as f64);
        assert_eq!(raw.converted(Dtype::U64).bytes(), u64::MAX.to_le_bytes());
    }
}
