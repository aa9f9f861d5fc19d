//! Elementwise operators: math, logic, comparisons, casts and activations. ONNX
//! broadcasts as NumPy does, as the IR's elementwise ops do, so each is a node or a few.

use super::Cx;
use crate::frontend::onnx::node::{invalid, unsupported, Node, Out};
use crate::frontend::onnx::tensor;
use crate::ir::{BinaryOp, Composite, Dtype, UnaryOp, ValueId};

/// Operators that are one unary op of the IR.
pub fn unary(cx: &mut Cx, node: &Node) -> Out {
    let op = match node.op_type {
        "Abs" => UnaryOp::Abs,
        "Neg" => UnaryOp::Neg,
        "Exp" => UnaryOp::Exp,
        "Log" => UnaryOp::Log,
        "Sqrt" => UnaryOp::Sqrt,
        "Sin" => UnaryOp::Sin,
        "Cos" => UnaryOp::Cos,
        "Tanh" => UnaryOp::Tanh,
        "Atan" => UnaryOp::Atan,
        "Relu" => UnaryOp::Relu,
        "Erf" => UnaryOp::Erf,
        "Floor" => UnaryOp::Floor,
        "Sign" => UnaryOp::Sign,
        "Not" | "BitwiseNot" => UnaryOp::Not,
        "IsNaN" => UnaryOp::IsNan,
        "Sigmoid" => UnaryOp::Composite(Composite::Sigmoid),
        "Softplus" => UnaryOp::Composite(Composite::Softplus),
        "Mish" => UnaryOp::Composite(Composite::Mish),
        other => unreachable!("{other} is not registered as unary"),
    };
    Ok(vec![cx.b.unary(op, node.input(0)?)?])
}

/// A scalar constant of `x`'s element type (so that it does not promote `x`).
fn scalar(cx: &mut Cx, x: ValueId, value: f64) -> ValueId {
    let dtype = cx.b.dtype(x);
    cx.b.scalar(dtype, value)
}

/// `op(x, c)` with `c` a scalar of `x`'s type.
fn with_scalar(cx: &mut Cx, op: BinaryOp, x: ValueId, c: f64) -> crate::error::Result<ValueId> {
    let c = scalar(cx, x, c);
    cx.b.binary(op, x, c)
}

/// `(1 - x, 1 + x)`, of `x`'s type.
fn one_minus_and_plus(cx: &mut Cx, x: ValueId) -> crate::error::Result<(ValueId, ValueId)> {
    let one = scalar(cx, x, 1.0);
    Ok((cx.b.binary(BinaryOp::Sub, one, x)?, cx.b.binary(BinaryOp::Add, one, x)?))
}

