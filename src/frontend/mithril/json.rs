//! Parsing Mithril's model JSON into [`ModelNode`]s: structure only, with the JSON
//! path of every node kept for error messages. No Mithril semantics here.

use std::collections::HashSet;

use indexmap::IndexMap;
use serde_json::Value;

use crate::error::{Error, Result};

/// One model node of the file (section 2 of the format).
#[derive(Debug, Clone)]
pub struct ModelNode {
    /// JSON path, e.g. `submodels.m_0.submodels.m_3`; empty for the top level.
    pub path: String,
    /// Class name with an `Op` suffix of implicit operators removed (`IndexerOp` → `Indexer`).
    pub class: String,
    pub args: IndexMap<String, Value>,
    /// Children in the order of their ids (`m_0`, `m_1`, ...).
    pub submodels: Vec<(String, ModelNode)>,
    /// For each child id, how each of its keys is wired.
    pub connections: IndexMap<String, IndexMap<String, Conn>>,
    pub exposed_keys: Vec<String>,
    /// Whether the file lists `exposed_keys` at all (hand-written files may not).
    pub has_exposed_keys: bool,
    pub assigned_shapes: Vec<Vec<(KeyRef, Vec<TemplateDim>)>>,
    pub assigned_types: Vec<(KeyRef, Value)>,
    pub assigned_differentiabilities: Vec<(KeyRef, bool)>,
}

impl ModelNode {
    /// `submodels.m_3 (Linear)`, or `the top-level Linear`.
    pub fn describe(&self) -> String {
        describe(&self.path, &self.class)
    }

    pub fn is_composite(&self) -> bool {
        self.class == "Model"
    }
}

pub fn describe(path: &str, class: &str) -> String {
    if path.is_empty() {
        format!("top-level {class}")
    } else {
        format!("{path} ({class})")
    }
}

/// How one key of a child is wired in its parent (section 3).
#[derive(Debug, Clone)]
pub enum Conn {
    /// `{"key": {"name": n, "value"?: v}}`, or `{"key": {"connect": [...], "name"?: n}}`.
    Key { name: Option<String>, value: Option<Value>, connect: Vec<(String, String)> },
    /// A bare constant (number, bool, array, string, null) or `{"tensor": v}`.
    Const { value: Value, tensor: bool },
}

/// A reference to a key in `assigned_*` lists.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyRef {
    /// A named key of this node.
    Named(String),
    /// The `index`-th entry of child `m_i`'s external key order (`"self"` for this node).
    Child(String, usize),
}

/// One entry of an assigned shape.
#[derive(Debug, Clone, PartialEq)]
pub enum TemplateDim {
    Known(u64),
    /// A named symbolic dimension, shared within its group.
    Sym(String),
    /// A variadic run of dimensions (`"Var,..."`).
    Variadic(String),
    /// `null`: unknown.
    Any,
}

/// A whole file: a model, or a Mithril `TrainModel` (a model with losses).
#[derive(Debug, Clone)]
pub enum File {
    Model(ModelNode),
    Train(TrainNode),
}

/// `{"is_train_model": true, "model": node, "losses": [...], "regularizations": [...]}`.
#[derive(Debug, Clone)]
pub struct TrainNode {
    pub model: ModelNode,
    pub losses: Vec<LossNode>,
}

/// One entry of a TrainModel's `losses`: `{"model": node, "reduce_steps": [node, ...],
/// "args": {loss key: model key}, "coef"?: number}`.
#[derive(Debug, Clone)]
pub struct LossNode {
    pub model: ModelNode,
    /// Reductions applied in turn to the loss model's output (Mithril's default, when
    /// empty: one `Mean` over everything).
    pub reduce_steps: Vec<ModelNode>,
    /// The loss model's keys, each wired to a key of the model by name (a name the
    /// model lacks, such as `target`, becomes a new input).
    pub args: IndexMap<String, String>,
    pub coef: Option<f64>,
}

/// Parses the text of a model file. `file` names it in messages.
pub fn parse_file(text: &str, file: &str) -> Result<File> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        Error::user(format!(
            "{file}:{}:{}: malformed JSON: {}",
            e.line(),
            e.column(),
            strip_position(&e.to_string())
        ))
    })?;
    let parsed = if value.get("is_train_model").is_some() { parse_train(&value).map(File::Train) } else { parse_node(&value, "").map(File::Model) };
    parsed.map_err(|e| e.context(file))
}

