//! From the logical graph to the IR: names the model's inputs as Mithril does,
//! resolves their shapes (command line, data files, shape templates), folds
//! compile-time values (shapes, axes, paddings, slices) and emits one or a few IR ops
//! per primitive, checking shapes as it goes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde_json::Value;

use super::json::{self, ModelNode, TemplateDim};
use super::library::{self, Formula};
use super::net::{Instance, Net, PNode, SlotId};
use super::value::Static;
use crate::error::{Error, Result};
use crate::ir::*;
use crate::passes::shape;
use crate::tensor::Tensor;

/// What the caller knows beyond the model file.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Shapes given on the command line (`--shape NAME=D0,D1`), by input name.
    pub shapes: BTreeMap<String, Shape>,
    /// Types of inputs and parameters known from data files, by name.
    pub known_types: BTreeMap<String, TensorType>,
    /// Constructor values Mithril did not write to the JSON (`--set PATH.KEY=VALUE`):
    /// `(PATH.KEY, value)`.
    pub set: Vec<(String, Value)>,
    /// Inputs that are data even if the file marks them differentiable (Mithril's
    /// `ml.compile(data_keys=...)`).
    pub data_keys: BTreeSet<String>,
}

/// Reads and compiles a model file.
pub fn load(path: &Path, opts: &Options) -> Result<Graph> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::user(format!("cannot read {file}: {}", crate::error::io_message(&e))))?;
    let name = path.file_stem().map_or("model".to_string(), |s| s.to_string_lossy().into_owned());
    load_str(&text, &file, &name, opts)
}

/// Compiles the text of a model file; `file` names it in messages.
pub fn load_str(text: &str, file: &str, name: &str, opts: &Options) -> Result<Graph> {
    let mut root = json::parse_file(text, file)?;
    (|| {
        apply_set(&mut root, &opts.set)?;
        let mut net = Net::default();
        let inst = net.instantiate(&root, 0)?;
        check_supported(&net)?;
        Emitter::new(&net, opts, name).run(&root, &inst)
    })()
    .map_err(|e| e.context(file))
}

/// Applies `--set PATH.KEY=VALUE` to the constructor args of the node at PATH.
fn apply_set(root: &mut ModelNode, set: &[(String, Value)]) -> Result<()> {
    for (target, value) in set {
        let (path, key) = match target.rsplit_once('.') {
            Some((p, k)) => (p, k),
            None => ("", target.as_str()),
        };
        let mut node = &mut *root;
        let mut rest = path;
        while !rest.is_empty() {
            let (head, tail) = rest.split_once('.').unwrap_or((rest, ""));
            let id = if head == "submodels" {
                let (id, t) = tail.split_once('.').unwrap_or((tail, ""));
                rest = t;
                id
            } else {
                rest = tail;
                head
            };
            let found = node.submodels.iter_mut().find(|(i, _)| i == id);
            node = match found {
                Some((_, child)) => child,
                None => return Err(Error::user(format!("--set {target}: there is no model node at `{path}`"))),
            };
        }
        // Only a key the node has: a constructor argument, or a valued input key.
        let known = node.args.contains_key(key)
            || node.exposed_keys.iter().any(|k| k == key)
            || library::primitive(&node.class).is_some_and(|p| p.inputs.contains(&key));
        if !known {
            let mut keys: Vec<&str> = node.args.keys().map(String::as_str).collect();
            keys.extend(node.exposed_keys.iter().map(String::as_str).filter(|k| *k != "output" && !k.starts_with('$')));
            keys.sort();
            keys.dedup();
            return Err(Error::user(format!(
                "--set {target}: {} has no argument `{key}` (it has: {})",
                node.describe(),
                if keys.is_empty() { "none".to_string() } else { keys.join(", ") }
            )));
        }
        node.args.insert(key.to_string(), value.clone());
    }
    Ok(())
}

/// Every class the file uses that cannot be expanded, in one error.
fn check_supported(net: &Net) -> Result<()> {
    if net.unsupported.is_empty() {
        return Ok(());
    }
    let known = library::known_classes();
    let mut lines = Vec::new();
    for (at, class) in &net.unsupported {
        if library::MITHRIL_UNSUPPORTED.contains(&class.as_str()) {
            lines.push(format!("{at}: Mithril's {class} is not supported yet"));
        } else {
            let mut line = format!("{at}: unknown model class '{class}'");
            let close = closest(class, &known);
            if let Some((last, rest)) = close.split_last() {
                let alternatives = if rest.is_empty() { last.clone() } else { format!("{} or {last}", rest.join(", ")) };
                line.push_str(&format!(" (did you mean {alternatives}?)"));
            }
            lines.push(line);
        }
    }
    let head = if lines.len() == 1 { lines.remove(0) } else { format!("{} model classes cannot be compiled:\n  {}", lines.len(), lines.join("\n  ")) };
    Err(Error::user(head).note("a user-defined Model subclass is written under its class name and cannot be rebuilt without its Python code"))
}

