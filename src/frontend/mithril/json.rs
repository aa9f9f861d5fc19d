//! Parsing Mithril's model JSON into [`ModelNode`]s: structure only, with the JSON
//! path of every node kept for error messages. No Mithril semantics here.
//!
//! The file is parsed into [`Json`], serde_json's `Value` but for arrays of only
//! integers or only floats (the rows of a tensor constant), which keep their numbers
//! in a vector: a `Value` takes about 80 bytes per number, so a 24 MB constant would
//! take half a gigabyte as `Value`s. A node is taken apart by value, so a tensor
//! constant moves into its connection instead of being copied.

use std::collections::HashSet;
use std::fmt;

use indexmap::IndexMap;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};

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
    /// `{"key": {"name": n, "value"?: v}}`, or `{"key": {"connect": [...], "name"?: n}}`,
    /// with the IOKey fields `type` and `differentiable` that `dict_to_model` reads
    /// too; a bare string that is not a Constant or Dtype is `{"key": {"name": s}}`.
    Key { name: Option<String>, value: Option<Value>, connect: Vec<(String, String)>, differentiable: Option<bool>, ty: Option<Value> },
    /// A bare constant (number, bool, array, string, null).
    Const(Value),
    /// `{"tensor": v}`: `v` as parsed (its rows compact).
    Tensor(Json),
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
    pub regularizations: Vec<RegNode>,
}

/// One entry of a TrainModel's `regularizations`, as `train_model_to_dict` writes
/// `TrainModel.add_regularization`'s arguments: `{"model": node, "coef": number or
/// {"tensor": v}, "reg_key": key or null, "args": {reg key: model key or
/// {"pattern": regex}}}`.
#[derive(Debug, Clone)]
pub struct RegNode {
    pub model: ModelNode,
    /// The coefficient: a number, or a tensor constant.
    pub coef: Value,
    pub coef_is_tensor: bool,
    /// The regularizer's key that names what is regularized (default: its canonical input).
    pub reg_key: Option<String>,
    pub args: IndexMap<String, RegArg>,
}

/// What one key of a regularizer is wired to.
#[derive(Debug, Clone)]
pub enum RegArg {
    /// A key of the model, by name.
    Key(String),
    /// Every input key of the train model that the (Python `re.search`) pattern finds.
    Pattern(String),
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
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Json::deserialize(&mut de).and_then(|v| de.end().map(|()| v)).map_err(|e| {
        Error::user(format!(
            "{file}:{}:{}: malformed JSON: {}",
            e.line(),
            e.column(),
            strip_position(&e.to_string())
        ))
    })?;
    let parsed = if value.get("is_train_model").is_some() { parse_train(value).map(File::Train) } else { parse_node(value, "").map(File::Model) };
    parsed.map_err(|e| e.context(file))
}

