//! Lowering: a verified, shape-static [`Graph`] becomes a [`Program`], an ordered list
//! of kernels over planned buffers, which the C (and later CUDA, Metal) code
//! generators render.
//!
//! Layout ops cost nothing here: reshape, transpose, slice and broadcast become
//! *views* (offset + strides over an existing buffer). Each elementwise op becomes a
//! `Map` kernel whose body is a scalar expression reading views; reductions become
//! `Reduce` kernels; matmul, convolution, pooling and softmax become calls into the
//! runtime. Every kernel records the model ops it came from.
//!
//! Lowering makes one kernel per op and one arena buffer per value; the `fuse` pass
//! then merges kernels and `memory` places the buffers (`passes::PROGRAM_PIPELINE`).
//!
//! **Architecture Invariant:** kernels run in list order; a kernel reads only buffers
//! written by earlier kernels, inputs, weights or constants. Until `memory` runs,
//! every arena buffer is written by exactly one kernel.

mod loops;
pub mod parse;
pub mod print;
pub mod verify;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};

use crate::error::{Error, Result};
use crate::ir::*;
use crate::tensor::Constant;

/// Index of a buffer in [`Program::buffers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(pub usize);

/// Where a buffer's memory comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Storage {
    /// The caller's `inputs[i]`.
    Input(usize),
    /// The caller's `outputs[i]`.
    Output(usize),
    /// The weights blob, at a byte offset.
    Weight { offset: u64 },
    /// A constant of the program, emitted into the generated source.
    Const(usize),
    /// The caller's arena, at a byte offset (set by [`memory::plan`]).
    Arena { offset: u64 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Buffer {
    /// A legal, unique identifier fragment (from the value's name when it has one).
    pub name: String,
    pub dtype: Dtype,
    /// Number of elements.
    pub len: u64,
    pub storage: Storage,
}

impl Buffer {
    pub fn bytes(&self) -> u64 {
        self.len * self.dtype.size() as u64
    }
}

/// A strided view of a buffer: element `idx` of a tensor of `shape` is
/// `buf[offset + Σ idx[d] * strides[d]]`.
#[derive(Debug, Clone, PartialEq, Hash)]
pub struct View {
    pub buf: BufId,
    pub shape: Vec<u64>,
    pub strides: Vec<i64>,
    pub offset: i64,
}

impl View {
    pub fn contiguous(buf: BufId, shape: &[u64]) -> View {
        View { buf, shape: shape.to_vec(), strides: contiguous_strides(shape), offset: 0 }
    }
    /// Row-major and dense from `offset` (strides of size-1 dimensions do not matter).
    pub fn is_contiguous(&self) -> bool {
        let want = contiguous_strides(&self.shape);
        self.shape.iter().zip(self.strides.iter().zip(&want)).all(|(&n, (s, w))| n <= 1 || s == w)
    }
    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }
}

pub fn contiguous_strides(shape: &[u64]) -> Vec<i64> {
    let mut s = vec![0i64; shape.len()];
    let mut acc = 1i64;
    for i in (0..shape.len()).rev() {
        s[i] = if shape[i] == 1 { 0 } else { acc };
        acc *= shape[i] as i64;
    }
    s
}

/// A scalar expression evaluated at each point of a kernel's iteration space.
/// Loop variables are numbered: the output dimensions first, then (in a `Reduce`)
/// the reduced ones.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A constant of the given dtype.
    Const(f64, Dtype),
    /// `view[Σ var_d * stride_d + offset]` where `vars[d]` is the loop variable
    /// indexing view dimension `d`.
    Load { view: View, vars: Vec<usize> },
    /// The value of a loop variable (as i64).
    Index(usize),
    Unary(UnaryOp, Box<Expr>, Dtype),
    Binary(BinaryOp, Box<Expr>, Box<Expr>, Dtype),
    /// `cond ? a : b`, only the chosen side evaluated: a guard for a load that is valid
    /// only where `cond` holds (padding, concatenation), so `cond` reads indices only.
    Select(Box<Expr>, Box<Expr>, Box<Expr>, Dtype),
    /// `cond ? a : b` with both sides evaluated (`Op::Where`), so no load in them is
    /// conditional: vectorizers make conditional loads masked loads, and GCC 12 gets
    /// some of those wrong (see `docs/architecture.md`). Both sides must be safe to
    /// evaluate everywhere.
    Where(Box<Expr>, Box<Expr>, Box<Expr>, Dtype),
    Cast(Box<Expr>, Dtype),
    /// `view[..., idx, ...]` along `axis`, other dimensions indexed by `vars`
    /// (`vars[axis]` unused); a negative index counts from the end. An index out of
    /// range is an error: code generators check every index before the kernel runs.
    Gather { view: View, vars: Vec<usize>, axis: usize, index: Box<Expr> },
}

impl Expr {
    /// Calls `f` on this expression and every subexpression, parents first.
    pub fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a Expr)) {
        f(self);
        match self {
            Expr::Const(..) | Expr::Load { .. } | Expr::Index(_) => {}
            Expr::Gather { index: a, .. } | Expr::Unary(_, a, _) | Expr::Cast(a, _) => a.walk(f),
            Expr::Binary(_, a, b, _) => {
                a.walk(f);
                b.walk(f);
            }
            Expr::Select(c, a, b, _) | Expr::Where(c, a, b, _) => {
                c.walk(f);
                a.walk(f);
                b.walk(f);
            }
        }
    }

    /// [`Expr::walk`] with mutable access; `f` may replace a node, and the walk then
    /// goes on into the replacement's subexpressions.
    pub fn walk_mut(&mut self, f: &mut dyn FnMut(&mut Expr)) {
        f(self);
        match self {
            Expr::Const(..) | Expr::Load { .. } | Expr::Index(_) => {}
            Expr::Gather { index: a, .. } | Expr::Unary(_, a, _) | Expr::Cast(a, _) => a.walk_mut(f),
            Expr::Binary(_, a, b, _) => {
                a.walk_mut(f);
                b.walk_mut(f);
            }
            Expr::Select(c, a, b, _) | Expr::Where(c, a, b, _) => {
                c.walk_mut(f);
                a.walk_mut(f);
                b.walk_mut(f);
            }
        }
    }

    pub fn dtype(&self) -> Dtype {
        match self {
            Expr::Const(_, d) | Expr::Unary(_, _, d) | Expr::Binary(_, _, _, d) | Expr::Select(_, _, _, d) | Expr::Where(_, _, _, d) | Expr::Cast(_, d) => *d,
            Expr::Load { .. } | Expr::Gather { .. } => Dtype::F32, // overwritten by the program's buffer dtype; see `Program::expr_dtype`
            Expr::Index(_) => Dtype::I64,
        }
    }
}

// Hashes agree with `PartialEq` (equal values hash alike; 0.0 and -0.0 compare equal,
// so they hash alike too), so a pass can find equal kernels through a hash table and
// confirm with `==` instead of comparing every pair.
fn hash_f64<H: Hasher>(x: f64, h: &mut H) {
    (if x == 0.0 { 0 } else { x.to_bits() }).hash(h);
}

impl Hash for Expr {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        match self {
            Expr::Const(x, d) => {
                hash_f64(*x, h);
                d.hash(h);
            }
            Expr::Load { view, vars } => {
                view.hash(h);
                vars.hash(h);
            }
            Expr::Index(v) => v.hash(h),
            Expr::Unary(u, a, d) => {
                u.hash(h);
                a.hash(h);
                d.hash(h);
            }
            Expr::Binary(b, l, r, d) => {
                b.hash(h);
                l.hash(h);
                r.hash(h);
                d.hash(h);
            }
            Expr::Select(c, a, b, d) | Expr::Where(c, a, b, d) => {
                c.hash(h);
                a.hash(h);
                b.hash(h);
                d.hash(h);
            }
            Expr::Cast(a, d) => {
                a.hash(h);
                d.hash(h);
            }
            Expr::Gather { view, vars, axis, index } => {
                view.hash(h);
                vars.hash(h);
                axis.hash(h);
                index.hash(h);
            }
        }
    }
}

