//! From the logical graph to the IR: names the model's inputs as Mithril does,
//! resolves their shapes (command line, data files, shape templates), folds
//! compile-time values (shapes, axes, paddings, slices) and emits one or a few IR ops
//! per primitive through the shared [`Builder`], which checks shapes as it goes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde_json::Value;

use super::attrs::{all_static, fold_binary};
use super::json::{self, ModelNode};
use super::library;
use super::net::{Instance, Net, PNode, SlotId};
use super::template::{template_text, Bindings};
use super::value::Static;
use crate::error::{Error, Result};
use crate::ir::builder::{self, Builder};
use crate::ir::*;
use crate::tensor::{Constant, Tensor};

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
    /// Values of the model's own keys fixed at compile time (`--const NAME=VALUE`,
    /// Mithril's `ml.compile(constant_keys=...)`): `(NAME, value)`, the value as a
    /// connection's `"value"` is written (a scalar, a nested list that is a tensor
    /// where the key is one, ...).
    pub constants: Vec<(String, Value)>,
    /// Top-level keys that are lists of tensors (`--list NAME=N`): each becomes `N`
    /// inputs `NAME_0`, `NAME_1`, ...
    pub list_inputs: Vec<(String, usize)>,
}

/// Reads and compiles a model file.
pub fn load(path: &Path, opts: &Options) -> Result<Graph> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::user(format!("cannot read {file}: {}", crate::error::io_message(&e))))?;
    let name = path.file_stem().map_or("model".to_string(), |s| s.to_string_lossy().into_owned());
    let parsed = json::parse_file(&text, &file)?;
    drop(text); // a large model's text is not kept while it compiles
    Ok(expand_parsed(parsed, &file, &name, opts)?.0)
}

/// Compiles the text of a model file; `file` names it in messages.
pub fn load_str(text: &str, file: &str, name: &str, opts: &Options) -> Result<Graph> {
    Ok(expand(text, file, name, opts)?.0)
}

/// Like [`load_str`], and also lists the Mithril formula of every primitive that
/// computed a tensor, in emission order: the flattened primitive graph as Mithril would
/// have it (the conformance tests compare it with Mithril's own).
pub fn expand(text: &str, file: &str, name: &str, opts: &Options) -> Result<(Graph, Vec<&'static str>)> {
    expand_parsed(json::parse_file(text, file)?, file, name, opts)
}

fn expand_parsed(parsed: json::File, file: &str, name: &str, opts: &Options) -> Result<(Graph, Vec<&'static str>)> {
    (|| {
        let (mut root, losses) = match parsed {
            json::File::Model(root) => (root, None),
            json::File::Train(train) => (train.model, Some((train.losses, train.regularizations))),
        };
        apply_set(&mut root, &opts.set)?;
        let mut net = Net::default();
        let mut inst = net.instantiate(&root, 0)?;
        check_supported(&net)?;
        let mut outputs = net.outputs(&root, &inst)?;
        let loss = match &losses {
            None => None,
            Some((losses, regs)) => {
                net.add_train(&mut inst, &mut outputs, losses, regs)?;
                check_supported(&net)?;
                Some("final_cost")
            }
        };
        for (key, n) in &opts.list_inputs {
            net.list_input(&mut inst, key, *n)?;
        }
        for (key, value) in &opts.constants {
            let slot = *inst.keys.get(key).ok_or_else(|| {
                let mut keys: Vec<&str> = inst.keys.keys().map(String::as_str).filter(|k| !k.starts_with('$')).collect();
                keys.sort();
                Error::user(format!("--const {key}: the model has no key `{key}` (its keys: {})", keys.join(", ")))
            })?;
            if net.slot(slot).producer.is_some() {
                return Err(Error::user(format!("--const {key}: `{key}` is computed by the model, not one of its inputs")));
            }
            let v = Static::from_json(value, false).map_err(|e| Error::user(format!("--const {key}: {e}")))?;
            net.set_value(slot, v, format!("--const {key}"), false)?;
        }
        // The net holds what emission needs (tensor constants included): the model
        // nodes can go.
        drop((root, losses));
        let mut emitter = Emitter::new(&net, opts, name);
        let graph = emitter.run(&inst, &outputs, loss)?;
        Ok((graph, emitter.tensor_formulas))
    })()
    .map_err(|e: Error| e.context(file))
}

