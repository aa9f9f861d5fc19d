//! A function body being written in CLIF: the program's scalar expressions, loads and
//! stores at views, extents, and loop nests. Every op's semantics are the C target's
//! (`codegen::cstyle`, with `runtime-c/mithril_ops.h`): the simple helpers inline
//! (NaN-propagating max and min, relu, sign, index wrapping, saturating conversions),
//! the others called by name ([`super::runtime::helpers`]), so the JIT computes what
//! `--target c` computes.

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, FuncRef, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::{FunctionBuilder, Variable};
use cranelift_module::Module;

use super::module::Builder;
use super::runtime::Scalar;
use crate::error::{Error, Result};
use crate::ir::{Atom, BinaryOp, Dim, Dtype, Poly, UnaryOp};
use crate::lower::{BufId, Expr, Program, View};

/// The CLIF type a value of `d` computes in: f16 and bf16 in f32 (held as their bits,
/// [`memory`]), bool in a byte holding 0 or 1.
pub fn compute(d: Dtype) -> Result<Type> {
    Ok(match d {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => types::F32,
        Dtype::F64 => types::F64,
        Dtype::I64 | Dtype::U64 => types::I64,
        Dtype::I32 | Dtype::U32 => types::I32,
        Dtype::I16 | Dtype::U16 => types::I16,
        Dtype::I8 | Dtype::U8 | Dtype::Bool => types::I8,
        _ => return Err(Error::user(format!("the jit target has no {d} arithmetic yet (the c target has)"))),
    })
}

/// The CLIF type a buffer of `d` holds.
pub fn memory(d: Dtype) -> Result<Type> {
    Ok(if matches!(d, Dtype::F16 | Dtype::Bf16) { types::I16 } else { compute(d)? })
}

/// Whether the JIT computes in `d` (the rest are refused before anything is compiled).
pub fn supports(d: Dtype) -> bool {
    compute(d).is_ok()
}

fn signed(d: Dtype) -> bool {
    d.is_signed_int()
}

/// Loads and stores touch only the program's buffers, in bounds by construction
/// (views are checked by lowering at the symbols' maxima, gathers before the kernel).
fn flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// A function body: its builder, the program it reads, where each buffer starts, the
/// symbols' run-time values and the loop variables in scope.
pub struct Body<'a, 'f> {
    pub b: FunctionBuilder<'f>,
    pub m: &'a mut Builder,
    pub p: &'a Program,
    pub bases: HashMap<BufId, Value>,
    pub dims: Vec<Value>,
    pub vars: Vec<Option<Value>>,
    refs: HashMap<&'static str, FuncRef>,
}

impl<'a, 'f> Body<'a, 'f> {
    pub fn new(b: FunctionBuilder<'f>, m: &'a mut Builder, p: &'a Program) -> Body<'a, 'f> {
        Body { b, m, p, bases: HashMap::new(), dims: Vec::new(), vars: Vec::new(), refs: HashMap::new() }
    }

    /// At the top of the function: the base pointer of each of `bufs` from the context's
    /// table of buffer addresses `table`, and every symbol's value from `dims`.
    pub fn load_bases(&mut self, table: Value, dims: Value, bufs: &[BufId]) {
        let ptr = self.m.ptr();
        for &buf in bufs {
            let at = i32::try_from(buf.0 * 8).expect("buffer tables are small");
            let v = self.b.ins().load(ptr, flags(), table, at);
            self.m.pointers.insert(v);
            self.bases.insert(buf, v);
        }
        self.dims = (0..self.p.symbols.len()).map(|i| self.b.ins().load(types::I64, flags(), dims, (i * 8) as i32)).collect();
    }

    /// An integer constant of type `t` (`x`'s bits at its width).
    pub fn iconst(&mut self, t: Type, x: i64) -> Value {
        let bits = if t.bits() < 64 { x & ((1i64 << t.bits()) - 1) } else { x };
        self.b.ins().iconst(t, bits)
    }

