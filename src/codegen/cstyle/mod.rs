//! The renderer shared by C-like targets: scalar expressions, index arithmetic and loop
//! nests of a [`Program`]'s kernels. A [`Dialect`] says how one language spells what
//! differs (types, literals, helpers, casts, the accumulator, kernel signatures, how an
//! output loop becomes threads, address spaces, the prelude); C (`codegen::c::dialect`),
//! CUDA (`codegen::cuda`) and Metal (`codegen::metal`) are dialects over this one
//! renderer. `kernel.rs` renders a loop kernel's body, `device.rs` a file of GPU kernels.
//! The scalar helpers the expressions call are defined once, in
//! `runtime-c/mithril_ops.h`, which compiles as C99, CUDA and Metal.

use std::fmt::Write as _;

use crate::ir::{ArgKind, BinaryOp, Composite, Dtype, ReduceKind, UnaryOp};
use crate::error::{Error, Result};
use crate::lower::{Expr, Kernel, Program, View};

pub mod device;
pub mod kernel;

/// How one C-like language spells what differs between them. The provided methods are
/// C's spellings, which CUDA shares; a dialect overrides what its language spells
/// otherwise.
pub trait Dialect {
    /// The language's name, for messages (`Metal has no f64`).
    fn name(&self) -> &'static str;
    /// Whether kernels may use element type `d` ([`Renderer::check`] refuses others).
    fn supports(&self, d: Dtype) -> bool;
    /// The scalar type of an element type's values in expressions (`uint8_t` holds a
    /// bool in C; f16 and bf16 compute in `float`).
    fn ty(&self, d: Dtype) -> &'static str;
    /// The type a buffer of element type `d` holds: [`Dialect::ty`], but where a type
    /// is stored as bits and computed in another (f16 and bf16 as `uint16_t` in C).
    fn storage(&self, d: Dtype) -> &'static str {
        self.ty(d)
    }
    /// A math function for `d` (`expf` for f32 and `exp` for f64 in C).
    fn math(&self, name: &str, d: Dtype) -> String {
        match d {
            Dtype::F64 => name.to_string(),
            _ => format!("{name}f"),
        }
    }
    /// The scalar helper `op` of `mithril_ops.h` for `d`: the header's names end in `f`
    /// for f32, nothing for f64, and the integer type's name for the others (`_i32`,
    /// `_u64`; bool is `_u8`, the C type that holds it).
    fn helper(&self, op: &str, d: Dtype) -> String {
        match d {
            Dtype::F32 | Dtype::F16 | Dtype::Bf16 => format!("mr_{op}f"),
            Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz | Dtype::F4E2M1 => format!("mr_{op}f"),
            Dtype::F64 => format!("mr_{op}"),
            Dtype::Bool => format!("mr_{op}_u8"),
            Dtype::I8 | Dtype::U8 | Dtype::I16 | Dtype::U16 | Dtype::I32 | Dtype::U32 | Dtype::I64 | Dtype::U64 => format!("mr_{op}_{d}"),
            // Held in an int8_t or uint8_t.
            Dtype::I4 | Dtype::I2 => format!("mr_{op}_i8"),
            Dtype::U4 | Dtype::U2 => format!("mr_{op}_u8"),
        }
    }
    /// NaN of a float type.
    fn nan(&self, d: Dtype) -> String {
        if d == Dtype::F64 { "((double)NAN)".into() } else { "NAN".into() }
    }
    /// Infinity (or minus infinity) of a float type.
    fn infinity(&self, d: Dtype, negative: bool) -> String {
        match (d == Dtype::F64, negative) {
            (true, false) => "((double)INFINITY)".into(),
            (true, true) => "(-(double)INFINITY)".into(),
            (false, false) => "INFINITY".into(),
            (false, true) => "(-INFINITY)".into(),
        }
    }
    /// How a kernel names the run-time value of symbol `i` of `p`
    /// ([`crate::lower::Program::symbols`]): by default the kernel parameter that
    /// passes it ([`crate::codegen::names::dim_params`]).
    fn symbol(&self, p: &crate::lower::Program, i: usize) -> String {
        crate::codegen::names::dim_params(p)[i].clone()
    }
    /// An i64 literal.
    fn i64_literal(&self, v: i64) -> String {
        format!("INT64_C({v})")
    }
    /// The smallest or largest value of an integer type (reduction identities).
    fn int_limit(&self, d: Dtype, max: bool) -> &'static str {
        match (d, max) {
            (Dtype::I8, false) => "INT8_MIN",
            (Dtype::I8, true) => "INT8_MAX",
            (Dtype::I16, false) => "INT16_MIN",
            (Dtype::I16, true) => "INT16_MAX",
            (Dtype::I32, false) => "INT32_MIN",
            (Dtype::I32, true) => "INT32_MAX",
            (Dtype::U8 | Dtype::U16 | Dtype::U32 | Dtype::U64, false) => "0",
            (Dtype::U8, true) => "UINT8_MAX",
            (Dtype::U16, true) => "UINT16_MAX",
            (Dtype::U32, true) => "UINT32_MAX",
            (Dtype::U64, true) => "UINT64_MAX",
            (Dtype::I4, false) => "(-8)",
            (Dtype::I4, true) => "7",
            (Dtype::U4 | Dtype::U2, false) => "0",
            (Dtype::U4, true) => "15",
            (Dtype::I2, false) => "(-2)",
            (Dtype::I2, true) => "1",
            (Dtype::U2, true) => "3",
            (_, false) => "INT64_MIN",
            (_, true) => "INT64_MAX",
        }
    }
    /// Float `s` (of type `from`) converted to integer type `to`, saturating with NaN
    /// as 0 as the interpreter does (`tensor::float_to_int`; a plain C cast of an
    /// out-of-range float is undefined): `mr_f2i32`, `mr_f2u8`, ...
    fn float_to_int(&self, s: &str, _from: Dtype, to: Dtype) -> String {
        format!("mr_f2{to}((double)({s}))")
    }
    /// The type sums and products of floats accumulate in (the interpreter's is f64).
    fn accumulator(&self) -> Dtype {
        Dtype::F64
    }
    /// Whether long sums of static length accumulate in interleaved partial sums
    /// ([`kernel::lane_sum`]: a CPU's vector lanes).
    fn partial_sums(&self) -> bool {
        false
    }
    /// Opens a loop kernel's loops over its output dimensions of extents `ext` as this
    /// language runs them in parallel, declaring `i0..` at the returned depth.
    fn open_outer(&self, s: &mut String, ext: &[String]) -> usize;
    /// Closes what [`Dialect::open_outer`] opened.
    fn close_outer(&self, s: &mut String, ext: &[String]);
    /// A kernel function's signature (without the opening brace) over `params`.
    fn kernel_signature(&self, name: &str, params: &[Param]) -> String;
    /// A barrier between the threads of a block, where a kernel shares memory among
    /// them (no loop kernel does yet).
    fn barrier(&self) -> Option<&'static str>;
    /// What a file of kernels starts with: includes, and the scalar helpers.
    fn prelude(&self) -> &'static str;
    /// How the threads of a warp (a SIMD group) reduce one output together, in
    /// dialects whose threads can ([`kernel::warp_reduce`]); `None` reduces each output
    /// in one thread.
    fn warp(&self) -> Option<&'static Warp> {
        None
    }
}

