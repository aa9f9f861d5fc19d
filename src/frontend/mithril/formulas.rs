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
                // Mithril: max(0, x) + slope * min(0, x).
                let x = self.t(ins, "input")?;
                let d = self.graph.ty(x).dtype;
                let zero = self.scalar(d, 0.0);
                let pos = self.tbin(zero, x, B::Max)?;
                let neg = self.tbin(zero, x, B::Min)?;
                let slope = self.arg(ins, "slope")?.clone();
                let scaled = self.binary(&slope, &Val::T(neg), B::Mul)?;
                self.binary(&Val::T(pos), &scaled, B::Add)?
            }
            F::StopGradient => {
                let x = self.t(ins, "input")?;
                Val::T(self.op(Op::StopGradient, vec![x])?)
            }
            F::Buffer => self.arg(ins, "input")?.clone(),
            F::Clamp => {
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
            F::Minimum => self.bin(ins, "left", "right", B::Min)?,
            F::Maximum => self.bin(ins, "left", "right", B::Max)?,
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
            F::ReduceSum => self.reduce(ins, ReduceKind::Sum)?,
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
            F::CrossEntropyWithLogits => self.cross_entropy(ins)?,
            F::RobustLog => {
                let x = self.t(ins, "input")?;
                let t = self.arg(ins, "threshold")?.clone();
                Val::T(self.robust_log(x, &t)?)
            }
            F::RobustSqrt => {
                // |x| < t ? |x| / sqrt(t) : sqrt(|x|)
                let x = self.t(ins, "input")?;
                let t = self.threshold(ins, x)?;
                let a = self.op(Op::Unary(U::Abs), vec![x])?;
                let small = self.tbin(a, t, B::Lt)?;
                let st = self.op(Op::Unary(U::Sqrt), vec![t])?;
                let lin = self.tbin(a, st, B::Div)?;
                let sq = self.op(Op::Unary(U::Sqrt), vec![a])?;
                Val::T(self.op(Op::Where, vec![small, lin, sq])?)
            }
            F::RobustPower => {
                // cond = exponent < 1 - log(t)/log|base| and |base| < t;
                // cond ? |base| / t : |base| ** exponent
                let base = self.t(ins, "base")?;
                let e = self.arg(ins, "exponent")?.clone();
                let e = self.tensor(&e, Some(self.graph.ty(base).dtype))?;
                let t = self.threshold(ins, base)?;
                let a = self.op(Op::Unary(U::Abs), vec![base])?;
                let (lt, la) = (self.op(Op::Unary(U::Log), vec![t])?, self.op(Op::Unary(U::Log), vec![a])?);
                let ratio = self.tbin(lt, la, B::Div)?;
                let one = self.scalar(self.graph.ty(a).dtype, 1.0);
                let bound = self.tbin(one, ratio, B::Sub)?;
                let c1 = self.tbin(e, bound, B::Lt)?;
                let c2 = self.tbin(a, t, B::Lt)?;
                let cond = self.tbin(c1, c2, B::And)?;
                let lin = self.tbin(a, t, B::Div)?;
                let pw = self.tbin(a, e, B::Pow)?;
                Val::T(self.op(Op::Where, vec![cond, lin, pw])?)
            }
            F::StableReciprocal => {
                // |x| < t ? (sign(x) + (1 - sign(|x|))) * 2/t - x/t² : 1/x
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
                let lin0 = self.tbin(s2, t, B::Div)?;
                let t2 = self.tbin(t, t, B::Mul)?;
                let xt = self.tbin(x, t2, B::Div)?;
                let lin = self.tbin(lin0, xt, B::Sub)?;
                let rec = self.tbin(one, x, B::Div)?;
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
            F::BinaryCrossEntropyWithLogits => {
                // (1 - target) * input - log_sigmoid(input), log_sigmoid(x) = -softplus(-x).
                // `robust` guards log(1 + e^-|x|) >= log 1, where it changes nothing.
                let pw = self.s(ins, "pos_weight")?;
                if pw.as_f64() != Some(1.0) {
                    return Err(Error::user(format!("binary cross entropy with pos_weight {pw} is not supported yet")));
                }
                let x = self.t(ins, "input")?;
                let target = self.arg(ins, "target")?.clone();
                let one_minus = self.binary(&Val::S(Static::Float(1.0)), &target, B::Sub)?;
                let a = self.binary(&one_minus, &Val::T(x), B::Mul)?;
                let nx = self.op(Op::Unary(U::Neg), vec![x])?;
                let sp = self.op(Op::Unary(U::Softplus), vec![nx])?;
                self.binary(&a, &Val::T(sp), B::Add)?
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

    /// Mithril's `robust_log`: `|x| < t ? log(t) + |x|/t - 1 : log(|x|)`.
    pub(super) fn robust_log(&mut self, x: ValueId, t: &Val) -> Result<ValueId> {
        use BinaryOp as B;
        let t = self.threshold_of(t, x)?;
        let a = self.op(Op::Unary(UnaryOp::Abs), vec![x])?;
        let small = self.tbin(a, t, B::Lt)?;
        let lt = self.op(Op::Unary(UnaryOp::Log), vec![t])?;
        let at = self.tbin(a, t, B::Div)?;
        let one = self.scalar(self.graph.ty(a).dtype, 1.0);
        let s = self.tbin(lt, at, B::Add)?;
        let lin = self.tbin(s, one, B::Sub)?;
        let la = self.op(Op::Unary(UnaryOp::Log), vec![a])?;
        self.op(Op::Where, vec![small, lin, la])
    }

    /// Mithril's `cross_entropy_with_logits` (categorical: integer class targets).
    /// `robust` only guards the log of a sum that is at least 1, so it changes nothing.
    pub(super) fn cross_entropy(&mut self, ins: &[(String, Val)]) -> Result<Val> {
        use BinaryOp as B;
        let x = self.t(ins, "input")?;
        let xs = self.shape(x);
        if xs.rank() != 2 {
            return Err(Error::user(format!("cross entropy needs logits of shape [N, C], got {xs}")));
        }
        let dtype = self.graph.ty(x).dtype;
        let class_weights = match self.s(ins, "weights")? {
            Static::Bool(false) | Static::Str(_) | Static::None => None,
            Static::Bool(true) => {
                return Err(Error::user("cross entropy with weights=True (class weights computed from the batch) is not supported yet".to_string()))
            }
            w => Some(w.to_tensor(dtype, dtype).ok_or_else(|| Error::user(format!("cross entropy weights must be a list of numbers, got {w}")))?),
        };
        let mx = self.op(Op::Reduce { kind: ReduceKind::Max, axes: vec![1], keepdim: true }, vec![x])?;
        let norm = self.tbin(x, mx, B::Sub)?;
        let e = self.op(Op::Unary(UnaryOp::Exp), vec![norm])?;
        let se = self.op(Op::Reduce { kind: ReduceKind::Sum, axes: vec![1], keepdim: false }, vec![e])?;
        let lse = self.op(Op::Unary(UnaryOp::Log), vec![se])?;
        let target = self.t(ins, "target")?;
        let weights = match class_weights {
            Some(w) => Some(self.constant(Tensor::new(dtype, vec![w.numel() as u64], w.data))),
            None => None,
        };
        if self.flag(ins, "categorical")? {
            // label_logits = norm[i, target[i]], as a masked sum (no take_along_axis op).
            let td = self.graph.ty(target).dtype;
            if !td.is_int() {
                return Err(Error::user(format!("categorical cross entropy needs integer targets, got {td}")));
            }
            let t2 = self.op(Op::Reshape { shape: Shape(vec![xs.0[0].clone(), Dim::Known(1)]) }, vec![target])?;
            let cls = self.op(Op::Iota { shape: xs.clone(), axis: 1, dtype: td }, vec![])?;
            let hit = self.tbin(cls, t2, B::Eq)?;
            let zero = self.scalar(dtype, 0.0);
            let picked = self.op(Op::Where, vec![hit, norm, zero])?;
            let label = self.op(Op::Reduce { kind: ReduceKind::Sum, axes: vec![1], keepdim: false }, vec![picked])?;
            let loss = self.tbin(lse, label, B::Sub)?;
            Ok(Val::T(match weights {
                Some(w) => {
                    let wt = self.op(Op::Gather { axis: 0 }, vec![w, target])?;
                    self.tbin(loss, wt, B::Mul)?
                }
                None => loss,
            }))
        } else {
            // -sum(target * log_softmax(input) * weights, axis=1)
            let lse2 = self.op(Op::Reshape { shape: Shape(vec![xs.0[0].clone(), Dim::Known(1)]) }, vec![lse])?;
            let ls = self.tbin(norm, lse2, B::Sub)?;
            let mut prod = self.tbin(target, ls, B::Mul)?;
            if let Some(w) = weights {
                prod = self.tbin(prod, w, B::Mul)?;
            }
            let s = self.op(Op::Reduce { kind: ReduceKind::Sum, axes: vec![1], keepdim: false }, vec![prod])?;
            Ok(Val::T(self.op(Op::Unary(UnaryOp::Neg), vec![s])?))
        }
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
