//! The program lowering produces and every program pass and code generator reads:
//! buffers, views over them, scalar expressions, kernels and the steps that run them,
//! and the model's ports; with the functions that look into kernels.
//!
//! **Architecture Invariant:** kernels run in list order; a kernel reads only buffers
//! written by earlier kernels, inputs, weights or constants. Until `memory` runs,
//! every arena buffer is written by exactly one kernel.

use std::hash::{Hash, Hasher};

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
    /// No memory: values one kernel computes and consumes itself (an attention's
    /// scores), named so that its expressions can read them.
    Local,
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
    /// Row-major and dense from the start with its dimensions in some order: every
    /// element of `numel()` elements from `offset` 0 is a distinct element of the view.
    pub fn is_dense(&self) -> bool {
        let mut dims: Vec<(i64, u64)> = self.strides.iter().copied().zip(self.shape.iter().copied()).filter(|&(_, n)| n > 1).collect();
        dims.sort_unstable();
        let mut next = 1i64;
        for (s, n) in dims {
            if s != next {
                return false;
            }
            next = next.saturating_mul(n as i64);
        }
        self.offset == 0
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
    /// The run-time value (as i64) of an extent: a symbol of [`Program::symbols`] or an
    /// expression of them, as in [`Step::dims`]. Moving elements between the layout
    /// for the symbols' maxima and the row-major one at their run-time values computes
    /// positions from these.
    Extent(Dim),
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
            Expr::Const(..) | Expr::Load { .. } | Expr::Index(_) | Expr::Extent(_) => {}
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
            Expr::Const(..) | Expr::Load { .. } | Expr::Index(_) | Expr::Extent(_) => {}
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
            Expr::Index(_) | Expr::Extent(_) => Dtype::I64,
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
            Expr::Extent(d) => d.hash(h),
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
            Kernel::Gemm { a, b, c, epilogue, scratch } => {
                a.hash(h);
                b.hash(h);
                c.hash(h);
                epilogue.hash(h);
                scratch.hash(h);
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
            Kernel::Attention { q, k, v, out, scores, score } => {
                q.hash(h);
                k.hash(h);
                v.hash(h);
                out.hash(h);
                scores.hash(h);
                score.hash(h);
            }
            Kernel::Dequantize { w, out, stored } => {
                w.hash(h);
                out.hash(h);
                stored.hash(h);
            }
            Kernel::Rows { out, cols, stats, expr } => {
                out.hash(h);
                cols.hash(h);
                for st in stats {
                    st.view.hash(h);
                    st.kind.hash(h);
                    st.expr.hash(h);
                    st.scale.is_some().hash(h);
                    if let Some(x) = st.scale {
                        hash_f64(x, h);
                    }
                    st.then.hash(h);
                }
                expr.hash(h);
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
    /// Lowering leaves `scratch` empty; a target's program pass may give it an arena
    /// buffer the library needs while the kernel runs (the C target's int8 products,
    /// `b` then a weight stored as [`Stored::Int8`]).
    Gemm { a: View, b: View, c: View, epilogue: Option<Expr>, scratch: Option<View> },
    /// NCHW convolution (1-d as H = 1) into contiguous `out`; input and weight
    /// contiguous; an epilogue as for `Gemm`. Lowering leaves `scratch` empty; a
    /// target's program pass may give it an arena buffer the library needs while the
    /// kernel runs (the C target's Winograd F(4x4, 3x3), its weight then in
    /// [`Layout::Winograd`]).
    Conv { x: View, w: View, out: View, attrs: ConvAttrs, epilogue: Option<Expr>, scratch: Option<View> },
    /// NCHW pooling (1-d as H = 1) into contiguous `out`; input contiguous.
    Pool { x: View, out: View, attrs: PoolAttrs },
    /// Softmax along `axis` of a contiguous input into contiguous `out`.
    Softmax { x: View, out: View, axis: usize },
    /// Attention in one kernel: `out = softmax(score(q @ k)) @ v`, the softmax along the
    /// scores' last axis, with the scores never stored. `q` is `[batch..., m, d]`, `k`
    /// `[batch..., d, n]` and `v` `[batch..., n, e]` (as a `Gemm`'s operands), `out`
    /// `[batch..., m, e]`, a permutation of its whole buffer's dimensions (the heads'
    /// transpose: `View::is_dense`). `scores` is a contiguous `[batch..., m, n]` view of
    /// a [`Storage::Local`] buffer that stands for the product: `score`, an expression
    /// over the scores' index space, reads it through loads of `scores` (as a `Gemm`'s
    /// epilogue reads `c`); without one the scores are the product. Formed by the
    /// `attention` pass for a library that computes it.
    Attention { q: View, k: View, v: View, out: View, scores: View, score: Option<Expr> },
    /// Row statistics and a map over the row in one kernel (LayerNorm's mean, variance
    /// and normalisation; RMSNorm; a softmax written as ops): `out` is contiguous, and
    /// its last `cols` dimensions are a row's elements, the others the rows. For each
    /// row the `stats` are computed in order, then `expr` writes every element of the
    /// row. The domain is `out`'s, and every expression reads a statistic through the
    /// load [`RowStat::load`] (its value at the row being computed). Formed by the
    /// `rows` pass from a chain of `Reduce` and `Map` kernels, for a target whose
    /// renderer runs it ([`super::Library::rows`]): the statistics never reach memory,
    /// and the row is read from memory once where it fits in cache.
    Rows { out: View, cols: usize, stats: Vec<RowStat>, expr: Expr },
    /// A weight stored narrow (`stored`, not [`Stored::F32`]) expanded to f32: `w` is
    /// the whole of the weight's buffer, its elements in their layout's order, and `out`
    /// a contiguous f32 buffer of as many elements, which the kernels that read the
    /// weight read instead. Added by a target's program pass (the C target's
    /// `mr_dequantize`).
    Dequantize { w: View, out: View, stored: Stored },
}

/// A statistic of a [`Kernel::Rows`]: a reduction over the row's elements, then
/// optionally a map of it.
#[derive(Debug, Clone, PartialEq)]
pub struct RowStat {
    /// A contiguous view of the whole of its [`Storage::Local`] buffer, shaped as the
    /// rows (the kernel's `out` without its last `cols` dimensions).
    pub view: View,
    pub kind: ReduceKind,
    /// The reduced value at each element of the row (over the kernel's domain).
    pub expr: Expr,
    /// Multiplies the result (a mean's 1/n).
    pub scale: Option<f64>,
    /// Replaces the result, as an in-place map would (`sqrt(variance + eps)`): reads
    /// only statistics, this one's load giving the value before.
    pub then: Option<Expr>,
}

impl RowStat {
    /// The load of this statistic at the row being computed.
    pub fn load(&self) -> Expr {
        Expr::Load { view: self.view.clone(), vars: (0..self.view.shape.len()).collect() }
    }
}

/// One kernel and the model ops it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub kernel: Kernel,
    /// `transpose (submodels.m_0 (Linear))`, for the comment above the kernel.
    pub origins: Vec<String>,
    /// For each dimension of the kernel's domain ([`Kernel::domain`]), its run-time
    /// extent: a symbol of [`Program::symbols`] or an expression of them (`4*B`, every
    /// coefficient positive); `None` for a static extent.
    pub dims: Vec<Option<Dim>>,
}

impl Step {
    /// The indices into `symbols` ([`Program::symbols`]) of the symbols that the extents
    /// of the domain dimensions `which` use, sorted.
    pub fn symbols_of(&self, which: impl IntoIterator<Item = usize>, symbols: &[(String, u64)]) -> Vec<usize> {
        let mut names = Vec::new();
        for d in which {
            if let Some(Some(e)) = self.dims.get(d) {
                e.symbols(&mut names);
            }
        }
        symbol_indices(&names, symbols)
    }

    /// The indices into `symbols` of every symbol the kernel uses: its loops' extents
    /// and the extents its expressions read ([`Expr::Extent`]), sorted.
    pub fn symbols_used(&self, symbols: &[(String, u64)]) -> Vec<usize> {
        let mut names = Vec::new();
        for e in self.dims.iter().flatten() {
            e.symbols(&mut names);
        }
        for e in kernel_exprs(&self.kernel) {
            expr_symbols(e, &mut names);
        }
        symbol_indices(&names, symbols)
    }
}

/// The symbols of the extents `e` reads ([`Expr::Extent`]), added to `out`.
pub fn expr_symbols<'a>(e: &'a Expr, out: &mut Vec<&'a str>) {
    e.walk(&mut |e| {
        if let Expr::Extent(d) = e {
            d.symbols(out);
        }
    });
}

