//! Shape and type inference: the result type of every op from its arguments' types.
//!
//! [`infer`] is the one shape rule per op; the frontend calls it as it builds a graph
//! (it needs shapes to fold Mithril's shape arithmetic), and [`run`] re-derives every
//! node's type from the inputs so that a pass cannot leave a stale type behind.
//! Symbolic dimensions flow through: `B` broadcasts with 1 and with `B`, never with 5.

use crate::error::{Error, Result};
use crate::ir::*;
use crate::tensor::Constant;

/// Re-infers the type of every node from its arguments, replacing stale types.
/// Inputs and parameters keep their declared types.
pub fn run(graph: &mut Graph) -> Result<()> {
    for i in 0..graph.nodes.len() {
        let node = &graph.nodes[i];
        let args: Vec<&TensorType> = node.args.iter().map(|a| &graph.nodes[a.index()].ty).collect();
        let ty = infer(&node.op, &args, &node.ty, &graph.consts).map_err(|msg| {
            Error::user(format!("{}: {msg}", describe_node(graph, ValueId(i as u32))))
        })?;
        graph.nodes[i].ty = ty;
    }
    Ok(())
}

/// `%7 = matmul (submodels.m_3 (Linear))`, for messages.
pub fn describe_node(graph: &Graph, v: ValueId) -> String {
    let node = graph.node(v);
    let mut s = format!("%{} = {}", v.0, node.op.name());
    if let Some(origin) = &node.origin {
        s.push_str(&format!(" ({origin})"));
    }
    s
}