/// Known names within a small edit distance of `name`.
fn closest(name: &str, known: &[&str]) -> Vec<String> {
    let lower = name.to_lowercase();
    let mut scored: Vec<(usize, &str)> = known.iter().map(|k| (edit_distance(&lower, &k.to_lowercase()), *k)).collect();
    scored.sort();
    let limit = (name.len() / 3).max(2);
    scored.into_iter().filter(|(d, _)| *d <= limit).take(3).map(|(_, k)| format!("'{k}'")).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let sub = prev[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            cur[j] = sub.min(prev[j] + 1).min(cur[j - 1] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// A value during emission: compile-time, a tensor of the IR, or a sequence (a list of
/// tensors from `to_list`/`split`, or a tuple mixing sizes).
#[derive(Debug, Clone)]
enum Val {
    S(Static),
    T(ValueId),
    Seq(Vec<Val>, bool),
}

struct Emitter<'a> {
    net: &'a Net,
    opts: &'a Options,
    graph: Graph,
    vals: HashMap<SlotId, Val>,
    /// Names of the model's inputs (slot root → physical name).
    input_names: BTreeMap<SlotId, String>,
    /// The primitive being emitted, and its inputs (for messages).
    origin: String,
    current: Vec<(String, Val)>,
    /// Inputs whose shapes are being resolved from templates (breaks cycles).
    resolving: BTreeSet<SlotId>,
    /// Why a related input could not be created while resolving templates: when an
    /// input's shape cannot be found, this is the error worth reporting.
    root_cause: Option<Error>,
}

impl<'a> Emitter<'a> {
    fn new(net: &'a Net, opts: &'a Options, name: &str) -> Emitter<'a> {
        Emitter {
            net,
            opts,
            graph: Graph::new(name),
            vals: HashMap::new(),
            input_names: BTreeMap::new(),
            origin: String::new(),
            current: Vec::new(),
            resolving: BTreeSet::new(),
            root_cause: None,
        }
    }

    fn run(mut self, root: &ModelNode, inst: &Instance) -> Result<Graph> {
        let outputs = self.outputs(root, inst)?;
        self.name_inputs(inst);
        let order = self.order(&outputs)?;
        for n in order {
            self.emit_node(&self.net.nodes[n])?;
        }
        for (name, slot) in &outputs {
            let v = self.value(*slot)?;
            let id = self.tensor(&v, None).map_err(|e| e.context(format!("output `{name}`")))?;
            self.graph.outputs.push(Output { name: name.clone(), value: id });
        }
        self.check_templates()?;
        Ok(self.graph)
    }

    /// The model's outputs: named top-level keys that some primitive produces and
    /// nothing consumes, or that the file exposes (`ml.compile`'s rule).
    fn outputs(&self, root: &ModelNode, inst: &Instance) -> Result<Vec<(String, SlotId)>> {
        let consumed: BTreeSet<SlotId> =
            self.net.nodes.iter().flat_map(|n| n.inputs.iter().map(|(_, s)| self.net.find(*s))).collect();
        let mut outs = Vec::new();
        for (key, &slot) in &inst.keys {
            let r = self.net.find(slot);
            if key.starts_with('$') || self.net.slot(r).producer.is_none() {
                continue;
            }
            let exposed = root.exposed_keys.iter().any(|k| k == key);
            if exposed || !consumed.contains(&r) || !root.is_composite() && key == "output" {
                outs.push((key.clone(), r));
            }
        }
        if outs.is_empty() {
            return Err(Error::user(format!(
                "{} has no outputs: no named key is produced and left unconsumed",
                root.describe()
            ))
            .note("name the output key in the parent's connections, e.g. \"output\": {\"key\": {\"name\": \"output\"}}"));
        }
        Ok(outs)
    }

    /// Mithril's physical names: a key named at the top level keeps its name; other
    /// inputs take the name of the key they came from, numbered `_0, _1, ...` in order
    /// of appearance when that name occurs more than once.
    fn name_inputs(&mut self, inst: &Instance) {
        let net = self.net;
        let mut candidates: Vec<SlotId> = net
            .nodes
            .iter()
            .flat_map(|n| n.inputs.iter().map(|(_, s)| net.find(*s)))
            .filter(|&s| {
                let slot = net.slot(s);
                slot.producer.is_none() && slot.value.is_none() && slot.lost.is_none()
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        candidates.sort_by_key(|&s| net.slot(s).seq);
        let top: BTreeSet<SlotId> = inst.keys.values().map(|&s| net.find(s)).collect();
        let base = |s: SlotId| net.slot(s).base_name.clone().map_or("input".to_string(), |(n, _)| n);
        let mut taken: BTreeSet<String> = candidates.iter().filter(|s| top.contains(s)).map(|&s| base(s)).collect();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for &s in &candidates {
            *counts.entry(base(s)).or_default() += 1;
        }
        let mut next: BTreeMap<String, usize> = BTreeMap::new();
        for &s in &candidates {
            let b = base(s);
            let name = if top.contains(&s) {
                b
            } else if counts[&b] == 1 && !taken.contains(&b) {
                b
            } else {
                loop {
                    let k = next.entry(b.clone()).or_default();
                    let candidate = format!("{b}_{k}");
                    *k += 1;
                    if !taken.contains(&candidate) {
                        break candidate;
                    }
                }
            };
            taken.insert(name.clone());
            self.input_names.insert(s, name);
        }
    }

    /// Primitives needed for the outputs, in an order where every input comes first:
    /// depth-first from the outputs, inputs in key order (data before weights, so a
    /// weight's shape template can use its input's shape).
    fn order(&self, outputs: &[(String, SlotId)]) -> Result<Vec<usize>> {
        let net = self.net;
        let mut state: HashMap<usize, bool> = HashMap::new(); // false: in progress
        let mut order = Vec::new();
        let mut stack: Vec<(usize, usize)> = Vec::new();
        for (_, out) in outputs {
            let Some(p) = net.slot(*out).producer else { continue };
            if state.contains_key(&p) {
                continue;
            }
            state.insert(p, false);
            stack.push((p, 0));
            while let Some((n, i)) = stack.pop() {
                let node = &net.nodes[n];
                if i < node.inputs.len() {
                    stack.push((n, i + 1));
                    let s = node.inputs[i].1;
                    if net.slot(s).value.is_some() {
                        continue;
                    }
                    if let Some(p) = net.slot(s).producer {
                        match state.get(&p) {
                            None => {
                                state.insert(p, false);
                                stack.push((p, 0));
                            }
                            Some(false) => {
                                return Err(Error::user(format!("{}: the model has a cycle through this node", net.nodes[p].origin)))
                            }
                            Some(true) => {}
                        }
                    }
                } else {
                    state.insert(n, true);
                    order.push(n);
                }
            }
        }
        Ok(order)
    }

    /// The value of a slot, creating the model input it stands for if need be.
    fn value(&mut self, slot: SlotId) -> Result<Val> {
        let r = self.net.find(slot);
        if let Some(v) = self.vals.get(&r) {
            return Ok(v.clone());
        }
        let s = self.net.slot(r);
        if let Some((v, _)) = &s.value {
            return Ok(Val::S(v.clone()));
        }
        if let Some(lost) = &s.lost {
            return Err(Error::user(lost.clone()));
        }
        if s.producer.is_some() {
            return Err(Error::internal(format!("slot {r} used before its producer was emitted")));
        }
        let id = self.create_input(r)?;
        self.vals.insert(r, Val::T(id));
        self.check_templates_of(r).map_err(|e| {
            let name = self.input_names.get(&r).cloned().unwrap_or_default();
            match (self.opts.shapes.contains_key(&name), self.opts.known_types.contains_key(&name)) {
                (true, _) => e.note(format!("the shape of `{name}` was given with --shape")),
                (false, true) => e.note(format!("the shape of `{name}` comes from the data")),
                (false, false) => e,
            }
        })?;
        Ok(Val::T(id))
    }

    fn create_input(&mut self, r: SlotId) -> Result<ValueId> {
        let name = self.input_names.get(&r).cloned().ok_or_else(|| Error::internal(format!("input slot {r} has no name")))?;
        let slot = self.net.slot(r);
        let known = self.opts.known_types.get(&name);
        let shape = match (self.opts.shapes.get(&name), known) {
            (Some(cli), Some(k)) if *cli != k.shape && !binds_to(cli, &k.shape) => {
                let dims: Vec<String> = cli.0.iter().map(|d| d.to_string()).collect();
                return Err(Error::user(format!(
                    "--shape {name}={} contradicts the data, where `{name}` has shape {}",
                    dims.join(","),
                    k.shape
                )));
            }
            (Some(_), Some(k)) => k.shape.clone(),
            (Some(cli), _) => cli.clone(),
            (None, Some(k)) => k.shape.clone(),
            (None, None) => self.template_shape(r).ok_or_else(|| {
                if let Err(e) = self.check_templates_of(r) {
                    return e;
                }
                if let Some(cause) = self.root_cause.take() {
                    return cause;
                }
                let user = self.net.nodes.iter().find(|n| n.inputs.iter().any(|(_, s)| self.net.find(*s) == r));
                Error::user(format!(
                    "the shape of input `{name}`{} is unknown",
                    user.map_or(String::new(), |u| format!(" (used by {})", u.origin))
                ))
                .note(format!("give it with --shape {name}=D0,D1,... (a dimension may be a symbol, e.g. B), or in a data file"))
            })?,
        };
        let dtype = known.map(|k| k.dtype).or(slot.dtype).unwrap_or(Dtype::F32);
        let trainable = slot.differentiable == Some(true) && !self.opts.data_keys.contains(&name);
        let op = if trainable { Op::Param } else { Op::Input };
        let id = self.graph.push(op, vec![], TensorType::new(dtype, shape));
        self.graph.nodes[id.index()].name = Some(name);
        Ok(id)
    }

    /// The shape of an input implied by the templates it appears in, from the shapes
    /// of the other values in them. Other model inputs of those templates are created
    /// first (their shapes may be known), so `Linear`'s weight can follow its input.
    fn template_shape(&mut self, r: SlotId) -> Option<Shape> {
        if !self.resolving.insert(r) {
            return None;
        }
        let net = self.net;
        let mut found = None;
        for t in &net.templates {
            let Some((_, mine)) = t.entries.iter().find(|(s, _)| net.find(*s) == r) else { continue };
            for (s, _) in &t.entries {
                let o = net.find(*s);
                let slot = net.slot(o);
                let is_input = slot.producer.is_none() && slot.value.is_none() && slot.lost.is_none();
                if o != r && is_input && !self.vals.contains_key(&o) && !self.resolving.contains(&o) {
                    if let Err(e) = self.value(o) {
                        self.root_cause.get_or_insert(e);
                    }
                }
            }
            let mut b = Bindings::default();
            let consistent = t.entries.iter().all(|(s, dims)| match self.known_shape(*s) {
                Some(shape) => b.bind(dims, &shape).is_ok(),
                None => true,
            });
            if consistent {
                if let Some(shape) = b.instantiate(mine, t.user) {
                    found = Some(shape);
                    break;
                }
            }
        }
        self.resolving.remove(&r);
        found
    }

    fn known_shape(&self, s: SlotId) -> Option<Shape> {
        match self.vals.get(&self.net.find(s)) {
            Some(Val::T(id)) => Some(self.graph.ty(*id).shape.clone()),
            _ => None,
        }
    }

    /// Every template group must hold of the shapes the model ended up with.
    fn check_templates(&self) -> Result<()> {
        self.net.templates.iter().try_for_each(|t| self.check_template(t))
    }

    /// Checks one template group against the shapes known so far.
    fn check_template(&self, t: &super::net::Template) -> Result<()> {
        let mut b = Bindings::default();
        for (s, dims) in &t.entries {
            let Some(shape) = self.known_shape(*s) else { continue };
            if let Err(why) = b.bind(dims, &shape) {
                let name = self.slot_label(*s);
                return Err(Error::user(format!(
                    "{}: `{name}` has shape {shape}, which does not match {}{why}",
                    t.origin,
                    template_text(dims)
                )));
            }
        }
        Ok(())
    }

    /// Checks the templates that mention slot `r` (a new input), so a wrong shape is
    /// reported against the model node that requires it.
    fn check_templates_of(&self, r: SlotId) -> Result<()> {
        self.net
            .templates
            .iter()
            .filter(|t| t.entries.iter().any(|(s, _)| self.net.find(*s) == r))
            .try_for_each(|t| self.check_template(t))
    }

    fn slot_label(&self, s: SlotId) -> String {
        let r = self.net.find(s);
        if let Some(n) = self.input_names.get(&r) {
            return n.clone();
        }
        self.net.slot(r).base_name.clone().map_or(format!("${r}"), |(n, _)| n)
    }

    // ---- emission -------------------------------------------------------------

    fn emit_node(&mut self, node: &PNode) -> Result<()> {
        self.origin = node.origin.clone();
        let mut ins: Vec<(String, Val)> = Vec::new();
        for (k, s) in &node.inputs {
            ins.push((k.clone(), self.value(*s)?));
        }
        self.current = ins.clone();
        let out = self.formula(node, &ins).map_err(|e| {
            if e.message.starts_with(&node.origin) || e.kind != crate::ErrorKind::User {
                e
            } else {
                e.context(&node.origin)
            }
        })?;
        if let Val::T(id) = out {
            let n = &mut self.graph.nodes[id.index()];
            if n.name.is_none() && !matches!(n.op, Op::Input | Op::Param) {
                if let Some((name, depth)) = &self.net.slot(node.output).base_name {
                    if *depth == 0 {
                        n.name = Some(name.clone());
                    }
                }
            }
        }
        self.vals.insert(self.net.find(node.output), out);
        Ok(())
    }

    /// Pushes an IR op, inferring its type; shape errors name the operands.
    fn op(&mut self, op: Op, args: Vec<ValueId>) -> Result<ValueId> {
        let tys: Vec<&TensorType> = args.iter().map(|a| self.graph.ty(*a)).collect();
        let ty = shape::infer(&op, &tys, &TensorType::new(Dtype::F32, Shape::scalar()), &self.graph.consts).map_err(|msg| {
            let operands: Vec<String> = args.iter().map(|a| self.describe_value(*a)).collect();
            Error::user(msg).note(format!("{} of {}", op.name(), operands.join(" and ")))
        })?;
        let id = self.graph.push(op, args, ty);
        self.graph.nodes[id.index()].origin = Some(self.origin.clone());
        Ok(id)
    }

    /// `left = `x` f32[3, 4]`: the primitive's key (when the value is one of its
    /// inputs), the value's name, and its type.
    fn describe_value(&self, v: ValueId) -> String {
        let n = self.graph.node(v);
        let key = self.current.iter().find(|(_, val)| matches!(val, Val::T(id) if *id == v)).map(|(k, _)| k);
        let what = match &n.name {
            Some(name) => format!("`{name}` {}", n.ty),
            None => format!("{}", n.ty),
        };
        match key {
            Some(k) => format!("{k} = {what}"),
            None => what,
        }
    }

    fn constant(&mut self, t: Tensor) -> ValueId {
        let id = self.graph.add_const(t);
        self.graph.nodes[id.index()].origin = Some(self.origin.clone());
        id
    }

    fn scalar(&mut self, dtype: Dtype, x: f64) -> ValueId {
        self.constant(Tensor::scalar(dtype, x))
    }

    /// A tensor operand. A compile-time scalar takes `like`'s dtype when given
    /// (NumPy's weak Python scalars), else f32 for floats and i32 for ints.
    fn tensor(&mut self, v: &Val, like: Option<Dtype>) -> Result<ValueId> {
        match v {
            Val::T(id) => Ok(*id),
            Val::S(s) => {
                let float = like.filter(|d| d.is_float()).unwrap_or(Dtype::F32);
                let int = like.unwrap_or(Dtype::I32);
                let t = match s {
                    Static::Float(_) if like.is_some_and(|d| !d.is_float()) => s.to_tensor(Dtype::F32, int),
                    _ => s.to_tensor(float, int),
                }
                .ok_or_else(|| Error::user(format!("expected a tensor, got the value {s}")))?;
                Ok(self.constant(t))
            }
            Val::Seq(items, _) => {
                if let Some(s) = all_static(items) {
                    return self.tensor(&Val::S(s), like);
                }
                Err(Error::user("expected a tensor, got a list of tensors".to_string()))
            }
        }
    }

    fn arg<'v>(&self, ins: &'v [(String, Val)], key: &str) -> Result<&'v Val> {
        ins.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
            .ok_or_else(|| Error::internal(format!("{}: primitive has no input `{key}`", self.origin)))
    }

    fn t(&mut self, ins: &[(String, Val)], key: &str) -> Result<ValueId> {
        let v = self.arg(ins, key)?.clone();
        self.tensor(&v, None).map_err(|e| e.context(format!("`{key}`")))
    }

    fn s(&self, ins: &[(String, Val)], key: &str) -> Result<Static> {
        match self.arg(ins, key)? {
            Val::S(s) => Ok(s.clone()),
            Val::Seq(items, _) => all_static(items).ok_or_else(|| Error::user(format!("`{key}` must be known at compile time"))),
            Val::T(_) => Err(Error::user(format!("`{key}` must be known at compile time, but it is a tensor computed by the model"))),
        }
    }

    fn int(&self, ins: &[(String, Val)], key: &str) -> Result<i64> {
        let s = self.s(ins, key)?;
        s.as_int().ok_or_else(|| Error::user(format!("`{key}` must be an integer, got {s}")))
    }

    fn flag(&self, ins: &[(String, Val)], key: &str) -> Result<bool> {
        let s = self.s(ins, key)?;
        s.as_bool().ok_or_else(|| Error::user(format!("`{key}` must be True or False, got {s}")))
    }

    fn rank(&self, v: ValueId) -> usize {
        self.graph.ty(v).rank()
    }

    fn shape(&self, v: ValueId) -> Shape {
        self.graph.ty(v).shape.clone()
    }

    fn unary(&mut self, ins: &[(String, Val)], u: UnaryOp) -> Result<Val> {
        let x = self.t(ins, "input")?;
        Ok(Val::T(self.op(Op::Unary(u), vec![x])?))
    }

    /// A binary op on two operands; compile-time operands fold (shape arithmetic).
    fn binary(&mut self, l: &Val, r: &Val, b: BinaryOp) -> Result<Val> {
        if let (Val::S(a), Val::S(c)) = (l, r) {
            if let Some(v) = fold_binary(a, c, b) {
                return Ok(Val::S(v));
            }
        }
        let like = |v: &Val, g: &Graph| match v {
            Val::T(id) => Some(g.ty(*id).dtype),
            _ => None,
        };
        let (dl, dr) = (like(l, &self.graph), like(r, &self.graph));
        let a = self.tensor(l, dr)?;
        let c = self.tensor(r, dl)?;
        Ok(Val::T(self.op(Op::Binary(b), vec![a, c])?))
    }

    fn bin(&mut self, ins: &[(String, Val)], lk: &str, rk: &str, b: BinaryOp) -> Result<Val> {
        let (l, r) = (self.arg(ins, lk)?.clone(), self.arg(ins, rk)?.clone());
        self.binary(&l, &r, b)
    }

    fn tbin(&mut self, a: ValueId, c: ValueId, b: BinaryOp) -> Result<ValueId> {
        self.op(Op::Binary(b), vec![a, c])
    }

    fn axis(&self, ax: i64, rank: usize) -> Result<usize> {
        let r = rank as i64;
        if ax < -r || ax >= r.max(1) {
            return Err(Error::user(format!("axis {ax} is out of range for a rank-{rank} tensor")));
        }
        Ok(if ax < 0 { (ax + r) as usize } else { ax as usize })
    }

    /// `axis` as Mithril's reductions take it: None (all), an int, or a tuple.
    fn axes(&self, s: &Static, rank: usize) -> Result<Vec<usize>> {
        let mut v = match s {
            Static::None => (0..rank).collect(),
            other => {
                let ints = other.as_ints().ok_or_else(|| Error::user(format!("`axis` must be None, an int or a tuple of ints, got {other}")))?;
                ints.iter().map(|&a| self.axis(a, rank)).collect::<Result<Vec<_>>>()?
            }
        };
        v.sort();
        v.dedup();
        Ok(v)
    }

    fn reduce(&mut self, ins: &[(String, Val)], kind: ReduceKind) -> Result<Val> {
        let x = self.t(ins, "input")?;
        let axes = self.axes(&self.s(ins, "axis")?, self.rank(x))?;
        let keepdim = self.flag(ins, "keepdim")?;
        Ok(Val::T(self.op(Op::Reduce { kind, axes, keepdim }, vec![x])?))
    }

    fn reshape(&mut self, x: ValueId, target: &Static) -> Result<ValueId> {
        let items = match target {
            Static::Seq { items, .. } => items.clone(),
            Static::Int(_) | Static::Dim(_) => vec![target.clone()],
            other => return Err(Error::user(format!("a reshape target must be a tuple of sizes, got {other}"))),
        };
        let mut dims: Vec<Option<Dim>> = Vec::new();
        for it in &items {
            dims.push(match it {
                Static::Int(-1) => None,
                Static::Int(n) if *n >= 0 => Some(Dim::Known(*n as u64)),
                Static::Dim(s) => Some(Dim::Sym(s.clone())),
                other => return Err(Error::user(format!("bad size {other} in reshape target {target}"))),
            });
        }
        let shape = resolve_infer_dim(&self.shape(x), &dims).map_err(|m| Error::user(format!("reshape {} to {target}: {m}", self.shape(x))))?;
        self.op(Op::Reshape { shape }, vec![x])
    }

    fn transpose(&mut self, x: ValueId, perm: Vec<usize>) -> Result<ValueId> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x);
        }
        self.op(Op::Transpose { perm }, vec![x])
    }

    /// `x[index]` on a tensor: ints, slices, None and at most one Ellipsis, as NumPy's
    /// basic indexing: a slice of the indexed dimensions, then a reshape that drops the
    /// int-indexed ones and inserts the `None` ones.
    fn index_tensor(&mut self, x: ValueId, index: &Static) -> Result<ValueId> {
        let mut items = match index {
            Static::Seq { items, list: false } => items.clone(),
            other => vec![other.clone()],
        };
        let shape = self.shape(x);
        let rank = shape.rank();
        let consumed = items.iter().filter(|i| !matches!(i, Static::None | Static::Ellipsis)).count();
        let ellipses = items.iter().filter(|i| matches!(i, Static::Ellipsis)).count();
        if consumed > rank || ellipses > 1 {
            return Err(Error::user(format!("index {index} does not fit a rank-{rank} tensor {shape}")));
        }
        // `...` stands for as many full slices as the other items leave over; without
        // one, the trailing dimensions are taken whole.
        let full = Static::Slice { start: None, stop: None, step: None };
        let fill = vec![full; rank - consumed];
        match items.iter().position(|i| matches!(i, Static::Ellipsis)) {
            Some(at) => {
                items.splice(at..=at, fill);
            }
            None => items.extend(fill),
        }
        let mut ranges = Vec::with_capacity(rank);
        let mut out_dims = Vec::new();
        for it in &items {
            let dim = ranges.len();
            match it {
                Static::None => out_dims.push(Dim::Known(1)),
                Static::Int(i) => {
                    let len = shape.0[dim].known().ok_or_else(|| Error::user(format!("cannot index the symbolic dimension of {shape}")))?;
                    let len = len as i64;
                    let j = if *i < 0 { i + len } else { *i };
                    if j < 0 || j >= len {
                        return Err(Error::user(format!("index {i} is out of range for dimension {dim} of {shape}")));
                    }
                    ranges.push(SliceRange { start: Some(j), stop: Some(j + 1), step: 1 });
                }
                Static::Slice { start, stop, step } => {
                    let r = SliceRange { start: *start, stop: *stop, step: step.unwrap_or(1) };
                    out_dims.push(match &shape.0[dim] {
                        d if r.is_full() => d.clone(),
                        Dim::Known(len) => Dim::Known(r.resolve(*len).map_err(Error::user)?.2),
                        Dim::Sym(s) => return Err(Error::user(format!("cannot slice the symbolic dimension {s} of {shape}"))),
                    });
                    ranges.push(r);
                }
                other => {
                    return Err(Error::user(format!("unsupported index {other} (ints, slices, None and ... index a tensor)")))
                }
            }
        }
        let sliced = if ranges.iter().all(SliceRange::is_full) { x } else { self.op(Op::Slice { ranges }, vec![x])? };
        let out = Shape(out_dims);
        if self.shape(sliced) == out {
            Ok(sliced)
        } else {
            self.op(Op::Reshape { shape: out }, vec![sliced])
        }
    }

    fn formula(&mut self, node: &PNode, ins: &[(String, Val)]) -> Result<Val> {
        use BinaryOp as B;
        use Formula as F;
        use UnaryOp as U;
        Ok(match node.formula {
            F::Abs => self.unary(ins, U::Abs)?,
            F::Negate => self.unary(ins, U::Neg)?,
            F::Exp => self.unary(ins, U::Exp)?,
            F::Sqrt => self.unary(ins, U::Sqrt)?,
            F::Log => self.unary(ins, U::Log)?,
            F::Sin => self.unary(ins, U::Sin)?,
            F::Cos => self.unary(ins, U::Cos)?,
            F::Tanh => self.unary(ins, U::Tanh)?,
            F::Sigmoid => self.unary(ins, U::Sigmoid)?,
            F::Relu => self.unary(ins, U::Relu)?,
            F::Softplus => self.unary(ins, U::Softplus)?,
            F::Sign => self.unary(ins, U::Sign)?,
            F::Floor => self.unary(ins, U::Floor)?,
            F::IsNan => self.unary(ins, U::IsNan)?,
            F::LogicalNot => self.unary(ins, U::Not)?,
            F::Gelu => {
                let u = if self.flag(ins, "approximate")? { U::GeluTanh } else { U::Gelu };
                self.unary(ins, u)?
            }
            F::Square => {
                let x = self.t(ins, "input")?;
                Val::T(self.tbin(x, x, B::Mul)?)
            }
            F::LeakyRelu => {
                // Mithril: max(0, x) + slope * min(0, x).
                let x = self.t(ins, "input")?;
                let d = self.graph.ty(x).dtype;
                let zero = self.scalar(d, 0.0);
                let pos = self.tbin(zero, x, B::Max)?;
                let neg = self.tbin(zero, x, B::Min)?;
                let slope = self.arg(ins, "slope")?.clone();
                let scaled = self.binary(&slope, &Val::T(neg), B::Mul)?;
                self.binary(&Val::T(pos), &scaled, B::Add)?
            }
            F::StopGradient => {
                let x = self.t(ins, "input")?;
                Val::T(self.op(Op::StopGradient, vec![x])?)
            }
            F::Buffer => self.arg(ins, "input")?.clone(),
            F::Clamp => {
                // np.clip: min(max(x, lo), hi), a None bound is no bound.
                let mut v = self.arg(ins, "input")?.clone();
                for (k, b) in [("min_val", B::Max), ("max_val", B::Min)] {
                    let bound = self.arg(ins, k)?.clone();
                    if !matches!(bound, Val::S(Static::None)) {
                        v = self.binary(&v, &bound, b)?;
                    }
                }
                v
            }
            F::ZerosLike => {
                let x = self.t(ins, "input")?;
                let z = self.scalar(self.graph.ty(x).dtype, 0.0);
                Val::T(self.op(Op::BroadcastTo { shape: self.shape(x) }, vec![z])?)
            }
            F::AtLeast1D => {
                let x = self.t(ins, "input")?;
                if self.rank(x) == 0 { Val::T(self.op(Op::Reshape { shape: Shape::known(&[1]) }, vec![x])?) } else { Val::T(x) }
            }
            F::Add => self.bin(ins, "left", "right", B::Add)?,
            F::Subtract => self.bin(ins, "left", "right", B::Sub)?,
            F::Multiplication => self.bin(ins, "left", "right", B::Mul)?,
            F::Divide => self.bin(ins, "numerator", "denominator", B::Div)?,
            F::FloorDivide => self.bin(ins, "numerator", "denominator", B::FloorDiv)?,
            F::Power => self.bin(ins, "base", "exponent", B::Pow)?,
            F::Minimum => self.bin(ins, "left", "right", B::Min)?,
            F::Maximum => self.bin(ins, "left", "right", B::Max)?,
            F::Greater => self.bin(ins, "left", "right", B::Gt)?,
            F::GreaterEqual => self.bin(ins, "left", "right", B::Ge)?,
            F::Less => self.bin(ins, "left", "right", B::Lt)?,
            F::LessEqual => self.bin(ins, "left", "right", B::Le)?,
            F::Equal => self.bin(ins, "left", "right", B::Eq)?,
            F::NotEqual => self.bin(ins, "left", "right", B::Ne)?,
            F::LogicalAnd => self.bin(ins, "left", "right", B::And)?,
            F::LogicalOr => self.bin(ins, "left", "right", B::Or)?,
            F::LogicalXor => self.bin(ins, "left", "right", B::Xor)?,
            F::ShiftLeft => self.bin(ins, "input", "shift", B::Shl)?,
            F::ShiftRight => self.bin(ins, "input", "shift", B::Shr)?,
            F::Where => {
                let c = self.t(ins, "cond")?;
                let a = self.arg(ins, "input1")?.clone();
                let b = self.arg(ins, "input2")?.clone();
                let da = if let Val::T(id) = a { Some(self.graph.ty(id).dtype) } else { None };
                let db = if let Val::T(id) = b { Some(self.graph.ty(id).dtype) } else { None };
                let a = self.tensor(&a, db)?;
                let b = self.tensor(&b, da)?;
                Val::T(self.op(Op::Where, vec![c, a, b])?)
            }
            F::MatrixMultiplication => {
                let (l, r) = (self.t(ins, "left")?, self.t(ins, "right")?);
                Val::T(self.op(Op::MatMul, vec![l, r])?)
            }
            F::Conv2d | F::Conv2dBias | F::Conv1d | F::Conv1dBias => {
                let two_d = matches!(node.formula, F::Conv2d | F::Conv2dBias);
                let n = if two_d { 2 } else { 1 };
                let x = self.t(ins, "input")?;
                let w = self.t(ins, "weight")?;
                let mut args = vec![x, w];
                if matches!(node.formula, F::Conv2dBias | F::Conv1dBias) {
                    args.push(self.t(ins, "bias")?);
                }
                let attrs = ConvAttrs {
                    stride: positive_list(&self.s(ins, "stride")?, n, "stride")?,
                    padding: pad_pairs(&self.s(ins, "padding")?, n)?,
                    dilation: positive_list(&self.s(ins, "dilation")?, n, "dilation")?,
                    groups: if two_d { positive(self.int(ins, "groups")?, "groups")? } else { 1 },
                };
                Val::T(self.op(Op::Conv(attrs), args)?)
            }
            F::MaxPool2d | F::AvgPool2d | F::MaxPool1d => {
                let n = if node.formula == F::MaxPool1d { 1 } else { 2 };
                let x = self.t(ins, "input")?;
                let attrs = PoolAttrs {
                    kind: if node.formula == F::AvgPool2d { PoolKind::Avg } else { PoolKind::Max },
                    kernel: positive_list(&self.s(ins, "kernel_size")?, n, "kernel_size")?,
                    stride: positive_list(&self.s(ins, "stride")?, n, "stride")?,
                    padding: pad_pairs(&self.s(ins, "padding")?, n)?,
                    dilation: positive_list(&self.s(ins, "dilation")?, n, "dilation")?,
                };
                Val::T(self.op(Op::Pool(attrs), vec![x])?)
            }
            F::Embedding => {
                let idx = self.t(ins, "input")?;
                let w = self.t(ins, "weight")?;
                Val::T(self.op(Op::Gather { axis: 0 }, vec![w, idx])?)
            }
            F::PermuteTensor => {
                let x = self.t(ins, "input")?;
                let idx = self.t(ins, "indices")?;
                Val::T(self.op(Op::Gather { axis: 0 }, vec![x, idx])?)
            }
            F::ScaledDotProductAttention => self.attention(ins)?,
            F::CartesianDiff => {
                // left[:, None, :] - right[None, :, :]
                let (l, r) = (self.t(ins, "left")?, self.t(ins, "right")?);
                let (ls, rs) = (self.shape(l), self.shape(r));
                if ls.rank() != 2 || rs.rank() != 2 {
                    return Err(Error::user(format!("cartesian difference needs two matrices, got {ls} and {rs}")));
                }
                let l3 = self.op(Op::Reshape { shape: Shape(vec![ls.0[0].clone(), Dim::Known(1), ls.0[1].clone()]) }, vec![l])?;
                let r3 = self.op(Op::Reshape { shape: Shape(vec![Dim::Known(1), rs.0[0].clone(), rs.0[1].clone()]) }, vec![r])?;
                Val::T(self.tbin(l3, r3, B::Sub)?)
            }
            F::Softmax => {
                let x = self.t(ins, "input")?;
                let axis = self.axis(self.int(ins, "axis")?, self.rank(x))?;
                Val::T(self.op(Op::Softmax { axis }, vec![x])?)
            }
            F::ReduceMean => self.reduce(ins, ReduceKind::Mean)?,
            F::ReduceSum => self.reduce(ins, ReduceKind::Sum)?,
            F::ReduceMax => self.reduce(ins, ReduceKind::Max)?,
            F::ReduceMin => self.reduce(ins, ReduceKind::Min)?,
            F::ReduceProd => self.reduce(ins, ReduceKind::Prod)?,
            F::ReduceArgmax | F::ReduceArgmin => {
                let x = self.t(ins, "input")?;
                let axis = match self.s(ins, "axis")? {
                    Static::None => None,
                    s => Some(self.axis(s.as_int().ok_or_else(|| Error::user(format!("`axis` must be None or an int, got {s}")))?, self.rank(x))?),
                };
                let kind = if node.formula == F::ReduceArgmax { ArgKind::ArgMax } else { ArgKind::ArgMin };
                let keepdim = self.flag(ins, "keepdim")?;
                Val::T(self.op(Op::ArgReduce { kind, axis, keepdim }, vec![x])?)
            }
            F::Variance => {
                let x = self.t(ins, "input")?;
                let axes = self.axes(&self.s(ins, "axis")?, self.rank(x))?;
                let keepdim = self.flag(ins, "keepdim")?;
                let c = self.s(ins, "correction")?;
                let correction = c.as_f64().ok_or_else(|| Error::user(format!("`correction` must be a number, got {c}")))?;
                Val::T(self.op(Op::Variance { axes, keepdim, correction }, vec![x])?)
            }
            F::Reshape => {
                let x = self.t(ins, "input")?;
                let target = self.s(ins, "shape")?;
                Val::T(self.reshape(x, &target)?)
            }
            F::Flatten => {
                let x = self.t(ins, "input")?;
                let shape = self.shape(x);
                let rank = shape.rank();
                if rank == 0 {
                    return Ok(Val::T(self.op(Op::Reshape { shape: Shape::known(&[1]) }, vec![x])?));
                }
                let start = self.axis(self.int(ins, "start_dim")?, rank)?;
                let end = self.axis(self.int(ins, "end_dim")?, rank)?;
                if start > end {
                    return Err(Error::user(format!("flatten start_dim {start} is after end_dim {end}")));
                }
                let merged = merge_dims(&shape.0[start..=end]).map_err(Error::user)?;
                let mut dims = shape.0[..start].to_vec();
                dims.push(merged);
                dims.extend(shape.0[end + 1..].iter().cloned());
                Val::T(self.op(Op::Reshape { shape: Shape(dims) }, vec![x])?)
            }
            F::Transpose => {
                let x = self.t(ins, "input")?;
                let rank = self.rank(x);
                let perm = match self.s(ins, "axes")? {
                    Static::None => (0..rank).rev().collect(),
                    s => {
                        let ints = s.as_ints().ok_or_else(|| Error::user(format!("`axes` must be a tuple of ints, got {s}")))?;
                        ints.iter().map(|&a| self.axis(a, rank)).collect::<Result<Vec<_>>>()?
                    }
                };
                Val::T(self.op(Op::Transpose { perm }, vec![x])?)
            }
            F::SwapAxes => {
                let x = self.t(ins, "input")?;
                let rank = self.rank(x);
                let (a, b) = (self.axis(self.int(ins, "axis1")?, rank)?, self.axis(self.int(ins, "axis2")?, rank)?);
                let mut perm: Vec<usize> = (0..rank).collect();
                perm.swap(a, b);
                Val::T(self.transpose(x, perm)?)
            }
            F::Squeeze => {
                let x = self.t(ins, "input")?;
                let dims: Vec<Dim> = self.shape(x).0.into_iter().filter(|d| !d.is_one()).collect();
                Val::T(self.op(Op::Reshape { shape: Shape(dims) }, vec![x])?)
            }
            F::BroadcastTo => {
                let x = self.t(ins, "input")?;
                let target = self.s(ins, "shape")?;
                let shape = static_shape(&target)?;
                Val::T(self.op(Op::BroadcastTo { shape }, vec![x])?)
            }
            F::Concat => {
                let items = match self.arg(ins, "input")?.clone() {
                    Val::Seq(items, _) => items,
                    Val::S(Static::Seq { items, .. }) => items.into_iter().map(Val::S).collect(),
                    _ => return Err(Error::user("concat needs a list or tuple of tensors as `input`".to_string())),
                };
                let mut ts = Vec::new();
                for it in &items {
                    ts.push(self.tensor(it, None)?);
                }
                match self.s(ins, "axis")? {
                    Static::None => {
                        let mut flat = Vec::new();
                        for t in ts {
                            let n = merge_dims(&self.shape(t).0).map_err(Error::user)?;
                            flat.push(self.op(Op::Reshape { shape: Shape(vec![n]) }, vec![t])?);
                        }
                        Val::T(self.op(Op::Concat { axis: 0 }, flat)?)
                    }
                    s => {
                        let first = *ts.first().ok_or_else(|| Error::user("concat of an empty list".to_string()))?;
                        let ax = s.as_int().ok_or_else(|| Error::user(format!("`axis` must be an int or None, got {s}")))?;
                        let axis = self.axis(ax, self.rank(first))?;
                        Val::T(self.op(Op::Concat { axis }, ts)?)
                    }
                }
            }
            F::Split => {
                // Mithril's Split: chunk length = shape[axis] // split_size; chunk i is
                // x[..., i*len : (i+1)*len, ...].
                let x = self.t(ins, "input")?;
                let n = self.int(ins, "split_size")?;
                let rank = self.rank(x);
                let axis = self.axis(self.int(ins, "axis")?, rank)?;
                let len = self.shape(x).0[axis]
                    .known()
                    .ok_or_else(|| Error::user(format!("cannot split the symbolic dimension of {}", self.shape(x))))?;
                if n <= 0 {
                    return Err(Error::user(format!("split_size must be positive, got {n}")));
                }
                let chunk = len as i64 / n;
                let mut parts = Vec::new();
                for i in 0..n {
                    let mut ranges = vec![SliceRange::FULL; rank];
                    ranges[axis] = SliceRange { start: Some(i * chunk), stop: Some((i + 1) * chunk), step: 1 };
                    parts.push(Val::T(self.op(Op::Slice { ranges }, vec![x])?));
                }
                Val::Seq(parts, true)
            }
            F::Pad => {
                let x = self.t(ins, "input")?;
                let rank = self.rank(x);
                let pw = self.s(ins, "pad_width")?;
                let pads = numpy_pad_width(&pw, rank)?;
                Val::T(self.op(Op::Pad { pads, value: 0.0 }, vec![x])?)
            }
            F::Indexer => {
                let index = self.s(ins, "index")?;
                match self.arg(ins, "input")?.clone() {
                    Val::T(x) => Val::T(self.index_tensor(x, &index)?),
                    Val::S(Static::Seq { items, list }) => index_seq(&items.into_iter().map(Val::S).collect::<Vec<_>>(), list, &index)?,
                    Val::Seq(items, list) => index_seq(&items, list, &index)?,
                    Val::S(other) => return Err(Error::user(format!("cannot index {other}"))),
                }
            }
            F::Cast => {
                let x = self.t(ins, "input")?;
                let d = self.s(ins, "dtype")?;
                let to = parse_dtype(&d).ok_or_else(|| Error::user(format!("unknown dtype {d}")))?;
                Val::T(self.op(Op::Cast { to }, vec![x])?)
            }
            F::Shape => {
                let x = self.t(ins, "input")?;
                Val::S(Static::tuple(self.shape(x).0.iter().map(dim_static).collect()))
            }
            F::Size => {
                let x = self.t(ins, "input")?;
                let shape = self.shape(x);
                match self.s(ins, "dim")? {
                    Static::None => Val::S(dim_static(&merge_dims(&shape.0).map_err(Error::user)?)),
                    s => {
                        let ints = s.as_ints().ok_or_else(|| Error::user(format!("`dim` must be None, an int or a tuple, got {s}")))?;
                        let mut out = Vec::new();
                        for a in &ints {
                            out.push(dim_static(&shape.0[self.axis(*a, shape.rank())?]));
                        }
                        if matches!(s, Static::Int(_)) { Val::S(out.remove(0)) } else { Val::S(Static::tuple(out)) }
                    }
                }
            }
            F::Length => {
                let x = self.t(ins, "input")?;
                let shape = self.shape(x);
                Val::S(dim_static(shape.0.first().ok_or_else(|| Error::user("len() of a scalar".to_string()))?))
            }
            F::Dtype => {
                let x = self.t(ins, "input")?;
                Val::S(Static::Str(self.graph.ty(x).dtype.name().to_string()))
            }
            F::ToTuple | F::ToList | F::Union => {
                let items: Vec<Val> = ins.iter().map(|(_, v)| v.clone()).collect();
                let list = node.formula == F::ToList;
                if node.formula == F::Union {
                    let mut flat = Vec::new();
                    for it in items {
                        match it {
                            Val::S(Static::Seq { items, .. }) => flat.extend(items.into_iter().map(Val::S)),
                            Val::Seq(v, _) => flat.extend(v),
                            other => flat.push(other),
                        }
                    }
                    seq(flat, false)
                } else {
                    seq(items, list)
                }
            }
            F::Slice => {
                let get = |k: &str| -> Result<Option<i64>> {
                    match self.s(ins, k)? {
                        Static::None => Ok(None),
                        s => s.as_int().map(Some).ok_or_else(|| Error::user(format!("slice `{k}` must be an int or None, got {s}"))),
                    }
                };
                Val::S(Static::Slice { start: get("start")?, stop: get("stop")?, step: get("step")? })
            }
            F::TupleConverter => Val::S(match self.s(ins, "input")? {
                Static::Int(i) => Static::tuple(vec![Static::Int(i), Static::Int(i)]),
                other => other,
            }),
            F::StrideConverter => Val::S(match self.s(ins, "input")? {
                Static::None => self.s(ins, "kernel_size")?,
                other => other,
            }),
            F::PaddingConverter1d | F::PaddingConverter2d => {
                let p = self.s(ins, "input")?;
                let k = self.s(ins, "kernel_size")?;
                Val::S(convert_padding(&p, &k, node.formula == F::PaddingConverter2d)?)
            }
            F::ToTensor => {
                let v = self.s(ins, "input")?;
                let dtype = match self.s(ins, "dtype")? {
                    Static::None => None,
                    d => Some(parse_dtype(&d).ok_or_else(|| Error::user(format!("unknown dtype {d}")))?),
                };
                let mut t = v.to_tensor(Dtype::F32, Dtype::I32).ok_or_else(|| Error::user(format!("cannot make a tensor of {v}")))?;
                if let Some(d) = dtype {
                    t = Tensor::new(d, t.shape, t.data);
                }
                Val::T(self.constant(t))
            }
            F::Arange => self.arange(ins)?,
            F::Eye => {
                let n = self.int(ins, "N")?;
                let m = match self.s(ins, "M")? {
                    Static::None => n,
                    s => s.as_int().ok_or_else(|| Error::user(format!("`M` must be an int, got {s}")))?,
                };
                if n < 0 || m < 0 {
                    return Err(Error::user(format!("eye({n}, {m}): sizes must be non-negative")));
                }
                let (n, m) = (n as u64, m as u64);
                let numel = n.checked_mul(m).filter(|&v| v <= crate::interp::MAX_ELEMENTS).ok_or_else(|| Error::user(format!("eye({n}, {m}) is too large")))?;
                let data = (0..numel).map(|i| if i / m == i % m { 1.0 } else { 0.0 }).collect();
                Val::T(self.constant(Tensor::new(Dtype::F32, vec![n, m], data)))
            }
            F::Ones => {
                let shape = static_shape(&self.s(ins, "shape")?)?;
                let one = self.scalar(Dtype::F32, 1.0);
                Val::T(self.op(Op::BroadcastTo { shape }, vec![one])?)
            }
            F::SquaredError => {
                let d = self.bin(ins, "input", "target", B::Sub)?;
                let d = self.tensor(&d, None)?;
                Val::T(self.tbin(d, d, B::Mul)?)
            }
            F::AbsoluteError => {
                let d = self.bin(ins, "input", "target", B::Sub)?;
                let d = self.tensor(&d, None)?;
                Val::T(self.op(Op::Unary(U::Abs), vec![d])?)
            }
            F::HingeLoss | F::QuadHingeLoss => {
                // max(0, 1 - target * input), squared for the quadratic hinge.
                let p = self.bin(ins, "target", "input", B::Mul)?;
                let m = self.binary(&Val::S(Static::Float(1.0)), &p, B::Sub)?;
                let h = self.binary(&Val::S(Static::Float(0.0)), &m, B::Max)?;
                if node.formula == F::QuadHingeLoss {
                    let h = self.tensor(&h, None)?;
                    Val::T(self.tbin(h, h, B::Mul)?)
                } else {
                    h
                }
            }
            F::QuantileLoss => {
                // e = target - input; max(q * e, (q - 1) * e).
                let e = self.bin(ins, "target", "input", B::Sub)?;
                let q = self.arg(ins, "quantile")?.clone();
                let qe = self.binary(&q, &e, B::Mul)?;
                let q1 = self.binary(&q, &Val::S(Static::Float(1.0)), B::Sub)?;
                let q1e = self.binary(&q1, &e, B::Mul)?;
                self.binary(&qe, &q1e, B::Max)?
            }
            F::CrossEntropyWithLogits => self.cross_entropy(ins)?,
            F::RobustLog => {
                let x = self.t(ins, "input")?;
                let t = self.arg(ins, "threshold")?.clone();
                Val::T(self.robust_log(x, &t)?)
            }
            F::RobustSqrt => {
                // |x| < t ? |x| / sqrt(t) : sqrt(|x|)
                let x = self.t(ins, "input")?;
                let t = self.threshold(ins, x)?;
                let a = self.op(Op::Unary(U::Abs), vec![x])?;
                let small = self.tbin(a, t, B::Lt)?;
                let st = self.op(Op::Unary(U::Sqrt), vec![t])?;
                let lin = self.tbin(a, st, B::Div)?;
                let sq = self.op(Op::Unary(U::Sqrt), vec![a])?;
                Val::T(self.op(Op::Where, vec![small, lin, sq])?)
            }
            F::RobustPower => {
                // cond = exponent < 1 - log(t)/log|base| and |base| < t;
                // cond ? |base| / t : |base| ** exponent
                let base = self.t(ins, "base")?;
                let e = self.arg(ins, "exponent")?.clone();
                let e = self.tensor(&e, Some(self.graph.ty(base).dtype))?;
                let t = self.threshold(ins, base)?;
                let a = self.op(Op::Unary(U::Abs), vec![base])?;
                let (lt, la) = (self.op(Op::Unary(U::Log), vec![t])?, self.op(Op::Unary(U::Log), vec![a])?);
                let ratio = self.tbin(lt, la, B::Div)?;
                let one = self.scalar(self.graph.ty(a).dtype, 1.0);
                let bound = self.tbin(one, ratio, B::Sub)?;
                let c1 = self.tbin(e, bound, B::Lt)?;
                let c2 = self.tbin(a, t, B::Lt)?;
                let cond = self.tbin(c1, c2, B::And)?;
                let lin = self.tbin(a, t, B::Div)?;
                let pw = self.tbin(a, e, B::Pow)?;
                Val::T(self.op(Op::Where, vec![cond, lin, pw])?)
            }
            F::StableReciprocal => {
                // |x| < t ? (sign(x) + (1 - sign(|x|))) * 2/t - x/t² : 1/x
                let x = self.t(ins, "input")?;
                let t = self.threshold(ins, x)?;
                let d = self.graph.ty(x).dtype;
                let a = self.op(Op::Unary(U::Abs), vec![x])?;
                let small = self.tbin(a, t, B::Lt)?;
                let sx = self.op(Op::Unary(U::Sign), vec![x])?;
                let sa = self.op(Op::Unary(U::Sign), vec![a])?;
                let one = self.scalar(d, 1.0);
                let two = self.scalar(d, 2.0);
                let not_a = self.tbin(one, sa, B::Sub)?;
                let s = self.tbin(sx, not_a, B::Add)?;
                let s2 = self.tbin(s, two, B::Mul)?;
                let lin0 = self.tbin(s2, t, B::Div)?;
                let t2 = self.tbin(t, t, B::Mul)?;
                let xt = self.tbin(x, t2, B::Div)?;
                let lin = self.tbin(lin0, xt, B::Sub)?;
                let rec = self.tbin(one, x, B::Div)?;
                Val::T(self.op(Op::Where, vec![small, lin, rec])?)
            }
            F::KlDivergence => {
                // target * (robust_log(target) - robust_log(input))
                let x = self.t(ins, "input")?;
                let target = self.t(ins, "target")?;
                let t = self.arg(ins, "threshold")?.clone();
                let lx = self.robust_log(x, &t)?;
                let lt = self.robust_log(target, &t)?;
                let diff = self.tbin(lt, lx, B::Sub)?;
                Val::T(self.tbin(target, diff, B::Mul)?)
            }
            F::NanToNum => {
                // NaN -> nan, +inf -> posinf (default: the largest finite value), -inf -> neginf.
                let x = self.t(ins, "input")?;
                let d = self.graph.ty(x).dtype;
                let max = match d {
                    Dtype::F64 => f64::MAX,
                    Dtype::F16 => half::f16::MAX.to_f64(),
                    Dtype::Bf16 => half::bf16::MAX.to_f64(),
                    _ => f32::MAX as f64,
                };
                let value = |s: Static, default: f64| -> Result<f64> {
                    match s {
                        Static::None => Ok(default),
                        s => s.as_f64().ok_or_else(|| Error::user(format!("nan_to_num replacement must be a number, got {s}"))),
                    }
                };
                let (nan, pinf, ninf) =
                    (value(self.s(ins, "nan")?, 0.0)?, value(self.s(ins, "posinf")?, max)?, value(self.s(ins, "neginf")?, -max)?);
                let mut y = x;
                for (probe, with) in [(f64::INFINITY, pinf), (f64::NEG_INFINITY, ninf)] {
                    let p = self.scalar(d, probe);
                    let hit = self.tbin(y, p, B::Eq)?;
                    let w = self.scalar(d, with);
                    y = self.op(Op::Where, vec![hit, w, y])?;
                }
                let isnan = self.op(Op::Unary(U::IsNan), vec![x])?;
                let w = self.scalar(d, nan);
                Val::T(self.op(Op::Where, vec![isnan, w, y])?)
            }
            F::BinaryCrossEntropyWithLogits => {
                // (1 - target) * input - log_sigmoid(input), log_sigmoid(x) = -softplus(-x).
                // `robust` guards log(1 + e^-|x|) >= log 1, where it changes nothing.
                let pw = self.s(ins, "pos_weight")?;
                if pw.as_f64() != Some(1.0) {
                    return Err(Error::user(format!("binary cross entropy with pos_weight {pw} is not supported yet")));
                }
                let x = self.t(ins, "input")?;
                let target = self.arg(ins, "target")?.clone();
                let one_minus = self.binary(&Val::S(Static::Float(1.0)), &target, B::Sub)?;
                let a = self.binary(&one_minus, &Val::T(x), B::Mul)?;
                let nx = self.op(Op::Unary(U::Neg), vec![x])?;
                let sp = self.op(Op::Unary(U::Softplus), vec![nx])?;
                self.binary(&a, &Val::T(sp), B::Add)?
            }
        })
    }

    /// Mithril's `scaled_dot_product_attention`: `softmax(q kᵀ · scale + bias) v`, with
    /// scale 1/√d by default and a causal bias of -inf above the diagonal.
    fn attention(&mut self, ins: &[(String, Val)]) -> Result<Val> {
        use BinaryOp as B;
        let (q, k, v) = (self.t(ins, "query")?, self.t(ins, "key")?, self.t(ins, "value")?);
        let dropout = self.s(ins, "dropout_p")?;
        if dropout.as_f64() != Some(0.0) {
            return Err(Error::user(format!("dropout_p must be 0 for inference, got {dropout}")));
        }
        let (qs, ks) = (self.shape(q), self.shape(k));
        if qs.rank() < 2 || ks.rank() < 2 {
            return Err(Error::user(format!("attention needs query and key of rank 2 or more, got {qs} and {ks}")));
        }
        let dtype = self.graph.ty(q).dtype;
        let scale = match self.s(ins, "scale")? {
            Static::None => {
                let d = qs.0[qs.rank() - 1].known().ok_or_else(|| Error::user(format!("attention needs a known head size, got {qs}")))?;
                1.0 / (d as f64).sqrt()
            }
            s => s.as_f64().ok_or_else(|| Error::user(format!("`scale` must be a number, got {s}")))?,
        };
        let rank = ks.rank();
        let mut perm: Vec<usize> = (0..rank).collect();
        perm.swap(rank - 2, rank - 1);
        let kt = self.op(Op::Transpose { perm }, vec![k])?;
        let scores = self.op(Op::MatMul, vec![q, kt])?;
        let sc = self.scalar(dtype, scale);
        let mut w = self.tbin(scores, sc, B::Mul)?;
        let (l, s) = (qs.0[qs.rank() - 2].clone(), ks.0[rank - 2].clone());
        let causal = self.flag(ins, "is_causal")?;
        let mask = self.arg(ins, "attn_mask")?.clone();
        if causal {
            if !matches!(mask, Val::S(Static::None)) {
                return Err(Error::user("attention with is_causal=True takes no attn_mask".to_string()));
            }
            // bias[i, j] = 0 where j <= i (np.tril), else -inf.
            let ls = Shape(vec![l.clone(), s.clone()]);
            let rows = self.op(Op::Iota { shape: ls.clone(), axis: 0, dtype: Dtype::I32 }, vec![])?;
            let cols = self.op(Op::Iota { shape: ls, axis: 1, dtype: Dtype::I32 }, vec![])?;
            let keep = self.tbin(cols, rows, B::Le)?;
            let zero = self.scalar(dtype, 0.0);
            let ninf = self.scalar(dtype, f64::NEG_INFINITY);
            let bias = self.op(Op::Where, vec![keep, zero, ninf])?;
            w = self.tbin(w, bias, B::Add)?;
        }
        match mask {
            Val::S(Static::None) => {}
            m => {
                let m = self.tensor(&m, Some(dtype))?;
                if self.graph.ty(m).dtype == Dtype::Bool {
                    let zero = self.scalar(dtype, 0.0);
                    let ninf = self.scalar(dtype, f64::NEG_INFINITY);
                    let bias = self.op(Op::Where, vec![m, zero, ninf])?;
                    w = self.tbin(w, bias, B::Add)?;
                } else {
                    w = self.tbin(w, m, B::Add)?;
                }
            }
        }
        let axis = self.rank(w) - 1;
        let p = self.op(Op::Softmax { axis }, vec![w])?;
        Ok(Val::T(self.op(Op::MatMul, vec![p, v])?))
    }

    /// The `threshold` input as a scalar tensor of `like`'s dtype (Mithril's constants
    /// take the precision of the tensor they guard).
    fn threshold(&mut self, ins: &[(String, Val)], like: ValueId) -> Result<ValueId> {
        let t = self.arg(ins, "threshold")?.clone();
        self.threshold_of(&t, like)
    }

    fn threshold_of(&mut self, t: &Val, like: ValueId) -> Result<ValueId> {
        let d = self.graph.ty(like).dtype;
        match t {
            Val::S(Static::Named(n)) => {
                let v = super::value::named_constant(n, d).ok_or_else(|| Error::user(format!("unknown constant Constant.{n}")))?;
                Ok(self.scalar(d, v))
            }
            other => self.tensor(other, Some(d)),
        }
    }

    /// Mithril's `robust_log`: `|x| < t ? log(t) + |x|/t - 1 : log(|x|)`.
    fn robust_log(&mut self, x: ValueId, t: &Val) -> Result<ValueId> {
        use BinaryOp as B;
        let t = self.threshold_of(t, x)?;
        let a = self.op(Op::Unary(UnaryOp::Abs), vec![x])?;
        let small = self.tbin(a, t, B::Lt)?;
        let lt = self.op(Op::Unary(UnaryOp::Log), vec![t])?;
        let at = self.tbin(a, t, B::Div)?;
        let one = self.scalar(self.graph.ty(a).dtype, 1.0);
        let s = self.tbin(lt, at, B::Add)?;
        let lin = self.tbin(s, one, B::Sub)?;
        let la = self.op(Op::Unary(UnaryOp::Log), vec![a])?;
        self.op(Op::Where, vec![small, lin, la])
    }

    /// Mithril's `cross_entropy_with_logits` (categorical: integer class targets).
    /// `robust` only guards the log of a sum that is at least 1, so it changes nothing.
    fn cross_entropy(&mut self, ins: &[(String, Val)]) -> Result<Val> {
        use BinaryOp as B;
        let x = self.t(ins, "input")?;
        let xs = self.shape(x);
        if xs.rank() != 2 {
            return Err(Error::user(format!("cross entropy needs logits of shape [N, C], got {xs}")));
        }
        let dtype = self.graph.ty(x).dtype;
        let class_weights = match self.s(ins, "weights")? {
            Static::Bool(false) | Static::Str(_) | Static::None => None,
            Static::Bool(true) => {
                return Err(Error::user("cross entropy with weights=True (class weights computed from the batch) is not supported yet".to_string()))
            }
            w => Some(w.to_tensor(dtype, dtype).ok_or_else(|| Error::user(format!("cross entropy weights must be a list of numbers, got {w}")))?),
        };
        let mx = self.op(Op::Reduce { kind: ReduceKind::Max, axes: vec![1], keepdim: true }, vec![x])?;
        let norm = self.tbin(x, mx, B::Sub)?;
        let e = self.op(Op::Unary(UnaryOp::Exp), vec![norm])?;
        let se = self.op(Op::Reduce { kind: ReduceKind::Sum, axes: vec![1], keepdim: false }, vec![e])?;
        let lse = self.op(Op::Unary(UnaryOp::Log), vec![se])?;
        let target = self.t(ins, "target")?;
        let weights = match class_weights {
            Some(w) => Some(self.constant(Tensor::new(dtype, vec![w.numel() as u64], w.data))),
            None => None,
        };
        if self.flag(ins, "categorical")? {
            // label_logits = norm[i, target[i]], as a masked sum (no take_along_axis op).
            let td = self.graph.ty(target).dtype;
            if !td.is_int() {
                return Err(Error::user(format!("categorical cross entropy needs integer targets, got {td}")));
            }
            let t2 = self.op(Op::Reshape { shape: Shape(vec![xs.0[0].clone(), Dim::Known(1)]) }, vec![target])?;
            let cls = self.op(Op::Iota { shape: xs.clone(), axis: 1, dtype: td }, vec![])?;
            let hit = self.tbin(cls, t2, B::Eq)?;
            let zero = self.scalar(dtype, 0.0);
            let picked = self.op(Op::Where, vec![hit, norm, zero])?;
            let label = self.op(Op::Reduce { kind: ReduceKind::Sum, axes: vec![1], keepdim: false }, vec![picked])?;
            let loss = self.tbin(lse, label, B::Sub)?;
            Ok(Val::T(match weights {
                Some(w) => {
                    let wt = self.op(Op::Gather { axis: 0 }, vec![w, target])?;
                    self.tbin(loss, wt, B::Mul)?
                }
                None => loss,
            }))
        } else {
            // -sum(target * log_softmax(input) * weights, axis=1)
            let lse2 = self.op(Op::Reshape { shape: Shape(vec![xs.0[0].clone(), Dim::Known(1)]) }, vec![lse])?;
            let ls = self.tbin(norm, lse2, B::Sub)?;
            let mut prod = self.tbin(target, ls, B::Mul)?;
            if let Some(w) = weights {
                prod = self.tbin(prod, w, B::Mul)?;
            }
            let s = self.op(Op::Reduce { kind: ReduceKind::Sum, axes: vec![1], keepdim: false }, vec![prod])?;
            Ok(Val::T(self.op(Op::Unary(UnaryOp::Neg), vec![s])?))
        }
    }

    /// `arange(start, stop, step)`: ints give i32 (Mithril's int default), any float f32.
    fn arange(&mut self, ins: &[(String, Val)]) -> Result<Val> {
        let (start, stop, step) = (self.s(ins, "start")?, self.s(ins, "stop")?, self.s(ins, "step")?);
        let all_int = [&start, &stop, &step].iter().all(|v| matches!(v, Static::Int(_) | Static::Dim(_)));
        let dtype = match self.s(ins, "dtype")? {
            Static::None => if all_int { Dtype::I32 } else { Dtype::F32 },
            d => parse_dtype(&d).ok_or_else(|| Error::user(format!("unknown dtype {d}")))?,
        };
        if let (Static::Dim(sym), Some(0), Some(1)) = (&stop, start.as_int(), step.as_int()) {
            let shape = Shape(vec![Dim::Sym(sym.clone())]);
            return Ok(Val::T(self.op(Op::Iota { shape, axis: 0, dtype }, vec![])?));
        }
        let (a, b, s) = match (start.as_f64(), stop.as_f64(), step.as_f64()) {
            (Some(a), Some(b), Some(s)) if s != 0.0 => (a, b, s),
            _ => return Err(Error::user(format!("arange({start}, {stop}, {step}) needs numbers and a non-zero step"))),
        };
        let n = ((b - a) / s).ceil().max(0.0);
        if n > crate::interp::MAX_ELEMENTS as f64 {
            return Err(Error::user(format!("arange({start}, {stop}, {step}) is too long")));
        }
        let n = n as u64;
        let data = (0..n).map(|i| a + s * i as f64).collect();
        Ok(Val::T(self.constant(Tensor::new(dtype, vec![n], data))))
    }
}