impl Hash for Kernel {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        match self {
            Kernel::Map { out, expr } => {
                out.hash(h);
                expr.hash(h);
            }
            Kernel::Reduce { out, reduced, kind, expr, scale } => {
                out.hash(h);
                reduced.hash(h);
                kind.hash(h);
                expr.hash(h);
                scale.is_some().hash(h);
                if let Some(x) = scale {
                    hash_f64(*x, h);
                }
            }
            Kernel::ArgReduce { out, reduced, kind, expr } => {
                out.hash(h);
                reduced.hash(h);
                kind.hash(h);
                expr.hash(h);
            }
            Kernel::Gemm { a, b, c, epilogue } => {
                a.hash(h);
                b.hash(h);
                c.hash(h);
                epilogue.hash(h);
            }
            Kernel::Conv { x, w, out, attrs, epilogue, scratch } => {
                x.hash(h);
                w.hash(h);
                out.hash(h);
                attrs.hash(h);
                epilogue.hash(h);
                scratch.hash(h);
            }
            Kernel::Pool { x, out, attrs } => {
                x.hash(h);
                out.hash(h);
                attrs.hash(h);
            }
            Kernel::Softmax { x, out, axis } => {
                x.hash(h);
                out.hash(h);
                axis.hash(h);
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kernel {
    /// `out[i...] = expr` for every index of `out.shape` (out is contiguous).
    Map { out: View, expr: Expr },
    /// `out[i...] = reduce over r... of expr`, then `* scale` (a mean's 1/n).
    Reduce { out: View, reduced: Vec<u64>, kind: ReduceKind, expr: Expr, scale: Option<f64> },
    /// `out[i...] = index r of the max/min of expr over r` (first wins; NaN wins).
    ArgReduce { out: View, reduced: u64, kind: ArgKind, expr: Expr },
    /// Batched `c[b] = a[b] @ b[b]`: `a` is `[batch..., m, k]`, `b` `[batch..., k, n]`
    /// views (broadcast batch strides allowed), `c` contiguous `[batch..., m, n]`.
    /// The epilogue, an expression over `c`'s index space that reads the product
    /// through a load of `c` itself, replaces each element once it is final.
    Gemm { a: View, b: View, c: View, epilogue: Option<Expr> },
    /// NCHW convolution (1-d as H = 1) into contiguous `out`; input and weight
    /// contiguous; an epilogue as for `Gemm`. With `scratch` (an arena buffer of
    /// [`winograd`]'s size), by Winograd's F(4x4, 3x3), its weight in
    /// [`Layout::Winograd`].
    Conv { x: View, w: View, out: View, attrs: ConvAttrs, epilogue: Option<Expr>, scratch: Option<View> },
    /// NCHW pooling (1-d as H = 1) into contiguous `out`; input contiguous.
    Pool { x: View, out: View, attrs: PoolAttrs },
    /// Softmax along `axis` of a contiguous input into contiguous `out`.
    Softmax { x: View, out: View, axis: usize },
}

/// One kernel and the model ops it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub kernel: Kernel,
    /// `transpose (submodels.m_0 (Linear))`, for the comment above the kernel.
    pub origins: Vec<String>,
    /// For each dimension of the kernel's domain ([`Kernel::domain`]), the symbol (an
    /// index into [`Program::symbols`]) whose run-time value is its extent; `None` for
    /// a static extent.
    pub dims: Vec<Option<usize>>,
}

/// A model input, output or parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    pub name: String,
    pub buf: BufId,
    /// The shape, symbolic dimensions at their maximum.
    pub shape: Vec<u64>,
    /// The symbol of each dimension, if it has one (see [`Step::dims`]).
    pub dims: Vec<Option<usize>>,
    /// How a parameter is stored in the weights blob (inputs and outputs are row-major).
    pub layout: Layout,
}

/// How a parameter's values are laid out in the weights blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Row-major, in the parameter's shape.
    RowMajor,
    /// A matrix `[N, K]` stored as its transpose `[K, N]`, because every use transposes
    /// it: a Linear layer's weight then reaches the GEMM row-major.
    Transposed,
    /// A matrix `[N, K]` whose every use is the right operand of an f32 matmul through
    /// its transpose, stored as that `[K, N]` operand in column panels of
    /// [`PANEL`] columns, the last one zero-padded: the runtime's GEMM reads it in place
    /// and in order, with no packing (`mr_sgemm_panels` in `mithril_runtime.h`).
    Panels,
    /// A convolution weight `[O, C, 3, 3]` whose every use is a convolution that runs
    /// by Winograd's F(4x4, 3x3) ([`winograd`]), stored transformed as `[36, O, C]`
    /// (`mr_conv2d_winograd_f32` in `mithril_runtime.h`).
    Winograd,
}

/// The width of a weight's column panels (`MR_PANEL` in the runtime).
pub const PANEL: u64 = 32;

/// When a convolution runs by Winograd's F(4x4, 3x3) (`mr_conv2d_winograd_f32`), and
/// the floats of scratch it then needs: f32, 2-d, a 3x3 kernel at stride 1 and
/// dilation 1, one group, at least 16 input and output channels (with fewer, its 36
/// small GEMMs gain little over the direct product), and at least half the
/// multiply-adds of direct convolution saved (36 per tile of 4x4 outputs, the tiles
/// taken in whole blocks of `PANEL`, against 9 per output; small images lose to the
/// tiles that stick out). `x` and `w` are the input and weight shapes (the input
/// unpadded: the runtime reads padding as zeros), `out` the output's.
pub fn winograd(attrs: &ConvAttrs, x: &[u64], w: &[u64], out: &[u64]) -> Option<u64> {
    let fits = attrs.stride == [1, 1] && attrs.dilation == [1, 1] && attrs.groups == 1 && [x.len(), w.len(), out.len()] == [4; 3] && w[2..] == [3, 3] && x[1] >= 16 && w[0] >= 16;
    if !fits {
        return None;
    }
    // MR_WINOGRAD_SCRATCH(N, C, O, OH, OW)
    let (n, c, o) = (x[0], x[1], w[0]);
    let tiles = out[2].div_ceil(4).checked_mul(out[3].div_ceil(4))?.checked_mul(n)?;
    let blocks = tiles.div_ceil(PANEL);
    if blocks.checked_mul(PANEL * 8)? > n.checked_mul(out[2])?.checked_mul(out[3])? {
        return None;
    }
    let slot = c.checked_add(o)?.checked_add(2)?.checked_mul(36 * PANEL)?;
    blocks.min(WINOGRAD_SLOTS).checked_mul(slot)
}

/// Chunks of a Winograd convolution's blocks that threads run at once, each with its
/// own slot of scratch (`MR_WINOGRAD_SLOTS` in the runtime).
pub const WINOGRAD_SLOTS: u64 = 8;

impl Port {
    /// Elements the parameter takes in the weights blob.
    pub fn stored_len(&self) -> u64 {
        let n: u64 = self.shape.iter().product();
        match self.layout {
            Layout::RowMajor | Layout::Transposed => n,
            Layout::Panels => self.shape[0].div_ceil(PANEL) * PANEL * self.shape[1],
            Layout::Winograd => 36 * self.shape[0] * self.shape[1],
        }
    }
}

