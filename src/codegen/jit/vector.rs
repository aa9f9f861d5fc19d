//! Innermost loops four lanes at a time: an f32 result stored contiguously along the
//! innermost loop variable is computed in cranelift's 128-bit vectors (`F32X4`; bools
//! as lane masks) wherever its expression allows, then a scalar tail. What does not
//! depend on the loop variable is computed once per trip in scalar and broadcast;
//! loads along it must be contiguous; the helpers without a vector form (the C
//! library's log, erf, sin, ...) are called lane by lane. Every lane computes what the
//! scalar code computes, so results do not depend on which path ran.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};

use super::expr::Body;
use crate::error::{Error, Result};
use crate::ir::{BinaryOp, Composite, Dtype, UnaryOp};
use crate::lower::{Expr, Program, View};

const LANES: i64 = 4;

/// Whether `e` reads loop variable `var`.
fn depends(e: &Expr, var: usize) -> bool {
    let mut vars = Vec::new();
    crate::lower::expr_vars(e, &mut vars);
    vars.contains(&var)
}

/// Whether `e` computes four lanes at a time along `var` ([`Body::vexpr`]).
pub fn vectorizable(p: &Program, e: &Expr, var: usize) -> bool {
    let t = p.expr_dtype(e);
    if !matches!(t, Dtype::F32 | Dtype::Bool) {
        return false;
    }
    if !depends(e, var) {
        return true;
    }
    let f32s = |xs: &[&Expr]| xs.iter().all(|x| p.expr_dtype(x) == Dtype::F32 && vectorizable(p, x, var));
    match e {
        Expr::Const(..) => true,
        Expr::Load { view, vars } => {
            t == Dtype::F32 && vars.iter().enumerate().all(|(d, &v)| v != var || view.strides[d] == 1 || view.strides[d] == 0 || view.shape[d] == 1)
        }
        Expr::Index(_) | Expr::Extent(_) | Expr::Gather { .. } | Expr::Select(..) => false,
        Expr::Where(c, a, b, t) => *t == Dtype::F32 && p.expr_dtype(c) == Dtype::Bool && vectorizable(p, c, var) && f32s(&[a, b]),
        Expr::Cast(x, to) => match (p.expr_dtype(x), to) {
            (Dtype::F32 | Dtype::Bool, Dtype::F32 | Dtype::Bool) => vectorizable(p, x, var),
            _ => false,
        },
        Expr::Unary(u, x, t) => match (u, t) {
            (UnaryOp::IsNan, Dtype::Bool) => f32s(&[x]),
            (UnaryOp::Not, Dtype::Bool) => p.expr_dtype(x) == Dtype::Bool && vectorizable(p, x, var),
            (UnaryOp::Composite(Composite::Sigmoid | Composite::GeluTanh | Composite::Gelu | Composite::Softplus), Dtype::F32) => f32s(&[x]),
            (UnaryOp::Composite(_), _) => false,
            (UnaryOp::Not | UnaryOp::IsNan, _) => false,
            (_, Dtype::F32) => f32s(&[x]),
            _ => false,
        },
        Expr::Binary(op, l, r, t) => match (op, t) {
            (BinaryOp::And | BinaryOp::Or | BinaryOp::Xor, Dtype::Bool) => {
                [l, r].iter().all(|x| p.expr_dtype(x) == Dtype::Bool && vectorizable(p, x, var))
            }
            (BinaryOp::Shl | BinaryOp::Shr | BinaryOp::And | BinaryOp::Or | BinaryOp::Xor, _) => false,
            (op, Dtype::Bool) if op.is_comparison() => f32s(&[l, r]),
            (_, Dtype::F32) => f32s(&[l, r]),
            _ => false,
        },
    }
}

impl Body<'_, '_> {
    fn mask_const(&mut self, on: bool) -> Value {
        let v = self.iconst(types::I32, if on { -1 } else { 0 });
        self.b.ins().splat(types::I32X4, v)
    }

    /// A scalar of type `t` (f32, or bool) in every lane (a bool as a lane mask).
    fn broadcast(&mut self, v: Value, t: Dtype) -> Value {
        if t == Dtype::Bool {
            let on = self.b.ins().icmp_imm_s(IntCC::NotEqual, v, 0);
            let (yes, no) = (self.mask_const(true), self.mask_const(false));
            self.b.ins().select(on, yes, no)
        } else {
            self.b.ins().splat(types::F32X4, v)
        }
    }

    /// Calls the scalar helper `f` on each lane of `x` (an `F32X4`).
    fn lanewise(&mut self, x: Value, f: &mut dyn FnMut(&mut Self, Value) -> Result<Value>) -> Result<Value> {
        let mut out = x;
        for lane in 0..LANES as u8 {
            let s = self.b.ins().extractlane(x, lane);
            let y = f(self, s)?;
            out = self.b.ins().insertlane(out, y, lane);
        }
        Ok(out)
    }