/// A `--shape` with symbols that the data's concrete shape instantiates
/// (`B,784` and `[1, 784]`): the data decides.
fn binds_to(template: &Shape, concrete: &Shape) -> bool {
    let mut seen: BTreeMap<&str, &Dim> = BTreeMap::new();
    template.rank() == concrete.rank()
        && template.0.iter().zip(&concrete.0).all(|(t, c)| match t {
            Dim::Known(_) => t == c,
            Dim::Sym(s) => *seen.entry(s.as_str()).or_insert(c) == c,
        })
}

fn seq(items: Vec<Val>, list: bool) -> Val {
    match all_static(&items) {
        Some(Static::Seq { items, .. }) => Val::S(Static::Seq { items, list }),
        _ => Val::Seq(items, list),
    }
}

fn all_static(items: &[Val]) -> Option<Static> {
    let mut out = Vec::new();
    for it in items {
        match it {
            Val::S(s) => out.push(s.clone()),
            Val::Seq(v, _) => out.push(all_static(v)?),
            Val::T(_) => return None,
        }
    }
    Some(Static::tuple(out))
}

/// `seq[index]` for a compile-time sequence or a list of tensors.
fn index_seq(items: &[Val], list: bool, index: &Static) -> Result<Val> {
    let n = items.len() as i64;
    match index {
        Static::Int(i) => {
            let j = if *i < 0 { i + n } else { *i };
            items
                .get(usize::try_from(j).map_err(|_| Error::user(format!("index {i} out of range for length {n}")))?)
                .cloned()
                .ok_or_else(|| Error::user(format!("index {i} out of range for length {n}")))
        }
        Static::Slice { start, stop, step } => {
            let r = SliceRange { start: *start, stop: *stop, step: step.unwrap_or(1) };
            let (first, step, count) = r.resolve(n as u64).map_err(Error::user)?;
            Ok(seq((0..count as i64).map(|k| items[(first + k * step) as usize].clone()).collect(), list))
        }
        other => Err(Error::user(format!("cannot index a sequence with {other}"))),
    }
}