/// The result type of `op` applied to arguments of types `args`. `declared` is the
/// node's current type, which inputs and parameters keep.
pub fn infer(op: &Op, args: &[&TensorType], declared: &TensorType, consts: &[Constant]) -> Result<TensorType, String> {
    check_arity(op, args.len())?;
    let a = |i: usize| args[i];
    match op {
        Op::Input | Op::Param => Ok(declared.clone()),
        Op::Constant(c) => {
            let t = consts.get(c.0 as usize).ok_or_else(|| format!("constant #{} does not exist", c.0))?;
            Ok(TensorType::new(t.dtype(), Shape::known(t.shape())))
        }
        Op::Unary(u) => {
            let x = a(0);
            let dtype = match u {
                // Logical on bools, bitwise on integers.
                UnaryOp::Not => {
                    if !(x.dtype == Dtype::Bool || x.dtype.is_int()) {
                        return Err(format!("not needs bool or integer values, got {}", x.dtype));
                    }
                    x.dtype
                }
                UnaryOp::IsNan => Dtype::Bool,
                UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::Relu | UnaryOp::Floor => {
                    no_bool(x, u.name())?;
                    x.dtype
                }
                UnaryOp::Exp
                | UnaryOp::Log
                | UnaryOp::Sqrt
                | UnaryOp::Sin
                | UnaryOp::Cos
                | UnaryOp::Tanh
                | UnaryOp::Atan
                | UnaryOp::Erf
                | UnaryOp::Composite(_) => float_result(x.dtype),
            };
            Ok(TensorType::new(dtype, x.shape.clone()))
        }
        Op::Binary(b) => {
            let (l, r) = (a(0), a(1));
            let shape = broadcast(&l.shape, &r.shape)?;
            let dtype = if b.is_comparison() {
                Dtype::Bool
            } else if b.is_logical() {
                // Logical on bools, bitwise on integers (of their promoted type), as
                // NumPy's `&`, `|` and `^`.
                let both_bool = l.dtype == Dtype::Bool && r.dtype == Dtype::Bool;
                if !(both_bool || l.dtype.is_int() && r.dtype.is_int()) {
                    return Err(format!("{} needs two bool or two integer operands, got {} and {}", b.name(), l.dtype, r.dtype));
                }
                Dtype::promote(l.dtype, r.dtype)
            } else {
                let d = Dtype::promote(l.dtype, r.dtype);
                match b {
                    BinaryOp::Div => float_result(d),
                    BinaryOp::Shl | BinaryOp::Shr => {
                        if !d.is_int() {
                            return Err(format!("{} needs integer operands, got {} and {}", b.name(), l.dtype, r.dtype));
                        }
                        d
                    }
                    _ => d,
                }
            };
            Ok(TensorType::new(dtype, shape))
        }
        Op::Where => {
            expect_dtype(a(0), Dtype::Bool, "where condition")?;
            let shape = broadcast(&broadcast(&a(0).shape, &a(1).shape)?, &a(2).shape)?;
            Ok(TensorType::new(Dtype::promote(a(1).dtype, a(2).dtype), shape))
        }
        Op::Cast { to } => Ok(TensorType::new(*to, a(0).shape.clone())),
        Op::MatMul => matmul(a(0), a(1)),
        Op::Conv(attrs) => conv(attrs, args),
        Op::Pool(attrs) => pool(attrs, a(0)),
        Op::Reduce { kind, axes, keepdim } => {
            let x = a(0);
            if *kind == ReduceKind::Mean {
                no_bool(x, "mean")?;
            }
            let dtype = if *kind == ReduceKind::Mean { float_result(x.dtype) } else { x.dtype };
            Ok(TensorType::new(dtype, reduce_shape(&x.shape, axes, *keepdim)?))
        }
        Op::ArgReduce { axis, keepdim, .. } => {
            let x = a(0);
            let shape = match axis {
                Some(ax) => reduce_shape(&x.shape, &[*ax], *keepdim)?,
                None if *keepdim => Shape(vec![Dim::Known(1); x.rank()]),
                None => Shape::scalar(),
            };
            Ok(TensorType::new(Dtype::I64, shape))
        }
        Op::Variance { axes, keepdim, .. } => {
            let x = a(0);
            no_bool(x, "variance")?;
            Ok(TensorType::new(float_result(x.dtype), reduce_shape(&x.shape, axes, *keepdim)?))
        }
        Op::Softmax { axis } => {
            let x = a(0);
            check_axis(*axis, x.rank())?;
            Ok(TensorType::new(float_result(x.dtype), x.shape.clone()))
        }
        Op::Reshape { shape } => {
            let x = a(0);
            // (counts too large to hold compare equal, as they did before dimensions
            // were expressions: what overflows is refused where sizes are used)
            if x.shape.numel_dim().ok() != shape.numel_dim().ok() {
                return Err(format!("cannot reshape {} into {}: element counts differ", x.shape, shape));
            }
            Ok(TensorType::new(x.dtype, shape.clone()))
        }
        Op::Transpose { perm } => {
            let x = a(0);
            let mut seen = vec![false; x.rank()];
            if perm.len() != x.rank() || perm.iter().any(|&p| p >= x.rank() || std::mem::replace(&mut seen[p], true)) {
                return Err(format!("axes {perm:?} are not a permutation of the {} dimensions of {}", x.rank(), x.shape));
            }
            Ok(TensorType::new(x.dtype, Shape(perm.iter().map(|&p| x.shape.0[p].clone()).collect())))
        }
        Op::BroadcastTo { shape } => {
            let x = a(0);
            let b = broadcast(&x.shape, shape)?;
            if &b != shape {
                return Err(format!("cannot broadcast {} to {}", x.shape, shape));
            }
            Ok(TensorType::new(x.dtype, shape.clone()))
        }
        Op::Slice { ranges } => {
            let x = a(0);
            if ranges.len() != x.rank() {
                return Err(format!("slice has {} ranges for a rank-{} tensor {}", ranges.len(), x.rank(), x.shape));
            }
            let mut dims = Vec::with_capacity(ranges.len());
            for (r, d) in ranges.iter().zip(&x.shape.0) {
                dims.push(match d {
                    _ if r.is_full() => d.clone(),
                    Dim::Known(n) => Dim::Known(r.resolve(*n)?.2),
                    d => return Err(format!("cannot slice the symbolic dimension {d} of {}", x.shape)),
                });
            }
            Ok(TensorType::new(x.dtype, Shape(dims)))
        }
        Op::Concat { axis } => {
            let first = a(0);
            check_axis(*axis, first.rank())?;
            let mut total = Dim::Known(0);
            for t in args {
                if t.rank() != first.rank() || t.dtype != first.dtype {
                    return Err(format!("cannot concatenate {} with {}", first, t));
                }
                for (i, (d, e)) in t.shape.0.iter().zip(&first.shape.0).enumerate() {
                    if i != *axis && d != e {
                        return Err(format!("cannot concatenate {} with {} along axis {axis}", first.shape, t.shape));
                    }
                }
                total = total.add(&t.shape.0[*axis])?;
            }
            let mut shape = first.shape.clone();
            shape.0[*axis] = total;
            Ok(TensorType::new(first.dtype, shape))
        }
        Op::Gather { axis } => {
            let (data, idx) = (a(0), a(1));
            check_axis(*axis, data.rank())?;
            if !idx.dtype.is_int() {
                return Err(format!("gather indices must be integers, got {}", idx.dtype));
            }
            let mut dims = data.shape.0[..*axis].to_vec();
            dims.extend(idx.shape.0.iter().cloned());
            dims.extend(data.shape.0[axis + 1..].iter().cloned());
            Ok(TensorType::new(data.dtype, Shape(dims)))
        }
        Op::Iota { shape, axis, dtype } => {
            check_axis(*axis, shape.rank())?;
            Ok(TensorType::new(*dtype, shape.clone()))
        }
        Op::Pad { pads, .. } => {
            let x = a(0);
            if pads.len() != x.rank() {
                return Err(format!("pad has {} pairs for a rank-{} tensor", pads.len(), x.rank()));
            }
            let mut dims = Vec::new();
            for (&(lo, hi), d) in pads.iter().zip(&x.shape.0) {
                dims.push(match d {
                    _ if lo == 0 && hi == 0 => d.clone(),
                    d => d.add(&Dim::Known(lo))?.add(&Dim::Known(hi))?,
                });
            }
            Ok(TensorType::new(x.dtype, Shape(dims)))
        }
        Op::StopGradient => Ok(a(0).clone()),
    }
}