/// The positions of `names` in `symbols`, sorted and without repeats.
pub fn symbol_indices(names: &[&str], symbols: &[(String, u64)]) -> Vec<usize> {
    let mut out: Vec<usize> = names.iter().filter_map(|n| symbols.iter().position(|(s, _)| s == n)).collect();
    out.sort_unstable();
    out.dedup();
    out
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
    /// How a parameter's elements (in `layout`'s order) are stored: narrowed from f32 by
    /// a target's program pass for `--quantize`; f32 for everything else.
    pub stored: Stored,
}

impl Port {
    /// The bytes this weight takes in the blob, `len` the elements of its layout (its
    /// buffer's, or none for an empty weight); `None` on overflow.
    pub fn stored_bytes(&self, len: u64, dtype: Dtype) -> Option<u64> {
        match (self.stored, self.layout, &self.shape[..]) {
            (Stored::Int8, _, _) if len == 0 => Some(0),
            // the operand [K, N] of a weight [N, K]
            (Stored::Int8, Layout::Panels, &[n, k]) => int8_panels_bytes(k, n),
            // the operand [KH*KW*C, O] of a convolution's weight [O, C, KH, KW]
            (Stored::Int8, Layout::ConvPanels, &[o, ref rest @ ..]) => int8_panels_bytes(rest.iter().try_fold(1u64, |n, &d| n.checked_mul(d))?, o),
            (Stored::Int8, _, _) => None,
            (stored, _, _) => stored.bytes(len, dtype),
        }
    }