fn dim_static(d: &Dim) -> Static {
    match d {
        Dim::Known(n) => Static::Int(*n as i64),
        Dim::Sym(s) => Static::Dim(s.clone()),
    }
}

/// The product of dimensions, which may hold at most one symbol among 1s.
fn merge_dims(dims: &[Dim]) -> Result<Dim, String> {
    let mut known = 1u64;
    let mut sym: Option<&str> = None;
    for d in dims {
        match d {
            Dim::Known(n) => known = known.checked_mul(*n).ok_or("size overflows")?,
            Dim::Sym(s) if sym.is_none() => sym = Some(s),
            Dim::Sym(_) => return Err(format!("cannot merge several symbolic dimensions of {}", Shape(dims.to_vec()))),
        }
    }
    match sym {
        None => Ok(Dim::Known(known)),
        Some(s) if known == 1 => Ok(Dim::Sym(s.to_string())),
        Some(_) => Err(format!("cannot merge a symbolic dimension with others in {}", Shape(dims.to_vec()))),
    }
}

/// A reshape target with at most one `-1` (None), resolved against the input shape.
fn resolve_infer_dim(input: &Shape, target: &[Option<Dim>]) -> Result<Shape, String> {
    let holes = target.iter().filter(|d| d.is_none()).count();
    if holes > 1 {
        return Err("only one dimension can be -1".into());
    }
    let given: Vec<Dim> = target.iter().flatten().cloned().collect();
    if holes == 0 {
        return Ok(Shape(given));
    }
    let (in_known, mut in_syms) = shape::numel_key(input);
    let (t_known, t_syms) = shape::numel_key(&Shape(given));
    let (in_known, t_known) = (in_known.ok_or("size overflows")?, t_known.ok_or("size overflows")?);
    for s in &t_syms {
        match in_syms.iter().position(|x| x == s) {
            Some(i) => {
                in_syms.remove(i);
            }
            None => return Err(format!("the symbolic dimension {s} does not occur in the input")),
        }
    }
    if t_known == 0 || in_known % t_known != 0 {
        return Err("the element count does not divide".into());
    }
    let rest = in_known / t_known;
    let hole = match in_syms.as_slice() {
        [] => Dim::Known(rest),
        [s] if rest == 1 => Dim::Sym(s.clone()),
        _ => return Err("-1 would stand for a product of symbolic dimensions".into()),
    };
    Ok(Shape(target.iter().map(|d| d.clone().unwrap_or_else(|| hole.clone())).collect()))
}