    fn var(&self, v: usize) -> Result<Value> {
        self.vars.get(v).copied().flatten().ok_or_else(|| Error::internal(format!("jit: loop variable {v} is not in scope")))
    }

    pub fn set_var(&mut self, v: usize, x: Value) {
        if self.vars.len() <= v {
            self.vars.resize(v + 1, None);
        }
        self.vars[v] = Some(x);
    }

    /// A run-time extent (an i64).
    pub fn extent(&mut self, d: &Dim) -> Result<Value> {
        match d {
            Dim::Known(n) => Ok(self.iconst(types::I64, *n as i64)),
            Dim::Sym(s) => self.symbol(s),
            Dim::Expr(p) => self.poly(p),
        }
    }

    fn symbol(&mut self, s: &str) -> Result<Value> {
        let i = self.p.symbols.iter().position(|(n, _)| n == s).ok_or_else(|| Error::internal(format!("jit: unknown symbol {s}")))?;
        Ok(self.dims[i])
    }

    /// A polynomial of symbols; its parts are never negative (the lowering sees to it),
    /// so unsigned division is the floor it stands for.
    fn poly(&mut self, p: &Poly) -> Result<Value> {
        let mut sum = self.iconst(types::I64, 0);
        for (c, atoms) in p.terms() {
            let mut term = self.iconst(types::I64, c);
            for a in atoms {
                let f = match a {
                    Atom::Sym(s) => self.symbol(s)?,
                    Atom::Div(q, k) => {
                        let q = self.poly(q)?;
                        let k = self.iconst(types::I64, *k as i64);
                        self.b.ins().udiv(q, k)
                    }
                };
                term = self.b.ins().imul(term, f);
            }
            sum = self.b.ins().iadd(sum, term);
        }
        Ok(sum)
    }

    /// The extents of a step's domain (static, or from the symbols).
    pub fn extents(&mut self, step: &crate::lower::Step) -> Result<Vec<Value>> {
        let domain = step.kernel.domain();
        (0..domain.len())
            .map(|d| match step.dims.get(d).and_then(Option::as_ref) {
                Some(dim) => self.extent(dim),
                None => Ok(self.iconst(types::I64, domain[d] as i64)),
            })
            .collect()
    }

    /// The address of a view's element at loop variables `vars`, plus `extra` elements.
    pub fn address(&mut self, view: &View, vars: &[usize], extra: Option<Value>) -> Result<Value> {
        let mut at = self.iconst(types::I64, view.offset);
        for (d, &var) in vars.iter().enumerate() {
            if var == usize::MAX || view.strides[d] == 0 || view.shape.get(d) == Some(&1) {
                continue;
            }
            let i = self.var(var)?;
            let s = self.iconst(types::I64, view.strides[d]);
            let term = self.b.ins().imul(i, s);
            at = self.b.ins().iadd(at, term);
        }
        if let Some(x) = extra {
            at = self.b.ins().iadd(at, x);
        }
        let size = self.iconst(types::I64, self.p.buffers[view.buf.0].dtype.size() as i64);
        let bytes = self.b.ins().imul(at, size);
        let base = *self.bases.get(&view.buf).ok_or_else(|| Error::internal(format!("jit: buffer {} has no base here", view.buf.0)))?;
        Ok(self.b.ins().iadd(base, bytes))
    }

    /// A value of type `d` read from `addr`.
    fn load(&mut self, addr: Value, d: Dtype) -> Result<Value> {
        let v = self.b.ins().load(memory(d)?, flags(), addr, 0);
        match d {
            Dtype::F16 => self.call("mr_f16_to_f32", &[v]),
            Dtype::Bf16 => self.call("mr_bf16_to_f32", &[v]),
            _ => Ok(v),
        }
    }

    /// Stores `v` (computed in `d`) to `addr` as a buffer of `d` holds it.
    pub fn store(&mut self, addr: Value, v: Value, d: Dtype) -> Result<()> {
        let v = match d {
            Dtype::F16 => self.call("mr_f32_to_f16", &[v])?,
            Dtype::Bf16 => self.call("mr_f32_to_bf16", &[v])?,
            _ => v,
        };
        self.b.ins().store(flags(), v, addr, 0);
        Ok(())
    }

