//! Mithril's model classes as this frontend knows them: the primitive classes (one
//! formula each, with their external key order and defaults from Mithril's
//! `ops.json`) and the named composite models, expanded into primitives exactly as
//! `mithril/models/models.py` builds them (same parameter keys, layouts and defaults).

use serde_json::Value;

use super::json::{self, ModelNode, TemplateDim};
use super::net::{dims, In, Net, Scope, SlotId};
use super::value::Static;
use crate::error::{Error, Result};
use crate::ir::Dtype;

/// A Mithril formula key (the operation a primitive class wraps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Formula {
    // Elementwise, one operand.
    Abs,
    Negate,
    Exp,
    Sqrt,
    Log,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    Gelu,
    Softplus,
    Sign,
    Square,
    Floor,
    LeakyRelu,
    StopGradient,
    Buffer,
    IsNan,
    LogicalNot,
    Clamp,
    ZerosLike,
    AtLeast1D,
    // Elementwise, two operands.
    Add,
    Subtract,
    Multiplication,
    Divide,
    FloorDivide,
    Power,
    Minimum,
    Maximum,
    Greater,
    GreaterEqual,
    Less,
    LessEqual,
    Equal,
    NotEqual,
    LogicalAnd,
    LogicalOr,
    LogicalXor,
    ShiftLeft,
    ShiftRight,
    Where,
    // Linear algebra and neural-network ops.
    MatrixMultiplication,
    Conv1d,
    Conv1dBias,
    Conv2d,
    Conv2dBias,
    MaxPool1d,
    MaxPool2d,
    AvgPool2d,
    Embedding,
    ScaledDotProductAttention,
    CartesianDiff,
    PermuteTensor,
    Softmax,
    // Reductions.
    ReduceMean,
    ReduceSum,
    ReduceMax,
    ReduceMin,
    ReduceProd,
    ReduceArgmax,
    ReduceArgmin,
    Variance,
    // Shape manipulation.
    Reshape,
    Flatten,
    Transpose,
    SwapAxes,
    Squeeze,
    BroadcastTo,
    Concat,
    Split,
    Pad,
    Indexer,
    Cast,
    // Compile-time values (folded by the frontend).
    Shape,
    Size,
    Length,
    Dtype,
    ToTuple,
    ToList,
    Union,
    Slice,
    TupleConverter,
    PaddingConverter1d,
    PaddingConverter2d,
    StrideConverter,
    ToTensor,
    Arange,
    Eye,
    Ones,
    // Mithril's numerically guarded variants (`robust=True`).
    RobustLog,
    RobustSqrt,
    RobustPower,
    StableReciprocal,
    NanToNum,
    // Losses.
    SquaredError,
    AbsoluteError,
    HingeLoss,
    QuadHingeLoss,
    QuantileLoss,
    // Cross entropies: the class's `input_type` picks one (see `Formula::for_input_type`).
    CrossEntropyWithLogits,
    CrossEntropy,
    CrossEntropyWithLogProbs,
    BinaryCrossEntropyWithLogits,
    BinaryCrossEntropy,
    KlDivergence,
    // Feature maps.
    PolynomialFeatures,
}

/// A primitive class: its formula, input keys in Mithril's external key order (the
/// order `["m_i", index]` key references count in), and default values as JSON.
pub struct PrimSpec {
    pub class: &'static str,
    pub formula: Formula,
    pub inputs: &'static [&'static str],
    pub defaults: &'static str,
}

macro_rules! prims {
    ($( $class:literal => $formula:ident [$($key:literal),*] $defaults:literal; )*) => {
        pub const PRIMITIVES: &[PrimSpec] = &[
            $( PrimSpec { class: $class, formula: Formula::$formula, inputs: &[$($key),*], defaults: $defaults }, )*
        ];
    };
}

