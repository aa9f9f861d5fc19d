//! ONNX's operators, each mapped once onto the IR through the shared builder: one
//! table ([`OPS`]) from operator name to handler, one operator family per file (as
//! tract's op register does). A handler reads its node's inputs and attributes (for the
//! model's opset) and returns its outputs' values, or says what it cannot compile.

mod attention;
mod constant;
mod conv_transpose;
mod elementwise;
mod index;
mod linalg;
mod loss;
mod nn;
mod norm;
mod quantize;
mod recurrent;
mod reduce;
mod resize;
mod sample;
mod shape;
mod spectral;
mod training;

use super::import::Cx;
use crate::ir::Poly;
use super::model::is_default_domain;
use super::node::{Node, Out};
use super::proto::NodeProto;

/// What imports one operator.
pub type Handler = fn(&mut Cx, &Node) -> Out;

/// Every ONNX operator (default domain) mithrilc reads, with its handler.
pub static OPS: &[(&str, Handler)] = &[
    // Elementwise math and logic (elementwise.rs).
    ("Abs", elementwise::unary),
    ("Neg", elementwise::unary),
    ("Exp", elementwise::unary),
    ("Log", elementwise::unary),
    ("Sqrt", elementwise::unary),
    ("Sin", elementwise::unary),
    ("Cos", elementwise::unary),
    ("Tanh", elementwise::unary),
    ("Atan", elementwise::unary),
    ("Relu", elementwise::unary),
    ("Erf", elementwise::unary),
    ("Floor", elementwise::unary),
    ("Sign", elementwise::unary),
    ("Not", elementwise::unary),
    ("BitwiseNot", elementwise::unary),
    ("IsNaN", elementwise::unary),
    ("Sigmoid", elementwise::unary),
    ("Softplus", elementwise::unary),
    ("Mish", elementwise::unary),
    ("Ceil", elementwise::composed),
    ("Reciprocal", elementwise::composed),
    ("Tan", elementwise::composed),
    ("Sinh", elementwise::composed),
    ("Cosh", elementwise::composed),
    ("Asinh", elementwise::composed),
    ("Acosh", elementwise::composed),
    ("Asin", elementwise::composed),
    ("Acos", elementwise::composed),
    ("Atanh", elementwise::composed),
    ("Softsign", elementwise::composed),
    ("IsInf", elementwise::is_inf),
    ("Round", elementwise::round),
    ("Add", elementwise::binary),
    ("Sub", elementwise::binary),
    ("Mul", elementwise::binary),
    ("Div", elementwise::binary),
    ("Pow", elementwise::binary),
    ("Equal", elementwise::binary),
    ("Less", elementwise::binary),
    ("LessOrEqual", elementwise::binary),
    ("Greater", elementwise::binary),
    ("GreaterOrEqual", elementwise::binary),
    ("And", elementwise::binary),
    ("Or", elementwise::binary),
    ("Xor", elementwise::binary),
    ("BitwiseAnd", elementwise::binary),
    ("BitwiseOr", elementwise::binary),
    ("BitwiseXor", elementwise::binary),
    ("BitShift", elementwise::bit_shift),
    ("Mod", elementwise::modulo),
    ("Max", elementwise::variadic),
    ("Min", elementwise::variadic),
    ("Sum", elementwise::variadic),
    ("Mean", elementwise::variadic),
    ("Where", elementwise::where_),
    ("Cast", elementwise::cast),
    ("CastLike", elementwise::cast),
    ("Clip", elementwise::clip),
    // Activations with parameters (elementwise.rs).
    ("LeakyRelu", elementwise::activation),
    ("Elu", elementwise::activation),
    ("Selu", elementwise::activation),
    ("Celu", elementwise::activation),
    ("HardSigmoid", elementwise::activation),
    ("HardSwish", elementwise::activation),
    ("ThresholdedRelu", elementwise::activation),
    ("Shrink", elementwise::activation),
    ("Gelu", elementwise::activation),
    ("Swish", elementwise::activation),
    ("PRelu", elementwise::prelu),
    // Reductions (reduce.rs).
    ("ReduceSum", reduce::reduce),
    ("ReduceMean", reduce::reduce),
    ("ReduceMax", reduce::reduce),
    ("ReduceMin", reduce::reduce),
    ("ReduceProd", reduce::reduce),
    ("ReduceL1", reduce::reduce),
    ("ReduceL2", reduce::reduce),
    ("ReduceLogSum", reduce::reduce),
    ("ReduceLogSumExp", reduce::reduce),
    ("ReduceSumSquare", reduce::reduce),
    ("ArgMax", reduce::arg_reduce),
    ("ArgMin", reduce::arg_reduce),
    // Products (linalg.rs).
    ("MatMul", linalg::matmul),
    ("Gemm", linalg::gemm),
    ("Einsum", linalg::einsum),
    // Convolution, pooling and normalization (nn.rs).
    ("Conv", nn::conv),
    ("ConvTranspose", conv_transpose::conv_transpose),
    ("CausalConvWithState", nn::causal_conv_with_state),
    ("Col2Im", conv_transpose::col2im),
    ("MaxPool", nn::pool),
    ("AveragePool", nn::pool),
    ("GlobalAveragePool", nn::global_pool),
    ("GlobalMaxPool", nn::global_pool),
    ("BatchNormalization", nn::batch_norm),
    ("InstanceNormalization", nn::instance_norm),
    ("LayerNormalization", nn::layer_norm),
    ("GroupNormalization", nn::group_norm),
    ("Softmax", nn::softmax),
    ("LogSoftmax", nn::softmax),
    ("Hardmax", nn::softmax),
    // Quantization and integer products (quantize.rs).
    ("QuantizeLinear", quantize::quantize_linear),
    ("DequantizeLinear", quantize::dequantize_linear),
    ("DynamicQuantizeLinear", quantize::dynamic_quantize_linear),
    ("MatMulInteger", quantize::matmul_integer),
    ("ConvInteger", quantize::conv_integer),
    ("QLinearMatMul", quantize::qlinear_matmul),
    ("QLinearConv", quantize::qlinear_conv),
    // Shapes and data movement (shape.rs).
    ("Identity", shape::identity),
    ("Dropout", shape::identity),
    ("Reshape", shape::reshape),
    ("Flatten", shape::flatten),
    ("Squeeze", shape::squeeze),
    ("Unsqueeze", shape::unsqueeze),
    ("Transpose", shape::transpose),
    ("Expand", shape::expand),
    ("Concat", shape::concat),
    ("Split", shape::split),
    ("Slice", shape::slice),
    ("Gather", shape::gather),
    ("Tile", shape::tile),
    ("Pad", shape::pad),
    ("DepthToSpace", shape::depth_to_space),
    ("SpaceToDepth", shape::space_to_depth),
    // Values known at compile time (constant.rs).
    ("Constant", constant::constant),
    ("Shape", constant::shape),
    ("Size", constant::size),
    ("ConstantOfShape", constant::constant_of_shape),
    ("Range", constant::range),
    ("EyeLike", constant::eye_like),
    ("HannWindow", constant::window),
    ("HammingWindow", constant::window),
    ("BlackmanWindow", constant::window),
    ("MelWeightMatrix", constant::mel_weight_matrix),
    // Fourier transforms (spectral.rs).
    ("DFT", spectral::dft),
    ("STFT", spectral::stft),
    // Attention, losses and more normalizations (attention.rs, loss.rs, norm.rs).
    ("Attention", attention::attention),
    ("LinearAttention", attention::linear_attention),
    ("RMSNormalization", attention::rms_norm),
    ("RotaryEmbedding", attention::rotary_embedding),
    ("NegativeLogLikelihoodLoss", loss::nll_loss),
    ("SoftmaxCrossEntropyLoss", loss::softmax_cross_entropy),
    ("LpNormalization", norm::lp_normalization),
    ("MeanVarianceNormalization", norm::mean_variance_normalization),
    ("LRN", norm::lrn),
    ("LpPool", norm::lp_pool),
    // Recurrent layers (recurrent.rs).
    ("RNN", recurrent::rnn),
    ("GRU", recurrent::gru),
    ("LSTM", recurrent::lstm),
    // Indexing (index.rs) and resizing (resize.rs).
    ("GatherElements", index::gather_elements),
    ("GatherND", index::gather_nd),
    ("ScatterElements", index::scatter_elements),
    ("Scatter", index::scatter_elements),
    ("ScatterND", index::scatter_nd),
    ("Trilu", index::trilu),
    ("OneHot", index::one_hot),
    ("CumSum", index::cumulative),
    ("CumProd", index::cumulative),
    ("TopK", index::top_k),
    ("Compress", index::compress),
    ("ReverseSequence", index::reverse_sequence),
    ("CenterCropPad", index::center_crop_pad),
    ("TensorScatter", index::tensor_scatter),
    ("MaxUnpool", index::max_unpool),
    ("Resize", resize::resize),
    ("GridSample", sample::grid_sample),
    ("AffineGrid", sample::affine_grid),
    ("RoiAlign", sample::roi_align),
    ("DeformConv", sample::deform_conv),
    ("Upsample", resize::resize),
];