impl Kernel {
    /// The extents of the loops a kernel runs: a loop kernel's output dimensions (then
    /// the reduced ones); a matmul's `[batch..., m, n, k]`; the output's dimensions for
    /// the other runtime calls.
    pub fn domain(&self) -> Vec<u64> {
        match self {
            Kernel::Map { out, .. } => out.shape.clone(),
            Kernel::Reduce { out, reduced, .. } => out.shape.iter().chain(reduced).copied().collect(),
            Kernel::ArgReduce { out, reduced, .. } => out.shape.iter().copied().chain([*reduced]).collect(),
            Kernel::Gemm { a, c, .. } => c.shape.iter().copied().chain([a.shape[a.shape.len() - 1]]).collect(),
            Kernel::Conv { out, .. } | Kernel::Pool { out, .. } | Kernel::Softmax { out, .. } => out.shape.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Program {
    pub name: String,
    pub buffers: Vec<Buffer>,
    pub steps: Vec<Step>,
    /// Constants emitted into the source, by [`Storage::Const`] index.
    pub consts: Vec<Constant>,
    /// Symbolic dimensions (a batch size) with the largest value each may take at run
    /// time. Buffers are laid out for the maxima, so only loop extents change with
    /// them; symbols must be outermost in inputs and outputs, whose row-major layout
    /// then does not depend on them.
    pub symbols: Vec<(String, u64)>,
    /// Model inputs (the caller's `inputs[i]`).
    pub inputs: Vec<Port>,
    /// Model outputs (the caller's `outputs[i]`).
    pub outputs: Vec<Port>,
    /// The output that is the model's loss, if any.
    pub loss: Option<usize>,
    /// Parameters, in weights-blob order.
    pub weights: Vec<Port>,
    /// Size of the weights blob in bytes.
    pub weights_size: u64,
    /// Size of the arena in bytes (set by [`memory::plan`]).
    pub arena_size: u64,
    /// The largest total size of buffers live at once: no plan can use less.
    pub peak_live: u64,
}

impl Program {
    /// Whether the view is all of its buffer, row-major.
    pub fn is_whole(&self, v: &View) -> bool {
        v.is_contiguous() && v.offset == 0 && v.numel() == self.buffers[v.buf.0].len
    }

    /// Whether a load of `view` at `vars`, at each point of an iteration space of
    /// `shape`, reads its buffer at that point's row-major position.
    pub fn is_identity_load(&self, view: &View, vars: &[usize], shape: &[u64]) -> bool {
        self.is_whole(view) && view.shape == shape && vars.iter().enumerate().all(|(d, &v)| view.shape[d] == 1 || v == d)
    }
    /// The element type of an expression (loads have their buffer's).
    pub fn expr_dtype(&self, e: &Expr) -> Dtype {
        match e {
            Expr::Load { view, .. } | Expr::Gather { view, .. } => self.buffers[view.buf.0].dtype,
            other => other.dtype(),
        }
    }

    /// Every use of buffer `from` becomes a use of `to`, which must have the same
    /// element type and length.
    pub fn rename_buffer(&mut self, from: BufId, to: BufId) {
        for step in &mut self.steps {
            visit_views(&mut step.kernel, &mut |v| {
                if v.buf == from {
                    v.buf = to;
                }
            });
        }
    }

    /// Drops arena buffers no kernel uses, renumbering the rest.
    pub fn sweep_buffers(&mut self) {
        let mut used = vec![false; self.buffers.len()];
        for step in &mut self.steps {
            visit_views(&mut step.kernel, &mut |v| used[v.buf.0] = true);
        }
        let mut new_id = vec![BufId(usize::MAX); self.buffers.len()];
        let mut kept = Vec::new();
        for (i, b) in std::mem::take(&mut self.buffers).into_iter().enumerate() {
            if used[i] || !matches!(b.storage, Storage::Arena { .. }) {
                new_id[i] = BufId(kept.len());
                kept.push(b);
            }
        }
        self.buffers = kept;
        for step in &mut self.steps {
            visit_views(&mut step.kernel, &mut |v| v.buf = new_id[v.buf.0]);
        }
        for port in self.inputs.iter_mut().chain(self.outputs.iter_mut()).chain(self.weights.iter_mut()) {
            port.buf = new_id[port.buf.0];
        }
    }
}

/// Calls `f` on every view a kernel reads or writes, those inside its expressions
/// included.
pub fn visit_views(k: &mut Kernel, f: &mut dyn FnMut(&mut View)) {
    match k {
        Kernel::Map { out, expr } | Kernel::Reduce { out, expr, .. } | Kernel::ArgReduce { out, expr, .. } => {
            f(out);
            visit_expr_views(expr, f);
        }
        Kernel::Gemm { a, b, c, epilogue } => {
            f(a);
            f(b);
            f(c);
            if let Some(e) = epilogue {
                visit_expr_views(e, f);
            }
        }
        Kernel::Conv { x, w, out, epilogue, scratch, .. } => {
            f(x);
            f(w);
            f(out);
            if let Some(scratch) = scratch {
                f(scratch);
            }
            if let Some(e) = epilogue {
                visit_expr_views(e, f);
            }
        }
        Kernel::Pool { x, out, .. } | Kernel::Softmax { x, out, .. } => {
            f(x);
            f(out);
        }
    }
}

pub fn visit_expr_views(e: &mut Expr, f: &mut dyn FnMut(&mut View)) {
    e.walk_mut(&mut |e| {
        if let Expr::Load { view, .. } | Expr::Gather { view, .. } = e {
            f(view);
        }
    });
}

/// The largest buffer compiled code may use (2^48 bytes): sizes, offsets and strides
/// then fit in int64_t with room to add them.
pub const MAX_BUFFER_BYTES: u64 = 1 << 48;

/// Alignment of every buffer in the weights blob and the arena.
pub const ALIGN: u64 = 64;

pub fn align(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

/// What lowering takes beyond the graph.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The largest run-time value of each symbolic dimension.
    pub max: BTreeMap<String, u64>,
    /// Store every parameter row-major: a training step updates the weights in place
    /// with gradients in that layout, and a forward and a backward program share one
    /// blob.
    pub row_major_weights: bool,
}

/// Lowers a graph, one kernel per op.
pub fn lower(graph: &Graph, opts: &Options) -> Result<Program> {
    Lowerer::new(graph, opts).run()
}

struct Lowerer<'g> {
    graph: &'g Graph,
    max: &'g BTreeMap<String, u64>,
    row_major_weights: bool,
    p: Program,
    views: HashMap<ValueId, View>,
    /// Scalar constants are inlined into expressions.
    scalars: HashMap<ValueId, (f64, Dtype)>,
    /// The nodes that take each value as an argument, in order, each once (listed
    /// once for the graph: a weight's layout looks at its users).
    users: Vec<Vec<ValueId>>,
    /// The weights stored for Winograd's convolution (their convolutions skip padding).
    winograd: HashSet<BufId>,
}

impl<'g> Lowerer<'g> {
    fn new(graph: &'g Graph, opts: &'g Options) -> Lowerer<'g> {
        Lowerer {
            graph,
            max: &opts.max,
            row_major_weights: opts.row_major_weights,
            p: Program {
                name: graph.name.clone(),
                buffers: Vec::new(),
                steps: Vec::new(),
                consts: Vec::new(),
                symbols: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                loss: None,
                weights: Vec::new(),
                weights_size: 0,
                arena_size: 0,
                peak_live: 0,
            },
            views: HashMap::new(),
            scalars: HashMap::new(),
            users: users(graph),
            winograd: HashSet::new(),
        }
    }

    /// The value's shape with each symbolic dimension at its maximum.
    fn shape(&self, v: ValueId) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        for d in self.graph.ty(v).shape.dims() {
            out.push(match d {
                Dim::Known(n) => *n,
                Dim::Sym(s) => *self.max.get(s).ok_or_else(|| {
                    Error::user(format!(
                        "{} has the symbolic shape {}: compiled code takes {s} at run time, up to a maximum given at compile time",
                        self.describe(v),
                        self.graph.ty(v).shape
                    ))
                    .note(format!("give it with --max {s}=N (or a static size with --shape)"))
                })?,
            });
        }
        if buffer_bytes(&out, self.graph.ty(v).dtype).is_none() {
            return Err(Error::user(format!(
                "{} (shape {}, with symbols at their --max) would need more than {MAX_BUFFER_BYTES} bytes",
                self.describe(v),
                self.graph.ty(v).shape
            )));
        }
        Ok(out)
    }

    fn describe(&self, v: ValueId) -> String {
        match (&self.graph.node(v).op, &self.graph.node(v).name) {
            (Op::Input | Op::Param, Some(n)) => format!("`{n}`"),
            _ => crate::passes::shape::describe_node(self.graph, v),
        }
    }

    /// The symbol of each of the value's dimensions (see [`Step::dims`]).
    fn dims(&mut self, v: ValueId) -> Result<Vec<Option<usize>>> {
        self.shape(v)?; // every symbol has a maximum
        let mut out = Vec::new();
        for d in self.graph.ty(v).shape.dims() {
            out.push(match d {
                Dim::Known(_) => None,
                Dim::Sym(s) => Some(match self.p.symbols.iter().position(|(n, _)| n == s) {
                    Some(i) => i,
                    None => {
                        self.p.symbols.push((s.clone(), self.max[s]));
                        self.p.symbols.len() - 1
                    }
                }),
            });
        }
        Ok(out)
    }

    fn users(&self, v: ValueId) -> &[ValueId] {
        &self.users[v.index()]
    }

