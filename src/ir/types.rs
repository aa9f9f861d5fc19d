//! Element types, dimensions and tensor types of IR values.

use std::fmt;

kinds! {
    /// Element type of a tensor.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Dtype {
        F32 = "f32",
        F64 = "f64",
        F16 = "f16",
        Bf16 = "bf16",
        I32 = "i32",
        I64 = "i64",
        Bool = "bool",
        I8 = "i8",
        U8 = "u8",
        I16 = "i16",
        U16 = "u16",
        U32 = "u32",
        U64 = "u64",
        F8E4M3Fn = "f8e4m3fn",
        F8E4M3Fnuz = "f8e4m3fnuz",
        F8E5M2 = "f8e5m2",
        F8E5M2Fnuz = "f8e5m2fnuz",
        F4E2M1 = "f4e2m1",
        I4 = "i4",
        U4 = "u4",
        I2 = "i2",
        U2 = "u2",
    }
}

impl Dtype {
    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F32 | Dtype::F64 | Dtype::F16 | Dtype::Bf16) || self.is_narrow_float()
    }

    /// Whether the type is one of the floats of 8 bits or fewer (ONNX's float8 and
    /// float4 types), held one per byte as their bits ([`crate::narrow`]).
    pub fn is_narrow_float(self) -> bool {
        matches!(self, Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz | Dtype::F4E2M1)
    }

    /// Whether the type is an integer type, signed or unsigned (bool is not).
    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, Dtype::I8 | Dtype::I16 | Dtype::I32 | Dtype::I64 | Dtype::I4 | Dtype::I2)
    }

    pub fn is_unsigned_int(self) -> bool {
        matches!(self, Dtype::U8 | Dtype::U16 | Dtype::U32 | Dtype::U64 | Dtype::U4 | Dtype::U2)
    }

    /// Size of one element in bytes, as mithrilc holds it: the types of fewer than 8
    /// bits take a byte each (ONNX packs them; its reader unpacks them).
    pub fn size(self) -> usize {
        match self {
            Dtype::F64 | Dtype::I64 | Dtype::U64 => 8,
            Dtype::F32 | Dtype::I32 | Dtype::U32 => 4,
            Dtype::F16 | Dtype::Bf16 | Dtype::I16 | Dtype::U16 => 2,
            Dtype::Bool | Dtype::I8 | Dtype::U8 => 1,
            Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz => 1,
            Dtype::F4E2M1 | Dtype::I4 | Dtype::U4 | Dtype::I2 | Dtype::U2 => 1,
        }
    }

    /// Width of the type's values in bits (4 for f4e2m1, i4 and u4, 2 for i2 and u2;
    /// 8 times [`Dtype::size`] for the others).
    pub fn bits(self) -> usize {
        match self {
            Dtype::F4E2M1 | Dtype::I4 | Dtype::U4 => 4,
            Dtype::I2 | Dtype::U2 => 2,
            _ => self.size() * 8,
        }
    }

    /// The smallest and largest value of an integer type, as f64s (those of i64 and
    /// u64 rounded: `i64::MAX` and `u64::MAX` become 2^63 and 2^64); `None` for the
    /// others.
    pub fn int_range(self) -> Option<(f64, f64)> {
        Some(match self {
            Dtype::I8 => (f64::from(i8::MIN), f64::from(i8::MAX)),
            Dtype::U8 => (0.0, f64::from(u8::MAX)),
            Dtype::I16 => (f64::from(i16::MIN), f64::from(i16::MAX)),
            Dtype::U16 => (0.0, f64::from(u16::MAX)),
            Dtype::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
            Dtype::U32 => (0.0, f64::from(u32::MAX)),
            Dtype::I64 => (i64::MIN as f64, i64::MAX as f64),
            Dtype::U64 => (0.0, u64::MAX as f64),
            Dtype::I4 => (-8.0, 7.0),
            Dtype::U4 => (0.0, 15.0),
            Dtype::I2 => (-2.0, 1.0),
            Dtype::U2 => (0.0, 3.0),
            Dtype::F32 | Dtype::F64 | Dtype::F16 | Dtype::Bf16 | Dtype::Bool => return None,
            Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz | Dtype::F4E2M1 => return None,
        })
    }

    /// NumPy's promotion of two tensor operands (`numpy.promote_types`) among
    /// integers: the wider of two of the same signedness; for a signed and an unsigned
    /// type, the signed one if it is wider, else the signed type twice the unsigned
    /// one's width (u8 and i8 give i16), and f64 for u64 with any signed type (no
    /// integer type holds both). Bool gives way to everything; an integer and a float
    /// give the float (as Mithril and PyTorch promote, where NumPy would widen an f32
    /// for i32 to f64); f16 and bf16 give f32, and so do two different floats of 8 bits
    /// or fewer (each of which f16 and bf16 hold); otherwise the wider float.
    pub fn promote(a: Dtype, b: Dtype) -> Dtype {
        fn float_rank(d: Dtype) -> u8 {
            match d {
                _ if d.is_narrow_float() => 0,
                Dtype::Bf16 => 1,
                Dtype::F16 => 2,
                Dtype::F32 => 3,
                _ => 4,
            }
        }
        match (a, b) {
            _ if a == b => a,
            (Dtype::Bool, other) | (other, Dtype::Bool) => other,
            // f16 and bf16 have no common narrower type, nor have two narrow floats.
            (Dtype::F16, Dtype::Bf16) | (Dtype::Bf16, Dtype::F16) => Dtype::F32,
            _ if a.is_narrow_float() && b.is_narrow_float() => Dtype::F32,
            _ if a.is_float() && b.is_float() => {
                if float_rank(a) >= float_rank(b) { a } else { b }
            }
            _ if a.is_float() => a,
            _ if b.is_float() => b,
            _ if a.is_signed_int() == b.is_signed_int() => {
                if a.bits() >= b.bits() { a } else { b }
            }
            _ => {
                let (s, u) = if a.is_signed_int() { (a, b) } else { (b, a) };
                if s.bits() > u.bits() {
                    s
                } else {
                    match u {
                        Dtype::U2 => Dtype::I4,
                        Dtype::U4 => Dtype::I8,
                        Dtype::U8 => Dtype::I16,
                        Dtype::U16 => Dtype::I32,
                        Dtype::U32 => Dtype::I64,
                        _ => Dtype::F64,
                    }
                }
            }
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

pub use super::dim::{Atom, Dim, Poly};

/// A tensor shape, outermost dimension first (row-major).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    pub fn known(dims: &[u64]) -> Shape {
        Shape(dims.iter().map(|&d| Dim::Known(d)).collect())
    }
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    pub fn dims(&self) -> &[Dim] {
        &self.0
    }
    /// All sizes, when none is symbolic.
    pub fn as_known(&self) -> Option<Vec<u64>> {
        self.0.iter().map(Dim::known).collect()
    }
    pub fn is_static(&self) -> bool {
        self.0.iter().all(|d| matches!(d, Dim::Known(_)))
    }
    /// Number of elements, when static and representable (checked arithmetic).
    pub fn numel(&self) -> Option<u64> {
        self.0.iter().try_fold(1u64, |acc, d| acc.checked_mul(d.known()?))
    }
    /// Symbols used by this shape, in order of first appearance.
    pub fn symbols(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for d in &self.0 {
            d.symbols(&mut out);
        }
        out
    }
    /// The number of elements as a dimension (`B*S*64`).
    pub fn numel_dim(&self) -> Result<Dim, String> {
        Dim::product(&self.0)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// The type of an IR value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: Dtype,
    pub shape: Shape,
}

impl TensorType {
    pub fn new(dtype: Dtype, shape: Shape) -> TensorType {
        TensorType { dtype, shape }
    }
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}
