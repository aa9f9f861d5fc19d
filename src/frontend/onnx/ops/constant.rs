//! Values fixed when compiling: `Constant`, shapes and sizes of tensors whose shapes
//! are known, `ConstantOfShape`, `Range`, `EyeLike`, the window functions and
//! `MelWeightMatrix`.

use super::{input_dims, input_floats, input_ints, show_dims, Cx};
use crate::error::Error;
use crate::frontend::onnx::node::{invalid, unsupported, Fail, Node, Out};
use crate::frontend::onnx::tensor;
use crate::ir::{BinaryOp, Dim, Dtype, Op, Poly, Shape, ValueId};
use crate::tensor::Tensor;

/// `Constant`: its one `value*` attribute.
pub fn constant(cx: &mut Cx, node: &Node) -> Out {
    let t = if let Some(t) = node.tensor("value")? {
        cx.tensor_attr(t).map_err(|e| e.context("its value"))?
    } else if node.has("value_float") {
        Tensor::scalar(Dtype::F32, node.float("value_float", 0.0)?)
    } else if let Some(v) = node.floats("value_floats")? {
        Tensor::new(Dtype::F32, vec![v.len() as u64], v)
    } else if let Some(v) = node.int_opt("value_int")? {
        Tensor::scalar(Dtype::I64, v as f64)
    } else if let Some(v) = node.ints("value_ints")? {
        Tensor::new(Dtype::I64, vec![v.len() as u64], v.iter().map(|&x| x as f64).collect())
    } else if node.has("sparse_value") {
        return unsupported("a sparse constant");
    } else if node.has("value_string") || node.has("value_strings") {
        return unsupported("a string constant");
    } else {
        return invalid("Constant has no value");
    };
    Ok(vec![cx.b.constant(t)])
}

