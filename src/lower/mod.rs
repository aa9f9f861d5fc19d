//! Lowering: a verified, shape-static [`Graph`] becomes a [`Program`], an ordered list
//! of kernels over planned buffers, which the C (and later CUDA, Metal) code
//! generators render.
//!
//! Layout ops cost nothing here: reshape, transpose, slice and broadcast become
//! *views* (offset + strides over an existing buffer). Elementwise ops become `Map`
//! kernels whose body is a scalar expression reading views; reductions become
//! `Reduce` kernels; matmul, convolution, pooling and softmax become calls into the
//! runtime. Every kernel records the model ops it came from.
//!
//! **Architecture Invariant:** kernels run in list order; a kernel reads only buffers
//! written by earlier kernels, inputs, weights or constants.

pub mod memory;

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::ir::*;
use crate::tensor::Tensor;

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
#[derive(Debug, Clone, PartialEq)]
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
    /// `cond ? a : b` (only the chosen side is evaluated).
    Select(Box<Expr>, Box<Expr>, Box<Expr>, Dtype),
    Cast(Box<Expr>, Dtype),
    /// `view[..., idx, ...]` along `axis`, other dimensions indexed by `vars`
    /// (`vars[axis]` unused); a negative index counts from the end, and an index out
    /// of range is clamped (generated code cannot report errors).
    Gather { view: View, vars: Vec<usize>, axis: usize, index: Box<Expr> },
}

