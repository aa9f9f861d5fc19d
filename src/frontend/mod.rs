//! Frontends: input formats parsed into the IR. Each format is one folder behind
//! [`load`], which picks the format from the file's content; nothing downstream knows
//! which format a graph came from.
//!
//! A format is one [`Format`] and one entry in [`FORMATS`]. What every format takes
//! (shapes, compile-time constants, the types data files give) is [`Options`]; what
//! only one format understands is that format's own field in it (`mithril`).
//!
//! Every frontend emits its nodes through the shared [`crate::ir::builder::Builder`], so the same
//! model read from two formats is the same graph, in the patterns the passes match.

pub mod mithril;
pub mod onnx;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use indexmap::IndexMap;

use crate::error::{io_message, Error, Result};
use crate::ir::{Graph, Shape, TensorType};
use crate::tensor::RawTensor;

/// What the caller knows beyond the model file.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Shapes of inputs and parameters (`--shape NAME=D0,D1`), by name; a dimension may
    /// be a symbol.
    pub shapes: BTreeMap<String, Shape>,
    /// Types of inputs and parameters known from data files, by name.
    pub known_types: BTreeMap<String, TensorType>,
    /// Values of the model's keys fixed at compile time (`--const NAME=VALUE`): a
    /// number, or a nested list for a tensor.
    pub constants: Vec<(String, serde_json::Value)>,
    /// What only Mithril's model JSON understands.
    pub mithril: mithril::Extra,
}

/// One input format.
pub trait Format: Sync {
    /// What the format is called in messages ("Mithril model JSON").
    fn name(&self) -> &'static str;
    /// Whether a file starting with `head` (its first bytes, at most [`HEAD`]) is in
    /// this format.
    fn recognizes(&self, head: &[u8]) -> bool;
    /// Reads the model at `path` into a graph (before any pass).
    fn load(&self, path: &Path, opts: &Options) -> Result<Model>;
}

/// A model as a frontend reads it.
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub graph: Graph,
    /// The values of parameters that the model file carries (ONNX's initializers), by
    /// name, each in the file's element type and left in the file where it can be (a
    /// mapped view). A parameters file given with the model overrides them by name.
    pub weights: IndexMap<String, RawTensor>,
}

/// Every format [`load`] reads, the first that recognizes a file reading it (ONNX
/// before Mithril's JSON, which takes any text).
pub static FORMATS: &[&dyn Format] = &[&onnx::Onnx, &mithril::MithrilJson];

/// How many bytes of a file [`Format::recognizes`] sees.
pub const HEAD: usize = 512;

/// Reads the model at `path`, in the format its content says.
pub fn load(path: &Path, opts: &Options) -> Result<Model> {
    let head = head(path)?;
    let format = FORMATS.iter().find(|f| f.recognizes(&head)).ok_or_else(|| {
        let names: Vec<&str> = FORMATS.iter().map(|f| f.name()).collect();
        Error::user(format!("{}: not a model mithrilc reads (it reads {})", path.display(), names.join(", ")))
    })?;
    format.load(path, opts)
}

/// The first [`HEAD`] bytes of the file at `path` (fewer if it is shorter).
fn head(path: &Path) -> Result<Vec<u8>> {
    let cannot = |e: std::io::Error| Error::user(format!("cannot read {}: {}", path.display(), io_message(&e)));
    let mut head = Vec::with_capacity(HEAD);
    std::fs::File::open(path).map_err(cannot)?.take(HEAD as u64).read_to_end(&mut head).map_err(cannot)?;
    Ok(head)
}

/// Parses `NAME=D0,D1,...`: sizes or symbols; `NAME=` is a scalar.
pub fn parse_shape_arg(arg: &str) -> Result<(String, Shape)> {
    let (name, dims) = arg
        .split_once('=')
        .ok_or_else(|| Error::usage(format!("--shape {arg}: expected NAME=D0,D1,... (e.g. input=1,784 or input=B,784)")))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(Error::usage(format!("--shape {arg}: the name is empty")));
    }
    let mut out = Vec::new();
    if dims.trim().is_empty() {
        return Ok((name.to_string(), Shape(out)));
    }
    for d in dims.split(',').map(str::trim) {
        if d.is_empty() {
            return Err(Error::usage(format!("--shape {arg}: a dimension is empty (expected sizes or symbols separated by single commas)")));
        }
        out.push(match d.parse::<u64>() {
            Ok(n) => crate::ir::Dim::Known(n),
            Err(_) if d.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !d.starts_with(|c: char| c.is_ascii_digit()) => {
                crate::ir::Dim::Sym(d.to_string())
            }
            Err(_) => return Err(Error::usage(format!("--shape {arg}: `{d}` is neither a size nor a symbol name"))),
        });
    }
    // Sizes are indexed in i64 by generated code and VJPs: the element count must fit.
    let count = out.iter().try_fold(1u64, |n, d| match d {
        crate::ir::Dim::Known(k) => n.checked_mul(*k).filter(|&n| n <= i64::MAX as u64),
        _ => Some(n),
    });
    if count.is_none() {
        return Err(Error::usage(format!("--shape {arg}: more elements than a 64-bit index can count")));
    }
    Ok((name.to_string(), Shape(out)))
}

/// Parses `--set PATH.KEY=VALUE` (VALUE is JSON; a bare word is a string).
pub fn parse_set_arg(arg: &str) -> Result<(String, serde_json::Value)> {
    let (path, value) = arg
        .split_once('=')
        .ok_or_else(|| Error::usage(format!("--set {arg}: expected PATH.KEY=VALUE, e.g. submodels.m_2.index=0")))?;
    let value = serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
    Ok((path.trim().to_string(), value))
}