/// Unary operators that the IR's ops compose.
pub fn composed(cx: &mut Cx, node: &Node) -> Out {
    use BinaryOp::*;
    let x = node.input(0)?;
    let b = &mut cx.b;
    let y = match node.op_type {
        "Ceil" => {
            let n = b.unary(UnaryOp::Neg, x)?;
            let f = b.unary(UnaryOp::Floor, n)?;
            b.unary(UnaryOp::Neg, f)?
        }
        "Reciprocal" => b.reciprocal(x)?,
        "Tan" => {
            let (s, c) = (b.unary(UnaryOp::Sin, x)?, b.unary(UnaryOp::Cos, x)?);
            b.binary(Div, s, c)?
        }
        "Sinh" | "Cosh" => {
            let e = b.unary(UnaryOp::Exp, x)?;
            let n = b.unary(UnaryOp::Neg, x)?;
            let f = b.unary(UnaryOp::Exp, n)?;
            let sum = b.binary(if node.op_type == "Sinh" { Sub } else { Add }, e, f)?;
            with_scalar(cx, Mul, sum, 0.5)?
        }
        // sign(x) log(|x| + sqrt(x^2 + 1)): no cancellation for negative x.
        "Asinh" => {
            let a = b.unary(UnaryOp::Abs, x)?;
            let sq = b.binary(Mul, x, x)?;
            let sq1 = with_scalar(cx, Add, sq, 1.0)?;
            let r = cx.b.unary(UnaryOp::Sqrt, sq1)?;
            let s = cx.b.binary(Add, a, r)?;
            let l = cx.b.unary(UnaryOp::Log, s)?;
            let sign = cx.b.unary(UnaryOp::Sign, x)?;
            cx.b.binary(Mul, sign, l)?
        }
        // asin: atan(x / sqrt(1 - x^2)), with 1 - x^2 as (1 - x)(1 + x), exact near
        // |x| = 1; at +-1 the quotient is +-inf, whose atan is +-pi/2.
        // acos: 2 atan(sqrt((1 - x) / (1 + x))), with no cancellation near x = 1, where
        // acos is small; at x = -1 the quotient is inf, and 2 atan(inf) = pi.
        "Asin" | "Acos" => {
            let asin = node.op_type == "Asin";
            let (m, p) = one_minus_and_plus(cx, x)?;
            let q = cx.b.binary(if asin { Mul } else { Div }, m, p)?;
            let r = cx.b.unary(UnaryOp::Sqrt, q)?;
            let t = if asin { cx.b.binary(Div, x, r)? } else { r };
            let a = cx.b.unary(UnaryOp::Atan, t)?;
            if asin { a } else { with_scalar(cx, Mul, a, 2.0)? }
        }
        "Acosh" => {
            let sq = b.binary(Mul, x, x)?;
            let sq1 = with_scalar(cx, Sub, sq, 1.0)?;
            let r = cx.b.unary(UnaryOp::Sqrt, sq1)?;
            let s = cx.b.binary(Add, x, r)?;
            cx.b.unary(UnaryOp::Log, s)?
        }
        "Atanh" => {
            let (m, p) = one_minus_and_plus(cx, x)?;
            let q = cx.b.binary(Div, p, m)?;
            let l = cx.b.unary(UnaryOp::Log, q)?;
            with_scalar(cx, Mul, l, 0.5)?
        }
        "Softsign" => {
            let a = b.unary(UnaryOp::Abs, x)?;
            let d = with_scalar(cx, Add, a, 1.0)?;
            cx.b.binary(Div, x, d)?
        }
        other => unreachable!("{other} is not registered as composed"),
    };
    Ok(vec![y])
}

/// `IsInf`: `detect_positive` and `detect_negative` choose which infinities count.
pub fn is_inf(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let (pos, neg) = (node.int("detect_positive", 1)? != 0, node.int("detect_negative", 1)? != 0);
    let y = match (pos, neg) {
        (true, true) => {
            let a = cx.b.unary(UnaryOp::Abs, x)?;
            with_scalar(cx, BinaryOp::Eq, a, f64::INFINITY)?
        }
        (true, false) => with_scalar(cx, BinaryOp::Eq, x, f64::INFINITY)?,
        (false, true) => with_scalar(cx, BinaryOp::Eq, x, f64::NEG_INFINITY)?,
        (false, false) => {
            let shape = cx.b.shape(x);
            cx.b.full(Dtype::Bool, shape, 0.0)?
        }
    };
    Ok(vec![y])
}

/// `Round`: to the nearest integer, halves to even: `r = floor(x + 1/2)`, less one
/// where `x` was a half and `r` is odd.
pub fn round(cx: &mut Cx, node: &Node) -> Out {
    Ok(vec![round_half_even(cx, node.input(0)?)?])
}

/// `x` rounded to the nearest integer, halves to even (NumPy's `rint`): floor(x + 0.5),
/// less one where x was halfway and that is odd.
pub(super) fn round_half_even(cx: &mut Cx, x: ValueId) -> crate::error::Result<ValueId> {
    use BinaryOp::*;
    let h = with_scalar(cx, Add, x, 0.5)?;
    let r = cx.b.unary(UnaryOp::Floor, h)?;
    let d = cx.b.binary(Sub, r, x)?;
    let tie = with_scalar(cx, Eq, d, 0.5)?;
    let half_r = with_scalar(cx, Mul, r, 0.5)?;
    let fl = cx.b.unary(UnaryOp::Floor, half_r)?;
    let even = with_scalar(cx, Mul, fl, 2.0)?;
    let odd = cx.b.binary(Ne, even, r)?;
    let both = cx.b.binary(And, tie, odd)?;
    let one = scalar(cx, x, 1.0);
    let down = cx.b.binary(Sub, r, one)?;
    cx.b.select(both, down, r)
}