/// A dialect's spellings for a reduction by the lanes of a warp: lane `l` takes reduced
/// elements `l, l + lanes, ...`, then the lanes' partial results are combined by
/// shuffles, halving the distance each step, and lane 0 stores the result.
pub struct Warp {
    pub lanes: u32,
    /// The index of the thread's warp in the grid, and the number of warps in the
    /// grid (an output loop's start and stride).
    pub first: &'static str,
    pub count: &'static str,
    /// The thread's lane in its warp.
    pub lane: &'static str,
    /// The value `{v}` of the lane `{off}` lanes up (every lane of the warp takes part).
    pub shuffle_down: &'static str,
    /// The value `{v}` of the lane whose index is this one's xor `{off}`.
    pub shuffle_xor: &'static str,
    /// The accumulator types the lanes can shuffle.
    pub types: &'static [Dtype],
}

/// A kernel argument.
pub struct Param {
    pub name: String,
    /// Its element type (a dimension is an i64).
    pub dtype: Dtype,
    pub kind: ParamKind,
}

/// What a kernel does with an argument.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// A buffer the kernel only reads.
    Read,
    /// A buffer the kernel writes (and may read).
    Write,
    /// The run-time value of a symbolic dimension.
    Dim,
}

/// Renders expressions of one program.
pub struct Renderer<'a, D: Dialect + ?Sized> {
    pub p: &'a Program,
    pub d: &'a D,
    /// The C identifier of each buffer (a pointer to its first element).
    pub names: &'a [String],
    /// The dialect's own spelling of some loads, where it has one (a vector kernel's
    /// lanes: `codegen::cuda::vector`); the others index their buffer.
    pub loads: Option<&'a LoadSpelling<'a>>,
}

