//! `mithril_ops.h`'s float helpers that are plain arithmetic (the fast exponential,
//! tanh, sigmoid and GELU's tanh form) written out in CLIF for one f32 or four
//! (`F32X4`): the same operations in the same order as the C (which compiles without
//! contraction), so the JIT's results are the C target's bit for bit, and loops over
//! them vectorize. (The literals are the C's, as written there.)
#![allow(clippy::excessive_precision, clippy::approx_constant)]

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Type, Value};

use super::expr::Body;

impl Body<'_, '_> {
    fn ty_of(&self, v: Value) -> Type {
        self.b.func.dfg.value_type(v)
    }

    /// `x` as a constant of `t` (f32, or f32 in every lane).
    pub fn cf(&mut self, t: Type, x: f32) -> Value {
        let s = self.b.ins().f32const(x);
        if t.is_vector() { self.b.ins().splat(t, s) } else { s }
    }

    /// `cond ? a : b`, for a scalar condition or a mask of lanes (a vector compare's).
    pub fn sel(&mut self, cond: Value, a: Value, b: Value) -> Value {
        let t = self.ty_of(a);
        if t.is_vector() {
            let mask = if self.ty_of(cond) == t { cond } else { self.b.ins().bitcast(t, MemFlagsData::new().with_endianness(cranelift_codegen::ir::Endianness::Little), cond) };
            self.b.ins().bitselect(mask, a, b)
        } else {
            self.b.ins().select(cond, a, b)
        }
    }

    fn fcmp_const(&mut self, cc: FloatCC, x: Value, k: f32) -> Value {
        let t = self.ty_of(x);
        let kv = self.cf(t, k);
        self.b.ins().fcmp(cc, x, kv)
    }

    /// `x < lo ? lo : (x > hi ? hi : (x != x ? 0 : x))`.
    fn clamp_nan0(&mut self, x: Value, lo: f32, hi: f32) -> Value {
        let t = self.ty_of(x);
        let (lov, hiv, zero) = (self.cf(t, lo), self.cf(t, hi), self.cf(t, 0.0));
        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let v = self.sel(nan, zero, x);
        let above = self.fcmp_const(FloatCC::GreaterThan, x, hi);
        let v = self.sel(above, hiv, v);
        let below = self.fcmp_const(FloatCC::LessThan, x, lo);
        self.sel(below, lov, v)
    }

    /// `mr_expf_n`: round(c / ln 2) by adding and removing 1.5 * 2^23.
    fn expf_n(&mut self, c: Value) -> Value {
        let t = self.ty_of(c);
        let (k, big) = (self.cf(t, 1.44269504088896341), self.cf(t, 12582912.0));
        let y = self.b.ins().fmul(c, k);
        let y = self.b.ins().fadd(y, big);
        self.b.ins().fsub(y, big)
    }

    /// `mr_expf_scaled(c, n, m)`: exp(c) / 2^(n - m).
    fn expf_scaled(&mut self, c: Value, n: Value, m: Value) -> Value {
        let t = self.ty_of(c);
        let (l1, l2) = (self.cf(t, 0.693359375), self.cf(t, 2.12194440e-4));
        let a = self.b.ins().fmul(n, l1);
        let r = self.b.ins().fsub(c, a);
        let b = self.b.ins().fmul(n, l2);
        let r = self.b.ins().fadd(r, b);
        let mut p = self.cf(t, 1.9875691500e-4);
        for k in [1.3981999507e-3f32, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1] {
            let kv = self.cf(t, k);
            let pr = self.b.ins().fmul(p, r);
            p = self.b.ins().fadd(pr, kv);
        }
        // 2^m in the exponent bits.
        let it = if t.is_vector() { types::I32X4 } else { types::I32 };
        let mi = self.b.ins().fcvt_to_sint_sat(it, m);
        let bias = self.b.ins().iconst(types::I32, 127);
        let bias = if t.is_vector() { self.b.ins().splat(it, bias) } else { bias };
        let e = self.b.ins().iadd(mi, bias);
        let e = self.b.ins().ishl_imm_u(e, 23);
        let scale = self.b.ins().bitcast(t, MemFlagsData::new().with_endianness(cranelift_codegen::ir::Endianness::Little), e);
        let one = self.cf(t, 1.0);
        let q = self.b.ins().fmul(p, r);
        let q = self.b.ins().fmul(q, r);
        let q = self.b.ins().fadd(q, r);
        let q = self.b.ins().fadd(q, one);
        self.b.ins().fmul(q, scale)
    }

