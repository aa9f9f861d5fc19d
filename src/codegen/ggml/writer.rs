//! The ggml graph of a model: for each IR node, the ggml calls that build it, as C
//! statements (one call a statement, each under a comment naming the node it came
//! from). Every tensor this writes is f32 and contiguous once its node is done (views
//! are followed by `ggml_cont`), so any node's result can be reshaped or read back.
//!
//! Shapes: an IR shape `[d0, ..., d(r-1)]` (row-major) is ggml's `ne = [d(r-1), ...,
//! d0, 1, ...]`: ggml's `ne0` is the contiguous dimension, so IR axis `i` is ggml
//! dimension `r-1-i`, and NumPy's broadcasting (aligned at the last axis) aligns at
//! `ne0`. `ggml_mul_mat(x[K,N], y[K,M])` is `[N,M]` in ggml's order, `y @ x^T` in the
//! IR's: a product `A @ B` is `ggml_mul_mat(B^T, A)`.
//!
//! Booleans are f32 0 and 1 (comparisons are [`CUSTOM`] kernels); integers are ggml
//! int32 rows only as a gather's indices, and f32 elsewhere (ggml's CPU arithmetic is
//! floating point), so a model that computes them (argmax, shifts) is refused through
//! [`lacks`]. A node of no elements is never made (ggml cannot allocate one): its
//! variable is `NULL`, and [`lacks`] refuses a node with elements that reads it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::codegen::graph::GraphWriter;
use crate::codegen::names::comment_safe;
use crate::error::{Error, Result};
use crate::ir::{BinaryOp, Composite, Dtype, Graph, Op, PoolKind, ReduceKind, UnaryOp, ValueId};

/// ggml's tensors have at most this many dimensions.
pub const MAX_RANK: usize = 4;

/// Model ops ggml has no op for, run as elementwise C kernels through
/// `ggml_map_custom1/2/3` (operands broadcast to the result's shape first): the model
/// op's name, its arity and the value of element `i` from operands `x0`, `x1`, `x2`.
/// `where` is not `c * a + (1 - c) * b` because that makes NaN of an infinite branch
/// not taken (a causal mask's `-inf`). The others ggml has ops for, but ops that drop
/// NaN (`ggml_relu`, `ggml_sgn` and `ggml_step` give 0 for it) or make it of
/// infinities (`a + relu(b - a)` for a maximum): these propagate NaN as the interpreter
/// (NumPy) does, and compare as C does (false for NaN but in `!=`).
pub const CUSTOM: &[(&str, usize, &str)] = &[
    ("where", 3, "x0 != 0.0f ? x1 : x2"),
    ("pow", 2, "powf(x0, x1)"),
    ("erf", 1, "erff(x0)"),
    ("atan", 1, "atanf(x0)"),
    ("isnan", 1, "isnan(x0) ? 1.0f : 0.0f"),
    ("relu", 1, "isnan(x0) || x0 > 0.0f ? x0 : 0.0f"),
    ("sign", 1, "x0 > 0.0f ? 1.0f : x0 < 0.0f ? -1.0f : x0"),
    ("nonzero", 1, "x0 != 0.0f ? 1.0f : 0.0f"),
    ("max", 2, "isnan(x0) || isnan(x1) ? NAN : x0 > x1 ? x0 : x1"),
    ("min", 2, "isnan(x0) || isnan(x1) ? NAN : x0 < x1 ? x0 : x1"),
    ("eq", 2, "x0 == x1 ? 1.0f : 0.0f"),
    ("ne", 2, "x0 != x1 ? 1.0f : 0.0f"),
    ("lt", 2, "x0 < x1 ? 1.0f : 0.0f"),
    ("le", 2, "x0 <= x1 ? 1.0f : 0.0f"),
    ("gt", 2, "x0 > x1 ? 1.0f : 0.0f"),
    ("ge", 2, "x0 >= x1 ? 1.0f : 0.0f"),
];

/// The kernel of a slice that runs backwards along some axes: its contiguous operand
/// (the forwards slice) with the ggml dimensions flagged in `userdata` reversed.
const REVERSE_KERNEL: &str = "/* A slice running backwards along the ggml dimensions flagged in userdata (int[4]):
 * the forwards slice, reversed there (ggml views cannot step backwards). */
static void custom_reverse(struct ggml_tensor *dst, const struct ggml_tensor *a0, int ith, int nth, void *userdata) {
    const int *reversed = (const int *)userdata;
    const int64_t n = ggml_nelements(dst), per = (n + nth - 1) / nth, lo = per * ith, hi = lo + per < n ? lo + per : n;
    int64_t i;
    for (i = lo; i < hi; ++i) {
        int64_t rest = i, src = 0, stride = 1;
        int k;
        for (k = 0; k < 4; ++k) {
            const int64_t c = rest % dst->ne[k];
            rest /= dst->ne[k];
            src += (reversed[k] ? dst->ne[k] - 1 - c : c) * stride;
            stride *= dst->ne[k];
        }
        ((float *)dst->data)[i] = ((const float *)a0->data)[src];
    }
}
";

/// Max pooling with the model's semantics, for pooling and max reductions: ggml's
/// `ggml_pool_2d` drops NaN and starts from `-FLT_MAX` (so a window of `-inf` gives
/// `-FLT_MAX`), where the interpreter propagates NaN and starts from `-inf`.
const MAX_POOL_KERNEL: &str = "/* Max pooling as the model means it (ggml_pool_2d drops NaN and starts from -FLT_MAX):
 * dst [OW, OH, C, N] from its source [W, H, C, N] (contiguous), each element the largest
 * of a window's taps, NaN if one is NaN; userdata (int64_t[8]) holds the window's width
 * and height, strides, dilations, and left and top padding (taps there are skipped). */
static void custom_max_pool(struct ggml_tensor *dst, int ith, int nth, void *userdata) {
    const int64_t *p = (const int64_t *)userdata;
    const struct ggml_tensor *a = dst->src[0];
    const int64_t n = ggml_nelements(dst), per = (n + nth - 1) / nth, lo = per * ith, hi = lo + per < n ? lo + per : n;
    int64_t i;
    for (i = lo; i < hi; ++i) {
        const int64_t ox = i % dst->ne[0], oy = i / dst->ne[0] % dst->ne[1], plane = i / (dst->ne[0] * dst->ne[1]);
        const float *x = (const float *)a->data + plane * a->ne[0] * a->ne[1];
        float best = -INFINITY;
        int64_t kx, ky;
        for (ky = 0; ky < p[1]; ++ky) {
            const int64_t y = oy * p[3] + ky * p[5] - p[7];
            for (kx = 0; y >= 0 && y < a->ne[1] && kx < p[0]; ++kx) {
                const int64_t xx = ox * p[2] + kx * p[4] - p[6];
                const float v = xx >= 0 && xx < a->ne[0] ? x[y * a->ne[0] + xx] : -INFINITY;
                /* (once best is NaN, nothing is greater) */
                best = isnan(v) || v > best ? v : best;
            }
        }
        ((float *)dst->data)[i] = best;
    }
}
";