/// Binary operators, with ONNX's result types: an arithmetic result has the first
/// operand's type (Pow's exponent may differ; integer Div truncates toward zero, as the
/// float quotient cast back does).
pub fn binary(cx: &mut Cx, node: &Node) -> Out {
    let op = match node.op_type {
        "Add" => BinaryOp::Add,
        "Sub" => BinaryOp::Sub,
        "Mul" => BinaryOp::Mul,
        "Div" => BinaryOp::Div,
        "Pow" => BinaryOp::Pow,
        "Equal" => BinaryOp::Eq,
        "Less" => BinaryOp::Lt,
        "LessOrEqual" => BinaryOp::Le,
        "Greater" => BinaryOp::Gt,
        "GreaterOrEqual" => BinaryOp::Ge,
        "And" => BinaryOp::And,
        "Or" => BinaryOp::Or,
        "Xor" => BinaryOp::Xor,
        // The IR's logical ops are bitwise on integers.
        "BitwiseAnd" => BinaryOp::And,
        "BitwiseOr" => BinaryOp::Or,
        "BitwiseXor" => BinaryOp::Xor,
        other => unreachable!("{other} is not registered as binary"),
    };
    let (a, b) = (node.input(0)?, node.input(1)?);
    let y = cx.b.binary(op, a, b)?;
    Ok(vec![keep_type(cx, y, a, op.is_comparison() || op.is_logical())?])
}

/// `y` cast to `like`'s element type, unless it is a bool result.
fn keep_type(cx: &mut Cx, y: ValueId, like: ValueId, boolean: bool) -> crate::error::Result<ValueId> {
    let want = cx.b.dtype(like);
    if boolean || cx.b.dtype(y) == want {
        return Ok(y);
    }
    cx.b.cast(y, want)
}

/// `BitShift` with `direction` LEFT or RIGHT.
pub fn bit_shift(cx: &mut Cx, node: &Node) -> Out {
    let op = match node.string_or("direction", "")?.as_str() {
        "LEFT" => BinaryOp::Shl,
        "RIGHT" => BinaryOp::Shr,
        d => return invalid(format!("BitShift direction {d:?} is neither LEFT nor RIGHT")),
    };
    Ok(vec![cx.b.binary(op, node.input(0)?, node.input(1)?)?])
}

/// `Mod`: with `fmod = 1` the remainder has the dividend's sign (C's fmod), else the
/// divisor's (Python's %), `a - b * floor(a / b)`.
pub fn modulo(cx: &mut Cx, node: &Node) -> Out {
    use BinaryOp::*;
    let (a, b) = (node.input(0)?, node.input(1)?);
    let q = cx.b.binary(Div, a, b)?;
    let q = if node.int("fmod", 0)? != 0 {
        // trunc(q) = sign(q) floor(|q|)
        let s = cx.b.unary(UnaryOp::Sign, q)?;
        let m = cx.b.unary(UnaryOp::Abs, q)?;
        let f = cx.b.unary(UnaryOp::Floor, m)?;
        cx.b.binary(Mul, s, f)?
    } else {
        cx.b.unary(UnaryOp::Floor, q)?
    };
    let q = keep_type(cx, q, a, false)?;
    let p = cx.b.binary(Mul, b, q)?;
    Ok(vec![cx.b.binary(Sub, a, p)?])
}