    /// How parameter `v` (of `shape`) is stored: see [`Layout`].
    fn weight_layout(&self, v: ValueId, shape: &[u64], outputs: &HashSet<ValueId>) -> Layout {
        let g = self.graph;
        let users = self.users(v);
        let winograd_weight = |&conv: &ValueId| {
            let n = g.node(conv);
            // sizes as lowered (a symbolic batch at its maximum)
            let sizes = |x: ValueId| self.shape(x).unwrap_or_default();
            matches!(&n.op, Op::Conv(attrs) if n.args[1] == v && n.args[0] != v && n.ty.dtype == Dtype::F32
                && g.ty(n.args[0]).dtype == Dtype::F32 && winograd(attrs, &sizes(n.args[0]), shape, &sizes(conv)).is_some())
        };
        if !self.row_major_weights && g.ty(v).dtype == Dtype::F32 && !users.is_empty() && !outputs.contains(&v) && users.iter().all(winograd_weight) {
            return Layout::Winograd;
        }
        let only_transposed = !self.row_major_weights
            && shape.len() == 2
            && g.ty(v).dtype == Dtype::F32
            && !users.is_empty()
            && users.iter().all(|&t| matches!(&g.node(t).op, Op::Transpose { perm } if perm == &[1, 0]))
            && !outputs.contains(&v);
        if !only_transposed {
            return Layout::RowMajor;
        }
        let f32_gemm_operand = |t: ValueId| {
            let users = self.users(t);
            !outputs.contains(&t)
                && !users.is_empty()
                && users.iter().all(|&m| {
                    let n = g.node(m);
                    matches!(n.op, Op::MatMul) && n.args[1] == t && n.args[0] != t && n.ty.dtype == Dtype::F32 && g.ty(n.args[0]).dtype == Dtype::F32
                })
        };
        if users.iter().all(|&t| f32_gemm_operand(t)) {
            Layout::Panels
        } else {
            Layout::Transposed
        }
    }

    /// An error for a use of a symbolic dimension compiled code does not support.
    fn unsupported_symbolic(&self, v: ValueId, what: &str) -> Error {
        Error::user(format!("{} (shape {}): compiled code does not support {what} yet", self.describe(v), self.graph.ty(v).shape))
        .note("give the dimension a static size with --shape")
    }

    /// Symbolic dimensions must come before every static dimension larger than 1, so a
    /// row-major layout for the maxima is also one for smaller values (a prefix).
    fn require_leading(&self, v: ValueId, dims: &[Option<usize>], shape: &[u64], what: &str) -> Result<()> {
        let first_static = dims.iter().zip(shape).position(|(d, &n)| d.is_none() && n > 1).unwrap_or(dims.len());
        if dims[first_static..].iter().any(Option::is_some) {
            return Err(self.unsupported_symbolic(v, &format!("{what} with a symbolic dimension after a static one")));
        }
        Ok(())
    }

    fn step(&mut self, kernel: Kernel, origins: Vec<String>, dims: Vec<Option<usize>>) {
        self.p.steps.push(Step { kernel, origins, dims });
    }

    fn buffer(&mut self, name: String, dtype: Dtype, len: u64, storage: Storage) -> BufId {
        let id = BufId(self.p.buffers.len());
        self.p.buffers.push(Buffer { name, dtype, len, storage });
        id
    }

    fn origin(&self, v: ValueId) -> String {
        let n = self.graph.node(v);
        match &n.origin {
            Some(o) => format!("{} ({o})", n.op.name()),
            None => n.op.name().to_string(),
        }
    }

    fn run(mut self) -> Result<Program> {
        let graph = self.graph;
        // Every op the generated C cannot compute, listed at once.
        let unsupported: Vec<String> = graph.ids().filter_map(|v| lacking(graph, v).map(|why| format!("{} ({why})", crate::passes::shape::describe_node(graph, v)))).collect();
        if !unsupported.is_empty() {
            return Err(Error::user(format!("the C target cannot compile {} of the model's ops yet: {}", unsupported.len(), unsupported.join("; "))));
        }
        let outputs: HashSet<ValueId> = graph.outputs.iter().map(|o| o.value).collect();
        for v in graph.ids() {
            self.lower_node(v, &outputs)?;
        }
        for (i, o) in graph.outputs.iter().enumerate() {
            let shape = self.shape(o.value)?;
            let len = shape.iter().product();
            let dtype = graph.ty(o.value).dtype;
            let dims = self.dims(o.value)?;
            self.require_leading(o.value, &dims, &shape, &format!("the model output {:?}", o.name))?;
            let buf = self.buffer(format!("out_{}", i), dtype, len, Storage::Output(i));
            let out = View::contiguous(buf, &shape);
            let expr = self.expr_of(o.value)?;
            self.step(Kernel::Map { out, expr }, vec![format!("output {:?}", o.name)], dims.clone());
            self.p.outputs.push(Port { name: o.name.clone(), buf, shape, dims, layout: Layout::RowMajor });
            if o.loss {
                self.p.loss = Some(i);
            }
        }
        Ok(self.p)
    }

    /// The value as an expression over the iteration space of its own shape
    /// (loop variable d indexes dimension d).
    fn expr_of(&mut self, v: ValueId) -> Result<Expr> {
        if let Some(&(x, d)) = self.scalars.get(&v) {
            return Ok(Expr::Const(x, d));
        }
        let view = self.view_of(v)?;
        let vars = (0..view.shape.len()).collect();
        Ok(Expr::Load { view, vars })
    }

    /// The value in memory (a view); a scalar constant is written into a buffer.
    fn view_of(&mut self, v: ValueId) -> Result<View> {
        if let Some(view) = self.views.get(&v) {
            return Ok(view.clone());
        }
        let Some(&(x, d)) = self.scalars.get(&v) else {
            return Err(Error::internal(format!("lowering: value %{} has no view", v.0)));
        };
        self.map(v, Expr::Const(x, d))?;
        self.view_of(v)
    }

    /// Computes the elementwise value `v` into a new buffer.
    fn map(&mut self, v: ValueId, expr: Expr) -> Result<()> {
        let shape = self.shape(v)?;
        let buf = self.arena(v, self.graph.ty(v).dtype, &shape);
        let out = View::contiguous(buf, &shape);
        let dims = self.dims(v)?;
        self.step(Kernel::Map { out: out.clone(), expr }, vec![self.origin(v)], dims);
        self.views.insert(v, out);
        Ok(())
    }

    /// A contiguous view of the value, copying if its view is strided.
    fn contiguous(&mut self, v: ValueId) -> Result<View> {
        let view = self.view_of(v)?;
        if view.is_contiguous() {
            return Ok(view);
        }
        let buf = self.arena(v, self.graph.ty(v).dtype, &view.shape);
        let out = View::contiguous(buf, &view.shape);
        let vars = (0..view.shape.len()).collect();
        let dims = self.dims(v)?;
        self.step(Kernel::Map { out: out.clone(), expr: Expr::Load { view, vars } }, vec![format!("layout copy for {}", self.origin(v))], dims);
        Ok(out)
    }

    fn arena(&mut self, v: ValueId, dtype: Dtype, shape: &[u64]) -> BufId {
        let name = match &self.graph.node(v).name {
            Some(n) => format!("{n}_{}", v.0),
            None => format!("t{}", v.0),
        };
        self.buffer(name, dtype, shape.iter().product::<u64>().max(1), Storage::Arena { offset: 0 })
    }

    /// For a stride-1 convolution `v` with padding, a kernel that copies its input `x`
    /// into a zero-padded buffer, returned; the convolution then needs no padding.
    /// runtime-c reads an unpadded stride-1 convolution's input in place (each depth row
    /// of a GEMM panel is a run of the input) where padding would need an im2col copy
    /// KH*KW times the input's size. `None` when that does not apply (or the padded
    /// input would be too large).
    fn pad_for_conv(&mut self, v: ValueId, x: &View, attrs: &ConvAttrs) -> Result<Option<View>> {
        if attrs.stride.iter().any(|&s| s != 1) || attrs.padding.iter().all(|&p| p == (0, 0)) {
            return Ok(None);
        }
        let pads: Vec<(u64, u64)> = [(0, 0), (0, 0)].into_iter().chain(attrs.padding.iter().copied()).collect();
        let dtype = self.graph.ty(v).dtype;
        let full: Option<Vec<u64>> = x.shape.iter().zip(&pads).map(|(&n, &(lo, hi))| n.checked_add(lo)?.checked_add(hi)).collect();
        let Some(full) = full.filter(|f| buffer_bytes(f, dtype).is_some()) else {
            return Ok(None);
        };
        let x_value = self.graph.node(v).args[0];
        let buf = self.arena(x_value, dtype, &full);
        let out = View::contiguous(buf, &full);
        let expr = padded(x.clone(), &pads, &full, 0.0, dtype);
        let dims = self.dims(x_value)?;
        self.step(Kernel::Map { out: out.clone(), expr }, vec![format!("padding of {}", self.origin(v))], dims);
        Ok(Some(out))
    }