// Keys and defaults follow `testdata/ops.json` (Mithril's own class signatures).
prims! {
    "Absolute" => Abs ["input"] "{}";
    "Negate" => Negate ["input"] "{}";
    "Exponential" => Exp ["input"] "{}";
    "Sqrt" => Sqrt ["input"] r#"{"robust": false}"#;
    "Log" => Log ["input"] r#"{"robust": false}"#;
    "Sine" => Sin ["input"] "{}";
    "Cosine" => Cos ["input"] "{}";
    "Tanh" => Tanh ["input"] "{}";
    "Sigmoid" => Sigmoid ["input"] "{}";
    "Relu" => Relu ["input"] "{}";
    "Gelu" => Gelu ["input", "approximate"] r#"{"approximate": false}"#;
    "Softplus" => Softplus ["input"] "{}";
    "Sign" => Sign ["input"] "{}";
    "Square" => Square ["input"] "{}";
    "Floor" => Floor ["input"] "{}";
    "LeakyRelu" => LeakyRelu ["input", "slope"] r#"{"slope": 0.01}"#;
    "StopGradient" => StopGradient ["input"] "{}";
    "Buffer" => Buffer ["input"] "{}";
    "IsNan" => IsNan ["input"] "{}";
    "LogicalNot" => LogicalNot ["input"] "{}";
    "Clamp" => Clamp ["input", "min_val", "max_val"] "{}";
    "ZerosLike" => ZerosLike ["input"] "{}";
    "AtLeast1D" => AtLeast1D ["input"] "{}";
    "Add" => Add ["left", "right"] "{}";
    "Subtract" => Subtract ["left", "right"] "{}";
    "Multiply" => Multiplication ["left", "right"] "{}";
    "Divide" => Divide ["numerator", "denominator"] "{}";
    "FloorDivide" => FloorDivide ["numerator", "denominator"] "{}";
    "Power" => Power ["base", "exponent"] r#"{"robust": false}"#;
    "Minimum" => Minimum ["left", "right"] "{}";
    "Maximum" => Maximum ["left", "right"] "{}";
    "Greater" => Greater ["left", "right"] "{}";
    "GreaterEqual" => GreaterEqual ["left", "right"] "{}";
    "Less" => Less ["left", "right"] "{}";
    "LessEqual" => LessEqual ["left", "right"] "{}";
    "Equal" => Equal ["left", "right"] "{}";
    "NotEqual" => NotEqual ["left", "right"] "{}";
    "LogicalAnd" => LogicalAnd ["left", "right"] "{}";
    "LogicalOr" => LogicalOr ["left", "right"] "{}";
    "LogicalXOr" => LogicalXor ["left", "right"] "{}";
    "ShiftLeft" => ShiftLeft ["input", "shift"] "{}";
    "ShiftRight" => ShiftRight ["input", "shift"] "{}";
    "Where" => Where ["cond", "input1", "input2"] "{}";
    "MatrixMultiply" => MatrixMultiplication ["left", "right"] "{}";
    "PrimitiveConvolution1D" => Conv1dBias ["input", "weight", "bias", "stride", "padding", "dilation"] r#"{"use_bias": true}"#;
    "PrimitiveConvolution2D" => Conv2dBias ["input", "weight", "bias", "stride", "padding", "dilation", "groups"] r#"{"use_bias": true}"#;
    "PrimitiveMaxPool1D" => MaxPool1d ["input", "kernel_size", "stride", "padding", "dilation"] "{}";
    "PrimitiveMaxPool2D" => MaxPool2d ["input", "kernel_size", "stride", "padding", "dilation"] "{}";
    "PrimitiveAvgPool2D" => AvgPool2d ["input", "kernel_size", "stride", "padding", "dilation"] "{}";
    "Embedding" => Embedding ["input", "weight"] "{}";
    "ScaledDotProduct" => ScaledDotProductAttention ["query", "key", "value", "dropout_p", "attn_mask", "is_causal", "scale"] r#"{"dropout_p": 0.0, "attn_mask": null, "is_causal": true, "scale": null}"#;
    "CartesianDifference" => CartesianDiff ["left", "right"] "{}";
    "PermuteTensor" => PermuteTensor ["input", "indices"] "{}";
    "Softmax" => Softmax ["input", "axis"] r#"{"axis": -1}"#;
    "Mean" => ReduceMean ["input", "axis", "keepdim"] r#"{"axis": null, "keepdim": false}"#;
    "Sum" => ReduceSum ["input", "axis", "keepdim"] r#"{"axis": null, "keepdim": false}"#;
    "Max" => ReduceMax ["input", "axis", "keepdim"] r#"{"axis": null, "keepdim": false}"#;
    "Min" => ReduceMin ["input", "axis", "keepdim"] r#"{"axis": null, "keepdim": false}"#;
    "Prod" => ReduceProd ["input", "axis", "keepdim"] r#"{"axis": null, "keepdim": false}"#;
    "ArgMax" => ReduceArgmax ["input", "axis", "keepdim"] r#"{"axis": null, "keepdim": false}"#;
    "ArgMin" => ReduceArgmin ["input", "axis", "keepdim"] r#"{"axis": null, "keepdim": false}"#;
    "Variance" => Variance ["input", "axis", "keepdim", "correction"] r#"{"axis": null, "keepdim": false, "correction": 0.0}"#;
    "Reshape" => Reshape ["input", "shape"] "{}";
    "Flatten" => Flatten ["input", "start_dim", "end_dim"] r#"{"start_dim": 0, "end_dim": -1}"#;
    "Transpose" => Transpose ["input", "axes"] r#"{"axes": null}"#;
    "SwapAxes" => SwapAxes ["input", "axis1", "axis2"] "{}";
    "Squeeze" => Squeeze ["input"] "{}";
    "BroadcastTo" => BroadcastTo ["input", "shape"] "{}";
    "Concat" => Concat ["input", "axis"] r#"{"axis": 0}"#;
    "Split" => Split ["input", "split_size", "axis"] "{}";
    "Pad" => Pad ["input", "pad_width"] "{}";
    "Indexer" => Indexer ["input", "index"] "{}";
    "Cast" => Cast ["input", "dtype"] "{}";
    "Shape" => Shape ["input"] "{}";
    "Size" => Size ["input", "dim"] r#"{"dim": null}"#;
    "Length" => Length ["input"] "{}";
    "Dtype" => Dtype ["input"] "{}";
    "ToTuple" => ToTuple [] "{}";
    "ToList" => ToList [] "{}";
    "PrimitiveUnion" => Union [] "{}";
    "Slice" => Slice ["start", "stop", "step"] r#"{"start": null, "stop": null, "step": null}"#;
    "TupleConverter" => TupleConverter ["input"] "{}";
    "PaddingConverter1D" => PaddingConverter1d ["input", "kernel_size"] "{}";
    "PaddingConverter2D" => PaddingConverter2d ["input", "kernel_size"] "{}";
    "StrideConverter" => StrideConverter ["input", "kernel_size"] "{}";
    "ToTensor" => ToTensor ["input", "dtype"] r#"{"dtype": null}"#;
    "Arange" => Arange ["stop", "start", "step", "dtype"] r#"{"start": 0, "step": 1, "dtype": null}"#;
    "Eye" => Eye ["N", "M", "dtype"] r#"{"M": null, "dtype": null}"#;
    "Ones" => Ones ["shape", "dtype"] r#"{"dtype": null}"#;
    "PolynomialFeatures" => PolynomialFeatures ["input", "degree"] "{}";
    "SquaredError" => SquaredError ["input", "target"] "{}";
    "AbsoluteError" => AbsoluteError ["input", "target"] "{}";
    "HingeLoss" => HingeLoss ["input", "target"] "{}";
    "QuadHingeLoss" => QuadHingeLoss ["input", "target"] "{}";
    "QuantileLoss" => QuantileLoss ["input", "target", "quantile"] r#"{"quantile": 0.5}"#;
    "CrossEntropy" => CrossEntropyWithLogits ["input", "target", "weights", "categorical", "threshold", "robust"] r#"{"weights": "", "categorical": true, "threshold": "Constant.MIN_POSITIVE_NORMAL", "robust": false}"#;
    "KLDivergence" => KlDivergence ["input", "target", "threshold"] r#"{"threshold": "Constant.MIN_POSITIVE_NORMAL"}"#;
    "StableReciprocal" => StableReciprocal ["input", "threshold"] r#"{"threshold": "Constant.STABLE_RECIPROCAL_THRESHOLD"}"#;
    "NanToNum" => NanToNum ["input", "nan", "posinf", "neginf"] r#"{"nan": 0.0, "posinf": null, "neginf": null}"#;
    "BinaryCrossEntropy" => BinaryCrossEntropyWithLogits ["input", "target", "pos_weight", "threshold", "robust"] r#"{"pos_weight": 1.0, "threshold": "Constant.MIN_POSITIVE_NORMAL", "robust": false}"#;
}

/// Named composite models this frontend expands.
pub const COMPOSITES: &[&str] = &[
    "Linear",
    "Layer",
    "MLP",
    "LayerNorm",
    "GroupNorm",
    "BatchNorm2D",
    "ElementWiseAffine",
    "SiLU",
    "Convolution1D",
    "Convolution2D",
    "MaxPool1D",
    "MaxPool2D",
    "AvgPool2D",
    "L1",
    "L2",
    "QuadraticFormRegularizer",
    "RBFKernel",
    "PolynomialKernel",
    "KernelizedSVM",
    "LinearSVM",
    "LogisticRegression",
    "PolynomialRegression",
    "DistanceMatrix",
    "NormModifier",
    "EncoderDistanceMatrix",
    "RNNCell",
    "LSTMCell",
    "LSTMCellBody",
    "MDSCore",
    "MDS",
    "EyeComplement",
    "TransposedDiagonal",
    "Trapezoid",
    "OneToMany",
    "ManyToOne",
    "PositionalEncoding",
    "Accuracy",
    "Precision",
    "Recall",
    "F1",
    "EncoderDecoder",
    "Metric",
];

