//! The renderer shared by C-like targets: scalar expressions, index arithmetic and loop
//! nests of a [`Program`]'s kernels. A [`Dialect`] says how a target spells types and
//! math functions; C is the first dialect (CUDA and Metal will be small ones).

use std::fmt::Write as _;

use crate::ir::{ArgKind, BinaryOp, Dtype, ReduceKind, UnaryOp};
use crate::lower::{Expr, Program, View};

/// How one C-like language spells what differs between them.
pub trait Dialect {
    /// The scalar type of an element type.
    fn ty(&self, d: Dtype) -> &'static str;
    /// A `<math.h>`-style function for `d` (`expf` for f32, `exp` for f64).
    fn math(&self, name: &str, d: Dtype) -> String;
}

/// Standard C99.
pub struct C;

impl Dialect for C {
    fn ty(&self, d: Dtype) -> &'static str {
        match d {
            Dtype::F32 => "float",
            Dtype::F64 => "double",
            Dtype::I32 => "int32_t",
            Dtype::I64 => "int64_t",
            Dtype::Bool => "uint8_t",
            // Rejected before rendering (lowering refuses f16/bf16 for C).
            Dtype::F16 | Dtype::Bf16 => "float",
        }
    }
    fn math(&self, name: &str, d: Dtype) -> String {
        match d {
            Dtype::F64 => name.to_string(),
            _ => format!("{name}f"),
        }
    }
}

/// Renders expressions of one program.
pub struct Renderer<'a, D: Dialect> {
    pub p: &'a Program,
    pub d: &'a D,
    /// The C identifier of each buffer (a pointer to its first element).
    pub names: &'a [String],
}

