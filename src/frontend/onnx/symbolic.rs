//! Shape arithmetic over symbolic dimensions, folded when compiling.
//!
//! Exporters compute shapes at run time: `Shape → Gather → Concat → Reshape`, or
//! `Shape → Gather → Range` for positions. With symbolic dimensions no such value is a
//! constant, but each is a short list of [`Poly`]s (`[B, S, -1]`, `[B*S, 768]`), and the
//! operators that need a shape when compiling (Reshape, Expand, ConstantOfShape, Range)
//! take it as one. `Shape` of a symbolic tensor records its dimensions here and also
//! builds the value as IR ops (a sum of ones per dimension), so a use at run time that
//! nothing folds still computes the right numbers.

use std::collections::HashMap;

use super::import::Cx;
use crate::error::Result;
use crate::ir::{BinaryOp, Dim, Dtype, Op, Poly, ReduceKind, Shape, ValueId};
use crate::tensor::Tensor;

/// Longest integer list followed through shape arithmetic.
const LIST_LIMIT: u64 = 64;
/// How many ops deep a list is followed.
const DEPTH: usize = 64;

/// Lists of dimensions known so far, by value.
pub type Lists = HashMap<ValueId, Vec<Poly>>;

impl Cx<'_> {
    /// `Shape`'s value for `shape`: a constant when static, else IR ops whose value
    /// [`Cx::dims_value`] knows as `shape`'s dimensions.
    pub fn shape_value(&mut self, shape: &Shape) -> Result<ValueId> {
        if let Some(dims) = shape.as_known() {
            let t = Tensor::new(Dtype::I64, vec![dims.len() as u64], dims.iter().map(|&d| d as f64).collect());
            return Ok(self.b.constant(t));
        }
        let mut parts = Vec::with_capacity(shape.rank());
        for d in shape.dims() {
            parts.push(match d {
                Dim::Known(n) => self.b.constant(Tensor::new(Dtype::I64, vec![1], vec![*n as f64])),
                d => self.dim_value(d, true)?,
            });
        }
        let v = match parts.len() {
            0 => self.b.constant(Tensor::new(Dtype::I64, vec![0], vec![])),
            1 => parts[0],
            _ => self.b.op(Op::Concat { axis: 0 }, parts)?,
        };
        let polys = shape.dims().iter().map(Dim::poly).collect::<std::result::Result<Vec<_>, _>>().map_err(crate::error::Error::user)?;
        self.lists.insert(v, polys);
        Ok(v)
    }

    /// A dimension's size as an i64 scalar (`[1]` with `keep`) computed at run time: the
    /// sum of that many ones.
    pub fn dim_value(&mut self, d: &Dim, keep: bool) -> Result<ValueId> {
        let one = self.b.scalar(Dtype::I64, 1.0);
        let ones = self.b.broadcast_to(one, Shape(vec![d.clone()]))?;
        self.b.reduce(ReduceKind::Sum, ones, vec![0], keep)
    }

    /// The value of an integer tensor of rank 0 or 1 as dimensions of the symbols, when
    /// shape arithmetic over constants and `Shape`s computes it.
    pub fn dims_value(&mut self, v: ValueId) -> Result<Option<Vec<Poly>>> {
        self.dims_within(v, DEPTH)
    }

    fn dims_within(&mut self, v: ValueId, depth: usize) -> Result<Option<Vec<Poly>>> {
        if let Some(l) = self.lists.get(&v) {
            return Ok(Some(l.clone()));
        }
        let node = self.b.graph.node(v).clone();
        // (a bool list is 0s and 1s: exporters test shapes, `Where(Equal(shape, -1), ...)`)
        if !(node.ty.dtype.is_int() || node.ty.dtype == Dtype::Bool) || node.ty.rank() > 1 || node.ty.shape.numel().is_none_or(|n| n > LIST_LIMIT) {
            return Ok(None);
        }
        if let Some(t) = self.value(v)? {
            return Ok(Some(t.data.iter().map(|&x| Poly::constant(x as i64)).collect()));
        }
        if depth == 0 {
            return Ok(None);
        }
        let mut args = Vec::with_capacity(node.args.len());
        for &a in &node.args {
            match self.dims_within(a, depth - 1)? {
                Some(l) => args.push(l),
                None => return Ok(None),
            }
        }
        let len = node.ty.shape.numel().expect("checked above") as usize;
        let out = fold(&node.op, &args, len);
        if let Some(l) = &out {
            self.lists.insert(v, l.clone());
        }
        Ok(out)
    }
}

