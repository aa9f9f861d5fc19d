//! The IR's operations: one enum, whose variants carry their attributes.
//!
//! Each concern over ops is one exhaustive `match` in a file named after it: the shape
//! rule in `passes/shape.rs`, the meaning in `interp`, and (later) gradients and each
//! target's lowering. Adding a variant makes the compiler list every place to extend.
//! Static facts about ops (names, arity, elementwise-ness) live here.

use super::types::{Dtype, Shape};

/// Index of a constant tensor in [`super::Graph::consts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConstId(pub u32);

#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// A data input of the model, named by its node.
    Input,
    /// A trainable parameter (weight) of the model, named by its node.
    Param,
    /// A constant tensor stored in the graph.
    Constant(ConstId),
    /// Elementwise function of one tensor.
    Unary(UnaryOp),
    /// Elementwise function of two tensors, with NumPy broadcasting.
    Binary(BinaryOp),
    /// `where(cond, a, b)`, with NumPy broadcasting of all three.
    Where,
    /// Elementwise conversion to another element type.
    Cast { to: Dtype },
    /// NumPy `matmul`: batched over leading dimensions, which broadcast; a rank-1
    /// operand is promoted to a matrix and the added dimension removed again.
    MatMul,
    /// Cross-correlation over the trailing spatial dimensions (NCW or NCHW):
    /// args `(input, weight)` or `(input, weight, bias)`, weight `[O, C/groups, k...]`,
    /// the bias broadcast onto the output.
    Conv(ConvAttrs),
    /// Max or average pooling over the trailing spatial dimensions.
    Pool(PoolAttrs),
    /// Reduction over `axes` (sorted, distinct).
    Reduce { kind: ReduceKind, axes: Vec<usize>, keepdim: bool },
    /// Index of the maximum or minimum along `axis`, or over the flattened tensor.
    ArgReduce { kind: ArgKind, axis: Option<usize>, keepdim: bool },
    /// Variance over `axes` with `correction` (NumPy's `ddof`).
    Variance { axes: Vec<usize>, keepdim: bool, correction: f64 },
    /// `exp(x - max) / sum(exp(x - max))` along `axis`.
    Softmax { axis: usize },
    /// Same elements in row-major order, new shape.
    Reshape { shape: Shape },
    /// Permutation of dimensions: output dim `i` is input dim `perm[i]`.
    Transpose { perm: Vec<usize> },
    /// NumPy `broadcast_to`.
    BroadcastTo { shape: Shape },
    /// Python-style slicing, one range per dimension.
    Slice { ranges: Vec<SliceRange> },
    /// Concatenation of all args along `axis`.
    Concat { axis: usize },
    /// `take(data, indices, axis)`: args `(data, indices)`; the indices' shape replaces
    /// dimension `axis` of data. Embedding lookup is `Gather { axis: 0 }`.
    Gather { axis: usize },
    /// A tensor whose elements are their own index along `axis`.
    Iota { shape: Shape, axis: usize, dtype: Dtype },
    /// Constant padding: `(before, after)` per dimension.
    Pad { pads: Vec<(u64, u64)>, value: f64 },
    /// Identity whose gradient is zero.
    StopGradient,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnaryOp {
    Neg,
    Abs,
    Sign,
    Exp,
    Log,
    Sqrt,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    /// `x * Phi(x)`, with the exact normal CDF (erf form).
    Gelu,
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    GeluTanh,
    /// `log(1 + exp(x))`, computed stably.
    Softplus,
    /// The error function (exact GELU's derivative needs it).
    Erf,
    Floor,
    /// Logical not of a bool tensor.
    Not,
    /// `isnan(x)` (bool result).
    IsNan,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    FloorDiv,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReduceKind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ArgKind {
    ArgMax,
    ArgMin,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    Max,
    Avg,
}

/// Attributes of a convolution with `n` spatial dimensions (every vector has length `n`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConvAttrs {
    pub stride: Vec<u64>,
    pub padding: Vec<(u64, u64)>,
    pub dilation: Vec<u64>,
    pub groups: u64,
}

