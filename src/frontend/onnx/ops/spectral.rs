//! Fourier transforms (DFT, STFT) as products with constant DFT matrices, the signal's
//! length and the transform's known when compiling. A complex tensor is ONNX's: a last
//! dimension of 2 (real, imaginary), or 1 for a real signal.

use super::index::dims;
use super::shape::take;
use super::{axis, input_ints, Cx};
use crate::frontend::onnx::node::{invalid, unsupported, Fail, Node, Out};
use crate::ir::{BinaryOp, Op, Shape, ValueId};
use crate::tensor::Tensor;

type Res<T> = std::result::Result<T, Fail>;

/// Which transform: forward (full or one-sided output) or inverse (from full complex
/// bins, or from one-sided bins to a real signal).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Transform {
    inverse: bool,
    onesided: bool,
}

/// `DFT` (opset 17: `axis` an attribute, default 1; opset 20: the third input,
/// default -2), of length `dft_length` (the second input; default the signal's, or
/// `2 (bins - 1)` for an inverse of one-sided bins).
pub fn dft(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let xd = dims(cx, x, "DFT")?;
    let rank = xd.len();
    let ax = if node.opset >= 20 {
        match input_ints(cx, node, 2)?.as_deref() {
            None => -2,
            Some(&[a]) => a,
            Some(_) => return invalid("DFT's axis is a scalar"),
        }
    } else {
        node.int("axis", 1)?
    };
    let ax = axis(ax, rank)?;
    if rank < 2 || ax == rank - 1 || !(1..=2).contains(&xd[rank - 1]) {
        return invalid(format!("DFT of {} along axis {ax}: the last dimension holds a real (1) or complex (2) number, and is not the axis", cx.b.shape(x)));
    }
    let how = Transform { inverse: node.int("inverse", 0)? != 0, onesided: node.int("onesided", 0)? != 0 };
    let n = match input_ints(cx, node, 1)?.as_deref() {
        None if how.inverse && how.onesided => 2 * xd[ax].saturating_sub(1),
        None => xd[ax],
        Some(&[n]) if n > 0 => n as u64,
        Some(l) => return invalid(format!("DFT's dft_length is a positive scalar, got {l:?}")),
    };
    Ok(vec![transform(cx, x, ax, n, how)?])
}

/// `STFT`: frames of `frame_length` (the fourth input, else the window's length) every
/// `frame_step` samples of `[batch, length, 1 or 2]`, each times `window`, transformed:
/// `[batch, frames, bins, 2]` (`onesided`, default 1: `frame_length / 2 + 1` bins).
pub fn stft(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let xd = dims(cx, x, "STFT")?;
    let Some(&[step]) = input_ints(cx, node, 1)?.as_deref() else { return invalid("STFT's frame_step is a scalar") };
    let window = node.opt(2);
    let length = match (input_ints(cx, node, 3)?.as_deref(), window) {
        (Some(&[l]), _) => l,
        (None, Some(w)) => *dims(cx, w, "STFT")?.first().unwrap_or(&0) as i64,
        _ => return invalid("STFT needs a frame_length or a window"),
    };
    let [batch, len, c] = xd[..] else { return invalid(format!("STFT's signal is [batch, length, 1 or 2], got {}", cx.b.shape(x))) };
    if step <= 0 || length <= 0 || length as u64 > len || !(1..=2).contains(&c) {
        return invalid(format!("STFT of {} with frame_step {step} and frame_length {length}", cx.b.shape(x)));
    }
    let (step, length) = (step as u64, length as u64);
    let frames = (len - length) / step + 1;
    let parts = (0..frames)
        .map(|f| {
            let frame = take(cx, x, 1, f * step, length)?;
            cx.b.reshape(frame, Shape::known(&[batch, 1, length, c]))
        })
        .collect::<crate::error::Result<Vec<_>>>()?;
    let mut framed = if parts.len() == 1 { parts[0] } else { cx.b.op(Op::Concat { axis: 1 }, parts)? };
    if let Some(w) = window {
        let w = cx.b.reshape(w, Shape::known(&[length, 1]))?;
        let w = if cx.b.dtype(w) == cx.b.dtype(x) { w } else { cx.b.cast(w, cx.b.dtype(x))? };
        framed = cx.b.binary(BinaryOp::Mul, framed, w)?;
    }
    let how = Transform { inverse: false, onesided: node.int("onesided", 1)? != 0 };
    Ok(vec![transform(cx, framed, 2, length, how)?])
}