/// The C source of the custom kernel named `name` ([`CUSTOM`], `reverse` or `max_pool`).
pub fn custom_kernel(name: &str) -> String {
    if name == "reverse" {
        return REVERSE_KERNEL.to_string();
    }
    if name == "max_pool" {
        return MAX_POOL_KERNEL.to_string();
    }
    let Some((_, arity, expr)) = CUSTOM.iter().find(|(n, _, _)| *n == name) else { return String::new() };
    let params: Vec<String> = (0..*arity).map(|k| format!("const struct ggml_tensor *a{k}")).collect();
    let loads: Vec<String> = (0..*arity).map(|k| format!("x{k} = ((const float *)a{k}->data)[i]")).collect();
    format!(
        r#"/* The model's {name}, elementwise (ggml has no such op, or one that loses NaN): run by ggml_map_custom{arity}. */
static void custom_{name}(struct ggml_tensor *dst, {}, int ith, int nth, void *userdata) {{
    const int64_t n = ggml_nelements(dst), per = (n + nth - 1) / nth, lo = per * ith, hi = lo + per < n ? lo + per : n;
    int64_t i;
    (void)userdata;
    for (i = lo; i < hi; ++i) {{
        const float {};
        ((float *)dst->data)[i] = {expr};
    }}
}}
"#,
        params.join(", "),
        loads.join(", ")
    )
}

/// The ggml tensors a model input is fed into, as C expressions (`NULL`: none): its
/// values as f32 (`number`: a float or bool input, or integers other ops than a gather
/// read), and its gather indices as ggml's int32 rows (`index`). An input of no elements
/// has neither.
#[derive(serde::Serialize, Clone, Debug)]
pub struct InputVars {
    pub number: String,
    pub index: String,
}

/// The C statements that build the graph, and what the library needs to know about them.
#[derive(Default)]
pub struct Writer {
    /// The GGUF name of each parameter and constant, by node.
    pub stored: BTreeMap<ValueId, String>,
    /// The body of the build function.
    pub code: String,
    /// An upper bound on the tensors the statements create (sizes the graph context).
    pub tensors: usize,
    /// The ggml tensors of each model input, in order.
    pub inputs: Vec<InputVars>,
    /// The C variable of each model output, in order (`NULL` for one of no elements).
    pub outputs: Vec<String>,
    /// The names of stored tensors the build reads, with their ggml shape.
    pub loads: Vec<(String, [u64; 4])>,
    /// The C expression of each node written so far.
    vars: BTreeMap<ValueId, String>,
    /// The ggml I32 tensor of each integer input (for `ggml_get_rows`; `vars` has its
    /// f32 copy where other ops read it).
    int_vars: BTreeMap<ValueId, String>,
    /// The elementwise kernels ([`CUSTOM`]) the graph runs through `ggml_map_custom*`.
    pub customs: std::collections::BTreeSet<&'static str>,
    temp: usize,
}

/// `shape` in ggml's order, padded with ones to [`MAX_RANK`] dimensions; a higher rank
/// keeps its last three axes and merges the others into `ne3` (see [`merges_alike`]).
pub fn ne(shape: &[u64]) -> [u64; 4] {
    let mut out = [1u64; 4];
    for (i, d) in shape.iter().rev().enumerate().take(MAX_RANK - 1) {
        out[i] = *d;
    }
    out[MAX_RANK - 1] = shape.iter().rev().skip(MAX_RANK - 1).product();
    out
}

/// Whether node `v`, of rank above 4, can live in ggml's 4 dimensions with its leading
/// axes merged ([`ne`]): a reshape (which reads only the element order), or an
/// elementwise op or broadcast whose every operand has the output's leading axes or
/// ones in all of them (so broadcasting never splits the merged dimension).
/// Autodiff's max-pooling gradient is such a graph: rank-6 window views, compared and
/// selected elementwise.
fn merges_alike(graph: &Graph, v: ValueId) -> bool {
    let node = graph.node(v);
    let out = shape(graph, v);
    let lead = out.len() - (MAX_RANK - 1);
    let elementwise = node.op.is_elementwise() || matches!(node.op, Op::BroadcastTo { .. });
    if matches!(node.op, Op::Reshape { .. }) {
        return true;
    }
    elementwise
        && node.args.iter().all(|&a| {
            let s = shape(graph, a);
            let padded: Vec<u64> = std::iter::repeat_n(1, out.len().saturating_sub(s.len())).chain(s).collect();
            padded[..lead] == out[..lead] || padded[..lead].iter().all(|&d| d == 1)
        })
}

fn ne_args(n: [u64; 4]) -> String {
    format!("{}, {}, {}, {}", n[0], n[1], n[2], n[3])
}

/// The value's static shape (every shape is static here: [`Writer::lacks`] refuses
/// symbolic ones).
fn shape(graph: &Graph, v: ValueId) -> Vec<u64> {
    graph.ty(v).shape.as_known().unwrap_or_default()
}

/// A `perm` for `ggml_permute` that moves ggml dimension `order[j]` to position `j`.
fn permute_args(order: &[usize; 4]) -> [usize; 4] {
    let mut ax = [0usize; 4];
    for (j, &k) in order.iter().enumerate() {
        ax[k] = j;
    }
    ax
}

impl Writer {
    /// A fresh C variable name.
    fn fresh(&mut self) -> String {
        self.temp += 1;
        format!("x{}", self.temp)
    }

    /// Emits `struct ggml_tensor *NEW = CALL(ctx, ARGS);` and returns NEW.
    fn call(&mut self, f: &str, args: &str) -> String {
        let name = self.fresh();
        self.tensors += 1;
        let _ = writeln!(self.code, "    struct ggml_tensor *{name} = {f}(ctx, {args});");
        name
    }

    /// `x` (of ggml shape `from`, contiguous) repeated to `to` (NumPy broadcasting).
    fn broadcast(&mut self, x: &str, from: [u64; 4], to: [u64; 4]) -> String {
        if from == to {
            return x.to_string();
        }
        self.call("ggml_repeat_4d", &format!("{x}, {}", ne_args(to)))
    }

    /// `x` (contiguous) reshaped to `to`, if it is not that shape already.
    fn reshape(&mut self, x: &str, from: [u64; 4], to: [u64; 4]) -> String {
        if from == to {
            return x.to_string();
        }
        self.call("ggml_reshape_4d", &format!("{x}, {}", ne_args(to)))
    }