/// Attributes of a pooling window with `n` spatial dimensions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolAttrs {
    pub kind: PoolKind,
    pub kernel: Vec<u64>,
    pub stride: Vec<u64>,
    pub padding: Vec<(u64, u64)>,
    pub dilation: Vec<u64>,
}

/// One dimension of a slice, as Python's `slice(start, stop, step)` with `None`s resolved
/// by the shape rule: negative `start`/`stop` count from the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SliceRange {
    pub start: Option<i64>,
    pub stop: Option<i64>,
    pub step: i64,
}

impl SliceRange {
    pub const FULL: SliceRange = SliceRange { start: None, stop: None, step: 1 };

    pub fn is_full(&self) -> bool {
        *self == SliceRange::FULL
    }

    /// Python's `slice.indices(len)`: (first index, step, element count).
    pub fn resolve(&self, len: u64) -> Result<(i64, i64, u64), String> {
        let len = i64::try_from(len).map_err(|_| format!("dimension {len} is too large"))?;
        let step = self.step;
        if step == 0 {
            return Err("slice step cannot be zero".into());
        }
        let clamp = |v: i64, lo: i64, hi: i64| v.max(lo).min(hi);
        let norm = |v: i64| if v < 0 { v + len } else { v };
        let (lo, hi) = if step > 0 { (0, len) } else { (-1, len - 1) };
        let start = match self.start {
            None => if step > 0 { lo } else { hi },
            Some(s) => clamp(norm(s), lo, hi),
        };
        let stop = match self.stop {
            None => if step > 0 { hi } else { lo },
            Some(s) => clamp(norm(s), lo, hi),
        };
        let count = if step > 0 {
            if stop > start { (stop - start + step - 1) / step } else { 0 }
        } else if start > stop {
            (start - stop + (-step) - 1) / (-step)
        } else {
            0
        };
        Ok((start, step, count as u64))
    }
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 18] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Sign,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
        UnaryOp::Softplus,
        UnaryOp::Erf,
        UnaryOp::Floor,
        UnaryOp::Not,
        UnaryOp::IsNan,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Sign => "sign",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Relu => "relu",
            UnaryOp::Gelu => "gelu",
            UnaryOp::GeluTanh => "gelu_tanh",
            UnaryOp::Softplus => "softplus",
            UnaryOp::Erf => "erf",
            UnaryOp::Floor => "floor",
            UnaryOp::Not => "not",
            UnaryOp::IsNan => "isnan",
        }
    }
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 19] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::FloorDiv,
        BinaryOp::Eq,
        BinaryOp::Ne,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::Shl,
        BinaryOp::Shr,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
            BinaryOp::FloorDiv => "floordiv",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
            BinaryOp::Xor => "xor",
            BinaryOp::Shl => "shl",
            BinaryOp::Shr => "shr",
        }
    }

    /// Comparisons produce bool whatever their operands.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }

    /// Logical ops take and produce bool.
    pub fn is_logical(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or | BinaryOp::Xor)
    }
}

impl ReduceKind {
    pub const ALL: [ReduceKind; 5] =
        [ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod];
    pub fn name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "reduce_sum",
            ReduceKind::Mean => "reduce_mean",
            ReduceKind::Max => "reduce_max",
            ReduceKind::Min => "reduce_min",
            ReduceKind::Prod => "reduce_prod",
        }
    }
}

impl ArgKind {
    pub fn name(self) -> &'static str {
        match self {
            ArgKind::ArgMax => "argmax",
            ArgKind::ArgMin => "argmin",
        }
    }
}

impl PoolKind {
    pub fn name(self) -> &'static str {
        match self {
            PoolKind::Max => "max_pool",
            PoolKind::Avg => "avg_pool",
        }
    }
}