    /// Calls helper `name` (of [`super::runtime::helpers`]) on `args`.
    pub fn call(&mut self, name: &'static str, args: &[Value]) -> Result<Value> {
        let f = match self.refs.get(name) {
            Some(&f) => f,
            None => {
                let &(id, _, _) = self.m.helpers.get(name).ok_or_else(|| Error::internal(format!("jit: no helper {name}")))?;
                let f = self.m.module.declare_func_in_func(id, self.b.func);
                self.refs.insert(name, f);
                f
            }
        };
        let (_, params, _) = &self.m.helpers[name];
        // Narrow integer arguments as the helper's C type takes them.
        let args: Vec<Value> = args
            .iter()
            .zip(params.clone())
            .map(|(&a, s)| {
                let have = self.b.func.dfg.value_type(a);
                match s {
                    Scalar::I32 if have == types::I64 => self.b.ins().ireduce(types::I32, a),
                    _ => a,
                }
            })
            .collect();
        let call = self.b.ins().call(f, &args);
        Ok(self.b.inst_results(call)[0])
    }

    /// `cond ? a : b` of values.
    fn pick(&mut self, cond: Value, a: Value, b: Value) -> Value {
        self.b.ins().select(cond, a, b)
    }

    /// The element type of an expression.
    pub fn dtype(&self, e: &Expr) -> Dtype {
        self.p.expr_dtype(e)
    }

    /// The expression converted to `to`.
    pub fn as_type(&mut self, e: &Expr, to: Dtype) -> Result<Value> {
        let from = self.dtype(e);
        let v = self.expr(e)?;
        self.convert(v, from, to)
    }

    /// `v` of type `from` as `to`, as C converts (floats to integers saturating, NaN
    /// as 0, as `mr_f2i32` and its kind do; to f16 or bf16 rounded to the type).
    pub fn convert(&mut self, v: Value, from: Dtype, to: Dtype) -> Result<Value> {
        if from == to {
            return Ok(v);
        }
        let (ft, tt) = (compute(from)?, compute(to)?);
        let out = if to == Dtype::Bool {
            if from.is_float() {
                let zero = self.fzero(ft);
                self.b.ins().fcmp(FloatCC::NotEqual, v, zero)
            } else {
                self.b.ins().icmp_imm_s(IntCC::NotEqual, v, 0)
            }
        } else if from.is_float() && to.is_float() {
            let w = match (ft, tt) {
                (types::F32, types::F64) => self.b.ins().fpromote(types::F64, v),
                (types::F64, types::F32) => self.b.ins().fdemote(types::F32, v),
                _ => v,
            };
            return self.rounded(w, to);
        } else if from.is_float() {
            // Through f64, as `mr_f2<type>((double)x)`: saturating, NaN to 0.
            let x = if ft == types::F64 { v } else { self.b.ins().fpromote(types::F64, v) };
            match to {
                Dtype::I64 => self.b.ins().fcvt_to_sint_sat(types::I64, x),
                Dtype::I32 => self.b.ins().fcvt_to_sint_sat(types::I32, x),
                Dtype::U64 => self.b.ins().fcvt_to_uint_sat(types::I64, x),
                Dtype::U32 => self.b.ins().fcvt_to_uint_sat(types::I32, x),
                _ => {
                    let (lo, hi) = match to {
                        Dtype::I8 => (i8::MIN as i64, i8::MAX as i64),
                        Dtype::U8 => (0, u8::MAX as i64),
                        Dtype::I16 => (i16::MIN as i64, i16::MAX as i64),
                        Dtype::U16 => (0, u16::MAX as i64),
                        _ => return Err(Error::internal(format!("jit: no conversion from {from} to {to}"))),
                    };
                    let wide = self.b.ins().fcvt_to_sint_sat(types::I32, x);
                    let (lo, hi) = (self.iconst(types::I32, lo), self.iconst(types::I32, hi));
                    let clamped = self.b.ins().smax(wide, lo);
                    let clamped = self.b.ins().smin(clamped, hi);
                    self.b.ins().ireduce(tt, clamped)
                }
            }
        } else if to.is_float() {
            // (an integer or bool source)
            let f = if signed(from) { self.b.ins().fcvt_from_sint(tt, v) } else { self.b.ins().fcvt_from_uint(tt, v) };
            return self.rounded(f, to);
        } else {
            self.resize(v, from, tt)
        };
        Ok(out)
    }

