//! Elementwise kernels: unary functions, binary operators with NumPy broadcasting,
//! `where` and casts. Float results are computed in f64 and rounded by the caller to
//! the node's dtype. Integer arithmetic (negation, +, -, *, powers, floor division,
//! shifts, and `and`, `or`, `xor` and `not`, bitwise on integers) is computed on the
//! operands' two's-complement bits and wraps modulo 2^bits of the result type, as C's
//! (and NumPy's) fixed-width integers do: see [`to_bits`].

use super::index::{broadcast_strides, Offsets};
use super::special::{erf, erfc};
use crate::error::Result;
use crate::ir::{BinaryOp, Composite, Dtype, UnaryOp};
use crate::tensor::{float_to_int, Tensor};
use crate::user_error;

pub fn unary(op: UnaryOp, x: &Tensor) -> Vec<f64> {
    let d = x.dtype;
    match op {
        UnaryOp::Neg if d.is_int() => x.data.iter().map(|&v| from_bits(d, 0u64.wrapping_sub(to_bits(d, v)))).collect(),
        UnaryOp::Not if d.is_int() => x.data.iter().map(|&v| from_bits(d, !to_bits(d, v))).collect(),
        UnaryOp::Abs if d.is_signed_int() => x.data.iter().map(|&v| if v < 0.0 { from_bits(d, 0u64.wrapping_sub(to_bits(d, v))) } else { v }).collect(),
        _ => x.data.iter().map(|&v| unary_fn(op, v)).collect(),
    }
}

/// `x` converted to `to` as a cast converts it: a float to an integer saturating
/// (`tensor::float_to_int`), an integer to another wrapping as C does (its bits, cut
/// to the width or sign-extended); the rest as the caller's rounding to `to` does.
pub fn cast(x: &Tensor, to: Dtype) -> Vec<f64> {
    let from = x.dtype;
    x.data
        .iter()
        .map(|&v| match (from.is_float(), from.is_int() && to.is_int()) {
            (true, _) => float_to_int(to, v),
            (false, true) => from_bits(to, to_bits(from, v)),
            (false, false) => v,
        })
        .collect()
}

/// The two's-complement bits of `x`, a value of integer type `dtype`. The f64 images
/// of i64::MAX and u64::MAX (2^63 and 2^64, which the conversion saturates) are those
/// maxima again.
pub(super) fn to_bits(dtype: Dtype, x: f64) -> u64 {
    if dtype.is_signed_int() { x as i64 as u64 } else { x as u64 }
}

/// The value of integer type `dtype` whose bits are the low bits of `v`: wrapped modulo
/// 2^bits, as C converts an integer to a narrower or differently signed type.
pub(super) fn from_bits(dtype: Dtype, v: u64) -> f64 {
    let shift = 64 - dtype.bits() as u32;
    if dtype.is_signed_int() { ((v << shift) as i64 >> shift) as f64 } else { ((v << shift) >> shift) as f64 }
}

fn unary_fn(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        // NumPy's sign: 0 for zero (f64::signum would say 1) and NaN for NaN.
        UnaryOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Atan => x.atan(),
        UnaryOp::Relu => max_nan(x, 0.0),
        UnaryOp::Erf => erf(x),
        UnaryOp::Composite(c) => composite(c, x),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Not => bool_f64(x == 0.0),
        UnaryOp::IsNan => bool_f64(x.is_nan()),
    }
}

/// The meaning of each composite: what its decomposition (`passes::decompose`) and
/// every target's own function for it are tested against.
pub fn composite(c: Composite, x: f64) -> f64 {
    match c {
        // Each branch exponentiates a non-positive number, so neither overflows.
        Composite::Sigmoid => {
            if x >= 0.0 {
                1.0 / (1.0 + (-x).exp())
            } else {
                let e = x.exp();
                e / (1.0 + e)
            }
        }
        // x * Phi(x) with Phi(x) = (1 + erf(x/sqrt2))/2 = erfc(-x/sqrt2)/2; the erfc form
        // keeps full relative precision for large negative x, where 1 + erf cancels.
        Composite::Gelu => x * erfc(-x / std::f64::consts::SQRT_2) / 2.0,
        // 0.5 x (1 + tanh(u)) written as the equal x / (1 + exp(-2u)), which keeps full
        // relative precision for large negative x, where 1 + tanh cancels.
        Composite::GeluTanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            x / (1.0 + (-2.0 * c * (x + 0.044715 * x * x * x)).exp())
        }
        Composite::Softplus => (-x.abs()).exp().ln_1p() + max_nan(x, 0.0),
        Composite::Mish => x * composite(Composite::Softplus, x).tanh(),
    }
}

/// Broadcasts `l` and `r` to `out` and applies `op`; `dtype` is the result dtype (for
/// comparisons, the bool result; otherwise the promoted operand type), which decides
/// integer versus float semantics of floor division, shifts and powers.
pub fn binary(op: BinaryOp, l: &Tensor, r: &Tensor, out: &[u64], dtype: Dtype) -> Result<Vec<f64>> {
    if op == BinaryOp::Pow && dtype.is_int() {
        if let Some(e) = r.data.iter().find(|&&e| e < 0.0) {
            return Err(user_error!("integers to negative integer powers are not allowed (exponent {e})"));
        }
    }
    let lo = Offsets::new(out, 0, &broadcast_strides(&l.shape, out));
    let ro = Offsets::new(out, 0, &broadcast_strides(&r.shape, out));
    Ok(lo.zip(ro).map(|(i, j)| binary_fn(op, dtype, l.data[i], r.data[j])).collect())
}