impl Expr {
    pub fn dtype(&self) -> Dtype {
        match self {
            Expr::Const(_, d) | Expr::Unary(_, _, d) | Expr::Binary(_, _, _, d) | Expr::Select(_, _, _, d) | Expr::Cast(_, d) => *d,
            Expr::Load { .. } | Expr::Gather { .. } => Dtype::F32, // overwritten by the program's buffer dtype; see `Program::expr_dtype`
            Expr::Index(_) => Dtype::I64,
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
    Gemm { a: View, b: View, c: View },
    /// NCHW convolution (1-d as H = 1) into contiguous `out`; input and weight contiguous.
    Conv { x: View, w: View, out: View, attrs: ConvAttrs },
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
}

#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    pub name: String,
    pub buffers: Vec<Buffer>,
    pub steps: Vec<Step>,
    /// Constants emitted into the source, by [`Storage::Const`] index.
    pub consts: Vec<Tensor>,
    /// Model inputs: name and buffer (the caller's `inputs[i]`), with shapes.
    pub inputs: Vec<(String, BufId, Vec<u64>)>,
    /// Model outputs: name, buffer (the caller's `outputs[i]`), shape.
    pub outputs: Vec<(String, BufId, Vec<u64>)>,
    /// Parameters: name, buffer, shape, in weights-blob order.
    pub weights: Vec<(String, BufId, Vec<u64>)>,
    /// Matrix parameters stored transposed in the blob (`[K, N]` for a `[N, K]`
    /// parameter) because every use transposes them: a Linear layer's weight then
    /// reaches the GEMM row-major, which it packs with plain copies.
    pub transposed: Vec<BufId>,
    /// Size of the weights blob in bytes.
    pub weights_size: u64,
    /// Size of the arena in bytes (set by [`memory::plan`]).
    pub arena_size: u64,
    /// The largest total size of buffers live at once: no plan can use less.
    pub peak_live: u64,
}

/// Alignment of every buffer in the weights blob and the arena.
pub const ALIGN: u64 = 64;

fn align(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

/// Lowers a shape-static graph. `supports` rejects what a target cannot run; every
/// op it rejects is listed in one error.
pub fn lower(graph: &Graph) -> Result<Program> {
    Lowerer::new(graph).run()
}

struct Lowerer<'g> {
    graph: &'g Graph,
    p: Program,
    views: HashMap<ValueId, View>,
    /// Scalar constants are inlined into expressions.
    scalars: HashMap<ValueId, (f64, Dtype)>,
    /// Elementwise values are kept as expressions until something needs memory.
    exprs: HashMap<ValueId, Expr>,
    /// The model ops folded into each pending expression.
    expr_origins: HashMap<ValueId, Vec<String>>,
}

impl<'g> Lowerer<'g> {
    fn new(graph: &'g Graph) -> Lowerer<'g> {
        Lowerer {
            graph,
            p: Program {
                name: graph.name.clone(),
                buffers: Vec::new(),
                steps: Vec::new(),
                consts: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                weights: Vec::new(),
                transposed: Vec::new(),
                weights_size: 0,
                arena_size: 0,
                peak_live: 0,
            },
            views: HashMap::new(),
            scalars: HashMap::new(),
            exprs: HashMap::new(),
            expr_origins: HashMap::new(),
        }
    }

    fn shape(&self, v: ValueId) -> Result<Vec<u64>> {
        self.graph.ty(v).shape.as_known().ok_or_else(|| {
            let node = self.graph.node(v);
            let what = match (&node.op, &node.name) {
                (Op::Input | Op::Param, Some(n)) => format!("`{n}`"),
                _ => crate::passes::shape::describe_node(self.graph, v),
            };
            let err = Error::user(format!(
                "{what} has the symbolic shape {}, and compiled code needs static shapes for now",
                self.graph.ty(v).shape
            ));
            match (&node.op, &node.name) {
                (Op::Input | Op::Param, Some(n)) => err.note(format!("give it with --shape {n}=D0,D1,...")),
                _ => err.note("give every input's shape with --shape NAME=D0,D1,..."),
            }
        })
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
        // Every op's element type must be one the generated C has.
        let mut unsupported = Vec::new();
        for v in graph.ids() {
            if matches!(graph.ty(v).dtype, Dtype::F16 | Dtype::Bf16) {
                unsupported.push(format!("{} of type {}", crate::passes::shape::describe_node(graph, v), graph.ty(v)));
            }
        }
        if !unsupported.is_empty() {
            return Err(Error::user(format!(
                "the C target has no f16/bf16 arithmetic yet; unsupported: {}",
                unsupported.join("; ")
            )));
        }
        let outputs: Vec<ValueId> = graph.outputs.iter().map(|o| o.value).collect();
        let mut uses = vec![0usize; graph.nodes.len()];
        for n in &graph.nodes {
            for a in &n.args {
                uses[a.index()] += 1;
            }
        }
        for v in graph.ids() {
            self.lower_node(v, &uses, &outputs)?;
        }
        for (i, o) in graph.outputs.iter().enumerate() {
            let shape = self.shape(o.value)?;
            let len = shape.iter().product();
            let dtype = graph.ty(o.value).dtype;
            let buf = self.buffer(format!("out_{}", i), dtype, len, Storage::Output(i));
            let out = View::contiguous(buf, &shape);
            let expr = self.expr_of(o.value)?;
            self.p.steps.push(Step { kernel: Kernel::Map { out, expr }, origins: vec![format!("output {:?}", o.name)] });
            self.p.outputs.push((o.name.clone(), buf, shape));
        }
        self.redirect_outputs();
        memory::plan(&mut self.p)?;
        Ok(self.p)
    }

    /// An output copied from a kernel's arena result is written by that kernel
    /// directly when nothing else reads the arena buffer.
    fn redirect_outputs(&mut self) {
        let n = self.p.steps.len();
        for i in 0..n {
            let Kernel::Map { out, expr } = &self.p.steps[i].kernel else { continue };
            let Storage::Output(_) = self.p.buffers[out.buf.0].storage else { continue };
            let Expr::Load { view: src, .. } = expr else { continue };
            let whole = src.is_contiguous() && src.offset == 0 && src.numel() == self.p.buffers[src.buf.0].len;
            if !whole || src.shape != out.shape || !matches!(self.p.buffers[src.buf.0].storage, Storage::Arena { .. }) {
                continue;
            }
            let (src_buf, out_buf) = (src.buf, out.buf);
            if self.p.buffers[src_buf.0].dtype != self.p.buffers[out_buf.0].dtype {
                continue;
            }
            let readers = self.p.steps.iter().filter(|s| kernel_reads(&s.kernel).contains(&src_buf)).count();
            let writer = self.p.steps.iter().position(|s| kernel_writes(&s.kernel) == src_buf);
            if readers != 1 || writer.is_none() {
                continue;
            }
            let w = writer.unwrap_or(0);
            retarget(&mut self.p.steps[w].kernel, out_buf);
            let copied = self.p.steps[i].origins.join(", ");
            self.p.steps[w].origins.push(copied);
            self.p.steps[i].origins.clear(); // marked for removal
        }
        self.p.steps.retain(|s| !s.origins.is_empty());
    }

    /// The value as an expression over the iteration space of its own shape
    /// (loop variable d indexes dimension d).
    fn expr_of(&mut self, v: ValueId) -> Result<Expr> {
        if let Some(e) = self.exprs.get(&v) {
            return Ok(e.clone());
        }
        if let Some(&(x, d)) = self.scalars.get(&v) {
            return Ok(Expr::Const(x, d));
        }
        let view = self.view_of(v)?;
        let vars = (0..view.shape.len()).collect();
        Ok(Expr::Load { view, vars })
    }

    /// The value in memory (a view), running its pending expression into a buffer.
    fn view_of(&mut self, v: ValueId) -> Result<View> {
        if let Some(view) = self.views.get(&v) {
            return Ok(view.clone());
        }
        let shape = self.shape(v)?;
        let dtype = self.graph.ty(v).dtype;
        let expr = match (self.exprs.get(&v), self.scalars.get(&v)) {
            (Some(e), _) => e.clone(),
            (None, Some(&(x, d))) => Expr::Const(x, d),
            _ => return Err(Error::internal(format!("lowering: value %{} has no view", v.0))),
        };
        let buf = self.arena(v, dtype, &shape);
        let out = View::contiguous(buf, &shape);
        let origins = self.expr_origins.remove(&v).unwrap_or_else(|| vec![self.origin(v)]);
        self.p.steps.push(Step { kernel: Kernel::Map { out: out.clone(), expr }, origins });
        self.views.insert(v, out.clone());
        Ok(out)
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
        self.p.steps.push(Step { kernel: Kernel::Map { out: out.clone(), expr: Expr::Load { view, vars } }, origins: vec![format!("layout copy for {}", self.origin(v))] });
        Ok(out)
    }

    fn arena(&mut self, v: ValueId, dtype: Dtype, shape: &[u64]) -> BufId {
        let name = match &self.graph.node(v).name {
            Some(n) => format!("{n}_{}", v.0),
            None => format!("t{}", v.0),
        };
        self.buffer(name, dtype, shape.iter().product::<u64>().max(1), Storage::Arena { offset: 0 })
    }

    fn lower_node(&mut self, v: ValueId, uses: &[usize], outputs: &[ValueId]) -> Result<()> {
        let node = self.graph.node(v);
        let shape = self.shape(v)?;
        let dtype = node.ty.dtype;
        let arg = |i: usize| node.args[i];
        match &node.op {
            Op::Input => {
                let idx = self.p.inputs.len();
                let name = node.name.clone().unwrap_or_default();
                let buf = self.buffer(name.clone(), dtype, shape.iter().product::<u64>().max(1), Storage::Input(idx));
                self.p.inputs.push((name, buf, shape.clone()));
                self.views.insert(v, View::contiguous(buf, &shape));
            }
            Op::Param => {
                let name = node.name.clone().unwrap_or_default();
                let len = shape.iter().product::<u64>();
                let offset = self.p.weights_size;
                let buf = self.buffer(name.clone(), dtype, len.max(1), Storage::Weight { offset });
                self.p.weights_size = align(offset + len * dtype.size() as u64);
                self.p.weights.push((name, buf, shape.clone()));
                let users: Vec<&Node> = self.graph.nodes.iter().filter(|n| n.args.contains(&v)).collect();
                let only_transposed = shape.len() == 2
                    && dtype == Dtype::F32
                    && !users.is_empty()
                    && users.iter().all(|n| matches!(&n.op, Op::Transpose { perm } if perm == &[1, 0]))
                    && !outputs.contains(&v);
                if only_transposed {
                    // Stored as [K, N]; the parameter itself is its transposed view.
                    self.p.transposed.push(buf);
                    self.views.insert(v, View { buf, shape: shape.clone(), strides: vec![1, shape[0] as i64], offset: 0 });
                } else {
                    self.views.insert(v, View::contiguous(buf, &shape));
                }
            }
            Op::Constant(c) => {
                let t = &self.graph.consts[c.0 as usize];
                if t.numel() == 1 {
                    self.scalars.insert(v, (t.data[0], t.dtype));
                } else {
                    let idx = self.p.consts.len();
                    self.p.consts.push(t.clone());
                    let buf = self.buffer(format!("const{idx}"), t.dtype, t.numel().max(1) as u64, Storage::Const(idx));
                    self.views.insert(v, View::contiguous(buf, &shape));
                }
            }
            Op::Unary(u) => {
                let x = self.expr_at(arg(0), &shape)?;
                self.pending(v, Expr::Unary(*u, Box::new(x), dtype), uses, outputs)?;
            }
            Op::Binary(b) => {
                let l = self.expr_at(arg(0), &shape)?;
                let r = self.expr_at(arg(1), &shape)?;
                self.pending(v, Expr::Binary(*b, Box::new(l), Box::new(r), dtype), uses, outputs)?;
            }
            Op::Where => {
                let c = self.expr_at(arg(0), &shape)?;
                let a = self.expr_at(arg(1), &shape)?;
                let b = self.expr_at(arg(2), &shape)?;
                self.pending(v, Expr::Select(Box::new(c), Box::new(a), Box::new(b), dtype), uses, outputs)?;
            }
            Op::Cast { to } => {
                let x = self.expr_at(arg(0), &shape)?;
                self.pending(v, Expr::Cast(Box::new(x), *to), uses, outputs)?;
            }
            Op::StopGradient => {
                let x = self.expr_at(arg(0), &shape)?;
                self.pending(v, x, uses, outputs)?;
            }
            Op::Iota { axis, dtype, .. } => {
                self.pending(v, Expr::Cast(Box::new(Expr::Index(*axis)), *dtype), uses, outputs)?;
            }
            Op::Reshape { .. } => {
                let src = self.view_of(arg(0))?;
                let src = if src.is_contiguous() { src } else { self.contiguous(arg(0))? };
                self.views.insert(v, View { buf: src.buf, shape: shape.clone(), strides: contiguous_strides(&shape), offset: src.offset });
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
                let mut offset = src.offset;
                let mut strides = Vec::new();
                for (d, r) in ranges.iter().enumerate() {
                    let (start, step, _) = r.resolve(src.shape[d]).map_err(Error::internal)?;
                    offset += start * src.strides[d];
                    strides.push(step * src.strides[d]);
                }
                self.views.insert(v, View { buf: src.buf, shape, strides, offset });
            }
            Op::Pad { pads, value } => {
                let src = self.view_of(arg(0))?;
                // out[i] = all(lo <= i_d < lo + n_d) ? x[i - lo] : value
                let mut cond: Option<Expr> = None;
                let mut shifted = src.clone();
                for (d, &(lo, _)) in pads.iter().enumerate() {
                    shifted.offset -= lo as i64 * src.strides[d];
                    if lo == 0 && pads[d].1 == 0 {
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
                shifted.shape = shape.clone();
                let load = Expr::Load { view: shifted, vars: (0..shape.len()).collect() };
                let e = match cond {
                    None => load,
                    Some(c) => Expr::Select(Box::new(c), Box::new(load), Box::new(Expr::Const(*value, dtype)), dtype),
                };
                self.pending(v, e, uses, outputs)?;
            }
            Op::Concat { axis } => {
                // Piecewise: out[.., i, ..] = i < n0 ? a[.., i, ..] : i < n0 + n1 ? b[.., i - n0, ..] : ...
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
                self.pending(v, e, uses, outputs)?;
            }
            Op::Gather { axis } => {
                // out[pre..., idx..., post...] = data[pre..., indices[idx...], post...]
                let data = self.view_of(arg(0))?;
                let idx_rank = self.graph.ty(arg(1)).rank();
                let index_vars: Vec<usize> = (*axis..axis + idx_rank).collect();
                let idx_view = self.view_of(arg(1))?;
                let index = Expr::Load { view: idx_view, vars: index_vars };
                let mut vars = Vec::new();
                for d in 0..data.shape.len() {
                    vars.push(if d < *axis { d } else if d == *axis { usize::MAX } else { d - 1 + idx_rank });
                }
                self.pending(v, Expr::Gather { view: data, vars, axis: *axis, index: Box::new(index) }, uses, outputs)?;
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
                let buf = self.arena(v, dtype, &shape);
                let c = View::contiguous(buf, &full);
                self.p.steps.push(Step { kernel: Kernel::Gemm { a, b, c }, origins: vec![self.origin(v)] });
                self.views.insert(v, View::contiguous(buf, &shape));
            }
            Op::Conv(attrs) => {
                let x = self.contiguous(arg(0))?;
                let w = self.contiguous(arg(1))?;
                let buf = self.arena(v, dtype, &shape);
                let out = View::contiguous(buf, &shape);
                self.p.steps.push(Step { kernel: Kernel::Conv { x, w, out: out.clone(), attrs: attrs.clone() }, origins: vec![self.origin(v)] });
                if let Some(&bias) = node.args.get(2) {
                    // The bias as an epilogue: out += bias (broadcast), in place.
                    let b = self.expr_at(bias, &shape)?;
                    let load = Expr::Load { view: out.clone(), vars: (0..shape.len()).collect() };
                    let e = Expr::Binary(BinaryOp::Add, Box::new(load), Box::new(b), dtype);
                    self.p.steps.push(Step { kernel: Kernel::Map { out: out.clone(), expr: e }, origins: vec![format!("bias of {}", self.origin(v))] });
                }
                self.views.insert(v, out);
            }
            Op::Pool(attrs) => {
                let x = self.contiguous(arg(0))?;
                let buf = self.arena(v, dtype, &shape);
                let out = View::contiguous(buf, &shape);
                self.p.steps.push(Step { kernel: Kernel::Pool { x, out: out.clone(), attrs: attrs.clone() }, origins: vec![self.origin(v)] });
                self.views.insert(v, out);
            }
            Op::Softmax { axis } => {
                let x = self.contiguous(arg(0))?;
                let buf = self.arena(v, dtype, &shape);
                let out = View::contiguous(buf, &shape);
                self.p.steps.push(Step { kernel: Kernel::Softmax { x, out: out.clone(), axis: *axis }, origins: vec![self.origin(v)] });
                self.views.insert(v, out);
            }
            // keepdim only changes the value's shape, not the memory the kernel writes.
            Op::Reduce { kind, axes, .. } => {
                let in_shape = self.shape(arg(0))?;
                let (expr, reduced) = self.reduction_input(arg(0), &in_shape, axes)?;
                let n: u64 = reduced.iter().product();
                let scale = (*kind == ReduceKind::Mean).then(|| 1.0 / n as f64);
                let kind = if *kind == ReduceKind::Mean { ReduceKind::Sum } else { *kind };
                let buf = self.arena(v, dtype, &shape);
                let kept: Vec<u64> = kept_shape(&in_shape, axes);
                let out = View::contiguous(buf, &kept);
                self.p.steps.push(Step { kernel: Kernel::Reduce { out, reduced, kind, expr, scale }, origins: vec![self.origin(v)] });
                self.views.insert(v, View::contiguous(buf, &shape));
            }
            Op::ArgReduce { kind, axis, .. } => {
                let in_shape = self.shape(arg(0))?;
                let axes: Vec<usize> = match axis {
                    Some(a) => vec![*a],
                    None => (0..in_shape.len()).collect(),
                };
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
                self.p.steps.push(Step { kernel: Kernel::ArgReduce { out, reduced: reduced[0], kind: *kind, expr }, origins: vec![self.origin(v)] });
                self.views.insert(v, View::contiguous(buf, &shape));
            }
            Op::Variance { axes, correction, .. } => {
                // Two passes, as the interpreter: mean, then Σ(x - mean)² / (n - correction).
                let in_shape = self.shape(arg(0))?;
                let (expr, reduced) = self.reduction_input(arg(0), &in_shape, axes)?;
                let n: u64 = reduced.iter().product();
                let kept = kept_shape(&in_shape, axes);
                let mean_buf = self.arena(v, dtype, &kept);
                let mean = View::contiguous(mean_buf, &kept);
                self.p.steps.push(Step {
                    kernel: Kernel::Reduce { out: mean.clone(), reduced: reduced.clone(), kind: ReduceKind::Sum, expr: expr.clone(), scale: Some(1.0 / n as f64) },
                    origins: vec![format!("mean for {}", self.origin(v))],
                });
                let mean_vars: Vec<usize> = (0..kept.len()).collect();
                let centered = Expr::Binary(BinaryOp::Sub, Box::new(expr), Box::new(Expr::Load { view: mean, vars: mean_vars }), dtype);
                let sq = Expr::Binary(BinaryOp::Mul, Box::new(centered.clone()), Box::new(centered), dtype);
                let buf = self.arena(v, dtype, &shape);
                let out = View::contiguous(buf, &kept);
                let denom = (n as f64 - correction).max(0.0);
                self.p.steps.push(Step { kernel: Kernel::Reduce { out, reduced, kind: ReduceKind::Sum, expr: sq, scale: Some(1.0 / denom) }, origins: vec![self.origin(v)] });
                self.views.insert(v, View::contiguous(buf, &shape));
            }
        }
        Ok(())
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

    /// Keeps an elementwise result as an expression when it is used once (so it fuses
    /// into its user); otherwise computes it into a buffer.
    fn pending(&mut self, v: ValueId, e: Expr, uses: &[usize], outputs: &[ValueId]) -> Result<()> {
        // The ops folded into this expression: its operands' pending ones, then itself.
        let mut origins = Vec::new();
        for a in &self.graph.node(v).args {
            if self.exprs.contains_key(a) {
                origins.extend(self.expr_origins.remove(a).unwrap_or_default());
            }
        }
        origins.push(self.origin(v));
        self.expr_origins.insert(v, origins);
        self.exprs.insert(v, e);
        if uses[v.index()] != 1 || outputs.contains(&v) || expr_size(self.exprs.get(&v).expect("just inserted")) > 64 {
            let view = self.view_of(v)?;
            self.exprs.remove(&v);
            self.views.insert(v, view);
        }
        Ok(())
    }
}

fn expr_size(e: &Expr) -> usize {
    match e {
        Expr::Const(..) | Expr::Load { .. } | Expr::Index(_) => 1,
        Expr::Unary(_, a, _) | Expr::Cast(a, _) => 1 + expr_size(a),
        Expr::Binary(_, a, b, _) => 1 + expr_size(a) + expr_size(b),
        Expr::Select(c, a, b, _) => 1 + expr_size(c) + expr_size(a) + expr_size(b),
        Expr::Gather { index, .. } => 1 + expr_size(index),
    }
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
        Expr::Cast(a, d) => Expr::Cast(rec(a), d),
    }
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

/// Buffers a kernel reads.
pub fn kernel_reads(k: &Kernel) -> Vec<BufId> {
    fn expr_bufs(e: &Expr, out: &mut Vec<BufId>) {
        match e {
            Expr::Const(..) | Expr::Index(_) => {}
            Expr::Load { view, .. } => out.push(view.buf),
            Expr::Gather { view, index, .. } => {
                out.push(view.buf);
                expr_bufs(index, out);
            }
            Expr::Unary(_, a, _) | Expr::Cast(a, _) => expr_bufs(a, out),
            Expr::Binary(_, a, b, _) => {
                expr_bufs(a, out);
                expr_bufs(b, out);
            }
            Expr::Select(c, a, b, _) => {
                expr_bufs(c, out);
                expr_bufs(a, out);
                expr_bufs(b, out);
            }
        }
    }
    let mut out = Vec::new();
    match k {
        Kernel::Map { expr, .. } | Kernel::Reduce { expr, .. } | Kernel::ArgReduce { expr, .. } => expr_bufs(expr, &mut out),
        Kernel::Gemm { a, b, .. } => out.extend([a.buf, b.buf]),
        Kernel::Conv { x, w, .. } => out.extend([x.buf, w.buf]),
        Kernel::Pool { x, .. } | Kernel::Softmax { x, .. } => out.push(x.buf),
    }
    out.sort();
    out.dedup();
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

fn retarget(k: &mut Kernel, to: BufId) {
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
