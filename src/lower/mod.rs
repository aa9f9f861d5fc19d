//! Lowering: a verified, shape-static [`Graph`] becomes a [`Program`], an ordered list
//! of kernels over planned buffers, which the C, CUDA and Metal code
//! generators render.
//!
//! Layout ops cost nothing here: reshape, transpose, slice and broadcast become
//! *views* (offset + strides over an existing buffer). Each elementwise op becomes a
//! `Map` kernel whose body is a scalar expression reading views; reductions become
//! `Reduce` kernels; matmul, convolution, pooling and softmax become library kernels
//! where the target's [`Library`] computes them, and loop kernels where it does not.
//! Every kernel records the model ops it came from. Lowering is the same for every
//! target: each parameter row-major, no scratch, no padding copies; how one target's
//! library wants the program laid out is that target's program pass (the C target's:
//! `codegen::c::layout`).
//!
//! Lowering makes one kernel per op and one arena buffer per value; the target's passes
//! then lay the program out, the `fuse` pass merges kernels and `memory` places the
//! buffers (`passes::compile`). One file per op family: `elementwise.rs`, `views.rs`,
//! `contraction.rs` (matmul, convolution), `loops.rs` (pooling, softmax, windows as
//! loops), `reduce.rs`; `program.rs` holds the program's types.

mod contraction;
mod elementwise;
mod loops;
pub mod parse;
pub mod print;
mod program;
mod reduce;
mod views;
pub mod verify;

pub use program::*;
pub use views::padded;

use std::collections::{BTreeMap, HashMap};

use crate::error::{Error, Result};
use crate::ir::*;

/// What lowering takes beyond the graph.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The largest run-time value of each symbolic dimension.
    pub max: BTreeMap<String, u64>,
    /// What the target's kernel library computes; the rest lowers to loop kernels.
    pub library: Library,
    /// How a target's program pass stores the weights of matrix products and
    /// convolutions (`--quantize`; lowering itself stores every weight f32).
    pub quantize: Stored,
}

/// What a target's kernel library computes, by element type: an op it has no kernel
/// for lowers to plain loop kernels (`Map`, `Reduce`), which every target renders.
/// The default computes nothing (everything as loops).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Library {
    /// Matrix products ([`Kernel::Gemm`]) whose operands and result are of one of these.
    pub gemm: &'static [Dtype],
    /// Convolutions ([`Kernel::Conv`]) whose input and output are of one of these.
    pub conv: &'static [Dtype],
    /// Pooling ([`Kernel::Pool`]) whose input and output are of one of these.
    pub pool: &'static [Dtype],
    /// Softmax ([`Kernel::Softmax`]) whose input and output are of one of these.
    pub softmax: &'static [Dtype],
    /// The most spatial dimensions its convolution and pooling take.
    pub window_rank: usize,
    /// Attention in one kernel ([`Kernel::Attention`], formed by the `attention` pass)
    /// whose operands and result are of one of these.
    pub attention: &'static [Dtype],
    /// The largest head dimension (the length of a query, the width of a value) its
    /// attention takes.
    pub attention_dim: u64,
    /// Row kernels ([`Kernel::Rows`], formed by the `rows` pass; loop kernels the
    /// target's renderer writes) whose statistics and output are of one of these.
    pub rows: &'static [Dtype],
}

impl Library {
    /// Whether the library computes a window op (convolution, pooling) of `spatial`
    /// dimensions from `input` into `output`, among the element types `dtypes`.
    fn window(&self, dtypes: &[Dtype], input: Dtype, output: Dtype, spatial: usize) -> bool {
        input == output && dtypes.contains(&output) && spatial <= self.window_rank
    }
}

/// Lowers a graph, one kernel per op.
pub fn lower(graph: &Graph, opts: &Options) -> Result<Program> {
    Lowerer::new(graph, opts).run()
}

struct Lowerer<'g> {
    graph: &'g Graph,
    max: &'g BTreeMap<String, u64>,
    library: Library,
    p: Program,
    views: HashMap<ValueId, View>,
    /// Scalar constants are inlined into expressions.
    scalars: HashMap<ValueId, (f64, Dtype)>,
}