/// The model's float type (see [`Emitter::float`]): that of the known inputs other
/// than `params`, or when there are none, of the parameters read in f32 or f64. An f16
/// or bf16 checkpoint does not decide it: most are published so for models that compute
/// in f32.
fn model_float(opts: &Options, params: &BTreeSet<&str>) -> Dtype {
    let floats_of = |parameters: bool| -> BTreeSet<Dtype> {
        let known = opts.known_types.iter().filter(|(name, _)| params.contains(name.as_str()) == parameters);
        known.map(|(_, t)| t.dtype).filter(|d| d.is_float()).collect()
    };
    let mut floats = floats_of(false);
    if floats.is_empty() {
        floats = floats_of(true);
        floats.retain(|d| !matches!(d, Dtype::F16 | Dtype::Bf16));
    }
    match (floats.len(), floats.first()) {
        (1, Some(&only)) => only,
        _ => Dtype::F32,
    }
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
        if let Some(why) = library::unsupported_reason(class) {
            lines.push(format!("{at}: Mithril's {class} is not supported: {why}"));
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
pub(super) enum Val {
    S(Static),
    T(ValueId),
    Seq(Vec<Val>, bool),
}

pub(super) struct Emitter<'a> {
    pub(super) net: &'a Net,
    pub(super) opts: &'a Options,
    /// The graph, and the primitive being emitted (its origin, and its inputs' keys for
    /// messages).
    pub(super) b: Builder,
    pub(super) vals: HashMap<SlotId, Val>,
    /// Names of the model's inputs (slot root → physical name).
    pub(super) input_names: BTreeMap<SlotId, String>,
    /// The formula of each primitive that computed a tensor, in emission order.
    pub(super) tensor_formulas: Vec<&'static str>,
    /// Primitives already emitted, by formula and inputs: a second identical one (the
    /// transpose of a weight two Linears share) reuses the first, as Mithril does.
    /// The key is the inputs' debug text, which shows a tensor constant's shape only,
    /// so each entry keeps its tensor constants to compare.
    emitted: HashMap<String, Vec<(Vec<Constant>, Val)>>,
    /// Inputs whose shapes are being resolved from templates (breaks cycles).
    pub(super) resolving: BTreeSet<SlotId>,
    /// For each value (a slot root), the templates that mention it, in order (the net
    /// no longer changes once emission starts).
    templates_of: HashMap<SlotId, Vec<usize>>,
    /// Why a related input could not be created while resolving templates: when an
    /// input's shape cannot be found, this is the error worth reporting.
    pub(super) root_cause: Option<Error>,
    /// The model's float type, which float constants and parameters take when no
    /// tensor operand gives them one (Mithril: the backend's precision): that of the
    /// float inputs whose types are known, when they agree (or of the f32 or f64
    /// parameters, when no input's type is known); else f32. Parameters read in another
    /// float type are converted to it on load.
    pub(super) float: Dtype,
}

impl<'a> Emitter<'a> {
    fn new(net: &'a Net, opts: &'a Options, name: &str) -> Emitter<'a> {
        Emitter {
            net,
            opts,
            b: Builder::new(name),
            vals: HashMap::new(),
            input_names: BTreeMap::new(),
            tensor_formulas: Vec::new(),
            emitted: HashMap::new(),
            resolving: BTreeSet::new(),
            templates_of: templates_by_slot(net),
            root_cause: None,
            // Set once the inputs are named (`run`): parameters do not vote.
            float: Dtype::F32,
        }
    }

    /// Emits the graph of `outputs`; the one named `loss`, if any, is the loss.
    fn run(&mut self, inst: &Instance, outputs: &[(String, SlotId)], loss: Option<&str>) -> Result<Graph> {
        self.name_inputs(inst);
        let params: BTreeSet<&str> =
            self.input_names.iter().filter(|&(&s, name)| self.trainable(s, name)).map(|(_, name)| name.as_str()).collect();
        self.float = model_float(self.opts, &params);
        let order = self.order(outputs)?;
        for n in order {
            self.emit_node(&self.net.nodes[n])?;
        }
        for (name, slot) in outputs {
            let v = self.value(*slot)?;
            let id = self.tensor(&v, None).map_err(|e| e.context(format!("output `{name}`")))?;
            let loss = loss == Some(name.as_str());
            if loss && (self.b.rank(id) != 0 || !self.b.dtype(id).is_float()) {
                return Err(Error::user(format!("the loss `{name}` is {}, not a float scalar", self.b.graph.ty(id)))
                    .note("give each loss a reduce step that reduces it to a scalar (Mithril's default is Mean)"));
            }
            self.b.graph.outputs.push(Output { name: name.clone(), value: id, loss });
        }
        self.check_templates()?;
        Ok(std::mem::take(&mut self.b).finish())
    }

    /// Mithril's physical names: a key named at the top level keeps its name; other
    /// inputs take the name of the key they came from, numbered `_0, _1, ...` in order
    /// of appearance when that name occurs more than once.
    pub(super) fn name_inputs(&mut self, inst: &Instance) {
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
            let name = if top.contains(&s) || counts[&b] == 1 && !taken.contains(&b) {
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
    pub(super) fn order(&self, outputs: &[(String, SlotId)]) -> Result<Vec<usize>> {
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
    pub(super) fn value(&mut self, slot: SlotId) -> Result<Val> {
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

    pub(super) fn create_input(&mut self, r: SlotId) -> Result<ValueId> {
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
        let trainable = self.trainable(r, &name);
        let dtype = match known {
            // A checkpoint in another float type is converted to the model's on load.
            Some(k) if trainable && k.dtype.is_float() => slot.dtype.filter(|d| d.is_float()).unwrap_or(self.float),
            // A trained parameter is floating point: integers or booleans for it are a
            // wrong file or key, not values to convert (the model would quietly run on
            // truncated weights).
            Some(k) if trainable && slot.dtype.is_none_or(|d| d.is_float()) => {
                return Err(Error::user(format!("parameter `{name}` is {} in the data, but a trained parameter is floating point", k.dtype))
                    .note(format!("give `{name}` as floats (f32, f64, f16 or bf16), e.g. np.asarray(w, np.float32) before saving")));
            }
            Some(k) => k.dtype,
            None => slot.dtype.unwrap_or(Dtype::F32),
        };
        let ty = TensorType::new(dtype, shape);
        Ok(if trainable { self.b.param(&name, ty) } else { self.b.input(&name, ty) })
    }

    /// Whether input slot `r`, named `name`, is a parameter (trainable) rather than data.
    fn trainable(&self, r: SlotId, name: &str) -> bool {
        self.net.slot(r).differentiable == Some(true) && !self.opts.data_keys.contains(name)
    }

    /// The shape of an input implied by the templates it appears in, from the shapes
    /// of the other values in them. Other model inputs of those templates are created
    /// first (their shapes may be known), so `Linear`'s weight can follow its input.
    pub(super) fn template_shape(&mut self, r: SlotId) -> Option<Shape> {
        if !self.resolving.insert(r) {
            return None;
        }
        let net = self.net;
        let mut found = None;
        let mentioning = self.templates_of.get(&r).cloned().unwrap_or_default();
        for t in mentioning.into_iter().map(|i| &net.templates[i]) {
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

    pub(super) fn known_shape(&self, s: SlotId) -> Option<Shape> {
        match self.vals.get(&self.net.find(s)) {
            Some(Val::T(id)) => Some(self.b.graph.ty(*id).shape.clone()),
            _ => None,
        }
    }

    /// Every template group must hold of the shapes the model ended up with.
    pub(super) fn check_templates(&self) -> Result<()> {
        self.net.templates.iter().try_for_each(|t| self.check_template(t))
    }

    /// Checks one template group against the shapes known so far.
    pub(super) fn check_template(&self, t: &super::net::Template) -> Result<()> {
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
    pub(super) fn check_templates_of(&self, r: SlotId) -> Result<()> {
        let mentioning = self.templates_of.get(&r).map_or(&[][..], Vec::as_slice);
        mentioning.iter().try_for_each(|&i| self.check_template(&self.net.templates[i]))
    }

    pub(super) fn slot_label(&self, s: SlotId) -> String {
        let r = self.net.find(s);
        if let Some(n) = self.input_names.get(&r) {
            return n.clone();
        }
        self.net.slot(r).base_name.clone().map_or(format!("${r}"), |(n, _)| n)
    }

    // ---- emission -------------------------------------------------------------

    pub(super) fn emit_node(&mut self, node: &PNode) -> Result<()> {
        self.b.origin = node.origin.clone();
        let mut ins: Vec<(String, Val)> = Vec::new();
        for (k, s) in &node.inputs {
            ins.push((k.clone(), self.value(*s)?));
        }
        let identity = format!("{:?} {ins:?}", node.formula);
        let mut constants = Vec::new();
        for (_, v) in &ins {
            tensor_constants(v, &mut constants);
        }
        let same = |(c, _): &&(Vec<Constant>, Val)| c.len() == constants.len() && c.iter().zip(&constants).all(|(a, b)| a.same_text(b));
        if let Some((_, v)) = self.emitted.get(&identity).and_then(|earlier| earlier.iter().find(same)) {
            let v = v.clone();
            self.vals.insert(self.net.find(node.output), v);
            return Ok(());
        }
        self.b.operands = ins
            .iter()
            .filter_map(|(k, v)| match v {
                Val::T(id) => Some((k.clone(), *id)),
                _ => None,
            })
            .collect();
        let out = self.formula(node, &ins).map_err(|e| {
            if e.kind != crate::ErrorKind::User || e.message.starts_with(&node.origin) {
                return e;
            }
            // Say which tensors the primitive got, unless the message already does.
            let tensors: Vec<String> = ins
                .iter()
                .filter_map(|(k, v)| match v {
                    Val::T(id) => Some(format!("{k} = {}", self.b.describe(*id).trim_start_matches(&format!("{k} = ")))),
                    _ => None,
                })
                .collect();
            let e = e.context(&node.origin);
            if e.notes.is_empty() && !tensors.is_empty() {
                e.note(format!("inputs: {}", tensors.join(", ")))
            } else {
                e
            }
        })?;
        if let Val::T(id) = out {
            let n = &mut self.b.graph.nodes[id.index()];
            if n.name.is_none() && !matches!(n.op, Op::Input | Op::Param) {
                if let Some((name, depth)) = &self.net.slot(node.output).base_name {
                    if *depth == 0 {
                        n.name = Some(name.clone());
                    }
                }
            }
        }
        // Primitives folded to constants are compile-time values, as in Mithril.
        if let Val::T(id) = out {
            if !matches!(self.b.graph.node(id).op, Op::Constant(_)) {
                self.tensor_formulas.push(node.formula.key());
            }
        }
        self.emitted.entry(identity).or_default().push((constants, out.clone()));
        self.vals.insert(self.net.find(node.output), out);
        Ok(())
    }

    /// A tensor operand. A compile-time scalar takes `like`'s dtype when given
    /// (NumPy's weak Python scalars), else the model's float type for floats and i32
    /// for ints. A tensor constant of the file (`{"tensor": ...}`, read as f64) takes
    /// the model's float type too: the file gives it no type of its own.
    pub(super) fn tensor(&mut self, v: &Val, like: Option<Dtype>) -> Result<ValueId> {
        match v {
            Val::T(id) => Ok(*id),
            Val::S(Static::Tensor(c)) if c.dtype() == Dtype::F64 && self.float != Dtype::F64 => {
                let t = c.to_tensor();
                Ok(self.b.constant(Tensor::new(self.float, t.shape, t.data)))
            }
            Val::S(s) => {
                let float = like.filter(|d| d.is_float()).unwrap_or(self.float);
                let int = like.unwrap_or(Dtype::I32);
                let t = match s {
                    Static::Float(_) if like.is_some_and(|d| !d.is_float()) => s.to_constant(self.float, int),
                    _ => s.to_constant(float, int),
                }
                .ok_or_else(|| Error::user(format!("expected a tensor, got the value {s}")))?;
                Ok(self.b.constant(t))
            }
            Val::Seq(items, _) => {
                if let Some(s) = all_static(items) {
                    return self.tensor(&Val::S(s), like);
                }
                Err(Error::user("expected a tensor, got a list of tensors".to_string()))
            }
        }
    }

    pub(super) fn arg<'v>(&self, ins: &'v [(String, Val)], key: &str) -> Result<&'v Val> {
        ins.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
            .ok_or_else(|| Error::internal(format!("{}: primitive has no input `{key}`", self.b.origin)))
    }

    pub(super) fn t(&mut self, ins: &[(String, Val)], key: &str) -> Result<ValueId> {
        let v = self.arg(ins, key)?.clone();
        self.tensor(&v, None).map_err(|e| e.context(format!("`{key}`")))
    }

    pub(super) fn s(&self, ins: &[(String, Val)], key: &str) -> Result<Static> {
        match self.arg(ins, key)? {
            Val::S(s) => Ok(s.clone()),
            Val::Seq(items, _) => all_static(items).ok_or_else(|| Error::user(format!("`{key}` must be known at compile time"))),
            Val::T(_) => Err(Error::user(format!("`{key}` must be known at compile time, but it is a tensor computed by the model"))),
        }
    }

    pub(super) fn int(&self, ins: &[(String, Val)], key: &str) -> Result<i64> {
        let s = self.s(ins, key)?;
        s.as_int().ok_or_else(|| Error::user(format!("`{key}` must be an integer, got {s}")))
    }

    pub(super) fn flag(&self, ins: &[(String, Val)], key: &str) -> Result<bool> {
        let s = self.s(ins, key)?;
        s.as_bool().ok_or_else(|| Error::user(format!("`{key}` must be True or False, got {s}")))
    }

    pub(super) fn unary(&mut self, ins: &[(String, Val)], u: UnaryOp) -> Result<Val> {
        let x = self.t(ins, "input")?;
        Ok(Val::T(self.b.unary(u, x)?))
    }

    /// A binary op on two operands; compile-time operands fold (shape arithmetic).
    pub(super) fn binary(&mut self, l: &Val, r: &Val, b: BinaryOp) -> Result<Val> {
        if let (Val::S(a), Val::S(c)) = (l, r) {
            if let Some(v) = fold_binary(a, c, b) {
                return Ok(Val::S(v));
            }
        }
        let like = |v: &Val, g: &Graph| match v {
            Val::T(id) => Some(g.ty(*id).dtype),
            _ => None,
        };
        let (dl, dr) = (like(l, &self.b.graph), like(r, &self.b.graph));
        let a = self.tensor(l, dr)?;
        let c = self.tensor(r, dl)?;
        Ok(Val::T(self.b.binary(b, a, c)?))
    }

    pub(super) fn bin(&mut self, ins: &[(String, Val)], lk: &str, rk: &str, b: BinaryOp) -> Result<Val> {
        let (l, r) = (self.arg(ins, lk)?.clone(), self.arg(ins, rk)?.clone());
        self.binary(&l, &r, b)
    }

    /// `axis` as Mithril's reductions take it: None (all), an int, or a tuple.
    pub(super) fn axes(&self, s: &Static, rank: usize) -> Result<Vec<usize>> {
        let mut v = match s {
            Static::None => (0..rank).collect(),
            other => {
                let ints = other.as_ints().ok_or_else(|| Error::user(format!("`axis` must be None, an int or a tuple of ints, got {other}")))?;
                ints.iter().map(|&a| builder::axis(a, rank)).collect::<Result<Vec<_>>>()?
            }
        };
        v.sort();
        // NumPy refuses a repeated axis (`sum(axis=(1, 1))`, or 1 and -1 of a rank-2
        // tensor) rather than reducing it once; so does Mithril's numpy backend.
        if let Some(w) = v.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::user(format!("`axis` {s} names axis {} more than once (rank {rank})", w[0])));
        }
        Ok(v)
    }

    pub(super) fn reduce(&mut self, ins: &[(String, Val)], kind: ReduceKind) -> Result<Val> {
        let x = self.t(ins, "input")?;
        let axes = self.axes(&self.s(ins, "axis")?, self.b.rank(x))?;
        let keepdim = self.flag(ins, "keepdim")?;
        Ok(Val::T(self.b.reduce(kind, x, axes, keepdim)?))
    }

    /// Mithril's `polynomial_features` of `input [N, d]`: every monomial of degree 1
    /// to `degree` in the columns, in the order `combinations_with_replacement` gives
    /// over `[1, x_1, ..., x_d]` (the first, all ones, dropped), each a product of
    /// column slices, concatenated along axis 1.
    pub(super) fn polynomial_features(&mut self, ins: &[(String, Val)]) -> Result<Val> {
        let x = self.t(ins, "input")?;
        let degree = self.int(ins, "degree")?;
        let shape = self.b.shape(x);
        let d = match shape.0.as_slice() {
            [_, Dim::Known(d)] => *d as usize,
            _ => return Err(Error::user(format!("polynomial features need an input [N, d] with d known, got {shape}"))),
        };
        // The feature count is C(d + degree, degree) - 1; past this, no real model.
        const MAX_FEATURES: f64 = 65536.0;
        let count = |degree: i64| (1..=degree).fold(1.0, |c, k| c * (d as f64 + k as f64) / k as f64) - 1.0;
        if degree < 1 || degree as f64 > MAX_FEATURES || count(degree) > MAX_FEATURES {
            return Err(Error::user(format!("polynomial features of degree {degree} over {d} columns: the degree must be 1 or more and give at most {MAX_FEATURES} features")));
        }
        let all = Static::Slice { start: None, stop: None, step: None };
        let mut cols = Vec::new();
        for j in 0..d as i64 {
            let col = Static::tuple(vec![all.clone(), Static::Slice { start: Some(j), stop: Some(j + 1), step: None }]);
            cols.push(self.index_tensor(x, &col)?);
        }
        let degree = degree as usize;
        let mut combo = vec![0usize; degree];
        let mut features = Vec::new();
        loop {
            let mut product: Option<ValueId> = None;
            for &c in combo.iter().filter(|&&c| c > 0) {
                product = Some(match product {
                    None => cols[c - 1],
                    Some(p) => self.b.binary(BinaryOp::Mul, p, cols[c - 1])?,
                });
            }
            features.extend(product);
            // The next combination: raise the last entry below d, and all after it to match.
            let Some(i) = (0..degree).rev().find(|&i| combo[i] < d) else { break };
            let v = combo[i] + 1;
            combo[i..].iter_mut().for_each(|c| *c = v);
        }
        Ok(Val::T(self.b.op(Op::Concat { axis: 1 }, features)?))
    }

    pub(super) fn reshape(&mut self, x: ValueId, target: &Static) -> Result<ValueId> {
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
                Static::Dim(d) => Some(d.clone()),
                other => return Err(Error::user(format!("bad size {other} in reshape target {target}"))),
            });
        }
        let shape = builder::resolve_infer_dim(&self.b.shape(x), &dims).map_err(|m| Error::user(format!("reshape {} to {target}: {m}", self.b.shape(x))))?;
        self.b.reshape(x, shape)
    }

    /// `x[index]` on a tensor: ints, slices, None and at most one Ellipsis, as NumPy's
    /// basic indexing: a slice of the indexed dimensions, then a reshape that drops the
    /// int-indexed ones and inserts the `None` ones.
    pub(super) fn index_tensor(&mut self, x: ValueId, index: &Static) -> Result<ValueId> {
        let mut items = match index {
            Static::Seq { items, list: false } => items.clone(),
            other => vec![other.clone()],
        };
        let shape = self.b.shape(x);
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
                        d => return Err(Error::user(format!("cannot slice the symbolic dimension {d} of {shape}"))),
                    });
                    ranges.push(r);
                }
                other => {
                    return Err(Error::user(format!("unsupported index {other} (ints, slices, None and ... index a tensor)")))
                }
            }
        }
        let sliced = if ranges.iter().all(SliceRange::is_full) { x } else { self.b.op(Op::Slice { ranges }, vec![x])? };
        let out = Shape(out_dims);
        if self.b.shape(sliced) == out {
            Ok(sliced)
        } else {
            self.b.reshape(sliced, out)
        }
    }

}