    /// `x` with its ggml dimensions reordered so that `order[j]` is dimension `j`, made
    /// contiguous (nothing when `order` is the identity).
    fn permute(&mut self, x: &str, order: [usize; 4]) -> String {
        if order == [0, 1, 2, 3] {
            return x.to_string();
        }
        let ax = permute_args(&order);
        let p = self.call("ggml_permute", &format!("{x}, {}, {}, {}, {}", ax[0], ax[1], ax[2], ax[3]));
        self.call("ggml_cont", &p)
    }

    /// The ggml tensor of node `v` (written before: [`GraphWriter::node`] checks).
    fn var(&self, v: ValueId) -> String {
        self.vars.get(&v).cloned().unwrap_or_default()
    }

    /// Both operands of an elementwise binary node broadcast to its shape.
    fn both(&mut self, graph: &Graph, v: ValueId) -> (String, String) {
        let out = ne(&shape(graph, v));
        let args = &graph.node(v).args;
        let a = self.broadcast(&self.var(args[0]), ne(&shape(graph, args[0])), out);
        let b = self.broadcast(&self.var(args[1]), ne(&shape(graph, args[1])), out);
        (a, b)
    }

    /// `f(a, b)` for a ggml binary op, whose second operand may broadcast onto the first
    /// (`ggml_can_repeat(b, a)`) but whose result has the first's shape.
    fn binary(&mut self, graph: &Graph, v: ValueId, f: &str, commutes: bool) -> String {
        let out = ne(&shape(graph, v));
        let args = &graph.node(v).args;
        let (mut a, mut b) = ((self.var(args[0]), ne(&shape(graph, args[0]))), (self.var(args[1]), ne(&shape(graph, args[1]))));
        if commutes && a.1 != out && b.1 == out {
            std::mem::swap(&mut a, &mut b);
        }
        let first = self.broadcast(&a.0, a.1, out);
        self.call(f, &format!("{first}, {}", b.0))
    }

    /// A [`CUSTOM`] kernel over the node's operands, each broadcast to its shape.
    fn custom(&mut self, graph: &Graph, v: ValueId, name: &'static str) -> String {
        let out = ne(&shape(graph, v));
        let args: Vec<String> = graph.node(v).args.iter().map(|&a| self.broadcast(&self.var(a), ne(&shape(graph, a)), out)).collect();
        self.customs.insert(name);
        self.call(&format!("ggml_map_custom{}", args.len()), &format!("{}, custom_{name}, GGML_N_TASKS_MAX, NULL", args.join(", ")))
    }

    /// `a * s + b`, elementwise.
    fn affine(&mut self, x: &str, s: f64, b: f64) -> String {
        self.call("ggml_scale_bias", &format!("{x}, {}, {}", c_float(s), c_float(b)))
    }

    /// `x` (IR shape `shape`) with the IR axes `axes` moved innermost and flattened into
    /// ggml's `ne0`: `[R, rest]` with `R` the product of those axes; for reductions.
    fn rows_over(&mut self, x: &str, shape: &[u64], axes: &[usize]) -> (String, u64, u64) {
        let r = shape.len();
        let reduced: Vec<usize> = (0..r).rev().filter(|i| axes.contains(i)).map(|i| r - 1 - i).collect();
        let kept: Vec<usize> = (0..MAX_RANK).filter(|k| !reduced.contains(k)).collect();
        let mut order = [0usize; 4];
        for (j, k) in reduced.iter().chain(&kept).enumerate() {
            order[j] = *k;
        }
        let p = self.permute(x, order);
        let n: u64 = axes.iter().map(|&i| shape[i]).product();
        let rest = shape.iter().product::<u64>() / n.max(1);
        let rows = self.call("ggml_reshape_2d", &format!("{p}, {n}, {rest}"));
        (rows, n, rest)
    }

    /// The largest element of each row of `rows` (`[n, rest]`), as `[1, rest]`: a max
    /// pooling over the row.
    fn row_max(&mut self, rows: &str, n: u64, rest: u64) -> String {
        self.max_windows(rows, [1, rest, 1, 1], [n, 1, n, 1, 1, 1, 0, 0])
    }

    /// [`MAX_POOL_KERNEL`] over `x` (ggml `[W, H, C, N]`) to ggml shape `out`, with `p` its
    /// window (width, height, strides, dilations, left and top padding), kept in a static
    /// array since the graph keeps the pointer.
    fn max_windows(&mut self, x: &str, out: [u64; 4], p: [u64; 8]) -> String {
        let params = self.fresh();
        let list: Vec<String> = p.iter().map(u64::to_string).collect();
        let _ = writeln!(self.code, "    static const int64_t {params}[8] = {{ {} }};", list.join(", "));
        self.customs.insert("max_pool");
        self.call("ggml_custom_4d", &format!("GGML_TYPE_F32, {}, &{x}, 1, custom_max_pool, GGML_N_TASKS_MAX, (void *){params}", ne_args(out)))
    }

    /// Max pooling node `v` of `x` by [`MAX_POOL_KERNEL`] (a 1-d window is 2-d of height 1).
    fn max_pool(&mut self, graph: &Graph, v: ValueId, x: &str) -> String {
        let Op::Pool(p) = &graph.node(v).op else { return String::new() };
        let (xn, out) = (ne(&shape(graph, graph.node(v).args[0])), ne(&shape(graph, v)));
        let (x4, o4, window) = if p.kernel.len() == 2 {
            (xn, out, [p.kernel[1], p.kernel[0], p.stride[1], p.stride[0], p.dilation[1], p.dilation[0], p.padding[1].0, p.padding[0].0])
        } else {
            ([xn[0], 1, xn[1], xn[2]], [out[0], 1, out[1], out[2]], [p.kernel[0], 1, p.stride[0], 1, p.dilation[0], 1, p.padding[0].0, 0])
        };
        let x2 = self.reshape(x, xn, x4);
        let pooled = self.max_windows(&x2, o4, window);
        self.reshape(&pooled, o4, out)
    }

    /// A stored tensor (parameter or constant) of ggml shape `n`, checked by the loader.
    fn load(&mut self, v: ValueId, n: [u64; 4]) -> Result<String> {
        let name = self.stored.get(&v).cloned().ok_or_else(|| Error::internal(format!("%{} has no GGUF name", v.0)))?;
        self.loads.push((name.clone(), n));
        Ok(format!("m->stored[{}]", self.loads.len() - 1))
    }
}

/// An f64 as a C float literal that reads back as the same f32.
pub fn c_float(x: f64) -> String {
    let f = x as f32;
    if f.is_nan() {
        "NAN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "INFINITY".into() } else { "-INFINITY".into() }
    } else {
        format!("{f:?}f")
    }
}

