//! The graph walk: inputs, initializers, then each node in dependency order through
//! its operator's handler (`ops::OPS`), then the outputs.
//!
//! Every node that cannot be compiled is found before an error is given: operators
//! mithrilc lacks (and other domains' operators) before any node is imported, what a
//! handler refuses while importing (the nodes that depend on it are skipped), and then
//! one error lists them all, each with its index, name, operator and reason.

use std::collections::{BinaryHeap, HashMap, HashSet};
use std::cmp::Reverse;
use std::path::Path;

use indexmap::IndexMap;

use super::model::{self, File};
use super::node::{Fail, Node};
use super::ops;
use super::proto::tensor_shape_proto::dimension::Value as DimValue;
use super::proto::type_proto::Value as TypeValue;
use super::proto::{GraphProto, NodeProto, TensorProto, ValueInfoProto};
use super::tensor::{self, External};
use crate::error::{Error, Result};
use crate::frontend::{Model, Options};
use crate::ir::builder::Builder;
use crate::ir::{Dim, Op, Output, Shape, TensorType, ValueId};
use crate::tensor::{RawTensor, Tensor};

/// Compile-time values are computed only up to this many elements (shapes, axes,
/// small constant tables); larger ones stay computations of the graph.
const VALUE_LIMIT: u64 = 1 << 16;
/// How many ops deep a compile-time value is looked for (shape subgraphs are a few;
/// the bound keeps a long chain of constant ops from exhausting the stack).
const VALUE_DEPTH: usize = 64;

/// The state of one import, which handlers build through.
pub struct Cx<'f> {
    /// Where the nodes go; `origin` is the node being imported.
    pub b: Builder,
    file: &'f File,
    path: &'f Path,
    external: External,
    /// Float initializers of more than one element: the model's parameters.
    weights: IndexMap<String, RawTensor>,
    /// Compile-time values computed so far.
    known: HashMap<ValueId, Tensor>,
    /// Integer lists known as dimensions of the symbols ([`super::symbolic`]).
    pub(super) lists: super::symbolic::Lists,
}

/// Reads the ONNX model at `path`.
pub fn load(path: &Path, opts: &Options) -> Result<Model> {
    let file = model::read(path)?;
    let graph = file.model.graph.as_ref().expect("model::read checks the graph");
    let name = path.file_stem().map_or("model".to_string(), |s| s.to_string_lossy().into_owned());
    let mut cx = Cx { b: Builder::new(&name), file: &file, path, external: External::default(), weights: IndexMap::new(), known: HashMap::new(), lists: HashMap::new() };
    let import = (|| {
        let mut values = cx.arguments(graph, opts)?;
        cx.nodes(graph, &mut values)?;
        cx.outputs(graph, &values)
    })();
    import.map_err(|e| e.context(path.display()))?;
    let Cx { b, weights, .. } = cx;
    Ok(Model { graph: b.finish(), weights })
}

/// `node 3 "conv1" (Conv)`: how messages name a node.
fn describe(index: usize, node: &NodeProto) -> String {
    let op = node.op_type.as_deref().unwrap_or("?");
    match node.name.as_deref() {
        Some(name) if !name.is_empty() => format!("node {index} {name:?} ({op})"),
        _ => format!("node {index} ({op})"),
    }
}