    /// An integer `v` of type `from` in the integer type `t`: extended by `from`'s
    /// signedness, or truncated.
    fn resize(&mut self, v: Value, from: Dtype, t: Type) -> Value {
        let have = self.b.func.dfg.value_type(v);
        if have.bits() == t.bits() {
            v
        } else if have.bits() > t.bits() {
            self.b.ins().ireduce(t, v)
        } else if signed(from) {
            self.b.ins().sextend(t, v)
        } else {
            self.b.ins().uextend(t, v)
        }
    }

    fn fzero(&mut self, t: Type) -> Value {
        if t == types::F64 { self.b.ins().f64const(0.0) } else { self.b.ins().f32const(0.0) }
    }

    fn fconst(&mut self, t: Type, x: f64) -> Value {
        if t == types::F64 { self.b.ins().f64const(x) } else { self.b.ins().f32const(x as f32) }
    }

    /// An op's result of f16 or bf16 (computed in f32) rounded to its type.
    fn rounded(&mut self, v: Value, t: Dtype) -> Result<Value> {
        match t {
            Dtype::F16 => self.call("mr_round_f16", &[v]),
            Dtype::Bf16 => self.call("mr_round_bf16", &[v]),
            _ => Ok(v),
        }
    }

    /// A constant of type `d`, as the C target's literal of it.
    pub fn constant(&mut self, x: f64, d: Dtype) -> Result<Value> {
        let t = compute(d)?;
        Ok(if d.is_float() {
            self.fconst(t, x)
        } else if d == Dtype::Bool {
            self.iconst(t, i64::from(x != 0.0))
        } else if d == Dtype::U64 {
            self.iconst(t, crate::tensor::round_to(d, x) as u64 as i64)
        } else if d == Dtype::I64 {
            self.iconst(t, x as i64)
        } else {
            self.iconst(t, crate::tensor::round_to(d, x) as i64)
        })
    }

    /// The C target's `(a != a || a > b) ? a : b` (`mr_maxf`), or `<` for the minimum,
    /// of scalars or of lanes.
    pub fn fmax_nan(&mut self, a: Value, b: Value, max: bool) -> Value {
        let nan = self.b.ins().fcmp(FloatCC::Unordered, a, a);
        let better = self.b.ins().fcmp(if max { FloatCC::GreaterThan } else { FloatCC::LessThan }, a, b);
        let take = self.b.ins().bor(nan, better);
        self.sel(take, a, b)
    }