/// ggml's function that computes composite `c` whole, if it has one: the composites the
/// ggml target claims. (`ggml_gelu` reads a float16 table, so `gelu_tanh` is left to
/// its decomposition, in f32.)
pub fn composite_call(c: Composite) -> Option<&'static str> {
    match c {
        Composite::Sigmoid => Some("ggml_sigmoid"),
        Composite::Gelu => Some("ggml_gelu_erf"),
        Composite::Softplus => Some("ggml_softplus"),
        Composite::GeluTanh => None,
        #[allow(unreachable_patterns)] // the composites added without a ggml function
        _ => None,
    }
}

/// Why the ggml target has no translation for `v`, if it has none.
pub fn lacks(graph: &Graph, v: ValueId) -> Option<String> {
    let node = graph.node(v);
    let ty = &node.ty;
    if !ty.shape.is_static() {
        return Some("a symbolic dimension (ggml builds its graph at fixed sizes: give every size)".into());
    }
    let empty = |v: ValueId| graph.ty(v).shape.as_known().is_some_and(|s| s.contains(&0));
    if !empty(v) && node.args.iter().any(|&a| empty(a)) {
        return Some("an operand of no elements in a result with some (ggml cannot allocate a tensor of no elements)".into());
    }
    if ty.rank() > MAX_RANK && !merges_alike(graph, v) {
        return Some(format!("rank {} (ggml tensors have at most {MAX_RANK} dimensions)", ty.rank()));
    }
    // An operand of higher rank only reaches a node that reads it elementwise or reshapes it.
    if ty.rank() <= MAX_RANK && !matches!(node.op, Op::Reshape { .. }) && node.args.iter().any(|&a| graph.ty(a).rank() > MAX_RANK) {
        return Some(format!("an operand of rank above {MAX_RANK} (ggml tensors have at most {MAX_RANK} dimensions)"));
    }
    // Integers known at compile time (an iota, a constant) are stored as f32 and may be
    // moved and compared, exactly while they stay within f32's integers.
    let moves = matches!(node.op, Op::Reshape { .. } | Op::Transpose { .. } | Op::BroadcastTo { .. } | Op::Slice { .. } | Op::Concat { .. } | Op::StopGradient);
    let known = match &node.op {
        Op::Iota { shape, axis, .. } => shape.as_known().is_some_and(|s| s[*axis] <= 1 << 24),
        Op::Constant(c) => graph.consts[c.0 as usize].values().all(|x| x.abs() <= (1u64 << 24) as f64),
        _ => false,
    };
    let int = matches!(ty.dtype, Dtype::I32 | Dtype::I64);
    if !(matches!(ty.dtype, Dtype::F32 | Dtype::Bool) || int && (moves || known || node.op == Op::Input)) {
        return Some(format!("{} values (the ggml target computes in f32, with booleans as 0 and 1)", ty.dtype));
    }
    let arg_shape = |i: usize| shape(graph, node.args[i]);
    match &node.op {
        Op::Input | Op::Param | Op::Constant(_) | Op::Where | Op::Reshape { .. } | Op::Transpose { .. } | Op::BroadcastTo { .. } | Op::Concat { .. } | Op::Iota { .. } | Op::StopGradient => None,
        Op::Unary(_) => None,
        Op::Binary(b) => match b {
            BinaryOp::Shl | BinaryOp::Shr => Some("ggml has no integer shifts".into()),
            _ => None,
        },
        Op::Cast { to } => (!matches!(to, Dtype::F32 | Dtype::Bool)).then(|| format!("a cast to {to}")),
        Op::MatMul => None,
        Op::Conv(_) => {
            let spatial = arg_shape(0).len().saturating_sub(2);
            if !(1..=2).contains(&spatial) {
                Some(format!("a {spatial}-d convolution (ggml has 1-d and 2-d ones)"))
            } else {
                None
            }
        }
        Op::Pool(_) => {
            let spatial = arg_shape(0).len().saturating_sub(2);
            (!(1..=2).contains(&spatial)).then(|| format!("{spatial}-d pooling (ggml pools in 1 or 2 dimensions)"))
        }
        Op::Reduce { kind, .. } => (*kind == ReduceKind::Prod).then(|| "ggml has no product reduction".into()),
        Op::ArgReduce { .. } => Some("an index result (the ggml target computes in f32)".into()),
        Op::Gather { axis } => {
            if *axis != 0 {
                Some(format!("a gather along axis {axis} (ggml_get_rows takes rows, axis 0)"))
            } else if !matches!(graph.node(node.args[1]).op, Op::Input | Op::Constant(_)) {
                Some("a gather whose indices are computed (the ggml target keeps integers only as inputs and constants)".into())
            } else if matches!(graph.node(node.args[1]).op, Op::Constant(_)) && !indices_only(graph, node.args[1]) {
                Some("a gather whose constant indices other ops read too (the target stores them as f32 then)".into())
            } else if node.args[1..].iter().any(|&i| graph.ty(i).rank() > 3) || arg_shape(0).is_empty() {
                Some("a gather ggml_get_rows cannot shape".into())
            } else {
                None
            }
        }
        Op::Variance { .. } | Op::Softmax { .. } => None,
        Op::Slice { ranges } => {
            let x = arg_shape(0);
            for (i, r) in ranges.iter().enumerate() {
                if r.step.abs() != 1 && i + 1 == x.len() {
                    return Some("a strided slice of the last axis (a ggml view steps whole rows only)".into());
                }
            }
            None
        }
        Op::Pad { value, .. } => (*value != 0.0).then(|| format!("padding with {value} (ggml pads with zeros)")),
    }
}

/// Whether `ggml_pool_2d` computes pooling node `v`: no dilation, both sides padded
/// alike, and ggml's window count `(size + 2 pad - kernel) / stride + 1` the IR's.
fn pools_natively(graph: &Graph, v: ValueId) -> bool {
    let Op::Pool(p) = &graph.node(v).op else { return false };
    let (x, out) = (shape(graph, graph.node(v).args[0]), shape(graph, v));
    p.dilation.iter().all(|&d| d == 1)
        && p.padding.iter().all(|(a, b)| a == b)
        && (0..p.kernel.len()).all(|i| (x[2 + i] + 2 * p.padding[i].0).checked_sub(p.kernel[i]).map(|d| d / p.stride[i] + 1) == Some(out[2 + i]))
}

/// Whether every use of `v` is as a gather's indices: integers that stay ggml I32.
pub fn indices_only(graph: &Graph, v: ValueId) -> bool {
    let mut users = graph.ids().filter(|&u| graph.node(u).args.contains(&v)).peekable();
    users.peek().is_some()
        && !graph.outputs.iter().any(|o| o.value == v)
        && users.all(|u| matches!(graph.node(u).op, Op::Gather { .. }) && graph.node(u).args[0] != v)
}