/// The tensor constants in a value, in order.
fn tensor_constants(v: &Val, out: &mut Vec<Constant>) {
    fn of_static(s: &Static, out: &mut Vec<Constant>) {
        match s {
            Static::Tensor(t) => out.push(t.clone()),
            Static::Seq { items, .. } => items.iter().for_each(|s| of_static(s, out)),
            _ => {}
        }
    }
    match v {
        Val::S(s) => of_static(s, out),
        Val::T(_) => {}
        Val::Seq(items, _) => items.iter().for_each(|v| tensor_constants(v, out)),
    }
}

/// For each value (a slot root), the indices of the templates that mention it, in
/// order, each once.
fn templates_by_slot(net: &Net) -> HashMap<SlotId, Vec<usize>> {
    let mut out: HashMap<SlotId, Vec<usize>> = HashMap::new();
    for (i, t) in net.templates.iter().enumerate() {
        for (s, _) in &t.entries {
            let list = out.entry(net.find(*s)).or_default();
            if list.last() != Some(&i) {
                list.push(i);
            }
        }
    }
    out
}

/// A `--shape` with symbols that the data's concrete shape instantiates
/// (`B,784` and `[1, 784]`): the data decides.
fn binds_to(template: &Shape, concrete: &Shape) -> bool {
    let mut seen: BTreeMap<&str, &Dim> = BTreeMap::new();
    template.rank() == concrete.rank()
        && template.0.iter().zip(&concrete.0).all(|(t, c)| match t {
            Dim::Sym(s) => *seen.entry(s.as_str()).or_insert(c) == c,
            _ => t == c,
        })
}