/// `Max`, `Min`, `Sum`, `Mean` of any number of inputs, broadcast together.
pub fn variadic(cx: &mut Cx, node: &Node) -> Out {
    let args = node.all_inputs();
    let Some((&first, rest)) = args.split_first() else { return invalid(format!("{} needs at least one input", node.op_type)) };
    let op = match node.op_type {
        "Max" => BinaryOp::Max,
        "Min" => BinaryOp::Min,
        _ => BinaryOp::Add,
    };
    let mut y = first;
    for &x in rest {
        y = cx.b.binary(op, y, x)?;
    }
    if node.op_type == "Mean" {
        y = with_scalar(cx, BinaryOp::Div, y, args.len() as f64)?;
    }
    if rest.is_empty() {
        // One input: its value, broadcast to itself (a node of its own, for the output).
        let shape = cx.b.shape(y);
        y = cx.b.broadcast_to(y, shape)?;
    }
    Ok(vec![y])
}

pub fn where_(cx: &mut Cx, node: &Node) -> Out {
    Ok(vec![cx.b.select(node.input(0)?, node.input(1)?, node.input(2)?)?])
}

/// `Cast` to its `to` type, `CastLike` to its second input's.
pub fn cast(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let to = if node.op_type == "CastLike" {
        cx.b.dtype(node.input(1)?)
    } else {
        let code = node.int_opt("to")?.ok_or_else(|| crate::error::Error::user("Cast has no `to`"))?;
        match tensor::dtype(code as i32) {
            Ok(d) => d,
            Err(why) => return unsupported(why),
        }
    };
    // `saturate` (opset 19 on, default 1) concerns casts to float8 only; `round_mode`
    // (opset 24 on) casts to float8e8m0 only, which mithrilc refuses.
    let saturate = node.int_opt("saturate")?.unwrap_or(1) != 0;
    Ok(vec![if saturate { saturating_cast(cx, x, to)? } else { cx.b.cast(x, to)? }])
}

/// `x` cast to `to` as ONNX's `saturate` asks (Cast and QuantizeLinear from opset 19):
/// to a float8 type, a value beyond its largest finite one (an infinity too) becomes
/// that value, of its sign, and NaN stays NaN (the clamp propagates it); any other cast
/// is the plain one (float4 has no infinity or NaN: its conversion saturates anyway).
/// The clamp is in the source type when that is a 16-bit or wider float (each holds
/// every float8 maximum), else in f32, which holds every value a float8 does not
/// saturate.
pub(super) fn saturating_cast(cx: &mut Cx, x: ValueId, to: Dtype) -> crate::error::Result<ValueId> {
    let Some(max) = crate::narrow::max_finite(to).filter(|_| to != Dtype::F4E2M1) else {
        return cx.b.cast(x, to);
    };
    let x = match cx.b.dtype(x) {
        Dtype::F64 | Dtype::F32 | Dtype::F16 | Dtype::Bf16 => x,
        _ => cx.b.cast(x, Dtype::F32)?,
    };
    let y = with_scalar(cx, BinaryOp::Min, x, max)?;
    let y = with_scalar(cx, BinaryOp::Max, y, -max)?;
    cx.b.cast(y, to)
}

/// `Clip` between `min` and `max`: attributes before opset 11, optional inputs since.
pub fn clip(cx: &mut Cx, node: &Node) -> Out {
    let x = node.input(0)?;
    let (lo, hi) = if node.opset < 11 {
        let (lo, hi) = (node.float("min", f32::MIN)?, node.float("max", f32::MAX)?);
        (Some(scalar(cx, x, lo)), Some(scalar(cx, x, hi)))
    } else {
        (node.opt(1), node.opt(2))
    };
    let mut y = x;
    if let Some(lo) = lo {
        y = cx.b.binary(BinaryOp::Max, y, lo)?;
    }
    if let Some(hi) = hi {
        y = cx.b.binary(BinaryOp::Min, y, hi)?;
    }
    if lo.is_none() && hi.is_none() {
        let shape = cx.b.shape(x);
        y = cx.b.broadcast_to(x, shape)?;
    }
    Ok(vec![y])
}