    /// Convolution `v` as a call to the runtime (see [`loops::runtime_kernel`]);
    /// returns the output's view.
    fn conv_call(&mut self, v: ValueId, attrs: &ConvAttrs, shape: &[u64]) -> Result<View> {
        let arg = |i: usize| self.graph.node(v).args[i];
        let dims = self.dims(v)?;
        let mut x = self.contiguous(arg(0))?;
        let mut attrs = attrs.clone();
        let by_winograd = self.views.get(&arg(1)).is_some_and(|w| self.winograd.contains(&w.buf));
        if !by_winograd {
            if let Some(padded) = self.pad_for_conv(v, &x, &attrs)? {
                x = padded;
                attrs.padding.iter_mut().for_each(|p| *p = (0, 0));
            }
        }
        let w = self.contiguous(arg(1))?;
        let buf = self.arena(v, self.graph.ty(v).dtype, shape);
        let out = View::contiguous(buf, shape);
        let scratch = if by_winograd {
            let floats = winograd(&attrs, &x.shape, &w.shape, shape);
            let floats = floats.ok_or_else(|| Error::internal(format!("{}: a Winograd weight on a convolution that cannot use it", self.describe(v))))?;
            let buf = self.buffer("winograd_scratch".into(), Dtype::F32, floats, Storage::Arena { offset: 0 });
            Some(View::contiguous(buf, &[floats]))
        } else {
            None
        };
        self.step(Kernel::Conv { x, w, out: out.clone(), attrs, epilogue: None, scratch }, vec![self.origin(v)], dims);
        Ok(out)
    }

