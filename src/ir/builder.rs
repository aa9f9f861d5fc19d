//! Graph building that every frontend and graph rewrite (`decompose`) shares: a
//! [`Builder`] appends typed IR nodes to a [`Graph`] (each one's type inferred, its
//! origin stamped, a shape error naming its operands), and spells the composite computations (layer norm, linear layers,
//! attention, log-softmax, one-hot picks) in the one node pattern the program passes
//! recognize. A frontend maps its format's operators onto these methods; it does not
//! push nodes of its own, so two formats that describe the same model give the same
//! graph, and the same kernels after `fuse` and `attention`.
//!
//! **Architecture Invariant:** what a method emits, and in what order, is part of its
//! contract (each says so): the printed IR of every committed model is checked, and the
//! program passes match these patterns. Changing one is changing every frontend's
//! output, deliberately.
//!
//! Mithril's named models (`LayerNorm`, `Linear`, ...) are expanded by its frontend into
//! Mithril's primitives first, because Mithril names their parameters, checks their
//! shapes and lists their primitives that way; each primitive then goes through these
//! methods, and the tests here check that the result is exactly [`Builder::layer_norm`]'s
//! or [`Builder::linear`]'s pattern. Another format calls those methods directly.
//!
//! Broadcasting and type promotion need no nodes of their own: the IR's elementwise ops
//! broadcast as NumPy does and promote mixed operands (`shape::infer`), so
//! [`Builder::binary`] is one node; lowering reads a broadcast operand through a view,
//! which is what lets `fuse` make a bias add a matrix product's epilogue.
//! [`Builder::broadcast_to`] is for a frontend whose operator asks for the broadcast
//! result itself.

use crate::error::{Error, Result};
use crate::ir::*;
use crate::passes::shape;
use crate::tensor::{Constant, Tensor};

/// A graph under construction, and where the nodes being built come from (the
/// frontend sets `origin` and `operands` for each node of its source model).
#[derive(Debug, Clone, Default)]
pub struct Builder {
    pub graph: Graph,
    /// The source node, as messages and generated comments cite it
    /// (`submodels.m_3 (Linear)`); every node built takes it as its origin.
    pub origin: String,
    /// The source node's names for its tensor operands (`left`, `right`), by which a
    /// shape error names them.
    pub operands: Vec<(String, ValueId)>,
    /// The pass rewriting the graph, when a pass builds (not a frontend): a node that
    /// does not fit its operands is then that pass's bug, an internal error.
    pub pass: Option<&'static str>,
}

impl Builder {
    pub fn new(name: &str) -> Builder {
        Builder { graph: Graph::new(name), ..Builder::default() }
    }

    /// A builder that appends to `graph` for the pass `pass`.
    pub fn rewriting(graph: Graph, pass: &'static str) -> Builder {
        Builder { graph, pass: Some(pass), ..Builder::default() }
    }

    /// The graph built.
    pub fn finish(self) -> Graph {
        self.graph
    }

    /// `left = `x` f32[3, 4]`: its operand name in the source node (when it is one), the
    /// value's name, and its type.
    pub fn describe(&self, v: ValueId) -> String {
        let n = self.graph.node(v);
        let what = match &n.name {
            Some(name) => format!("`{name}` {}", n.ty),
            None => format!("{}", n.ty),
        };
        match self.operands.iter().find(|(_, id)| *id == v) {
            Some((k, _)) => format!("{k} = {what}"),
            None => what,
        }
    }

    pub fn shape(&self, v: ValueId) -> Shape {
        self.graph.ty(v).shape.clone()
    }

    pub fn dtype(&self, v: ValueId) -> Dtype {
        self.graph.ty(v).dtype
    }

    pub fn rank(&self, v: ValueId) -> usize {
        self.graph.ty(v).rank()
    }

    // ---- single nodes ---------------------------------------------------------------

    /// Appends `op` of `args`, its type inferred by the op's shape rule; an operand
    /// that does not fit is the user's error, naming the operands.
    pub fn op(&mut self, op: Op, args: Vec<ValueId>) -> Result<ValueId> {
        let tys: Vec<&TensorType> = args.iter().map(|a| self.graph.ty(*a)).collect();
        let ty = shape::infer(&op, &tys, &TensorType::new(Dtype::F32, Shape::scalar()), &self.graph.consts).map_err(|msg| match self.pass {
            Some(pass) => Error::internal(format!("{pass} built an ill-typed {}: {msg}", op.name())),
            None => {
                let operands: Vec<String> = args.iter().map(|a| self.describe(*a)).collect();
                Error::user(msg).note(format!("{} of {}", op.name(), operands.join(" and ")))
            }
        })?;
        let id = self.graph.push(op, args, ty);
        self.graph.nodes[id.index()].origin = self.stamp();
        Ok(id)
    }