impl Cx<'_> {
    /// Initializers (parameters and constants) and graph inputs, by name.
    fn arguments(&mut self, graph: &GraphProto, opts: &Options) -> Result<HashMap<String, ValueId>> {
        let mut values: HashMap<String, ValueId> = HashMap::new();
        if !graph.sparse_initializer.is_empty() {
            return Err(Error::user(format!("the graph has {} sparse initializer(s), which mithrilc does not read", graph.sparse_initializer.len())));
        }
        for t in &graph.initializer {
            let name = t.name.clone().unwrap_or_default();
            if name.is_empty() {
                return Err(Error::user("an initializer has no name"));
            }
            if values.contains_key(&name) {
                return Err(Error::user(format!("initializer {name:?} is given twice")));
            }
            let v = self.initializer(t, &name).map_err(|e| e.context(format!("initializer {name:?}")))?;
            values.insert(name, v);
        }
        let initializers = values.len();
        for input in &graph.input {
            let name = input.name.clone().unwrap_or_default();
            // Before IR version 4 every initializer was also listed as an input; since,
            // an input with an initializer is one whose default the initializer is.
            if let Some(&v) = values.get(&name) {
                if v.index() >= initializers && self.b.graph.node(v).op == Op::Input {
                    return Err(Error::user(format!("graph input {name:?} is listed twice")));
                }
                continue;
            }
            if name.is_empty() {
                return Err(Error::user("a graph input has no name"));
            }
            let ty = value_type(input).map_err(|e| Error::user(format!("graph input {name:?}: {e}")))?;
            // A shape given (`--shape`), or else that of the data given for a run, binds
            // the model's symbols, as a Mithril model's inputs take it; the element type
            // stays the model's.
            let ty = match (opts.shapes.get(&name), opts.known_types.get(&name)) {
                (Some(shape), _) => fit_shape(&ty, shape).map_err(|e| Error::usage(format!("--shape {name}: {e}")))?,
                (None, Some(known)) => fit_shape(&ty, &known.shape).map_err(|e| Error::user(format!("the data's {name:?}, of shape {}: {e}", known.shape)))?,
                (None, None) => ty,
            };
            let v = match opts.constants.iter().rev().find(|(n, _)| *n == name) {
                // An input fixed when compiling (`--const`): a shape or axes an operator
                // needs known.
                Some((_, json)) => {
                    let t = json_tensor(json, &ty).map_err(|e| Error::usage(format!("--const {name}: {e}")))?;
                    self.b.constant(t)
                }
                None => self.b.input(&name, ty),
            };
            values.insert(name, v);
        }
        Ok(values)
    }

    /// An initializer: a parameter when it is a float tensor of more than one element
    /// (a weight, which `--params` may replace), else a constant (indices, shapes and
    /// scalars, which the graph's folding and the operators' attributes need known).
    fn initializer(&mut self, t: &TensorProto, name: &str) -> Result<ValueId> {
        let raw = tensor::read(t, self.path, self.file, &mut self.external)?;
        if raw.dtype.is_float() && raw.numel() > 1 {
            let v = self.b.param(name, TensorType::new(raw.dtype, Shape::known(&raw.shape)));
            self.weights.insert(name.to_string(), raw);
            return Ok(v);
        }
        Ok(self.b.constant(raw.to_tensor()))
    }

    /// Imports every node in dependency order; every node that cannot be imported is
    /// listed in one error.
    fn nodes(&mut self, graph: &GraphProto, values: &mut HashMap<String, ValueId>) -> Result<()> {
        let order = order(graph, values)?;
        let opset = self.file.opset;
        let mut refused: Vec<String> = graph
            .node
            .iter()
            .enumerate()
            .filter_map(|(i, n)| ops::refusal(n, opset).map(|why| format!("{}: {why}", describe(i, n))))
            .collect();
        if !refused.is_empty() {
            return Err(list_refused(&refused, graph.node.len()));
        }
        // Values of refused nodes: what depends on them is skipped, not refused again.
        let mut missing: HashSet<&str> = HashSet::new();
        for i in order {
            let proto = &graph.node[i];
            if proto.input.iter().any(|x| missing.contains(x.as_str())) {
                missing.extend(proto.output.iter().map(String::as_str));
                continue;
            }
            let inputs = proto.input.iter().map(|x| (!x.is_empty()).then(|| values[x.as_str()])).collect();
            let op_type = proto.op_type.as_deref().unwrap_or_default();
            let node = Node { proto, op_type, opset, inputs };
            self.b.origin = match proto.name.as_deref() {
                Some(n) if !n.is_empty() => format!("{n} ({op_type})"),
                _ => format!("#{i} ({op_type})"),
            };
            self.b.operands = proto.input.iter().zip(&node.inputs).filter_map(|(n, v)| Some((n.clone(), (*v)?))).collect();
            match ops::handler(proto)(self, &node) {
                Ok(outs) => {
                    for (k, name) in proto.output.iter().enumerate().filter(|(_, n)| !n.is_empty()) {
                        match outs.get(k) {
                            Some(&v) => {
                                values.insert(name.clone(), v);
                            }
                            None => {
                                refused.push(format!("{}: output {k} ({name}) is not computed", describe(i, proto)));
                                missing.insert(name);
                            }
                        }
                    }
                }
                Err(Fail::Unsupported(why)) => {
                    refused.push(format!("{}: {why}", describe(i, proto)));
                    missing.extend(proto.output.iter().map(String::as_str));
                }
                Err(Fail::Error(e)) => return Err(e.context(describe(i, proto))),
            }
        }
        self.b.origin.clear();
        self.b.operands.clear();
        if !refused.is_empty() {
            return Err(list_refused(&refused, graph.node.len()));
        }
        Ok(())
    }

    fn outputs(&mut self, graph: &GraphProto, values: &HashMap<String, ValueId>) -> Result<()> {
        let mut seen = HashSet::new();
        for out in &graph.output {
            let name = out.name.clone().unwrap_or_default();
            if !seen.insert(name.clone()) {
                return Err(Error::user(format!("graph output {name:?} is listed twice")));
            }
            let v = *values.get(&name).ok_or_else(|| Error::user(format!("graph output {name:?} is computed by no node, and is no input or initializer")))?;
            if let Ok(declared) = value_type(out) {
                let got = self.b.graph.ty(v);
                if !agrees(&declared, got) {
                    return Err(Error::user(format!("graph output {name:?}: the model declares {declared}, and its nodes compute {got}")));
                }
            }
            self.b.graph.outputs.push(Output { name, value: v, loss: false });
        }
        Ok(())
    }

    /// The value of `v` if it is known at compile time (computed from constants only,
    /// and at most [`VALUE_LIMIT`] elements). An initializer that was a parameter becomes
    /// a constant when its value is asked for: the operator needs it fixed (a shape,
    /// Resize's scales), so `--params` cannot change it.
    pub fn value(&mut self, v: ValueId) -> Result<Option<Tensor>> {
        self.value_within(v, VALUE_DEPTH)
    }

    fn value_within(&mut self, v: ValueId, depth: usize) -> Result<Option<Tensor>> {
        if let Some(t) = self.known.get(&v) {
            return Ok(Some(t.clone()));
        }
        let node = self.b.graph.node(v).clone();
        if node.ty.shape.numel().is_none_or(|n| n > VALUE_LIMIT) {
            return Ok(None);
        }
        let t = match &node.op {
            Op::Input => return Ok(None),
            Op::Param => {
                let name = node.name.clone().unwrap_or_default();
                let Some(raw) = self.weights.shift_remove(&name) else { return Ok(None) };
                let t = raw.to_tensor();
                let c = crate::ir::ConstId(self.b.graph.consts.len() as u32);
                self.b.graph.consts.push(crate::tensor::Constant::from(&t));
                let n = &mut self.b.graph.nodes[v.index()];
                n.op = Op::Constant(c);
                n.name = None;
                t
            }
            Op::Constant(c) => self.b.graph.consts[c.0 as usize].to_tensor(),
            op => {
                let mut args = Vec::with_capacity(node.args.len());
                if depth == 0 {
                    return Ok(None);
                }
                for &a in &node.args {
                    match self.value_within(a, depth - 1)? {
                        Some(t) => args.push(t),
                        None => return Ok(None),
                    }
                }
                let refs: Vec<&Tensor> = args.iter().collect();
                crate::interp::eval_op(op, &refs, &node.ty, &self.b.graph.consts)?
            }
        };
        self.known.insert(v, t.clone());
        Ok(Some(t))
    }

    /// A constant tensor of an attribute or a `Constant` node.
    pub fn tensor_attr(&mut self, t: &TensorProto) -> Result<Tensor> {
        Ok(tensor::read(t, self.path, self.file, &mut self.external)?.to_tensor())
    }
}