/// The value of a constant holding one element.
fn constant_scalar(graph: &Graph, v: ValueId) -> Option<f64> {
    match graph.node(v).op {
        Op::Constant(c) => {
            let c = &graph.consts[c.0 as usize];
            (c.numel() == 1).then(|| c.get(0)).flatten()
        }
        _ => None,
    }
}

impl GraphWriter for Writer {
    fn lacks(&self, graph: &Graph, v: ValueId) -> Option<String> {
        lacks(graph, v)
    }

    fn node(&mut self, graph: &Graph, v: ValueId) -> Result<()> {
        let node = graph.node(v);
        if let Some(a) = node.args.iter().find(|a| !self.vars.contains_key(a)) {
            return Err(Error::internal(format!("ggml: %{} is used by %{} before it is written", a.0, v.0)));
        }
        let out_shape = shape(graph, v);
        let out = ne(&out_shape);
        let args: Vec<String> = node.args.iter().map(|a| format!("%{}", a.0)).collect();
        let origin = node.origin.as_deref().or(node.name.as_deref()).map(|o| format!(" ({})", comment_safe(o))).unwrap_or_default();
        let args = if args.is_empty() { String::new() } else { format!(" {}", args.join(", ")) };
        let _ = writeln!(self.code, "    /* %{} = {}{args} : {}{origin} */", v.0, node.op.name(), comment_safe(&node.ty.to_string()));
        let arg_vars: Vec<String> = node.args.iter().map(|&x| self.var(x)).collect();
        let a = |i: usize| arg_vars[i].clone();
        let in_ne = |i: usize| ne(&shape(graph, node.args[i]));
        // ggml cannot allocate a tensor of no elements (gallocr aborts): such a node is
        // never made, and nothing that is made reads it (`lacks`).
        if out_shape.contains(&0) {
            let _ = writeln!(self.code, "    /* (no elements: not computed) */");
            if node.op == Op::Input {
                self.inputs.push(InputVars { number: "NULL".into(), index: "NULL".into() });
            }
            self.vars.insert(v, "NULL".into());
            return Ok(());
        }
        if folded_into_products(graph, v) {
            let _ = writeln!(self.code, "    /* (read transposed by the products that use it) */");
            self.vars.insert(v, String::new());
            return Ok(());
        }
        let result = match &node.op {
            // The library converts each input from the type the model declares: to int32
            // rows for the gathers it feeds (after checking them), to f32 for the other
            // ops (integers only within f32's exact ones).
            Op::Input => {
                let int = matches!(node.ty.dtype, Dtype::I32 | Dtype::I64);
                let mut fed = |ty: &str| {
                    let t = self.call("ggml_new_tensor_4d", &format!("{ty}, {}", ne_args(out)));
                    let _ = writeln!(self.code, "    ggml_set_input({t});");
                    t
                };
                let index = (int && graph.ids().any(|u| matches!(graph.node(u).op, Op::Gather { .. }) && graph.node(u).args[1] == v)).then(|| fed("GGML_TYPE_I32"));
                let number = (!int || !indices_only(graph, v)).then(|| fed("GGML_TYPE_F32"));
                let null = || "NULL".to_string();
                self.inputs.push(InputVars { number: number.clone().unwrap_or_else(null), index: index.clone().unwrap_or_else(null) });
                if let Some(t) = &index {
                    self.int_vars.insert(v, t.clone());
                }
                number.or(index).unwrap_or_default()
            }
            Op::Param | Op::Constant(_) | Op::Iota { .. } => self.load(v, out)?,
            Op::StopGradient => a(0),
            Op::Cast { to: Dtype::Bool } if graph.ty(node.args[0]).dtype != Dtype::Bool => self.custom(graph, v, "nonzero"),
            Op::Cast { .. } => a(0),
            Op::Unary(u) => {
                let x = a(0);
                let simple = |u: UnaryOp| -> Option<&'static str> {
                    Some(match u {
                        UnaryOp::Neg => "ggml_neg",
                        UnaryOp::Abs => "ggml_abs",
                        UnaryOp::Exp => "ggml_exp",
                        UnaryOp::Log => "ggml_log",
                        UnaryOp::Sqrt => "ggml_sqrt",
                        UnaryOp::Sin => "ggml_sin",
                        UnaryOp::Cos => "ggml_cos",
                        UnaryOp::Tanh => "ggml_tanh",
                        UnaryOp::Floor => "ggml_floor",
                        UnaryOp::Composite(c) => return composite_call(c),
                        UnaryOp::Not | UnaryOp::Erf | UnaryOp::Atan | UnaryOp::IsNan | UnaryOp::Relu | UnaryOp::Sign => return None,
                    })
                };
                match (simple(*u), u) {
                    (Some(f), _) => self.call(f, &x),
                    // not b == 1 - b
                    (None, UnaryOp::Not) => self.affine(&x, -1.0, 1.0),
                    (None, UnaryOp::Erf) => self.custom(graph, v, "erf"),
                    (None, UnaryOp::Atan) => self.custom(graph, v, "atan"),
                    (None, UnaryOp::IsNan) => self.custom(graph, v, "isnan"),
                    (None, UnaryOp::Relu) => self.custom(graph, v, "relu"),
                    (None, UnaryOp::Sign) => self.custom(graph, v, "sign"),
                    // Only the claimed composites reach the writer (`decompose`).
                    (None, _) => return Err(Error::internal(format!("ggml: no translation of {}", u.name()))),
                }
            }
            Op::Binary(b) => match b {
                BinaryOp::Add => self.binary(graph, v, "ggml_add", true),
                BinaryOp::Mul | BinaryOp::And => self.binary(graph, v, "ggml_mul", true),
                BinaryOp::Sub => self.binary(graph, v, "ggml_sub", false),
                BinaryOp::Div => self.binary(graph, v, "ggml_div", false),
                BinaryOp::FloorDiv => {
                    let q = self.binary(graph, v, "ggml_div", false);
                    self.call("ggml_floor", &q)
                }
                // x^2 and x^0.5 with ggml's ops; any other exponent by powf.
                BinaryOp::Pow => match constant_scalar(graph, node.args[1]) {
                    Some(2.0) => {
                        let x = self.broadcast(&a(0), in_ne(0), out);
                        self.call("ggml_sqr", &x)
                    }
                    Some(0.5) => {
                        let x = self.broadcast(&a(0), in_ne(0), out);
                        self.call("ggml_sqrt", &x)
                    }
                    _ => self.custom(graph, v, "pow"),
                },
                // a or b == max(a, b) for 0/1 values
                BinaryOp::Max | BinaryOp::Or => self.custom(graph, v, "max"),
                BinaryOp::Min => self.custom(graph, v, "min"),
                // a xor b == |a - b| for 0/1 values
                BinaryOp::Xor => {
                    let (x, y) = self.both(graph, v);
                    let d = self.call("ggml_sub", &format!("{x}, {y}"));
                    self.call("ggml_abs", &d)
                }
                BinaryOp::Eq => self.custom(graph, v, "eq"),
                BinaryOp::Ne => self.custom(graph, v, "ne"),
                BinaryOp::Lt => self.custom(graph, v, "lt"),
                BinaryOp::Le => self.custom(graph, v, "le"),
                BinaryOp::Gt => self.custom(graph, v, "gt"),
                BinaryOp::Ge => self.custom(graph, v, "ge"),
                BinaryOp::Shl | BinaryOp::Shr => return Err(Error::internal("ggml: shifts lacks() refuses")),
            },
            Op::Where => self.custom(graph, v, "where"),
            Op::MatMul => self.matmul(graph, v)?,
            Op::Conv(c) => {
                let (x, w) = (a(0), a(1));
                let spatial = shape(graph, node.args[0]).len() - 2;
                // Uneven padding is added first; ggml pads both sides alike.
                let even = c.padding.iter().all(|(p, q)| p == q);
                let x = if even {
                    x
                } else {
                    let mut lr = [(0u64, 0u64); 4];
                    for (i, p) in c.padding.iter().enumerate() {
                        lr[spatial - 1 - i] = *p;
                    }
                    let pads: Vec<String> = lr.iter().map(|(l, r)| format!("{l}, {r}")).collect();
                    self.call("ggml_pad_ext", &format!("{x}, {}", pads.join(", ")))
                };
                let p = |i: usize| if even { c.padding[i].0 } else { 0 };
                // A 1-d convolution is a 2-d one of height 1.
                let (mut xn, wn) = (in_ne(0), in_ne(1));
                if !even {
                    for (i, (l, r)) in c.padding.iter().enumerate() {
                        xn[spatial - 1 - i] += l + r;
                    }
                }
                let (x4, w4, o4) = if spatial == 2 { (xn, wn, out) } else { ([xn[0], 1, xn[1], xn[2]], [wn[0], 1, wn[1], wn[2]], [out[0], 1, out[1], out[2]]) };
                let x2 = self.reshape(&x, xn, x4);
                let w2 = self.reshape(&w, wn, w4);
                let (s, d) = if spatial == 2 { ((c.stride[1], c.stride[0]), (c.dilation[1], c.dilation[0])) } else { ((c.stride[0], 1), (c.dilation[0], 1)) };
                let pad = if spatial == 2 { (p(1), p(0)) } else { (p(0), 0) };
                let g = c.groups;
                let nchw = if g == 1 {
                    self.conv_core(&x2, &w2, w4, o4, s, pad, d)
                } else {
                    // Groups: each a convolution of its slice of the input's channels with
                    // its slice of the weight's outputs, concatenated along the channels.
                    let (ci, co) = (x4[2] / g, w4[3] / g);
                    let mut acc = String::new();
                    for gi in 0..g {
                        let xv = self.call("ggml_view_4d", &format!("{x2}, {}, {}, {ci}, {}, {x2}->nb[1], {x2}->nb[2], {x2}->nb[3], {} * {x2}->nb[2]", x4[0], x4[1], x4[3], gi * ci));
                        let xg = self.call("ggml_cont", &xv);
                        let wg = self.call("ggml_view_4d", &format!("{w2}, {}, {}, {}, {co}, {w2}->nb[1], {w2}->nb[2], {w2}->nb[3], {} * {w2}->nb[3]", w4[0], w4[1], w4[2], gi * co));
                        let yg = self.conv_core(&xg, &wg, [w4[0], w4[1], w4[2], co], [o4[0], o4[1], co, o4[3]], s, pad, d);
                        acc = if gi == 0 { yg } else { self.call("ggml_concat", &format!("{acc}, {yg}, 2")) };
                    }
                    acc
                };
                let y = self.reshape(&nchw, o4, out);
                if node.args.len() == 3 {
                    // The bias [O] on the channel axis (ggml dimension `spatial`).
                    let mut bn = [1u64; 4];
                    bn[spatial] = out[spatial];
                    let bias = self.reshape(&a(2), in_ne(2), bn);
                    self.call("ggml_add", &format!("{y}, {bias}"))
                } else {
                    y
                }
            }
            Op::Pool(p) if p.kind == PoolKind::Max => self.max_pool(graph, v, &a(0)),
            Op::Pool(_) if !pools_natively(graph, v) => self.pool_by_im2col(graph, v, &a(0)),
            Op::Pool(p) => {
                let spatial = shape(graph, node.args[0]).len() - 2;
                let op = "GGML_OP_POOL_AVG";
                if spatial == 2 {
                    self.call("ggml_pool_2d", &format!("{}, {op}, {}, {}, {}, {}, {}, {}", a(0), p.kernel[1], p.kernel[0], p.stride[1], p.stride[0], p.padding[1].0, p.padding[0].0))
                } else {
                    // ggml's 1-d pooling takes no stride or padding: a 2-d one of height 1.
                    let i = in_ne(0);
                    let tall = self.reshape(&a(0), i, [i[0], 1, i[1], i[2]]);
                    let pooled = self.call("ggml_pool_2d", &format!("{tall}, {op}, {}, 1, {}, 1, {}, 0", p.kernel[0], p.stride[0], p.padding[0].0));
                    self.reshape(&pooled, [out[0], 1, out[1], out[2]], out)
                }
            }
            Op::Reduce { kind, axes, .. } => {
                let x = shape(graph, node.args[0]);
                if axes.is_empty() {
                    a(0)
                } else {
                    let (rows, n, rest) = self.rows_over(&a(0), &x, axes);
                    let r = match kind {
                        ReduceKind::Sum => self.call("ggml_sum_rows", &rows),
                        ReduceKind::Mean => self.call("ggml_mean", &rows),
                        ReduceKind::Max => self.row_max(&rows, n, rest),
                        // min(x) == -max(-x)
                        ReduceKind::Min => {
                            let neg = self.call("ggml_neg", &rows);
                            let m = self.row_max(&neg, n, rest);
                            self.call("ggml_neg", &m)
                        }
                        ReduceKind::Prod => return Err(Error::internal("ggml: product lacks() refuses")),
                    };
                    self.reshape(&r, [1, rest, 1, 1], out)
                }
            }
            // sum((x - mean)^2) / (n - correction)
            Op::Variance { axes, correction, .. } => {
                let x = shape(graph, node.args[0]);
                let (rows, n, rest) = self.rows_over(&a(0), &x, axes);
                let mean = self.call("ggml_mean", &rows);
                let d = self.call("ggml_sub", &format!("{rows}, {mean}"));
                let sq = self.call("ggml_sqr", &d);
                let s = self.call("ggml_sum_rows", &sq);
                let var = self.call("ggml_scale", &format!("{s}, {}", c_float(1.0 / (n as f64 - correction))));
                self.reshape(&var, [1, rest, 1, 1], out)
            }
            Op::Softmax { axis } => {
                // ggml's softmax runs along ne0: move the axis there and back.
                let k = out_shape.len() - 1 - axis;
                let mut order = [0usize, 1, 2, 3];
                order.swap(0, k);
                let x = self.permute(&a(0), order);
                let s = self.call("ggml_soft_max", &x);
                self.permute(&s, order)
            }
            Op::Reshape { .. } => self.reshape(&a(0), in_ne(0), out),
            Op::Transpose { perm } => {
                // Output IR axis i is input axis perm[i]: output ggml dim r-1-i is input
                // ggml dim r-1-perm[i].
                let r = perm.len();
                let mut order = [0usize, 1, 2, 3];
                for (i, &p) in perm.iter().enumerate() {
                    order[r - 1 - i] = r - 1 - p;
                }
                self.permute(&a(0), order)
            }
            Op::BroadcastTo { .. } => self.broadcast(&a(0), in_ne(0), out),
            Op::Slice { ranges } => {
                let x = shape(graph, node.args[0]);
                let r = x.len();
                let mut offset = Vec::new();
                let mut strides = [1i64; 4];
                let mut reversed = [0u8; 4];
                for (i, range) in ranges.iter().enumerate() {
                    let (mut start, mut step, count) = range.resolve(x[i]).map_err(Error::internal)?;
                    let k = r - 1 - i;
                    // A backwards range is the forwards one over the same elements, reversed.
                    if step < 0 && count > 0 {
                        start += step * (count as i64 - 1);
                        step = -step;
                        reversed[k] = 1;
                    }
                    strides[k] = step;
                    if start != 0 {
                        offset.push(format!("{start} * {}->nb[{k}]", a(0)));
                    }
                }
                let x0 = a(0);
                let nb = |k: usize| format!("{x0}->nb[{k}] * {}", strides[k]);
                let off = if offset.is_empty() { "0".to_string() } else { offset.join(" + ") };
                let view = self.call("ggml_view_4d", &format!("{x0}, {}, {}, {}, {}, {off}", ne_args(out), nb(1), nb(2), nb(3)));
                let forwards = self.call("ggml_cont", &view);
                if reversed == [0; 4] {
                    forwards
                } else {
                    // Which ggml dimensions run backwards, for the kernel (static: the graph
                    // keeps the pointer).
                    let flags = self.fresh();
                    let _ = writeln!(self.code, "    static const int {flags}[4] = {{ {}, {}, {}, {} }};", reversed[0], reversed[1], reversed[2], reversed[3]);
                    self.customs.insert("reverse");
                    self.call("ggml_map_custom1", &format!("{forwards}, custom_reverse, GGML_N_TASKS_MAX, (void *){flags}"))
                }
            }
            Op::Concat { axis } => {
                let k = out_shape.len() - 1 - axis;
                let mut acc = a(0);
                for i in 1..node.args.len() {
                    acc = self.call("ggml_concat", &format!("{acc}, {}, {k}", a(i)));
                }
                acc
            }
            Op::Pad { pads, .. } => {
                let r = pads.len();
                let mut lr = [(0u64, 0u64); 4];
                for (i, p) in pads.iter().enumerate() {
                    lr[r - 1 - i] = *p;
                }
                let args: Vec<String> = lr.iter().map(|(l, r)| format!("{l}, {r}")).collect();
                self.call("ggml_pad_ext", &format!("{}, {}", a(0), args.join(", ")))
            }
            // take(data, idx, 0): rows of data [V, rest...] (ggml [rest, V]) picked by
            // the flattened indices, then shaped idx.shape ++ rest.
            Op::Gather { .. } => {
                let (data, idx) = (shape(graph, node.args[0]), shape(graph, node.args[1]));
                let rest: u64 = data[1..].iter().product();
                let rows = self.reshape(&a(0), in_ne(0), [rest, data[0], 1, 1]);
                let n: u64 = idx.iter().product();
                let indices = self.int_vars.get(&node.args[1]).cloned().unwrap_or_else(|| a(1));
                let flat = self.reshape(&indices, in_ne(1), [n, 1, 1, 1]);
                let picked = self.call("ggml_get_rows", &format!("{rows}, {flat}"));
                self.reshape(&picked, [rest, n, 1, 1], out)
            }
            Op::ArgReduce { .. } => return Err(Error::internal("ggml: an index result, which lacks() refuses")),
        };
        self.vars.insert(v, result);
        Ok(())
    }

    fn outputs(&mut self, graph: &Graph) -> Result<()> {
        let _ = writeln!(self.code, "    /* outputs */");
        for o in &graph.outputs {
            if shape(graph, o.value).contains(&0) {
                self.outputs.push("NULL".into());
                continue;
            }
            // A copy of its own, so every output lives in the computed buffer (even one
            // that is an input or a weight).
            let t = self.call("ggml_cont", &self.var(o.value));
            let _ = writeln!(self.code, "    ggml_set_output({t});");
            self.outputs.push(t);
        }
        Ok(())
    }
}