    /// A model input (data), named; inputs have no origin.
    pub fn input(&mut self, name: &str, ty: TensorType) -> ValueId {
        self.argument(Op::Input, name, ty)
    }

    /// A trained parameter (a weight), named.
    pub fn param(&mut self, name: &str, ty: TensorType) -> ValueId {
        self.argument(Op::Param, name, ty)
    }

    fn argument(&mut self, op: Op, name: &str, ty: TensorType) -> ValueId {
        let id = self.graph.push(op, vec![], ty);
        self.graph.nodes[id.index()].name = Some(name.to_string());
        id
    }

    /// A constant node of its own (constants are not shared: `simplify` merges equal
    /// ones).
    pub fn constant(&mut self, c: impl Into<Constant>) -> ValueId {
        let id = self.graph.add_constant(c.into());
        self.graph.nodes[id.index()].origin = self.stamp();
        id
    }

    /// The origin a node built now takes (none while `origin` is empty).
    fn stamp(&self) -> Option<String> {
        (!self.origin.is_empty()).then(|| self.origin.clone())
    }

    pub fn scalar(&mut self, dtype: Dtype, x: f64) -> ValueId {
        self.constant(Tensor::scalar(dtype, x))
    }

    /// `dtype[shape]` filled with `value`: a scalar constant and a `broadcast_to`
    /// (lowering makes the broadcast a view; no large constant is stored).
    pub fn full(&mut self, dtype: Dtype, shape: Shape, value: f64) -> Result<ValueId> {
        let s = self.scalar(dtype, value);
        self.broadcast_to(s, shape)
    }

    pub fn unary(&mut self, u: UnaryOp, x: ValueId) -> Result<ValueId> {
        self.op(Op::Unary(u), vec![x])
    }

    /// One elementwise node: the operands broadcast as NumPy's do (aligned at the last
    /// dimension, size 1 stretching) and mixed types promote (`Dtype::promote`);
    /// comparisons give bool.
    pub fn binary(&mut self, b: BinaryOp, l: ValueId, r: ValueId) -> Result<ValueId> {
        self.op(Op::Binary(b), vec![l, r])
    }

    /// `cond ? a : b`, elementwise, the three broadcast together.
    pub fn select(&mut self, cond: ValueId, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.op(Op::Where, vec![cond, a, b])
    }

    /// A `cast` node, even to the type `x` has (`simplify` drops that one).
    pub fn cast(&mut self, x: ValueId, to: Dtype) -> Result<ValueId> {
        self.op(Op::Cast { to }, vec![x])
    }

    pub fn broadcast_to(&mut self, x: ValueId, shape: Shape) -> Result<ValueId> {
        self.op(Op::BroadcastTo { shape }, vec![x])
    }

    pub fn reshape(&mut self, x: ValueId, shape: Shape) -> Result<ValueId> {
        self.op(Op::Reshape { shape }, vec![x])
    }

    /// A `transpose` node, even for the identity permutation.
    pub fn transpose(&mut self, x: ValueId, perm: Vec<usize>) -> Result<ValueId> {
        self.op(Op::Transpose { perm }, vec![x])
    }

    /// `x` with its last two axes swapped (a matrix transposed, per batch).
    pub fn transpose_last(&mut self, x: ValueId) -> Result<ValueId> {
        let rank = self.rank(x);
        if rank < 2 {
            return Err(Error::user(format!("cannot swap the last two axes of {}", self.graph.ty(x))));
        }
        let mut perm: Vec<usize> = (0..rank).collect();
        perm.swap(rank - 2, rank - 1);
        self.transpose(x, perm)
    }

    /// Dimensions `start..=end` of `x` merged into one (at most one of them symbolic).
    pub fn flatten(&mut self, x: ValueId, start: usize, end: usize) -> Result<ValueId> {
        if start > end {
            return Err(Error::user(format!("flatten start_dim {start} is after end_dim {end}")));
        }
        let shape = self.shape(x);
        let merged = Dim::product(&shape.0[start..=end]).map_err(Error::user)?;
        let mut dims = shape.0[..start].to_vec();
        dims.push(merged);
        dims.extend(shape.0[end + 1..].iter().cloned());
        self.reshape(x, Shape(dims))
    }

    pub fn matmul(&mut self, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.op(Op::MatMul, vec![a, b])
    }

    /// A reduction over `axes` (sorted, each once), keeping them as size 1 or not.
    pub fn reduce(&mut self, kind: ReduceKind, x: ValueId, axes: Vec<usize>, keepdim: bool) -> Result<ValueId> {
        self.op(Op::Reduce { kind, axes, keepdim }, vec![x])
    }

    /// The variance over `axes`, its divisor the count less `correction`.
    pub fn variance(&mut self, x: ValueId, axes: Vec<usize>, keepdim: bool, correction: f64) -> Result<ValueId> {
        self.op(Op::Variance { axes, keepdim, correction }, vec![x])
    }