fn parse_train(v: Json) -> Result<TrainNode> {
    let Json::Object(mut v) = v else { return Err(field_err("", "model", "is missing: a TrainModel wraps a model")) };
    let model = parse_node(v.swap_remove("model").ok_or_else(|| field_err("", "model", "is missing: a TrainModel wraps a model"))?, "model")?;
    let losses = match v.swap_remove("losses").and_then(Json::into_items) {
        Some(a) if !a.is_empty() => a,
        _ => return Err(field_err("", "losses", "must be a non-empty array: a TrainModel needs at least one loss")),
    };
    let mut out = Vec::new();
    for (i, loss) in losses.into_iter().enumerate() {
        let at = format!("losses[{i}]");
        let mut loss = match loss {
            Json::Object(o) => o,
            _ => Fields::default(),
        };
        let node = parse_node(loss.swap_remove("model").ok_or_else(|| field_err(&at, "model", "is missing"))?, &format!("{at}.model"))?;
        let reduce_steps = match loss.swap_remove("reduce_steps") {
            None | Some(Json::Null) => Vec::new(),
            Some(steps) => match steps.into_items() {
                Some(steps) => {
                    steps.into_iter().enumerate().map(|(j, st)| parse_node(st, &format!("{at}.reduce_steps[{j}]"))).collect::<Result<_>>()?
                }
                None => return Err(field_err(&at, "reduce_steps", "must be an array of model nodes")),
            },
        };
        let mut args = IndexMap::new();
        if let Some(a) = loss.get("args").map(Json::to_value) {
            let a = a.as_object().ok_or_else(|| field_err(&at, "args", "must be an object of key names"))?;
            for (k, name) in a {
                let name = name.as_str().ok_or_else(|| field_err(&at, &format!("args.{k}"), "must name a key of the model"))?;
                args.insert(k.clone(), name.to_string());
            }
        }
        let coef = match loss.get("coef").map(Json::to_value) {
            None | Some(Value::Null) => None,
            Some(c) => Some(c.as_f64().ok_or_else(|| field_err(&at, "coef", "must be a number"))?),
        };
        out.push(LossNode { model: node, reduce_steps, args, coef });
    }
    let regularizations = match v.swap_remove("regularizations") {
        None | Some(Json::Null) => Vec::new(),
        Some(regs) => regs.into_items().ok_or_else(|| field_err("", "regularizations", "must be an array"))?,
    };
    let regularizations = regularizations.into_iter().enumerate().map(|(i, r)| parse_reg(r, &format!("regularizations[{i}]"))).collect::<Result<_>>()?;
    Ok(TrainNode { model, losses: out, regularizations })
}

fn parse_reg(r: Json, at: &str) -> Result<RegNode> {
    let Json::Object(mut r) = r else { return Err(Error::user(format!("{at}: a regularization must be an object"))) };
    let model = parse_node(r.swap_remove("model").ok_or_else(|| field_err(at, "model", "is missing"))?, &format!("{at}.model"))?;
    let (coef, coef_is_tensor) = match r.get("coef").map(Json::to_value) {
        None | Some(Value::Null) => return Err(field_err(at, "coef", "is missing: a regularization needs a coefficient")),
        Some(Value::Object(t)) => (t.get("tensor").cloned().ok_or_else(|| field_err(at, "coef", "must be a number or {\"tensor\": value}"))?, true),
        Some(c) if c.is_number() => (c, false),
        Some(c) => return Err(field_err(at, "coef", &format!("must be a number or {{\"tensor\": value}}, got {c}"))),
    };
    let reg_key = match r.get("reg_key").map(Json::to_value) {
        None | Some(Value::Null) => None,
        Some(Value::String(k)) => Some(k),
        Some(k) => return Err(field_err(at, "reg_key", &format!("must name a key of the regularizer, got {k}"))),
    };
    let mut args = IndexMap::new();
    if let Some(a) = r.get("args").map(Json::to_value) {
        let a = a.as_object().ok_or_else(|| field_err(at, "args", "must be an object"))?;
        for (k, v) in a {
            let arg = match v {
                Value::String(name) => RegArg::Key(name.clone()),
                Value::Object(p) => match p.get("pattern") {
                    Some(Value::String(pat)) => RegArg::Pattern(pat.clone()),
                    _ => return Err(field_err(at, &format!("args.{k}"), "must be a key name or {\"pattern\": regex}")),
                },
                other => return Err(field_err(at, &format!("args.{k}"), &format!("must be a key name or {{\"pattern\": regex}}, got {other}"))),
            };
            args.insert(k.clone(), arg);
        }
    }
    Ok(RegNode { model, coef, coef_is_tensor, reg_key, args })
}