fn static_shape(s: &Static) -> Result<Shape> {
    let items = match s {
        Static::Seq { items, .. } => items.clone(),
        other => vec![other.clone()],
    };
    items
        .iter()
        .map(|it| match it {
            Static::Int(n) if *n >= 0 => Ok(Dim::Known(*n as u64)),
            Static::Dim(d) => Ok(Dim::Sym(d.clone())),
            other => Err(Error::user(format!("bad size {other} in shape {s}"))),
        })
        .collect::<Result<Vec<_>>>()
        .map(Shape)
}

fn positive(v: i64, what: &str) -> Result<u64> {
    u64::try_from(v).ok().filter(|&x| x > 0).ok_or_else(|| Error::user(format!("`{what}` must be positive, got {v}")))
}

/// An int or an n-tuple of positive ints.
fn positive_list(s: &Static, n: usize, what: &str) -> Result<Vec<u64>> {
    let ints = s.as_ints().ok_or_else(|| Error::user(format!("`{what}` must be an int or a tuple of ints, got {s}")))?;
    let ints = if ints.len() == 1 { vec![ints[0]; n] } else { ints };
    if ints.len() != n {
        return Err(Error::user(format!("`{what}` needs {n} values, got {s}")));
    }
    ints.into_iter().map(|v| positive(v, what)).collect()
}