    fn lower_node(&mut self, v: ValueId, outputs: &HashSet<ValueId>) -> Result<()> {
        let node = self.graph.node(v);
        let shape = self.shape(v)?;
        let dtype = node.ty.dtype;
        let arg = |i: usize| node.args[i];
        match &node.op {
            Op::Input => {
                let idx = self.p.inputs.len();
                let name = node.name.clone().unwrap_or_default();
                let dims = self.dims(v)?;
                self.require_leading(v, &dims, &shape, "a model input")?;
                let buf = self.buffer(name.clone(), dtype, shape.iter().product::<u64>().max(1), Storage::Input(idx));
                self.p.inputs.push(Port { name, buf, shape: shape.clone(), dims, layout: Layout::RowMajor });
                self.views.insert(v, View::contiguous(buf, &shape));
            }
            Op::Param => {
                let name = node.name.clone().unwrap_or_default();
                let offset = self.p.weights_size;
                let dims = self.dims(v)?;
                if dims.iter().any(Option::is_some) {
                    return Err(self.unsupported_symbolic(v, "a parameter with a symbolic dimension"));
                }
                let layout = self.weight_layout(v, &shape, outputs);
                let mut port = Port { name, buf: BufId(self.p.buffers.len()), shape: shape.clone(), dims, layout };
                let stored = port.stored_len();
                port.buf = self.buffer(port.name.clone(), dtype, stored.max(1), Storage::Weight { offset });
                self.p.weights_size = align(offset + stored * dtype.size() as u64);
                let buf = port.buf;
                self.p.weights.push(port);
                if layout == Layout::Winograd {
                    self.winograd.insert(buf);
                }
                if matches!(layout, Layout::RowMajor | Layout::Winograd) {
                    // (a Winograd weight is addressed only by its convolutions' runtime call)
                    self.views.insert(v, View::contiguous(buf, &shape));
                } else {
                    // Stored as [K, N] (in panels, addressed only by the GEMM); the
                    // parameter itself is its transposed view.
                    self.views.insert(v, View { buf, shape: shape.clone(), strides: vec![1, shape[0] as i64], offset: 0 });
                }
            }
            Op::Constant(c) => {
                let t = &self.graph.consts[c.0 as usize];
                if t.numel() == 1 {
                    self.scalars.insert(v, (t.get(0).unwrap_or_default(), t.dtype()));
                } else {
                    let idx = self.p.consts.len();
                    self.p.consts.push(t.clone());
                    let buf = self.buffer(format!("const{idx}"), t.dtype(), t.numel().max(1) as u64, Storage::Const(idx));
                    self.views.insert(v, View::contiguous(buf, &shape));
                }
            }
            Op::Unary(u) => {
                let x = self.expr_at(arg(0), &shape)?;
                self.map(v, Expr::Unary(*u, Box::new(x), dtype))?;
            }
            Op::Binary(b) => {
                let l = self.expr_at(arg(0), &shape)?;
                let r = self.expr_at(arg(1), &shape)?;
                self.map(v, Expr::Binary(*b, Box::new(l), Box::new(r), dtype))?;
            }
            Op::Where => {
                let c = self.expr_at(arg(0), &shape)?;
                let a = self.expr_at(arg(1), &shape)?;
                let b = self.expr_at(arg(2), &shape)?;
                self.map(v, Expr::Where(Box::new(c), Box::new(a), Box::new(b), dtype))?;
            }
            Op::Cast { to } => {
                let x = self.expr_at(arg(0), &shape)?;
                self.map(v, Expr::Cast(Box::new(x), *to))?;
            }
            // The same value; only differentiation tells them apart.
            Op::StopGradient => match self.scalars.get(&arg(0)) {
                Some(&c) => {
                    self.scalars.insert(v, c);
                }
                None => {
                    let view = self.view_of(arg(0))?;
                    self.views.insert(v, view);
                }
            },
            Op::Iota { axis, dtype, .. } => {
                self.map(v, Expr::Cast(Box::new(Expr::Index(*axis)), *dtype))?;
            }
            Op::Reshape { .. } => {
                let (from, to) = (self.dims(arg(0))?, self.dims(v)?);
                let in_shape = self.shape(arg(0))?;
                self.require_leading(arg(0), &from, &in_shape, "a reshape")?;
                self.require_leading(v, &to, &shape, "a reshape")?;
                if from.iter().flatten().ne(to.iter().flatten()) {
                    return Err(self.unsupported_symbolic(v, "a reshape that changes the symbolic dimensions"));
                }
                let src = self.view_of(arg(0))?;
                let view = match reshape_view(&src, &shape) {
                    Some(view) => view,
                    None => {
                        let src = self.contiguous(arg(0))?;
                        View { buf: src.buf, shape: shape.clone(), strides: contiguous_strides(&shape), offset: src.offset }
                    }
                };
                self.views.insert(v, view);
            }
            Op::Transpose { perm } => {
                let src = self.view_of(arg(0))?;
                let strides = perm.iter().map(|&p| src.strides[p]).collect();
                self.views.insert(v, View { buf: src.buf, shape, strides, offset: src.offset });
            }
            Op::BroadcastTo { .. } => {
                let src = self.view_of(arg(0))?;
                self.views.insert(v, broadcast_view(&src, &shape));
            }
            Op::Slice { ranges } => {
                let src = self.view_of(arg(0))?;
                let dims = self.dims(arg(0))?;
                let mut offset = src.offset;
                let mut strides = Vec::new();
                for (d, r) in ranges.iter().enumerate() {
                    let (start, step, len) = r.resolve(src.shape[d]).map_err(Error::internal)?;
                    if dims[d].is_some() && (start, step, len) != (0, 1, src.shape[d]) {
                        return Err(self.unsupported_symbolic(v, "slicing along a symbolic dimension"));
                    }
                    // A huge stride (a pooling VJP's strided slice) must not wrap.
                    let too_large = || Error::user(format!("{}: a slice's strides do not fit in 64 bits", self.origin(v)));
                    offset = start.checked_mul(src.strides[d]).and_then(|o| offset.checked_add(o)).ok_or_else(too_large)?;
                    strides.push(step.checked_mul(src.strides[d]).ok_or_else(too_large)?);
                }
                self.views.insert(v, View { buf: src.buf, shape, strides, offset });
            }
            Op::Pad { pads, value } => {
                let dims = self.dims(arg(0))?;
                if dims.iter().zip(pads).any(|(d, &p)| d.is_some() && p != (0, 0)) {
                    return Err(self.unsupported_symbolic(v, "padding along a symbolic dimension"));
                }
                let src = self.view_of(arg(0))?;
                let e = padded(src, pads, &shape, *value, dtype);
                self.map(v, e)?;
            }
            Op::Concat { axis } => {
                // Piecewise: out[.., i, ..] = i < n0 ? a[.., i, ..] : i < n0 + n1 ? b[.., i - n0, ..] : ...
                if self.dims(v)?[*axis].is_some() {
                    return Err(self.unsupported_symbolic(v, "concatenating along a symbolic dimension"));
                }
                let mut pieces = Vec::new();
                let mut start = 0u64;
                for &a in &node.args {
                    let mut view = self.view_of(a)?;
                    let n = view.shape[*axis];
                    view.offset -= start as i64 * view.strides[*axis];
                    view.shape = shape.clone();
                    pieces.push((start + n, Expr::Load { view, vars: (0..shape.len()).collect() }));
                    start += n;
                }
                let (_, mut e) = pieces.pop().ok_or_else(|| Error::internal("concat of nothing"))?;
                while let Some((end, piece)) = pieces.pop() {
                    let c = Expr::Binary(BinaryOp::Lt, Box::new(Expr::Index(*axis)), Box::new(Expr::Const(end as f64, Dtype::I64)), Dtype::Bool);
                    e = Expr::Select(Box::new(c), Box::new(piece), Box::new(e), dtype);
                }
                self.map(v, e)?;
            }
            Op::Gather { axis } => {
                // out[pre..., idx..., post...] = data[pre..., indices[idx...], post...]
                if self.dims(arg(0))?[*axis].is_some() {
                    return Err(self.unsupported_symbolic(v, "indexing along a symbolic dimension"));
                }
                let data = self.view_of(arg(0))?;
                let idx_rank = self.graph.ty(arg(1)).rank();
                let index_vars: Vec<usize> = (*axis..axis + idx_rank).collect();
                let idx_view = self.view_of(arg(1))?;
                let index = Expr::Load { view: idx_view, vars: index_vars };
                let mut vars = Vec::new();
                for d in 0..data.shape.len() {
                    vars.push(if d < *axis { d } else if d == *axis { usize::MAX } else { d - 1 + idx_rank });
                }
                self.map(v, Expr::Gather { view: data, vars, axis: *axis, index: Box::new(index) })?;
            }
            Op::MatMul => {
                let mut a = self.view_of(arg(0))?;
                let mut b = self.view_of(arg(1))?;
                // NumPy's rank-1 promotion: [k] is [1, k] on the left, [k, 1] on the right.
                if a.shape.len() == 1 {
                    a = View { buf: a.buf, shape: vec![1, a.shape[0]], strides: vec![0, a.strides[0]], offset: a.offset };
                }
                if b.shape.len() == 1 {
                    b = View { buf: b.buf, shape: vec![b.shape[0], 1], strides: vec![b.strides[0], 0], offset: b.offset };
                }
                let (m, n) = (a.shape[a.shape.len() - 2], b.shape[b.shape.len() - 1]);
                let batch: Vec<u64> = shape[..shape.len() - (self.graph.ty(arg(0)).rank().min(2) + self.graph.ty(arg(1)).rank().min(2) - 2)]
                    .to_vec();
                let mut full = batch.clone();
                full.extend([m, n]);
                let a = batch_view(&a, &batch);
                let b = batch_view(&b, &batch);
                // The domain [batch..., m, n, k], with rank-1 operands promoted as above.
                let (mut da, mut db) = (self.dims(arg(0))?, self.dims(arg(1))?);
                if da.len() == 1 {
                    da.insert(0, None);
                }
                if db.len() == 1 {
                    db.push(None);
                }
                let mut dims = self.dims(v)?[..batch.len()].to_vec();
                dims.extend([da[da.len() - 2], db[db.len() - 1], da[da.len() - 1]]);
                let buf = self.arena(v, dtype, &shape);
                let c = View::contiguous(buf, &full);
                self.step(Kernel::Gemm { a, b, c, epilogue: None }, vec![self.origin(v)], dims);
                self.views.insert(v, View::contiguous(buf, &shape));
            }
            Op::Conv(attrs) => {
                if self.dims(arg(0))?[1..].iter().any(Option::is_some) {
                    return Err(self.unsupported_symbolic(arg(0), "a convolution with symbolic channels or spatial size"));
                }
                let out = if loops::runtime_kernel(self.graph.ty(arg(0)).dtype, dtype, attrs.stride.len()) {
                    self.conv_call(v, attrs, &shape)?
                } else {
                    self.conv_loops(v, attrs, &shape)?
                };
                self.views.insert(v, out.clone());
                if let Some(&bias) = node.args.get(2) {
                    // out + bias (broadcast), which `fuse` makes the convolution's epilogue.
                    let b = self.expr_at(bias, &shape)?;
                    let load = Expr::Load { view: out, vars: (0..shape.len()).collect() };
                    self.map(v, Expr::Binary(BinaryOp::Add, Box::new(load), Box::new(b), dtype))?;
                    let origin = format!("bias of {}", self.origin(v));
                    if let Some(step) = self.p.steps.last_mut() {
                        step.origins = vec![origin];
                    }
                }
            }
            Op::Pool(attrs) => {
                let dims = self.dims(v)?;
                if dims[dims.len() - attrs.kernel.len()..].iter().any(Option::is_some) {
                    return Err(self.unsupported_symbolic(v, "pooling over a symbolic spatial size"));
                }
                let out = if loops::runtime_kernel(self.graph.ty(arg(0)).dtype, dtype, attrs.kernel.len()) {
                    // The runtime flattens the leading dimensions.
                    self.require_leading(v, &dims, &shape, "pooling")?;
                    let x = self.contiguous(arg(0))?;
                    let out = View::contiguous(self.arena(v, dtype, &shape), &shape);
                    self.step(Kernel::Pool { x, out: out.clone(), attrs: attrs.clone() }, vec![self.origin(v)], dims);
                    out
                } else {
                    self.pool_loops(v, attrs, &shape)?
                };
                self.views.insert(v, out);
            }
            Op::Softmax { axis } => {
                if loops::runtime_kernel(self.graph.ty(arg(0)).dtype, dtype, 0) {
                    // The runtime flattens the dimensions before the axis.
                    let dims = self.dims(v)?;
                    if dims[*axis..].iter().any(Option::is_some) {
                        return Err(self.unsupported_symbolic(v, "softmax along or inside a symbolic dimension"));
                    }
                    self.require_leading(v, &dims, &shape, "softmax")?;
                    let x = self.contiguous(arg(0))?;
                    let out = View::contiguous(self.arena(v, dtype, &shape), &shape);
                    self.step(Kernel::Softmax { x, out: out.clone(), axis: *axis }, vec![self.origin(v)], dims);
                    self.views.insert(v, out);
                } else {
                    let out = self.softmax_loops(v, *axis, &shape)?;
                    self.views.insert(v, out);
                }
            }
            // keepdim only changes the value's shape, not the memory the kernel writes.
            Op::Reduce { kind, axes, .. } => {
                let in_shape = self.shape(arg(0))?;
                let dims = self.reduce_dims(arg(0), axes, *kind == ReduceKind::Mean)?;
                let (expr, reduced) = self.reduction_input(arg(0), &in_shape, axes)?;
                let n: u64 = reduced.iter().product();
                let scale = (*kind == ReduceKind::Mean).then(|| 1.0 / n as f64);
                let kind = if *kind == ReduceKind::Mean { ReduceKind::Sum } else { *kind };
                let buf = self.arena(v, dtype, &shape);
                let kept: Vec<u64> = kept_shape(&in_shape, axes);
                let out = View::contiguous(buf, &kept);
                self.step(Kernel::Reduce { out, reduced, kind, expr, scale }, vec![self.origin(v)], dims);
                self.views.insert(v, View::contiguous(buf, &shape));
            }
            Op::ArgReduce { kind, axis, .. } => {
                let in_shape = self.shape(arg(0))?;
                let axes: Vec<usize> = match axis {
                    Some(a) => vec![*a],
                    None => (0..in_shape.len()).collect(),
                };
                let mut dims = self.reduce_dims(arg(0), &axes, false)?;
                if axis.is_none() {
                    if dims.iter().any(Option::is_some) {
                        return Err(self.unsupported_symbolic(arg(0), "the flattened argmax/argmin of a symbolic shape"));
                    }
                    dims = vec![None];
                }
                // Over the flattened tensor, the index is the row-major position.
                let (expr, reduced) = if axis.is_none() {
                    let flat = self.contiguous(arg(0))?;
                    let n: u64 = in_shape.iter().product();
                    let view = View { buf: flat.buf, shape: vec![n], strides: vec![1], offset: flat.offset };
                    (Expr::Load { view, vars: vec![0] }, vec![n])
                } else {
                    self.reduction_input(arg(0), &in_shape, &axes)?
                };
                let buf = self.arena(v, dtype, &shape);
                let kept = if axis.is_none() { vec![] } else { kept_shape(&in_shape, &axes) };
                let out = View::contiguous(buf, &kept);
                self.step(Kernel::ArgReduce { out, reduced: reduced[0], kind: *kind, expr }, vec![self.origin(v)], dims);
                self.views.insert(v, View::contiguous(buf, &shape));
            }
            Op::Variance { axes, correction, .. } => {
                // Two passes, as the interpreter: mean, then Σ(x - mean)² / (n - correction).
                let in_shape = self.shape(arg(0))?;
                let dims = self.reduce_dims(arg(0), axes, true)?;
                let (expr, reduced) = self.reduction_input(arg(0), &in_shape, axes)?;
                let n: u64 = reduced.iter().product();
                let kept = kept_shape(&in_shape, axes);
                let mean_buf = self.arena(v, dtype, &kept);
                let mean = View::contiguous(mean_buf, &kept);
                self.step(
                    Kernel::Reduce { out: mean.clone(), reduced: reduced.clone(), kind: ReduceKind::Sum, expr: expr.clone(), scale: Some(1.0 / n as f64) },
                    vec![format!("mean for {}", self.origin(v))],
                    dims.clone(),
                );
                let mean_vars: Vec<usize> = (0..kept.len()).collect();
                let centered = Expr::Binary(BinaryOp::Sub, Box::new(expr), Box::new(Expr::Load { view: mean, vars: mean_vars }), dtype);
                let sq = Expr::Binary(BinaryOp::Mul, Box::new(centered.clone()), Box::new(centered), dtype);
                let buf = self.arena(v, dtype, &shape);
                let out = View::contiguous(buf, &kept);
                let denom = (n as f64 - correction).max(0.0);
                self.step(Kernel::Reduce { out, reduced, kind: ReduceKind::Sum, expr: sq, scale: Some(1.0 / denom) }, vec![self.origin(v)], dims);
                self.views.insert(v, View::contiguous(buf, &shape));
            }
        }
        Ok(())
    }