/// One error for every node refused.
fn list_refused(refused: &[String], nodes: usize) -> Error {
    Error::user(format!("{} of the model's {nodes} node(s) cannot be compiled:\n  {}", refused.len(), refused.join("\n  ")))
}

/// The nodes' indices in dependency order (the file's order where it allows): every
/// input a node uses must be a graph input, an initializer or another node's output,
/// every output defined once, and no node may depend on itself.
fn order(graph: &GraphProto, values: &HashMap<String, ValueId>) -> Result<Vec<usize>> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in graph.node.iter().enumerate() {
        for out in n.output.iter().filter(|o| !o.is_empty()) {
            if values.contains_key(out.as_str()) {
                return Err(Error::user(format!("{} defines {out:?}, which is already a graph input or initializer", describe(i, n))));
            }
            if let Some(first) = producer.insert(out, i) {
                return Err(Error::user(format!("{} and {} both define {out:?}", describe(first, &graph.node[first]), describe(i, n))));
            }
        }
    }
    // Kahn's algorithm, taking the lowest index ready.
    let mut waiting: Vec<usize> = vec![0; graph.node.len()];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); graph.node.len()];
    for (i, n) in graph.node.iter().enumerate() {
        for x in n.input.iter().filter(|x| !x.is_empty()) {
            match producer.get(x.as_str()) {
                Some(&p) => {
                    waiting[i] += 1;
                    users[p].push(i);
                }
                None if values.contains_key(x.as_str()) => {}
                None => return Err(Error::user(format!("{} uses {x:?}, which no node, graph input or initializer defines", describe(i, n)))),
            }
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> = (0..graph.node.len()).filter(|&i| waiting[i] == 0).map(Reverse).collect();
    let mut out = Vec::with_capacity(graph.node.len());
    while let Some(Reverse(i)) = ready.pop() {
        out.push(i);
        for &u in &users[i] {
            waiting[u] -= 1;
            if waiting[u] == 0 {
                ready.push(Reverse(u));
            }
        }
    }
    if out.len() < graph.node.len() {
        let stuck: Vec<String> = (0..graph.node.len()).filter(|&i| waiting[i] > 0).take(8).map(|i| describe(i, &graph.node[i])).collect();
        return Err(Error::user(format!("the graph has a cycle: these nodes depend on each other's outputs: {}", stuck.join(", "))));
    }
    Ok(out)
}

/// The tensor type a graph input or output declares; a dimension without a value is a
/// symbol (its `dim_param`, or `?N` for one without a name).
fn value_type(v: &ValueInfoProto) -> std::result::Result<TensorType, String> {
    let Some(TypeValue::TensorType(t)) = v.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return Err("is not a tensor (sequences, maps and optionals are not supported)".into());
    };
    let dtype = tensor::dtype(t.elem_type.unwrap_or(0))?;
    let Some(shape) = &t.shape else { return Err("has no shape (give it with --shape NAME=D0,D1,...)".into()) };
    let mut dims = Vec::with_capacity(shape.dim.len());
    for (k, d) in shape.dim.iter().enumerate() {
        dims.push(match &d.value {
            Some(DimValue::DimValue(n)) => Dim::Known(u64::try_from(*n).map_err(|_| format!("dimension {k} is {n}"))?),
            Some(DimValue::DimParam(p)) if !p.is_empty() => Dim::Sym(symbol(p)),
            _ => Dim::Sym(format!("{}_{k}", symbol(v.name.as_deref().unwrap_or("d")))),
        });
    }
    Ok(TensorType::new(dtype, Shape(dims)))
}