/// A dialect's spelling of a load (`view` indexed by loop variables `vars`), when it
/// has its own ([`Renderer::loads`]).
pub type LoadSpelling<'a> = dyn Fn(&View, &[usize]) -> Option<String> + 'a;

impl<D: Dialect + ?Sized> Renderer<'_, D> {
    /// [`Renderer::check`] on every kernel of the program that `which` selects: one
    /// error lists every refused kernel.
    pub fn check_all(&self, which: impl Fn(&Kernel) -> bool) -> Result<()> {
        let refused: Vec<String> = self
            .p
            .steps
            .iter()
            .enumerate()
            .filter(|(_, step)| which(&step.kernel))
            .filter_map(|(k, step)| self.check(&step.kernel, &format!("kernel {k} ({})", step.origins.join("; "))).err())
            .map(|e| e.message)
            .collect();
        if refused.is_empty() { Ok(()) } else { Err(Error::user(refused.join("\n"))) }
    }

    /// Refuses a kernel that uses an element type the dialect lacks: the message names
    /// the kernel (`what`) and every such type.
    pub fn check(&self, k: &Kernel, what: &str) -> Result<()> {
        let mut types: Vec<Dtype> = crate::lower::kernel_reads(k).iter().chain([&crate::lower::kernel_writes(k)]).map(|b| self.p.buffers[b.0].dtype).collect();
        for e in crate::lower::kernel_exprs(k) {
            e.walk(&mut |e| {
                types.push(self.dtype(e));
                if let Expr::Cast(_, t) | Expr::Const(_, t) = e {
                    types.push(*t);
                }
            });
        }
        if let Kernel::Reduce { out, kind, .. } = k {
            types.push(self.acc_type(*kind, self.p.buffers[out.buf.0].dtype));
        }
        if let Kernel::Rows { stats, .. } = k {
            types.extend(stats.iter().map(|st| self.acc_type(st.kind, self.p.buffers[st.view.buf.0].dtype)));
        }
        types.retain(|t| !self.d.supports(*t));
        types.sort_by_key(|t| t.name());
        types.dedup();
        if types.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
        Err(Error::user(format!("{} has no {}: {what} computes in it", self.d.name(), names.join(" or "))))
    }

    /// The element type an expression evaluates to.
    pub fn dtype(&self, e: &Expr) -> Dtype {
        self.p.expr_dtype(e)
    }

    /// `off + i0*s0 + i1*s1` for a view read at loop variables `vars`.
    pub fn index(&self, view: &View, vars: &[usize]) -> String {
        let mut terms = Vec::new();
        if view.offset != 0 {
            terms.push(view.offset.to_string());
        }
        for (d, &var) in vars.iter().enumerate() {
            if var == usize::MAX || view.strides[d] == 0 || view.shape.get(d) == Some(&1) {
                continue;
            }
            terms.push(match view.strides[d] {
                1 => format!("i{var}"),
                s => format!("i{var} * {s}"),
            });
        }
        if terms.is_empty() {
            "0".to_string()
        } else {
            terms.join(" + ")
        }
    }

    /// `{ a, b, ... }`, the initializer of a constant's array, written straight into
    /// `out` (a large constant's literals are never held as strings of their own). An
    /// empty constant gets one zero: C has no empty arrays or initializers.
    pub fn initializer(&self, t: &crate::tensor::Constant, out: &mut String) {
        out.push_str("{ ");
        for (j, x) in t.values().enumerate() {
            if j > 0 {
                out.push_str(", ");
            }
            out.push_str(&self.stored_literal(x, t.dtype()));
        }
        if t.numel() == 0 {
            out.push('0');
        }
        out.push_str(" };\n");
    }

    /// An element of a constant's array as the buffer holds it: f16 and bf16 as their
    /// bits ([`Renderer::store`]), any other type as its [`Renderer::literal`].
    fn stored_literal(&self, x: f64, d: Dtype) -> String {
        match d {
            Dtype::F16 => format!("0x{:04x}", half::f16::from_f64(x).to_bits()),
            Dtype::Bf16 => format!("0x{:04x}", half::bf16::from_f64(x).to_bits()),
            _ if d.is_narrow_float() => format!("0x{:02x}", crate::narrow::encode(d, x)),
            _ => self.literal(x, d),
        }
    }

    /// A value of type `d` read from a buffer's element `s`: f16 and bf16 widened from
    /// their bits to `float` (`mithril_ops.h`), the others as they are.
    fn load(&self, s: String, d: Dtype) -> String {
        if held_as_bits(d) { format!("mr_{d}_to_f32({s})") } else { s }
    }

    /// `value`, of type `d`, as a buffer of `d` stores it: f16 and bf16 narrowed to
    /// their bits (rounding to nearest even), the others as they are.
    pub fn store(&self, value: String, d: Dtype) -> String {
        if held_as_bits(d) { format!("mr_f32_to_{d}({value})") } else { value }
    }

    /// `s`, an op's result of f16, bf16 or a narrow float computed in `float`, rounded
    /// to the type, as the interpreter rounds every op's result before the next reads
    /// it; of i4, u4, i2 or u2 (held in a byte, computed in `int`), wrapped to the
    /// type's width (`mr_wrap_i4`, ...) as `tensor::round_to` wraps it.
    fn rounded(&self, s: String, d: Dtype) -> String {
        if held_as_bits(d) {
            format!("mr_round_{d}({s})")
        } else if d.is_int() && d.bits() < 8 {
            format!("mr_wrap_{d}((int64_t)({s}))")
        } else {
            s
        }
    }

    pub fn literal(&self, x: f64, d: Dtype) -> String {
        match d {
            Dtype::F32 | Dtype::F16 | Dtype::Bf16 | Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz | Dtype::F4E2M1 => {
                if x.is_nan() {
                    self.d.nan(d)
                } else if x.is_infinite() {
                    self.d.infinity(d, x < 0.0)
                } else {
                    let s = format!("{:?}", x as f32);
                    let s = if s.contains(['.', 'e']) { s } else { format!("{s}.0") };
                    if x < 0.0 { format!("({s}f)") } else { format!("{s}f") }
                }
            }
            Dtype::F64 => {
                if x.is_nan() {
                    self.d.nan(d)
                } else if x.is_infinite() {
                    self.d.infinity(d, x < 0.0)
                } else {
                    let s = format!("{x:?}");
                    if x < 0.0 { format!("({s})") } else { s }
                }
            }
            Dtype::I32 => format!("(({}){})", self.d.ty(d), x as i64),
            // -9223372036854775808 negates a constant too large for int64_t.
            Dtype::I64 if x as i64 == i64::MIN => self.d.int_limit(d, false).to_string(),
            Dtype::I64 => self.d.i64_literal(x as i64),
            // A value of the type, as the interpreter makes it (`round_to`: a pad value
            // of -3 is 253 in u8); unsigned constants beyond `int`'s range take their
            // suffix from the macro.
            Dtype::I8 | Dtype::U8 | Dtype::I16 | Dtype::U16 | Dtype::I4 | Dtype::U4 | Dtype::I2 | Dtype::U2 => {
                format!("(({}){})", self.d.ty(d), crate::tensor::round_to(d, x) as i64)
            }
            Dtype::U32 => format!("UINT32_C({})", crate::tensor::round_to(d, x) as u32),
            Dtype::U64 => format!("UINT64_C({})", crate::tensor::round_to(d, x) as u64),
            Dtype::Bool => format!("(({}){})", self.d.ty(d), u8::from(x != 0.0)),
        }
    }

    /// `s`, a C expression of integer type `t` that C computes in `int` when `t` is
    /// narrower (`i8`, `u8`, `i16`, `u16`: C promotes them), converted back to `t`, so
    /// that it wraps as the interpreter's result does (`tensor::round_to`) before
    /// anything else reads it.
    fn narrowed(&self, s: String, t: Dtype) -> String {
        if t.is_int() && t.size() < 4 { format!("(({})({s}))", self.d.ty(t)) } else { s }
    }

    /// The expression converted to `to` (no-op when it already has that type).
    pub fn as_type(&self, e: &Expr, to: Dtype) -> String {
        let from = self.dtype(e);
        let s = self.expr(e);
        if from == to {
            s
        } else {
            self.convert(&s, from, to)
        }
    }

    fn convert(&self, s: &str, from: Dtype, to: Dtype) -> String {
        match (from.is_float(), to) {
            (true, to) if to.is_int() => self.d.float_to_int(s, from, to),
            (_, Dtype::Bool) => format!("(({})(({s}) != 0))", self.d.ty(to)),
            (_, to) if held_as_bits(to) => self.rounded(format!("(({})({s}))", self.d.ty(to)), to),
            (_, to) if to.is_int() && to.bits() < 8 => self.rounded(format!("(({})({s}))", self.d.ty(to)), to),
            _ => format!("(({})({s}))", self.d.ty(to)),
        }
    }

    pub fn expr(&self, e: &Expr) -> String {
        let d = self.d;
        match e {
            Expr::Const(x, dt) => self.literal(*x, *dt),
            Expr::Load { view, vars } => match self.loads.and_then(|f| f(view, vars)) {
                Some(value) => value,
                None => self.load(format!("{}[{}]", self.names[view.buf.0], self.index(view, vars)), self.dtype(e)),
            },
            Expr::Index(v) => format!("i{v}"),
            Expr::Extent(x) => {
                let sym = |name: &str| d.symbol(self.p, self.p.symbols.iter().position(|(s, _)| s == name).expect("the program lists every symbol its kernels use"));
                kernel::extent(x, &sym)
            }
            Expr::Gather { view, vars, axis, index } => {
                let n = view.shape[*axis];
                let base = self.index(view, vars);
                let idx = self.as_type(index, Dtype::I64);
                let stride = view.strides[*axis];
                self.load(format!("{}[{base} + mr_wrap_index({idx}, {n}) * {stride}]", self.names[view.buf.0]), self.dtype(e))
            }
            Expr::Cast(x, to) => self.as_type(x, *to),
            Expr::Select(c, a, b, t) => {
                format!("({} ? {} : {})", self.as_type(c, Dtype::Bool), self.as_type(a, *t), self.as_type(b, *t))
            }
            // A call evaluates both sides, so neither side's loads become conditional.
            Expr::Where(c, a, b, t) => {
                let f = d.helper("where", *t);
                format!("{f}({}, {}, {})", self.as_type(c, Dtype::Bool), self.as_type(a, *t), self.as_type(b, *t))
            }
            // f16 and bf16 compute in float; each op's result is rounded to its type.
            Expr::Unary(u, x, t) => self.rounded(self.unary(*u, x, *t), *t),
            Expr::Binary(b, l, r, t) => self.rounded(self.binary(*b, l, r, *t), *t),
        }
    }

    /// Unary op `u` of `x`, of result type `t` (before [`Renderer::rounded`]).
    fn unary(&self, u: UnaryOp, x: &Expr, t: Dtype) -> String {
        let d = self.d;
        let a = self.as_type(x, t);
        let f = |name: &str| format!("{}({a})", d.math(name, t));
        let h = |name: &str| format!("{}({a})", d.helper(name, t));
        let fl = t == Dtype::F32;
        let b = d.ty(Dtype::Bool);
        let unsigned = t.is_unsigned_int();
        match u {
            UnaryOp::Neg => self.narrowed(format!("(-{a})"), t),
            UnaryOp::Abs if t.is_float() => f("fabs"),
            UnaryOp::Abs if unsigned => a,
            UnaryOp::Abs => self.narrowed(format!("{}({a})", d.helper("abs", Dtype::I64)), t),
            UnaryOp::Sign if t.is_float() => h("sign"),
            // (Comparing an unsigned value below 0 is always false; compilers warn.)
            UnaryOp::Sign if unsigned => format!("(({})(({a}) != 0))", d.ty(t)),
            UnaryOp::Sign => format!("(({}){a} > 0) - (({}){a} < 0)", d.ty(t), d.ty(t)),
            UnaryOp::Exp if fl => h("fast_exp"),
            UnaryOp::Exp => f("exp"),
            UnaryOp::Log => f("log"),
            UnaryOp::Sqrt => f("sqrt"),
            UnaryOp::Sin => f("sin"),
            UnaryOp::Cos => f("cos"),
            UnaryOp::Tanh if fl => h("fast_tanh"),
            UnaryOp::Tanh => f("tanh"),
            UnaryOp::Atan => f("atan"),
            UnaryOp::Floor if t.is_float() => f("floor"),
            UnaryOp::Floor => a,
            UnaryOp::Relu if t.is_float() => h("relu"),
            UnaryOp::Relu if unsigned => a,
            UnaryOp::Relu => format!("(({a}) > 0 ? ({a}) : 0)"),
            // Only the claimed ones reach a program (`decompose` rewrites the others).
            UnaryOp::Composite(c) => h(composite_helper(c).unwrap_or(c.name())),
            UnaryOp::Erf => f("erf"),
            UnaryOp::Not if t.is_int() => format!("(({})~{a})", d.ty(t)),
            UnaryOp::Not => format!("(({b})!({a}))"),
            UnaryOp::IsNan => {
                let x = self.expr(x);
                format!("(({b})(({x}) != ({x})))")
            }
        }
    }

    /// Binary op `b` of `l` and `r`, of result type `t` (before [`Renderer::rounded`]).
    fn binary(&self, b: BinaryOp, l: &Expr, r: &Expr, t: Dtype) -> String {
        let d = self.d;
        // Comparisons work on their operands' common type; arithmetic, and the
        // logical ops (bitwise on integers), convert both operands to the result type.
        let operand_ty = if b.is_comparison() { Dtype::promote(self.dtype(l), self.dtype(r)) } else { t };
        let (x, y) = (self.as_type(l, operand_ty), self.as_type(r, operand_ty));
        let h = |name: &str| format!("{}({x}, {y})", d.helper(name, t));
        let bt = d.ty(Dtype::Bool);
        // Integer helpers compute in int64_t, u64's in uint64_t.
        let i64h = |name: &str| d.helper(name, if t == Dtype::U64 { Dtype::U64 } else { Dtype::I64 });
        match b {
            BinaryOp::Add => self.narrowed(format!("({x} + {y})"), t),
            BinaryOp::Sub => self.narrowed(format!("({x} - {y})"), t),
            // u16 * u16 in `int` (C's promotion) can overflow it: unsigned instead.
            BinaryOp::Mul if t == Dtype::U16 => self.narrowed(format!("((uint32_t){x} * {y})"), t),
            BinaryOp::Mul => self.narrowed(format!("({x} * {y})"), t),
            BinaryOp::Div => format!("({x} / {y})"),
            BinaryOp::Pow if t.is_float() => format!("{}({x}, {y})", d.math("pow", t)),
            BinaryOp::Pow => format!("(({}){}({x}, {y}))", d.ty(t), i64h("pow")),
            BinaryOp::Max if t.is_float() => h("max"),
            BinaryOp::Min if t.is_float() => h("min"),
            BinaryOp::Max => format!("(({x}) > ({y}) ? ({x}) : ({y}))"),
            BinaryOp::Min => format!("(({x}) < ({y}) ? ({x}) : ({y}))"),
            BinaryOp::FloorDiv if t.is_float() => format!("{}({x} / {y})", d.math("floor", t)),
            BinaryOp::FloorDiv => format!("(({}){}({x}, {y}))", d.ty(t), i64h("floordiv")),
            BinaryOp::Eq => format!("(({bt})({x} == {y}))"),
            BinaryOp::Ne => format!("(({bt})({x} != {y}))"),
            BinaryOp::Lt => format!("(({bt})({x} < {y}))"),
            BinaryOp::Le => format!("(({bt})({x} <= {y}))"),
            BinaryOp::Gt => format!("(({bt})({x} > {y}))"),
            BinaryOp::Ge => format!("(({bt})({x} >= {y}))"),
            // (`&`, `|`, `^` on integers promote them to `int` or wider, which holds the
            // result: the cast back to `t` loses nothing.)
            BinaryOp::And if t.is_int() => format!("(({})({x} & {y}))", d.ty(t)),
            BinaryOp::Or if t.is_int() => format!("(({})({x} | {y}))", d.ty(t)),
            BinaryOp::Xor if t.is_int() => format!("(({})({x} ^ {y}))", d.ty(t)),
            BinaryOp::And => format!("(({bt})({x} && {y}))"),
            BinaryOp::Or => format!("(({bt})({x} || {y}))"),
            BinaryOp::Xor => format!("(({bt})(!({x}) != !({y})))"),
            BinaryOp::Shl => format!("(({}){}({x}, {y}, {}))", d.ty(t), i64h("shl"), t.bits()),
            BinaryOp::Shr => format!("(({}){}({x}, {y}, {}))", d.ty(t), i64h("shr"), t.bits()),
        }
    }

    /// `for (int64_t iK = 0; iK < n; ++iK) {` lines for loop variables `first..`, one
    /// per dimension of `shape`, indented from `indent`.
    pub fn open_loops(&self, out: &mut String, extents: &[String], first: usize, indent: usize) -> usize {
        let mut depth = indent;
        for (k, n) in extents.iter().enumerate() {
            let _ = writeln!(out, "{}for ({} i{v} = 0; i{v} < {n}; ++i{v}) {{", pad(depth), self.d.ty(Dtype::I64), v = first + k);
            depth += 1;
        }
        depth
    }

    pub fn close_loops(&self, out: &mut String, count: usize, indent: usize) {
        for k in (0..count).rev() {
            let _ = writeln!(out, "{}}}", pad(indent + k));
        }
    }

    /// The type a reduction into `t` accumulates in: sums and products of floats in
    /// the dialect's accumulator (the interpreter's is f64), never narrower than `t`.
    pub fn acc_type(&self, kind: ReduceKind, t: Dtype) -> Dtype {
        let acc = self.d.accumulator();
        if t.is_float() && matches!(kind, ReduceKind::Sum | ReduceKind::Prod) && acc.size() >= t.size() { acc } else { t }
    }

    /// The reduction step `acc = combine(acc, v)` and its initial value.
    pub fn reduce_parts(&self, kind: ReduceKind, t: Dtype) -> (String, String) {
        match kind {
            // A bool holds 0 or 1, never a count: a sum or max of bools is any, a
            // product or min all (as the interpreter's, and NumPy's `any`, `all`).
            ReduceKind::Sum | ReduceKind::Max if t == Dtype::Bool => ("0".into(), "(acc | v)".into()),
            ReduceKind::Prod | ReduceKind::Min if t == Dtype::Bool => ("1".into(), "(acc & v)".into()),
            ReduceKind::Sum | ReduceKind::Mean => ("0".into(), "acc + v".into()),
            // u16 * u16 in `int` (C's promotion) can overflow it: unsigned instead.
            ReduceKind::Prod if t == Dtype::U16 => ("1".into(), "(uint32_t)acc * v".into()),
            ReduceKind::Prod => ("1".into(), "acc * v".into()),
            ReduceKind::Max if t.is_float() => (self.literal(f64::NEG_INFINITY, t), format!("{}(acc, v)", self.d.helper("max", t))),
            ReduceKind::Min if t.is_float() => (self.literal(f64::INFINITY, t), format!("{}(acc, v)", self.d.helper("min", t))),
            ReduceKind::Max => (self.d.int_limit(t, false).into(), "(v > acc ? v : acc)".into()),
            ReduceKind::Min => (self.d.int_limit(t, true).into(), "(v < acc ? v : acc)".into()),
        }
    }

    /// `v better than best` for an arg-reduction (NaN counts as the extreme).
    pub fn arg_better(&self, kind: ArgKind, t: Dtype) -> &'static str {
        match (kind, t.is_float()) {
            (ArgKind::ArgMax, true) => "(v > best || (v != v && best == best))",
            (ArgKind::ArgMin, true) => "(v < best || (v != v && best == best))",
            (ArgKind::ArgMax, false) => "(v > best)",
            (ArgKind::ArgMin, false) => "(v < best)",
        }
    }
}

/// Whether `d` is held as its bits and computed in `float` (f16 and bf16 in 16 bits,
/// the narrow floats in 8).
fn held_as_bits(d: Dtype) -> bool {
    matches!(d, Dtype::F16 | Dtype::Bf16) || d.is_narrow_float()
}

pub fn pad(depth: usize) -> String {
    "    ".repeat(depth)
}

/// The scalar helper of `mithril_ops.h` that computes composite `c` whole (`mr_sigmoidf`
/// for f32, see [`Dialect::helper`]), if it has one: the composites the C, CUDA and Metal
/// targets claim. The header defines each in every dialect's float types.
pub fn composite_helper(c: Composite) -> Option<&'static str> {
    match c {
        Composite::Sigmoid => Some("sigmoid"),
        Composite::Gelu => Some("gelu"),
        Composite::GeluTanh => Some("gelu_tanh"),
        Composite::Softplus => Some("softplus"),
        #[allow(unreachable_patterns)] // the composites added without a helper
        _ => None,
    }
}

/// Scalar helpers the rendered expressions call (`runtime-c/mithril_ops.h`), in every
/// dialect.
pub const C_OPS_HEADER: &str = include_str!("../../../runtime-c/mithril_ops.h");