/// One op of shape arithmetic over lists (a scalar is a list of one); `None` where the
/// op is not one or the result is no polynomial.
fn fold(op: &Op, args: &[Vec<Poly>], len: usize) -> Option<Vec<Poly>> {
    let at = |l: &Vec<Poly>, i: usize| if l.len() == 1 { l[0].clone() } else { l[i].clone() };
    match op {
        Op::Cast { to } if to.is_int() => Some(args[0].clone()),
        Op::Where => (0..len)
            .map(|i| match at(&args[0], i).as_constant()? {
                0 => Some(at(&args[2], i)),
                _ => Some(at(&args[1], i)),
            })
            .collect(),
        Op::Reshape { .. } | Op::StopGradient => Some(args[0].clone()),
        Op::BroadcastTo { .. } if args[0].len() == 1 => Some(vec![args[0][0].clone(); len]),
        Op::Concat { .. } => Some(args.concat()),
        Op::Gather { axis: 0 } => {
            let n = args[0].len() as i64;
            args[1]
                .iter()
                .map(|i| {
                    let i = i.as_constant()?;
                    let i = if i < 0 { i + n } else { i };
                    args[0].get(usize::try_from(i).ok()?).cloned()
                })
                .collect()
        }
        Op::Slice { ranges } => {
            let (start, step, count) = ranges[0].resolve(args[0].len() as u64).ok()?;
            (0..count as i64).map(|k| args[0].get(usize::try_from(start + k * step).ok()?).cloned()).collect()
        }
        Op::Binary(b) => (0..len)
            .map(|i| {
                let (x, y) = (at(&args[0], i), at(&args[1], i));
                match b {
                    BinaryOp::Add => x.add(&y).ok(),
                    BinaryOp::Sub => x.sub(&y).ok(),
                    BinaryOp::Mul => x.mul(&y).ok(),
                    // ONNX's integer Div truncates, which is the floor for sizes (never
                    // negative); a -1 among them is a constant and divides as one.
                    BinaryOp::Div | BinaryOp::FloorDiv => match (x.as_constant(), y.as_constant()) {
                        (Some(a), Some(c)) if c != 0 => {
                            // Div truncates; FloorDiv rounds down (div_euclid does not for c < 0)
                            let floor = a / c - i64::from(a % c != 0 && (a < 0) != (c < 0));
                            Some(Poly::constant(if *b == BinaryOp::Div { a / c } else { floor }))
                        }
                        (None, Some(c)) if c > 0 && x.terms().all(|(k, _)| k > 0) => x.div_floor(c as u64).ok(),
                        _ => x.div_exact(&y),
                    },
                    BinaryOp::Eq | BinaryOp::Ne => {
                        let equal = equal(&x, &y)?;
                        Some(Poly::constant((equal == (*b == BinaryOp::Eq)) as i64))
                    }
                    BinaryOp::Max | BinaryOp::Min => {
                        let (a, c) = (x.as_constant()?, y.as_constant()?);
                        Some(Poly::constant(if *b == BinaryOp::Max { a.max(c) } else { a.min(c) }))
                    }
                    _ => None,
                }
            })
            .collect(),
        _ => None,
    }
}

/// Whether two dimensions are equal for every value of the symbols, when that is
/// decided: the same polynomial, or a difference that is a nonzero constant, or a size
/// with symbols (at least 1 for symbols at least 1) against a constant below 1 (the
/// `-1` of a reshape target).
fn equal(x: &Poly, y: &Poly) -> Option<bool> {
    if x == y {
        return Some(true);
    }
    if let Some(d) = x.sub(y).ok()?.as_constant() {
        return Some(d == 0);
    }
    let at_least_one = |p: &Poly| p.is_positive() && p.as_constant().is_none();
    match (x.as_constant(), y.as_constant()) {
        (Some(c), None) if c < 1 && at_least_one(y) => Some(false),
        (None, Some(c)) if c < 1 && at_least_one(x) => Some(false),
        _ => None,
    }
}