/// Padding as (before, after) per spatial dim, from `p`, `(p, q)` or `((a, b), (c, d))`.
fn pad_pairs(s: &Static, n: usize) -> Result<Vec<(u64, u64)>> {
    let bad = || Error::user(format!("bad padding {s}"));
    let nonneg = |v: i64| u64::try_from(v).map_err(|_| bad());
    match s {
        Static::Int(p) => Ok(vec![(nonneg(*p)?, nonneg(*p)?); n]),
        Static::Seq { items, .. } => {
            let mut out = Vec::new();
            for it in items {
                out.push(match it {
                    Static::Int(p) => (nonneg(*p)?, nonneg(*p)?),
                    Static::Seq { items, .. } if items.len() == 2 => {
                        (nonneg(items[0].as_int().ok_or_else(bad)?)?, nonneg(items[1].as_int().ok_or_else(bad)?)?)
                    }
                    _ => return Err(bad()),
                });
            }
            // A 1-d padding is written as one (before, after) pair.
            if n == 1 && out.len() == 2 && items.iter().all(|i| matches!(i, Static::Int(_))) {
                return Ok(vec![(out[0].0, out[1].0)]);
            }
            if out.len() != n {
                return Err(bad());
            }
            Ok(out)
        }
        _ => Err(bad()),
    }
}