fn check_arity(op: &Op, n: usize) -> Result<(), String> {
    let (min, max) = op.arity();
    if n < min || max.is_some_and(|m| n > m) {
        return Err(format!("{} takes {} arguments, got {n}", op.name(), match max {
            Some(m) if m == min => format!("{m}"),
            Some(m) => format!("{min} to {m}"),
            None => format!("at least {min}"),
        }));
    }
    Ok(())
}

fn check_axis(axis: usize, rank: usize) -> Result<(), String> {
    if axis >= rank {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(())
}

fn expect_dtype(t: &TensorType, want: Dtype, what: &str) -> Result<(), String> {
    if t.dtype != want {
        return Err(format!("{what} needs {want}, got {}", t.dtype));
    }
    Ok(())
}

fn no_bool(t: &TensorType, what: &str) -> Result<(), String> {
    if t.dtype == Dtype::Bool {
        return Err(format!("{what} is not defined on bool tensors"));
    }
    Ok(())
}

/// Transcendental functions of integers produce f32, as Mithril's float default.
fn float_result(d: Dtype) -> Dtype {
    if d.is_float() { d } else { Dtype::F32 }
}

/// NumPy broadcasting of two shapes, aligned at the trailing dimension.
pub fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, String> {
    let n = a.rank().max(b.rank());
    let mut dims = Vec::with_capacity(n);
    for i in 0..n {
        let da = if i + a.rank() >= n { Some(&a.0[i + a.rank() - n]) } else { None };
        let db = if i + b.rank() >= n { Some(&b.0[i + b.rank() - n]) } else { None };
        dims.push(match (da, db) {
            (Some(x), None) | (None, Some(x)) => x.clone(),
            (Some(x), Some(y)) if x == y => x.clone(),
            (Some(x), Some(y)) if x.is_one() => y.clone(),
            (Some(x), Some(y)) if y.is_one() => x.clone(),
            (Some(_), Some(_)) => {
                return Err(format!("shapes {a} and {b} cannot be broadcast together (dimension {} of the result)", i))
            }
            (None, None) => unreachable!("one of the shapes has dimension {i}"),
        });
    }
    Ok(Shape(dims))
}

fn reduce_shape(shape: &Shape, axes: &[usize], keepdim: bool) -> Result<Shape, String> {
    for (i, &ax) in axes.iter().enumerate() {
        check_axis(ax, shape.rank())?;
        if axes[..i].contains(&ax) {
            return Err(format!("axis {ax} is repeated in {axes:?}"));
        }
    }
    let mut dims = Vec::new();
    for (i, d) in shape.0.iter().enumerate() {
        if axes.contains(&i) {
            if keepdim {
                dims.push(Dim::Known(1));
            }
        } else {
            dims.push(d.clone());
        }
    }
    Ok(Shape(dims))
}

fn matmul(l: &TensorType, r: &TensorType) -> Result<TensorType, String> {
    if l.rank() == 0 || r.rank() == 0 {
        return Err(format!("matmul needs operands of rank 1 or more, got {} and {}", l.shape, r.shape));
    }
    let lv = if l.rank() == 1 { vec![Dim::Known(1), l.shape.0[0].clone()] } else { l.shape.0.clone() };
    let rv = if r.rank() == 1 { vec![r.shape.0[0].clone(), Dim::Known(1)] } else { r.shape.0.clone() };
    let (m, k1) = (&lv[lv.len() - 2], &lv[lv.len() - 1]);
    let (k2, n) = (&rv[rv.len() - 2], &rv[rv.len() - 1]);
    if k1 != k2 {
        return Err(format!(
            "matmul of {} and {}: inner dimensions differ ({k1} and {k2})",
            l.shape, r.shape
        ));
    }
    let batch = broadcast(&Shape(lv[..lv.len() - 2].to_vec()), &Shape(rv[..rv.len() - 2].to_vec()))
        .map_err(|_| format!("matmul of {} and {}: batch dimensions cannot be broadcast", l.shape, r.shape))?;
    let mut dims = batch.0;
    if l.rank() > 1 {
        dims.push(m.clone());
    }
    if r.rank() > 1 {
        dims.push(n.clone());
    }
    Ok(TensorType::new(Dtype::promote(l.dtype, r.dtype), Shape(dims)))
}

/// Output length of a sliding window: `(in + pads - dilation*(k-1) - 1) / stride + 1`.
pub fn window_out(input: u64, k: u64, stride: u64, pad: (u64, u64), dilation: u64) -> Result<u64, String> {
    if stride == 0 || dilation == 0 || k == 0 {
        return Err("kernel size, stride and dilation must be positive".into());
    }
    let padded = input.checked_add(pad.0).and_then(|v| v.checked_add(pad.1)).ok_or("padded size overflows")?;
    let span = dilation.checked_mul(k - 1).and_then(|v| v.checked_add(1)).ok_or("kernel span overflows")?;
    if padded < span {
        return Err(format!("window of size {span} does not fit in the padded input of size {padded}"));
    }
    Ok((padded - span) / stride + 1)
}

fn spatial_out(
    what: &str,
    x: &TensorType,
    kernel: &[u64],
    stride: &[u64],
    padding: &[(u64, u64)],
    dilation: &[u64],
) -> Result<Vec<Dim>, String> {
    let n = kernel.len();
    if stride.len() != n || padding.len() != n || dilation.len() != n || x.rank() < n + 1 {
        return Err(format!("{what} with a {n}-d window cannot apply to {}", x.shape));
    }
    let first = x.rank() - n;
    let mut dims = Vec::new();
    for i in 0..n {
        let size = x.shape.0[first + i]
            .known()
            .ok_or_else(|| format!("{what} needs known spatial sizes, got {}", x.shape))?;
        dims.push(Dim::Known(
            window_out(size, kernel[i], stride[i], padding[i], dilation[i]).map_err(|e| format!("{what} on {}: {e}", x.shape))?,
        ));
    }
    Ok(dims)
}

fn conv(attrs: &ConvAttrs, args: &[&TensorType]) -> Result<TensorType, String> {
    let (x, w) = (args[0], args[1]);
    let n = attrs.stride.len();
    if x.rank() != n + 2 || w.rank() != n + 2 {
        return Err(format!("{n}-d convolution needs input and weight of rank {}, got {} and {}", n + 2, x.shape, w.shape));
    }
    let kernel = w.shape.0[2..]
        .iter()
        .map(|d| d.known().ok_or_else(|| format!("convolution weight {} has a symbolic kernel size", w.shape)))
        .collect::<Result<Vec<u64>, String>>()?;
    let g = attrs.groups;
    let (c, o, cg) = (&x.shape.0[1], &w.shape.0[0], &w.shape.0[1]);
    let channels_ok = match (c.known(), o.known(), cg.known()) {
        (Some(c), Some(o), Some(cg)) => g > 0 && cg.checked_mul(g) == Some(c) && o % g == 0,
        _ => g == 1 && c == cg,
    };
    if !channels_ok {
        return Err(format!(
            "convolution of input {} (channels {c}) with weight {} in {g} group(s): needs weight[1] * groups == channels and weight[0] divisible by groups",
            x.shape, w.shape
        ));
    }
    let mut dims = vec![x.shape.0[0].clone(), o.clone()];
    dims.extend(spatial_out("convolution", x, &kernel, &attrs.stride, &attrs.padding, &attrs.dilation)?);
    let out = Shape(dims);
    if let Some(b) = args.get(2) {
        let bs = broadcast(&out, &b.shape).map_err(|_| format!("convolution bias {} does not broadcast onto the output {}", b.shape, out))?;
        if bs != out {
            return Err(format!("convolution bias {} does not broadcast onto the output {}", b.shape, out));
        }
    }
    Ok(TensorType::new(Dtype::promote(x.dtype, w.dtype), out))
}

fn pool(attrs: &PoolAttrs, x: &TensorType) -> Result<TensorType, String> {
    let n = attrs.kernel.len();
    let mut dims = x.shape.0[..x.rank().saturating_sub(n)].to_vec();
    dims.extend(spatial_out(attrs.kind.name(), x, &attrs.kernel, &attrs.stride, &attrs.padding, &attrs.dilation)?);
    let dtype = if attrs.kind == PoolKind::Avg { float_result(x.dtype) } else { x.dtype };
    Ok(TensorType::new(dtype, Shape(dims)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dims: &[u64]) -> TensorType {
        TensorType::new(Dtype::F32, Shape::known(dims))
    }
    fn sym(d: &str) -> Dim {
        Dim::Sym(d.into())
    }

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast(&Shape::known(&[2, 1, 4]), &Shape::known(&[3, 1])).unwrap(), Shape::known(&[2, 3, 4]));
        assert_eq!(
            broadcast(&Shape(vec![sym("B"), Dim::Known(4)]), &Shape::known(&[1, 4])).unwrap(),
            Shape(vec![sym("B"), Dim::Known(4)])
        );
        assert_eq!(
            broadcast(&Shape::known(&[3, 4]), &Shape::known(&[5, 6])).unwrap_err(),
            "shapes [3, 4] and [5, 6] cannot be broadcast together (dimension 0 of the result)"
        );
        assert!(broadcast(&Shape(vec![sym("B")]), &Shape::known(&[5])).is_err());
    }

    #[test]
    fn matmul_batches_and_promotes_vectors() {
        let mm = |l: &[u64], r: &[u64]| infer(&Op::MatMul, &[&t(l), &t(r)], &t(&[]), &[]).map(|t| t.shape);
        assert_eq!(mm(&[2, 3, 4], &[4, 5]).unwrap(), Shape::known(&[2, 3, 5]));
        assert_eq!(mm(&[4], &[4, 5]).unwrap(), Shape::known(&[5]));
        assert_eq!(mm(&[3, 4], &[4]).unwrap(), Shape::known(&[3]));
        assert_eq!(
            mm(&[2, 3], &[4, 5]).unwrap_err(),
            "matmul of [2, 3] and [4, 5]: inner dimensions differ (3 and 4)"
        );
    }

    #[test]
    fn conv_and_pool_arithmetic() {
        let attrs = ConvAttrs { stride: vec![2, 2], padding: vec![(1, 1), (1, 1)], dilation: vec![1, 1], groups: 1 };
        let out = infer(&Op::Conv(attrs), &[&t(&[1, 2, 7, 7]), &t(&[2, 2, 3, 3])], &t(&[]), &[]).unwrap();
        assert_eq!(out.shape, Shape::known(&[1, 2, 4, 4]));
        let pool = PoolAttrs { kind: PoolKind::Max, kernel: vec![2, 2], stride: vec![2, 2], padding: vec![(0, 0); 2], dilation: vec![1, 1] };
        let out = infer(&Op::Pool(pool), &[&t(&[2, 3, 7, 7])], &t(&[]), &[]).unwrap();
        assert_eq!(out.shape, Shape::known(&[2, 3, 3, 3]));
    }

    #[test]
    fn logical_ops_take_two_bools_or_two_integers() {
        let ty = |d: Dtype| TensorType::new(d, Shape::known(&[2]));
        let and = |l: Dtype, r: Dtype| infer(&Op::Binary(BinaryOp::And), &[&ty(l), &ty(r)], &ty(l), &[]).map(|t| t.dtype);
        assert_eq!(and(Dtype::Bool, Dtype::Bool), Ok(Dtype::Bool));
        assert_eq!(and(Dtype::U8, Dtype::I16), Ok(Dtype::I16));
        assert_eq!(and(Dtype::Bool, Dtype::I32).unwrap_err(), "and needs two bool or two integer operands, got bool and i32");
        assert_eq!(and(Dtype::F32, Dtype::F32).unwrap_err(), "and needs two bool or two integer operands, got f32 and f32");
        let not = |d: Dtype| infer(&Op::Unary(UnaryOp::Not), &[&ty(d)], &ty(d), &[]).map(|t| t.dtype);
        assert_eq!(not(Dtype::U64), Ok(Dtype::U64));
        assert_eq!(not(Dtype::F16).unwrap_err(), "not needs bool or integer values, got f16");
    }

    #[test]
    fn reshape_checks_symbolic_element_counts() {
        let x = TensorType::new(Dtype::F32, Shape(vec![sym("B"), Dim::Known(12)]));
        let ok = Op::Reshape { shape: Shape(vec![sym("B"), Dim::Known(3), Dim::Known(4)]) };
        assert!(infer(&ok, &[&x], &x, &[]).is_ok());
        let bad = Op::Reshape { shape: Shape::known(&[12]) };
        assert!(infer(&bad, &[&x], &x, &[]).is_err());
    }

    #[test]
    fn slices_resolve_like_python() {
        let r = |start, stop, step| SliceRange { start, stop, step }.resolve(10).unwrap();
        assert_eq!(r(None, None, 1), (0, 1, 10));
        assert_eq!(r(Some(-3), None, 1), (7, 1, 3));
        assert_eq!(r(None, None, -1), (9, -1, 10));
        assert_eq!(r(Some(8), Some(2), -2), (8, -2, 3));
        assert_eq!(r(Some(5), Some(2), 1), (5, 1, 0));
    }
}