impl Writer {
    /// Average pooling `ggml_pool_2d` cannot do (dilated, or padded unevenly): the input
    /// padded with zeros (which the average counts, as the interpreter does), each
    /// channel's windows laid out as rows by `ggml_im2col` (which dilates; a 1-d window is
    /// 2-d of height 1), and each row's mean. (Max pooling is [`MAX_POOL_KERNEL`]'s.)
    fn pool_by_im2col(&mut self, graph: &Graph, v: ValueId, x: &str) -> String {
        let Op::Pool(p) = &graph.node(v).op else { return String::new() };
        let (xs, out) = (shape(graph, graph.node(v).args[0]), ne(&shape(graph, v)));
        let spatial = xs.len() - 2;
        let xn = ne(&xs);
        // Everything as 2-d: [W, H, C, N].
        let (x4, k, s, d) = if spatial == 2 {
            (xn, (p.kernel[1], p.kernel[0]), (p.stride[1], p.stride[0]), (p.dilation[1], p.dilation[0]))
        } else {
            ([xn[0], 1, xn[1], xn[2]], (p.kernel[0], 1), (p.stride[0], 1), (p.dilation[0], 1))
        };
        let pads = if spatial == 2 { [p.padding[1], p.padding[0]] } else { [p.padding[0], (0, 0)] };
        let x2 = self.reshape(x, xn, x4);
        let padded = pads.iter().any(|&(l, r)| l + r > 0);
        let pad_args = format!("{}, {}, {}, {}, 0, 0, 0, 0", pads[0].0, pads[0].1, pads[1].0, pads[1].1);
        let xp = if padded { self.call("ggml_pad_ext", &format!("{x2}, {pad_args}")) } else { x2 };
        let (wp, hp) = (x4[0] + pads[0].0 + pads[0].1, x4[1] + pads[1].0 + pads[1].1);
        let channels = self.reshape(&xp, [wp, hp, x4[2], x4[3]], [wp, hp, 1, x4[2] * x4[3]]);
        // im2col reads only the kernel's shape.
        let kernel = self.call("ggml_new_tensor_4d", &format!("GGML_TYPE_F32, {}, {}, 1, 1", k.0, k.1));
        let cols = self.call("ggml_im2col", &format!("{kernel}, {channels}, {}, {}, 0, 0, {}, {}, true, GGML_TYPE_F32", s.0, s.1, d.0, d.1));
        let taps = k.0 * k.1;
        let windows: u64 = out.iter().product();
        let rows = self.call("ggml_reshape_2d", &format!("{cols}, {taps}, {windows}"));
        let r = self.call("ggml_mean", &rows);
        self.reshape(&r, [1, windows, 1, 1], out)
    }