    /// Binary op `op` of floats `x` and `y` (of `t`, or `F32X4` lanes of f32): a
    /// comparison gives a bool (a lane mask for lanes); `pow` calls the C library, lane
    /// by lane.
    pub fn float_binary(&mut self, op: BinaryOp, x: Value, y: Value, t: Dtype) -> Result<Value> {
        let cc = match op {
            BinaryOp::Eq => Some(FloatCC::Equal),
            BinaryOp::Ne => Some(FloatCC::NotEqual),
            BinaryOp::Lt => Some(FloatCC::LessThan),
            BinaryOp::Le => Some(FloatCC::LessThanOrEqual),
            BinaryOp::Gt => Some(FloatCC::GreaterThan),
            BinaryOp::Ge => Some(FloatCC::GreaterThanOrEqual),
            _ => None,
        };
        if let Some(cc) = cc {
            return Ok(self.b.ins().fcmp(cc, x, y));
        }
        Ok(match op {
            BinaryOp::Add => self.b.ins().fadd(x, y),
            BinaryOp::Sub => self.b.ins().fsub(x, y),
            BinaryOp::Mul => self.b.ins().fmul(x, y),
            BinaryOp::Div => self.b.ins().fdiv(x, y),
            BinaryOp::Max => self.fmax_nan(x, y, true),
            BinaryOp::Min => self.fmax_nan(x, y, false),
            BinaryOp::FloorDiv => {
                let q = self.b.ins().fdiv(x, y);
                self.b.ins().floor(q)
            }
            BinaryOp::Pow => {
                let f = if t == Dtype::F64 { "pow" } else { "powf" };
                if !self.b.func.dfg.value_type(x).is_vector() {
                    return self.call(f, &[x, y]);
                }
                let mut out = x;
                for lane in 0..self.b.func.dfg.value_type(x).lane_count() as u8 {
                    let (a, b) = (self.b.ins().extractlane(x, lane), self.b.ins().extractlane(y, lane));
                    let z = self.call(f, &[a, b])?;
                    out = self.b.ins().insertlane(out, z, lane);
                }
                out
            }
            other => return Err(Error::internal(format!("jit: {other:?} of {t}"))),
        })
    }

    pub fn expr(&mut self, e: &Expr) -> Result<Value> {
        match e {
            Expr::Const(x, d) => self.constant(*x, *d),
            Expr::Load { view, vars } => {
                let addr = self.address(view, vars, None)?;
                self.load(addr, self.dtype(e))
            }
            Expr::Index(v) => self.var(*v),
            Expr::Extent(d) => self.extent(d),
            Expr::Gather { view, vars, axis, index } => {
                // The index was checked to lie in [-n, n) before the kernel ran; the
                // clamp of `mr_wrap_index` keeps the read in bounds regardless.
                let n = view.shape[*axis] as i64;
                let i = self.as_type(index, Dtype::I64)?;
                let j = self.wrap_index(i, n);
                let s = self.iconst(types::I64, view.strides[*axis]);
                let extra = self.b.ins().imul(j, s);
                let addr = self.address(view, vars, Some(extra))?;
                self.load(addr, self.dtype(e))
            }
            Expr::Cast(x, to) => self.as_type(x, *to),
            Expr::Select(c, a, b, t) => {
                // Only the chosen side runs: it may hold a load valid only there.
                let cond = self.as_type(c, Dtype::Bool)?;
                let (yes, no, join) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
                let ty = compute(*t)?;
                let out = self.b.append_block_param(join, ty);
                self.b.ins().brif(cond, yes, &[], no, &[]);
                self.b.switch_to_block(yes);
                let va = self.as_type(a, *t)?;
                self.b.ins().jump(join, &[va.into()]);
                self.b.switch_to_block(no);
                let vb = self.as_type(b, *t)?;
                self.b.ins().jump(join, &[vb.into()]);
                self.b.switch_to_block(join);
                Ok(out)
            }
            Expr::Where(c, a, b, t) => {
                let cond = self.as_type(c, Dtype::Bool)?;
                let (va, vb) = (self.as_type(a, *t)?, self.as_type(b, *t)?);
                Ok(self.pick(cond, va, vb))
            }
            Expr::Unary(u, x, t) => {
                let v = self.unary(*u, x, *t)?;
                self.rounded(v, *t)
            }
            Expr::Binary(op, l, r, t) => {
                let v = self.binary(*op, l, r, *t)?;
                self.rounded(v, *t)
            }
        }
    }