    /// Whether kernel `k` reads this weight (of `len` elements) as it is stored, narrow
    /// or not: as the right operand of a product in column panels (`mr_sgemm_panels_q`
    /// widens them as it reads them; int8 ones an int8 product, `mr_gemm_i8_mt`, with its
    /// scratch), or as the whole weight of a convolution, row-major or
    /// Winograd-transformed (`mr_conv2d_q_mt` and `mr_conv2d_winograd_q_mt` widen it as
    /// they pack it), or in int8 panels (`mr_conv2d_i8_mt`, with its scratch).
    pub fn read_as_stored(&self, k: &Kernel, len: u64) -> bool {
        match k {
            Kernel::Gemm { a, b, scratch, .. } => {
                self.layout == Layout::Panels && b.buf == self.buf && a.buf != self.buf && (self.stored != Stored::Int8 || scratch.is_some())
            }
            Kernel::Conv { x, w, scratch, .. } if self.stored == Stored::Int8 => {
                self.layout == Layout::ConvPanels && w.buf == self.buf && x.buf != self.buf && w.offset == 0 && scratch.is_some()
            }
            Kernel::Conv { x, w, .. } => {
                let whole = w.offset == 0 && (self.layout == Layout::Winograd || (w.is_contiguous() && w.numel() == len));
                matches!(self.layout, Layout::RowMajor | Layout::Winograd) && w.buf == self.buf && x.buf != self.buf && whole
            }
            _ => false,
        }
    }
}

/// How a weight's elements are stored in the weights blob: its buffer's own element
/// type, or (for an f32 weight of a matrix product or convolution, `--quantize`) a
/// narrower form that the kernels read through a conversion to f32. The numbering is
/// the C runtime's (`MR_F32` ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Stored {
    /// The buffer's own element type (f32 for a weight that could be narrowed).
    #[default]
    F32 = 0,
    /// IEEE binary16, rounded to nearest even.
    F16 = 1,
    /// bfloat16 (the f32's upper half), rounded to nearest even.
    Bf16 = 2,
    /// Blocks of [`Q8_BLOCK`] consecutive elements: `nb` little-endian f32 scales, then
    /// one signed byte per element (element `e` is `scale[e / 32] * q[e]`).
    Q8_0 = 3,
    /// A matrix product's right operand in [`Layout::Panels`] (or a convolution's
    /// weight in [`Layout::ConvPanels`]) as int8 with one scale per column over all of
    /// K, for the int8 products of `mr_gemm_i8_mt` (`mr_conv2d_i8_mt`), which quantize
    /// the left operand's rows (the input's images) as they run (`MR_INT8`): f32
    /// scales, int32 column sums, then the codes in quads of 4 consecutive k per column
    /// (`codegen::weights::narrow_int8`). Not a sequence form: its size follows the
    /// matrix's shape ([`Port::stored_bytes`]).
    Int8 = 4,
}