/// Parses a model node given as a JSON value (a model-valued argument) at `path`.
pub fn parse_value(v: &Value, path: &str) -> Result<ModelNode> {
    parse_node(Json::from_value(v.clone()), path)
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

fn parse_node(v: Json, path: &str) -> Result<ModelNode> {
    // dict_to_model takes a bare class name for a model with no arguments.
    let v = match v {
        Json::String(name) => Json::Object(Fields(vec![("name".to_string(), Json::String(name))])),
        other => other,
    };
    let Json::Object(mut obj) = v else {
        return Err(Error::user(format!("{}: a model node must be a JSON object", if path.is_empty() { "top level" } else { path })));
    };
    let raw_class = match obj.get("name") {
        Some(Json::String(s)) => s.clone(),
        Some(_) => return Err(field_err(path, "name", "must be a string")),
        None => return Err(field_err(path, "name", "is missing: every model node names its class")),
    };
    let class = normalize_class(&raw_class);
    let args = match obj.get("args") {
        None | Some(Json::Null) => IndexMap::new(),
        Some(Json::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v.to_value())).collect(),
        Some(_) => return Err(field_err(path, "args", "must be an object")),
    };
    let sub_path = |id: &str| if path.is_empty() { format!("submodels.{id}") } else { format!("{path}.submodels.{id}") };

    let mut submodels = Vec::new();
    if let Some(s) = obj.swap_remove("submodels") {
        let Json::Object(m) = s else { return Err(field_err(path, "submodels", "must be an object")) };
        for (id, child) in m {
            let child = parse_node(child, &sub_path(&id))?;
            submodels.push((id, child));
        }
        // dict_to_model adds the children in the file's order, whatever their ids
        // (`m_0`, `m1`, `encoder`...).
    }
    // dict_to_model leaves out a bare-string connection listed in `unnamed_keys`.
    let unnamed: Vec<String> = match obj.get("unnamed_keys").map(Json::to_value) {
        Some(Value::Array(a)) => a.into_iter().filter_map(|k| k.as_str().map(str::to_string)).collect(),
        _ => Vec::new(),
    };
    let mut connections = IndexMap::new();
    if let Some(c) = obj.swap_remove("connections") {
        let Json::Object(m) = c else { return Err(field_err(path, "connections", "must be an object")) };
        for (id, keys) in m {
            let Json::Object(keys) = keys else { return Err(field_err(path, &format!("connections.{id}"), "must be an object")) };
            let mut conns = IndexMap::new();
            for (key, conn) in keys {
                if matches!(&conn, Json::String(n) if unnamed.contains(n)) {
                    continue;
                }
                let at = format!("connections.{id}.{key}");
                let conn = parse_conn(conn).map_err(|what| field_err(path, &at, &what))?;
                conns.insert(key, conn);
            }
            connections.insert(id, conns);
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
    let obj: IndexMap<&str, Value> = obj.iter().map(|(k, v)| (k.as_str(), v.to_value())).collect();
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

/// The class a name stands for. dict_to_model looks classes up by `name.lower()`,
/// so `linear` is `Linear`; `IndexerOp` → `Indexer`: implicit operators are
/// serialized under their operator class, which has the same keys and formula as the
/// model class without `Op`. Other names are kept (and reported as unknown).
fn normalize_class(name: &str) -> String {
    use super::library::{known_classes, MITHRIL_UNSUPPORTED};
    let known = known_classes();
    if known.contains(&name) {
        return name.to_string();
    }
    let lower = name.to_lowercase();
    let find = |n: &str| known.iter().copied().chain(MITHRIL_UNSUPPORTED.iter().map(|(c, _)| *c)).find(|c| c.to_lowercase() == n);
    match find(&lower).or_else(|| lower.strip_suffix("op").and_then(find)) {
        Some(class) => class.to_string(),
        None => name.to_string(),
    }
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

fn parse_conn(v: Json) -> Result<Conn, String> {
    let mut obj = match v {
        Json::Object(o) => o,
        // dict_to_model passes a string on as a key name unless it names a Constant
        // (`Constant.EPSILON`) or a Dtype (its `str`, the digit of its value).
        Json::String(s) if !is_constant_name(&s) => return Ok(Conn::Key { name: Some(s), value: None, connect: Vec::new(), differentiable: None, ty: None }),
        other => return Ok(Conn::Const(other.to_value())),
    };
    if let Some(t) = obj.swap_remove("tensor") {
        return Ok(Conn::Tensor(t));
    }
    let obj: IndexMap<&str, Value> = obj.iter().map(|(k, v)| (k.as_str(), v.to_value())).collect();
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
    let differentiable = match key.get("differentiable") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err("\"differentiable\" must be true, false or null".into()),
    };
    let ty = key.get("type").filter(|t| !t.is_null()).cloned();
    Ok(Conn::Key { name, value, connect, differentiable, ty })
}

/// Strings `dict_to_model` reads as values (its `value_dict`): `str()` of a Constant
/// or of a Dtype (an IntEnum, whose `str` is its number).
fn is_constant_name(s: &str) -> bool {
    s.starts_with("Constant.") || s.starts_with("<Constant.") || matches!(s.as_bytes(), [b'0'..=b'9'])
}

/// A parsed JSON value: serde_json's `Value`, except that an array of only integers
/// (that fit i64) or only floats is kept as a vector of them (see the module
/// documentation). [`Json::to_value`] gives the `Value` the text would have parsed to.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    /// An array of anything else, or an empty one.
    Array(Vec<Json>),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    Object(Fields),
}

/// An object's fields in file order, each key once (a later duplicate's value replaces
/// the first's, as serde_json's map does). A vector, not a map: a node has about ten
/// fields, looked up by name a few times, and a model has tens of thousands of nodes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Fields(Vec<(String, Json)>);

impl Fields {
    /// From fields as written, duplicates included.
    fn from_written(mut fields: Vec<(String, Json)>) -> Fields {
        let unique = if fields.len() <= 16 {
            fields.iter().enumerate().all(|(i, (k, _))| fields[..i].iter().all(|(e, _)| e != k))
        } else {
            let mut seen = std::collections::HashSet::with_capacity(fields.len());
            fields.iter().all(|(k, _)| seen.insert(k.as_str()))
        };
        if !unique {
            let mut first: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
            let mut out: Vec<(String, Json)> = Vec::new();
            for (k, v) in fields {
                match first.get(&k) {
                    Some(&i) => out[i].1 = v,
                    None => {
                        first.insert(k.clone(), out.len());
                        out.push((k, v));
                    }
                }
            }
            fields = out;
        }
        fields.shrink_to_fit();
        Fields(fields)
    }

    pub fn get(&self, key: &str) -> Option<&Json> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Takes the field out (the others' order may change).
    pub fn swap_remove(&mut self, key: &str) -> Option<Json> {
        let i = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.swap_remove(i).1)
    }

    pub fn iter(&self) -> std::slice::Iter<'_, (String, Json)> {
        self.0.iter()
    }
}

impl IntoIterator for Fields {
    type Item = (String, Json);
    type IntoIter = std::vec::IntoIter<(String, Json)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl Json {
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(m) => m.get(key),
            _ => None,
        }
    }

    /// The items of an array, whatever its kind.
    pub fn into_items(self) -> Option<Vec<Json>> {
        match self {
            Json::Array(items) => Some(items),
            Json::Ints(v) => Some(v.into_iter().map(|i| Json::Number(i.into())).collect()),
            Json::Floats(v) => Some(v.into_iter().map(float).collect()),
            Json::Null | Json::Bool(_) | Json::Number(_) | Json::String(_) | Json::Object(_) => None,
        }
    }

    pub fn to_value(&self) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => Value::Number(n.clone()),
            Json::String(s) => Value::String(s.clone()),
            Json::Array(items) => Value::Array(items.iter().map(Json::to_value).collect()),
            Json::Ints(v) => Value::Array(v.iter().map(|&i| Value::Number(i.into())).collect()),
            Json::Floats(v) => Value::Array(v.iter().map(|&x| float(x).to_value()).collect()),
            Json::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), v.to_value())).collect()),
        }
    }

    pub fn from_value(v: Value) -> Json {
        match v {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(b),
            Value::Number(n) => Json::Number(n),
            Value::String(s) => Json::String(s),
            Value::Array(items) => Json::Array(items.into_iter().map(Json::from_value).collect()),
            Value::Object(m) => Json::Object(Fields(m.into_iter().map(|(k, v)| (k, Json::from_value(v))).collect())),
        }
    }
}