    /// A 2-d convolution of `x` by `w` (ggml shape `wn`: [KW, KH, IC, OC]) to ggml shape
    /// `on` ([OW, OH, OC, N]) with strides, padding and dilation in ggml's order:
    /// `ggml_conv_2d` with its im2col matrix kept in f32 (ggml_conv_1d's is f16). The
    /// im2col matrix is [K = IC*KH*KW, OW, OH, N]; its product with the weight [K, OC] is
    /// [OC, OW*OH*N], permuted to [OW, OH, OC, N].
    #[allow(clippy::too_many_arguments)]
    fn conv_core(&mut self, x: &str, w: &str, wn: [u64; 4], on: [u64; 4], s: (u64, u64), pad: (u64, u64), d: (u64, u64)) -> String {
        let k = wn[0] * wn[1] * wn[2];
        let cols = self.call("ggml_im2col", &format!("{w}, {x}, {}, {}, {}, {}, {}, {}, true, GGML_TYPE_F32", s.0, s.1, pad.0, pad.1, d.0, d.1));
        let cols2 = self.call("ggml_reshape_2d", &format!("{cols}, {k}, {}", on[0] * on[1] * on[3]));
        let wk = self.call("ggml_reshape_2d", &format!("{w}, {k}, {}", wn[3]));
        let prod = self.call("ggml_mul_mat", &format!("{wk}, {cols2}"));
        let p4 = self.call("ggml_reshape_4d", &format!("{prod}, {}, {}, {}, {}", on[2], on[0], on[1], on[3]));
        self.permute(&p4, [1, 2, 0, 3])
    }