/// Elements per block of [`Stored::Q8_0`].
pub const Q8_BLOCK: u64 = 32;

impl Stored {
    pub const ALL: [Stored; 5] = [Stored::F32, Stored::F16, Stored::Bf16, Stored::Q8_0, Stored::Int8];

    /// The name `--quantize` and the program text use.
    pub fn name(self) -> &'static str {
        match self {
            Stored::F32 => "f32",
            Stored::F16 => "f16",
            Stored::Bf16 => "bf16",
            Stored::Q8_0 => "q8_0",
            Stored::Int8 => "int8",
        }
    }

    /// The bytes `n` elements of `dtype` take stored so (`MR_STORED_BYTES`); `None` on
    /// overflow, and for [`Stored::Int8`], whose size is not one of a sequence.
    pub fn bytes(self, n: u64, dtype: Dtype) -> Option<u64> {
        match self {
            Stored::F32 => n.checked_mul(dtype.size() as u64),
            Stored::F16 | Stored::Bf16 => n.checked_mul(2),
            Stored::Q8_0 => n.div_ceil(Q8_BLOCK).checked_mul(4)?.checked_add(n),
            Stored::Int8 => None,
        }
    }
}

/// Columns per panel of [`Layout::Panels`] (`MR_PANEL` in the C runtime).
pub const PANEL: u64 = 32;

/// The bytes of a `[K, N]` operand stored as [`Stored::Int8`] (`MR_I8_PANELS_BYTES`):
/// per column of the padded panels a scale and a column sum, and K rounded up to 4
/// codes; `None` on overflow.
pub fn int8_panels_bytes(k: u64, n: u64) -> Option<u64> {
    n.div_ceil(PANEL).checked_mul(PANEL)?.checked_mul(k.checked_next_multiple_of(4)?.checked_add(8)?)
}

/// The deepest product an int8 one may be (`MR_I8_MAX_K`): its int32 sums are exact up
/// to it; a deeper weight is stored as q8_0.
pub const INT8_MAX_K: u64 = 65536;

/// The scratch an int8 product of `m` rows and depth `k` quantizes its left operand
/// into (`MR_I8_SCRATCH_BYTES`): per row, K rounded up to 4 codes, a scale and a zero
/// point; `None` on overflow.
pub fn int8_scratch_bytes(m: u64, k: u64) -> Option<u64> {
    m.checked_mul(k.checked_next_multiple_of(4)?.checked_add(8)?)
}

/// Output positions an int8 convolution's chunk takes (`MR_I8_CONV_CHUNK`), and the
/// chunks that run at once, each with a slot of scratch (`MR_I8_CONV_SLOTS`).
pub const INT8_CONV_CHUNK: u64 = 256;
pub const INT8_CONV_SLOTS: u64 = 8;

/// The scratch of an int8 convolution (`MR_I8_CONV_SCRATCH_BYTES`) of `n` images of
/// `c` channels, a `kernel` (KH, KW) window, `out` (OH, OW) positions, `stride` and
/// `dilation`: the slots of rows of its left operand, each image's scale and zero
/// point, and its codes over the padded positions it reads; `None` on overflow.
pub fn int8_conv_scratch_bytes(n: u64, c: u64, kernel: (u64, u64), out: (u64, u64), stride: (u64, u64), dilation: (u64, u64)) -> Option<u64> {
    let p = out.0.checked_mul(out.1)?;
    if n == 0 || p == 0 {
        return Some(0);
    }
    let rows = p.min(INT8_CONV_CHUNK);
    let tasks = n.checked_mul(p.div_ceil(rows))?.min(INT8_CONV_SLOTS);
    let span = |o: u64, s: u64, k: u64, d: u64| (o - 1).checked_mul(s)?.checked_add(k.checked_sub(1)?.checked_mul(d)?)?.checked_add(1);
    let codes = span(out.0, stride.0, kernel.0, dilation.0)?.checked_mul(span(out.1, stride.1, kernel.1, dilation.1)?)?.checked_mul(c)?.checked_mul(n)?;
    let k = c.checked_mul(kernel.0)?.checked_mul(kernel.1)?;
    tasks.checked_mul(int8_scratch_bytes(rows, k)?)?.checked_add(n.checked_mul(8)?)?.checked_add(codes)
}

