//! The model file: mapped, decoded by prost, and checked for what the rest of the
//! frontend assumes (an IR version and opsets it reads, a graph).

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;

use super::proto::{ModelProto, OperatorSetIdProto};
use crate::error::{Error, Result};
use crate::tensor::Backing;

/// The oldest opset of the default domain read: opset 7 settled broadcasting as NumPy
/// does and dropped the `consumed_inputs` and `is_test` attributes.
pub const OPSET_MIN: i64 = 7;
/// The newest opset of the default domain that the vendored `onnx.proto`'s release
/// (onnx 1.22.0) defines.
pub const OPSET_MAX: i64 = 27;
/// IR versions read: 3 (opset imports) to the vendored release's `IR_VERSION`.
const IR_MIN: i64 = 3;
const IR_MAX: i64 = 13;

/// A decoded model and the mapped file its tensors are views of.
pub struct File {
    pub model: ModelProto,
    /// The file, mapped; `raw_data` fields are slices of it ([`File::range_of`]).
    pub backing: Arc<dyn Backing>,
    /// The opset of the default domain; 0 when the model imports none (its operators
    /// are all of other domains, which are refused per node).
    pub opset: i64,
}

impl File {
    /// Where `bytes` lie in the mapped file, when they are a view of it.
    pub fn range_of(&self, bytes: &[u8]) -> Option<std::ops::Range<usize>> {
        let base = self.backing.bytes().as_ptr() as usize;
        let start = (bytes.as_ptr() as usize).checked_sub(base)?;
        let end = start.checked_add(bytes.len())?;
        (end <= self.backing.bytes().len()).then_some(start..end)
    }
}

/// `Bytes` over a mapped file, so that prost's `bytes` fields are views of it.
struct Shared(Arc<dyn Backing>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}

/// Maps and decodes the model at `path` and checks its versions.
pub fn read(path: &Path) -> Result<File> {
    let backing = crate::data::map_file(path)?;
    let bytes = Bytes::from_owner(Shared(backing.clone()));
    let model = ModelProto::decode(bytes).map_err(|e| {
        Error::user(format!("{}: not a valid ONNX model: {e}", path.display()))
            .note("the file is truncated or corrupt, or is not an ONNX model")
    })?;
    let opset = check_versions(&model).map_err(|e| e.context(path.display()))?;
    if model.graph.is_none() {
        return Err(Error::user(format!("{}: the ONNX model has no graph", path.display())));
    }
    Ok(File { model, backing, opset })
}

/// The model's IR version and default-domain opset are ones this frontend reads;
/// returns the opset. Other domains are refused per node, by name, with the rest.
fn check_versions(model: &ModelProto) -> Result<i64> {
    let ir = model.ir_version.unwrap_or(0);
    if !(IR_MIN..=IR_MAX).contains(&ir) {
        let why = if ir < IR_MIN { "older than" } else { "newer than" };
        return Err(Error::user(format!("ONNX IR version {ir} is {why} the versions mithrilc reads ({IR_MIN} to {IR_MAX})"))
            .note("re-export the model, or convert it with onnx.version_converter"));
    }
    let default = model.opset_import.iter().find(|o| is_default_domain(o.domain.as_deref().unwrap_or_default()));
    let Some(OperatorSetIdProto { version: Some(opset), .. }) = default else { return Ok(0) };
    let opset = *opset;
    if (1..OPSET_MIN).contains(&opset) && same_as_opset_min(model) {
        return Ok(OPSET_MIN);
    }
    if !(OPSET_MIN..=OPSET_MAX).contains(&opset) {
        let why = if opset < OPSET_MIN { "older than" } else { "newer than" };
        return Err(Error::user(format!("opset {opset} is {why} the opsets mithrilc reads ({OPSET_MIN} to {OPSET_MAX}, from onnx 1.22.0)"))
            .note("convert the model with onnx.version_converter.convert_version(model, 17)"));
    }
    Ok(opset)
}

/// Operators whose one definition from opset 1 to opset 7 is the same (onnx's schema
/// history: no version in 2 to 7).
const SAME_FROM_OPSET_1_TO_7: &[&str] = &[
    "ArgMax", "ArgMin", "Constant", "Conv", "ConvTranspose", "DepthToSpace", "Flatten", "Gather", "GlobalAveragePool", "GlobalMaxPool", "Hardmax",
    "Identity", "LRN", "LogSoftmax", "LpNormalization", "MatMul", "MaxPool", "Not", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "Shape", "Size", "Slice", "Softmax", "Softplus",
    "Softsign", "SpaceToDepth", "Squeeze", "TopK", "Transpose", "Unsqueeze",
];

/// Whether a model of an opset older than 7 means what it would at opset 7: each of its
/// main graph's operators of the default domain is defined alike in both, so it is read
/// as opset 7.
fn same_as_opset_min(model: &ModelProto) -> bool {
    let nodes = model.graph.as_ref().map_or(&[][..], |g| &g.node[..]);
    nodes.iter().all(|n| !is_default_domain(n.domain.as_deref().unwrap_or_default()) || SAME_FROM_OPSET_1_TO_7.contains(&n.op_type.as_deref().unwrap_or_default()))
}

/// The default domain, which holds ONNX's operators, is `""` or `"ai.onnx"`.
pub fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

/// Whether `head` starts as a serialized `ModelProto` does: every writer puts
/// `ir_version` (field 1, a small varint) first. A file starting with another of
/// `ModelProto`'s fields, with its wire type, is taken for one when it is binary (holds
/// a control character that text does not).
pub fn looks_like_model(head: &[u8]) -> bool {
    let (Some(&key), second) = (head.first(), head.get(1)) else { return false };
    if key == 0x08 {
        return second.is_some_and(|v| (1..0x80).contains(v));
    }
    let (field, wire) = (key >> 3, key & 7);
    let model_field = match wire {
        0 => field == 5,
        2 => matches!(field, 2 | 3 | 4 | 6 | 7 | 8 | 14 | 20 | 25),
        _ => false,
    };
    model_field && head.iter().any(|&b| b < 0x20 && !b"\t\n\r".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_is_recognized_by_its_first_field_and_text_is_not() {
        assert!(looks_like_model(&[0x08, 0x08, 0x12, 0x07]));
        assert!(looks_like_model(&[0x3a, 0x10, 0x0a, 0x01]));
        for text in [&b"{\"name\": 1}"[..], b"graph g {", b"", b"\x89PNG", b"\"text\"\n", b"\x08"] {
            assert!(!looks_like_model(text), "{text:?}");
        }
    }
}