    /// The domain symbols of a reduction of `x` over `axes`: kept dimensions, then
    /// reduced ones. A mean's count must be static.
    fn reduce_dims(&mut self, x: ValueId, axes: &[usize], mean: bool) -> Result<Vec<Option<usize>>> {
        let dims = self.dims(x)?;
        let reduced: Vec<Option<usize>> = axes.iter().map(|&a| dims[a]).collect();
        if mean && reduced.iter().any(Option::is_some) {
            return Err(self.unsupported_symbolic(x, "a mean or variance over a symbolic dimension"));
        }
        let mut out: Vec<Option<usize>> = (0..dims.len()).filter(|d| !axes.contains(d)).map(|d| dims[d]).collect();
        out.extend(reduced);
        Ok(out)
    }

    /// The input of a reduction as an expression over (kept dims..., reduced dims...).
    fn reduction_input(&mut self, x: ValueId, in_shape: &[u64], axes: &[usize]) -> Result<(Expr, Vec<u64>)> {
        let view = self.view_of(x)?;
        let kept = in_shape.len() - axes.len();
        let mut vars = Vec::new();
        let (mut k, mut r) = (0usize, kept);
        for d in 0..in_shape.len() {
            if axes.contains(&d) {
                vars.push(r);
                r += 1;
            } else {
                vars.push(k);
                k += 1;
            }
        }
        let reduced = axes.iter().map(|&a| in_shape[a]).collect();
        Ok((Expr::Load { view, vars }, reduced))
    }

    /// The value broadcast to `shape` as an expression (NumPy alignment at the end).
    fn expr_at(&mut self, v: ValueId, shape: &[u64]) -> Result<Expr> {
        let e = self.expr_of(v)?;
        let own = self.shape(v)?;
        Ok(rebase(e, &own, shape))
    }
}

/// Why the generated C cannot compute node `v`, if it cannot: f16/bf16 have no C
/// arithmetic yet, and windows over integers no loop nest (their padding and the
/// average's rounding would need definitions of their own).
fn lacking(graph: &Graph, v: ValueId) -> Option<String> {
    let ty = graph.ty(v);
    if matches!(ty.dtype, Dtype::F16 | Dtype::Bf16) {
        Some(format!("type {ty}: no f16/bf16 arithmetic"))
    } else if matches!(graph.node(v).op, Op::Conv(_) | Op::Pool(_)) && !ty.dtype.is_float() {
        Some(format!("type {ty}: convolution and pooling take floats"))
    } else {
        None
    }
}

/// For each value, the nodes that take it as an argument, in order, each once.
fn users(graph: &Graph) -> Vec<Vec<ValueId>> {
    let mut users: Vec<Vec<ValueId>> = vec![Vec::new(); graph.nodes.len()];
    for u in graph.ids() {
        for a in &graph.node(u).args {
            let list = &mut users[a.index()];
            if list.last() != Some(&u) {
                list.push(u);
            }
        }
    }
    users
}

/// The number of nodes in an expression.
pub fn expr_size(e: &Expr) -> usize {
    let mut n = 0;
    e.walk(&mut |_| n += 1);
    n
}

/// Re-indexes an expression written over `own` dims so it reads at positions of
/// `target` (NumPy broadcasting: `own` aligns with the end of `target`, size-1 dims
/// repeat).
fn rebase(e: Expr, own: &[u64], target: &[u64]) -> Expr {
    if own == target {
        return e;
    }
    shift_vars(e, own, target.len() - own.len())
}

/// Renumbers loop variable `v` to `v + shift` (the operand's dimensions align with the
/// end of the target's), zeroing strides and indices of its size-1 dimensions.
fn shift_vars(e: Expr, own: &[u64], shift: usize) -> Expr {
    let f = |v: usize| v + shift;
    let rec = |x: Box<Expr>| Box::new(shift_vars(*x, own, shift));
    match e {
        Expr::Const(..) => e,
        // A size-1 dimension's index is always 0, wherever it repeats.
        Expr::Index(v) if v < own.len() && own[v] == 1 => Expr::Const(0.0, Dtype::I64),
        Expr::Index(v) => Expr::Index(f(v)),
        Expr::Load { mut view, vars } => {
            // A size-1 dimension of the operand repeats along the target's dimension.
            for (d, &var) in vars.iter().enumerate() {
                if var < own.len() && own[var] == 1 {
                    view.strides[d] = 0;
                }
            }
            Expr::Load { view, vars: vars.into_iter().map(|v| if v == usize::MAX { v } else { f(v) }).collect() }
        }
        Expr::Gather { mut view, vars, axis, index } => {
            for (d, &var) in vars.iter().enumerate() {
                if var != usize::MAX && var < own.len() && own[var] == 1 {
                    view.strides[d] = 0;
                }
            }
            Expr::Gather { view, vars: vars.into_iter().map(|v| if v == usize::MAX { v } else { f(v) }).collect(), axis, index: rec(index) }
        }
        Expr::Unary(u, a, d) => Expr::Unary(u, rec(a), d),
        Expr::Binary(b, l, r, d) => Expr::Binary(b, rec(l), rec(r), d),
        Expr::Select(c, a, b, d) => Expr::Select(rec(c), rec(a), rec(b), d),
        Expr::Where(c, a, b, d) => Expr::Where(rec(c), rec(a), rec(b), d),
        Expr::Cast(a, d) => Expr::Cast(rec(a), d),
    }
}

/// The bytes a buffer of `shape` takes, `None` past [`MAX_BUFFER_BYTES`] (sizes come
/// from the user: products must not overflow).
fn buffer_bytes(shape: &[u64], dtype: Dtype) -> Option<u64> {
    shape.iter().try_fold(dtype.size() as u64, |acc, &n| acc.checked_mul(n)).filter(|&b| b <= MAX_BUFFER_BYTES)
}

/// `out[i] = all(lo_d <= i_d < lo_d + n_d) ? src[i - lo] : value` over the padded
/// `shape`: `src` padded by `pads` (`(lo, hi)` per dimension).
fn padded(src: View, pads: &[(u64, u64)], shape: &[u64], value: f64, dtype: Dtype) -> Expr {
    let mut cond: Option<Expr> = None;
    let mut shifted = src.clone();
    for (d, &(lo, hi)) in pads.iter().enumerate() {
        shifted.offset -= lo as i64 * src.strides[d];
        if (lo, hi) == (0, 0) {
            continue;
        }
        let i = Expr::Index(d);
        let ge = Expr::Binary(BinaryOp::Ge, Box::new(i.clone()), Box::new(Expr::Const(lo as f64, Dtype::I64)), Dtype::Bool);
        let lt = Expr::Binary(BinaryOp::Lt, Box::new(i), Box::new(Expr::Const((lo + src.shape[d]) as f64, Dtype::I64)), Dtype::Bool);
        let both = Expr::Binary(BinaryOp::And, Box::new(ge), Box::new(lt), Dtype::Bool);
        cond = Some(match cond {
            None => both,
            Some(c) => Expr::Binary(BinaryOp::And, Box::new(c), Box::new(both), Dtype::Bool),
        });
    }
    shifted.shape = shape.to_vec();
    let load = Expr::Load { view: shifted, vars: (0..shape.len()).collect() };
    match cond {
        None => load,
        Some(c) => Expr::Select(Box::new(c), Box::new(load), Box::new(Expr::Const(value, dtype)), dtype),
    }
}

