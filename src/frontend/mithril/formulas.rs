//! The meaning of each Mithril formula in IR ops: one arm per formula, folding
//! compile-time values and emitting tensor ops through the shared
//! [`Builder`](crate::ir::builder::Builder) (attention, log-softmax and the
//! one-hot picks are its composites; the formulas only Mithril has — cross entropy's
//! variants, the robust ops — are spelled out in helpers below).

use super::attrs::*;
use super::emit::{Emitter, Val};
use super::library::Formula;
use super::net::PNode;
use super::value::Static;
use crate::error::{Error, Result};
use crate::ir::builder;
use crate::ir::*;
use crate::tensor::Tensor;

/// Said where a model differentiates through `Maximum`, `Minimum` or `Clamp`.
const TIE_GRADIENT: &str = "its gradient splits a tie evenly between the two arguments (as JAX and Torch do); \
     Mithril's NumPy backend defines no gradient for it";

impl Emitter<'_> {
    pub(super) fn formula(&mut self, node: &PNode, ins: &[(String, Val)]) -> Result<Val> {
        use BinaryOp as B;
        use Formula as F;
        use UnaryOp as U;
        Ok(match node.formula {
            F::Abs => self.unary(ins, U::Abs)?,
            F::Negate => self.unary(ins, U::Neg)?,
            F::Exp => self.unary(ins, U::Exp)?,
            F::Sqrt => self.unary(ins, U::Sqrt)?,
            F::Log => self.unary(ins, U::Log)?,
            F::Sin => self.unary(ins, U::Sin)?,
            F::Cos => self.unary(ins, U::Cos)?,
            F::Tanh => self.unary(ins, U::Tanh)?,
            F::Sigmoid => self.unary(ins, U::Composite(Composite::Sigmoid))?,
            F::Relu => self.unary(ins, U::Relu)?,
            F::Softplus => self.unary(ins, U::Composite(Composite::Softplus))?,
            F::Sign => self.unary(ins, U::Sign)?,
            F::Floor => self.unary(ins, U::Floor)?,
            F::IsNan => self.unary(ins, U::IsNan)?,
            F::LogicalNot => self.unary(ins, U::Not)?,
            F::Gelu => {
                let approximate = self.flag(ins, "approximate")?;
                let x = self.t(ins, "input")?;
                Val::T(self.b.gelu(x, approximate)?)
            }
            F::Square => {
                let x = self.t(ins, "input")?;
                Val::T(self.b.binary(B::Mul, x, x)?)
            }
            F::LeakyRelu => {
                // Mithril's max(0, x) + slope * min(0, x), as x > 0 ? x : slope * x: the
                // same values, and Mithril's gradient (slope at 0, not the two halves of
                // a tie between max and min).
                let x = self.t(ins, "input")?;
                let zero = self.b.scalar(self.b.dtype(x), 0.0);
                let pos = self.b.binary(B::Gt, x, zero)?;
                let slope = self.arg(ins, "slope")?.clone();
                let scaled = self.binary(&slope, &Val::T(x), B::Mul)?;
                let scaled = self.tensor(&scaled, None)?;
                Val::T(self.b.select(pos, x, scaled)?)
            }
            F::StopGradient => {
                let x = self.t(ins, "input")?;
                Val::T(self.b.op(Op::StopGradient, vec![x])?)
            }
            F::Buffer => self.arg(ins, "input")?.clone(),
            F::Clamp => {
                self.b.warn(TIE_GRADIENT, true);
                // np.clip: min(max(x, lo), hi), a None bound is no bound.
                let mut v = self.arg(ins, "input")?.clone();
                for (k, b) in [("min_val", B::Max), ("max_val", B::Min)] {
                    let bound = self.arg(ins, k)?.clone();
                    if !matches!(bound, Val::S(Static::None)) {
                        v = self.binary(&v, &bound, b)?;
                    }
                }
                v
            }
            F::ZerosLike => {
                let x = self.t(ins, "input")?;
                Val::T(self.b.full(self.b.dtype(x), self.b.shape(x), 0.0)?)
            }
            F::AtLeast1D => {
                let x = self.t(ins, "input")?;
                if self.b.rank(x) == 0 { Val::T(self.b.reshape(x, Shape::known(&[1]))?) } else { Val::T(x) }
            }
            F::Add => self.bin(ins, "left", "right", B::Add)?,
            F::Subtract => self.bin(ins, "left", "right", B::Sub)?,
            F::Multiplication => self.bin(ins, "left", "right", B::Mul)?,
            F::Divide => self.bin(ins, "numerator", "denominator", B::Div)?,
            F::FloorDivide => self.bin(ins, "numerator", "denominator", B::FloorDiv)?,
            F::Power => self.bin(ins, "base", "exponent", B::Pow)?,
            F::Minimum | F::Maximum => {
                self.b.warn(TIE_GRADIENT, true);
                self.bin(ins, "left", "right", if node.formula == F::Minimum { B::Min } else { B::Max })?
            }
            F::Greater => self.bin(ins, "left", "right", B::Gt)?,
            F::GreaterEqual => self.bin(ins, "left", "right", B::Ge)?,
            F::Less => self.bin(ins, "left", "right", B::Lt)?,
            F::LessEqual => self.bin(ins, "left", "right", B::Le)?,
            F::Equal => self.bin(ins, "left", "right", B::Eq)?,
            F::NotEqual => self.bin(ins, "left", "right", B::Ne)?,
            F::LogicalAnd => self.bin(ins, "left", "right", B::And)?,
            F::LogicalOr => self.bin(ins, "left", "right", B::Or)?,
            F::LogicalXor => self.bin(ins, "left", "right", B::Xor)?,
            F::ShiftLeft => self.bin(ins, "input", "shift", B::Shl)?,
            F::ShiftRight => self.bin(ins, "input", "shift", B::Shr)?,
            F::Where => {
                let c = self.t(ins, "cond")?;
                let a = self.arg(ins, "input1")?.clone();
                let b = self.arg(ins, "input2")?.clone();
                let da = if let Val::T(id) = a { Some(self.b.dtype(id)) } else { None };
                let db = if let Val::T(id) = b { Some(self.b.dtype(id)) } else { None };
                let a = self.tensor(&a, db)?;
                let b = self.tensor(&b, da)?;
                Val::T(self.b.select(c, a, b)?)
            }
            F::MatrixMultiplication => {
                let (l, r) = (self.t(ins, "left")?, self.t(ins, "right")?);
                Val::T(self.b.matmul(l, r)?)
            }
            F::Conv2d | F::Conv2dBias | F::Conv1d | F::Conv1dBias => {
                let two_d = matches!(node.formula, F::Conv2d | F::Conv2dBias);
                let n = if two_d { 2 } else { 1 };
                let x = self.t(ins, "input")?;
                let w = self.t(ins, "weight")?;
                let mut args = vec![x, w];
                if matches!(node.formula, F::Conv2dBias | F::Conv1dBias) {
                    args.push(self.t(ins, "bias")?);
                }
                let attrs = ConvAttrs {
                    stride: positive_list(&self.s(ins, "stride")?, n, "stride")?,
                    padding: pad_pairs(&self.s(ins, "padding")?, n)?,
                    dilation: positive_list(&self.s(ins, "dilation")?, n, "dilation")?,
                    groups: if two_d { positive(self.int(ins, "groups")?, "groups")? } else { 1 },
                };
                Val::T(self.b.op(Op::Conv(attrs), args)?)
            }
            F::MaxPool2d | F::AvgPool2d | F::MaxPool1d => {
                let n = if node.formula == F::MaxPool1d { 1 } else { 2 };
                let x = self.t(ins, "input")?;
                let attrs = PoolAttrs {
                    kind: if node.formula == F::AvgPool2d { PoolKind::Avg } else { PoolKind::Max },
                    kernel: positive_list(&self.s(ins, "kernel_size")?, n, "kernel_size")?,
                    stride: positive_list(&self.s(ins, "stride")?, n, "stride")?,
                    padding: pad_pairs(&self.s(ins, "padding")?, n)?,
                    dilation: positive_list(&self.s(ins, "dilation")?, n, "dilation")?,
                };
                if attrs.kind == PoolKind::Max && attrs.padding.iter().any(|&(a, b)| a + b > 0) {
                    self.b.warn(
                        "max pooling pads with -inf (padding never wins); Mithril's NumPy backend pads with 0, which differs \
                         where a padded window's real values are all negative",
                        false,
                    );
                }
                Val::T(self.b.op(Op::Pool(attrs), vec![x])?)
            }
            F::Embedding => {
                let idx = self.t(ins, "input")?;
                let w = self.t(ins, "weight")?;
                Val::T(self.b.op(Op::Gather { axis: 0 }, vec![w, idx])?)
            }
            F::PermuteTensor => {
                let x = self.t(ins, "input")?;
                let idx = self.t(ins, "indices")?;
                Val::T(self.b.op(Op::Gather { axis: 0 }, vec![x, idx])?)
            }
            F::ScaledDotProductAttention => self.attention(ins)?,
            F::CartesianDiff => {
                // left[:, None, :] - right[None, :, :]
                let (l, r) = (self.t(ins, "left")?, self.t(ins, "right")?);
                let (ls, rs) = (self.b.shape(l), self.b.shape(r));
                if ls.rank() != 2 || rs.rank() != 2 {
                    return Err(Error::user(format!("cartesian difference needs two matrices, got {ls} and {rs}")));
                }
                let l3 = self.b.reshape(l, Shape(vec![ls.0[0].clone(), Dim::Known(1), ls.0[1].clone()]))?;
                let r3 = self.b.reshape(r, Shape(vec![Dim::Known(1), rs.0[0].clone(), rs.0[1].clone()]))?;
                Val::T(self.b.binary(B::Sub, l3, r3)?)
            }
            F::Softmax => {
                let x = self.t(ins, "input")?;
                let axis = builder::axis(self.int(ins, "axis")?, self.b.rank(x))?;
                Val::T(self.b.softmax(x, axis)?)
            }
            F::ReduceMean => self.reduce(ins, ReduceKind::Mean)?,
            F::ReduceSum => {
                // NumPy (and Torch) sum bools as int64 counts.
                let x = self.t(ins, "input")?;
                if self.b.dtype(x) == Dtype::Bool {
                    let counts = self.b.cast(x, Dtype::I64)?;
                    let ins: Vec<(String, Val)> =
                        ins.iter().map(|(k, v)| (k.clone(), if k == "input" { Val::T(counts) } else { v.clone() })).collect();
                    self.reduce(&ins, ReduceKind::Sum)?
                } else {
                    self.reduce(ins, ReduceKind::Sum)?
                }
            }
            F::ReduceMax => self.reduce(ins, ReduceKind::Max)?,
            F::ReduceMin => self.reduce(ins, ReduceKind::Min)?,
            F::ReduceProd => self.reduce(ins, ReduceKind::Prod)?,
            F::ReduceArgmax | F::ReduceArgmin => {
                let x = self.t(ins, "input")?;
                let axis = match self.s(ins, "axis")? {
                    Static::None => None,
                    s => Some(builder::axis(s.as_int().ok_or_else(|| Error::user(format!("`axis` must be None or an int, got {s}")))?, self.b.rank(x))?),
                };
                let kind = if node.formula == F::ReduceArgmax { ArgKind::ArgMax } else { ArgKind::ArgMin };
                let keepdim = self.flag(ins, "keepdim")?;
                Val::T(self.b.op(Op::ArgReduce { kind, axis, keepdim }, vec![x])?)
            }
            F::Variance => {
                let x = self.t(ins, "input")?;
                let axes = self.axes(&self.s(ins, "axis")?, self.b.rank(x))?;
                let keepdim = self.flag(ins, "keepdim")?;
                let c = self.s(ins, "correction")?;
                let correction = c.as_f64().ok_or_else(|| Error::user(format!("`correction` must be a number, got {c}")))?;
                Val::T(self.b.variance(x, axes, keepdim, correction)?)
            }
            F::Reshape => {
                let x = self.t(ins, "input")?;
                let target = self.s(ins, "shape")?;
                Val::T(self.reshape(x, &target)?)
            }
            F::Flatten => {
                let x = self.t(ins, "input")?;
                let rank = self.b.rank(x);
                if rank == 0 {
                    return Ok(Val::T(self.b.reshape(x, Shape::known(&[1]))?));
                }
                let start = builder::axis(self.int(ins, "start_dim")?, rank)?;
                let end = builder::axis(self.int(ins, "end_dim")?, rank)?;
                Val::T(self.b.flatten(x, start, end)?)
            }
            F::Transpose => {
                let x = self.t(ins, "input")?;
                let rank = self.b.rank(x);
                let perm = match self.s(ins, "axes")? {
                    Static::None => (0..rank).rev().collect(),
                    s => {
                        let ints = s.as_ints().ok_or_else(|| Error::user(format!("`axes` must be a tuple of ints, got {s}")))?;
                        ints.iter().map(|&a| builder::axis(a, rank)).collect::<Result<Vec<_>>>()?
                    }
                };
                Val::T(self.b.transpose(x, perm)?)
            }
            F::SwapAxes => {
                let x = self.t(ins, "input")?;
                let rank = self.b.rank(x);
                let (a, b) = (builder::axis(self.int(ins, "axis1")?, rank)?, builder::axis(self.int(ins, "axis2")?, rank)?);
                let mut perm: Vec<usize> = (0..rank).collect();
                perm.swap(a, b);
                // swapaxes(x, a, a) is x itself.
                Val::T(if a == b { x } else { self.b.transpose(x, perm)? })
            }
            F::Squeeze => {
                let x = self.t(ins, "input")?;
                let dims: Vec<Dim> = self.b.shape(x).0.into_iter().filter(|d| !d.is_one()).collect();
                Val::T(self.b.reshape(x, Shape(dims))?)
            }
            F::BroadcastTo => {
                let x = self.t(ins, "input")?;
                let target = self.s(ins, "shape")?;
                let shape = static_shape(&target)?;
                Val::T(self.b.broadcast_to(x, shape)?)
            }
            F::Concat => {
                let items = match self.arg(ins, "input")?.clone() {
                    Val::Seq(items, _) => items,
                    Val::S(Static::Seq { items, .. }) => items.into_iter().map(Val::S).collect(),
                    _ => return Err(Error::user("concat needs a list or tuple of tensors as `input`".to_string())),
                };
                let mut ts = Vec::new();
                for it in &items {
                    ts.push(self.tensor(it, None)?);
                }
                match self.s(ins, "axis")? {
                    Static::None => {
                        let mut flat = Vec::new();
                        for t in ts {
                            let n = Dim::product(&self.b.shape(t).0).map_err(Error::user)?;
                            flat.push(self.b.reshape(t, Shape(vec![n]))?);
                        }
                        Val::T(self.b.op(Op::Concat { axis: 0 }, flat)?)
                    }
                    s => {
                        let first = *ts.first().ok_or_else(|| Error::user("concat of an empty list".to_string()))?;
                        let ax = s.as_int().ok_or_else(|| Error::user(format!("`axis` must be an int or None, got {s}")))?;
                        let axis = builder::axis(ax, self.b.rank(first))?;
                        Val::T(self.b.op(Op::Concat { axis }, ts)?)
                    }
                }
            }
            F::Split => {
                // Mithril's Split: chunk length = shape[axis] // split_size; chunk i is
                // x[..., i*len : (i+1)*len, ...].
                let x = self.t(ins, "input")?;
                let n = self.int(ins, "split_size")?;
                let rank = self.b.rank(x);
                let axis = builder::axis(self.int(ins, "axis")?, rank)?;
                let len = self.b.shape(x).0[axis]
                    .known()
                    .ok_or_else(|| Error::user(format!("cannot split the symbolic dimension of {}", self.b.shape(x))))?;
                if n <= 0 || n as u64 > len {
                    return Err(Error::user(format!("split_size must be from 1 to the size of axis {axis} ({len}), got {n}")));
                }
                let chunk = len as i64 / n;
                let mut parts = Vec::new();
                for i in 0..n {
                    let mut ranges = vec![SliceRange::FULL; rank];
                    ranges[axis] = SliceRange { start: Some(i * chunk), stop: Some((i + 1) * chunk), step: 1 };
                    parts.push(Val::T(self.b.op(Op::Slice { ranges }, vec![x])?));
                }
                Val::Seq(parts, true)
            }
            F::Pad => {
                let x = self.t(ins, "input")?;
                let rank = self.b.rank(x);
                let pw = self.s(ins, "pad_width")?;
                let pads = numpy_pad_width(&pw, rank)?;
                Val::T(self.b.op(Op::Pad { pads, value: 0.0 }, vec![x])?)
            }
            F::Indexer => {
                let index = self.s(ins, "index")?;
                match self.arg(ins, "input")?.clone() {
                    Val::T(x) => Val::T(self.index_tensor(x, &index)?),
                    Val::S(Static::Seq { items, list }) => index_seq(&items.into_iter().map(Val::S).collect::<Vec<_>>(), list, &index)?,
                    Val::Seq(items, list) => index_seq(&items, list, &index)?,
                    Val::S(other) => return Err(Error::user(format!("cannot index {other}"))),
                }
            }
            F::Cast => {
                let x = self.t(ins, "input")?;
                let d = self.s(ins, "dtype")?;
                let to = parse_dtype(&d).ok_or_else(|| Error::user(format!("unknown dtype {d}")))?;
                Val::T(self.b.cast(x, to)?)
            }
            F::Shape => {
                let x = self.t(ins, "input")?;
                Val::S(Static::tuple(self.b.shape(x).0.iter().map(dim_static).collect()))
            }
            F::Size => {
                let x = self.t(ins, "input")?;
                let shape = self.b.shape(x);
                match self.s(ins, "dim")? {
                    Static::None => Val::S(dim_static(&Dim::product(&shape.0).map_err(Error::user)?)),
                    s => {
                        let ints = s.as_ints().ok_or_else(|| Error::user(format!("`dim` must be None, an int or a tuple, got {s}")))?;
                        let mut out = Vec::new();
                        for a in &ints {
                            out.push(dim_static(&shape.0[builder::axis(*a, shape.rank())?]));
                        }
                        if matches!(s, Static::Int(_)) { Val::S(out.remove(0)) } else { Val::S(Static::tuple(out)) }
                    }
                }
            }
            F::Length => {
                let x = self.t(ins, "input")?;
                let shape = self.b.shape(x);
                Val::S(dim_static(shape.0.first().ok_or_else(|| Error::user("len() of a scalar".to_string()))?))
            }
            F::Dtype => {
                let x = self.t(ins, "input")?;
                Val::S(Static::Str(self.b.dtype(x).name().to_string()))
            }
            F::ToTuple | F::ToList | F::Union => {
                let items: Vec<Val> = ins.iter().map(|(_, v)| v.clone()).collect();
                let list = node.formula == F::ToList;
                if node.formula == F::Union {
                    let mut flat = Vec::new();
                    for it in items {
                        match it {
                            Val::S(Static::Seq { items, .. }) => flat.extend(items.into_iter().map(Val::S)),
                            Val::Seq(v, _) => flat.extend(v),
                            other => flat.push(other),
                        }
                    }
                    seq(flat, false)
                } else {
                    seq(items, list)
                }
            }
            F::Slice => {
                let get = |k: &str| -> Result<Option<i64>> {
                    match self.s(ins, k)? {
                        Static::None => Ok(None),
                        s => s.as_int().map(Some).ok_or_else(|| Error::user(format!("slice `{k}` must be an int or None, got {s}"))),
                    }
                };
                Val::S(Static::Slice { start: get("start")?, stop: get("stop")?, step: get("step")? })
            }
            F::TupleConverter => Val::S(match self.s(ins, "input")? {
                Static::Int(i) => Static::tuple(vec![Static::Int(i), Static::Int(i)]),
                other => other,
            }),
            F::StrideConverter => Val::S(match self.s(ins, "input")? {
                Static::None => self.s(ins, "kernel_size")?,
                other => other,
            }),
            F::PaddingConverter1d | F::PaddingConverter2d => {
                let p = self.s(ins, "input")?;
                let k = self.s(ins, "kernel_size")?;
                Val::S(convert_padding(&p, &k, node.formula == F::PaddingConverter2d)?)
            }
            F::ToTensor => {
                let v = self.s(ins, "input")?;
                let dtype = match self.s(ins, "dtype")? {
                    Static::None => None,
                    d => Some(parse_dtype(&d).ok_or_else(|| Error::user(format!("unknown dtype {d}")))?),
                };
                let mut t = v.to_tensor(Dtype::F32, Dtype::I32).ok_or_else(|| Error::user(format!("cannot make a tensor of {v}")))?;
                if let Some(d) = dtype {
                    t = Tensor::new(d, t.shape, t.data);
                }
                Val::T(self.b.constant(t))
            }
            F::Arange => self.arange(ins)?,
            F::Eye => {
                let n = self.int(ins, "N")?;
                let m = match self.s(ins, "M")? {
                    Static::None => n,
                    s => s.as_int().ok_or_else(|| Error::user(format!("`M` must be an int, got {s}")))?,
                };
                if n < 0 || m < 0 {
                    return Err(Error::user(format!("eye({n}, {m}): sizes must be non-negative")));
                }
                let (n, m) = (n as u64, m as u64);
                let numel = n.checked_mul(m).filter(|&v| v <= crate::interp::MAX_ELEMENTS).ok_or_else(|| Error::user(format!("eye({n}, {m}) is too large")))?;
                let data = (0..numel).map(|i| if i / m == i % m { 1.0 } else { 0.0 }).collect();
                let dtype = self.dtype_arg(ins)?.unwrap_or(Dtype::F32);
                Val::T(self.b.constant(Tensor::new(dtype, vec![n, m], data)))
            }
            F::Ones => {
                let shape = static_shape(&self.s(ins, "shape")?)?;
                let dtype = self.dtype_arg(ins)?.unwrap_or(Dtype::F32);
                Val::T(self.b.full(dtype, shape, 1.0)?)
            }
            F::SquaredError => {
                let d = self.bin(ins, "input", "target", B::Sub)?;
                let d = self.tensor(&d, None)?;
                Val::T(self.b.binary(B::Mul, d, d)?)
            }
            F::AbsoluteError => {
                let d = self.bin(ins, "input", "target", B::Sub)?;
                let d = self.tensor(&d, None)?;
                Val::T(self.b.unary(U::Abs, d)?)
            }
            F::HingeLoss | F::QuadHingeLoss => {
                // max(0, 1 - target * input), squared for the quadratic hinge.
                let p = self.bin(ins, "target", "input", B::Mul)?;
                let m = self.binary(&Val::S(Static::Float(1.0)), &p, B::Sub)?;
                let h = self.binary(&Val::S(Static::Float(0.0)), &m, B::Max)?;
                if node.formula == F::QuadHingeLoss {
                    let h = self.tensor(&h, None)?;
                    Val::T(self.b.binary(B::Mul, h, h)?)
                } else {
                    h
                }
            }
            F::QuantileLoss => {
                // e = target - input; max(q * e, (q - 1) * e).
                let e = self.bin(ins, "target", "input", B::Sub)?;
                let q = self.arg(ins, "quantile")?.clone();
                let qe = self.binary(&q, &e, B::Mul)?;
                let q1 = self.binary(&q, &Val::S(Static::Float(1.0)), B::Sub)?;
                let q1e = self.binary(&q1, &e, B::Mul)?;
                self.binary(&qe, &q1e, B::Max)?
            }
            F::CrossEntropyWithLogits | F::CrossEntropy | F::CrossEntropyWithLogProbs => self.cross_entropy(node.formula, ins)?,
            F::BinaryCrossEntropyWithLogits | F::BinaryCrossEntropy => self.binary_cross_entropy(node.formula, ins)?,
            F::RobustLog => {
                let x = self.t(ins, "input")?;
                let t = self.arg(ins, "threshold")?.clone();
                Val::T(self.robust_log(x, &t)?)
            }
            F::RobustSqrt => {
                // |x| < t ? |x| * (1 / sqrt(t)) : sqrt(|x|)
                let x = self.t(ins, "input")?;
                let t = self.threshold(ins, x)?;
                let a = self.b.unary(U::Abs, x)?;
                let small = self.b.binary(B::Lt, a, t)?;
                let st = self.b.unary(U::Sqrt, t)?;
                let rst = self.b.reciprocal(st)?;
                let lin = self.b.binary(B::Mul, a, rst)?;
                let safe = self.untaken(small, a)?;
                let sq = self.b.unary(U::Sqrt, safe)?;
                Val::T(self.b.select(small, lin, sq)?)
            }
            F::RobustPower => {
                // cond = exponent < 1 - log(t)/log|base| and |base| < t;
                // cond ? |base| / t : |base| ** exponent
                let base = self.t(ins, "base")?;
                let e = self.arg(ins, "exponent")?.clone();
                let e = self.tensor(&e, Some(self.b.dtype(base)))?;
                let t = self.threshold(ins, base)?;
                let d = self.b.dtype(base);
                let a = self.b.unary(U::Abs, base)?;
                let (lt, la) = (self.b.unary(U::Log, t)?, self.b.unary(U::Log, a)?);
                let ratio = self.b.binary(B::Div, lt, la)?;
                let one = self.b.scalar(d, 1.0);
                let bound = self.b.binary(B::Sub, one, ratio)?;
                let c1 = self.b.binary(B::Lt, e, bound)?;
                let c2 = self.b.binary(B::Lt, a, t)?;
                let cond = self.b.binary(B::And, c1, c2)?;
                let rt = self.b.reciprocal(t)?;
                let lin = self.b.binary(B::Mul, rt, a)?;
                // Outside `cond` a zero base has exponent >= 1 (log 0 = -inf makes the
                // bound 1), so its power is 0; written as 0, the exponent's gradient
                // there is Mithril's 0 rather than 0 * log 0.
                let zero = self.b.scalar(d, 0.0);
                let at_zero = self.b.binary(B::Eq, a, zero)?;
                let guard = self.b.binary(B::Or, cond, at_zero)?;
                let safe = self.untaken(guard, a)?;
                let pw = self.b.binary(B::Pow, safe, e)?;
                let rest = self.b.select(at_zero, zero, pw)?;
                Val::T(self.b.select(cond, lin, rest)?)
            }
            F::StableReciprocal => {
                // |x| < t ? (sign(x) + (1 - sign(|x|))) * 2 * (1/t) + (-x / t²) : 1/x
                let x = self.t(ins, "input")?;
                let t = self.threshold(ins, x)?;
                let d = self.b.dtype(x);
                let a = self.b.unary(U::Abs, x)?;
                let small = self.b.binary(B::Lt, a, t)?;
                let sx = self.b.unary(U::Sign, x)?;
                let sa = self.b.unary(U::Sign, a)?;
                let one = self.b.scalar(d, 1.0);
                let two = self.b.scalar(d, 2.0);
                let not_a = self.b.binary(B::Sub, one, sa)?;
                let s = self.b.binary(B::Add, sx, not_a)?;
                let s2 = self.b.binary(B::Mul, s, two)?;
                let rt = self.b.reciprocal(t)?;
                let lin0 = self.b.binary(B::Mul, s2, rt)?;
                let t2 = self.b.binary(B::Mul, t, t)?;
                let nx = self.b.unary(U::Neg, x)?;
                let xt = self.b.binary(B::Div, nx, t2)?;
                let lin = self.b.binary(B::Add, lin0, xt)?;
                let safe = self.untaken(small, x)?;
                let rec = self.b.reciprocal(safe)?;
                Val::T(self.b.select(small, lin, rec)?)
            }
            F::KlDivergence => {
                // target * (robust_log(target) - robust_log(input))
                let x = self.t(ins, "input")?;
                let target = self.t(ins, "target")?;
                let t = self.arg(ins, "threshold")?.clone();
                let lx = self.robust_log(x, &t)?;
                let lt = self.robust_log(target, &t)?;
                let diff = self.b.binary(B::Sub, lt, lx)?;
                Val::T(self.b.binary(B::Mul, target, diff)?)
            }
            F::PolynomialFeatures => self.polynomial_features(ins)?,
            F::NanToNum => {
                // NaN -> nan, +inf -> posinf (default: the largest finite value), -inf -> neginf.
                let x = self.t(ins, "input")?;
                let d = self.b.dtype(x);
                let max = match d {
                    Dtype::F64 => f64::MAX,
                    Dtype::F16 => half::f16::MAX.to_f64(),
                    Dtype::Bf16 => half::bf16::MAX.to_f64(),
                    _ => f32::MAX as f64,
                };
                let value = |s: Static, default: f64| -> Result<f64> {
                    match s {
                        Static::None => Ok(default),
                        s => s.as_f64().ok_or_else(|| Error::user(format!("nan_to_num replacement must be a number, got {s}"))),
                    }
                };
                let (nan, pinf, ninf) =
                    (value(self.s(ins, "nan")?, 0.0)?, value(self.s(ins, "posinf")?, max)?, value(self.s(ins, "neginf")?, -max)?);
                let mut y = x;
                for (probe, with) in [(f64::INFINITY, pinf), (f64::NEG_INFINITY, ninf)] {
                    let p = self.b.scalar(d, probe);
                    let hit = self.b.binary(B::Eq, y, p)?;
                    let w = self.b.scalar(d, with);
                    y = self.b.select(hit, w, y)?;
                }
                let isnan = self.b.unary(U::IsNan, x)?;
                let w = self.b.scalar(d, nan);
                Val::T(self.b.select(isnan, w, y)?)
            }
        })
    }

    /// Mithril's `scaled_dot_product_attention`: `softmax(q kᵀ · scale + bias) v`, with
    /// scale 1/√d by default and a causal bias of -inf above the diagonal.
    pub(super) fn attention(&mut self, ins: &[(String, Val)]) -> Result<Val> {
        let (q, k, v) = (self.t(ins, "query")?, self.t(ins, "key")?, self.t(ins, "value")?);
        let dropout = self.s(ins, "dropout_p")?;
        if dropout.as_f64() != Some(0.0) {
            return Err(Error::user(format!("dropout_p must be 0 for inference, got {dropout}")));
        }
        let scale = match self.s(ins, "scale")? {
            Static::None => None,
            s => Some(s.as_f64().ok_or_else(|| Error::user(format!("`scale` must be a number, got {s}")))?),
        };
        let causal = self.flag(ins, "is_causal")?;
        let mask = self.arg(ins, "attn_mask")?.clone();
        if causal && !matches!(mask, Val::S(Static::None)) {
            return Err(Error::user("attention with is_causal=True takes no attn_mask".to_string()));
        }
        // The builder's parts rather than `Builder::attention`: a compile-time mask
        // becomes a constant only here, after the scores.
        let mut w = self.b.attention_scores(q, k, scale)?;
        if causal {
            w = self.b.causal_mask(w)?;
        }
        if !matches!(mask, Val::S(Static::None)) {
            let m = self.tensor(&mask, Some(self.b.dtype(q)))?;
            w = self.b.attention_mask(w, m)?;
        }
        Ok(Val::T(self.b.attend(w, v)?))
    }

    /// The `threshold` input as a scalar tensor of `like`'s dtype (Mithril's constants
    /// take the precision of the tensor they guard).
    pub(super) fn threshold(&mut self, ins: &[(String, Val)], like: ValueId) -> Result<ValueId> {
        let t = self.arg(ins, "threshold")?.clone();
        self.threshold_of(&t, like)
    }

    pub(super) fn threshold_of(&mut self, t: &Val, like: ValueId) -> Result<ValueId> {
        let d = self.b.dtype(like);
        match t {
            Val::S(Static::Named(n)) => {
                let v = super::value::named_constant(n, d).ok_or_else(|| Error::user(format!("unknown constant Constant.{n}")))?;
                Ok(self.b.scalar(d, v))
            }
            other => self.tensor(other, Some(d)),
        }
    }

    /// `cond ? 1 : x`: the operand of a `where`'s branch that `cond` does not take. The
    /// untaken branch then sees a harmless input, so its derivative is finite and the
    /// zero cotangent the `where` sends it stays zero (not 0 · inf = NaN).
    pub(super) fn untaken(&mut self, cond: ValueId, x: ValueId) -> Result<ValueId> {
        let one = self.b.scalar(self.b.dtype(x), 1.0);
        self.b.select(cond, one, x)
    }

    /// Mithril's `robust_log`: `|x| < t ? log(t) + |x|/t - 1 : log(|x|)`. `|x|` is
    /// `x < 0 ? -x : x`, whose derivative at 0 is 1, as in Mithril's `robust_log_grad`
    /// (1/t at 0).
    pub(super) fn robust_log(&mut self, x: ValueId, t: &Val) -> Result<ValueId> {
        use BinaryOp as B;
        let t = self.threshold_of(t, x)?;
        let zero = self.b.scalar(self.b.dtype(x), 0.0);
        let neg = self.b.binary(B::Lt, x, zero)?;
        let nx = self.b.unary(UnaryOp::Neg, x)?;
        let a = self.b.select(neg, nx, x)?;
        let small = self.b.binary(B::Lt, a, t)?;
        let lt = self.b.unary(UnaryOp::Log, t)?;
        let at = self.b.binary(B::Div, a, t)?;
        let one = self.b.scalar(self.b.dtype(a), 1.0);
        let s = self.b.binary(B::Add, lt, at)?;
        let lin = self.b.binary(B::Sub, s, one)?;
        let safe = self.untaken(small, a)?;
        let la = self.b.unary(UnaryOp::Log, safe)?;
        self.b.select(small, lin, la)
    }

    /// The log a loss takes of a probability: `robust_log` with the `threshold` input
    /// when `robust` is set, else `np.log`.
    fn loss_log(&mut self, ins: &[(String, Val)], x: ValueId) -> Result<ValueId> {
        if self.flag(ins, "robust")? {
            let t = self.arg(ins, "threshold")?.clone();
            self.robust_log(x, &t)
        } else {
            self.b.unary(UnaryOp::Log, x)
        }
    }

    /// Mithril's `calculate_cross_entropy_class_weights` for `weights="auto"`: the
    /// balancing weights `total / (C · count[c])` of the batch's targets (one-hot
    /// counts of class indices when `categorical`), held constant in the gradient as
    /// Mithril caches them.
    fn auto_class_weights(&mut self, x: ValueId, target: ValueId, categorical: bool) -> Result<ValueId> {
        use BinaryOp as B;
        let xs = self.b.shape(x);
        let dtype = self.b.dtype(x);
        let classes = xs.0[1].known().ok_or_else(|| Error::user(format!("cross entropy with weights='auto' needs a known class count, got {xs}")))?;
        let labels = if categorical {
            if self.b.rank(target) != 1 {
                return Err(Error::user(format!("cross entropy with weights='auto' needs class targets of shape [N], got {}", self.b.shape(target))));
            }
            let hit = self.b.one_hot(target, Shape(vec![xs.0[0].clone(), xs.0[1].clone()]), 1)?;
            self.b.cast(hit, dtype)?
        } else {
            target
        };
        let rank = self.b.rank(labels);
        let others: Vec<usize> = (0..rank).filter(|&i| i != 1).collect();
        let counts = self.b.reduce(ReduceKind::Sum, labels, others, false)?;
        let total = self.b.reduce(ReduceKind::Sum, labels, (0..rank).collect(), false)?;
        let inv = self.b.reciprocal(counts)?;
        let scaled = self.b.binary(B::Mul, inv, total)?;
        let c = self.b.scalar(dtype, classes as f64);
        let w = self.b.binary(B::Div, scaled, c)?;
        self.b.op(Op::StopGradient, vec![w])
    }

    /// Mithril's `cross_entropy_with_logits`, `cross_entropy` (probabilities) and
    /// `cross_entropy_with_log_probs`, for input `[N, C, ...]`: with `categorical`
    /// (integer class targets `[N, ...]`) the picked class's loss times its weight,
    /// else `-sum(target * log_p * weights, axis=1)`. For logits, `robust` only guards
    /// the log of a sum that is at least 1, so it changes nothing.
    pub(super) fn cross_entropy(&mut self, formula: Formula, ins: &[(String, Val)]) -> Result<Val> {
        use BinaryOp as B;
        use Formula as F;
        let x = self.t(ins, "input")?;
        let xs = self.b.shape(x);
        if xs.rank() < 2 {
            return Err(Error::user(format!("cross entropy needs input of shape [N, C, ...], got {xs}")));
        }
        let dtype = self.b.dtype(x);
        let target = self.t(ins, "target")?;
        let categorical = self.flag(ins, "categorical")?;
        let weights = match self.s(ins, "weights")? {
            Static::Bool(false) | Static::None => None,
            Static::Str(s) if s.is_empty() => None,
            Static::Bool(true) => Some(self.auto_class_weights(x, target, categorical)?),
            Static::Str(s) if s == "auto" => Some(self.auto_class_weights(x, target, categorical)?),
            w => {
                let w = w.to_tensor(dtype, dtype).ok_or_else(|| Error::user(format!("cross entropy weights must be a list of numbers or 'auto', got {w}")))?;
                Some(self.b.constant(Tensor::new(dtype, vec![w.numel() as u64], w.data)))
            }
        };
        if categorical {
            let td = self.b.dtype(target);
            if !td.is_int() {
                return Err(Error::user(format!("categorical cross entropy needs integer targets, got {td}")));
            }
            let loss = if formula == F::CrossEntropyWithLogits {
                // log(sum(exp(x - max))) - (x - max)[target]
                let (norm, lse) = self.b.log_softmax_parts(x, 1)?;
                let label = self.b.pick(norm, target, 1)?;
                let lse = self.b.reshape(lse, self.b.shape(label))?;
                self.b.binary(B::Sub, lse, label)?
            } else {
                // -log(x[target]) (the log of the picked probability only), -x[target]
                let p = self.b.pick(x, target, 1)?;
                let lp = if formula == F::CrossEntropy { self.loss_log(ins, p)? } else { p };
                self.b.unary(UnaryOp::Neg, lp)?
            };
            return Ok(Val::T(match weights {
                Some(w) => {
                    let wt = self.b.op(Op::Gather { axis: 0 }, vec![w, target])?;
                    self.b.binary(B::Mul, loss, wt)?
                }
                None => loss,
            }));
        }
        let log_p = match formula {
            F::CrossEntropyWithLogits => self.b.log_softmax(x, 1)?,
            F::CrossEntropy => self.loss_log(ins, x)?,
            _ => x,
        };
        let mut prod = self.b.binary(B::Mul, target, log_p)?;
        if let Some(w) = weights {
            // weights along the class axis: [1, C, 1, ...]
            let mut ws = vec![Dim::Known(1); xs.rank()];
            ws[1] = xs.0[1].clone();
            let w = self.b.reshape(w, Shape(ws))?;
            prod = self.b.binary(B::Mul, prod, w)?;
        }
        let s = self.b.reduce(ReduceKind::Sum, prod, vec![1], false)?;
        Ok(Val::T(self.b.unary(UnaryOp::Neg, s)?))
    }

    /// Mithril's `binary_cross_entropy` (probabilities):
    /// `-pos_weight * target * log(input) - (1 - target) * log(1 - input)`, and
    /// `binary_cross_entropy_with_logits`: `(1 - target) * input - w * log_sigmoid(input)`
    /// with `w = (pos_weight - 1) * target + 1` and `log_sigmoid(x) = -softplus(-x)`
    /// (`robust` guards log(1 + e^-|x|) >= log 1 there, where it changes nothing).
    /// `pos_weight="auto"` is Mithril's batch balance `(1 - mean) / mean` of the
    /// targets (of `sigmoid(target)` for logits, as Mithril has it), held constant in
    /// the gradient.
    pub(super) fn binary_cross_entropy(&mut self, formula: Formula, ins: &[(String, Val)]) -> Result<Val> {
        use BinaryOp as B;
        let x = self.t(ins, "input")?;
        let dtype = self.b.dtype(x);
        let mut target = self.t(ins, "target")?;
        if !self.b.dtype(target).is_float() {
            target = self.b.cast(target, dtype)?;
        }
        let probs = formula == Formula::BinaryCrossEntropy;
        let pos_weight = match self.s(ins, "pos_weight")? {
            Static::Bool(true) => None,
            Static::Str(s) if s == "auto" => None,
            // Mithril multiplies by False (0) for probabilities and ignores it for logits.
            Static::Bool(false) => Some(if probs { 0.0 } else { 1.0 }),
            s => Some(s.as_f64().ok_or_else(|| Error::user(format!("pos_weight must be a number or 'auto', got {s}")))?),
        };
        let one = self.b.scalar(dtype, 1.0);
        let pw = match pos_weight {
            Some(w) => self.b.scalar(dtype, w),
            None => {
                let labels = if probs { target } else { self.b.unary(UnaryOp::Composite(Composite::Sigmoid), target)? };
                let axes = (0..self.b.rank(labels)).collect();
                let m = self.b.reduce(ReduceKind::Mean, labels, axes, false)?;
                let om = self.b.binary(B::Sub, one, m)?;
                let w = self.b.binary(B::Div, om, m)?;
                self.b.op(Op::StopGradient, vec![w])?
            }
        };
        let one_minus_t = self.b.binary(B::Sub, one, target)?;
        if probs {
            let npw = self.b.unary(UnaryOp::Neg, pw)?;
            let wt = self.b.binary(B::Mul, npw, target)?;
            let lx = self.loss_log(ins, x)?;
            let pos = self.b.binary(B::Mul, wt, lx)?;
            let one_minus_x = self.b.binary(B::Sub, one, x)?;
            let l1x = self.loss_log(ins, one_minus_x)?;
            let neg = self.b.binary(B::Mul, one_minus_t, l1x)?;
            return Ok(Val::T(self.b.binary(B::Sub, pos, neg)?));
        }
        let a = self.b.binary(B::Mul, one_minus_t, x)?;
        let nx = self.b.unary(UnaryOp::Neg, x)?;
        let sp = self.b.unary(UnaryOp::Composite(Composite::Softplus), nx)?;
        let sp = if pos_weight == Some(1.0) {
            sp
        } else {
            let pw1 = self.b.binary(B::Sub, pw, one)?;
            let lw = self.b.binary(B::Mul, pw1, target)?;
            let lw = self.b.binary(B::Add, lw, one)?;
            self.b.binary(B::Mul, lw, sp)?
        };
        Ok(Val::T(self.b.binary(B::Add, a, sp)?))
    }

    /// The optional `dtype` input (None when not given).
    fn dtype_arg(&self, ins: &[(String, Val)]) -> Result<Option<Dtype>> {
        match self.s(ins, "dtype")? {
            Static::None => Ok(None),
            d => parse_dtype(&d).map(Some).ok_or_else(|| Error::user(format!("unknown dtype {d}"))),
        }
    }

    /// `arange(start, stop, step)`: any float argument gives f32 (or `dtype`); all-int
    /// arguments give the int type of that width, even for a float `dtype`, as Mithril's
    /// NumPy core does (`float32` becomes `int32`).
    pub(super) fn arange(&mut self, ins: &[(String, Val)]) -> Result<Val> {
        let (start, stop, step) = (self.s(ins, "start")?, self.s(ins, "stop")?, self.s(ins, "step")?);
        let all_int = [&start, &stop, &step].iter().all(|v| matches!(v, Static::Int(_) | Static::Dim(_)));
        let dtype = match (self.dtype_arg(ins)?.unwrap_or(Dtype::F32), all_int) {
            (Dtype::F64, true) => Dtype::I64,
            (d, true) if d.is_float() => Dtype::I32,
            (d, _) => d,
        };
        if let (Static::Dim(d), Some(0), Some(1)) = (&stop, start.as_int(), step.as_int()) {
            let shape = Shape(vec![d.clone()]);
            return Ok(Val::T(self.b.op(Op::Iota { shape, axis: 0, dtype }, vec![])?));
        }
        let (a, b, s) = match (start.as_f64(), stop.as_f64(), step.as_f64()) {
            (Some(a), Some(b), Some(s)) if s != 0.0 => (a, b, s),
            _ => return Err(Error::user(format!("arange({start}, {stop}, {step}) needs numbers and a non-zero step"))),
        };
        let n = ((b - a) / s).ceil().max(0.0);
        if n > crate::interp::MAX_ELEMENTS as f64 {
            return Err(Error::user(format!("arange({start}, {stop}, {step}) is too long")));
        }
        let n = n as u64;
        let data = (0..n).map(|i| a + s * i as f64).collect();
        Ok(Val::T(self.b.constant(Tensor::new(dtype, vec![n], data))))
    }
}