/// `Shape`: the dimensions from `start` to `end` (opset 15), as an i64 vector; symbolic
/// ones are known when compiling as what they stand for (`super::super::symbolic`).
pub fn shape(cx: &mut Cx, node: &Node) -> Out {
    let shape = cx.b.shape(node.input(0)?);
    let rank = shape.rank() as i64;
    let clamp = |v: i64| (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize;
    let (start, end) = (clamp(node.int("start", 0)?), clamp(node.int("end", rank)?));
    Ok(vec![cx.shape_value(&Shape(shape.0[start..end.max(start)].to_vec()))?])
}

/// `Size`: the element count, a product of symbols where the shape has them.
pub fn size(cx: &mut Cx, node: &Node) -> Out {
    let shape = cx.b.shape(node.input(0)?);
    let n = shape.numel_dim().map_err(Error::user)?;
    if let Dim::Known(n) = n {
        return Ok(vec![cx.b.constant(Tensor::scalar(Dtype::I64, n as f64))]);
    }
    let v = cx.shape_value(&Shape(vec![n]))?;
    Ok(vec![cx.b.reshape(v, Shape::scalar())?])
}

/// `ConstantOfShape`: its `value` (one element; f32 zero by default) broadcast.
pub fn constant_of_shape(cx: &mut Cx, node: &Node) -> Out {
    let Some(dims) = input_dims(cx, node, 0)? else { return invalid("ConstantOfShape has no shape") };
    let Some(shape) = dims.iter().map(|d| Dim::from_poly(d.clone())).collect::<Option<Vec<_>>>() else {
        return invalid(format!("shape {} has a negative dimension", show_dims(&dims)));
    };
    let value = match node.tensor("value")? {
        Some(t) => cx.tensor_attr(t)?,
        None => Tensor::scalar(Dtype::F32, 0.0),
    };
    let Some(&v) = value.data.first() else { return invalid("ConstantOfShape's value is empty") };
    Ok(vec![cx.b.full(value.dtype, Shape(shape), v)?])
}

/// `Range(start, limit, delta)`: `max(ceil((limit - start) / delta), 0)` elements
/// `start + i delta`, of the inputs' type.
pub fn range(cx: &mut Cx, node: &Node) -> Out {
    let dtype = cx.b.dtype(node.input(0)?);
    if let Some(out) = symbolic_range(cx, node, dtype)? {
        return Ok(vec![out]);
    }
    let one = |v: Option<Vec<f64>>| v.and_then(|v| v.first().copied());
    let (start, limit, delta) = (one(input_floats(cx, node, 0)?), one(input_floats(cx, node, 1)?), one(input_floats(cx, node, 2)?));
    let (Some(start), Some(limit), Some(delta)) = (start, limit, delta) else { return invalid("Range needs start, limit and delta") };
    if delta == 0.0 {
        return invalid("Range's delta is 0");
    }
    let count = ((limit - start) / delta).ceil().max(0.0);
    if count > (1u64 << 32) as f64 {
        return invalid(format!("Range({start}, {limit}, {delta}) has {count} elements"));
    }
    let n = count as u64;
    let positions = cx.b.op(Op::Iota { shape: Shape::known(&[n]), axis: 0, dtype }, vec![])?;
    let d = cx.b.scalar(dtype, delta);
    let s = cx.b.scalar(dtype, start);
    let steps = cx.b.binary(BinaryOp::Mul, positions, d)?;
    Ok(vec![cx.b.binary(BinaryOp::Add, steps, s)?])
}

/// An integer `Range` whose limit (or start) is symbolic, with a constant positive
/// delta: positions up to `limit` in a sequence of symbolic length.
fn symbolic_range(cx: &mut Cx, node: &Node, dtype: Dtype) -> Result<Option<ValueId>, Fail> {
    if !dtype.is_int() {
        return Ok(None);
    }
    let one = |l: Option<Vec<Poly>>| l.and_then(|l| l.first().cloned());
    let (start, limit, delta) = (one(input_dims(cx, node, 0)?), one(input_dims(cx, node, 1)?), one(input_dims(cx, node, 2)?));
    let (Some(start), Some(limit), Some(delta)) = (start, limit, delta) else { return Ok(None) };
    if start.as_constant().is_some() && limit.as_constant().is_some() {
        return Ok(None);
    }
    let Some(d) = delta.as_constant().filter(|&d| d > 0) else { return unsupported(format!("Range with the symbolic limit {limit} and the delta {delta}")) };
    // ceil((limit - start) / delta)
    let count = limit.sub(&start).and_then(|c| c.add(&Poly::constant(d - 1))).and_then(|c| c.div_floor(d as u64)).map_err(Error::user)?;
    let Some(n) = Dim::from_poly(count.clone()) else { return invalid(format!("Range({start}, {limit}, {d}) has {count} elements")) };
    let positions = cx.b.op(Op::Iota { shape: Shape(vec![n]), axis: 0, dtype }, vec![])?;
    let step = cx.b.scalar(dtype, d as f64);
    let steps = cx.b.binary(BinaryOp::Mul, positions, step)?;
    Ok(Some(cx.b.binary(BinaryOp::Add, steps, node.input(0)?)?))
}

/// `EyeLike`: ones on the diagonal shifted by `k`, of `dtype` (default: the input's).
pub fn eye_like(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let shape = cx.b.shape(x);
    if shape.rank() != 2 {
        return invalid(format!("EyeLike wants a matrix, got {shape}"));
    }
    let dtype = match node.int_opt("dtype")? {
        Some(code) => match tensor::dtype(code as i32) {
            Ok(d) => d,
            Err(why) => return unsupported(why),
        },
        None => cx.b.dtype(x),
    };
    let k = node.int("k", 0)?;
    let rows = cx.b.op(Op::Iota { shape: shape.clone(), axis: 0, dtype: Dtype::I64 }, vec![])?;
    let cols = cx.b.op(Op::Iota { shape, axis: 1, dtype: Dtype::I64 }, vec![])?;
    let kk = cx.b.scalar(Dtype::I64, k as f64);
    let shifted = cx.b.binary(BinaryOp::Add, rows, kk)?;
    let hit = cx.b.binary(BinaryOp::Eq, cols, shifted)?;
    Ok(vec![cx.b.cast(hit, dtype)?])
}

/// `HannWindow`, `HammingWindow`, `BlackmanWindow` of a size known when compiling:
/// `sum_k a_k cos(2 pi k n / N)` (signs alternating), `N` the size (`periodic`, the
/// default) or the size less one.
pub fn window(cx: &mut Cx, node: &Node) -> Out {
    let Some(&[size]) = input_ints(cx, node, 0)?.as_deref() else { return invalid(format!("{} wants one size", node.op_type)) };
    if !(0..=1 << 24).contains(&size) {
        return invalid(format!("window size {size}"));
    }
    let dtype = match tensor::dtype(node.int("output_datatype", 1)? as i32) {
        Ok(d) => d,
        Err(why) => return unsupported(why),
    };
    let a: &[f64] = match node.op_type {
        "HannWindow" => &[0.5, 0.5],
        "HammingWindow" => &[25.0 / 46.0, 1.0 - 25.0 / 46.0],
        _ => &[0.42, 0.5, 0.08],
    };
    let n = if node.int("periodic", 1)? != 0 { size } else { size - 1 } as f64;
    let values = (0..size)
        .map(|i| a.iter().enumerate().map(|(k, ak)| if k % 2 == 0 { 1.0 } else { -1.0 } * ak * (2.0 * std::f64::consts::PI * k as f64 * i as f64 / n).cos()).sum())
        .collect();
    Ok(vec![cx.b.constant(Tensor::new(dtype, vec![size as u64], values))])
}

/// `MelWeightMatrix`: `[dft_length / 2 + 1, num_mel_bins]` triangular filters, equally
/// spaced in mel (`2595 log10(1 + f / 700)`) from `lower_edge_hertz` to
/// `upper_edge_hertz`, each rising from its left neighbour's centre bin to its own and
/// falling to its right neighbour's, as ONNX's reference computes them.
pub fn mel_weight_matrix(cx: &mut Cx, node: &Node) -> Out {
    let int = |cx: &mut Cx, i: usize, what: &str| -> std::result::Result<i64, crate::frontend::onnx::node::Fail> {
        match input_ints(cx, node, i)?.as_deref() {
            Some(&[v]) if v > 0 && v <= 1 << 24 => Ok(v),
            v => invalid(format!("MelWeightMatrix's {what} is a positive scalar up to 2^24, got {v:?}")),
        }
    };
    let (bins, length, rate) = (int(cx, 0, "num_mel_bins")?, int(cx, 1, "dft_length")?, int(cx, 2, "sample_rate")?);
    let edge = |cx: &mut Cx, i: usize| -> std::result::Result<f64, crate::frontend::onnx::node::Fail> {
        match input_floats(cx, node, i)?.as_deref() {
            Some(&[v]) if v >= 0.0 => Ok(v),
            v => invalid(format!("MelWeightMatrix's edge frequency {i} is a scalar of at least 0, got {v:?}")),
        }
    };
    let (low, high) = (edge(cx, 3)?, edge(cx, 4)?);
    let dtype = match tensor::dtype(node.int("output_datatype", 1)? as i32) {
        Ok(d) => d,
        Err(why) => return unsupported(why),
    };
    let mel = |f: f64| 2595.0 * (1.0 + f / 700.0).log10();
    let (lo, hi) = (mel(low), mel(high));
    let step = (hi - lo) / (bins + 2) as f64;
    // Each filter's left edge, centre and right edge as spectrogram bins.
    let points: Vec<i64> = (0..bins + 2).map(|i| (((length + 1) as f64 * 700.0 * (10f64.powf((i as f64 * step + lo) / 2595.0) - 1.0)) / rate as f64).floor() as i64).collect();
    let rows = length / 2 + 1;
    let mut w = vec![0.0; (rows * bins) as usize];
    let mut set = |j: i64, i: i64, v: f64| -> std::result::Result<(), crate::frontend::onnx::node::Fail> {
        if !(0..rows).contains(&j) {
            return invalid(format!("MelWeightMatrix's filter {i} reaches bin {j}, past the {rows} bins of dft_length {length} (upper_edge_hertz above sample_rate / 2)"));
        }
        w[(j * bins + i) as usize] = v;
        Ok(())
    };
    for i in 0..bins {
        let (left, centre, right) = (points[i as usize], points[i as usize + 1], points[i as usize + 2]);
        if centre == left {
            set(centre, i, 1.0)?;
        } else {
            for j in left..=centre {
                set(j, i, (j - left) as f64 / (centre - left) as f64)?;
            }
        }
        for j in centre..right {
            set(j, i, (right - j) as f64 / (right - centre) as f64)?;
        }
    }
    Ok(vec![cx.b.constant(Tensor::new(dtype, vec![rows as u64, bins as u64], w))])
}