impl Formula {
    /// Mithril's formula key, e.g. `matrix_multiplication`.
    pub fn key(self) -> &'static str {
        match self {
            Formula::Abs => "abs",
            Formula::Negate => "negate",
            Formula::Exp => "exp",
            Formula::Sqrt => "sqrt",
            Formula::Log => "log",
            Formula::Sin => "sin",
            Formula::Cos => "cos",
            Formula::Tanh => "tanh",
            Formula::Sigmoid => "sigmoid",
            Formula::Relu => "relu",
            Formula::Gelu => "gelu",
            Formula::Softplus => "softplus",
            Formula::Sign => "sign",
            Formula::Square => "square",
            Formula::Floor => "floor",
            Formula::LeakyRelu => "leaky_relu",
            Formula::StopGradient => "stop_gradient",
            Formula::Buffer => "buffer",
            Formula::IsNan => "isnan",
            Formula::LogicalNot => "logical_not",
            Formula::Clamp => "clamp",
            Formula::ZerosLike => "zeros_like",
            Formula::AtLeast1D => "atleast_1d",
            Formula::Add => "add",
            Formula::Subtract => "subtract",
            Formula::Multiplication => "multiplication",
            Formula::Divide => "divide",
            Formula::FloorDivide => "floor_divide",
            Formula::Power => "power",
            Formula::Minimum => "minimum",
            Formula::Maximum => "maximum",
            Formula::Greater => "greater",
            Formula::GreaterEqual => "greater_equal",
            Formula::Less => "less",
            Formula::LessEqual => "less_equal",
            Formula::Equal => "equal",
            Formula::NotEqual => "not_equal",
            Formula::LogicalAnd => "logical_and",
            Formula::LogicalOr => "logical_or",
            Formula::LogicalXor => "logical_xor",
            Formula::ShiftLeft => "shift_left",
            Formula::ShiftRight => "shift_right",
            Formula::Where => "where",
            Formula::MatrixMultiplication => "matrix_multiplication",
            Formula::Conv1d => "conv1d",
            Formula::Conv1dBias => "conv1d_bias",
            Formula::Conv2d => "conv2d",
            Formula::Conv2dBias => "conv2d_bias",
            Formula::MaxPool1d => "max_pool1d",
            Formula::MaxPool2d => "max_pool2d",
            Formula::AvgPool2d => "avg_pool2d",
            Formula::Embedding => "primitive_embedding",
            Formula::ScaledDotProductAttention => "scaled_dot_product_attention",
            Formula::CartesianDiff => "cartesian_diff",
            Formula::PermuteTensor => "permute_tensor",
            Formula::Softmax => "softmax",
            Formula::ReduceMean => "reduce_mean",
            Formula::ReduceSum => "reduce_sum",
            Formula::ReduceMax => "reduce_max",
            Formula::ReduceMin => "reduce_min",
            Formula::ReduceProd => "reduce_prod",
            Formula::ReduceArgmax => "reduce_argmax",
            Formula::ReduceArgmin => "reduce_argmin",
            Formula::Variance => "variance",
            Formula::Reshape => "reshape",
            Formula::Flatten => "flatten",
            Formula::Transpose => "transpose",
            Formula::SwapAxes => "swapaxes",
            Formula::Squeeze => "squeeze",
            Formula::BroadcastTo => "broadcast_to",
            Formula::Concat => "concat",
            Formula::Split => "split",
            Formula::Pad => "pad",
            Formula::Indexer => "indexer",
            Formula::Cast => "cast",
            Formula::Shape => "shape",
            Formula::Size => "size",
            Formula::Length => "length",
            Formula::Dtype => "dtype",
            Formula::ToTuple => "to_tuple",
            Formula::ToList => "to_list",
            Formula::Union => "union",
            Formula::Slice => "primitive_slice",
            Formula::TupleConverter => "tuple_converter",
            Formula::PaddingConverter1d => "padding_converter_1d",
            Formula::PaddingConverter2d => "padding_converter_2d",
            Formula::StrideConverter => "stride_converter",
            Formula::ToTensor => "to_tensor",
            Formula::Arange => "arange",
            Formula::Eye => "eye",
            Formula::Ones => "ones",
            Formula::SquaredError => "squared_error",
            Formula::AbsoluteError => "absolute_error",
            Formula::HingeLoss => "hinge_loss",
            Formula::QuadHingeLoss => "quad_hinge_loss",
            Formula::QuantileLoss => "quantile_loss",
            Formula::CrossEntropyWithLogits => "cross_entropy_with_logits",
            Formula::CrossEntropy => "cross_entropy",
            Formula::CrossEntropyWithLogProbs => "cross_entropy_with_log_probs",
            Formula::BinaryCrossEntropyWithLogits => "binary_cross_entropy_with_logits",
            Formula::BinaryCrossEntropy => "binary_cross_entropy",
            Formula::KlDivergence => "kl_divergence",
            Formula::RobustLog => "robust_log",
            Formula::RobustSqrt => "robust_sqrt",
            Formula::RobustPower => "robust_power",
            Formula::StableReciprocal => "stable_reciprocal",
            Formula::NanToNum => "nan_to_num",
            Formula::PolynomialFeatures => "polynomial_features",
        }
    }
}

impl Formula {
    /// The formula `CrossEntropy(input_type=...)` or `BinaryCrossEntropy(input_type=...)`
    /// computes (`formula` is the class's logits formula), as Mithril's constructors
    /// choose it; `None` (no `input_type` in the file) is Mithril's default, logits.
    pub fn for_input_type(self, input_type: Option<&Value>) -> std::result::Result<Formula, String> {
        let binary = self == Formula::BinaryCrossEntropyWithLogits;
        Ok(match input_type.map(|v| v.as_str().ok_or_else(|| format!("`input_type` must be a string, got {v}"))).transpose()? {
            None | Some("logits") => self,
            Some("probs") if binary => Formula::BinaryCrossEntropy,
            Some("probs") => Formula::CrossEntropy,
            Some("log_probs") if !binary => Formula::CrossEntropyWithLogProbs,
            Some(other) => {
                let known = if binary { "'logits' and 'probs'" } else { "'logits', 'probs' and 'log_probs'" };
                return Err(format!("input_type '{other}' is not one of {known}"));
            }
        })
    }

    /// Categorical or not, the cross entropies that take class targets.
    pub fn is_cross_entropy(self) -> bool {
        matches!(self, Formula::CrossEntropyWithLogits | Formula::CrossEntropy | Formula::CrossEntropyWithLogProbs)
    }
}

pub fn primitive(class: &str) -> Option<&'static PrimSpec> {
    PRIMITIVES.iter().find(|p| p.class == class)
}

/// Every class name this frontend accepts, for "did you mean" hints and the docs.
pub fn known_classes() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = PRIMITIVES.iter().map(|p| p.class).collect();
    v.extend(COMPOSITES);
    v.push("Model");
    v.sort();
    v
}

/// Classes of Mithril's model library (`models.py`, `primitives.py`) that this
/// frontend does not compile, each with the reason (named in errors as "not
/// supported" rather than "unknown").
pub const MITHRIL_UNSUPPORTED: &[(&str, &str)] = &[
    ("CustomPrimitiveModel", "an abstract base class, not a model"),
    ("SupervisedLoss", "an abstract base class, not a model"),
    ("Activation", "an abstract base class, not a model"),
    ("ArithmeticOperation", "an abstract base class, not a model"),
    ("Reduce", "an abstract base class, not a model"),
    ("SingleInputModel", "an abstract base class, not a model"),
    ("RelationalModel", "an abstract base class, not a model"),
    ("BitwiseOperators", "an abstract base class, not a model"),
    ("PrimitivePool2D", "an abstract base class, not a model"),
    ("Pool1D", "an abstract base class, not a model"),
    ("Pool2D", "an abstract base class, not a model"),
    ("Cell", "an abstract base class, not a model"),
    ("RNN", "an abstract base class, not a model"),
    ("DistanceEncoder", "an abstract base class, not a model"),
    ("TrainModel", "a TrainModel is read only as a whole file (`is_train_model`), not nested in a model"),
    ("TsnePJoint", "its binary search for each row's perplexity runs a data-dependent number of steps"),
    ("TSNECore", "it needs TsnePJoint, whose binary search runs a data-dependent number of steps"),
    ("TSNE", "it needs TsnePJoint, whose binary search runs a data-dependent number of steps"),
    ("Cholesky", "the IR has no matrix decomposition"),
    ("GPRAlpha", "it solves with a Cholesky factor; the IR has no triangular solve"),
    ("GPRVOuter", "it solves with a Cholesky factor; the IR has no triangular solve"),
    ("Eigvalsh", "the IR has no eigenvalue decomposition"),
    ("GaussProcessRegressionCore", "it needs a Cholesky decomposition, which the IR lacks"),
    ("GPRLoss", "it needs eigenvalues of a Cholesky factor, which the IR lacks"),
    ("PrimitiveRandn", "random numbers: the IR has no random source"),
    ("PrimitiveRandInt", "random numbers: the IR has no random source"),
    ("Randn", "random numbers: the IR has no random source"),
    ("RandInt", "random numbers: the IR has no random source"),
    ("AUCCore", "it sorts and keeps the unique thresholds: the output's shape depends on the data"),
    ("AUC", "it sorts and keeps the unique thresholds: the output's shape depends on the data"),
    ("Unique", "the output's shape depends on the data"),
    ("Item", "a tensor's element as a Python scalar is a run-time value, not a compile-time one"),
    ("TensorToList", "a tensor as a Python list is a run-time value, not a compile-time one"),
    ("OneToManyInference", "it runs the cell until it emits an end token: a data-dependent number of steps"),
    ("EncoderDecoderInference", "it runs the decoder for a data-dependent number of steps"),
];

