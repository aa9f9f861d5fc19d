//! What an operator's handler sees of its node: its inputs as IR values, its
//! attributes by type, and how to say that it cannot be compiled.

use super::proto::attribute_proto::AttributeType;
use super::proto::{AttributeProto, NodeProto, TensorProto};
use crate::error::Error;
use crate::ir::ValueId;

/// Why a node was not imported.
#[derive(Debug)]
pub enum Fail {
    /// The node asks for what mithrilc does not compile (an attribute value, an input
    /// only known at run time): listed with every other such node, and the import goes
    /// on without its outputs.
    Unsupported(String),
    /// The node is wrong (shapes that do not fit, a missing input).
    Error(Error),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::Error(e)
    }
}

/// What a handler returns: the node's outputs, in order (trailing optional outputs may
/// be left out).
pub type Out = std::result::Result<Vec<ValueId>, Fail>;

/// `Fail::Unsupported(msg)` as an `Err`.
pub fn unsupported<T>(msg: impl Into<String>) -> std::result::Result<T, Fail> {
    Err(Fail::Unsupported(msg.into()))
}

/// `Fail::Error` of a user error as an `Err`.
pub fn invalid<T>(msg: impl Into<String>) -> std::result::Result<T, Fail> {
    Err(Fail::Error(Error::user(msg)))
}

/// One node being imported.
pub struct Node<'a> {
    pub proto: &'a NodeProto,
    pub op_type: &'a str,
    /// The model's opset of the default domain: which version of the operator this is.
    pub opset: i64,
    /// Each input slot's value; `None` where the input is left out (an empty name).
    pub inputs: Vec<Option<ValueId>>,
}

impl Node<'_> {
    /// Input `i`, which the operator requires.
    pub fn input(&self, i: usize) -> std::result::Result<ValueId, Fail> {
        match self.inputs.get(i).copied().flatten() {
            Some(v) => Ok(v),
            None => invalid(format!("{} needs input {i}, and the node gives {} input(s)", self.op_type, self.inputs.iter().filter(|x| x.is_some()).count())),
        }
    }

    /// Input `i` if the node gives it.
    pub fn opt(&self, i: usize) -> Option<ValueId> {
        self.inputs.get(i).copied().flatten()
    }

    /// Every input given, in order (variadic operators: Sum, Concat, Max).
    pub fn all_inputs(&self) -> Vec<ValueId> {
        self.inputs.iter().flatten().copied().collect()
    }

    /// How many outputs the node names (left-out trailing ones not counted).
    pub fn outputs(&self) -> usize {
        self.proto.output.iter().rposition(|o| !o.is_empty()).map_or(0, |i| i + 1)
    }

    fn attr(&self, name: &str, want: AttributeType) -> std::result::Result<Option<&AttributeProto>, Fail> {
        let Some(a) = self.proto.attribute.iter().find(|a| a.name.as_deref() == Some(name)) else { return Ok(None) };
        if a.ref_attr_name.as_deref().is_some_and(|r| !r.is_empty()) {
            return unsupported(format!("attribute {name} refers to a function's attribute"));
        }
        let ty = a.r#type.and_then(|t| AttributeType::try_from(t).ok());
        match ty {
            Some(t) if t == want => Ok(Some(a)),
            // Writers before IR version 2 left the type out.
            None | Some(AttributeType::Undefined) => Ok(Some(a)),
            Some(t) => invalid(format!("attribute {name} is {}, and {} wants {}", t.as_str_name(), self.op_type, want.as_str_name())),
        }
    }

    pub fn int_opt(&self, name: &str) -> std::result::Result<Option<i64>, Fail> {
        Ok(self.attr(name, AttributeType::Int)?.and_then(|a| a.i))
    }

    pub fn int(&self, name: &str, default: i64) -> std::result::Result<i64, Fail> {
        Ok(self.int_opt(name)?.unwrap_or(default))
    }

    pub fn float(&self, name: &str, default: f32) -> std::result::Result<f64, Fail> {
        Ok(f64::from(self.attr(name, AttributeType::Float)?.and_then(|a| a.f).unwrap_or(default)))
    }

    pub fn ints(&self, name: &str) -> std::result::Result<Option<Vec<i64>>, Fail> {
        Ok(self.attr(name, AttributeType::Ints)?.map(|a| a.ints.clone()))
    }

    pub fn floats(&self, name: &str) -> std::result::Result<Option<Vec<f64>>, Fail> {
        Ok(self.attr(name, AttributeType::Floats)?.map(|a| a.floats.iter().map(|&f| f64::from(f)).collect()))
    }

    pub fn string(&self, name: &str) -> std::result::Result<Option<String>, Fail> {
        Ok(self.attr(name, AttributeType::String)?.and_then(|a| a.s.as_ref()).map(|s| String::from_utf8_lossy(s).into_owned()))
    }

    /// A string attribute, `default` when absent.
    pub fn string_or(&self, name: &str, default: &str) -> std::result::Result<String, Fail> {
        Ok(self.string(name)?.unwrap_or_else(|| default.to_string()))
    }

    pub fn strings(&self, name: &str) -> std::result::Result<Option<Vec<String>>, Fail> {
        Ok(self.attr(name, AttributeType::Strings)?.map(|a| a.strings.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect()))
    }

    pub fn tensor(&self, name: &str) -> std::result::Result<Option<&TensorProto>, Fail> {
        Ok(self.attr(name, AttributeType::Tensor)?.and_then(|a| a.t.as_ref()))
    }

    /// Whether the node has attribute `name`, of any type.
    pub fn has(&self, name: &str) -> bool {
        self.proto.attribute.iter().any(|a| a.name.as_deref() == Some(name))
    }
}