    /// One `softmax` node: lowering makes it the library's softmax kernel, or max,
    /// exp, sum and divide loops; `attention` looks for it between two products.
    pub fn softmax(&mut self, x: ValueId, axis: usize) -> Result<ValueId> {
        self.op(Op::Softmax { axis }, vec![x])
    }

    /// Records a deliberate difference from the source framework's semantics at the
    /// source node (once per message).
    pub fn warn(&mut self, what: &str, gradient_only: bool) {
        let w = Warning { message: format!("{}: {what}", self.origin), gradient_only };
        if !self.graph.warnings.contains(&w) {
            self.graph.warnings.push(w);
        }
    }

    // ---- composites ---------------------------------------------------------------

    /// GELU, exact (`x Φ(x)`, with erf) or tanh's approximation: one unary node each,
    /// so `fuse` inlines it into the bias add before it (a matrix product's epilogue)
    /// and the ops after.
    pub fn gelu(&mut self, x: ValueId, approximate: bool) -> Result<ValueId> {
        self.unary(UnaryOp::Composite(if approximate { Composite::GeluTanh } else { Composite::Gelu }), x)
    }

    /// `1 / x`: a constant one of `x`'s type and a `div`.
    pub fn reciprocal(&mut self, x: ValueId) -> Result<ValueId> {
        let one = self.scalar(self.dtype(x), 1.0);
        self.binary(BinaryOp::Div, one, x)
    }

    /// A linear layer `x wᵀ + bias`, the weight `[out, in]` as Mithril and PyTorch store
    /// it: `transpose`, `matmul`, then `add`. `fuse` makes the add (and whatever
    /// elementwise op follows, an activation) the product's epilogue; the C target's
    /// layout pass stores the weight transposed, so the transpose costs nothing.
    pub fn linear(&mut self, x: ValueId, w: ValueId, bias: Option<ValueId>) -> Result<ValueId> {
        if self.rank(w) != 2 {
            return Err(Error::user(format!("a linear layer's weight is a matrix [out, in], got {}", self.graph.ty(w))));
        }
        let wt = self.transpose(w, vec![1, 0])?;
        let y = self.matmul(x, wt)?;
        match bias {
            Some(b) => self.binary(BinaryOp::Add, y, b),
            None => Ok(y),
        }
    }

    /// Layer normalization over `axes` (usually the last), then the optional scale and
    /// shift: `reduce_mean` (keepdim), `sub`, `variance` (keepdim, correction 0), a
    /// constant `eps` of the variance's type, `add`, `sqrt`, `div`, then `mul` by
    /// `scale` and `add` of `bias`. `fuse` drops the variance's own mean as a repeat of
    /// the first (one pass fewer over `x`) and makes subtract, divide, scale and shift
    /// one loop.
    pub fn layer_norm(&mut self, x: ValueId, axes: Vec<usize>, eps: f64, scale: Option<ValueId>, bias: Option<ValueId>) -> Result<ValueId> {
        use BinaryOp as B;
        let mean = self.reduce(ReduceKind::Mean, x, axes.clone(), true)?;
        let centered = self.binary(B::Sub, x, mean)?;
        let var = self.variance(x, axes, true, 0.0)?;
        let eps = self.scalar(self.dtype(var), eps);
        let var_eps = self.binary(B::Add, var, eps)?;
        let den = self.unary(UnaryOp::Sqrt, var_eps)?;
        let mut y = self.binary(B::Div, centered, den)?;
        if let Some(s) = scale {
            y = self.binary(B::Mul, y, s)?;
        }
        if let Some(b) = bias {
            y = self.binary(B::Add, y, b)?;
        }
        Ok(y)
    }

    /// The two halves of a log-softmax along `axis`: `x - max(x)` and
    /// `log(sum(exp(x - max(x))))` (kept as a size-1 axis), from `reduce_max`, `sub`,
    /// `exp`, `reduce_sum` and `log`. Their difference is the log-softmax; a loss that
    /// picks one class subtracts after picking.
    pub fn log_softmax_parts(&mut self, x: ValueId, axis: usize) -> Result<(ValueId, ValueId)> {
        let mx = self.reduce(ReduceKind::Max, x, vec![axis], true)?;
        let shifted = self.binary(BinaryOp::Sub, x, mx)?;
        let e = self.unary(UnaryOp::Exp, shifted)?;
        let se = self.reduce(ReduceKind::Sum, e, vec![axis], true)?;
        Ok((shifted, self.unary(UnaryOp::Log, se)?))
    }

    /// `log(softmax(x))` along `axis`, stable for large logits: [`log_softmax_parts`]
    /// and a `sub`.
    ///
    /// [`log_softmax_parts`]: Builder::log_softmax_parts
    pub fn log_softmax(&mut self, x: ValueId, axis: usize) -> Result<ValueId> {
        let (shifted, lse) = self.log_softmax_parts(x, axis)?;
        self.binary(BinaryOp::Sub, shifted, lse)
    }