/// The keys a library class exposes besides `output` (`expose_keys` in models.py):
/// outputs of the model even where another of its primitives reads them.
pub fn exposed_outputs(class: &str) -> &'static [&'static str] {
    match class {
        "RNNCell" => &["hidden", "hidden_compl"],
        "LSTMCell" => &["hidden", "cell", "hidden_compl"],
        "KernelizedSVM" => &["kernel"],
        "LinearSVM" => &["decision_output"],
        "LogisticRegression" => &["probs_output"],
        "Metric" => &["pred_formatted", "label_formatted"],
        _ => &[],
    }
}

/// Whether `key` is an output of a `class` model at the top level even where another
/// of its primitives reads it: `exposed_outputs`, and the unrolled recurrent models'
/// `output<i>` (and ManyToOne's `hidden_concat`), EncoderDecoder's decoder outputs.
pub fn is_exposed_output(class: &str, key: &str) -> bool {
    exposed_outputs(class).contains(&key)
        || matches!(class, "OneToMany" | "ManyToOne" | "EncoderDecoder") && is_step_output(key)
        || class == "ManyToOne" && key == "hidden_concat"
}

/// Whether `key` is an unrolled model's `output<i>`.
fn is_step_output(key: &str) -> bool {
    key.strip_prefix("output").is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
}

/// Why Mithril's class `class` is not supported, if it is one this frontend knows of.
pub fn unsupported_reason(class: &str) -> Option<&'static str> {
    MITHRIL_UNSUPPORTED.iter().find(|(c, _)| *c == class).map(|(_, why)| *why)
}

/// The interface of an instantiated model: its external keys, in Mithril's order.
pub type Keys = indexmap::IndexMap<String, SlotId>;

/// `ins![("input", x), ("axis", Static::Int(-1))]`: primitive inputs, slots or constants.
macro_rules! ins {
    ($(($k:expr, $v:expr)),* $(,)?) => { vec![$(($k, In::from($v))),*] };
}

fn int(i: i64) -> Static {
    Static::Int(i)
}

fn sym(name: &str) -> TemplateDim {
    TemplateDim::Sym(name.to_string())
}

fn known(n: u64) -> TemplateDim {
    TemplateDim::Known(n)
}

mod classic;
mod metrics;
mod sequence;

use classic::*;
use metrics::*;
use sequence::*;