/// `np.pad`'s pad_width: an int, a pair, or one pair per dimension.
fn numpy_pad_width(s: &Static, rank: usize) -> Result<Vec<(u64, u64)>> {
    let bad = || Error::user(format!("bad pad_width {s}"));
    let nonneg = |v: &Static| v.as_int().and_then(|i| u64::try_from(i).ok()).ok_or_else(bad);
    match s {
        Static::Int(_) => Ok(vec![(nonneg(s)?, nonneg(s)?); rank]),
        Static::Seq { items, .. } if items.len() == 2 && items.iter().all(|i| matches!(i, Static::Int(_))) && rank != 2 => {
            Ok(vec![(nonneg(&items[0])?, nonneg(&items[1])?); rank])
        }
        Static::Seq { items, .. } if items.len() == 1 => numpy_pad_width(&items[0], rank),
        Static::Seq { items, .. } if items.len() == rank => items
            .iter()
            .map(|it| match it {
                Static::Seq { items: p, .. } if p.len() == 2 => Ok((nonneg(&p[0])?, nonneg(&p[1])?)),
                Static::Int(_) => Ok((nonneg(it)?, nonneg(it)?)),
                _ => Err(bad()),
            })
            .collect(),
        _ => Err(bad()),
    }
}

/// Mithril's `padding_converter_1d` / `padding_converter_2d`.
fn convert_padding(p: &Static, kernel: &Static, two_d: bool) -> Result<Static> {
    let pair = |a: i64, b: i64| Static::tuple(vec![Static::Int(a), Static::Int(b)]);
    let mode = match p {
        Static::Str(s) => Some(s.to_lowercase().trim_start_matches("paddingtype.").to_string()),
        _ => None,
    };
    if let Some(mode) = mode {
        let ks = kernel.as_ints().ok_or_else(|| Error::user(format!("bad kernel size {kernel}")))?;
        return match mode.as_str() {
            "valid" => Ok(if two_d { Static::tuple(vec![pair(0, 0), pair(0, 0)]) } else { pair(0, 0) }),
            "same" => {
                if ks.iter().any(|k| k % 2 == 0) {
                    return Err(Error::user("'same' padding is not supported when the kernel size is even".to_string()));
                }
                if two_d {
                    let (h, w) = (ks[0] / 2, *ks.get(1).unwrap_or(&ks[0]) / 2);
                    Ok(Static::tuple(vec![pair(h, w), pair(h, w)]))
                } else {
                    Ok(pair(ks[0] / 2, ks[0] / 2))
                }
            }
            other => Err(Error::user(format!("unknown padding type '{other}'"))),
        };
    }
    match p {
        Static::Int(i) if two_d => Ok(Static::tuple(vec![pair(*i, *i), pair(*i, *i)])),
        Static::Int(i) => Ok(pair(*i, *i)),
        Static::Seq { items, .. } if two_d && items.len() == 2 => {
            let mut out = Vec::new();
            for it in items {
                out.push(match it {
                    Static::Int(v) => pair(*v, *v),
                    Static::Seq { items: q, .. } if q.len() == 2 => it.clone(),
                    _ => return Err(Error::user(format!("bad padding {p}"))),
                });
            }
            Ok(Static::tuple(out))
        }
        Static::Seq { items, .. } if !two_d && items.len() == 2 => Ok(p.clone()),
        other => Err(Error::user(format!("bad padding {other}"))),
    }
}