    /// A bool mask of `shape` that is true where the position along `axis` equals
    /// `index` (an integer tensor of `shape` without `axis`): `index` reshaped with a
    /// size-1 axis there, an `iota` along `axis` of `index`'s type, and `eq`.
    pub fn one_hot(&mut self, index: ValueId, shape: Shape, axis: usize) -> Result<ValueId> {
        let mut dims = self.shape(index).0;
        dims.insert(axis.min(dims.len()), Dim::Known(1));
        let at = self.reshape(index, Shape(dims))?;
        let positions = self.op(Op::Iota { shape, axis, dtype: self.dtype(index) }, vec![])?;
        self.binary(BinaryOp::Eq, positions, at)
    }

    /// `take_along_axis(x, index[.., None, ..], axis)` with the axis dropped: the
    /// [`one_hot`](Builder::one_hot) mask of `index`, a `where` that keeps `x` there
    /// and zero elsewhere, and a sum over `axis` (the IR has no take-along-axis; the
    /// mask is also the gradient's scatter).
    pub fn pick(&mut self, x: ValueId, index: ValueId, axis: usize) -> Result<ValueId> {
        let hit = self.one_hot(index, self.shape(x), axis)?;
        let zero = self.scalar(self.dtype(x), 0.0);
        let picked = self.select(hit, x, zero)?;
        self.reduce(ReduceKind::Sum, picked, vec![axis], false)
    }

    /// Scaled dot-product attention, `softmax(q kᵀ · scale + masks) v` over the last
    /// two axes (any leading batch and head axes broadcast), in the pattern the
    /// `attention` pass makes one kernel of: [`attention_scores`], then
    /// [`causal_mask`] and [`attention_mask`] as asked, then [`attend`]. `scale`
    /// defaults to `1/√d`, `d` the query's last dimension. `mask` is a bool mask (true
    /// keeps a score) or a float bias added to the scores.
    ///
    /// [`attention_scores`]: Builder::attention_scores
    /// [`causal_mask`]: Builder::causal_mask
    /// [`attention_mask`]: Builder::attention_mask
    /// [`attend`]: Builder::attend
    pub fn attention(&mut self, q: ValueId, k: ValueId, v: ValueId, scale: Option<f64>, causal: bool, mask: Option<ValueId>) -> Result<ValueId> {
        let mut scores = self.attention_scores(q, k, scale)?;
        if causal {
            scores = self.causal_mask(scores)?;
        }
        if let Some(m) = mask {
            scores = self.attention_mask(scores, m)?;
        }
        self.attend(scores, v)
    }

    /// `q kᵀ · scale`: `transpose` of the key's last two axes, `matmul`, a constant
    /// scale of the query's type and `mul` (which `fuse` makes the product's epilogue,
    /// and `attention` the fused kernel's score).
    pub fn attention_scores(&mut self, q: ValueId, k: ValueId, scale: Option<f64>) -> Result<ValueId> {
        let (qs, ks) = (self.shape(q), self.shape(k));
        if qs.rank() < 2 || ks.rank() < 2 {
            return Err(Error::user(format!("attention needs query and key of rank 2 or more, got {qs} and {ks}")));
        }
        let scale = match scale {
            Some(s) => s,
            None => {
                let d = qs.0[qs.rank() - 1].known().ok_or_else(|| Error::user(format!("attention needs a known head size, got {qs}")))?;
                1.0 / (d as f64).sqrt()
            }
        };
        let kt = self.transpose_last(k)?;
        let scores = self.matmul(q, kt)?;
        let sc = self.scalar(self.dtype(q), scale);
        self.binary(BinaryOp::Mul, scores, sc)
    }

    /// The scores `[.., L, S]` with `-inf` added above the diagonal (`np.tril`): two
    /// `iota`s (rows, columns) and `le` make the mask, [`mask_bias`] the bias, `add`
    /// adds it. The bias reads no memory, so `fuse` computes it inside the epilogue.
    ///
    /// [`mask_bias`]: Builder::mask_bias
    pub fn causal_mask(&mut self, scores: ValueId) -> Result<ValueId> {
        let s = self.shape(scores);
        let r = s.rank();
        let ls = Shape(s.0[r - 2..].to_vec());
        let rows = self.op(Op::Iota { shape: ls.clone(), axis: 0, dtype: Dtype::I32 }, vec![])?;
        let cols = self.op(Op::Iota { shape: ls, axis: 1, dtype: Dtype::I32 }, vec![])?;
        let keep = self.binary(BinaryOp::Le, cols, rows)?;
        let bias = self.mask_bias(keep, self.dtype(scores))?;
        self.binary(BinaryOp::Add, scores, bias)
    }