/// Expands a named composite into primitives, returning its keys in Mithril's
/// external key order.
pub fn expand_composite(net: &mut Net, node: &ModelNode, depth: usize) -> Result<Keys> {
    let mut s = Scope::new(net, node, depth);
    let args = Args { node };
    match node.class.as_str() {
        "Linear" => {
            let dim = args.opt_int("dimension")?;
            let use_bias = args.bool_or("use_bias", true)?;
            let x = s.key("input");
            let y = linear(&mut s, x, dim, use_bias, "weight", "bias")?;
            let out = s.key("output");
            s.union(y, out)?;
            s.order(if use_bias { &["weight", "input", "bias", "output"] } else { &["weight", "input", "output"] });
        }
        "Layer" => {
            let dim = args.opt_int("dimension")?;
            let x = s.key("input");
            let y = linear(&mut s, x, dim, true, "weight", "bias")?;
            let act = args.model("activation")?;
            let out = s.key("output");
            activation(&mut s, &act, y, out)?;
            s.order(&["weight", "input", "bias", "output"]);
        }
        "MLP" => {
            let acts = args.models("activations")?;
            let dims = args.get("dimensions").and_then(|v| v.as_array().cloned()).unwrap_or_default();
            if acts.len() != dims.len() || acts.is_empty() {
                return Err(args.err("needs equally long, non-empty `activations` and `dimensions`"));
            }
            let mut x = s.key("input");
            for (i, (act, d)) in acts.iter().zip(&dims).enumerate() {
                let dim = match d {
                    Value::Null => None,
                    v => Some(v.as_u64().ok_or_else(|| args.err("`dimensions` must hold sizes"))?),
                };
                let y = linear(&mut s, x, dim, true, &format!("weight{i}"), &format!("bias{i}"))?;
                let out = if i + 1 == acts.len() { s.key("output") } else { s.net.new_slot() };
                activation(&mut s, act, y, out)?;
                x = out;
            }
            s.order(&["weight0", "input", "bias0", "output"]);
        }
        "LayerNorm" => {
            let use_scale = args.bool_or("use_scale", true)?;
            let use_bias = args.bool_or("use_bias", true)?;
            let eps = args.value_or("eps", Static::Float(1e-5))?;
            let x = s.key("input");
            let mean = s.prim(Formula::ReduceMean, ins![("input", x), ("axis", int(-1)), ("keepdim", Static::Bool(true))])?;
            let num = s.prim(Formula::Subtract, ins![("left", x), ("right", mean)])?;
            let var = s.prim(
                Formula::Variance,
                ins![("input", x), ("axis", int(-1)), ("keepdim", Static::Bool(true)), ("correction", int(0))],
            )?;
            let eps_key = s.key("eps");
            s.set_value(eps_key, eps, "eps")?;
            let add = s.prim(Formula::Add, ins![("left", var), ("right", eps_key)])?;
            let den = s.prim(Formula::Sqrt, ins![("input", add)])?;
            let mut y = s.prim(Formula::Divide, ins![("numerator", num), ("denominator", den)])?;
            // models.py sets `[B, C, d]` but says it expects `[B, ..., d]`, and
            // Mithril's own cases (`test_layernorm_1`) run it on `[N, d]`: its
            // arithmetic normalizes the last axis of any such input.
            let xt = vec![sym("B"), TemplateDim::Variadic("C".into()), sym("d")];
            s.template(vec![(x, xt.clone())]);
            let mut order = vec!["input", "eps"];
            if use_scale {
                let w = s.param("weight");
                y = s.prim(Formula::Multiplication, ins![("left", y), ("right", w)])?;
                s.template(vec![(x, xt.clone()), (w, dims(&["d"]))]);
                order.push("weight");
            }
            if use_bias {
                let b = s.param("bias");
                y = s.prim(Formula::Add, ins![("left", y), ("right", b)])?;
                s.template(vec![(x, xt), (b, dims(&["d"]))]);
                order.push("bias");
            }
            let out = s.key("output");
            s.prim_into(Formula::Buffer, ins![("input", y)], out)?;
            order.push("output");
            s.order(&order);
        }
        "GroupNorm" => {
            let groups = args.int_or("num_groups", 32)?;
            let use_scale = args.bool_or("use_scale", true)?;
            let use_bias = args.bool_or("use_bias", true)?;
            let eps = args.value_or("eps", Static::Float(1e-5))?;
            let x = s.key("input");
            let shape = s.prim(Formula::Shape, ins![("input", x)])?;
            let b = s.prim(Formula::Indexer, ins![("input", shape), ("index", int(0))])?;
            let target = s.prim(Formula::ToTuple, ins![("input1", b), ("input2", int(groups)), ("input3", int(-1))])?;
            let xr = s.prim(Formula::Reshape, ins![("input", x), ("shape", target)])?;
            let mean = s.prim(Formula::ReduceMean, ins![("input", xr), ("axis", int(-1)), ("keepdim", Static::Bool(true))])?;
            let var = s.prim(
                Formula::Variance,
                ins![("input", xr), ("axis", int(-1)), ("keepdim", Static::Bool(true)), ("correction", int(0))],
            )?;
            let centered = s.prim(Formula::Subtract, ins![("left", xr), ("right", mean)])?;
            let eps_key = s.key("eps");
            s.set_value(eps_key, eps, "eps")?;
            let ve = s.prim(Formula::Add, ins![("left", var), ("right", eps_key)])?;
            let den = s.prim(Formula::Sqrt, ins![("input", ve)])?;
            let normed = s.prim(Formula::Divide, ins![("numerator", centered), ("denominator", den)])?;
            let mut y = s.prim(Formula::Reshape, ins![("input", normed), ("shape", shape)])?;
            let channel = vec![known(1), sym("C"), known(1), known(1)];
            s.template(vec![(x, dims(&["B", "C", "H", "W"]))]);
            if use_scale {
                let w = s.param("weight");
                y = s.prim(Formula::Multiplication, ins![("left", y), ("right", w)])?;
                s.template(vec![(x, dims(&["B", "C", "H", "W"])), (w, channel.clone())]);
            }
            if use_bias {
                let bb = s.param("bias");
                y = s.prim(Formula::Add, ins![("left", y), ("right", bb)])?;
                s.template(vec![(x, dims(&["B", "C", "H", "W"])), (bb, channel)]);
            }
            let out = s.key("output");
            s.prim_into(Formula::Buffer, ins![("input", y)], out)?;
            s.order(&["input", "weight", "bias", "eps", "output"]);
        }
        "BatchNorm2D" => {
            // The inference form (Mithril's default `inference=True`): normalize with the
            // running statistics.
            if !args.bool_or("inference", true)? {
                return Err(args.err("training-mode BatchNorm2D (inference=False) is not supported yet"));
            }
            let use_scale = args.bool_or("use_scale", true)?;
            let use_bias = args.bool_or("use_bias", true)?;
            let eps = args.value_or("eps", Static::Float(1e-5))?;
            let x = s.key("input");
            let rm = s.key("running_mean");
            let rv = s.key("running_var");
            let shape = s.prim(Formula::Shape, ins![("input", x)])?;
            let c = s.prim(Formula::Indexer, ins![("input", shape), ("index", int(1))])?;
            let mut stats = Vec::new();
            for r in [rm, rv] {
                let t = s.prim(Formula::ToTuple, ins![("input1", int(1)), ("input2", c), ("input3", int(1)), ("input4", int(1))])?;
                stats.push(s.prim(Formula::Reshape, ins![("input", r), ("shape", t)])?);
            }
            let centered = s.prim(Formula::Subtract, ins![("left", x), ("right", stats[0])])?;
            let ve = s.prim(Formula::Add, ins![("left", stats[1]), ("right", eps)])?;
            let den = s.prim(Formula::Sqrt, ins![("input", ve)])?;
            let mut y = s.prim(Formula::Divide, ins![("numerator", centered), ("denominator", den)])?;
            let cdim = args.opt_int("num_features")?.map_or(sym("num_features"), known);
            let xt = vec![sym("N"), cdim.clone(), sym("H"), sym("W")];
            let c1 = vec![known(1), cdim.clone(), known(1), known(1)];
            s.template(vec![(x, xt.clone()), (rm, vec![cdim.clone()]), (rv, vec![cdim])]);
            if use_scale {
                let w = s.param("weight");
                y = s.prim(Formula::Multiplication, ins![("left", y), ("right", w)])?;
                s.template(vec![(x, xt.clone()), (w, c1.clone())]);
            }
            if use_bias {
                let b = s.param("bias");
                y = s.prim(Formula::Add, ins![("left", y), ("right", b)])?;
                s.template(vec![(x, xt), (b, c1)]);
            }
            let out = s.key("output");
            s.prim_into(Formula::Buffer, ins![("input", y)], out)?;
            s.order(&["input", "running_mean", "running_var", "weight", "bias", "output"]);
        }
        "ElementWiseAffine" => {
            let x = s.key("input");
            let w = s.key("weight");
            let b = s.key("bias");
            let m = s.prim(Formula::Multiplication, ins![("left", x), ("right", w)])?;
            let out = s.key("output");
            s.prim_into(Formula::Add, ins![("left", m), ("right", b)], out)?;
            s.order(&["input", "weight", "bias", "output"]);
        }
        "SiLU" => {
            let x = s.key("input");
            let n = s.prim(Formula::Negate, ins![("input", x)])?;
            let e = s.prim(Formula::Exp, ins![("input", n)])?;
            let one = Static::Tensor(crate::tensor::Constant::scalar(Dtype::I32, 1.0));
            let a = s.prim(Formula::Add, ins![("left", one), ("right", e)])?;
            let out = s.key("output");
            s.prim_into(Formula::Divide, ins![("numerator", x), ("denominator", a)], out)?;
            s.order(&["input", "output"]);
        }
        "Convolution2D" | "Convolution1D" => convolution(&mut s, &args, node.class == "Convolution2D")?,
        "MaxPool2D" | "AvgPool2D" => {
            let x = s.key("input");
            let k = arg_key(&mut s, &args, "kernel_size", None)?;
            let st = arg_key(&mut s, &args, "stride", Some(Static::None))?;
            let p = arg_key(&mut s, &args, "padding", Some(Static::tuple(vec![int(0), int(0)])))?;
            let d = arg_key(&mut s, &args, "dilation", Some(int(1)))?;
            let kt = s.prim(Formula::TupleConverter, ins![("input", k)])?;
            let sc = s.prim(Formula::StrideConverter, ins![("input", st), ("kernel_size", kt)])?;
            let stt = s.prim(Formula::TupleConverter, ins![("input", sc)])?;
            let pc = s.prim(Formula::PaddingConverter2d, ins![("input", p), ("kernel_size", kt)])?;
            let pt = s.prim(Formula::TupleConverter, ins![("input", pc)])?;
            let dt = s.prim(Formula::TupleConverter, ins![("input", d)])?;
            let out = s.key("output");
            let f = if node.class == "MaxPool2D" { Formula::MaxPool2d } else { Formula::AvgPool2d };
            s.prim_into(f, ins![("input", x), ("kernel_size", kt), ("stride", stt), ("padding", pt), ("dilation", dt)], out)?;
            s.order(&["kernel_size", "stride", "padding", "dilation", "input", "output"]);
        }
        "MaxPool1D" => {
            let x = s.key("input");
            let k = arg_key(&mut s, &args, "kernel_size", None)?;
            let st = arg_key(&mut s, &args, "stride", Some(Static::None))?;
            let p = arg_key(&mut s, &args, "padding", Some(Static::tuple(vec![int(0), int(0)])))?;
            let d = arg_key(&mut s, &args, "dilation", Some(int(1)))?;
            let sc = s.prim(Formula::StrideConverter, ins![("input", st), ("kernel_size", k)])?;
            let pc = s.prim(Formula::PaddingConverter1d, ins![("input", p), ("kernel_size", k)])?;
            let out = s.key("output");
            s.prim_into(Formula::MaxPool1d, ins![("input", x), ("kernel_size", k), ("stride", sc), ("padding", pc), ("dilation", d)], out)?;
            s.order(&["stride", "kernel_size", "padding", "input", "dilation", "output"]);
        }
        "L1" => {
            // Absolute, then Sum of everything.
            let x = s.key("input");
            let a = s.prim(Formula::Abs, ins![("input", x)])?;
            let out = s.key("output");
            s.prim_into(Formula::ReduceSum, reduce_all(a), out)?;
            s.order(&["input", "output"]);
        }
        "L2" => {
            // Square, Sum of everything, times 0.5.
            let x = s.key("input");
            let sq = s.prim(Formula::Square, ins![("input", x)])?;
            let sum = s.prim(Formula::ReduceSum, reduce_all(sq))?;
            let out = s.key("output");
            s.prim_into(Formula::Multiplication, ins![("left", sum), ("right", Static::Float(0.5))], out)?;
            s.order(&["input", "output"]);
        }
        "QuadraticFormRegularizer" => {
            // 0.5 * (input @ kernel) @ input^T, input a row [1, N].
            let x = s.key("input");
            let k = s.key("kernel");
            let t = s.prim(Formula::Transpose, ins![("input", x), ("axes", Static::None)])?;
            let m1 = s.prim(Formula::MatrixMultiplication, ins![("left", x), ("right", k)])?;
            let m2 = s.prim(Formula::MatrixMultiplication, ins![("left", m1), ("right", t)])?;
            let out = s.key("output");
            s.prim_into(Formula::Multiplication, ins![("left", m2), ("right", Static::Float(0.5))], out)?;
            s.template(vec![(x, vec![known(1), sym("N")]), (k, dims(&["N", "N"]))]);
            s.order(&["input", "kernel", "output"]);
        }
        "RBFKernel" => {
            // l_scale^2 * exp(-0.5 * sum((x1_i - x2_j)^2) / sigma^2).
            let (x1, x2) = (s.key("input1"), s.key("input2"));
            let diff = s.prim(Formula::CartesianDiff, ins![("left", x1), ("right", x2)])?;
            let sq = s.prim(Formula::Square, ins![("input", diff)])?;
            let sum = s.prim(Formula::ReduceSum, ins![("input", sq), ("axis", int(2)), ("keepdim", Static::Bool(false))])?;
            let scaled = s.prim(Formula::Multiplication, ins![("left", sum), ("right", Static::Float(-0.5))])?;
            let sigma = s.key("sigma");
            let sigma2 = s.prim(Formula::Square, ins![("input", sigma)])?;
            let div = s.prim(Formula::Divide, ins![("numerator", scaled), ("denominator", sigma2)])?;
            let e = s.prim(Formula::Exp, ins![("input", div)])?;
            let l = s.key("l_scale");
            let l2 = s.prim(Formula::Multiplication, ins![("left", l), ("right", l)])?;
            let out = s.key("output");
            s.prim_into(Formula::Multiplication, ins![("left", l2), ("right", e)], out)?;
            s.template(vec![
                (x1, dims(&["N", "dim"])),
                (x2, dims(&["M", "dim"])),
                (l, vec![known(1)]),
                (sigma, vec![known(1)]),
                (out, dims(&["N", "M"])),
            ]);
            s.order(&["input1", "input2", "sigma", "l_scale", "output"]);
        }
        "PolynomialKernel" => {
            // (input1 @ input2^T + poly_coef) ** degree, a robust power by default.
            let robust = args.bool_or("robust", true)?;
            let x2 = s.key("input2");
            let t = s.prim(Formula::Transpose, ins![("input", x2), ("axes", Static::None)])?;
            let x1 = s.key("input1");
            let mm = s.prim(Formula::MatrixMultiplication, ins![("left", x1), ("right", t)])?;
            let c = s.key("poly_coef");
            let sum = s.prim(Formula::Add, ins![("left", mm), ("right", c)])?;
            let degree = s.key("degree");
            let out = s.key("output");
            power_into(&mut s, sum, degree, robust, out)?;
            s.template(vec![(x1, dims(&["N", "d"])), (x2, dims(&["M", "d"])), (out, dims(&["N", "M"]))]);
            s.order(&["input2", "input1", "poly_coef", "degree", "output"]);
        }
        "KernelizedSVM" => {
            // The kernel model's tensor inputs become this model's keys of the same
            // names, its output the exposed key `kernel`, which a Linear maps to `output`.
            let kernel = args.model("kernel")?;
            let keys = s.instantiate(&kernel)?;
            let kout = s.key("kernel");
            for (k, slot) in keys {
                if k == "output" {
                    s.union(slot, kout)?;
                } else if !k.starts_with('$') {
                    let own = s.key(&k);
                    s.union(slot, own)?;
                }
            }
            let y = linear(&mut s, kout, None, true, "weight", "bias")?;
            let out = s.key("output");
            s.union(y, out)?;
            let (x1, x2, w, b) = (s.key("input1"), s.key("input2"), s.key("weight"), s.key("bias"));
            s.template(vec![
                (x1, dims(&["N", "d_in"])),
                (x2, dims(&["M", "d_in"])),
                (w, vec![known(1), sym("M")]),
                (b, vec![known(1)]),
                (out, vec![sym("N"), known(1)]),
                (kout, dims(&["N", "M"])),
            ]);
        }
        "LinearSVM" | "LogisticRegression" => {
            // Linear(dimension=1) to `output`, then Sign (`decision_output`) or
            // Sigmoid (`probs_output`) of it.
            let x = s.key("input");
            let y = linear(&mut s, x, Some(1), true, "weight", "bias")?;
            let out = s.key("output");
            s.union(y, out)?;
            let (f, second) = if node.class == "LinearSVM" { (Formula::Sign, "decision_output") } else { (Formula::Sigmoid, "probs_output") };
            let o2 = s.key(second);
            s.prim_into(f, ins![("input", out)], o2)?;
            s.order(&["input", "weight", "bias", "output", second]);
        }
        "PolynomialRegression" => {
            let degree = args.value("degree")?;
            let dim = args.opt_int("dimension")?;
            let x = s.key("input");
            let f = s.prim(Formula::PolynomialFeatures, ins![("input", x), ("degree", degree)])?;
            let y = linear(&mut s, f, dim, true, "weight", "bias")?;
            let out = s.key("output");
            s.union(y, out)?;
            s.order(&["input", "weight", "bias", "output"]);
        }
        "DistanceMatrix" => {
            let (l, r, n) = (s.key("left"), s.key("right"), s.key("norm"));
            let out = s.key("output");
            let d = distance_matrix(&mut s, l, r, n)?;
            s.union(d, out)?;
            s.order(&["left", "right", "norm", "output"]);
        }
        "NormModifier" => {
            let x = s.key("input");
            let out = s.key("output");
            let m = norm_modifier(&mut s, x)?;
            s.union(m, out)?;
            s.order(&["input", "output"]);
        }
        "EncoderDistanceMatrix" => {
            // distance_matrix(input1, input2, p) with p = NormModifier(norm), then (by
            // default) its 1/p-th power, robust by default.
            let norm = s.key("norm");
            let p = norm_modifier(&mut s, norm)?;
            let (x1, x2) = (s.key("input1"), s.key("input2"));
            let d = distance_matrix(&mut s, x1, x2, p)?;
            let out = s.key("output");
            if args.bool_or("get_final_distance", true)? {
                let rec = s.prim(Formula::Divide, ins![("numerator", Static::Float(1.0)), ("denominator", p)])?;
                power_into(&mut s, d, rec, args.bool_or("robust", true)?, out)?;
            } else {
                s.union(d, out)?;
            }
            s.order(&["norm", "input1", "input2", "output"]);
        }
        "MDSCore" => {
            let exact = args.bool_or("exact_distances", true)?;
            let robust = args.bool_or("robust", true)?;
            let (d, pd, n) = (s.key("distances"), s.key("pred_distances"), s.key("norm"));
            let out = s.key("output");
            mds_core(&mut s, d, pd, n, exact, robust, out)?;
            s.order(&["distances", "pred_distances", "norm", "output"]);
        }
        "MDS" => mds(&mut s, &args)?,
        "EyeComplement" => {
            // `ones_with_zero_diag`: `ones((N, M)) - eye(N, M)` (`M` None: square).
            let n = s.key("N");
            if args.get("N").is_some() {
                s.set_value(n, args.value("N")?, "N")?;
            }
            let m = arg_key(&mut s, &args, "M", Some(Static::None))?;
            let dtype = arg_key(&mut s, &args, "dtype", Some(Static::None))?;
            let eye = s.prim(Formula::Eye, ins![("N", n), ("M", m), ("dtype", dtype)])?;
            let out = s.key("output");
            s.prim_into(Formula::Subtract, ins![("left", int(1)), ("right", eye)], out)?;
            s.order(&["N", "M", "dtype", "output"]);
        }
        "TransposedDiagonal" => {
            // `diag(input)[:, None]`: every (N+1)-th element of the flattened [N, N]
            // input, as a column (exact for any dtype; its gradient is Mithril's
            // `output_gradient * eye`).
            let x = s.key("input");
            let n = batch_of(&mut s, x)?;
            let flat = s.prim(Formula::Flatten, ins![("input", x), ("start_dim", int(0)), ("end_dim", int(-1))])?;
            let step = s.prim(Formula::Add, ins![("left", n), ("right", int(1))])?;
            let sl = s.prim(Formula::Slice, ins![("start", Static::None), ("stop", Static::None), ("step", step)])?;
            let diag = s.prim(Formula::Indexer, ins![("input", flat), ("index", sl)])?;
            let shape = s.prim(Formula::ToTuple, ins![("input1", n), ("input2", int(1))])?;
            let out = s.key("output");
            s.prim_into(Formula::Reshape, ins![("input", diag), ("shape", shape)], out)?;
            s.template(vec![(x, dims(&["N", "N"])), (out, vec![sym("N"), known(1)])]);
            s.order(&["input", "output"]);
        }
        "Trapezoid" => {
            // NumPy's `trapezoid(y, x)`: `sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2.0)`;
            // the output is a scalar, so `y` and `x` are vectors.
            let (y, x) = (s.key("y"), s.key("x"));
            let one = s.prim(Formula::Slice, ins![("start", int(1)), ("stop", Static::None), ("step", Static::None)])?;
            let but_last = s.prim(Formula::Slice, ins![("start", Static::None), ("stop", int(-1)), ("step", Static::None)])?;
            let part = |s: &mut Scope, v: SlotId, sl: SlotId| s.prim(Formula::Indexer, ins![("input", v), ("index", sl)]);
            let (x1, x0, y1, y0) = (part(&mut s, x, one)?, part(&mut s, x, but_last)?, part(&mut s, y, one)?, part(&mut s, y, but_last)?);
            let d = s.prim(Formula::Subtract, ins![("left", x1), ("right", x0)])?;
            let sum = s.prim(Formula::Add, ins![("left", y1), ("right", y0)])?;
            let p = s.prim(Formula::Multiplication, ins![("left", d), ("right", sum)])?;
            let h = s.prim(Formula::Divide, ins![("numerator", p), ("denominator", Static::Float(2.0))])?;
            let out = s.key("output");
            s.prim_into(Formula::ReduceSum, reduce_all(h), out)?;
            s.template(vec![(y, dims(&["n"])), (x, dims(&["n"])), (out, vec![])]);
            s.order(&["y", "x", "output"]);
        }
        "OneToMany" | "ManyToOne" => unrolled(&mut s, &args, node.class == "OneToMany")?,
        "EncoderDecoder" => encoder_decoder(&mut s, &args)?,
        "PositionalEncoding" => positional_encoding(&mut s, &args)?,
        "Accuracy" | "Precision" | "Recall" | "F1" => metric_model(&mut s, &args, &node.class)?,
        "Metric" => {
            let (diff, pred, label) = metric(&mut s, &args)?;
            for (key, v) in [("pred_formatted", pred), ("label_formatted", label), ("output", diff)] {
                let k = s.key(key);
                s.prim_into(Formula::Buffer, ins![("input", v)], k)?;
            }
            s.order(&["pred", "label", "output", "pred_formatted", "label_formatted"]);
        }
        "RNNCell" => rnn_cell(&mut s)?,
        "LSTMCell" => lstm_cell(&mut s)?,
        "LSTMCellBody" => {
            let (x, h, c) = (s.key("input"), s.key("prev_hidden"), s.key("prev_cell"));
            let out = s.key("output");
            let y = lstm_body(&mut s, x, h, c)?;
            s.union(y, out)?;
            s.template(vec![(x, cell_dims("N", "d_in")), (h, cell_dims("N", "d_hid")), (c, cell_dims("N", "d_hid"))]);
        }
        other => return Err(Error::internal(format!("{other} is listed as a composite but has no expansion"))),
    }
    Ok(s.finish())
}