/// How a parameter's values are laid out in the weights blob. Lowering stores every
/// parameter row-major; a target's program pass may choose another layout for the way
/// its library reads a weight (the C target's: `codegen::c::layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Row-major, in the parameter's shape.
    RowMajor,
    /// A matrix `[N, K]` stored as its transpose `[K, N]`, because every use transposes
    /// it: a Linear layer's weight then reaches the GEMM row-major.
    Transposed,
    /// A matrix `[N, K]` whose every use is the right operand of an f32 matmul through
    /// its transpose, stored as that `[K, N]` operand in column panels of
    /// `PANEL` columns, the last one zero-padded: the runtime's GEMM reads it in place
    /// and in order, with no packing (`mr_sgemm_panels` in `mithril_runtime.h`).
    Panels,
    /// A convolution weight `[O, C, 3, 3]` whose every use is a convolution that runs
    /// by Winograd's F(4x4, 3x3) (`codegen::c::layout::winograd`), stored transformed as `[36, O, C]`
    /// (`mr_conv2d_winograd_f32` in `mithril_runtime.h`).
    Winograd,
    /// A convolution weight `[O, C, KH, KW]` whose every use is a one-group
    /// convolution that multiplies in int8 (`codegen::c::layout::int8_conv`), stored as
    /// the operand `[KH*KW*C, O]` (row `(kh*KW + kw)*C + c`: a tap's channels together,
    /// as the convolution gathers them) in column panels; only as [`Stored::Int8`]
    /// (`mr_conv2d_i8_mt` in `mithril_runtime.h`).
    ConvPanels,
}