fn parse_dtype(s: &Static) -> Option<Dtype> {
    let name = match s {
        Static::Str(x) | Static::Named(x) => x.to_lowercase(),
        _ => return None,
    };
    let name = name.trim_start_matches("dtype.").trim_start_matches("mithril.");
    Some(match name {
        "float32" | "float" | "f32" => Dtype::F32,
        "float64" | "double" | "f64" => Dtype::F64,
        "float16" | "half" | "f16" => Dtype::F16,
        "bfloat16" | "bf16" => Dtype::Bf16,
        "int32" | "int" | "i32" => Dtype::I32,
        "int64" | "long" | "i64" => Dtype::I64,
        "bool" => Dtype::Bool,
        _ => return None,
    })
}

/// Arithmetic on compile-time numbers (shape arithmetic such as `shape[0] // 3`).
fn fold_binary(a: &Static, b: &Static, op: BinaryOp) -> Option<Static> {
    use BinaryOp as B;
    if let (Some(x), Some(y)) = (a.as_int().filter(|_| !matches!(a, Static::Bool(_))), b.as_int().filter(|_| !matches!(b, Static::Bool(_)))) {
        return Some(Static::Int(match op {
            B::Add => x.checked_add(y)?,
            B::Sub => x.checked_sub(y)?,
            B::Mul => x.checked_mul(y)?,
            B::FloorDiv if y != 0 => x.div_euclid(y) - i64::from(x.rem_euclid(y) != 0 && y < 0),
            B::Max => x.max(y),
            B::Min => x.min(y),
            B::Div if y != 0 => return Some(Static::Float(x as f64 / y as f64)),
            _ => return None,
        }));
    }
    let (x, y) = (a.as_f64()?, b.as_f64()?);
    if matches!(a, Static::Tensor(_)) || matches!(b, Static::Tensor(_)) {
        return None;
    }
    Some(Static::Float(match op {
        B::Add => x + y,
        B::Sub => x - y,
        B::Mul => x * y,
        B::Div => x / y,
        B::Pow => x.powf(y),
        B::Max => x.max(y),
        B::Min => x.min(y),
        _ => return None,
    }))
}

fn template_text(dims: &[TemplateDim]) -> String {
    let items: Vec<String> = dims
        .iter()
        .map(|d| match d {
            TemplateDim::Known(n) => n.to_string(),
            TemplateDim::Sym(s) => s.clone(),
            TemplateDim::Variadic(s) => format!("{s}..."),
            TemplateDim::Any => "?".to_string(),
        })
        .collect();
    format!("[{}]", items.join(", "))
}

/// Symbol bindings of one template group.
#[derive(Default)]
struct Bindings {
    dims: BTreeMap<String, Dim>,
    runs: BTreeMap<String, Vec<Dim>>,
}

impl Bindings {
    /// Matches a template against a shape, binding its symbols; `Err` says why not.
    fn bind(&mut self, template: &[TemplateDim], shape: &Shape) -> Result<(), String> {
        let var = template.iter().position(|d| matches!(d, TemplateDim::Variadic(_)));
        let fixed = template.len() - usize::from(var.is_some());
        let ok_rank = if var.is_some() { shape.rank() >= fixed } else { shape.rank() == fixed };
        if !ok_rank {
            return Err(format!(" (rank {} where {} is needed)", shape.rank(), if var.is_some() { format!("{fixed} or more") } else { fixed.to_string() }));
        }
        let mut pairs: Vec<(&TemplateDim, &[Dim])> = Vec::new();
        match var {
            None => pairs.extend(template.iter().zip(shape.0.iter()).map(|(t, d)| (t, std::slice::from_ref(d)))),
            Some(v) => {
                let tail = template.len() - v - 1;
                for (t, d) in template[..v].iter().zip(&shape.0) {
                    pairs.push((t, std::slice::from_ref(d)));
                }
                pairs.push((&template[v], &shape.0[v..shape.rank() - tail]));
                for (t, d) in template[v + 1..].iter().zip(&shape.0[shape.rank() - tail..]) {
                    pairs.push((t, std::slice::from_ref(d)));
                }
            }
        }
        for (t, ds) in pairs {
            match t {
                TemplateDim::Any => {}
                TemplateDim::Known(n) => {
                    if ds[0] != Dim::Known(*n) {
                        return Err(format!(" (needs {n} where it has {})", ds[0]));
                    }
                }
                TemplateDim::Sym(s) => match self.dims.get(s) {
                    Some(b) if *b != ds[0] => return Err(format!(" ({s} is {b} elsewhere but {} here)", ds[0])),
                    Some(_) => {}
                    None => {
                        self.dims.insert(s.clone(), ds[0].clone());
                    }
                },
                TemplateDim::Variadic(s) => match self.runs.get(s) {
                    Some(b) if b.as_slice() != ds => return Err(format!(" ({s}... differs)")),
                    Some(_) => {}
                    None => {
                        self.runs.insert(s.clone(), ds.to_vec());
                    }
                },
            }
        }
        Ok(())
    }

    /// The shape a template stands for under these bindings; unbound symbols of the
    /// file's own templates (`user`) become symbolic dimensions.
    fn instantiate(&self, template: &[TemplateDim], user: bool) -> Option<Shape> {
        let mut dims = Vec::new();
        for t in template {
            match t {
                TemplateDim::Known(n) => dims.push(Dim::Known(*n)),
                TemplateDim::Sym(s) => match self.dims.get(s) {
                    Some(d) => dims.push(d.clone()),
                    None if user => dims.push(Dim::Sym(s.clone())),
                    None => return None,
                },
                TemplateDim::Variadic(s) => dims.extend(self.runs.get(s)?.iter().cloned()),
                TemplateDim::Any => return None,
            }
        }
        Some(Shape(dims))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(s: &str) -> Dim {
        Dim::Sym(s.into())
    }

    #[test]
    fn templates_bind_and_instantiate() {
        let t = |s: &str| TemplateDim::Sym(s.into());
        let mut b = Bindings::default();
        let x = vec![t("N"), TemplateDim::Variadic("V".into()), t("d_in")];
        b.bind(&x, &Shape::known(&[2, 3, 4])).unwrap();
        assert_eq!(b.instantiate(&[TemplateDim::Known(5), t("d_in")], false), Some(Shape::known(&[5, 4])));
        assert_eq!(b.instantiate(&[t("unbound")], false), None);
        assert_eq!(b.instantiate(&[t("batch")], true), Some(Shape(vec![sym("batch")])));
        assert_eq!(b.bind(&[t("d_in")], &Shape::known(&[5])).unwrap_err(), " (d_in is 4 elsewhere but 5 here)");
        assert_eq!(b.bind(&[t("a"), t("b")], &Shape::known(&[1])).unwrap_err(), " (rank 1 where 2 is needed)");
    }

    #[test]
    fn reshape_infers_minus_one_with_symbols() {
        let x = Shape(vec![sym("B"), Dim::Known(128), Dim::Known(768)]);
        let target = [None, Some(Dim::Known(128)), Some(Dim::Known(12)), Some(Dim::Known(64))];
        assert_eq!(
            resolve_infer_dim(&x, &target).unwrap(),
            Shape(vec![sym("B"), Dim::Known(128), Dim::Known(12), Dim::Known(64)])
        );
        assert_eq!(resolve_infer_dim(&Shape::known(&[2, 3, 4]), &[Some(Dim::Known(2)), None]).unwrap(), Shape::known(&[2, 12]));
        assert!(resolve_infer_dim(&Shape::known(&[2, 3, 4]), &[Some(Dim::Known(5)), None]).is_err());
        assert!(resolve_infer_dim(&Shape::known(&[4]), &[None, None]).is_err());
    }

    #[test]
    fn mithril_padding_and_stride_conversions() {
        let i = Static::Int;
        let pair = |a, b| Static::tuple(vec![i(a), i(b)]);
        assert_eq!(convert_padding(&i(1), &i(3), true).unwrap(), Static::tuple(vec![pair(1, 1), pair(1, 1)]));
        assert_eq!(convert_padding(&pair(1, 2), &i(3), true).unwrap(), Static::tuple(vec![pair(1, 1), pair(2, 2)]));
        assert_eq!(convert_padding(&Static::Str("same".into()), &pair(3, 5), true).unwrap(), Static::tuple(vec![pair(1, 2), pair(1, 2)]));
        assert!(convert_padding(&Static::Str("same".into()), &i(2), false).is_err());
        assert_eq!(pad_pairs(&Static::tuple(vec![pair(1, 2), pair(3, 4)]), 2).unwrap(), vec![(1, 2), (3, 4)]);
        assert_eq!(pad_pairs(&pair(1, 2), 1).unwrap(), vec![(1, 2)]);
        assert!(pad_pairs(&i(-1), 2).is_err());
        assert_eq!(numpy_pad_width(&i(1), 3).unwrap(), vec![(1, 1); 3]);
        assert_eq!(positive_list(&i(2), 2, "stride").unwrap(), vec![2, 2]);
        assert!(positive_list(&i(0), 2, "stride").is_err());
    }

    #[test]
    fn shape_arithmetic_folds_like_python() {
        let i = Static::Int;
        assert_eq!(fold_binary(&i(7), &i(2), BinaryOp::FloorDiv), Some(i(3)));
        assert_eq!(fold_binary(&i(-7), &i(2), BinaryOp::FloorDiv), Some(i(-4)));
        assert_eq!(fold_binary(&i(7), &i(-2), BinaryOp::FloorDiv), Some(i(-4)));
        assert_eq!(fold_binary(&i(3), &i(4), BinaryOp::Mul), Some(i(12)));
        assert_eq!(fold_binary(&i(1), &i(2), BinaryOp::Div), Some(Static::Float(0.5)));
        assert_eq!(fold_binary(&i(i64::MAX), &i(2), BinaryOp::Mul), None);
    }

    #[test]
    fn suggestions_are_close_names() {
        let known = ["Linear", "LayerNorm", "Relu", "Gelu"];
        assert_eq!(closest("Lineer", &known), vec!["'Linear'"]);
        assert!(closest("Frobnicate", &known).is_empty());
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn sequences_index_like_python() {
        let items: Vec<Val> = (0..5).map(|k| Val::S(Static::Int(k))).collect();
        assert!(matches!(index_seq(&items, false, &Static::Int(-1)).unwrap(), Val::S(Static::Int(4))));
        let sl = Static::Slice { start: None, stop: Some(3), step: None };
        match index_seq(&items, false, &sl).unwrap() {
            Val::S(Static::Seq { items, .. }) => assert_eq!(items, vec![Static::Int(0), Static::Int(1), Static::Int(2)]),
            other => panic!("{other:?}"),
        }
        assert!(index_seq(&items, false, &Static::Int(5)).is_err());
    }
}