/// A key holding a constructor argument (`default` when the argument is absent;
/// `None`: the argument is required).
fn arg_key(s: &mut Scope, args: &Args, name: &str, default: Option<Static>) -> Result<SlotId> {
    let v = match default {
        Some(d) => args.value_or(name, d)?,
        None => args.value(name)?,
    };
    let k = s.key(name);
    s.set_value(k, v, name)?;
    Ok(k)
}

/// Convolution1D / Convolution2D as Mithril builds them: the kernel size is read off
/// the weight's shape, converters normalize stride/padding/dilation, then one
/// `conv2d_bias` (`conv2d` without bias).
fn convolution(s: &mut Scope, args: &Args, two_d: bool) -> Result<()> {
    let spatial = if two_d { 2 } else { 1 };
    let ksize = args.value_or("kernel_size", Static::None)?;
    let out_channels = args.opt_int("out_channels")?;
    let use_bias = args.bool_or("use_bias", true)?;
    let pair = |v: i64| Static::tuple(vec![int(v), int(v)]);
    let x = s.key("input");
    let w = s.param("weight");
    let kdims: Vec<TemplateDim> = match &ksize {
        Static::Int(k) => vec![known(*k as u64); spatial],
        Static::Seq { items, .. } => items.iter().map(|i| i.as_int().map_or(TemplateDim::Any, |k| known(k as u64))).collect(),
        _ => vec![TemplateDim::Any; spatial],
    };
    let groups = if two_d { args.value_or("groups", int(1))? } else { int(1) };
    let mut wt = vec![out_channels.map_or(sym("out_channels"), known)];
    // The weight's channel count ties to the input's only without groups (C_in/groups
    // is not expressible as a template).
    wt.push(if groups == int(1) { sym("C_in") } else { TemplateDim::Any });
    wt.extend(kdims);
    let mut xt = vec![sym("N"), sym("C_in")];
    xt.extend(std::iter::repeat_n(TemplateDim::Any, spatial));
    s.template(vec![(w, wt), (x, xt)]);
    let wshape = s.prim(Formula::Shape, ins![("input", w)])?;
    let kindex = if two_d { Static::Slice { start: Some(-2), stop: None, step: None } } else { int(-1) };
    let kernel = s.prim(Formula::Indexer, ins![("input", wshape), ("index", kindex)])?;
    let p = arg_key(s, args, "padding", Some(if two_d { pair(0) } else { int(0) }))?;
    let st = arg_key(s, args, "stride", Some(if two_d { pair(1) } else { int(1) }))?;
    let d = arg_key(s, args, "dilation", Some(if two_d { pair(1) } else { int(1) }))?;
    let pad_conv = if two_d { Formula::PaddingConverter2d } else { Formula::PaddingConverter1d };
    let pad = s.prim(pad_conv, ins![("input", p), ("kernel_size", kernel)])?;
    let out = s.key("output");
    let mut inputs = ins![("input", x), ("weight", w)];
    if use_bias {
        let b = s.param("bias");
        inputs.push(("bias", In::from(b)));
        if let Some(o) = out_channels {
            let mut bt = vec![known(1), known(o)];
            bt.extend(std::iter::repeat_n(known(1), spatial));
            s.template(vec![(b, bt)]);
        }
    }
    if two_d {
        let stt = s.prim(Formula::TupleConverter, ins![("input", st)])?;
        let pt = s.prim(Formula::TupleConverter, ins![("input", pad)])?;
        let dt = s.prim(Formula::TupleConverter, ins![("input", d)])?;
        let g = s.key("groups");
        s.set_value(g, groups, "groups")?;
        inputs.extend(ins![("stride", stt), ("padding", pt), ("dilation", dt), ("groups", g)]);
        s.prim_into(if use_bias { Formula::Conv2dBias } else { Formula::Conv2d }, inputs, out)?;
        s.order(&["weight", "padding", "stride", "dilation", "input", "bias", "groups", "output"]);
    } else {
        inputs.extend(ins![("stride", st), ("padding", pad), ("dilation", d)]);
        s.prim_into(if use_bias { Formula::Conv1dBias } else { Formula::Conv1d }, inputs, out)?;
        s.order(&["weight", "padding", "input", "bias", "stride", "dilation", "output"]);
    }
    Ok(())
}