impl Op {
    /// The op's name in the text form of the IR.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input => "input",
            Op::Param => "param",
            Op::Constant(_) => "constant",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Where => "where",
            Op::Cast { .. } => "cast",
            Op::MatMul => "matmul",
            Op::Conv(_) => "conv",
            Op::Pool(p) => p.kind.name(),
            Op::Reduce { kind, .. } => kind.name(),
            Op::ArgReduce { kind, .. } => kind.name(),
            Op::Variance { .. } => "variance",
            Op::Softmax { .. } => "softmax",
            Op::Reshape { .. } => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::BroadcastTo { .. } => "broadcast_to",
            Op::Slice { .. } => "slice",
            Op::Concat { .. } => "concat",
            Op::Gather { .. } => "gather",
            Op::Iota { .. } => "iota",
            Op::Pad { .. } => "pad",
            Op::StopGradient => "stop_gradient",
        }
    }

    /// How many arguments the op takes: `(min, max)`; `None` for any number ≥ min.
    pub fn arity(&self) -> (usize, Option<usize>) {
        match self {
            Op::Input | Op::Param | Op::Constant(_) | Op::Iota { .. } => (0, Some(0)),
            Op::Unary(_)
            | Op::Cast { .. }
            | Op::Pool(_)
            | Op::Reduce { .. }
            | Op::ArgReduce { .. }
            | Op::Variance { .. }
            | Op::Softmax { .. }
            | Op::Reshape { .. }
            | Op::Transpose { .. }
            | Op::BroadcastTo { .. }
            | Op::Slice { .. }
            | Op::Pad { .. }
            | Op::StopGradient => (1, Some(1)),
            Op::Binary(_) | Op::MatMul | Op::Gather { .. } => (2, Some(2)),
            Op::Conv(_) => (2, Some(3)),
            Op::Where => (3, Some(3)),
            Op::Concat { .. } => (1, None),
        }
    }

    /// Elementwise ops: each output element depends on the same-index input elements
    /// (after broadcasting); the candidates for loop fusion.
    pub fn is_elementwise(&self) -> bool {
        match self {
            Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. } | Op::StopGradient => true,
            Op::Input
            | Op::Param
            | Op::Constant(_)
            | Op::MatMul
            | Op::Conv(_)
            | Op::Pool(_)
            | Op::Reduce { .. }
            | Op::ArgReduce { .. }
            | Op::Variance { .. }
            | Op::Softmax { .. }
            | Op::Reshape { .. }
            | Op::Transpose { .. }
            | Op::BroadcastTo { .. }
            | Op::Slice { .. }
            | Op::Concat { .. }
            | Op::Gather { .. }
            | Op::Iota { .. }
            | Op::Pad { .. } => false,
        }
    }

    /// Every kind of op, one representative each, for tables generated from the code
    /// (the op-support matrix in `docs/ops.md`).
    pub fn catalogue() -> Vec<Op> {
        let mut ops = vec![Op::Input, Op::Param, Op::Constant(ConstId(0))];
        ops.extend(UnaryOp::ALL.into_iter().map(Op::Unary));
        ops.extend(BinaryOp::ALL.into_iter().map(Op::Binary));
        let conv = ConvAttrs { stride: vec![1], padding: vec![(0, 0)], dilation: vec![1], groups: 1 };
        let pool = |kind| PoolAttrs {
            kind,
            kernel: vec![1],
            stride: vec![1],
            padding: vec![(0, 0)],
            dilation: vec![1],
        };
        ops.extend([
            Op::Where,
            Op::Cast { to: Dtype::F32 },
            Op::MatMul,
            Op::Conv(conv),
            Op::Pool(pool(PoolKind::Max)),
            Op::Pool(pool(PoolKind::Avg)),
        ]);
        ops.extend(ReduceKind::ALL.into_iter().map(|kind| Op::Reduce { kind, axes: vec![], keepdim: false }));
        ops.extend([
            Op::ArgReduce { kind: ArgKind::ArgMax, axis: None, keepdim: false },
            Op::ArgReduce { kind: ArgKind::ArgMin, axis: None, keepdim: false },
            Op::Variance { axes: vec![], keepdim: false, correction: 0.0 },
            Op::Softmax { axis: 0 },
            Op::Reshape { shape: Shape::scalar() },
            Op::Transpose { perm: vec![] },
            Op::BroadcastTo { shape: Shape::scalar() },
            Op::Slice { ranges: vec![] },
            Op::Concat { axis: 0 },
            Op::Gather { axis: 0 },
            Op::Iota { shape: Shape::scalar(), axis: 0, dtype: Dtype::I32 },
            Op::Pad { pads: vec![], value: 0.0 },
            Op::StopGradient,
        ]);
        ops
    }
}