/// Activations with scalar parameters.
pub fn activation(cx: &mut Cx, node: &Node) -> Out {
    use BinaryOp::*;
    let x = node.input(0)?;
    let zero = scalar(cx, x, 0.0);
    let y = match node.op_type {
        "LeakyRelu" => {
            let alpha = node.float("alpha", 0.01)?;
            let ax = with_scalar(cx, Mul, x, alpha)?;
            let pos = cx.b.binary(Gt, x, zero)?;
            cx.b.select(pos, x, ax)?
        }
        "Elu" | "Celu" | "Selu" => {
            let (alpha, gamma) = match node.op_type {
                "Elu" => (node.float("alpha", 1.0)?, 1.0),
                "Celu" => (node.float("alpha", 1.0)?, 1.0),
                _ => (node.float("alpha", 1.673_263_2)?, node.float("gamma", 1.050_701)?),
            };
            // alpha (exp(x / a) - 1) for x <= 0, with a = alpha for Celu, 1 otherwise.
            let scaled = if node.op_type == "Celu" { with_scalar(cx, Div, x, alpha)? } else { x };
            let e = cx.b.unary(UnaryOp::Exp, scaled)?;
            let em1 = with_scalar(cx, Sub, e, 1.0)?;
            let neg = with_scalar(cx, Mul, em1, alpha)?;
            let pos = cx.b.binary(Gt, x, zero)?;
            let y = cx.b.select(pos, x, neg)?;
            if node.op_type == "Selu" { with_scalar(cx, Mul, y, gamma)? } else { y }
        }
        "HardSigmoid" | "HardSwish" => {
            let (alpha, beta) = if node.op_type == "HardSwish" { (1.0 / 6.0, 0.5) } else { (node.float("alpha", 0.2)?, node.float("beta", 0.5)?) };
            let ax = with_scalar(cx, Mul, x, alpha)?;
            let axb = with_scalar(cx, Add, ax, beta)?;
            let lo = cx.b.binary(Max, axb, zero)?;
            let hs = with_scalar(cx, Min, lo, 1.0)?;
            if node.op_type == "HardSwish" { cx.b.binary(Mul, x, hs)? } else { hs }
        }
        "ThresholdedRelu" => {
            let alpha = node.float("alpha", 1.0)?;
            let above = with_scalar(cx, Gt, x, alpha)?;
            cx.b.select(above, x, zero)?
        }
        "Shrink" => {
            let (lambd, bias) = (node.float("lambd", 0.5)?, node.float("bias", 0.0)?);
            let below = with_scalar(cx, Lt, x, -lambd)?;
            let above = with_scalar(cx, Gt, x, lambd)?;
            let up = with_scalar(cx, Add, x, bias)?;
            let down = with_scalar(cx, Sub, x, bias)?;
            let hi = cx.b.select(above, down, zero)?;
            cx.b.select(below, up, hi)?
        }
        "Gelu" => match node.string_or("approximate", "none")?.as_str() {
            "none" => cx.b.gelu(x, false)?,
            "tanh" => cx.b.gelu(x, true)?,
            a => return invalid(format!("Gelu approximate {a:?} is neither none nor tanh")),
        },
        "Swish" => {
            let alpha = node.float("alpha", 1.0)?;
            let ax = with_scalar(cx, Mul, x, alpha)?;
            let s = cx.b.unary(UnaryOp::Composite(Composite::Sigmoid), ax)?;
            cx.b.binary(Mul, x, s)?
        }
        other => unreachable!("{other} is not registered as an activation"),
    };
    Ok(vec![y])
}

/// `PRelu`: `x` where positive, else `slope * x` (the slope broadcast onto `x`).
pub fn prelu(cx: &mut Cx, node: &Node) -> Out {
    let (x, slope) = (node.input(0)?, node.input(1)?);
    let zero = scalar(cx, x, 0.0);
    let pos = cx.b.binary(BinaryOp::Gt, x, zero)?;
    let sx = cx.b.binary(BinaryOp::Mul, slope, x)?;
    Ok(vec![cx.b.select(pos, x, sx)?])
}