fn binary_fn(op: BinaryOp, dtype: Dtype, a: f64, b: f64) -> f64 {
    if dtype.is_int() {
        if let Some(v) = int_binary(op, dtype, a, b) {
            return v;
        }
    }
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Pow => a.powf(b),
        BinaryOp::Max => max_nan(a, b),
        BinaryOp::Min => min_nan(a, b),
        BinaryOp::FloorDiv => (a / b).floor(),
        BinaryOp::Eq => bool_f64(a == b),
        BinaryOp::Ne => bool_f64(a != b),
        BinaryOp::Lt => bool_f64(a < b),
        BinaryOp::Le => bool_f64(a <= b),
        BinaryOp::Gt => bool_f64(a > b),
        BinaryOp::Ge => bool_f64(a >= b),
        BinaryOp::And => bool_f64(a != 0.0 && b != 0.0),
        BinaryOp::Or => bool_f64(a != 0.0 || b != 0.0),
        BinaryOp::Xor => bool_f64((a != 0.0) != (b != 0.0)),
        // Shifts take integers only (`shape` refuses other operands): `int_binary`.
        BinaryOp::Shl | BinaryOp::Shr => f64::NAN,
    }
}

/// `op` on integers `a` and `b` of the result type `dtype` (the operands' values are
/// exact in it: promotion widens), wrapping as C's fixed-width arithmetic; `None` for
/// the ops whose f64 result is already exact (comparisons, max, min).
fn int_binary(op: BinaryOp, dtype: Dtype, a: f64, b: f64) -> Option<f64> {
    let (x, y) = (to_bits(dtype, a), to_bits(dtype, b));
    let bits = dtype.bits() as u64;
    let wrap = |v: u64| Some(from_bits(dtype, v));
    match op {
        BinaryOp::Add => wrap(x.wrapping_add(y)),
        BinaryOp::Sub => wrap(x.wrapping_sub(y)),
        BinaryOp::Mul => wrap(x.wrapping_mul(y)),
        // (a negative exponent is refused before)
        BinaryOp::Pow => wrap(wrapping_pow(x, y)),
        BinaryOp::FloorDiv if dtype.is_signed_int() => wrap(int_floor_div(x as i64, y as i64) as u64),
        // Division by zero gives 0, as for signed integers.
        BinaryOp::FloorDiv => wrap(x.checked_div(y).unwrap_or(0)),
        // NumPy's `left_shift` in the operand width: bits shifted out are lost, and a
        // shift by a negative amount or by the width or more gives 0.
        BinaryOp::Shl if (0.0..bits as f64).contains(&b) => wrap(x << y),
        BinaryOp::Shl => Some(0.0),
        // NumPy's `right_shift`: arithmetic for signed types, and a shift by the width
        // or more (or a negative amount) leaves only the sign: -1 for negative numbers,
        // 0 otherwise.
        BinaryOp::Shr if (0.0..bits as f64).contains(&b) => {
            wrap(if dtype.is_signed_int() { ((x as i64) >> y) as u64 } else { x >> y })
        }
        BinaryOp::Shr => Some(if a < 0.0 { -1.0 } else { 0.0 }),
        // Bitwise on integers (logical on bools, below).
        BinaryOp::And => wrap(x & y),
        BinaryOp::Or => wrap(x | y),
        BinaryOp::Xor => wrap(x ^ y),
        _ => None,
    }
}

/// `base^e` modulo 2^64, by squaring.
fn wrapping_pow(mut base: u64, mut e: u64) -> u64 {
    let mut r = 1u64;
    while e > 0 {
        if e & 1 == 1 {
            r = r.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        e >>= 1;
    }
    r
}

/// `where(cond, a, b)` with all three broadcast to `out`.
pub fn select(cond: &Tensor, a: &Tensor, b: &Tensor, out: &[u64]) -> Vec<f64> {
    let co = Offsets::new(out, 0, &broadcast_strides(&cond.shape, out));
    let ao = Offsets::new(out, 0, &broadcast_strides(&a.shape, out));
    let bo = Offsets::new(out, 0, &broadcast_strides(&b.shape, out));
    co.zip(ao)
        .zip(bo)
        .map(|((c, i), j)| if cond.data[c] != 0.0 { a.data[i] } else { b.data[j] })
        .collect()
}

fn bool_f64(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

/// NumPy's `maximum`: NaN if either side is NaN (`f64::max` would drop the NaN).
pub(super) fn max_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// NumPy's `minimum`, NaN-propagating like [`max_nan`].
pub(super) fn min_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// Python's `a // b` on integers (rounds toward negative infinity). Division by zero
/// gives 0, as NumPy's integer division does (with a warning we do not reproduce).
fn int_floor_div(a: i64, b: i64) -> i64 {
    if b == 0 {
        return 0;
    }
    // wrapping: i64::MIN / -1 overflows, and a user's data can reach it.
    let q = a.wrapping_div(b);
    if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