    /// The scores with a mask applied: a bool mask (true keeps) as [`mask_bias`], a
    /// float mask added as it is.
    ///
    /// [`mask_bias`]: Builder::mask_bias
    pub fn attention_mask(&mut self, scores: ValueId, mask: ValueId) -> Result<ValueId> {
        let bias = if self.dtype(mask) == Dtype::Bool { self.mask_bias(mask, self.dtype(scores))? } else { mask };
        self.binary(BinaryOp::Add, scores, bias)
    }

    /// `keep ? 0 : -inf` in `dtype`: constants zero and `-inf`, and a `where`.
    pub fn mask_bias(&mut self, keep: ValueId, dtype: Dtype) -> Result<ValueId> {
        let zero = self.scalar(dtype, 0.0);
        let ninf = self.scalar(dtype, f64::NEG_INFINITY);
        self.select(keep, zero, ninf)
    }

    /// `softmax(scores) v`: a `softmax` along the last axis and a `matmul`.
    pub fn attend(&mut self, scores: ValueId, v: ValueId) -> Result<ValueId> {
        let p = self.softmax(scores, self.rank(scores) - 1)?;
        self.matmul(p, v)
    }
}

/// Axis `ax` of a rank-`rank` tensor, counted from the end when negative.
pub fn axis(ax: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if ax < -r || ax >= r {
        return Err(Error::user(format!("axis {ax} is out of range for a rank-{rank} tensor")));
    }
    Ok(if ax < 0 { (ax + r) as usize } else { ax as usize })
}