/// A `--const` value (a number or nested lists of numbers) as a tensor of the input's
/// type, whose known dimensions it must have.
fn json_tensor(json: &serde_json::Value, ty: &TensorType) -> std::result::Result<Tensor, String> {
    fn walk(v: &serde_json::Value, depth: usize, shape: &mut Vec<u64>, data: &mut Vec<f64>) -> std::result::Result<(), String> {
        match v {
            serde_json::Value::Array(items) => {
                if shape.len() == depth {
                    shape.push(items.len() as u64);
                } else if shape.get(depth) != Some(&(items.len() as u64)) {
                    return Err("its lists are ragged".into());
                }
                items.iter().try_for_each(|it| walk(it, depth + 1, shape, data))
            }
            serde_json::Value::Number(n) if shape.len() == depth => Ok(data.push(n.as_f64().unwrap_or(f64::NAN))),
            serde_json::Value::Bool(b) if shape.len() == depth => Ok(data.push(f64::from(u8::from(*b)))),
            _ => Err(format!("{v} is not a number or a list of them at the depth of the others")),
        }
    }
    let (mut shape, mut data) = (Vec::new(), Vec::new());
    walk(json, 0, &mut shape, &mut data)?;
    let fits = shape.len() == ty.rank() && shape.iter().zip(ty.shape.dims()).all(|(&n, d)| d.known().is_none_or(|k| k == n));
    if !fits {
        return Err(format!("a value of shape {shape:?} for the input {ty}"));
    }
    Ok(Tensor::new(ty.dtype, shape, data))
}

/// A `dim_param` as a symbol of the IR: an identifier (other characters become `_`).
fn symbol(param: &str) -> String {
    let mut s: String = param.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// The input's type with the shape `--shape` or the data gives, which must keep the
/// model's known dimensions.
fn fit_shape(ty: &TensorType, shape: &Shape) -> std::result::Result<TensorType, String> {
    if shape.rank() != ty.rank() {
        return Err(format!("the model's input is {ty}, of rank {}", ty.rank()));
    }
    for (k, (given, own)) in shape.dims().iter().zip(ty.shape.dims()).enumerate() {
        if let (Dim::Known(_), Dim::Known(_)) = (given, own) {
            if given != own {
                return Err(format!("dimension {k} of the model's input {ty} is {own}"));
            }
        }
    }
    Ok(TensorType::new(ty.dtype, shape.clone()))
}

/// Whether a computed type is what the model declares: the same element type, rank
/// and known dimensions (a declared symbol matches anything).
fn agrees(declared: &TensorType, got: &TensorType) -> bool {
    declared.dtype == got.dtype
        && declared.rank() == got.rank()
        && declared.shape.dims().iter().zip(got.shape.dims()).all(|(d, g)| matches!(d, Dim::Sym(_)) || d == g)
}