/// A float as serde_json holds it (JSON text has no NaN or infinity).
fn float(x: f64) -> Json {
    Number::from_f64(x).map_or(Json::Null, Json::Number)
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

/// Builds [`Json`] as serde_json's own visitor builds `Value`.
struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> std::result::Result<Json, E> {
        Ok(Json::Bool(b))
    }

    fn visit_i64<E>(self, i: i64) -> std::result::Result<Json, E> {
        Ok(Json::Number(i.into()))
    }

    fn visit_u64<E>(self, u: u64) -> std::result::Result<Json, E> {
        Ok(Json::Number(u.into()))
    }

    fn visit_f64<E>(self, x: f64) -> std::result::Result<Json, E> {
        Ok(float(x))
    }

    fn visit_str<E>(self, s: &str) -> std::result::Result<Json, E> {
        Ok(Json::String(s.to_string()))
    }

    fn visit_string<E>(self, s: String) -> std::result::Result<Json, E> {
        Ok(Json::String(s))
    }

    fn visit_none<E>(self) -> std::result::Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_unit<E>(self) -> std::result::Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Json, D::Error> {
        Json::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Json, A::Error> {
        let mut items = Items::Empty;
        while let Some(item) = seq.next_element::<Json>()? {
            items.push(item);
        }
        Ok(items.finish())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Json, A::Error> {
        let mut fields = Vec::new();
        while let Some(field) = map.next_entry::<String, Json>()? {
            fields.push(field);
        }
        Ok(Json::Object(Fields::from_written(fields)))
    }
}

/// An array being parsed: compact while its items are all integers or all floats.
enum Items {
    Empty,
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    Mixed(Vec<Json>),
}

impl Items {
    fn push(&mut self, item: Json) {
        let (int, float) = match &item {
            Json::Number(n) if n.is_f64() => (None, n.as_f64()),
            Json::Number(n) => (n.as_i64(), None),
            _ => (None, None),
        };
        match (&mut *self, int, float) {
            (Items::Empty, Some(i), _) => *self = Items::Ints(vec![i]),
            (Items::Empty, _, Some(x)) => *self = Items::Floats(vec![x]),
            (Items::Ints(v), Some(i), _) => v.push(i),
            (Items::Floats(v), _, Some(x)) => v.push(x),
            (Items::Mixed(v), _, _) => v.push(item),
            (Items::Empty | Items::Ints(_) | Items::Floats(_), _, _) => {
                let mut v = std::mem::replace(self, Items::Empty).finish().into_items().unwrap_or_default();
                v.push(item);
                *self = Items::Mixed(v);
            }
        }
    }

    fn finish(self) -> Json {
        match self {
            Items::Empty => Json::Array(Vec::new()),
            Items::Ints(v) => Json::Ints(v),
            Items::Floats(v) => Json::Floats(v),
            Items::Mixed(v) => Json::Array(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_of_one_kind_of_number_are_compact_and_read_back_the_same() {
        let text = r#"{"a": [1, -2, 3], "b": [0.5, 1e30], "c": [1, 2.5], "d": [18446744073709551615, 1],
                       "e": [], "f": [[1.5], [true, null, "x"]], "g": {"h": 7, "i": 8, "h": 9}}"#;
        let json: Json = serde_json::from_str(text).unwrap();
        assert!(matches!(json.get("a"), Some(Json::Ints(v)) if v == &[1, -2, 3]));
        assert!(matches!(json.get("b"), Some(Json::Floats(v)) if v == &[0.5, 1e30]));
        assert!(matches!(json.get("c"), Some(Json::Array(_))));
        assert!(matches!(json.get("d"), Some(Json::Array(_))));
        let value: Value = serde_json::from_str(text).unwrap();
        // (as text, so the order of fields counts: a repeated key keeps its first place)
        assert_eq!(json.to_value().to_string(), value.to_string());
        assert_eq!(Json::from_value(value.clone()).to_value().to_string(), value.to_string());
    }
}