impl<D: Dialect> Renderer<'_, D> {
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

    pub fn literal(&self, x: f64, d: Dtype) -> String {
        match d {
            Dtype::F32 | Dtype::F16 | Dtype::Bf16 => {
                if x.is_nan() {
                    "NAN".into()
                } else if x.is_infinite() {
                    if x > 0.0 { "INFINITY".into() } else { "(-INFINITY)".into() }
                } else {
                    let s = format!("{:?}", x as f32);
                    let s = if s.contains(['.', 'e']) { s } else { format!("{s}.0") };
                    if x < 0.0 { format!("({s}f)") } else { format!("{s}f") }
                }
            }
            Dtype::F64 => {
                if x.is_nan() {
                    "((double)NAN)".into()
                } else if x.is_infinite() {
                    if x > 0.0 { "((double)INFINITY)".into() } else { "(-(double)INFINITY)".into() }
                } else {
                    let s = format!("{x:?}");
                    if x < 0.0 { format!("({s})") } else { s }
                }
            }
            Dtype::I32 => format!("((int32_t){})", x as i64),
            Dtype::I64 => format!("INT64_C({})", x as i64),
            Dtype::Bool => format!("((uint8_t){})", u8::from(x != 0.0)),
        }
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
            // Float to int saturates (and NaN gives 0), as the interpreter does; a
            // plain C cast of an out-of-range float is undefined.
            (true, Dtype::I32) => format!("mr_f2i32((double)({s}))"),
            (true, Dtype::I64) => format!("mr_f2i64((double)({s}))"),
            (_, Dtype::Bool) => format!("((uint8_t)(({s}) != 0))"),
            _ => format!("(({})({s}))", self.d.ty(to)),
        }
    }

    pub fn expr(&self, e: &Expr) -> String {
        let d = self.d;
        match e {
            Expr::Const(x, dt) => self.literal(*x, *dt),
            Expr::Load { view, vars } => format!("{}[{}]", self.names[view.buf.0], self.index(view, vars)),
            Expr::Index(v) => format!("i{v}"),
            Expr::Gather { view, vars, axis, index } => {
                let n = view.shape[*axis];
                let base = self.index(view, vars);
                let idx = self.as_type(index, Dtype::I64);
                let stride = view.strides[*axis];
                format!("{}[{base} + mr_wrap_index({idx}, {n}) * {stride}]", self.names[view.buf.0])
            }
            Expr::Cast(x, to) => self.as_type(x, *to),
            Expr::Select(c, a, b, t) => {
                format!("({} ? {} : {})", self.as_type(c, Dtype::Bool), self.as_type(a, *t), self.as_type(b, *t))
            }
            // A call evaluates both sides, so neither side's loads become conditional.
            Expr::Where(c, a, b, t) => {
                let f = match t {
                    Dtype::F64 => "mr_where",
                    Dtype::F32 | Dtype::F16 | Dtype::Bf16 => "mr_wheref",
                    Dtype::I32 => "mr_where_i32",
                    Dtype::I64 => "mr_where_i64",
                    Dtype::Bool => "mr_where_u8",
                };
                format!("{f}({}, {}, {})", self.as_type(c, Dtype::Bool), self.as_type(a, *t), self.as_type(b, *t))
            }
            Expr::Unary(u, x, t) => {
                let a = self.as_type(x, *t);
                let f = |name: &str| format!("{}({a})", d.math(name, *t));
                let fl = *t == Dtype::F32;
                let sfx = if fl { "f" } else { "" };
                match u {
                    UnaryOp::Neg => format!("(-{a})"),
                    UnaryOp::Abs if t.is_float() => f("fabs"),
                    UnaryOp::Abs => format!("mr_abs_i64({a})"),
                    UnaryOp::Sign if t.is_float() => format!("mr_sign{sfx}({a})"),
                    UnaryOp::Sign => format!("(({}){a} > 0) - (({}){a} < 0)", d.ty(*t), d.ty(*t)),
                    UnaryOp::Exp if fl => format!("mr_fast_expf({a})"),
                    UnaryOp::Exp => f("exp"),
                    UnaryOp::Log => f("log"),
                    UnaryOp::Sqrt => f("sqrt"),
                    UnaryOp::Sin => f("sin"),
                    UnaryOp::Cos => f("cos"),
                    UnaryOp::Tanh if fl => format!("mr_fast_tanhf({a})"),
                    UnaryOp::Tanh => f("tanh"),
                    UnaryOp::Floor if t.is_float() => f("floor"),
                    UnaryOp::Floor => a,
                    UnaryOp::Sigmoid => format!("mr_sigmoid{sfx}({a})"),
                    UnaryOp::Relu if t.is_float() => format!("mr_relu{sfx}({a})"),
                    UnaryOp::Relu => format!("(({a}) > 0 ? ({a}) : 0)"),
                    UnaryOp::Gelu => format!("mr_gelu{sfx}({a})"),
                    UnaryOp::GeluTanh => format!("mr_gelu_tanh{sfx}({a})"),
                    UnaryOp::Softplus => format!("mr_softplus{sfx}({a})"),
                    UnaryOp::Erf => f("erf"),
                    UnaryOp::Not => format!("((uint8_t)!({a}))"),
                    UnaryOp::IsNan => {
                        let x = self.expr(x);
                        format!("((uint8_t)(({x}) != ({x})))")
                    }
                }
            }
            Expr::Binary(b, l, r, t) => {
                // Comparisons and logical ops work on their operands' common type;
                // arithmetic converts both operands to the result type first.
                let operand_ty = if b.is_comparison() {
                    Dtype::promote(self.dtype(l), self.dtype(r))
                } else if b.is_logical() {
                    Dtype::Bool
                } else {
                    *t
                };
                let (x, y) = (self.as_type(l, operand_ty), self.as_type(r, operand_ty));
                let fl = *t == Dtype::F32;
                let sfx = if fl { "f" } else { "" };
                match b {
                    BinaryOp::Add => format!("({x} + {y})"),
                    BinaryOp::Sub => format!("({x} - {y})"),
                    BinaryOp::Mul => format!("({x} * {y})"),
                    BinaryOp::Div => format!("({x} / {y})"),
                    BinaryOp::Pow if t.is_float() => format!("{}({x}, {y})", d.math("pow", *t)),
                    BinaryOp::Pow => format!("(({})mr_pow_i64({x}, {y}))", d.ty(*t)),
                    BinaryOp::Max if t.is_float() => format!("mr_max{sfx}({x}, {y})"),
                    BinaryOp::Min if t.is_float() => format!("mr_min{sfx}({x}, {y})"),
                    BinaryOp::Max => format!("(({x}) > ({y}) ? ({x}) : ({y}))"),
                    BinaryOp::Min => format!("(({x}) < ({y}) ? ({x}) : ({y}))"),
                    BinaryOp::FloorDiv if t.is_float() => format!("{}({x} / {y})", d.math("floor", *t)),
                    BinaryOp::FloorDiv => format!("(({})mr_floordiv_i64({x}, {y}))", d.ty(*t)),
                    BinaryOp::Eq => format!("((uint8_t)({x} == {y}))"),
                    BinaryOp::Ne => format!("((uint8_t)({x} != {y}))"),
                    BinaryOp::Lt => format!("((uint8_t)({x} < {y}))"),
                    BinaryOp::Le => format!("((uint8_t)({x} <= {y}))"),
                    BinaryOp::Gt => format!("((uint8_t)({x} > {y}))"),
                    BinaryOp::Ge => format!("((uint8_t)({x} >= {y}))"),
                    BinaryOp::And => format!("((uint8_t)({x} && {y}))"),
                    BinaryOp::Or => format!("((uint8_t)({x} || {y}))"),
                    BinaryOp::Xor => format!("((uint8_t)(!({x}) != !({y})))"),
                    BinaryOp::Shl => format!("(({})mr_shl_i64({x}, {y}, {}))", d.ty(*t), t.size() * 8),
                    BinaryOp::Shr => format!("(({})mr_shr_i64({x}, {y}, {}))", d.ty(*t), t.size() * 8),
                }
            }
        }
    }

    /// `for (int64_t iK = 0; iK < n; ++iK) {` lines for loop variables `first..`, one
    /// per dimension of `shape`, indented from `indent`.
    pub fn open_loops(&self, out: &mut String, extents: &[String], first: usize, indent: usize) -> usize {
        let mut depth = indent;
        for (k, n) in extents.iter().enumerate() {
            let _ = writeln!(out, "{}for (int64_t i{v} = 0; i{v} < {n}; ++i{v}) {{", pad(depth), v = first + k);
            depth += 1;
        }
        depth
    }

    pub fn close_loops(&self, out: &mut String, count: usize, indent: usize) {
        for k in (0..count).rev() {
            let _ = writeln!(out, "{}}}", pad(indent + k));
        }
    }

    /// The reduction step `acc = combine(acc, v)` and its initial value.
    pub fn reduce_parts(&self, kind: ReduceKind, t: Dtype) -> (String, &'static str) {
        let sfx = if t == Dtype::F32 { "f" } else { "" };
        match kind {
            ReduceKind::Sum | ReduceKind::Mean => ("0".into(), "acc + v"),
            ReduceKind::Prod => ("1".into(), "acc * v"),
            ReduceKind::Max if t.is_float() => (self.literal(f64::NEG_INFINITY, t), if sfx == "f" { "mr_maxf(acc, v)" } else { "mr_max(acc, v)" }),
            ReduceKind::Min if t.is_float() => (self.literal(f64::INFINITY, t), if sfx == "f" { "mr_minf(acc, v)" } else { "mr_min(acc, v)" }),
            ReduceKind::Max => (if t == Dtype::I32 { "INT32_MIN".into() } else { "INT64_MIN".into() }, "(v > acc ? v : acc)"),
            ReduceKind::Min => (if t == Dtype::I32 { "INT32_MAX".into() } else { "INT64_MAX".into() }, "(v < acc ? v : acc)"),
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

pub fn pad(depth: usize) -> String {
    "    ".repeat(depth)
}

/// Scalar helpers the rendered expressions call (`runtime-c/mithril_ops.h`).
pub const C_OPS_HEADER: &str = include_str!("../../runtime-c/mithril_ops.h");