/// The transform of length `n` of complex (or real) `x` along `ax`: the real and
/// imaginary parts, moved to the last axis, times constant cosine and sine matrices.
fn transform(cx: &mut Cx, x: ValueId, ax: usize, n: u64, how: Transform) -> Res<ValueId> {
    let xd = dims(cx, x, "DFT")?;
    let rank = xd.len();
    if n > 1 << 14 {
        return unsupported(format!("a DFT of length {n} (its matrices would hold {} elements)", n * n));
    }
    // The input's bins or samples used: those below n (one-sided bins: below n/2 + 1).
    let used = xd[ax].min(if how.inverse && how.onesided { n / 2 + 1 } else { n });
    let outs = if how.onesided && !how.inverse { n / 2 + 1 } else { n };
    // Signal axis last: perm moves `ax` to the end (of the rank-1 parts), back undoes it.
    let mut perm: Vec<usize> = (0..rank - 1).filter(|&i| i != ax).collect();
    perm.push(ax);
    let mut back = vec![0; rank - 1];
    for (i, &p) in perm.iter().enumerate() {
        back[p] = i;
    }
    let mut part_dims = xd[..rank - 1].to_vec();
    part_dims[ax] = used;
    let part = |cx: &mut Cx, k: u64| -> Res<ValueId> {
        let p = take(cx, x, rank - 1, k, 1)?;
        let p = take(cx, p, ax, 0, used)?;
        let p = cx.b.reshape(p, Shape::known(&part_dims))?;
        Ok(cx.b.transpose(p, perm.clone())?)
    };
    let re = part(cx, 0)?;
    let im = if xd[rank - 1] == 2 { Some(part(cx, 1)?) } else { None };
    // cos and sin of 2 pi j k / n over [used, outs], scaled; an inverse of one-sided
    // bins counts each bin but the first (and the middle one of an even length) twice.
    let dtype = cx.b.dtype(x);
    let matrix = |cx: &mut Cx, f: fn(f64) -> f64, sign: f64| -> ValueId {
        let mut m = Vec::with_capacity((used * outs) as usize);
        for j in 0..used {
            for k in 0..outs {
                let angle = 2.0 * std::f64::consts::PI * ((j * k) % n) as f64 / n as f64;
                let twice = how.inverse && how.onesided && j != 0 && 2 * j != n;
                let scale = if how.inverse { 1.0 / n as f64 } else { 1.0 } * if twice { 2.0 } else { 1.0 };
                m.push(sign * scale * f(angle));
            }
        }
        cx.b.constant(Tensor::new(dtype, vec![used, outs], m))
    };
    // Forward: re' = a C + b S, im' = b C - a S; inverse: re' = a C - b S, im' = b C + a S.
    let s = if how.inverse { -1.0 } else { 1.0 };
    let (c, sn, sn_neg) = (matrix(cx, f64::cos, 1.0), matrix(cx, f64::sin, s), matrix(cx, f64::sin, -s));
    let mut out_re = cx.b.matmul(re, c)?;
    if let Some(b) = im {
        let bs = cx.b.matmul(b, sn)?;
        out_re = cx.b.binary(BinaryOp::Add, out_re, bs)?;
    }
    let mut parts = vec![out_re];
    if !(how.inverse && how.onesided) {
        let mut out_im = cx.b.matmul(re, sn_neg)?;
        if let Some(b) = im {
            let bc = cx.b.matmul(b, c)?;
            out_im = cx.b.binary(BinaryOp::Add, out_im, bc)?;
        }
        parts.push(out_im);
    }
    let mut out_dims: Vec<u64> = perm.iter().map(|&p| xd[p]).collect();
    *out_dims.last_mut().expect("rank >= 2") = outs;
    out_dims.push(1);
    let parts = parts
        .into_iter()
        .map(|p| {
            let p = cx.b.reshape(p, Shape::known(&out_dims))?;
            let mut full = back.clone();
            full.push(rank - 1);
            cx.b.transpose(p, full)
        })
        .collect::<crate::error::Result<Vec<_>>>()?;
    Ok(if parts.len() == 1 { parts[0] } else { cx.b.op(Op::Concat { axis: rank - 1 }, parts)? })
}

#[cfg(test)]
mod tests {
    use super::super::index::tests::{check, one, t, Arg, A};
    use crate::ir::Dtype;

    /// The inverse transform of one bin is that bin's wave over n: bin 1 of 5 gives
    /// `e^(2 pi i j / 5) / 5` (ONNX's node tests of the inverse expect float32 FFT noise
    /// of 2e-7 where the value is 0, past their own 1e-7 tolerance).
    #[test]
    fn inverse_of_one_bin_is_its_wave() {
        let mut x = vec![0.0; 10];
        x[2] = 1.0;
        let y = one("DFT", 20, &[("inverse", A::I(1))], vec![Arg::Fed(t(Dtype::F32, &[1, 5, 2], &x))]);
        let want: Vec<f64> = (0..5).flat_map(|j| {
            let a = 2.0 * std::f64::consts::PI * j as f64 / 5.0;
            [a.cos() / 5.0, a.sin() / 5.0]
        }).collect();
        check(&y, &[1, 5, 2], &want);
    }
}
