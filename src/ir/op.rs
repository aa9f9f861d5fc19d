//! The IR's operations, each declared once: one enum, whose variants carry their
//! attributes, written as the tables below (the macros are in `declare.rs`).
//!
//! A row gives a variant's fields, its name in the text form, how many arguments it takes
//! and its category; the enum, `ALL` and `name` of each kinds enum, and `Op::name`,
//! `arity`, `category`, `is_elementwise`, the printer and parser of attributes and
//! `catalogue` are made from it. What an op means is one exhaustive `match` in a file
//! named after each concern: the shape rule in `passes/shape.rs`, the meaning in `interp`,
//! the gradient in `passes/autodiff.rs` and each target's lowering. Adding a row makes the
//! compiler list every place to extend.
//!
//! Adding an elementwise op of one argument is one line in `UnaryOp` below (in
//! `Composite` when the primitives compose it: then no target needs to know it); an op
//! with attributes is one row in `Op`, for example
//! `LayerNorm { axes: Vec<usize>, epsilon: f64 } = "layer_norm", args 3, Normalization;`.

use super::types::{Dtype, Shape};

/// Index of a constant tensor in [`super::Graph::consts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConstId(pub u32);

ops! {
    #[derive(Debug, Clone, PartialEq)]
    pub enum Op {
        /// A data input of the model, named by its node.
        Input = "input", args 0, Source;
        /// A trainable parameter (weight) of the model, named by its node.
        Param = "param", args 0, Source;
        /// A constant tensor stored in the graph.
        Constant(#[node] ConstId) = "constant", args 0, Source;
        /// Elementwise function of one tensor.
        Unary(#[kind] UnaryOp), args 1, ElementwiseUnary;
        /// Elementwise function of two tensors, with NumPy broadcasting.
        Binary(#[kind] BinaryOp), args 2, ElementwiseBinary;
        /// `where(cond, a, b)`, with NumPy broadcasting of all three.
        Where = "where", args 3, Elementwise;
        /// Elementwise conversion to another element type.
        Cast { to: Dtype } = "cast", args 1, Elementwise;
        /// NumPy `matmul`: batched over leading dimensions, which broadcast; a rank-1
        /// operand is promoted to a matrix and the added dimension removed again.
        MatMul = "matmul", args 2, LinearAlgebra;
        /// Cross-correlation over the trailing spatial dimensions (NCW or NCHW):
        /// args `(input, weight)` or `(input, weight, bias)`, weight `[O, C/groups, k...]`,
        /// the bias broadcast onto the output.
        Conv(
            /// Attributes of a convolution with `n` spatial dimensions (every vector has length `n`).
            #[derive(Debug, Clone, PartialEq, Eq, Hash)]
            ConvAttrs { stride: Vec<u64>, padding: Vec<(u64, u64)>, dilation: Vec<u64>, groups: u64 }
        ) = "conv", args 2..=3, Window;
        /// Max or average pooling over the trailing spatial dimensions.
        Pool(
            /// Attributes of a pooling window with `n` spatial dimensions.
            #[derive(Debug, Clone, PartialEq, Eq, Hash)]
            PoolAttrs { #[kind] kind: PoolKind, kernel: Vec<u64>, stride: Vec<u64>, padding: Vec<(u64, u64)>, dilation: Vec<u64> }
        ), args 1, Window;
        /// Reduction over `axes` (sorted, distinct).
        Reduce { #[kind] kind: ReduceKind, axes: Vec<usize>, keepdim: bool }, args 1, Reduction;
        /// Index of the maximum or minimum along `axis`, or over the flattened tensor.
        ArgReduce { #[kind] kind: ArgKind, axis: Option<usize>, keepdim: bool }, args 1, Reduction;
        /// Variance over `axes` with `correction` (NumPy's `ddof`).
        Variance { axes: Vec<usize>, keepdim: bool, correction: f64 } = "variance", args 1, Reduction;
        /// `exp(x - max) / sum(exp(x - max))` along `axis`.
        Softmax { axis: usize } = "softmax", args 1, Normalization;
        /// Same elements in row-major order, new shape.
        Reshape { #[node] shape: Shape } = "reshape", args 1, Movement;
        /// Permutation of dimensions: output dim `i` is input dim `perm[i]`.
        Transpose { perm: Vec<usize> } = "transpose", args 1, Movement;
        /// NumPy `broadcast_to`.
        BroadcastTo { #[node] shape: Shape } = "broadcast_to", args 1, Movement;
        /// Python-style slicing, one range per dimension.
        Slice { ranges: Vec<SliceRange> } = "slice", args 1, Movement;
        /// Concatenation of all args along `axis`.
        Concat { axis: usize } = "concat", args 1.., Movement;
        /// `take(data, indices, axis)`: args `(data, indices)`; the indices' shape replaces
        /// dimension `axis` of data. Embedding lookup is `Gather { axis: 0 }`.
        Gather { axis: usize } = "gather", args 2, Movement;
        /// A tensor whose elements are their own index along `axis`.
        Iota { #[node] shape: Shape, axis: usize, #[node] dtype: Dtype } = "iota", args 0, Source;
        /// Constant padding: `(before, after)` per dimension.
        Pad { pads: Vec<(u64, u64)>, value: f64 } = "pad", args 1, Movement;
        /// Identity whose gradient is zero.
        StopGradient = "stop_gradient", args 1, Elementwise;
    }
}

kinds! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum UnaryOp {
        Neg = "neg",
        Abs = "abs",
        Sign = "sign",
        Exp = "exp",
        Log = "log",
        Sqrt = "sqrt",
        Sin = "sin",
        Cos = "cos",
        Tanh = "tanh",
        /// The arc tangent (ONNX's Asin and Acos compose it).
        Atan = "atan",
        Relu = "relu",
        /// The error function (exact GELU's derivative needs it).
        Erf = "erf",
        Floor = "floor",
        /// Logical not of bools, bitwise not of integers.
        Not = "not",
        /// `isnan(x)` (bool result).
        IsNan = "isnan",
        /// A function the ones above compose ([`Composite`]).
        Composite(Composite),
    }

    /// Elementwise functions of one float tensor that the primitive [`UnaryOp`]s
    /// compose. A target computes whole those it claims
    /// ([`crate::backend::Backend::claims`]), with its library's function; the
    /// `decompose` pass rewrites the others into primitives by its rule for each
    /// (`passes/decompose.rs`). A new one needs its row here, an interpreter kernel and
    /// a decomposition rule, and then runs on every target.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Composite {
        /// `1 / (1 + exp(-x))`.
        Sigmoid = "sigmoid",
        /// `x * Phi(x)`, with the exact normal CDF (erf form).
        Gelu = "gelu",
        /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
        GeluTanh = "gelu_tanh",
        /// `log(1 + exp(x))`, computed stably.
        Softplus = "softplus",
        /// `x tanh(softplus(x))` (ONNX's Mish).
        Mish = "mish",
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum BinaryOp {
        Add = "add",
        Sub = "sub",
        Mul = "mul",
        Div = "div",
        Pow = "pow",
        Max = "max",
        Min = "min",
        FloorDiv = "floordiv",
        Eq = "eq",
        Ne = "ne",
        Lt = "lt",
        Le = "le",
        Gt = "gt",
        Ge = "ge",
        /// Logical on bools, bitwise on integers (as `or` and `xor`).
        And = "and",
        Or = "or",
        Xor = "xor",
        Shl = "shl",
        Shr = "shr",
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum ReduceKind {
        Sum = "reduce_sum",
        Mean = "reduce_mean",
        Max = "reduce_max",
        Min = "reduce_min",
        Prod = "reduce_prod",
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum ArgKind {
        ArgMax = "argmax",
        ArgMin = "argmin",
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum PoolKind {
        Max = "max_pool",
        Avg = "avg_pool",
    }

    /// The groups of the op list in `docs/ops.md`, named by their headings there.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Category {
        /// Values with no arguments.
        Source = "Sources",
        ElementwiseUnary = "Elementwise, one argument",
        ElementwiseBinary = "Elementwise, two arguments",
        Elementwise = "Elementwise, other",
        LinearAlgebra = "Linear algebra",
        /// Sliding windows over spatial dimensions.
        Window = "Convolution and pooling",
        Reduction = "Reductions",
        Normalization = "Normalizations",
        /// Ops that move, select or repeat elements without computing new ones.
        Movement = "Data movement",
    }
}

impl Category {
    /// Whether the group's ops are elementwise ([`Op::is_elementwise`]).
    pub fn is_elementwise(self) -> bool {
        matches!(self, Category::ElementwiseUnary | Category::ElementwiseBinary | Category::Elementwise)
    }
}

impl Op {
    /// Elementwise ops: each output element depends on the same-index input elements
    /// (after broadcasting); the candidates for loop fusion.
    pub fn is_elementwise(&self) -> bool {
        self.category().is_elementwise()
    }
}

/// How many arguments an op takes, as its row in the table writes it: `N`, `MIN..=MAX`
/// or `MIN..`.
pub trait ArgCount {
    /// `(min, max)`; `None` for any number ≥ min.
    fn bounds(self) -> (usize, Option<usize>);
}

impl ArgCount for usize {
    fn bounds(self) -> (usize, Option<usize>) {
        (self, Some(self))
    }
}

impl ArgCount for std::ops::RangeInclusive<usize> {
    fn bounds(self) -> (usize, Option<usize>) {
        (*self.start(), Some(*self.end()))
    }
}

impl ArgCount for std::ops::RangeFrom<usize> {
    fn bounds(self) -> (usize, Option<usize>) {
        (self.start, None)
    }
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

impl BinaryOp {
    /// Comparisons produce bool whatever their operands.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }

    /// Logical ops: on bools logical, on integers bitwise; the result has the
    /// operands' (promoted) type.
    pub fn is_logical(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or | BinaryOp::Xor)
    }
}