fn parse_train(v: &Value) -> Result<TrainNode> {
    let model = parse_node(v.get("model").ok_or_else(|| field_err("", "model", "is missing: a TrainModel wraps a model"))?, "model")?;
    if let Some(regs) = v.get("regularizations").and_then(Value::as_array).filter(|r| !r.is_empty()) {
        return Err(field_err("", "regularizations", &format!("{} regularization(s): TrainModel regularizations are not supported yet", regs.len()))
            .note("add the penalty to the model as a loss instead, or remove it"));
    }
    let losses = match v.get("losses") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        _ => return Err(field_err("", "losses", "must be a non-empty array: a TrainModel needs at least one loss")),
    };
    let mut out = Vec::new();
    for (i, loss) in losses.iter().enumerate() {
        let at = format!("losses[{i}]");
        let node = parse_node(loss.get("model").ok_or_else(|| field_err(&at, "model", "is missing"))?, &format!("{at}.model"))?;
        let reduce_steps = match loss.get("reduce_steps") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(steps)) => {
                steps.iter().enumerate().map(|(j, st)| parse_node(st, &format!("{at}.reduce_steps[{j}]"))).collect::<Result<_>>()?
            }
            Some(_) => return Err(field_err(&at, "reduce_steps", "must be an array of model nodes")),
        };
        let mut args = IndexMap::new();
        if let Some(a) = loss.get("args") {
            let a = a.as_object().ok_or_else(|| field_err(&at, "args", "must be an object of key names"))?;
            for (k, name) in a {
                let name = name.as_str().ok_or_else(|| field_err(&at, &format!("args.{k}"), "must name a key of the model"))?;
                args.insert(k.clone(), name.to_string());
            }
        }
        let coef = match loss.get("coef") {
            None | Some(Value::Null) => None,
            Some(c) => Some(c.as_f64().ok_or_else(|| field_err(&at, "coef", "must be a number"))?),
        };
        out.push(LossNode { model: node, reduce_steps, args, coef });
    }
    Ok(TrainNode { model, losses: out })
}

/// Parses a model node given as a JSON value (a model-valued argument) at `path`.
pub fn parse_value(v: &Value, path: &str) -> Result<ModelNode> {
    parse_node(v, path)
}

/// serde_json appends " at line L column C"; the position is already in front.
fn strip_position(msg: &str) -> &str {
    match msg.rfind(" at line ") {
        Some(i) => &msg[..i],
        None => msg,
    }
}

fn field_err(path: &str, field: &str, what: &str) -> Error {
    let at = if path.is_empty() { field.to_string() } else { format!("{path}.{field}") };
    Error::user(format!("{at}: {what}"))
}

fn parse_node(v: &Value, path: &str) -> Result<ModelNode> {
    let obj = v.as_object().ok_or_else(|| {
        Error::user(format!("{}: a model node must be a JSON object", if path.is_empty() { "top level" } else { path }))
    })?;
    let raw_class = match obj.get("name") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(field_err(path, "name", "must be a string")),
        None => return Err(field_err(path, "name", "is missing: every model node names its class")),
    };
    let class = normalize_class(&raw_class);
    let args = match obj.get("args") {
        None | Some(Value::Null) => IndexMap::new(),
        Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        Some(_) => return Err(field_err(path, "args", "must be an object")),
    };
    let sub_path = |id: &str| if path.is_empty() { format!("submodels.{id}") } else { format!("{path}.submodels.{id}") };

    let mut submodels = Vec::new();
    if let Some(s) = obj.get("submodels") {
        let m = s.as_object().ok_or_else(|| field_err(path, "submodels", "must be an object"))?;
        for (id, child) in m {
            submodels.push((id.clone(), parse_node(child, &sub_path(id))?));
        }
        // Ids are m_<i>; their number is the order children were added.
        submodels.sort_by_key(|(id, _)| child_index(id).unwrap_or(usize::MAX));
    }
    let mut connections = IndexMap::new();
    if let Some(c) = obj.get("connections") {
        let m = c.as_object().ok_or_else(|| field_err(path, "connections", "must be an object"))?;
        for (id, keys) in m {
            let keys = keys
                .as_object()
                .ok_or_else(|| field_err(path, &format!("connections.{id}"), "must be an object"))?;
            let mut conns = IndexMap::new();
            for (key, conn) in keys {
                let at = format!("connections.{id}.{key}");
                conns.insert(key.clone(), parse_conn(conn).map_err(|what| field_err(path, &at, &what))?);
            }
            connections.insert(id.clone(), conns);
        }
    }
    if class == "Model" || !connections.is_empty() || !submodels.is_empty() {
        // A set: a model may have tens of thousands of children.
        let sub_ids: HashSet<&String> = submodels.iter().map(|(id, _)| id).collect();
        for id in connections.keys() {
            if !sub_ids.contains(&id) {
                return Err(field_err(
                    path,
                    &format!("connections.{id}"),
                    &format!("'connections' has key {id} that 'submodels' lacks (the two must list the same children)"),
                ));
            }
        }
        for (id, _) in &submodels {
            if !connections.contains_key(id) {
                return Err(field_err(
                    path,
                    &format!("submodels.{id}"),
                    &format!("'submodels' has key {id} that 'connections' lacks (the two must list the same children)"),
                ));
            }
        }
    }
    let exposed_keys = match obj.get("exposed_keys") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|k| k.as_str().map(str::to_string).ok_or_else(|| field_err(path, "exposed_keys", "must hold strings")))
            .collect::<Result<_>>()?,
        Some(_) => return Err(field_err(path, "exposed_keys", "must be an array")),
    };
    let list = |name: &str| -> Result<Vec<Value>> {
        match obj.get(name) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => Ok(a.clone()),
            Some(_) => Err(field_err(path, name, "must be an array")),
        }
    };
    let mut assigned_shapes = Vec::new();
    for (gi, group) in list("assigned_shapes")?.iter().enumerate() {
        let at = format!("assigned_shapes[{gi}]");
        let entries = group.as_array().ok_or_else(|| field_err(path, &at, "must be an array of [key, shape] pairs"))?;
        let mut out = Vec::new();
        for e in entries {
            let (key, shape) = pair(e).ok_or_else(|| field_err(path, &at, "entries must be [key, shape] pairs"))?;
            let key = parse_keyref(key).ok_or_else(|| field_err(path, &at, "bad key reference"))?;
            let shape = parse_template(shape).map_err(|w| field_err(path, &at, &w))?;
            out.push((key, shape));
        }
        assigned_shapes.push(out);
    }
    let mut assigned_types = Vec::new();
    for e in list("assigned_types")? {
        let (key, ty) = pair(&e).ok_or_else(|| field_err(path, "assigned_types", "entries must be [key, type] pairs"))?;
        let key = parse_keyref(key).ok_or_else(|| field_err(path, "assigned_types", "bad key reference"))?;
        assigned_types.push((key, ty.clone()));
    }
    let mut assigned_differentiabilities = Vec::new();
    for e in list("assigned_differentiabilities")? {
        let bad = || field_err(path, "assigned_differentiabilities", "entries must be [key, bool] pairs");
        let (key, d) = pair(&e).ok_or_else(bad)?;
        let key = parse_keyref(key).ok_or_else(bad)?;
        assigned_differentiabilities.push((key, d.as_bool().ok_or_else(bad)?));
    }
    Ok(ModelNode {
        path: path.to_string(),
        class,
        args,
        submodels,
        connections,
        exposed_keys,
        has_exposed_keys: obj.contains_key("exposed_keys"),
        assigned_shapes,
        assigned_types,
        assigned_differentiabilities,
    })
}