/// The view reshaped to `shape` without a copy, when its elements are laid out so
/// that is possible: each group of old dimensions that multiplies out to a group of new
/// ones must be contiguous within itself (NumPy's rule for reshape without a copy).
fn reshape_view(src: &View, shape: &[u64]) -> Option<View> {
    if src.is_contiguous() || src.numel() == 0 {
        return Some(View { buf: src.buf, shape: shape.to_vec(), strides: contiguous_strides(shape), offset: src.offset });
    }
    // Size-1 dimensions do not constrain anything; they get stride 0.
    let old: Vec<(u64, i64)> = src.shape.iter().zip(&src.strides).filter(|(&n, _)| n != 1).map(|(&n, &s)| (n, s)).collect();
    let new: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] != 1).collect();
    let mut strides = vec![0i64; shape.len()];
    let (mut oi, mut ni) = (0, 0);
    while oi < old.len() && ni < new.len() {
        let (mut oj, mut nj) = (oi + 1, ni + 1);
        let (mut op, mut np) = (old[oi].0, shape[new[ni]]);
        while op != np {
            if op < np {
                op *= old.get(oj)?.0;
                oj += 1;
            } else {
                np *= shape[*new.get(nj)?];
                nj += 1;
            }
        }
        // The old group must be one strided run...
        if (oi..oj - 1).any(|k| old[k].1 != old[k + 1].1 * old[k + 1].0 as i64) {
            return None;
        }
        // ...which the new group splits row-major.
        let mut stride = old[oj - 1].1;
        for k in (ni..nj).rev() {
            strides[new[k]] = stride;
            stride *= shape[new[k]] as i64;
        }
        oi = oj;
        ni = nj;
    }
    Some(View { buf: src.buf, shape: shape.to_vec(), strides, offset: src.offset })
}

/// A view broadcast to `shape` (NumPy alignment; broadcast dims get stride 0).
fn broadcast_view(src: &View, shape: &[u64]) -> View {
    let shift = shape.len() - src.shape.len();
    let mut strides = vec![0i64; shape.len()];
    for (d, &n) in src.shape.iter().enumerate() {
        strides[d + shift] = if n == 1 { 0 } else { src.strides[d] };
    }
    View { buf: src.buf, shape: shape.to_vec(), strides, offset: src.offset }
}

/// A matmul operand with its batch dimensions broadcast to `batch`.
fn batch_view(x: &View, batch: &[u64]) -> View {
    let mat = &x.shape[x.shape.len() - 2..];
    let mut shape = batch.to_vec();
    shape.extend_from_slice(mat);
    broadcast_view(x, &shape)
}

fn kept_shape(shape: &[u64], axes: &[usize]) -> Vec<u64> {
    shape.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &n)| n).collect()
}

/// Buffers an expression reads, with repeats.
pub fn expr_bufs(e: &Expr, out: &mut Vec<BufId>) {
    e.walk(&mut |e| {
        if let Expr::Load { view, .. } | Expr::Gather { view, .. } = e {
            out.push(view.buf);
        }
    });
}

/// A kernel's expressions (a loop body or an epilogue).
pub fn kernel_exprs(k: &Kernel) -> Vec<&Expr> {
    match k {
        Kernel::Map { expr, .. } | Kernel::Reduce { expr, .. } | Kernel::ArgReduce { expr, .. } => vec![expr],
        Kernel::Gemm { epilogue, .. } | Kernel::Conv { epilogue, .. } => epilogue.iter().collect(),
        Kernel::Pool { .. } | Kernel::Softmax { .. } => vec![],
    }
}

/// Buffers a kernel reads (an epilogue's read of the kernel's own output included).
pub fn kernel_reads(k: &Kernel) -> Vec<BufId> {
    let mut out = kernel_read_uses(k);
    out.sort();
    out.dedup();
    out
}

/// Each read a kernel makes, with repeats: a runtime call's operands, then every load
/// of its expressions.
pub fn kernel_read_uses(k: &Kernel) -> Vec<BufId> {
    let mut out = Vec::new();
    match k {
        Kernel::Map { .. } | Kernel::Reduce { .. } | Kernel::ArgReduce { .. } => {}
        Kernel::Gemm { a, b, .. } => out.extend([a.buf, b.buf]),
        // the scratch too, so it lives (only) while the kernel runs
        Kernel::Conv { x, w, scratch, .. } => out.extend([x.buf, w.buf].into_iter().chain(scratch.as_ref().map(|s| s.buf))),
        Kernel::Pool { x, .. } | Kernel::Softmax { x, .. } => out.push(x.buf),
    }
    for e in kernel_exprs(k) {
        expr_bufs(e, &mut out);
    }
    out
}

/// The buffer a kernel writes.
pub fn kernel_writes(k: &Kernel) -> BufId {
    match k {
        Kernel::Map { out, .. }
        | Kernel::Reduce { out, .. }
        | Kernel::ArgReduce { out, .. }
        | Kernel::Conv { out, .. }
        | Kernel::Pool { out, .. }
        | Kernel::Softmax { out, .. } => out.buf,
        Kernel::Gemm { c, .. } => c.buf,
    }
}

/// Makes the kernel write buffer `to` instead (its output view keeps its shape).
pub fn retarget(k: &mut Kernel, to: BufId) {
    match k {
        Kernel::Map { out, .. }
        | Kernel::Reduce { out, .. }
        | Kernel::ArgReduce { out, .. }
        | Kernel::Conv { out, .. }
        | Kernel::Pool { out, .. }
        | Kernel::Softmax { out, .. } => out.buf = to,
        Kernel::Gemm { c, .. } => c.buf = to,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn winograd_takes_stride_1_3x3_convolutions_with_enough_channels_and_outputs() {
        let attrs = |stride: u64, dilation: u64, groups: u64| ConvAttrs { stride: vec![stride; 2], padding: vec![(1, 1); 2], dilation: vec![dilation; 2], groups };
        // cnn's: 64 -> 64 channels at 32x32, 64 tiles an image: 2 blocks, 2 slots
        let slot = 36 * 32 * (64 + 64 + 2);
        assert_eq!(winograd(&attrs(1, 1, 1), &[1, 64, 32, 32], &[64, 64, 3, 3], &[1, 64, 32, 32]), Some(2 * slot));
        // at batch 32, 64 blocks in at most 8 slots
        assert_eq!(winograd(&attrs(1, 1, 1), &[32, 64, 32, 32], &[64, 64, 3, 3], &[32, 64, 32, 32]), Some(8 * slot));
        // 4 tiles of 4x4 in one block of 32 columns: no, but 8 images of them fill it
        assert_eq!(winograd(&attrs(1, 1, 1), &[1, 64, 8, 8], &[64, 64, 3, 3], &[1, 64, 8, 8]), None);
        assert_eq!(winograd(&attrs(1, 1, 1), &[8, 64, 8, 8], &[64, 64, 3, 3], &[8, 64, 8, 8]), Some(36 * 32 * 130));
        // 16 x 17 outputs: 20 tiles, some sticking out
        assert_eq!(winograd(&attrs(1, 1, 1), &[1, 16, 18, 19], &[20, 16, 3, 3], &[1, 20, 16, 17]), Some(36 * 32 * (16 + 20 + 2)));
        for (a, x, w, out) in [
            (attrs(2, 1, 1), [1, 64, 32, 32], [64, 64, 3, 3], [1, 64, 16, 16]),
            (attrs(1, 2, 1), [1, 64, 32, 32], [64, 64, 3, 3], [1, 64, 30, 30]),
            (attrs(1, 1, 2), [1, 64, 32, 32], [64, 32, 3, 3], [1, 64, 32, 32]),
            (attrs(1, 1, 1), [1, 64, 32, 32], [64, 64, 5, 5], [1, 64, 30, 30]),
            (attrs(1, 1, 1), [1, 3, 32, 32], [64, 3, 3, 3], [1, 64, 32, 32]),
            (attrs(1, 1, 1), [1, 64, 32, 32], [8, 64, 3, 3], [1, 8, 32, 32]),
        ] {
            assert_eq!(winograd(&a, &x, &w, &out), None, "{a:?} {x:?} {w:?}");
        }
    }
}