impl Kernel {
    /// The extents of the loops a kernel runs: a loop kernel's output dimensions (then
    /// the reduced ones); a matmul's `[batch..., m, n, k]`; the output's dimensions for
    /// the other runtime calls.
    pub fn domain(&self) -> Vec<u64> {
        match self {
            Kernel::Map { out, .. } | Kernel::Rows { out, .. } => out.shape.clone(),
            Kernel::Reduce { out, reduced, .. } => out.shape.iter().chain(reduced).copied().collect(),
            Kernel::ArgReduce { out, reduced, .. } => out.shape.iter().copied().chain([*reduced]).collect(),
            Kernel::Gemm { a, c, .. } => c.shape.iter().copied().chain([a.shape[a.shape.len() - 1]]).collect(),
            Kernel::Conv { out, .. } | Kernel::Pool { out, .. } | Kernel::Softmax { out, .. } => out.shape.clone(),
            // the scores' [batch..., m, n], then the two products' lengths d and e
            Kernel::Attention { q, out, scores, .. } => {
                scores.shape.iter().copied().chain([q.shape[q.shape.len() - 1], out.shape[out.shape.len() - 1]]).collect()
            }
            Kernel::Dequantize { out, .. } => out.shape.clone(),
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
    /// them; inputs and outputs are row-major at the run-time sizes, copied into and out
    /// of that layout where a symbol lies inside another dimension.
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
        self.renumber_buffers(&new_id);
    }

    /// Makes every use of buffer `b` (in kernels and ports) one of `new_id[b]`.
    pub fn renumber_buffers(&mut self, new_id: &[BufId]) {
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
        Kernel::Gemm { a, b, c, epilogue, scratch } => {
            f(a);
            f(b);
            f(c);
            if let Some(scratch) = scratch {
                f(scratch);
            }
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
        Kernel::Rows { out, stats, expr, .. } => {
            f(out);
            for st in stats {
                f(&mut st.view);
                visit_expr_views(&mut st.expr, f);
                if let Some(e) = &mut st.then {
                    visit_expr_views(e, f);
                }
            }
            visit_expr_views(expr, f);
        }
        Kernel::Attention { q, k, v, out, scores, score } => {
            for view in [q, k, v, out, scores] {
                f(view);
            }
            if let Some(e) = score {
                visit_expr_views(e, f);
            }
        }
        Kernel::Dequantize { w, out, .. } => {
            f(w);
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

/// The number of nodes in an expression.
pub fn expr_size(e: &Expr) -> usize {
    let mut n = 0;
    e.walk(&mut |_| n += 1);
    n
}

/// The bytes a buffer of `shape` takes, `None` past [`MAX_BUFFER_BYTES`] (sizes come
/// from the user: products must not overflow).
pub fn buffer_bytes(shape: &[u64], dtype: Dtype) -> Option<u64> {
    shape.iter().try_fold(dtype.size() as u64, |acc, &n| acc.checked_mul(n)).filter(|&b| b <= MAX_BUFFER_BYTES)
}

/// Buffers an expression reads, with repeats.
pub fn expr_bufs(e: &Expr, out: &mut Vec<BufId>) {
    e.walk(&mut |e| {
        if let Expr::Load { view, .. } | Expr::Gather { view, .. } = e {
            out.push(view.buf);
        }
    });
}

/// The loop variables `e` reads (with repeats): its indices, and the variables of its
/// loads along dimensions they move through (a stride other than 0, an extent other
/// than 1).
pub fn expr_vars(e: &Expr, out: &mut Vec<usize>) {
    e.walk(&mut |e| match e {
        Expr::Load { view, vars } | Expr::Gather { view, vars, .. } => {
            out.extend(vars.iter().enumerate().filter(|&(d, &v)| v != usize::MAX && view.strides[d] != 0 && view.shape[d] != 1).map(|(_, &v)| v));
        }
        Expr::Index(v) => out.push(*v),
        _ => {}
    });
}

/// A kernel's expressions (a loop body or an epilogue).
pub fn kernel_exprs(k: &Kernel) -> Vec<&Expr> {
    match k {
        Kernel::Map { expr, .. } | Kernel::Reduce { expr, .. } | Kernel::ArgReduce { expr, .. } => vec![expr],
        Kernel::Rows { stats, expr, .. } => stats.iter().flat_map(|st| [Some(&st.expr), st.then.as_ref()]).flatten().chain([expr]).collect(),
        Kernel::Gemm { epilogue, .. } | Kernel::Conv { epilogue, .. } | Kernel::Attention { score: epilogue, .. } => epilogue.iter().collect(),
        Kernel::Pool { .. } | Kernel::Softmax { .. } | Kernel::Dequantize { .. } => vec![],
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
        Kernel::Map { .. } | Kernel::Reduce { .. } | Kernel::ArgReduce { .. } | Kernel::Rows { .. } => {}
        // the scratch too, so it lives (only) while the kernel runs
        Kernel::Gemm { a, b, scratch, .. } => out.extend([a.buf, b.buf].into_iter().chain(scratch.as_ref().map(|s| s.buf))),
        Kernel::Conv { x, w, scratch, .. } => out.extend([x.buf, w.buf].into_iter().chain(scratch.as_ref().map(|s| s.buf))),
        Kernel::Pool { x, .. } | Kernel::Softmax { x, .. } => out.push(x.buf),
        Kernel::Attention { q, k, v, .. } => out.extend([q.buf, k.buf, v.buf]),
        Kernel::Dequantize { w, .. } => out.push(w.buf),
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
        | Kernel::Rows { out, .. }
        | Kernel::Conv { out, .. }
        | Kernel::Pool { out, .. }
        | Kernel::Softmax { out, .. }
        | Kernel::Attention { out, .. }
        | Kernel::Dequantize { out, .. } => out.buf,
        Kernel::Gemm { c, .. } => c.buf,
    }
}

/// Makes the kernel write buffer `to` instead (its output view keeps its shape).
pub fn retarget(k: &mut Kernel, to: BufId) {
    match k {
        Kernel::Map { out, .. }
        | Kernel::Reduce { out, .. }
        | Kernel::ArgReduce { out, .. }
        | Kernel::Rows { out, .. }
        | Kernel::Conv { out, .. }
        | Kernel::Pool { out, .. }
        | Kernel::Softmax { out, .. }
        | Kernel::Attention { out, .. }
        | Kernel::Dequantize { out, .. } => out.buf = to,
        Kernel::Gemm { c, .. } => c.buf = to,
    }
}