/// Mithril's Linear from slot `x`: `transpose(weight) -> matrix_multiplication(x, .)
/// -> add(., bias)`, with the shape templates `x: [N, ..., d_in]`, `weight: [dim, d_in]`.
fn linear(s: &mut Scope, x: SlotId, dim: Option<u64>, use_bias: bool, w: &str, b: &str) -> Result<SlotId> {
    let weight = s.param(w);
    let wt = s.prim(Formula::Transpose, ins![("input", weight), ("axes", Static::None)])?;
    let mm = s.prim(Formula::MatrixMultiplication, ins![("left", x), ("right", wt)])?;
    let d = dim.map_or(sym("d_out"), known);
    let xt = vec![sym("N"), TemplateDim::Variadic("Var_inter".into()), sym("d_in")];
    s.template(vec![(x, xt), (weight, vec![d.clone(), sym("d_in")])]);
    if !use_bias {
        return Ok(mm);
    }
    let bias = s.param(b);
    s.template(vec![(bias, vec![d])]);
    s.prim(Formula::Add, ins![("left", mm), ("right", bias)])
}

/// `Sum` over everything (Mithril's `Sum()` defaults).
fn reduce_all(x: SlotId) -> Vec<(&'static str, In)> {
    ins![("input", x), ("axis", Static::None), ("keepdim", Static::Bool(false))]
}