/// `IndexerOp` → `Indexer`: implicit operators are serialized under their operator
/// class, which has the same keys and formula as the model class without `Op`.
fn normalize_class(name: &str) -> String {
    match name.strip_suffix("Op") {
        Some(base) if super::library::known_classes().contains(&base) => base.to_string(),
        _ => name.to_string(),
    }
}

/// The number in `m_<i>`.
pub fn child_index(id: &str) -> Option<usize> {
    id.strip_prefix("m_")?.parse().ok()
}

fn pair(v: &Value) -> Option<(&Value, &Value)> {
    match v.as_array()?.as_slice() {
        [a, b] => Some((a, b)),
        _ => None,
    }
}

fn parse_keyref(v: &Value) -> Option<KeyRef> {
    match v {
        Value::String(s) => Some(KeyRef::Named(s.clone())),
        Value::Array(a) => match a.as_slice() {
            [Value::String(m), Value::Number(i)] => Some(KeyRef::Child(m.clone(), usize::try_from(i.as_u64()?).ok()?)),
            _ => None,
        },
        _ => None,
    }
}

fn parse_template(v: &Value) -> Result<Vec<TemplateDim>, String> {
    let a = v.as_array().ok_or("a shape must be an array")?;
    a.iter()
        .map(|d| match d {
            Value::Null => Ok(TemplateDim::Any),
            Value::Number(n) => n.as_u64().map(TemplateDim::Known).ok_or_else(|| format!("bad dimension {n}")),
            Value::String(s) => Ok(match s.strip_suffix(",...") {
                Some(name) => TemplateDim::Variadic(name.to_string()),
                None => TemplateDim::Sym(s.clone()),
            }),
            other => Err(format!("bad dimension {other}")),
        })
        .collect()
}

fn parse_conn(v: &Value) -> Result<Conn, String> {
    let obj = match v {
        Value::Object(o) => o,
        other => return Ok(Conn::Const { value: other.clone(), tensor: false }),
    };
    if let Some(t) = obj.get("tensor") {
        return Ok(Conn::Const { value: t.clone(), tensor: true });
    }
    let key = obj
        .get("key")
        .and_then(Value::as_object)
        .ok_or("a connection object must hold \"key\" or \"tensor\"")?;
    let name = match key.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("\"name\" must be a string".into()),
    };
    let mut connect = Vec::new();
    if let Some(c) = key.get("connect") {
        let list = c.as_array().ok_or("\"connect\" must be an array of [child, key] pairs")?;
        for item in list {
            match item.as_array().map(Vec::as_slice) {
                Some([Value::String(m), Value::String(k)]) => connect.push((m.clone(), k.clone())),
                _ => return Err("\"connect\" must be an array of [child, key] pairs".into()),
            }
        }
    }
    if name.is_none() && connect.is_empty() {
        return Err("a key connection needs \"name\" or \"connect\"".into());
    }
    let value = match key.get("value") {
        None => None,
        Some(Value::Object(t)) if t.contains_key("tensor") => t.get("tensor").cloned(),
        Some(v) => Some(v.clone()),
    };
    Ok(Conn::Key { name, value, connect })
}
