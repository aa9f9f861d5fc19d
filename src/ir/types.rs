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
    }
}

impl Dtype {
    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F32 | Dtype::F64 | Dtype::F16 | Dtype::Bf16)
    }

    pub fn is_int(self) -> bool {
        matches!(self, Dtype::I32 | Dtype::I64)
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            Dtype::F64 | Dtype::I64 => 8,
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::Bool => 1,
        }
    }

    /// NumPy-style promotion of two tensor operands: bool < ints < floats, wider wins.
    pub fn promote(a: Dtype, b: Dtype) -> Dtype {
        fn rank(d: Dtype) -> u8 {
            match d {
                Dtype::Bool => 0,
                Dtype::I32 => 1,
                Dtype::I64 => 2,
                Dtype::Bf16 => 3,
                Dtype::F16 => 4,
                Dtype::F32 => 5,
                Dtype::F64 => 6,
            }
        }
        match (a, b) {
            // f16 and bf16 have no common narrower type.
            (Dtype::F16, Dtype::Bf16) | (Dtype::Bf16, Dtype::F16) => Dtype::F32,
            _ if rank(a) >= rank(b) => a,
            _ => b,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One dimension: a known size, or a named symbol bound at run time (a batch size).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    Known(u64),
    Sym(String),
}

impl Dim {
    pub fn known(self: &Dim) -> Option<u64> {
        match self {
            Dim::Known(n) => Some(*n),
            Dim::Sym(_) => None,
        }
    }
    pub fn is_one(&self) -> bool {
        *self == Dim::Known(1)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

impl From<u64> for Dim {
    fn from(n: u64) -> Dim {
        Dim::Known(n)
    }
}

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
            if let Dim::Sym(s) = d {
                if !out.contains(&s.as_str()) {
                    out.push(s);
                }
            }
        }
        out
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