/// `Power(robust=...)` of `base` and `exponent` into `out`.
fn power_into(s: &mut Scope, base: SlotId, exponent: SlotId, robust: bool, out: SlotId) -> Result<()> {
    if robust {
        let t = Static::Named("MIN_POSITIVE_NORMAL".into());
        s.prim_into(Formula::RobustPower, ins![("base", base), ("exponent", exponent), ("threshold", t)], out)
    } else {
        s.prim_into(Formula::Power, ins![("base", base), ("exponent", exponent)], out)
    }
}

/// Connects an activation model (a nested node, or a bare class name) from `x` to `out`.
fn activation(s: &mut Scope, act: &ModelNode, x: SlotId, out: SlotId) -> Result<()> {
    let keys = s.instantiate(act)?;
    let missing = |k: &str| Error::user(format!("{}: an activation needs an `{k}` key", act.describe()));
    let input = keys.get("input").copied().ok_or_else(|| missing("input"))?;
    let output = keys.get("output").copied().ok_or_else(|| missing("output"))?;
    s.union(x, input)?;
    s.union(output, out)
}

/// Typed access to a node's `args`, with errors naming the node.
struct Args<'a> {
    node: &'a ModelNode,
}

impl Args<'_> {
    fn err(&self, what: &str) -> Error {
        Error::user(format!("{}: {what}", self.node.describe()))
    }
    fn get(&self, key: &str) -> Option<&Value> {
        match self.node.args.get(key) {
            Some(Value::String(s)) if s == "TBD" => None,
            v => v,
        }
    }
    fn value(&self, key: &str) -> Result<Static> {
        let v = self.get(key).ok_or_else(|| self.err(&format!("argument `{key}` is missing")))?;
        Static::from_json(v, false).map_err(|e| self.err(&format!("argument `{key}`: {e}")))
    }
    fn value_or(&self, key: &str, default: Static) -> Result<Static> {
        match self.get(key) {
            None => Ok(default),
            Some(_) => self.value(key),
        }
    }
    fn opt_int(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| self.err(&format!("argument `{key}` must be a non-negative integer, got {v}"))),
        }
    }
    fn int_or(&self, key: &str, default: i64) -> Result<i64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_i64().ok_or_else(|| self.err(&format!("argument `{key}` must be an integer, got {v}"))),
        }
    }
    fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| self.err(&format!("argument `{key}` must be true or false, got {v}"))),
        }
    }
    /// A model-valued argument: a nested node or a bare class name.
    fn model(&self, key: &str) -> Result<ModelNode> {
        let v = self.get(key).ok_or_else(|| self.err(&format!("argument `{key}` is missing")))?;
        self.model_value(v, &self.arg_path(key))
    }
    fn models(&self, key: &str) -> Result<Vec<ModelNode>> {
        let v = self.get(key).ok_or_else(|| self.err(&format!("argument `{key}` is missing")))?;
        let list = v.as_array().ok_or_else(|| self.err(&format!("argument `{key}` must be a list of models")))?;
        list.iter()
            .enumerate()
            .map(|(i, m)| self.model_value(m, &format!("{}[{i}]", self.arg_path(key))))
            .collect()
    }
    /// JSON path of argument `key`: `submodels.m_0.args.activation`.
    fn arg_path(&self, key: &str) -> String {
        if self.node.path.is_empty() { format!("args.{key}") } else { format!("{}.args.{key}", self.node.path) }
    }

    fn model_value(&self, v: &Value, path: &str) -> Result<ModelNode> {
        let obj = match v {
            Value::String(name) => serde_json::json!({ "name": name.trim_end_matches("()") }),
            other => other.clone(),
        };
        super::json::parse_value(&obj, path)
    }
}