#[cfg(test)]
mod tests {
    use super::*;






    #[test]
    fn suggestions_are_close_names() {
        let known = ["Linear", "LayerNorm", "Relu", "Gelu"];
        assert_eq!(closest("Lineer", &known), vec!["'Linear'"]);
        assert!(closest("Frobnicate", &known).is_empty());
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn primitives_are_shared_only_with_equal_tensor_constants() {
        // Three adds of the same input: the first and last with equal constants (one
        // add), the middle one with a constant of the same shape but other values.
        let add = |t: &str, out: &str| format!(r#"{{"left": {{"key": {{"name": "x"}}}}, "right": {{"tensor": {t}}}, "output": {{"key": {{"name": "{out}"}}}}}}"#);
        let text = format!(
            r#"{{"name": "Model", "connections": {{"m_0": {}, "m_1": {}, "m_2": {}}},
                "submodels": {{"m_0": {{"name": "Add"}}, "m_1": {{"name": "Add"}}, "m_2": {{"name": "Add"}}}}}}"#,
            add("[1.5, 2.0]", "a"),
            add("[1.5, 3.0]", "b"),
            add("[1.5, 2.0]", "c")
        );
        let opts = Options { shapes: [("x".to_string(), Shape::known(&[2]))].into_iter().collect(), ..Options::default() };
        let (graph, formulas) = expand(&text, "three_adds.json", "three_adds", &opts).unwrap();
        assert_eq!(formulas, ["add", "add"]);
        let outputs: Vec<ValueId> = graph.outputs.iter().map(|o| o.value).collect();
        assert_eq!(outputs[0], outputs[2]);
        assert_ne!(outputs[0], outputs[1]);
        let constant = |o: usize| match graph.node(graph.node(outputs[o]).args[1]).op {
            Op::Constant(c) => graph.consts[c.0 as usize].values().collect::<Vec<f64>>(),
            _ => Vec::new(),
        };
        assert_eq!((constant(0), constant(1)), (vec![1.5, 2.0], vec![1.5, 3.0]));
    }
}
