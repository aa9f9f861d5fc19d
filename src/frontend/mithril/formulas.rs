//! The meaning of each Mithril formula in IR ops: one arm per formula, folding
//! compile-time values and emitting tensor ops (with the composite formulas —
//! attention, cross entropy, the robust variants — spelled out in helpers below).

use super::attrs::*;
use super::emit::{Emitter, Val};
use super::library::Formula;
use super::net::PNode;
use super::value::Static;
use crate::error::{Error, Result};
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
            F::Sigmoid => self.unary(ins, U::Sigmoid)?,
            F::Relu => self.unary(ins, U::Relu)?,
            F::Softplus => self.unary(ins, U::Softplus)?,
            F::Sign => self.unary(ins, U::Sign)?,
            F::Floor => self.unary(ins, U::Floor)?,
            F::IsNan => self.unary(ins, U::IsNan)?,
            F::LogicalNot => self.unary(ins, U::Not)?,
            F::Gelu => {
                let u = if self.flag(ins, "approximate")? { U::GeluTanh } else { U::Gelu };
                self.unary(ins, u)?
            }
            F::Square => {
                let x = self.t(ins, "input")?;
                Val::T(self.tbin(x, x, B::Mul)?)
            }
            F::LeakyRelu => {
                // Mithril's max(0, x) + slope * min(0, x), as x > 0 ? x : slope * x: the
                // same values, and Mithril's gradient (slope at 0, not the two halves of
                // a tie between max and min).
                let x = self.t(ins, "input")?;
                let zero = self.scalar(self.graph.ty(x).dtype, 0.0);
                let pos = self.tbin(x, zero, B::Gt)?;
                let slope = self.arg(ins, "slope")?.clone();
                let scaled = self.binary(&slope, &Val::T(x), B::Mul)?;
                let scaled = self.tensor(&scaled, None)?;
                Val::T(self.op(Op::Where, vec![pos, x, scaled])?)
            }
            F::StopGradient => {
                let x = self.t(ins, "input")?;
                Val::T(self.op(Op::StopGradient, vec![x])?)
            }
            F::Buffer => self.arg(ins, "input")?.clone(),
            F::Clamp => {
                self.warn(TIE_GRADIENT, true);
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
                let z = self.scalar(self.graph.ty(x).dtype, 0.0);
                Val::T(self.op(Op::BroadcastTo { shape: self.shape(x) }, vec![z])?)
            }
            F::AtLeast1D => {
                let x = self.t(ins, "input")?;
                if self.rank(x) == 0 { Val::T(self.op(Op::Reshape { shape: Shape::known(&[1]) }, vec![x])?) } else { Val::T(x) }
            }
            F::Add => self.bin(ins, "left", "right", B::Add)?,
            F::Subtract => self.bin(ins, "left", "right", B::Sub)?,
            F::Multiplication => self.bin(ins, "left", "right", B::Mul)?,
            F::Divide => self.bin(ins, "numerator", "denominator", B::Div)?,
            F::FloorDivide => self.bin(ins, "numerator", "denominator", B::FloorDiv)?,
            F::Power => self.bin(ins, "base", "exponent", B::Pow)?,
            F::Minimum | F::Maximum => {
                self.warn(TIE_GRADIENT, true);
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
                let da = if let Val::T(id) = a { Some(self.graph.ty(id).dtype) } else { None };
                let db = if let Val::T(id) = b { Some(self.graph.ty(id).dtype) } else { None };
                let a = self.tensor(&a, db)?;
                let b = self.tensor(&b, da)?;
                Val::T(self.op(Op::Where, vec![c, a, b])?)
            }
            F::MatrixMultiplication => {
                let (l, r) = (self.t(ins, "left")?, self.t(ins, "right")?);
                Val::T(self.op(Op::MatMul, vec![l, r])?)
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
                Val::T(self.op(Op::Conv(attrs), args)?)
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
                    self.warn(
                        "max pooling pads with -inf (padding never wins); Mithril's NumPy backend pads with 0, which differs \
                         where a padded window's real values are all negative",
                        false,
                    );
                }
                Val::T(self.op(Op::Pool(attrs), vec![x])?)
            }
            F::Embedding => {
                let idx = self.t(ins, "input")?;
                let w = self.t(ins, "weight")?;
                Val::T(self.op(Op::Gather { axis: 0 }, vec![w, idx])?)
            }
            F::PermuteTensor => {
                let x = self.t(ins, "input")?;
                let idx = self.t(ins, "indices")?;
                Val::T(self.op(Op::Gather { axis: 0 }, vec![x, idx])?)
            }
            F::ScaledDotProductAttention => self.attention(ins)?,
            F::CartesianDiff => {
                // left[:, None, :] - right[None, :, :]
                let (l, r) = (self.t(ins, "left")?, self.t(ins, "right")?);
                let (ls, rs) = (self.shape(l), self.shape(r));
                if ls.rank() != 2 || rs.rank() != 2 {
                    return Err(Error::user(format!("cartesian difference needs two matrices, got {ls} and {rs}")));
                }
                let l3 = self.op(Op::Reshape { shape: Shape(vec![ls.0[0].clone(), Dim::Known(1), ls.0[1].clone()]) }, vec![l])?;
                let r3 = self.op(Op::Reshape { shape: Shape(vec![Dim::Known(1), rs.0[0].clone(), rs.0[1].clone()]) }, vec![r])?;
                Val::T(self.tbin(l3, r3, B::Sub)?)
            }
            F::Softmax => {
                let x = self.t(ins, "input")?;
                let axis = self.axis(self.int(ins, "axis")?, self.rank(x))?;
                Val::T(self.op(Op::Softmax { axis }, vec![x])?)
            }
            F::ReduceMean => self.reduce(ins, ReduceKind::Mean)?,
            F::ReduceSum => {
                // NumPy (and Torch) sum bools as int64 counts.
                let x = self.t(ins, "input")?;
                if self.graph.ty(x).dtype == Dtype::Bool {
                    let counts = self.op(Op::Cast { to: Dtype::I64 }, vec![x])?;
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
                    s => Some(self.axis(s.as_int().ok_or_else(|| Error::user(format!("`axis` must be None or an int, got {s}")))?, self.rank(x))?),
                };
                let kind = if node.formula == F::ReduceArgmax { ArgKind::ArgMax } else { ArgKind::ArgMin };
                let keepdim = self.flag(ins, "keepdim")?;
                Val::T(self.op(Op::ArgReduce { kind, axis, keepdim }, vec![x])?)
            }
            F::Variance => {
                let x = self.t(ins, "input")?;
                let axes = self.axes(&self.s(ins, "axis")?, self.rank(x))?;
                let keepdim = self.flag(ins, "keepdim")?;
                let c = self.s(ins, "correction")?;
                let correction = c.as_f64().ok_or_else(|| Error::user(format!("`correction` must be a number, got {c}")))?;
                Val::T(self.op(Op::Variance { axes, keepdim, correction }, vec![x])?)
            }
            F::Reshape => {
                let x = self.t(ins, "input")?;
                let target = self.s(ins, "shape")?;
                Val::T(self.reshape(x, &target)?)
            }
            F::Flatten => {
                let x = self.t(ins, "input")?;
                let shape = self.shape(x);
                let rank = shape.rank();
                if rank == 0 {
                    return Ok(Val::T(self.op(Op::Reshape { shape: Shape::known(&[1]) }, vec![x])?));
                }
                let start = self.axis(self.int(ins, "start_dim")?, rank)?;
                let end = self.axis(self.int(ins, "end_dim")?, rank)?;
                if start > end {
                    return Err(Error::user(format!("flatten start_dim {start} is after end_dim {end}")));
                }
                let merged = merge_dims(&shape.0[start..=end]).map_err(Error::user)?;
                let mut dims = shape.0[..start].to_vec();
                dims.push(merged);
                dims.extend(shape.0[end + 1..].iter().cloned());
                Val::T(self.op(Op::Reshape { shape: Shape(dims) }, vec![x])?)
            }
            F::Transpose => {
                let x = self.t(ins, "input")?;
                let rank = self.rank(x);
                let perm = match self.s(ins, "axes")? {
                    Static::None => (0..rank).rev().collect(),
                    s => {
                        let ints = s.as_ints().ok_or_else(|| Error::user(format!("`axes` must be a tuple of ints, got {s}")))?;
                        ints.iter().map(|&a| self.axis(a, rank)).collect::<Result<Vec<_>>>()?
                    }
                };
                Val::T(self.op(Op::Transpose { perm }, vec![x])?)
            }
            F::SwapAxes => {
                let x = self.t(ins, "input")?;
                let rank = self.rank(x);
                let (a, b) = (self.axis(self.int(ins, "axis1")?, rank)?, self.axis(self.int(ins, "axis2")?, rank)?);
                let mut perm: Vec<usize> = (0..rank).collect();
                perm.swap(a, b);
                Val::T(self.transpose(x, perm)?)
            }
            F::Squeeze => {
                let x = self.t(ins, "input")?;
                let dims: Vec<Dim> = self.shape(x).0.into_iter().filter(|d| !d.is_one()).collect();
                Val::T(self.op(Op::Reshape { shape: Shape(dims) }, vec![x])?)
            }
            F::BroadcastTo => {
                let x = self.t(ins, "input")?;
                let target = self.s(ins, "shape")?;
                let shape = static_shape(&target)?;
                Val::T(self.op(Op::BroadcastTo { shape }, vec![x])?)
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
                            let n = merge_dims(&self.shape(t).0).map_err(Error::user)?;
                            flat.push(self.op(Op::Reshape { shape: Shape(vec![n]) }, vec![t])?);
                        }
                        Val::T(self.op(Op::Concat { axis: 0 }, flat)?)
                    }
                    s => {
                        let first = *ts.first().ok_or_else(|| Error::user("concat of an empty list".to_string()))?;
                        let ax = s.as_int().ok_or_else(|| Error::user(format!("`axis` must be an int or None, got {s}")))?;
                        let axis = self.axis(ax, self.rank(first))?;
                        Val::T(self.op(Op::Concat { axis }, ts)?)
                    }
                }
            }
            F::Split => {
                // Mithril's Split: chunk length = shape[axis] // split_size; chunk i is
                // x[..., i*len : (i+1)*len, ...].
                let x = self.t(ins, "input")?;
                let n = self.int(ins, "split_size")?;
                let rank = self.rank(x);
                let axis = self.axis(self.int(ins, "axis")?, rank)?;
                let len = self.shape(x).0[axis]
                    .known()
                    .ok_or_else(|| Error::user(format!("cannot split the symbolic dimension of {}", self.shape(x))))?;
                if n <= 0 || n as u64 > len {
                    return Err(Error::user(format!("split_size must be from 1 to the size of axis {axis} ({len}), got {n}")));
                }
                let chunk = len as i64 / n;
                let mut parts = Vec::new();
                for i in 0..n {
                    let mut ranges = vec![SliceRange::FULL; rank];
                    ranges[axis] = SliceRange { start: Some(i * chunk), stop: Some((i + 1) * chunk), step: 1 };
                    parts.push(Val::T(self.op(Op::Slice { ranges }, vec![x])?));
                }
                Val::Seq(parts, true)
            }
            F::Pad => {
                let x = self.t(ins, "input")?;
                let rank = self.rank(x);
                let pw = self.s(ins, "pad_width")?;
                let pads = numpy_pad_width(&pw, rank)?;
                Val::T(self.op(Op::Pad { pads, value: 0.0 }, vec![x])?)
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
                Val::T(self.op(Op::Cast { to }, vec![x])?)
            }
            F::Shape => {
                let x = self.t(ins, "input")?;
                Val::S(Static::tuple(self.shape(x).0.iter().map(dim_static).collect()))
            }
            F::Size => {
                let x = self.t(ins, "input")?;
                let shape = self.shape(x);
                match self.s(ins, "dim")? {
                    Static::None => Val::S(dim_static(&merge_dims(&shape.0).map_err(Error::user)?)),
                    s => {
                        let ints = s.as_ints().ok_or_else(|| Error::user(format!("`dim` must be None, an int or a tuple, got {s}")))?;
                        let mut out = Vec::new();
                        for a in &ints {
                            out.push(dim_static(&shape.0[self.axis(*a, shape.rank())?]));
                        }
                        if matches!(s, Static::Int(_)) { Val::S(out.remove(0)) } else { Val::S(Static::tuple(out)) }
                    }
                }
            }
            F::Length => {
                let x = self.t(ins, "input")?;
                let shape = self.shape(x);
                Val::S(dim_static(shape.0.first().ok_or_else(|| Error::user("len() of a scalar".to_string()))?))
            }
            F::Dtype => {
                let x = self.t(ins, "input")?;
                Val::S(Static::Str(self.graph.ty(x).dtype.name().to_string()))
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
                Val::T(self.constant(t))
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
                Val::T(self.constant(Tensor::new(dtype, vec![n, m], data)))
            }
            F::Ones => {
                let shape = static_shape(&self.s(ins, "shape")?)?;
                let dtype = self.dtype_arg(ins)?.unwrap_or(Dtype::F32);
                let one = self.scalar(dtype, 1.0);
                Val::T(self.op(Op::BroadcastTo { shape }, vec![one])?)
            }
            F::SquaredError => {
                let d = self.bin(ins, "input", "target", B::Sub)?;
                let d = self.tensor(&d, None)?;
                Val::T(self.tbin(d, d, B::Mul)?)
            }
            F::AbsoluteError => {
                let d = self.bin(ins, "input", "target", B::Sub)?;
                let d = self.tensor(&d, None)?;
                Val::T(self.op(Op::Unary(U::Abs), vec![d])?)
            }
            F::HingeLoss | F::QuadHingeLoss => {
                // max(0, 1 - target * input), squared for the quadratic hinge.
                let p = self.bin(ins, "target", "input", B::Mul)?;
                let m = self.binary(&Val::S(Static::Float(1.0)), &p, B::Sub)?;
                let h = self.binary(&Val::S(Static::Float(0.0)), &m, B::Max)?;
                if node.formula == F::QuadHingeLoss {
                    let h = self.tensor(&h, None)?;
                    Val::T(self.tbin(h, h, B::Mul)?)
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
                let a = self.op(Op::Unary(U::Abs), vec![x])?;
                let small = self.tbin(a, t, B::Lt)?;
                let st = self.op(Op::Unary(U::Sqrt), vec![t])?;
                let rst = self.reciprocal(st)?;
                let lin = self.tbin(a, rst, B::Mul)?;
                let safe = self.untaken(small, a)?;
                let sq = self.op(Op::Unary(U::Sqrt), vec![safe])?;
                Val::T(self.op(Op::Where, vec![small, lin, sq])?)
            }
            F::RobustPower => {
                // cond = exponent < 1 - log(t)/log|base| and |base| < t;
                // cond ? |base| / t : |base| ** exponent
                let base = self.t(ins, "base")?;
                let e = self.arg(ins, "exponent")?.clone();
                let e = self.tensor(&e, Some(self.graph.ty(base).dtype))?;
                let t = self.threshold(ins, base)?;
                let d = self.graph.ty(base).dtype;
                let a = self.op(Op::Unary(U::Abs), vec![base])?;
                let (lt, la) = (self.op(Op::Unary(U::Log), vec![t])?, self.op(Op::Unary(U::Log), vec![a])?);
                let ratio = self.tbin(lt, la, B::Div)?;
                let one = self.scalar(d, 1.0);
                let bound = self.tbin(one, ratio, B::Sub)?;
                let c1 = self.tbin(e, bound, B::Lt)?;
                let c2 = self.tbin(a, t, B::Lt)?;
                let cond = self.tbin(c1, c2, B::And)?;
                let rt = self.reciprocal(t)?;
                let lin = self.tbin(rt, a, B::Mul)?;
                // Outside `cond` a zero base has exponent >= 1 (log 0 = -inf makes the
                // bound 1), so its power is 0; written as 0, the exponent's gradient
                // there is Mithril's 0 rather than 0 * log 0.
                let zero = self.scalar(d, 0.0);
                let at_zero = self.tbin(a, zero, B::Eq)?;
                let guard = self.tbin(cond, at_zero, B::Or)?;
                let safe = self.untaken(guard, a)?;
                let pw = self.tbin(safe, e, B::Pow)?;
                let rest = self.op(Op::Where, vec![at_zero, zero, pw])?;
                Val::T(self.op(Op::Where, vec![cond, lin, rest])?)
            }
            F::StableReciprocal => {
                // |x| < t ? (sign(x) + (1 - sign(|x|))) * 2 * (1/t) + (-x / t²) : 1/x
                let x = self.t(ins, "input")?;
                let t = self.threshold(ins, x)?;
                let d = self.graph.ty(x).dtype;
                let a = self.op(Op::Unary(U::Abs), vec![x])?;
                let small = self.tbin(a, t, B::Lt)?;
                let sx = self.op(Op::Unary(U::Sign), vec![x])?;
                let sa = self.op(Op::Unary(U::Sign), vec![a])?;
                let one = self.scalar(d, 1.0);
                let two = self.scalar(d, 2.0);
                let not_a = self.tbin(one, sa, B::Sub)?;
                let s = self.tbin(sx, not_a, B::Add)?;
                let s2 = self.tbin(s, two, B::Mul)?;
                let rt = self.reciprocal(t)?;
                let lin0 = self.tbin(s2, rt, B::Mul)?;
                let t2 = self.tbin(t, t, B::Mul)?;
                let nx = self.op(Op::Unary(U::Neg), vec![x])?;
                let xt = self.tbin(nx, t2, B::Div)?;
                let lin = self.tbin(lin0, xt, B::Add)?;
                let safe = self.untaken(small, x)?;
                let rec = self.reciprocal(safe)?;
                Val::T(self.op(Op::Where, vec![small, lin, rec])?)
            }
            F::KlDivergence => {
                // target * (robust_log(target) - robust_log(input))
                let x = self.t(ins, "input")?;
                let target = self.t(ins, "target")?;
                let t = self.arg(ins, "threshold")?.clone();
                let lx = self.robust_log(x, &t)?;
                let lt = self.robust_log(target, &t)?;
                let diff = self.tbin(lt, lx, B::Sub)?;
                Val::T(self.tbin(target, diff, B::Mul)?)
            }
            F::PolynomialFeatures => self.polynomial_features(ins)?,
            F::NanToNum => {
                // NaN -> nan, +inf -> posinf (default: the largest finite value), -inf -> neginf.
                let x = self.t(ins, "input")?;
                let d = self.graph.ty(x).dtype;
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
                    let p = self.scalar(d, probe);
                    let hit = self.tbin(y, p, B::Eq)?;
                    let w = self.scalar(d, with);
                    y = self.op(Op::Where, vec![hit, w, y])?;
                }
                let isnan = self.op(Op::Unary(U::IsNan), vec![x])?;
                let w = self.scalar(d, nan);
                Val::T(self.op(Op::Where, vec![isnan, w, y])?)
            }
        })
    }

    /// Mithril's `scaled_dot_product_attention`: `softmax(q kᵀ · scale + bias) v`, with
    /// scale 1/√d by default and a causal bias of -inf above the diagonal.
    pub(super) fn attention(&mut self, ins: &[(String, Val)]) -> Result<Val> {
        use BinaryOp as B;
        let (q, k, v) = (self.t(ins, "query")?, self.t(ins, "key")?, self.t(ins, "value")?);
        let dropout = self.s(ins, "dropout_p")?;
        if dropout.as_f64() != Some(0.0) {
            return Err(Error::user(format!("dropout_p must be 0 for inference, got {dropout}")));
        }
        let (qs, ks) = (self.shape(q), self.shape(k));
        if qs.rank() < 2 || ks.rank() < 2 {
            return Err(Error::user(format!("attention needs query and key of rank 2 or more, got {qs} and {ks}")));
        }
        let dtype = self.graph.ty(q).dtype;
        let scale = match self.s(ins, "scale")? {
            Static::None => {
                let d = qs.0[qs.rank() - 1].known().ok_or_else(|| Error::user(format!("attention needs a known head size, got {qs}")))?;
                1.0 / (d as f64).sqrt()
            }
            s => s.as_f64().ok_or_else(|| Error::user(format!("`scale` must be a number, got {s}")))?,
        };
        let rank = ks.rank();
        let mut perm: Vec<usize> = (0..rank).collect();
        perm.swap(rank - 2, rank - 1);
        let kt = self.op(Op::Transpose { perm }, vec![k])?;
        let scores = self.op(Op::MatMul, vec![q, kt])?;
        let sc = self.scalar(dtype, scale);
        let mut w = self.tbin(scores, sc, B::Mul)?;
        let (l, s) = (qs.0[qs.rank() - 2].clone(), ks.0[rank - 2].clone());
        let causal = self.flag(ins, "is_causal")?;
        let mask = self.arg(ins, "attn_mask")?.clone();
        if causal {
            if !matches!(mask, Val::S(Static::None)) {
                return Err(Error::user("attention with is_causal=True takes no attn_mask".to_string()));
            }
            // bias[i, j] = 0 where j <= i (np.tril), else -inf.
            let ls = Shape(vec![l.clone(), s.clone()]);
            let rows = self.op(Op::Iota { shape: ls.clone(), axis: 0, dtype: Dtype::I32 }, vec![])?;
            let cols = self.op(Op::Iota { shape: ls, axis: 1, dtype: Dtype::I32 }, vec![])?;
            let keep = self.tbin(cols, rows, B::Le)?;
            let zero = self.scalar(dtype, 0.0);
            let ninf = self.scalar(dtype, f64::NEG_INFINITY);
            let bias = self.op(Op::Where, vec![keep, zero, ninf])?;
            w = self.tbin(w, bias, B::Add)?;
        }
        match mask {
            Val::S(Static::None) => {}
            m => {
                let m = self.tensor(&m, Some(dtype))?;
                if self.graph.ty(m).dtype == Dtype::Bool {
                    let zero = self.scalar(dtype, 0.0);
                    let ninf = self.scalar(dtype, f64::NEG_INFINITY);
                    let bias = self.op(Op::Where, vec![m, zero, ninf])?;
                    w = self.tbin(w, bias, B::Add)?;
                } else {
                    w = self.tbin(w, m, B::Add)?;
                }
            }
        }
        let axis = self.rank(w) - 1;
        let p = self.op(Op::Softmax { axis }, vec![w])?;
        Ok(Val::T(self.op(Op::MatMul, vec![p, v])?))
    }

    /// The `threshold` input as a scalar tensor of `like`'s dtype (Mithril's constants
    /// take the precision of the tensor they guard).
    pub(super) fn threshold(&mut self, ins: &[(String, Val)], like: ValueId) -> Result<ValueId> {
        let t = self.arg(ins, "threshold")?.clone();
        self.threshold_of(&t, like)
    }

    pub(super) fn threshold_of(&mut self, t: &Val, like: ValueId) -> Result<ValueId> {
        let d = self.graph.ty(like).dtype;
        match t {
            Val::S(Static::Named(n)) => {
                let v = super::value::named_constant(n, d).ok_or_else(|| Error::user(format!("unknown constant Constant.{n}")))?;
                Ok(self.scalar(d, v))
            }
            other => self.tensor(other, Some(d)),
        }
    }

    /// `cond ? 1 : x`: the operand of a `where`'s branch that `cond` does not take. The
    /// untaken branch then sees a harmless input, so its derivative is finite and the
    /// zero cotangent the `where` sends it stays zero (not 0 · inf = NaN).
    pub(super) fn untaken(&mut self, cond: ValueId, x: ValueId) -> Result<ValueId> {
        let one = self.scalar(self.graph.ty(x).dtype, 1.0);
        self.op(Op::Where, vec![cond, one, x])
    }

    /// `1 / x` (NumPy's `reciprocal`).
    pub(super) fn reciprocal(&mut self, x: ValueId) -> Result<ValueId> {
        let one = self.scalar(self.graph.ty(x).dtype, 1.0);
        self.tbin(one, x, BinaryOp::Div)
    }

    /// Mithril's `robust_log`: `|x| < t ? log(t) + |x|/t - 1 : log(|x|)`. `|x|` is
    /// `x < 0 ? -x : x`, whose derivative at 0 is 1, as in Mithril's `robust_log_grad`
    /// (1/t at 0).
    pub(super) fn robust_log(&mut self, x: ValueId, t: &Val) -> Result<ValueId> {
        use BinaryOp as B;
        let t = self.threshold_of(t, x)?;
        let zero = self.scalar(self.graph.ty(x).dtype, 0.0);
        let neg = self.tbin(x, zero, B::Lt)?;
        let nx = self.op(Op::Unary(UnaryOp::Neg), vec![x])?;
        let a = self.op(Op::Where, vec![neg, nx, x])?;
        let small = self.tbin(a, t, B::Lt)?;
        let lt = self.op(Op::Unary(UnaryOp::Log), vec![t])?;
        let at = self.tbin(a, t, B::Div)?;
        let one = self.scalar(self.graph.ty(a).dtype, 1.0);
        let s = self.tbin(lt, at, B::Add)?;
        let lin = self.tbin(s, one, B::Sub)?;
        let safe = self.untaken(small, a)?;
        let la = self.op(Op::Unary(UnaryOp::Log), vec![safe])?;
        self.op(Op::Where, vec![small, lin, la])
    }

    /// The log a loss takes of a probability: `robust_log` with the `threshold` input
    /// when `robust` is set, else `np.log`.
    fn loss_log(&mut self, ins: &[(String, Val)], x: ValueId) -> Result<ValueId> {
        if self.flag(ins, "robust")? {
            let t = self.arg(ins, "threshold")?.clone();
            self.robust_log(x, &t)
        } else {
            self.op(Op::Unary(UnaryOp::Log), vec![x])
        }
    }

    /// `take_along_axis(x, target[:, None], axis=1)[:, 0]`, as a masked sum over the
    /// class axis (the IR has no take-along-axis; the mask's gradient is the one-hot).
    fn pick_class(&mut self, x: ValueId, target: ValueId) -> Result<ValueId> {
        let xs = self.shape(x);
        let mut t_shape = self.shape(target).0;
        t_shape.insert(1.min(t_shape.len()), Dim::Known(1));
        let t2 = self.op(Op::Reshape { shape: Shape(t_shape) }, vec![target])?;
        let cls = self.op(Op::Iota { shape: xs, axis: 1, dtype: self.graph.ty(target).dtype }, vec![])?;
        let hit = self.tbin(cls, t2, BinaryOp::Eq)?;
        let zero = self.scalar(self.graph.ty(x).dtype, 0.0);
        let picked = self.op(Op::Where, vec![hit, x, zero])?;
        self.op(Op::Reduce { kind: ReduceKind::Sum, axes: vec![1], keepdim: false }, vec![picked])
    }

    /// Logits over the class axis 1, shifted by their maximum, and the log of the sum
    /// of their exponentials (kept as a size-1 axis).
    fn log_normalizer(&mut self, x: ValueId) -> Result<(ValueId, ValueId)> {
        let mx = self.op(Op::Reduce { kind: ReduceKind::Max, axes: vec![1], keepdim: true }, vec![x])?;
        let norm = self.tbin(x, mx, BinaryOp::Sub)?;
        let e = self.op(Op::Unary(UnaryOp::Exp), vec![norm])?;
        let se = self.op(Op::Reduce { kind: ReduceKind::Sum, axes: vec![1], keepdim: true }, vec![e])?;
        Ok((norm, self.op(Op::Unary(UnaryOp::Log), vec![se])?))
    }

    /// Mithril's `calculate_cross_entropy_class_weights` for `weights="auto"`: the
    /// balancing weights `total / (C · count[c])` of the batch's targets (one-hot
    /// counts of class indices when `categorical`), held constant in the gradient as
    /// Mithril caches them.
    fn auto_class_weights(&mut self, x: ValueId, target: ValueId, categorical: bool) -> Result<ValueId> {
        use BinaryOp as B;
        let xs = self.shape(x);
        let dtype = self.graph.ty(x).dtype;
        let classes = xs.0[1].known().ok_or_else(|| Error::user(format!("cross entropy with weights='auto' needs a known class count, got {xs}")))?;
        let labels = if categorical {
            if self.rank(target) != 1 {
                return Err(Error::user(format!("cross entropy with weights='auto' needs class targets of shape [N], got {}", self.shape(target))));
            }
            let one_hot_shape = Shape(vec![xs.0[0].clone(), xs.0[1].clone()]);
            let n = self.shape(target).0[0].clone();
            let t2 = self.op(Op::Reshape { shape: Shape(vec![n, Dim::Known(1)]) }, vec![target])?;
            let cls = self.op(Op::Iota { shape: one_hot_shape, axis: 1, dtype: self.graph.ty(target).dtype }, vec![])?;
            let hit = self.tbin(cls, t2, B::Eq)?;
            self.op(Op::Cast { to: dtype }, vec![hit])?
        } else {
            target
        };
        let rank = self.rank(labels);
        let others: Vec<usize> = (0..rank).filter(|&i| i != 1).collect();
        let counts = self.op(Op::Reduce { kind: ReduceKind::Sum, axes: others, keepdim: false }, vec![labels])?;
        let total = self.op(Op::Reduce { kind: ReduceKind::Sum, axes: (0..rank).collect(), keepdim: false }, vec![labels])?;
        let inv = self.reciprocal(counts)?;
        let scaled = self.tbin(inv, total, B::Mul)?;
        let c = self.scalar(dtype, classes as f64);
        let w = self.tbin(scaled, c, B::Div)?;
        self.op(Op::StopGradient, vec![w])
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
        let xs = self.shape(x);
        if xs.rank() < 2 {
            return Err(Error::user(format!("cross entropy needs input of shape [N, C, ...], got {xs}")));
        }
        let dtype = self.graph.ty(x).dtype;
        let target = self.t(ins, "target")?;
        let categorical = self.flag(ins, "categorical")?;
        let weights = match self.s(ins, "weights")? {
            Static::Bool(false) | Static::None => None,
            Static::Str(s) if s.is_empty() => None,
            Static::Bool(true) => Some(self.auto_class_weights(x, target, categorical)?),
            Static::Str(s) if s == "auto" => Some(self.auto_class_weights(x, target, categorical)?),
            w => {
                let w = w.to_tensor(dtype, dtype).ok_or_else(|| Error::user(format!("cross entropy weights must be a list of numbers or 'auto', got {w}")))?;
                Some(self.constant(Tensor::new(dtype, vec![w.numel() as u64], w.data)))
            }
        };
        if categorical {
            let td = self.graph.ty(target).dtype;
            if !td.is_int() {
                return Err(Error::user(format!("categorical cross entropy needs integer targets, got {td}")));
            }
            let loss = if formula == F::CrossEntropyWithLogits {
                // log(sum(exp(x - max))) - (x - max)[target]
                let (norm, lse) = self.log_normalizer(x)?;
                let label = self.pick_class(norm, target)?;
                let lse = self.op(Op::Reshape { shape: self.shape(label) }, vec![lse])?;
                self.tbin(lse, label, B::Sub)?
            } else {
                // -log(x[target]) (the log of the picked probability only), -x[target]
                let p = self.pick_class(x, target)?;
                let lp = if formula == F::CrossEntropy { self.loss_log(ins, p)? } else { p };
                self.op(Op::Unary(UnaryOp::Neg), vec![lp])?
            };
            return Ok(Val::T(match weights {
                Some(w) => {
                    let wt = self.op(Op::Gather { axis: 0 }, vec![w, target])?;
                    self.tbin(loss, wt, B::Mul)?
                }
                None => loss,
            }));
        }
        let log_p = match formula {
            F::CrossEntropyWithLogits => {
                // log_softmax(x) = (x - max) - log(sum(exp(x - max)))
                let (norm, lse) = self.log_normalizer(x)?;
                self.tbin(norm, lse, B::Sub)?
            }
            F::CrossEntropy => self.loss_log(ins, x)?,
            _ => x,
        };
        let mut prod = self.tbin(target, log_p, B::Mul)?;
        if let Some(w) = weights {
            // weights along the class axis: [1, C, 1, ...]
            let mut ws = vec![Dim::Known(1); xs.rank()];
            ws[1] = xs.0[1].clone();
            let w = self.op(Op::Reshape { shape: Shape(ws) }, vec![w])?;
            prod = self.tbin(prod, w, B::Mul)?;
        }
        let s = self.op(Op::Reduce { kind: ReduceKind::Sum, axes: vec![1], keepdim: false }, vec![prod])?;
        Ok(Val::T(self.op(Op::Unary(UnaryOp::Neg), vec![s])?))
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
        let dtype = self.graph.ty(x).dtype;
        let mut target = self.t(ins, "target")?;
        if !self.graph.ty(target).dtype.is_float() {
            target = self.op(Op::Cast { to: dtype }, vec![target])?;
        }
        let probs = formula == Formula::BinaryCrossEntropy;
        let pos_weight = match self.s(ins, "pos_weight")? {
            Static::Bool(true) => None,
            Static::Str(s) if s == "auto" => None,
            // Mithril multiplies by False (0) for probabilities and ignores it for logits.
            Static::Bool(false) => Some(if probs { 0.0 } else { 1.0 }),
            s => Some(s.as_f64().ok_or_else(|| Error::user(format!("pos_weight must be a number or 'auto', got {s}")))?),
        };
        let one = self.scalar(dtype, 1.0);
        let pw = match pos_weight {
            Some(w) => self.scalar(dtype, w),
            None => {
                let labels = if probs { target } else { self.op(Op::Unary(UnaryOp::Sigmoid), vec![target])? };
                let axes = (0..self.rank(labels)).collect();
                let m = self.op(Op::Reduce { kind: ReduceKind::Mean, axes, keepdim: false }, vec![labels])?;
                let om = self.tbin(one, m, B::Sub)?;
                let w = self.tbin(om, m, B::Div)?;
                self.op(Op::StopGradient, vec![w])?
            }
        };
        let one_minus_t = self.tbin(one, target, B::Sub)?;
        if probs {
            let npw = self.op(Op::Unary(UnaryOp::Neg), vec![pw])?;
            let wt = self.tbin(npw, target, B::Mul)?;
            let lx = self.loss_log(ins, x)?;
            let pos = self.tbin(wt, lx, B::Mul)?;
            let one_minus_x = self.tbin(one, x, B::Sub)?;
            let l1x = self.loss_log(ins, one_minus_x)?;
            let neg = self.tbin(one_minus_t, l1x, B::Mul)?;
            return Ok(Val::T(self.tbin(pos, neg, B::Sub)?));
        }
        let a = self.tbin(one_minus_t, x, B::Mul)?;
        let nx = self.op(Op::Unary(UnaryOp::Neg), vec![x])?;
        let sp = self.op(Op::Unary(UnaryOp::Softplus), vec![nx])?;
        let sp = if pos_weight == Some(1.0) {
            sp
        } else {
            let pw1 = self.tbin(pw, one, B::Sub)?;
            let lw = self.tbin(pw1, target, B::Mul)?;
            let lw = self.tbin(lw, one, B::Add)?;
            self.tbin(lw, sp, B::Mul)?
        };
        Ok(Val::T(self.tbin(a, sp, B::Add)?))
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
        if let (Static::Dim(sym), Some(0), Some(1)) = (&stop, start.as_int(), step.as_int()) {
            let shape = Shape(vec![Dim::Sym(sym.clone())]);
            return Ok(Val::T(self.op(Op::Iota { shape, axis: 0, dtype }, vec![])?));
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
        Ok(Val::T(self.constant(Tensor::new(dtype, vec![n], data))))
    }
}