/// A reshape target with at most one `-1` (None), resolved against the input shape.
pub fn resolve_infer_dim(input: &Shape, target: &[Option<Dim>]) -> Result<Shape, String> {
    let holes = target.iter().filter(|d| d.is_none()).count();
    if holes > 1 {
        return Err("only one dimension can be -1".into());
    }
    let given: Vec<Dim> = target.iter().flatten().cloned().collect();
    if holes == 0 {
        return Ok(Shape(given));
    }
    let (total, part) = (input.numel_dim()?, Shape(given).numel_dim()?);
    if part == Dim::Known(0) {
        return Err("the element count does not divide".into());
    }
    let hole = total.div_exact(&part).ok_or_else(|| match (&total, &part) {
        (Dim::Known(_), Dim::Known(_)) => "the element count does not divide".to_string(),
        _ => format!("{total} elements do not divide by {part} for every value of the symbols"),
    })?;
    Ok(Shape(target.iter().map(|d| d.clone().unwrap_or_else(|| hole.clone())).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::{Kernel, Library, Program};

    fn f32s(dims: &[u64]) -> TensorType {
        TensorType::new(Dtype::F32, Shape::known(dims))
    }

    /// The program `graph`'s outputs compile to for `library`, after the graph passes
    /// and the program pipeline (`fuse`, `attention`, `memory`), and as lowered.
    fn compiled(mut graph: Graph, library: Library) -> (Program, Program) {
        crate::passes::run_pipeline(&mut graph, crate::passes::PIPELINE, &Default::default(), |_, _| {}).unwrap();
        let opts = crate::lower::Options { library, ..Default::default() };
        let lowered = crate::lower::lower(&graph, &opts).unwrap();
        (lowered, crate::passes::compile(&graph, &opts, &[], |_, _| {}).unwrap())
    }

    fn kinds(p: &Program) -> Vec<&'static str> {
        p.steps
            .iter()
            .map(|s| match &s.kernel {
                Kernel::Map { .. } => "map",
                Kernel::Reduce { .. } => "reduce",
                Kernel::ArgReduce { .. } => "argreduce",
                Kernel::Gemm { epilogue: None, .. } => "gemm",
                Kernel::Gemm { epilogue: Some(_), .. } => "gemm+epilogue",
                Kernel::Conv { .. } => "conv",
                Kernel::Pool { .. } => "pool",
                Kernel::Softmax { .. } => "softmax",
                Kernel::Attention { .. } => "attention",
                Kernel::Dequantize { .. } => "dequantize",
                Kernel::Rows { .. } => "rows",
            })
            .collect()
    }

    fn output(b: &mut Builder, v: ValueId) {
        b.graph.outputs.push(Output { name: "out".into(), value: v, loss: false });
    }

    fn gpu_library() -> Library {
        Library { gemm: &[Dtype::F32], softmax: &[Dtype::F32], attention: &[Dtype::F32], attention_dim: 128, ..Default::default() }
    }

    /// A graph's nodes other than inputs and parameters, as text that does not depend
    /// on where the inputs and parameters stand: an argument is a name (`x`) or the
    /// position of the node among these (`%3`), a constant its values.
    fn pattern(g: &Graph) -> Vec<String> {
        let is_arg = |v: ValueId| matches!(g.node(v).op, Op::Input | Op::Param);
        let ops: Vec<ValueId> = g.ids().filter(|&v| !is_arg(v)).collect();
        let label = |v: ValueId| match &g.node(v).name {
            Some(name) if is_arg(v) => name.clone(),
            _ => format!("%{}", ops.iter().position(|&o| o == v).unwrap()),
        };
        ops.iter()
            .map(|&v| {
                let n = g.node(v);
                let op = match &n.op {
                    Op::Constant(c) => format!("constant {}", crate::ir::print::constant_values(&g.consts[c.0 as usize])),
                    op => format!("{op:?}"),
                };
                let args: Vec<String> = n.args.iter().map(|&a| label(a)).collect();
                if args.is_empty() { format!("{op} : {}", n.ty) } else { format!("{op}({}) : {}", args.join(", "), n.ty) }
            })
            .collect()
    }

    /// The Mithril frontend's graph of a model whose one child is `node`, connected to
    /// top-level keys as `conns` says.
    fn mithril(node: &str, conns: &str, shapes: &[(&str, &[u64])]) -> Graph {
        let text = format!(r#"{{"name": "Model", "submodels": {{"m_0": {node}}}, "connections": {{"m_0": {conns}}}}}"#);
        let shapes = shapes.iter().map(|(k, d)| (k.to_string(), Shape::known(d))).collect();
        let opts = crate::frontend::mithril::Options { shapes, ..Default::default() };
        crate::frontend::mithril::load_str(&text, "model.json", "model", &opts).unwrap()
    }

    #[test]
    fn binary_broadcasts_and_promotes_in_one_node() {
        let mut b = Builder::new("g");
        let x = b.input("x", f32s(&[3, 1]));
        let y = b.input("y", TensorType::new(Dtype::I32, Shape::known(&[4])));
        let s = b.input("s", TensorType::new(Dtype::F32, Shape(vec![Dim::Sym("B".into()), Dim::Known(1), Dim::Known(5)])));
        let t = b.input("t", f32s(&[7, 1]));
        let before = b.graph.nodes.len();
        let xy = b.binary(BinaryOp::Add, x, y).unwrap();
        assert_eq!(b.graph.ty(xy).to_string(), "f32[3, 4]");
        let st = b.binary(BinaryOp::Mul, s, t).unwrap();
        assert_eq!(b.graph.ty(st).to_string(), "f32[B, 7, 5]");
        let lt = b.binary(BinaryOp::Lt, x, y).unwrap();
        assert_eq!(b.graph.ty(lt).to_string(), "bool[3, 4]");
        // No broadcast_to or cast: the ops broadcast and promote themselves.
        assert_eq!(b.graph.nodes.len(), before + 3);
    }

    #[test]
    fn a_shape_error_names_the_operands() {
        let mut b = Builder::new("g");
        let x = b.input("x", f32s(&[3]));
        let y = b.input("y", f32s(&[4]));
        b.operands = vec![("left".into(), x)];
        let e = b.binary(BinaryOp::Add, x, y).unwrap_err();
        assert_eq!(
            e.to_string(),
            "shapes [3] and [4] cannot be broadcast together (dimension 0 of the result)\n  note: add of left = `x` f32[3] and `y` f32[4]"
        );
        assert_eq!(e.kind, crate::ErrorKind::User);
        let e = b.linear(x, y, None).unwrap_err();
        assert_eq!(e.to_string(), "a linear layer's weight is a matrix [out, in], got f32[4]");
        assert_eq!(axis(-3, 2).unwrap_err().to_string(), "axis -3 is out of range for a rank-2 tensor");
        assert_eq!(axis(-1, 2).unwrap(), 1);
    }

    #[test]
    fn nodes_take_the_site_as_origin() {
        let mut b = Builder::new("g");
        let x = b.input("x", f32s(&[2]));
        b.origin = "m_1 (Relu)".into();
        let y = b.unary(UnaryOp::Relu, x).unwrap();
        let c = b.scalar(Dtype::F32, 2.0);
        assert_eq!(b.graph.node(x).origin, None);
        assert_eq!(b.graph.node(y).origin.as_deref(), Some("m_1 (Relu)"));
        assert_eq!(b.graph.node(c).origin.as_deref(), Some("m_1 (Relu)"));
        b.warn("differs", false);
        b.warn("differs", false);
        assert_eq!(b.graph.warnings, vec![Warning { message: "m_1 (Relu): differs".into(), gradient_only: false }]);
    }

    #[test]
    fn full_is_a_broadcast_scalar() {
        let mut b = Builder::new("g");
        let z = b.full(Dtype::I64, Shape::known(&[2, 3]), 0.0).unwrap();
        assert_eq!(pattern(&b.graph), ["constant [0] : i64[]", "BroadcastTo { shape: Shape([Known(2), Known(3)]) }(%0) : i64[2, 3]"]);
        assert_eq!(b.graph.ty(z).to_string(), "i64[2, 3]");
    }

    #[test]
    fn flatten_and_reshape_targets() {
        let sym = |s: &str| Dim::Sym(s.into());
        let mut b = Builder::new("g");
        let x = b.input("x", TensorType::new(Dtype::F32, Shape(vec![sym("B"), Dim::Known(3), Dim::Known(4)])));
        let y = b.flatten(x, 1, 2).unwrap();
        assert_eq!(b.graph.ty(y).to_string(), "f32[B, 12]");
        let y = b.flatten(x, 0, 1).unwrap();
        assert_eq!(b.graph.ty(y).to_string(), "f32[3*B, 4]");
        assert_eq!(b.flatten(x, 2, 1).unwrap_err().to_string(), "flatten start_dim 2 is after end_dim 1");
        let x = Shape(vec![sym("B"), Dim::Known(128), Dim::Known(768)]);
        let target = [None, Some(Dim::Known(128)), Some(Dim::Known(12)), Some(Dim::Known(64))];
        assert_eq!(resolve_infer_dim(&x, &target).unwrap(), Shape(vec![sym("B"), Dim::Known(128), Dim::Known(12), Dim::Known(64)]));
        assert_eq!(resolve_infer_dim(&Shape::known(&[2, 3, 4]), &[Some(Dim::Known(2)), None]).unwrap(), Shape::known(&[2, 12]));
        assert_eq!(resolve_infer_dim(&Shape::known(&[2, 3, 4]), &[Some(Dim::Known(5)), None]).unwrap_err(), "the element count does not divide");
        assert_eq!(resolve_infer_dim(&Shape::known(&[4]), &[None, None]).unwrap_err(), "only one dimension can be -1");
        // -1 stands for a product of symbols, or what dividing by one leaves.
        let x = Shape(vec![sym("B"), sym("S"), Dim::Known(768)]);
        assert_eq!(resolve_infer_dim(&x, &[None, Some(Dim::Known(768))]).unwrap().to_string(), "[B*S, 768]");
        assert_eq!(resolve_infer_dim(&x, &[Some(sym("S")), None, Some(Dim::Known(64))]).unwrap().to_string(), "[S, 12*B, 64]");
        assert_eq!(resolve_infer_dim(&x, &[Some(sym("T")), None]).unwrap_err(), "768*B*S elements do not divide by T for every value of the symbols");
    }

    #[test]
    fn layer_norm_is_mithrils_and_fuse_merges_its_means() {
        let mut b = Builder::new("ln");
        let x = b.input("input", f32s(&[4, 16]));
        let w = b.param("weight", f32s(&[16]));
        let bias = b.param("bias", f32s(&[16]));
        let y = b.layer_norm(x, vec![1], 1e-5, Some(w), Some(bias)).unwrap();
        output(&mut b, y);
        let m = mithril(r#"{"name": "LayerNorm"}"#, r#"{"input": {"key": {"name": "input"}}, "output": {"key": {"name": "output"}}}"#, &[("input", &[4, 16])]);
        assert_eq!(pattern(&b.graph), pattern(&m));
        let graph = b.finish();
        let (lowered, fused) = compiled(graph.clone(), Library::default());
        let count = |p: &Program, kind: &str| kinds(p).iter().filter(|k| **k == kind).count();
        // The mean, and the variance's two passes (its mean, then the squares): the
        // variance's mean is the same kernel as the first, and fuse drops it.
        assert_eq!((count(&lowered, "reduce"), count(&fused, "reduce")), (3, 2));
        // Subtract, add eps, sqrt, divide, scale, shift: chains of one loop each.
        assert_eq!(count(&lowered, "map"), 7);
        assert!(count(&fused, "map") <= 2, "{:?}", kinds(&fused));
        // For a target that renders row kernels, those are one.
        let (_, rows) = compiled(graph, Library { rows: &[Dtype::F32], ..Library::default() });
        assert_eq!(kinds(&rows), ["rows"]);
    }

    #[test]
    fn a_linear_layer_and_its_activation_are_one_product() {
        let mut b = Builder::new("linear");
        let x = b.input("input", f32s(&[4, 16]));
        let w = b.param("weight", f32s(&[8, 16]));
        let bias = b.param("bias", f32s(&[8]));
        let y = b.linear(x, w, Some(bias)).unwrap();
        let m = mithril(r#"{"name": "Linear", "args": {"dimension": 8}}"#, r#"{"input": {"key": {"name": "input"}}, "output": {"key": {"name": "output"}}}"#, &[("input", &[4, 16])]);
        assert_eq!(pattern(&b.graph), pattern(&m));
        let y = b.gelu(y, true).unwrap();
        output(&mut b, y);
        let (lowered, fused) = compiled(b.finish(), gpu_library());
        assert_eq!(kinds(&lowered), ["gemm", "map", "map", "map"]);
        assert_eq!(kinds(&fused), ["gemm+epilogue"]);
    }

    #[test]
    fn gelu_is_mithrils() {
        for approximate in [false, true] {
            let mut b = Builder::new("gelu");
            let x = b.input("input", f32s(&[3]));
            b.gelu(x, approximate).unwrap();
            let conns = format!(r#"{{"input": {{"key": {{"name": "input"}}}}, "approximate": {approximate}, "output": {{"key": {{"name": "output"}}}}}}"#);
            assert_eq!(pattern(&b.graph), pattern(&mithril(r#"{"name": "Gelu"}"#, &conns, &[("input", &[3])])));
        }
    }

    #[test]
    fn attention_is_mithrils_and_one_kernel() {
        let qkv: &[(&str, &[u64])] = &[("q", &[1, 2, 8, 16]), ("k", &[1, 2, 8, 16]), ("v", &[1, 2, 8, 16]), ("mask", &[8, 8])];
        let inputs = |b: &mut Builder| -> Vec<ValueId> { qkv.iter().map(|(n, d)| b.input(n, f32s(d))).collect() };
        let qkv_conns = r#""query": {"key": {"name": "q"}}, "key": {"key": {"name": "k"}}, "value": {"key": {"name": "v"}}, "output": {"key": {"name": "output"}}"#;
        // Causal, the default scale.
        let mut b = Builder::new("attention");
        let i = inputs(&mut b);
        let y = b.attention(i[0], i[1], i[2], None, true, None).unwrap();
        // `attn_mask` keeps its default (None) unless left out of the exposed keys.
        let node = |exposed: &str| format!(r#"{{"name": "ScaledDotProduct", "exposed_keys": [{exposed}]}}"#);
        let conns = format!(r#"{{{qkv_conns}, "is_causal": true, "dropout_p": 0.0, "scale": null}}"#);
        let all = r#""output", "dropout_p", "attn_mask", "is_causal", "scale""#;
        assert_eq!(pattern(&b.graph), pattern(&mithril(&node(all), &conns, qkv)));
        // The heads' outputs transposed and merged, as a transformer block does: the
        // attention pass makes one kernel of the products and the softmax, storing
        // through the transpose.
        let y = b.transpose(y, vec![0, 2, 1, 3]).unwrap();
        let y = b.reshape(y, Shape::known(&[1, 8, 32])).unwrap();
        let y = b.unary(UnaryOp::Relu, y).unwrap();
        output(&mut b, y);
        let (lowered, fused) = compiled(b.finish(), gpu_library());
        assert_eq!(kinds(&lowered).iter().filter(|k| **k == "gemm").count(), 2);
        assert_eq!(kinds(&fused), ["attention", "map"]);
        // A float mask and a scale.
        let mut b = Builder::new("attention");
        let i = inputs(&mut b);
        b.attention(i[0], i[1], i[2], Some(0.25), false, Some(i[3])).unwrap();
        let conns = format!(r#"{{{qkv_conns}, "attn_mask": {{"key": {{"name": "mask"}}}}, "is_causal": false, "dropout_p": 0.0, "scale": 0.25}}"#);
        let no_mask = r#""output", "dropout_p", "is_causal", "scale""#;
        assert_eq!(pattern(&b.graph), pattern(&mithril(&node(no_mask), &conns, qkv)));
    }

    #[test]
    fn log_softmax_and_pick_compute_what_they_say() {
        let mut b = Builder::new("g");
        let x = b.input("x", f32s(&[2, 3]));
        let t = b.input("t", TensorType::new(Dtype::I64, Shape::known(&[2])));
        let ls = b.log_softmax(x, 1).unwrap();
        let picked = b.pick(x, t, 1).unwrap();
        b.graph.outputs.push(Output { name: "ls".into(), value: ls, loss: false });
        b.graph.outputs.push(Output { name: "picked".into(), value: picked, loss: false });
        let xs = [1.0, 2.0, 3.0, -1.0, 0.0, 5.0];
        let feeds = [
            ("x".to_string(), Tensor::new(Dtype::F32, vec![2, 3], xs.to_vec())),
            ("t".to_string(), Tensor::new(Dtype::I64, vec![2], vec![2.0, 0.0])),
        ];
        let out = crate::interp::run(&b.finish(), &feeds.into_iter().collect()).unwrap();
        let row_lse = |r: &[f64]| r.iter().map(|v| v.exp()).sum::<f64>().ln();
        let lse = [row_lse(&xs[..3]), row_lse(&xs[3..])];
        for (i, got) in out[0].1.data.iter().enumerate() {
            assert!((got - (xs[i] - lse[i / 3])).abs() < 1e-5, "log_softmax[{i}] = {got}");
        }
        assert_eq!(out[1].1.data, [3.0, -1.0]);
    }
}