impl<'g> Lowerer<'g> {
    fn new(graph: &'g Graph, opts: &'g Options) -> Lowerer<'g> {
        Lowerer {
            graph,
            max: &opts.max,
            library: opts.library,
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
        }
    }

    /// The value's shape with each symbolic dimension at its maximum.
    fn shape(&self, v: ValueId) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        let ty = self.graph.ty(v);
        for d in ty.shape.dims() {
            let mut symbols = Vec::new();
            d.symbols(&mut symbols);
            if let Some(s) = symbols.into_iter().find(|s| !self.max.contains_key(*s)) {
                return Err(Error::user(format!(
                    "{} has the symbolic shape {}: compiled code takes {s} at run time, up to a maximum given at compile time",
                    self.describe(v),
                    ty.shape
                ))
                .note(format!("give it with --max {s}=N (or a static size with --shape)")));
            }
            let max = d.upper_bound(&|s| self.max.get(s).copied());
            out.push(max.ok_or_else(|| Error::user(format!("{} (shape {}): {d} overflows at the symbols' --max", self.describe(v), ty.shape)))?);
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

    /// The run-time extent of each of the value's dimensions, `None` for a static one
    /// (see [`Step::dims`]); their symbols join [`Program::symbols`].
    fn dims(&mut self, v: ValueId) -> Result<Vec<Option<Dim>>> {
        self.shape(v)?; // every symbol has a maximum
        let mut out = Vec::new();
        for d in self.graph.ty(v).shape.dims() {
            if let Dim::Known(_) = d {
                out.push(None);
                continue;
            }
            // Generated code divides sizes with C's `/`, the floor only of what is not
            // negative: every coefficient positive keeps each part so.
            if !d.poly().is_ok_and(|p| p.is_positive()) {
                return Err(self.unsupported_symbolic(v, &format!("the dimension {d}, which has a subtraction")));
            }
            let mut symbols = Vec::new();
            d.symbols(&mut symbols);
            for s in symbols {
                if !self.p.symbols.iter().any(|(n, _)| n == s) {
                    self.p.symbols.push((s.to_string(), self.max[s]));
                }
            }
            out.push(Some(d.clone()));
        }
        Ok(out)
    }

    /// The symbol of each dimension of a model input or output (see [`Port::dims`]),
    /// which the caller gives or reads as it is: an expression there is refused.
    fn port_dims(&self, v: ValueId, dims: &[Option<Dim>], what: &str) -> Result<Vec<Option<usize>>> {
        dims.iter()
            .map(|d| match d {
                None => Ok(None),
                Some(Dim::Sym(s)) => Ok(self.p.symbols.iter().position(|(n, _)| n == s)),
                Some(d) => Err(self.unsupported_symbolic(v, &format!("{what} with the dimension {d}"))),
            })
            .collect()
    }

    /// An error for a use of a symbolic dimension compiled code does not support.
    fn unsupported_symbolic(&self, v: ValueId, what: &str) -> Error {
        Error::user(format!("{} (shape {}): compiled code does not support {what} yet", self.describe(v), self.graph.ty(v).shape))
        .note("give the dimension a static size with --shape")
    }

    /// The run-time extent of each of the value's dimensions as an expression (a static
    /// one as a constant).
    fn extent_exprs(&mut self, v: ValueId) -> Result<Vec<Expr>> {
        let shape = self.shape(v)?;
        Ok(self.dims(v)?.into_iter().zip(shape).map(|(d, n)| d.map_or(Expr::Const(n as f64, Dtype::I64), Expr::Extent)).collect())
    }

    fn step(&mut self, kernel: Kernel, origins: Vec<String>, dims: Vec<Option<Dim>>) {
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
        // Every op no program can compute yet, listed at once (targets check theirs
        // before lowering: `backend::check_supported`).
        let unsupported: Vec<String> = graph.ids().filter_map(|v| lacking(graph, v).map(|why| format!("{} ({why})", crate::passes::shape::describe_node(graph, v)))).collect();
        if !unsupported.is_empty() {
            return Err(Error::user(format!("compiled code cannot compute {} of the model's ops yet: {}", unsupported.len(), unsupported.join("; "))));
        }
        for v in graph.ids() {
            self.lower_node(v)?;
        }
        for (i, o) in graph.outputs.iter().enumerate() {
            let shape = self.shape(o.value)?;
            let len = shape.iter().product();
            let dtype = graph.ty(o.value).dtype;
            let dims = self.dims(o.value)?;
            let what = format!("the model output {:?}", o.name);
            let symbols = self.port_dims(o.value, &dims, &what)?;
            let buf = self.buffer(format!("out_{}", i), dtype, len, Storage::Output(i));
            let origins = vec![format!("output {:?}", o.name)];
            if padded_inside(&dims, &shape) {
                // Row-major at the run-time sizes: one loop over the elements written,
                // each read where the layout for the maxima holds it.
                let src = self.view_of(o.value)?;
                let from = self.extent_exprs(o.value)?;
                let count = graph.ty(o.value).shape.numel_dim().map_err(|e| Error::user(format!("{what}: {e}")))?;
                let expr = relayout(&src, self.p.buffers[src.buf.0].len, &from, &[Expr::Extent(count.clone())]);
                self.step(Kernel::Map { out: View::contiguous(buf, &[len]), expr }, origins, vec![Some(count)]);
            } else {
                let out = View::contiguous(buf, &shape);
                let expr = self.expr_of(o.value)?;
                self.step(Kernel::Map { out, expr }, origins, dims.clone());
            }
            self.p.outputs.push(Port { name: o.name.clone(), buf, shape, dims: symbols, layout: Layout::RowMajor, stored: Stored::F32 });
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

    fn lower_node(&mut self, v: ValueId) -> Result<()> {
        let graph = self.graph;
        let shape = self.shape(v)?;
        match &graph.node(v).op {
            Op::Input => self.input(v, shape),
            Op::Param => self.param(v, shape),
            Op::Constant(c) => self.constant(v, shape, c),
            Op::Unary(u) => self.unary(v, shape, u),
            Op::Binary(b) => self.binary(v, shape, b),
            Op::Where => self.where_(v, shape),
            Op::Cast { to } => self.cast(v, shape, to),
            Op::StopGradient => self.stop_gradient(v),
            Op::Iota { axis, dtype, .. } => self.iota(v, axis, dtype),
            Op::Reshape { .. } => self.reshape(v, shape),
            Op::Transpose { perm } => self.transpose(v, shape, perm),
            Op::BroadcastTo { .. } => self.broadcast(v, shape),
            Op::Slice { ranges } => self.slice(v, shape, ranges),
            Op::Pad { pads, value } => self.pad(v, shape, pads, value),
            Op::Concat { axis } => self.concat(v, shape, axis),
            Op::Gather { axis } => self.gather(v, axis),
            Op::MatMul => self.matmul(v, shape),
            Op::Conv(attrs) => self.conv(v, shape, attrs),
            Op::Pool(attrs) => self.pool(v, shape, attrs),
            Op::Softmax { axis } => self.softmax(v, shape, axis),
            Op::Reduce { kind, axes, .. } => self.reduce(v, shape, kind, axes),
            Op::ArgReduce { kind, axis, .. } => self.arg_reduce(v, shape, kind, axis),
            Op::Variance { axes, correction, .. } => self.variance(v, shape, axes, correction),
        }
    }

    fn input(&mut self, v: ValueId, shape: Vec<u64>) -> Result<()> {
        let node = self.graph.node(v);
        let dtype = node.ty.dtype;
        let idx = self.p.inputs.len();
        let name = node.name.clone().unwrap_or_default();
        let dims = self.dims(v)?;
        let symbols = self.port_dims(v, &dims, "a model input")?;
        let len = shape.iter().product::<u64>().max(1);
        let buf = self.buffer(name.clone(), dtype, len, Storage::Input(idx));
        self.p.inputs.push(Port { name, buf, shape: shape.clone(), dims: symbols, layout: Layout::RowMajor, stored: Stored::F32 });
        if padded_inside(&dims, &shape) {
            // The caller's array, row-major at the run-time sizes, copied into the
            // layout for the maxima.
            let to = self.extent_exprs(v)?;
            let expr = relayout(&View::contiguous(buf, &[len]), len, &[Expr::Const(len as f64, Dtype::I64)], &to);
            self.map(v, expr)?;
            if let Some(step) = self.p.steps.last_mut() {
                step.origins = vec![format!("input {:?} laid out for its maxima", self.graph.node(v).name.clone().unwrap_or_default())];
            }
        } else {
            self.views.insert(v, View::contiguous(buf, &shape));
        }
        Ok(())
    }

    fn param(&mut self, v: ValueId, shape: Vec<u64>) -> Result<()> {
        let node = self.graph.node(v);
        let dtype = node.ty.dtype;
        let name = node.name.clone().unwrap_or_default();
        let offset = self.p.weights_size;
        let dims = self.dims(v)?;
        if dims.iter().any(Option::is_some) {
            return Err(self.unsupported_symbolic(v, "a parameter with a symbolic dimension"));
        }
        let dims = vec![None; dims.len()];
        let len: u64 = shape.iter().product();
        let buf = self.buffer(name.clone(), dtype, len.max(1), Storage::Weight { offset });
        self.p.weights_size = align(offset + len * dtype.size() as u64);
        self.p.weights.push(Port { name, buf, shape: shape.clone(), dims, layout: Layout::RowMajor, stored: Stored::F32 });
        self.views.insert(v, View::contiguous(buf, &shape));
        Ok(())
    }

    fn constant(&mut self, v: ValueId, shape: Vec<u64>, c: &ConstId) -> Result<()> {
        let t = &self.graph.consts[c.0 as usize];
        if t.numel() == 1 {
            self.scalars.insert(v, (t.get(0).unwrap_or_default(), t.dtype()));
        } else {
            let idx = self.p.consts.len();
            self.p.consts.push(t.clone());
            let buf = self.buffer(format!("const{idx}"), t.dtype(), t.numel().max(1) as u64, Storage::Const(idx));
            self.views.insert(v, View::contiguous(buf, &shape));
        }
        Ok(())
    }

    /// The value broadcast to `shape` as an expression (NumPy alignment at the end).
    fn expr_at(&mut self, v: ValueId, shape: &[u64]) -> Result<Expr> {
        let e = self.expr_of(v)?;
        let own = self.shape(v)?;
        Ok(rebase(e, &own, shape))
    }
}

/// Why no program can compute node `v` yet, if none can: windows over integers have no
/// loop nest (their padding and the average's rounding would need definitions of their
/// own). A program target's `Backend::lacks` includes this.
/// The type a matrix product's or a convolution's loops multiply in: the result's, but
/// f32 for f16, bf16 and the narrow floats, whose products f32 holds exactly; their sum is rounded to the
/// result's type once, when stored, as the interpreter's kernels sum exact products
/// (the program verifier allows such a body).
pub fn product_dtype(d: Dtype) -> Dtype {
    if matches!(d, Dtype::F16 | Dtype::Bf16) || d.is_narrow_float() { Dtype::F32 } else { d }
}

pub fn lacking(graph: &Graph, v: ValueId) -> Option<String> {
    let float = graph.ty(v).dtype.is_float();
    (matches!(graph.node(v).op, Op::Conv(_) | Op::Pool(_)) && !float).then(|| "convolution and pooling take floats".to_string())
}

/// Whether a value whose dimensions run to `dims` (`None` static; see [`Step::dims`])
/// is laid out otherwise for the symbols' maxima (`shape`) than row-major at their
/// run-time values. Buffers are laid out for the maxima; the two agree when no
/// symbolic dimension follows the first one larger than 1, the smaller array then a
/// prefix of the larger one.
fn padded_inside(dims: &[Option<Dim>], shape: &[u64]) -> bool {
    let first = shape.iter().position(|&n| n > 1).unwrap_or(shape.len());
    (first + 1..dims.len()).any(|d| dims[d].is_some() && shape[d] > 1)
}

/// An i64 operation on two index expressions.
fn int_op(op: BinaryOp, a: Expr, b: Expr) -> Expr {
    Expr::Binary(op, Box::new(a), Box::new(b), Dtype::I64)
}

/// The elements of `src` in row-major order at its run-time extents `from`, read over
/// an index space of run-time extents `to` in row-major order: the element at index
/// `i` of the space is the one at the same row-major position of `src`. (`src` is a
/// view into a buffer of `len` elements; its strides lay it out for the maxima, or
/// it is one dimension, dense at run time.) The same elements in another layout: what
/// the caller's arrays and a reshape that moves a symbol need.
fn relayout(src: &View, len: u64, from: &[Expr], to: &[Expr]) -> Expr {
    let is_one = |e: &Expr| matches!(e, Expr::Const(x, _) if *x == 1.0);
    // The row-major position at `to`.
    let mut flat: Option<Expr> = None;
    for (d, n) in to.iter().enumerate() {
        flat = Some(match flat {
            None => Expr::Index(d),
            Some(f) if is_one(n) => f,
            Some(f) => int_op(BinaryOp::Add, int_op(BinaryOp::Mul, f, n.clone()), Expr::Index(d)),
        });
    }
    let mut rest = flat.unwrap_or(Expr::Const(0.0, Dtype::I64));
    // The element's index along each dimension of `src`, last first, and its offset.
    let mut at = Expr::Const(src.offset as f64, Dtype::I64);
    let first = from.iter().position(|n| !is_one(n)).unwrap_or(from.len());
    for d in (first..from.len()).rev().filter(|&d| !is_one(&from[d])) {
        let index = if d == first {
            rest.clone()
        } else {
            let q = int_op(BinaryOp::FloorDiv, rest.clone(), from[d].clone());
            let index = int_op(BinaryOp::Sub, rest, int_op(BinaryOp::Mul, q.clone(), from[d].clone()));
            rest = q;
            index
        };
        if src.strides[d] != 0 {
            at = int_op(BinaryOp::Add, at, int_op(BinaryOp::Mul, index, Expr::Const(src.strides[d] as f64, Dtype::I64)));
        }
    }
    let whole = View { buf: src.buf, shape: vec![len], strides: vec![1], offset: 0 };
    Expr::Gather { view: whole, vars: vec![usize::MAX], axis: 0, index: Box::new(at) }
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
        Expr::Const(..) | Expr::Extent(_) => e,
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