/// The domain of ONNX's training operators, and those of them mithrilc reads.
const TRAINING_DOMAIN: &str = "ai.onnx.preview.training";
static TRAINING_OPS: &[(&str, Handler)] = &[("Adagrad", training::adagrad), ("Adam", training::adam), ("Momentum", training::momentum)];
/// The domain of ONNX's preview operators, and those of them mithrilc reads.
const PREVIEW_DOMAIN: &str = "ai.onnx.preview";
static PREVIEW_OPS: &[(&str, Handler)] = &[("FlexAttention", attention::flex_attention)];

/// Operators known to be outside what the IR expresses, with the reason given.
const REFUSED: &[(&[&str], &str)] = &[
    (&["If", "Loop", "Scan"], "control flow is not supported (mithrilc compiles one static graph)"),
    (
        &["SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap", "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement", "OptionalHasElement"],
        "sequences and optionals are not supported",
    ),
    (&["StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch", "TfIdfVectorizer"], "strings are not supported"),
    (&["RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"], "random operators are not supported (a compiled model is deterministic)"),
    (&["NonZero", "Unique", "NonMaxSuppression"], "the output's shape depends on the input's values (mithrilc's shapes are known when compiling, up to symbols)"),
];

/// The table of domain `domain`'s operators read.
fn table(domain: &str) -> &'static [(&'static str, Handler)] {
    if domain == TRAINING_DOMAIN {
        TRAINING_OPS
    } else if domain == PREVIEW_DOMAIN {
        PREVIEW_OPS
    } else if is_default_domain(domain) {
        OPS
    } else {
        &[]
    }
}