    /// `mr_wrap_index(i, n)`: a negative index counts from the end, clamped into `[0, n)`.
    fn wrap_index(&mut self, i: Value, n: i64) -> Value {
        let nv = self.iconst(types::I64, n);
        let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, i, 0);
        let plus = self.b.ins().iadd(i, nv);
        let j = self.pick(neg, plus, i);
        let zero = self.iconst(types::I64, 0);
        let last = self.iconst(types::I64, n - 1);
        let j = self.b.ins().smax(j, zero);
        self.b.ins().smin(j, last)
    }

    fn math(&mut self, name32: &'static str, name64: &'static str, v: Value, t: Dtype) -> Result<Value> {
        self.call(if t == Dtype::F64 { name64 } else { name32 }, &[v])
    }

    /// Unary op `u` of `x` of result type `t` (before rounding to f16 or bf16).
    fn unary(&mut self, u: UnaryOp, x: &Expr, t: Dtype) -> Result<Value> {
        if u == UnaryOp::IsNan {
            let v = self.expr(x)?;
            return Ok(self.b.ins().fcmp(FloatCC::Unordered, v, v));
        }
        let a = self.as_type(x, t)?;
        self.scalar_unary(u, a, t)
    }

    /// Unary op `u` of `a`, a value of `t` (before rounding to f16 or bf16).
    pub fn scalar_unary(&mut self, u: UnaryOp, a: Value, t: Dtype) -> Result<Value> {
        let ty = compute(t)?;
        let float = t.is_float();
        let unsigned = t.is_unsigned_int() || t == Dtype::Bool;
        Ok(match u {
            UnaryOp::Neg if float => self.b.ins().fneg(a),
            UnaryOp::Neg => self.b.ins().ineg(a),
            UnaryOp::Abs if float => self.b.ins().fabs(a),
            UnaryOp::Abs if unsigned => a,
            UnaryOp::Abs => self.b.ins().iabs(a),
            UnaryOp::Sign if float => {
                // x != x ? x : (x > 0) - (x < 0)
                let zero = self.fzero(ty);
                let (one, minus) = (self.fconst(ty, 1.0), self.fconst(ty, -1.0));
                let pos = self.b.ins().fcmp(FloatCC::GreaterThan, a, zero);
                let neg = self.b.ins().fcmp(FloatCC::LessThan, a, zero);
                let s = self.pick(neg, minus, zero);
                let s = self.pick(pos, one, s);
                let nan = self.b.ins().fcmp(FloatCC::Unordered, a, a);
                self.pick(nan, a, s)
            }
            UnaryOp::Sign if unsigned => {
                let nz = self.b.ins().icmp_imm_s(IntCC::NotEqual, a, 0);
                self.resize(nz, Dtype::Bool, ty)
            }
            UnaryOp::Sign => {
                let (one, minus, zero) = (self.iconst(ty, 1), self.iconst(ty, -1), self.iconst(ty, 0));
                let pos = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, a, 0);
                let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, a, 0);
                let s = self.pick(neg, minus, zero);
                self.pick(pos, one, s)
            }
            UnaryOp::Exp if t == Dtype::F64 => self.call("exp", &[a])?,
            UnaryOp::Exp if t == Dtype::F32 => self.fast_expf(a),
            UnaryOp::Exp if float => self.call("mr_fast_expf", &[a])?,
            UnaryOp::Tanh if t == Dtype::F64 => self.call("tanh", &[a])?,
            UnaryOp::Tanh if t == Dtype::F32 => self.fast_tanhf(a),
            UnaryOp::Tanh if float => self.call("mr_fast_tanhf", &[a])?,
            UnaryOp::Log if float => self.math("logf", "log", a, t)?,
            UnaryOp::Sqrt if float => self.b.ins().sqrt(a),
            UnaryOp::Sin if float => self.math("sinf", "sin", a, t)?,
            UnaryOp::Cos if float => self.math("cosf", "cos", a, t)?,
            UnaryOp::Atan if float => self.math("atanf", "atan", a, t)?,
            UnaryOp::Erf if float => self.math("erff", "erf", a, t)?,
            UnaryOp::Floor if float => self.b.ins().floor(a),
            UnaryOp::Floor => a,
            UnaryOp::Relu if float => {
                // x > 0 || x != x ? x : 0
                let zero = self.fzero(ty);
                let pos = self.b.ins().fcmp(FloatCC::UnorderedOrGreaterThan, a, zero);
                self.pick(pos, a, zero)
            }
            UnaryOp::Relu if unsigned => a,
            UnaryOp::Relu => {
                let zero = self.iconst(ty, 0);
                self.b.ins().smax(a, zero)
            }
            UnaryOp::Composite(crate::ir::Composite::Sigmoid) if t == Dtype::F32 => self.sigmoidf(a),
            UnaryOp::Composite(crate::ir::Composite::GeluTanh) if t == Dtype::F32 => self.gelu_tanhf(a),
            UnaryOp::Composite(c) if float => {
                use crate::ir::Composite;
                let (f32_name, f64_name) = match c {
                    Composite::Sigmoid => ("mr_sigmoidf", "mr_sigmoid"),
                    Composite::Gelu => ("mr_geluf", "mr_gelu"),
                    Composite::GeluTanh => ("mr_gelu_tanhf", "mr_gelu_tanh"),
                    Composite::Softplus => ("mr_softplusf", "mr_softplus"),
                    #[allow(unreachable_patterns)]
                    other => return Err(Error::internal(format!("jit: composite {} reached a program", other.name()))),
                };
                self.math(f32_name, f64_name, a, t)?
            }
            UnaryOp::Not if t == Dtype::Bool => self.b.ins().icmp_imm_s(IntCC::Equal, a, 0),
            UnaryOp::Not if t.is_int() => self.b.ins().bnot(a),
            other => return Err(Error::internal(format!("jit: {other:?} of {t}"))),
        })
    }

    /// Binary op `op` of `l` and `r` of result type `t` (before rounding).
    fn binary(&mut self, op: BinaryOp, l: &Expr, r: &Expr, t: Dtype) -> Result<Value> {
        // Comparisons in the operands' common type; the rest in the result type.
        let operand = if op.is_comparison() { Dtype::promote(self.dtype(l), self.dtype(r)) } else { t };
        let (x, y) = (self.as_type(l, operand)?, self.as_type(r, operand)?);
        let ty = compute(t)?;
        if operand.is_float() {
            return self.float_binary(op, x, y, t);
        }
        let sgn = signed(operand);
        let icc = |s: IntCC, u: IntCC| if sgn { s } else { u };
        let cc = match op {
            BinaryOp::Eq => Some(IntCC::Equal),
            BinaryOp::Ne => Some(IntCC::NotEqual),
            BinaryOp::Lt => Some(icc(IntCC::SignedLessThan, IntCC::UnsignedLessThan)),
            BinaryOp::Le => Some(icc(IntCC::SignedLessThanOrEqual, IntCC::UnsignedLessThanOrEqual)),
            BinaryOp::Gt => Some(icc(IntCC::SignedGreaterThan, IntCC::UnsignedGreaterThan)),
            BinaryOp::Ge => Some(icc(IntCC::SignedGreaterThanOrEqual, IntCC::UnsignedGreaterThanOrEqual)),
            _ => None,
        };
        if let Some(cc) = cc {
            return Ok(self.b.ins().icmp(cc, x, y));
        }
        // Python's semantics through the helpers, in 64 bits (u64's own for u64).
        let wide = |this: &mut Self, name_i: &'static str, name_u: &'static str, bits: Option<i64>| -> Result<Value> {
            let (a, b) = (this.resize(x, t, types::I64), this.resize(y, t, types::I64));
            let name = if t == Dtype::U64 { name_u } else { name_i };
            let v = match bits {
                Some(n) => {
                    let n = this.iconst(types::I32, n);
                    this.call(name, &[a, b, n])?
                }
                None => this.call(name, &[a, b])?,
            };
            Ok(this.resize(v, Dtype::I64, ty))
        };
        Ok(match op {
            BinaryOp::Add => self.b.ins().iadd(x, y),
            BinaryOp::Sub => self.b.ins().isub(x, y),
            BinaryOp::Mul => self.b.ins().imul(x, y),
            BinaryOp::Div => {
                // C's truncating division, with what C leaves undefined made safe: a zero
                // divisor gives 0, and MIN / -1 wraps.
                let zero = self.iconst(ty, 0);
                let one = self.iconst(ty, 1);
                let is_zero = self.b.ins().icmp_imm_s(IntCC::Equal, y, 0);
                if sgn {
                    let m1 = self.iconst(ty, -1);
                    let minus = self.b.ins().icmp(IntCC::Equal, y, m1);
                    let unsafe_ = self.b.ins().bor(is_zero, minus);
                    let d = self.pick(unsafe_, one, y);
                    let q = self.b.ins().sdiv(x, d);
                    let neg = self.b.ins().ineg(x);
                    let q = self.pick(minus, neg, q);
                    self.pick(is_zero, zero, q)
                } else {
                    let d = self.pick(is_zero, one, y);
                    let q = self.b.ins().udiv(x, d);
                    self.pick(is_zero, zero, q)
                }
            }
            BinaryOp::Max => {
                let gt = self.b.ins().icmp(icc(IntCC::SignedGreaterThan, IntCC::UnsignedGreaterThan), x, y);
                self.pick(gt, x, y)
            }
            BinaryOp::Min => {
                let lt = self.b.ins().icmp(icc(IntCC::SignedLessThan, IntCC::UnsignedLessThan), x, y);
                self.pick(lt, x, y)
            }
            BinaryOp::And => self.b.ins().band(x, y),
            BinaryOp::Or => self.b.ins().bor(x, y),
            BinaryOp::Xor => self.b.ins().bxor(x, y),
            BinaryOp::Pow => wide(self, "mr_pow_i64", "mr_pow_u64", None)?,
            BinaryOp::FloorDiv => wide(self, "mr_floordiv_i64", "mr_floordiv_u64", None)?,
            BinaryOp::Shl => wide(self, "mr_shl_i64", "mr_shl_u64", Some(t.bits() as i64))?,
            BinaryOp::Shr => wide(self, "mr_shr_i64", "mr_shr_u64", Some(t.bits() as i64))?,
            other => return Err(Error::internal(format!("jit: {other:?} of {t}"))),
        })
    }

    /// `for i<var> in [from, to)`, the body written by `body` (which may open blocks of
    /// its own and must leave the builder in the block where the iteration ends).
    pub fn for_range(&mut self, var: usize, from: Value, to: Value, body: &mut dyn FnMut(&mut Self) -> Result<()>) -> Result<()> {
        let (head, inner, exit) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
        let i = self.b.append_block_param(head, types::I64);
        self.b.ins().jump(head, &[from.into()]);
        self.b.switch_to_block(head);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, i, to);
        self.b.ins().brif(more, inner, &[], exit, &[]);
        self.b.switch_to_block(inner);
        let saved = self.vars.get(var).copied().flatten();
        self.set_var(var, i);
        body(self)?;
        let next = self.b.ins().iadd_imm_s(i, 1);
        self.b.ins().jump(head, &[next.into()]);
        self.b.switch_to_block(exit);
        if let Some(s) = saved {
            self.set_var(var, s);
        }
        Ok(())
    }

    /// Loops over `vars[k]` in `[0, ext[k])`, outermost first, around `body`.
    pub fn nest(&mut self, vars: &[usize], ext: &[Value], body: &mut dyn FnMut(&mut Self) -> Result<()>) -> Result<()> {
        match vars.split_first() {
            None => body(self),
            Some((&v, rest)) => {
                let zero = self.iconst(types::I64, 0);
                self.for_range(v, zero, ext[0], &mut |this| this.nest(rest, &ext[1..], body))
            }
        }
    }

    /// A mutable local of type `t`, initialised to `init`.
    pub fn local(&mut self, t: Type, init: Value) -> Variable {
        let v = self.b.declare_var(t);
        self.b.def_var(v, init);
        v
    }
}