    /// `A @ B` (NumPy `matmul`) as `ggml_mul_mat(B^T, A)`: B^T is B's source when B is a
    /// transposition of its last two axes (a Linear layer's weight), else a transposed
    /// copy. ggml broadcasts the first operand over the second's batch, so A is repeated
    /// to the output's batch where it lacks it.
    fn matmul(&mut self, graph: &Graph, v: ValueId) -> Result<String> {
        let node = graph.node(v);
        let (av, bv) = (node.args[0], node.args[1]);
        let (sa, sb) = (shape(graph, av), shape(graph, bv));
        let out = ne(&shape(graph, v));
        // Rank-1 operands become matrices: a [K] is [1, K], b [K] is [K, 1].
        let a_m: Vec<u64> = if sa.len() == 1 { vec![1, sa[0]] } else { sa.clone() };
        let b_m: Vec<u64> = if sb.len() == 1 { vec![sb[0], 1] } else { sb.clone() };
        let (m, k, n) = (a_m[a_m.len() - 2], a_m[a_m.len() - 1], b_m[b_m.len() - 1]);
        // The batch of the result (IR order), from the broadcast of both batches.
        let batch_rank = (a_m.len() - 2).max(b_m.len() - 2);
        let batch = |s: &[u64]| -> Vec<u64> {
            let own = &s[..s.len() - 2];
            std::iter::repeat_n(1, batch_rank - own.len()).chain(own.iter().copied()).collect()
        };
        let (ba, bb) = (batch(&a_m), batch(&b_m));
        let ob: Vec<u64> = ba.iter().zip(&bb).map(|(x, y)| *x.max(y)).collect();
        if batch_rank > 2 {
            return Err(Error::internal("ggml: a product with more than two batch axes"));
        }
        // Batch axes in ggml's order (ne2, ne3).
        let bne = |s: &[u64]| {
            let mut r = [1u64; 2];
            for (i, d) in s.iter().rev().enumerate() {
                r[i] = *d;
            }
            r
        };
        let (ba4, bb4, ob4) = (bne(&ba), bne(&bb), bne(&ob));
        // x = B^T, ggml [k, n, batch...].
        let b_node = graph.node(bv);
        let x = if transposed_weight(graph, bv) {
            let src = b_node.args[0];
            self.reshape(&self.var(src), ne(&shape(graph, src)), [k, n, bb4[0], bb4[1]])
        } else {
            let b = self.reshape(&self.var(bv), ne(&sb), [n, k, bb4[0], bb4[1]]);
            let t = self.call("ggml_transpose", &b);
            self.call("ggml_cont", &t)
        };
        // y = A, ggml [k, m, batch...], repeated to the output's batch.
        let y = self.reshape(&self.var(av), ne(&sa), [k, m, ba4[0], ba4[1]]);
        let y = self.broadcast(&y, [k, m, ba4[0], ba4[1]], [k, m, ob4[0], ob4[1]]);
        let p = self.call("ggml_mul_mat", &format!("{x}, {y}"));
        Ok(self.reshape(&p, [n, m, ob4[0], ob4[1]], out))
    }
}

/// Whether `b`, a product's right operand, is a transposition of its last two axes (a
/// Linear layer's `W^T`): the product then reads its source as ggml's first operand.
fn transposed_weight(graph: &Graph, b: ValueId) -> bool {
    match &graph.node(b).op {
        Op::Transpose { perm } => {
            let r = perm.len();
            r >= 2 && perm[r - 1] == r - 2 && perm[r - 2] == r - 1 && perm[..r - 2].iter().enumerate().all(|(i, &p)| i == p)
        }
        _ => false,
    }
}

/// Whether node `v` is only ever read by products as their transposed operand
/// ([`transposed_weight`]), and so needs no tensor of its own.
pub fn folded_into_products(graph: &Graph, v: ValueId) -> bool {
    if !transposed_weight(graph, v) || graph.outputs.iter().any(|o| o.value == v) {
        return false;
    }
    let mut users = graph.ids().filter(|&u| graph.node(u).args.contains(&v)).peekable();
    users.peek().is_some() && users.all(|u| graph.node(u).op == Op::MatMul && graph.node(u).args[0] != v)
}