    /// `mr_fast_expf`.
    pub fn fast_expf(&mut self, x: Value) -> Value {
        let t = self.ty_of(x);
        let c = self.clamp_nan0(x, -87.33654, 88.72283);
        let n = self.expf_n(c);
        let k127 = self.cf(t, 127.0);
        let over = self.fcmp_const(FloatCC::GreaterThan, n, 127.0);
        let m = self.sel(over, k127, n);
        let y = self.expf_scaled(c, n, m);
        let two = self.cf(t, 2.0);
        let y2 = self.b.ins().fmul(y, two);
        let y = self.sel(over, y2, y);
        let inf = self.cf(t, f32::INFINITY);
        let big = self.fcmp_const(FloatCC::GreaterThan, x, 88.72283);
        let y = self.sel(big, inf, y);
        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        self.sel(nan, x, y)
    }

    /// `mr_fast_tanhf`.
    pub fn fast_tanhf(&mut self, x: Value) -> Value {
        let t = self.ty_of(x);
        let neg = self.fcmp_const(FloatCC::LessThan, x, 0.0);
        let nx = self.b.ins().fneg(x);
        let ax = self.sel(neg, nx, x);
        let m2 = self.cf(t, -2.0);
        let arg = self.b.ins().fmul(m2, ax);
        let e = self.fast_expf(arg);
        let one = self.cf(t, 1.0);
        let num = self.b.ins().fsub(one, e);
        let den = self.b.ins().fadd(one, e);
        let th = self.b.ins().fdiv(num, den);
        let x2 = self.b.ins().fmul(x, x);
        let (c3, c5) = (self.cf(t, 0.33333333333), self.cf(t, 0.13333333333));
        let a = self.b.ins().fmul(x2, c5);
        let a = self.b.ins().fsub(c3, a);
        let a = self.b.ins().fmul(x2, a);
        let a = self.b.ins().fsub(one, a);
        let small = self.b.ins().fmul(x, a);
        let nth = self.b.ins().fneg(th);
        let th = self.sel(neg, nth, th);
        let tiny = self.fcmp_const(FloatCC::LessThan, ax, 0.0625);
        self.sel(tiny, small, th)
    }

    /// `mr_sigmoidf`: stable on both sides.
    pub fn sigmoidf(&mut self, x: Value) -> Value {
        let t = self.ty_of(x);
        let neg = self.fcmp_const(FloatCC::LessThan, x, 0.0);
        let nx = self.b.ins().fneg(x);
        let arg = self.sel(neg, x, nx);
        let e = self.fast_expf(arg);
        let one = self.cf(t, 1.0);
        let den = self.b.ins().fadd(one, e);
        let pos = self.b.ins().fdiv(one, den);
        let negv = self.b.ins().fdiv(e, den);
        let ge = self.fcmp_const(FloatCC::GreaterThanOrEqual, x, 0.0);
        self.sel(ge, pos, negv)
    }

    /// `mr_gelu_tanhf`: x / (1 + exp(-2u)).
    pub fn gelu_tanhf(&mut self, x: Value) -> Value {
        let t = self.ty_of(x);
        let (a, b) = (self.cf(t, -1.59576912160573071176), self.cf(t, 0.07135481627159862));
        let x2 = self.b.ins().fmul(x, x);
        let bx2 = self.b.ins().fmul(b, x2);
        let inner = self.b.ins().fsub(a, bx2);
        let tt = self.b.ins().fmul(x, inner);
        let c = self.clamp_nan0(tt, -87.0, 88.0);
        let n = self.expf_n(c);
        let e = self.expf_scaled(c, n, n);
        let one = self.cf(t, 1.0);
        let den = self.b.ins().fadd(one, e);
        let q = self.b.ins().fdiv(x, den);
        let zero = self.cf(t, 0.0);
        let flushed = self.b.ins().fmul(zero, x);
        let over = self.fcmp_const(FloatCC::GreaterThan, tt, 88.0);
        self.sel(over, flushed, q)
    }
}