    /// `e` at `var` = its current value and the three after it: an `F32X4`, or an
    /// `I32X4` mask for a bool. [`vectorizable`] must hold.
    pub fn vexpr(&mut self, e: &Expr, var: usize) -> Result<Value> {
        let p = self.p;
        let t = p.expr_dtype(e);
        if !depends(e, var) {
            let s = self.expr(e)?;
            return Ok(self.broadcast(s, t));
        }
        let flags = MemFlagsData::new().with_notrap();
        Ok(match e {
            Expr::Const(x, d) => {
                let s = self.constant(*x, *d)?;
                self.broadcast(s, *d)
            }
            Expr::Load { view, vars } => {
                let addr = self.address(view, vars, None)?;
                if vars.iter().enumerate().any(|(d, &v)| v == var && view.strides[d] == 1 && view.shape[d] != 1) {
                    self.b.ins().load(types::F32X4, flags, addr, 0)
                } else {
                    let s = self.b.ins().load(types::F32, flags, addr, 0);
                    self.b.ins().splat(types::F32X4, s)
                }
            }
            Expr::Where(c, a, b, _) => {
                let (c, a, b) = (self.vexpr(c, var)?, self.vexpr(a, var)?, self.vexpr(b, var)?);
                self.sel(c, a, b)
            }
            Expr::Cast(x, to) => {
                let v = self.vexpr(x, var)?;
                match (p.expr_dtype(x), to) {
                    (from, to) if from == *to => v,
                    (Dtype::Bool, _) => {
                        let (one, zero) = (self.cf(types::F32X4, 1.0), self.cf(types::F32X4, 0.0));
                        self.sel(v, one, zero)
                    }
                    _ => {
                        let zero = self.cf(types::F32X4, 0.0);
                        self.b.ins().fcmp(FloatCC::NotEqual, v, zero)
                    }
                }
            }
            Expr::Unary(u, x, _) => {
                let a = self.vexpr(x, var)?;
                let ty = types::F32X4;
                match u {
                    UnaryOp::Neg => self.b.ins().fneg(a),
                    UnaryOp::Abs => self.b.ins().fabs(a),
                    UnaryOp::Sqrt => self.b.ins().sqrt(a),
                    UnaryOp::Floor => self.b.ins().floor(a),
                    UnaryOp::Exp => self.fast_expf(a),
                    UnaryOp::Tanh => self.fast_tanhf(a),
                    UnaryOp::Composite(Composite::Sigmoid) => self.sigmoidf(a),
                    UnaryOp::Composite(Composite::GeluTanh) => self.gelu_tanhf(a),
                    UnaryOp::Relu => {
                        let zero = self.cf(ty, 0.0);
                        let keep = self.b.ins().fcmp(FloatCC::UnorderedOrGreaterThan, a, zero);
                        self.sel(keep, a, zero)
                    }
                    UnaryOp::Sign => {
                        let (zero, one, minus) = (self.cf(ty, 0.0), self.cf(ty, 1.0), self.cf(ty, -1.0));
                        let pos = self.b.ins().fcmp(FloatCC::GreaterThan, a, zero);
                        let neg = self.b.ins().fcmp(FloatCC::LessThan, a, zero);
                        let s = self.sel(neg, minus, zero);
                        let s = self.sel(pos, one, s);
                        let nan = self.b.ins().fcmp(FloatCC::Unordered, a, a);
                        self.sel(nan, a, s)
                    }
                    UnaryOp::IsNan => self.b.ins().fcmp(FloatCC::Unordered, a, a),
                    UnaryOp::Not => self.b.ins().bnot(a),
                    other => {
                        // The scalar op, lane by lane (a helper call).
                        let u = *other;
                        self.lanewise(a, &mut |b, s| b.scalar_unary(u, s, Dtype::F32))?
                    }
                }
            }
            Expr::Binary(op, l, r, _) => {
                let (x, y) = (self.vexpr(l, var)?, self.vexpr(r, var)?);
                match op {
                    // (on bools: lane masks)
                    BinaryOp::And => self.b.ins().band(x, y),
                    BinaryOp::Or => self.b.ins().bor(x, y),
                    BinaryOp::Xor => self.b.ins().bxor(x, y),
                    op => self.float_binary(*op, x, y, Dtype::F32)?,
                }
            }
            other => return Err(Error::internal(format!("jit: {other:?} in a vector loop"))),
        })
    }

    /// `for var in [from, to): out[vars] = value` (of type `t`), four lanes at a time
    /// where [`vectorizable`] allows, then one at a time.
    pub fn store_loop(&mut self, var: usize, (from, to): (Value, Value), out: &View, vars: &[usize], value: &Expr, t: Dtype) -> Result<()> {
        let contiguous = vars.iter().enumerate().all(|(d, &v)| v != var || out.strides[d] == 1 || out.shape[d] == 1);
        let mut scalar = |b: &mut Self| -> Result<()> {
            let v = b.as_type(value, t)?;
            let at = b.address(out, vars, None)?;
            b.store(at, v, t)
        };
        let cast = Expr::Cast(Box::new(value.clone()), t);
        if !(self.m.vectors && t == Dtype::F32 && contiguous && vectorizable(self.p, &cast, var)) {
            return self.for_range(var, from, to, &mut scalar);
        }
        // [from, from + 4 * trips) by vectors, the rest one at a time.
        let len = self.b.ins().isub(to, from);
        let whole = self.b.ins().band_imm_s(len, !(LANES - 1));
        let split = self.b.ins().iadd(from, whole);
        let (head, body, tail) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
        let i = self.b.append_block_param(head, types::I64);
        self.b.ins().jump(head, &[from.into()]);
        self.b.switch_to_block(head);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, i, split);
        self.b.ins().brif(more, body, &[], tail, &[]);
        self.b.switch_to_block(body);
        self.set_var(var, i);
        let v = self.vexpr(&cast, var)?;
        let at = self.address(out, vars, None)?;
        self.b.ins().store(MemFlagsData::new().with_notrap(), v, at, 0);
        let next = self.b.ins().iadd_imm_s(i, LANES);
        self.b.ins().jump(head, &[next.into()]);
        self.b.switch_to_block(tail);
        self.for_range(var, split, to, &mut scalar)
    }
}