/// The handler of a node [`refusal`] let through.
pub fn handler(node: &NodeProto) -> Handler {
    let op_type = node.op_type.as_deref().unwrap_or_default();
    let ops = table(node.domain.as_deref().unwrap_or_default());
    ops.iter().find(|(name, _)| *name == op_type).map(|(_, h)| *h).expect("refusal() lets only the tables' operators through")
}

/// Why a node cannot be imported whatever its attributes, if it cannot.
pub fn refusal(node: &NodeProto, opset: i64) -> Option<String> {
    let domain = node.domain.as_deref().unwrap_or_default();
    let op = node.op_type.as_deref().unwrap_or_default();
    if domain == "com.microsoft" {
        return Some(format!("{op} is an ONNX Runtime contrib operator (domain com.microsoft), which mithrilc does not read"));
    }
    if domain == TRAINING_DOMAIN || domain == PREVIEW_DOMAIN {
        return (!table(domain).iter().any(|(name, _)| *name == op)).then(|| format!("no operator {op} of domain {domain} in mithrilc"));
    }
    if !is_default_domain(domain) {
        return Some(format!("operators of domain {domain} are not supported"));
    }
    if opset == 0 {
        return Some("the model imports no opset of the default domain, which holds ONNX's operators".into());
    }
    if OPS.iter().any(|(name, _)| *name == op) {
        return None;
    }
    Some(match REFUSED.iter().find(|(ops, _)| ops.contains(&op)) {
        Some((_, why)) => why.to_string(),
        None => format!("no ONNX operator {op} in mithrilc"),
    })
}

/// Input `i` as integers, which the operator needs at compile time (a shape, axes,
/// pads); `None` when the node leaves it out.
pub fn input_ints(cx: &mut Cx, node: &Node, i: usize) -> std::result::Result<Option<Vec<i64>>, super::node::Fail> {
    Ok(input_values(cx, node, i)?.map(|t| t.data.iter().map(|&v| v as i64).collect()))
}

/// Input `i` as numbers, which the operator needs at compile time; `None` when the
/// node leaves it out.
pub fn input_floats(cx: &mut Cx, node: &Node, i: usize) -> std::result::Result<Option<Vec<f64>>, super::node::Fail> {
    Ok(input_values(cx, node, i)?.map(|t| t.data))
}

/// Input `i`, an integer list the operator needs when compiling (a shape), as
/// dimensions: constants, or polynomials of the symbols that shape arithmetic makes
/// (`super::symbolic`); `None` when the node leaves it out.
pub fn input_dims(cx: &mut Cx, node: &Node, i: usize) -> std::result::Result<Option<Vec<Poly>>, super::node::Fail> {
    let Some(v) = node.opt(i) else { return Ok(None) };
    match cx.dims_value(v)? {
        Some(l) => Ok(Some(l)),
        None => run_time(node, i),
    }
}

/// The refusal of an input computed at run time that the operator needs known.
fn run_time<T>(node: &Node, i: usize) -> std::result::Result<T, super::node::Fail> {
    super::node::unsupported(format!("its input {i} ({}) is computed at run time, and {} needs it known when compiling", node.proto.input[i], node.op_type))
}

/// A list of dimensions as ONNX writes a shape: `[B, S, -1]`.
pub fn show_dims(l: &[Poly]) -> String {
    format!("[{}]", l.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", "))
}

fn input_values(cx: &mut Cx, node: &Node, i: usize) -> std::result::Result<Option<crate::tensor::Tensor>, super::node::Fail> {
    let Some(v) = node.opt(i) else { return Ok(None) };
    match cx.value(v)? {
        Some(t) => Ok(Some(t)),
        None => run_time(node, i),
    }
}

/// An ONNX axis (negative counts from the end) of a rank-`rank` tensor.
pub fn axis(ax: i64, rank: usize) -> std::result::Result<usize, super::node::Fail> {
    Ok(crate::ir::builder::axis(ax, rank)?)
}

/// ONNX axes, resolved, sorted and distinct.
pub fn axes(list: &[i64], rank: usize) -> std::result::Result<Vec<usize>, super::node::Fail> {
    let mut out = list.iter().map(|&a| axis(a, rank)).collect::<std::result::Result<Vec<_>, _>>()?;
    out.sort_unstable();
    let before = out.len();
    out.dedup();
    if out.len() != before {
        return super::node::invalid(format!("axes {list:?} name an axis twice"));
    }
    Ok(out)
}
