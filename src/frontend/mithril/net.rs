//! Building Mithril's logical graph: model nodes instantiated into primitive nodes
//! over *slots*, where every slot is one value of the model.
//!
//! Mithril's connections are unions of values, not producer→consumer edges: a key
//! named `x` in two children, or a `connect` to another child's key, says "these are
//! the same value". Slots are therefore kept in a union-find; a slot's producer is the
//! primitive whose `output` it is, and a slot with no producer and no value is an
//! input of the whole model.

use std::cell::Cell;
use std::collections::{BTreeSet, HashSet};

use indexmap::IndexMap;

use super::json::{self, describe, Conn, KeyRef, LossNode, ModelNode, RegArg, RegNode, TemplateDim};
use super::library::{self, Formula, Keys};
use super::value::Static;
use crate::error::{Error, Result};
use crate::ir::Dtype;

pub type SlotId = usize;

/// What is known about one value of the model.
#[derive(Debug, Clone, Default)]
pub struct Slot {
    /// A compile-time value, and where it came from (for messages).
    pub value: Option<(Static, String)>,
    /// A default or constructor value that a connection may still override.
    pub value_is_weak: bool,
    /// The value exists in Mithril but was not written to the JSON (a constructor
    /// argument the class does not record): the message to give if it is needed.
    pub lost: Option<String>,
    /// The key name this value carries in the outermost model that names it, and the
    /// depth of that model (0 = the file's top level).
    pub base_name: Option<(String, usize)>,
    /// Set by `assigned_differentiabilities`, or by a library model's parameter key.
    pub differentiable: Option<bool>,
    /// Element type implied by `assigned_types` or the library (`Embedding` indices).
    pub dtype: Option<Dtype>,
    /// Creation order, which decides Mithril's `_0`, `_1` numbering of input names.
    pub seq: usize,
    /// The primitive node whose output this is.
    pub producer: Option<usize>,
}

/// One primitive operation of the logical graph.
#[derive(Debug, Clone)]
pub struct PNode {
    pub formula: Formula,
    /// Input keys in the class's key order, each with its slot.
    pub inputs: Vec<(String, SlotId)>,
    pub output: SlotId,
    /// `submodels.m_3 (Linear)`: the model node this primitive belongs to.
    pub origin: String,
}

/// A group of shape templates whose named dimensions must agree (Mithril's
/// `set_shapes` and the shape templates of library models).
#[derive(Debug, Clone)]
pub struct Template {
    pub origin: String,
    /// From the file's `assigned_shapes`: unbound symbols become symbolic dimensions.
    pub user: bool,
    pub entries: Vec<(SlotId, Vec<TemplateDim>)>,
}

/// An instantiated model node: its keys in external order, and its canonical input
/// and output (what an unnamed `$n` key of a child `Model` refers to).
#[derive(Debug, Clone, Default)]
pub struct Instance {
    pub keys: Keys,
    pub cin: Option<SlotId>,
    pub cout: Option<SlotId>,
    /// A class this frontend cannot expand: its keys are made up on demand so the
    /// rest of the file can still be checked.
    pub unsupported: bool,
}

#[derive(Debug, Default)]
pub struct Net {
    /// The union-find forest. `find` halves the paths it walks (through `Cell`s, so
    /// it can while the emitter holds the net shared); that never changes a root, so
    /// which slot stands for a value is the same as without it, and a value fanned
    /// out to thousands of keys does not make every later `find` walk thousands of
    /// links.
    parent: Vec<Cell<SlotId>>,
    slots: Vec<Slot>,
    pub nodes: Vec<PNode>,
    pub templates: Vec<Template>,
    /// Classes that could not be expanded: (description, class), reported together.
    pub unsupported: Vec<(String, String)>,
}

impl Net {
    pub fn new_slot(&mut self) -> SlotId {
        let id = self.slots.len();
        self.parent.push(Cell::new(id));
        self.slots.push(Slot { seq: id, ..Slot::default() });
        id
    }

    pub fn find(&self, mut s: SlotId) -> SlotId {
        loop {
            let p = self.parent[s].get();
            if p == s {
                return s;
            }
            let grandparent = self.parent[p].get();
            self.parent[s].set(grandparent);
            s = grandparent;
        }
    }

    pub fn slot(&self, s: SlotId) -> &Slot {
        &self.slots[self.find(s)]
    }

    fn slot_mut(&mut self, s: SlotId) -> &mut Slot {
        let r = self.find(s);
        &mut self.slots[r]
    }

    /// Makes `a` and `b` the same value. `what` describes the connection for messages.
    pub fn union(&mut self, a: SlotId, b: SlotId, what: &str) -> Result<()> {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra == rb {
            return Ok(());
        }
        let sb = std::mem::take(&mut self.slots[rb]);
        let sa = &mut self.slots[ra];
        if let (Some(pa), Some(pb)) = (sa.producer, sb.producer) {
            return Err(Error::user(format!(
                "{what}: connects two outputs together (of {} and {})",
                self.nodes[pa].origin, self.nodes[pb].origin
            )));
        }
        sa.producer = sa.producer.or(sb.producer);
        match (&sa.value, sb.value) {
            (_, None) => {}
            (None, Some(v)) => {
                sa.value = Some(v);
                sa.value_is_weak = sb.value_is_weak;
            }
            (Some((va, fa)), Some((vb, fb))) => {
                if sa.value_is_weak && !sb.value_is_weak {
                    sa.value = Some((vb, fb));
                    sa.value_is_weak = false;
                } else if !sb.value_is_weak && !sa.value_is_weak && *va != vb {
                    return Err(Error::user(format!("{what}: joins two different values: {va} ({fa}) and {vb} ({fb})")));
                }
            }
        }
        if sa.lost.is_none() {
            sa.lost = sb.lost;
        }
        sa.base_name = match (sa.base_name.take(), sb.base_name) {
            (Some(x), Some(y)) => Some(if y.1 < x.1 { y } else { x }),
            (x, y) => x.or(y),
        };
        sa.differentiable = sa.differentiable.or(sb.differentiable);
        sa.dtype = sa.dtype.or(sb.dtype);
        sa.seq = sa.seq.min(sb.seq);
        self.parent[rb].set(ra);
        Ok(())
    }

    /// Sets a slot's value. A weak value (a default) yields to a later strong one.
    pub fn set_value(&mut self, s: SlotId, v: Static, from: String, weak: bool) -> Result<()> {
        let slot = self.slot_mut(s);
        match &slot.value {
            Some((old, old_from)) if !slot.value_is_weak && !weak && *old != v => {
                return Err(Error::user(format!("{from}: value {v} conflicts with {old} ({old_from})")));
            }
            Some(_) if weak && !slot.value_is_weak => return Ok(()),
            _ => {}
        }
        slot.value = Some((v, from));
        slot.value_is_weak = weak;
        slot.lost = None;
        Ok(())
    }

    /// Records that key `name` of a model at `depth` is this value (outer names win).
    pub fn name_slot(&mut self, s: SlotId, name: &str, depth: usize) {
        let slot = self.slot_mut(s);
        if slot.base_name.as_ref().is_none_or(|(_, d)| depth <= *d) {
            slot.base_name = Some((name.to_string(), depth));
        }
    }

    /// Makes top-level key `key` a list of `n` tensors, each an input of its own named
    /// `key_0`, `key_1`, ... (differentiable when the key is), as Mithril's
    /// `set_values(key=[Tensor(), ...])` does; the key becomes their `ToList`.
    pub fn list_input(&mut self, inst: &mut Instance, key: &str, n: usize) -> Result<()> {
        let what = format!("--list {key}={n}");
        let slot = *inst.keys.get(key).ok_or_else(|| Error::user(format!("{what}: the model has no key `{key}`")))?;
        let root = self.find(slot);
        if self.slots[root].producer.is_some() || self.slots[root].value.is_some() {
            return Err(Error::user(format!("{what}: `{key}` is not an input of the model")));
        }
        if n == 0 {
            return Err(Error::user(format!("{what}: a list input needs at least one tensor")));
        }
        let differentiable = self.slots[root].differentiable;
        let mut items = Vec::with_capacity(n);
        for i in 0..n {
            let name = format!("{key}_{i}");
            if inst.keys.contains_key(&name) {
                return Err(Error::user(format!("{what}: the model already has a key `{name}`")));
            }
            let item = self.new_slot();
            self.slots[item].differentiable = differentiable;
            self.name_slot(item, &name, 0);
            inst.keys.insert(name, item);
            items.push((format!("input{}", i + 1), item));
        }
        self.add_node(Formula::ToList, items, root, what)
    }

    pub fn add_node(&mut self, formula: Formula, inputs: Vec<(String, SlotId)>, output: SlotId, origin: String) -> Result<()> {
        let idx = self.nodes.len();
        let out = self.slot_mut(output);
        if out.producer.is_some() {
            return Err(Error::internal(format!("{origin}: slot {output} has two producers")));
        }
        out.producer = Some(idx);
        self.nodes.push(PNode { formula, inputs, output, origin });
        Ok(())
    }

    /// Adds a Mithril `TrainModel`'s losses and regularizations to its instantiated
    /// model, as `TrainModel.add_loss`, `add_regularization` and `finalize` build them,
    /// and appends the output `final_cost`:
    ///
    /// - each loss model is wired to the model's keys by name (a name the model lacks,
    ///   like `target`, becomes an input), reduced by its reduce steps (default: `Mean`
    ///   of everything) and scaled by its `coef`; the losses are summed (Mithril's
    ///   default loss combiner, `Sum` over their `Concat`);
    /// - each regularizer is wired the same way (a `{"pattern": p}` argument makes one
    ///   regularizer per input key that `p` finds); its output is divided by the
    ///   geometric mean, over the losses that depend on the regularized key, of the
    ///   number of elements each loss's `Mean`/`Min`/`Max` steps reduce; then summed,
    ///   times its `coef`, summed again and added to the losses.
    pub fn add_train(&mut self, inst: &mut Instance, outputs: &mut Vec<(String, SlotId)>, losses: &[LossNode], regs: &[RegNode]) -> Result<()> {
        // Each loss's value and the (input, axis) of its reductions that count elements.
        let mut built: Vec<(SlotId, Vec<(SlotId, SlotId)>)> = Vec::new();
        for (i, loss) in losses.iter().enumerate() {
            let at = format!("losses[{i}]");
            let li = self.instantiate(&loss.model, 1)?;
            if li.unsupported {
                continue; // reported with the other unsupported classes
            }
            for (key, name) in &loss.args {
                self.wire_train_arg(inst, &loss.model, &li, key, name, &format!("{at}.args.{key}"))?;
            }
            let missing = || Error::user(format!("{at}: {} has no single output", loss.model.describe()));
            let mut out = li.cout.ok_or_else(missing)?;
            let mean;
            let steps: Vec<&ModelNode> = if loss.reduce_steps.is_empty() {
                mean = json::parse_value(&serde_json::json!({"name": "Mean"}), &format!("{at}.reduce_steps[0]"))?;
                vec![&mean]
            } else {
                loss.reduce_steps.iter().collect()
            };
            let mut reduced = Vec::new();
            for step in steps {
                let si = self.instantiate(step, 1)?;
                let bad = || Error::user(format!("{}: a reduce step needs one input and one output", step.describe()));
                self.union(si.cin.ok_or_else(bad)?, out, &step.describe())?;
                if matches!(step.class.as_str(), "Mean" | "Min" | "Max") {
                    let axis = *si.keys.get("axis").ok_or_else(bad)?;
                    reduced.push((out, axis));
                }
                out = si.cout.ok_or_else(bad)?;
            }
            if let Some(c) = loss.coef {
                out = self.apply("Multiply", vec![("left", In::Slot(out)), ("right", In::Const(Static::Float(c)))], &format!("{at}.coef"))?;
            }
            built.push((out, reduced));
        }
        let mut total: Option<SlotId> = None;
        for &(out, _) in &built {
            total = Some(match total {
                None => out,
                Some(sum) => self.apply("Add", vec![("left", In::Slot(sum)), ("right", In::Slot(out))], "final_cost")?,
            });
        }
        let Some(mut cost) = total else { return Err(Error::user("losses: no loss could be built".to_string())) };
        for (i, reg) in regs.iter().enumerate() {
            for term in self.add_regularization(inst, reg, &built, &format!("regularizations[{i}]"))? {
                cost = self.apply("Add", vec![("left", In::Slot(cost)), ("right", In::Slot(term))], "final_cost")?;
            }
        }
        self.name_slot(cost, "final_cost", 0);
        inst.keys.insert("final_cost".into(), cost);
        outputs.push(("final_cost".into(), self.find(cost)));
        Ok(())
    }

    /// One regularization entry: its terms `sum(coef * sum(reg / size))`, one per
    /// regularized key (see [`Net::add_train`]).
    fn add_regularization(&mut self, inst: &mut Instance, reg: &RegNode, losses: &[(SlotId, Vec<(SlotId, SlotId)>)], at: &str) -> Result<Vec<SlotId>> {
        // The key that names what is regularized: `reg_key`, else the canonical input.
        let reg_str = match &reg.reg_key {
            Some(k) => k.clone(),
            None => {
                let probe = self.instantiate(&reg.model, 1)?;
                let cin = probe.cin.map(|c| self.find(c));
                probe.keys.iter().find(|(_, &s)| Some(self.find(s)) == cin).map(|(k, _)| k.clone()).ok_or_else(|| {
                    Error::user(format!("{at}: {} has no canonical input; give `reg_key`", reg.model.describe()))
                })?
            }
        };
        // One set of arguments per regularized key: a pattern selects the train
        // model's input keys it finds (Python's `re.search`).
        let mut arg_sets: Vec<IndexMap<String, String>> = Vec::new();
        let patterns: Vec<&String> = reg.args.values().filter_map(|a| match a { RegArg::Pattern(p) => Some(p), RegArg::Key(_) => None }).collect();
        match patterns.as_slice() {
            [] => arg_sets.push(reg.args.iter().map(|(k, a)| (k.clone(), match a { RegArg::Key(n) | RegArg::Pattern(n) => n.clone() })).collect()),
            [p] if reg.args.len() == 1 => {
                let re = regex::Regex::new(p).map_err(|e| Error::user(format!("{at}.args: pattern {p:?}: {e}")))?;
                for (key, &slot) in &inst.keys {
                    let slot = self.slot(slot);
                    if slot.producer.is_none() && slot.value.is_none() && !key.starts_with('$') && re.is_match(key) {
                        arg_sets.push(IndexMap::from([(reg_str.clone(), key.clone())]));
                    }
                }
            }
            _ => return Err(Error::user(format!("{at}.args: a pattern is only allowed as a regularizer's single argument"))),
        }
        // A one-element tensor coefficient acts as a Python float: Mithril makes it a
        // tensor of the backend's float type, which a weak scalar takes too.
        let scalar = if reg.coef_is_tensor { reg.coef.as_f64().or_else(|| reg.coef.as_array().filter(|a| a.len() == 1).and_then(|a| a[0].as_f64())) } else { None };
        let coef = match scalar {
            Some(c) => Static::Float(c),
            None => Static::from_json(&reg.coef, reg.coef_is_tensor).map_err(|e| Error::user(format!("{at}.coef: {e}")))?,
        };
        let mut terms = Vec::new();
        for args in arg_sets {
            let ri = self.instantiate(&reg.model, 1)?;
            if ri.unsupported {
                continue; // reported with the other unsupported classes
            }
            for (key, name) in &args {
                self.wire_train_arg(inst, &reg.model, &ri, key, name, &format!("{at}.args.{key}"))?;
            }
            let mut out = *ri.keys.get("output").ok_or_else(|| Error::user(format!("{at}: {} has no `output` key", reg.model.describe())))?;
            let outer = args.get(&reg_str).and_then(|n| inst.keys.get(n)).copied();
            // The element counts of the losses that depend on the regularized key.
            let mut sizes = Vec::new();
            for (loss, reduced) in losses {
                if !outer.is_some_and(|k| self.depends_on(*loss, k)) {
                    continue;
                }
                let mut size = In::Const(Static::Int(1));
                for &(input, axis) in reduced {
                    let n = self.apply("Size", vec![("input", In::Slot(input)), ("dim", In::Slot(axis))], &format!("{at}: reduce size"))?;
                    size = In::Slot(self.apply("Multiply", vec![("left", size), ("right", In::Slot(n))], &format!("{at}: reduce size"))?);
                }
                sizes.push(size);
            }
            if let Some(first) = sizes.first() {
                let n = sizes.len();
                let mut mean = match first { In::Slot(s) => In::Slot(*s), In::Const(v) => In::Const(v.clone()) };
                for size in sizes.into_iter().skip(1) {
                    mean = In::Slot(self.apply("Multiply", vec![("left", mean), ("right", size)], &format!("{at}: geometric mean"))?);
                }
                if n > 1 {
                    mean = In::Slot(self.apply("Power", vec![("base", mean), ("exponent", In::Const(Static::Float(1.0 / n as f64)))], &format!("{at}: geometric mean"))?);
                }
                out = self.apply("Divide", vec![("numerator", In::Slot(out)), ("denominator", mean)], &format!("{at}: geometric mean"))?;
            }
            let sum = self.apply("Sum", vec![("input", In::Slot(out))], &format!("{at}: sum"))?;
            let scaled = self.apply("Multiply", vec![("left", In::Slot(sum)), ("right", In::Const(coef.clone()))], &format!("{at}.coef"))?;
            terms.push(self.apply("Sum", vec![("input", In::Slot(scaled))], &format!("{at}: sum"))?);
        }
        Ok(terms)
    }

    /// Wires key `key` of an instantiated loss or regularizer to the train model's key
    /// `name` (a name the model lacks becomes a new input, like a loss's `target`).
    fn wire_train_arg(&mut self, inst: &mut Instance, model: &ModelNode, mi: &Instance, key: &str, name: &str, what: &str) -> Result<()> {
        let slot = *mi.keys.get(key).ok_or_else(|| {
            Error::user(format!(
                "{what}: {} has no key `{key}` (its keys: {})",
                model.describe(),
                mi.keys.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })?;
        match inst.keys.get(name) {
            Some(&s) => self.union(s, slot, what),
            None => {
                self.name_slot(slot, name, 0);
                inst.keys.insert(name.to_string(), slot);
                Ok(())
            }
        }
    }

    /// Whether value `from` is computed from value `target`.
    fn depends_on(&self, from: SlotId, target: SlotId) -> bool {
        let target = self.find(target);
        let mut seen = HashSet::new();
        let mut stack = vec![self.find(from)];
        while let Some(s) = stack.pop() {
            if s == target {
                return true;
            }
            if !seen.insert(s) {
                continue;
            }
            if let Some(p) = self.slot(s).producer {
                stack.extend(self.nodes[p].inputs.iter().map(|(_, i)| self.find(*i)));
            }
        }
        false
    }

    /// Instantiates library class `class` with the given inputs (slots or constants)
    /// and returns its `output`.
    fn apply(&mut self, class: &str, inputs: Vec<(&str, In)>, path: &str) -> Result<SlotId> {
        let node = json::parse_value(&serde_json::json!({"name": class}), path)?;
        let inst = self.instantiate(&node, 1)?;
        for (key, input) in inputs {
            let slot = *inst.keys.get(key).ok_or_else(|| Error::internal(format!("{path}: {class} has no key `{key}`")))?;
            match input {
                In::Slot(s) => self.union(slot, s, path)?,
                In::Const(v) => self.set_value(slot, v, path.to_string(), false)?,
            }
        }
        inst.keys.get("output").copied().ok_or_else(|| Error::internal(format!("{path}: {class} has no output")))
    }

    /// The model's outputs: named top-level keys that some primitive produces and
    /// nothing consumes, or that the file exposes (`ml.compile`'s rule).
    pub fn outputs(&self, root: &ModelNode, inst: &Instance) -> Result<Vec<(String, SlotId)>> {
        let consumed: BTreeSet<SlotId> = self.nodes.iter().flat_map(|n| n.inputs.iter().map(|(_, s)| self.find(*s))).collect();
        let exposed_keys: HashSet<&str> = root.exposed_keys.iter().map(String::as_str).collect();
        let mut outs = Vec::new();
        for (key, &slot) in &inst.keys {
            let r = self.find(slot);
            if key.starts_with('$') || self.slot(r).producer.is_none() {
                continue;
            }
            let exposed = exposed_keys.contains(key.as_str()) || library::is_exposed_output(&root.class, key);
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

    /// Instantiates a model node (and its subtree) at `depth`.
    pub fn instantiate(&mut self, node: &ModelNode, depth: usize) -> Result<Instance> {
        if node.is_composite() {
            self.composite(node, depth)
        } else if let Some(spec) = library::primitive(&node.class) {
            self.primitive(node, spec, depth)
        } else if library::COMPOSITES.contains(&node.class.as_str()) {
            let keys = library::expand_composite(self, node, depth)?;
            let cin = keys.get("input").copied();
            let cout = keys.get("output").copied();
            self.apply_assigned(node, &keys, &IndexMap::new())?;
            Ok(Instance { keys, cin, cout, unsupported: false })
        } else {
            self.unsupported.push((node.describe(), node.class.clone()));
            Ok(Instance { unsupported: true, ..Instance::default() })
        }
    }

    fn primitive(&mut self, node: &ModelNode, spec: &library::PrimSpec, depth: usize) -> Result<Instance> {
        let origin = node.describe();
        let mut input_keys: Vec<String> = spec.inputs.iter().map(|k| k.to_string()).collect();
        let mut formula = spec.formula;
        let arg_int = |key: &str| node.args.get(key).and_then(|v| v.as_u64());
        match formula {
            // Variadic: `input1..inputN`, with N from the constructor.
            Formula::ToTuple | Formula::ToList | Formula::Union => {
                let n = arg_int("n").unwrap_or_else(|| {
                    node.exposed_keys.iter().filter(|k| k.starts_with("input")).count().max(1) as u64
                });
                // Each input is a key to build and connect; a count past any real model's
                // is refused before building them (4e9 keys would exhaust memory).
                const MAX_INPUTS: u64 = 1 << 16;
                if n > MAX_INPUTS {
                    return Err(Error::user(format!("{origin}: n = {n} inputs is more than {MAX_INPUTS}")));
                }
                input_keys = (1..=n).map(|i| format!("input{i}")).collect();
            }
            // `robust=True` selects Mithril's guarded formula, which takes a threshold.
            Formula::Log | Formula::Sqrt | Formula::Power if node.args.get("robust").and_then(|v| v.as_bool()) == Some(true) => {
                formula = match formula {
                    Formula::Log => Formula::RobustLog,
                    Formula::Sqrt => Formula::RobustSqrt,
                    _ => Formula::RobustPower,
                };
                input_keys.push("threshold".into());
            }
            // `input_type` picks the formula; log-probabilities take no threshold.
            Formula::CrossEntropyWithLogits | Formula::BinaryCrossEntropyWithLogits => {
                formula = formula.for_input_type(node.args.get("input_type")).map_err(|e| Error::user(format!("{origin}: {e}")))?;
                if formula == Formula::CrossEntropyWithLogProbs {
                    input_keys.retain(|k| k != "threshold" && k != "robust");
                }
            }
            Formula::Conv2dBias | Formula::Conv1dBias if node.args.get("use_bias").and_then(|v| v.as_bool()) == Some(false) => {
                input_keys.retain(|k| k != "bias");
                formula = if formula == Formula::Conv2dBias { Formula::Conv2d } else { Formula::Conv1d };
            }
            _ => {}
        }
        let mut keys = Keys::new();
        for k in &input_keys {
            let s = self.new_slot();
            self.name_slot(s, k, depth);
            keys.insert(k.clone(), s);
        }
        let mut defaults: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(spec.defaults).map_err(|e| Error::internal(format!("defaults of {}: {e}", spec.class)))?;
        if matches!(formula, Formula::RobustLog | Formula::RobustSqrt | Formula::RobustPower) {
            defaults.insert("threshold".into(), "Constant.MIN_POSITIVE_NORMAL".into());
        }
        // A class default is a value only where Mithril kept it: such inputs are listed
        // in `exposed_keys`. An input left out was made a plain input (e.g.
        // `ScaledDotProduct(use_attn_mask=True)` turns `attn_mask` into one).
        let valued = |k: &str| !node.has_exposed_keys || node.exposed_keys.iter().any(|e| e == k);
        for (k, v) in &defaults {
            if !valued(k) {
                continue;
            }
            if let Some(&s) = keys.get(k) {
                let v = Static::from_json(v, false).map_err(Error::internal)?;
                self.set_value(s, v, format!("default of `{k}` of {origin}"), true)?;
            }
        }
        for (k, v) in &node.args {
            if matches!(v, serde_json::Value::String(s) if s == "TBD") {
                continue;
            }
            if let Some(&s) = keys.get(k) {
                let v = Static::from_json(v, false).map_err(|e| Error::user(format!("{origin}: argument `{k}`: {e}")))?;
                self.set_value(s, v, format!("argument `{k}` of {origin}"), true)?;
            }
        }
        // Exposed input keys carry a value in Mithril; if the JSON lost it, say so
        // when (and only if) the value is needed.
        for k in &node.exposed_keys {
            if let Some(&s) = keys.get(k) {
                if self.slot(s).value.is_none() {
                    self.slot_mut(s).lost = Some(format!(
                        "{origin}: the value of `{k}` was set in Python but Mithril did not write it to the JSON; give it with --set '{}{k}=VALUE'",
                        if node.path.is_empty() { String::new() } else { format!("{}.", node.path) }
                    ));
                }
            }
        }
        // Categorical cross entropy (the default) takes class indices.
        if formula.is_cross_entropy() && node.args.get("categorical").and_then(|v| v.as_bool()) != Some(false) {
            if let Some(&s) = keys.get("target") {
                self.slot_mut(s).dtype.get_or_insert(Dtype::I32);
            }
        }
        if formula == Formula::Embedding {
            if let Some(&s) = keys.get("input") {
                self.slot_mut(s).dtype.get_or_insert(Dtype::I32);
            }
            if let Some(&w) = keys.get("weight") {
                self.slot_mut(w).differentiable.get_or_insert(true);
                // Embedding(num_embeddings, dim) fixes the table's shape when given.
                let arg = |k: &str| node.args.get(k).and_then(|v| v.as_u64()).map(TemplateDim::Known);
                if let (Some(n), Some(d)) = (arg("num_embeddings"), arg("dim")) {
                    self.templates.push(Template { origin: origin.clone(), user: false, entries: vec![(w, vec![n, d])] });
                }
            }
        }
        if matches!(formula, Formula::Conv2dBias | Formula::Conv1dBias | Formula::Conv2d | Formula::Conv1d) {
            for k in ["weight", "bias"] {
                if let Some(&s) = keys.get(k) {
                    self.slot_mut(s).differentiable.get_or_insert(true);
                }
            }
        }
        let out = self.new_slot();
        self.name_slot(out, "output", depth);
        let inputs = input_keys.iter().map(|k| (k.clone(), keys[k])).collect();
        self.add_node(formula, inputs, out, origin)?;
        let cin = input_keys.first().map(|k| keys[k]);
        keys.insert("output".into(), out);
        self.apply_assigned(node, &keys, &IndexMap::new())?;
        Ok(Instance { keys, cin, cout: Some(out), unsupported: false })
    }

    fn composite(&mut self, node: &ModelNode, depth: usize) -> Result<Instance> {
        let start = self.nodes.len();
        let mut children: IndexMap<String, (Instance, &ModelNode)> = IndexMap::new();
        for (id, child) in &node.submodels {
            let inst = self.instantiate(child, depth + 1)?;
            children.insert(id.clone(), (inst, child));
        }
        let mut named: Keys = Keys::new();
        for id in children.keys() {
            let Some(conns) = node.connections.get(id) else { continue };
            for (key, conn) in conns {
                let what = format!("{}: connections.{id}.{key}", node.describe());
                let slot = self.child_key(&children, id, key, &what)?;
                match conn {
                    Conn::Key { name, value, connect, differentiable, ty } => {
                        if let Some(d) = differentiable {
                            self.slot_mut(slot).differentiable = Some(*d);
                        }
                        if let Some(d) = ty.as_ref().and_then(tensor_dtype) {
                            self.slot_mut(slot).dtype = Some(d);
                        }
                        for (other, other_key) in connect {
                            if !children.contains_key(other) {
                                return Err(Error::user(format!(
                                    "{what}: connects to {other}.{other_key}, but there is no submodel {other} (children: {})",
                                    children.keys().cloned().collect::<Vec<_>>().join(", ")
                                )));
                            }
                            let target = self.child_key(&children, other, other_key, &what)?;
                            self.union(slot, target, &what)?;
                        }
                        if let Some(n) = name {
                            match named.get(n) {
                                Some(&s) => self.union(s, slot, &what)?,
                                None => {
                                    named.insert(n.clone(), slot);
                                }
                            }
                            self.name_slot(slot, n, depth);
                        }
                        if let Some(v) = value {
                            let v = Static::from_json(v, false).map_err(|e| Error::user(format!("{what}: {e}")))?;
                            self.set_value(slot, v, what.clone(), false)?;
                        }
                    }
                    Conn::Const(value) => {
                        let v = Static::from_json(value, false).map_err(|e| Error::user(format!("{what}: {e}")))?;
                        self.set_value(slot, v, what.clone(), false)?;
                    }
                    Conn::Tensor(value) => {
                        let v = Static::tensor_from_json(value).map_err(|e| Error::user(format!("{what}: {e}")))?;
                        self.set_value(slot, v, what.clone(), false)?;
                    }
                }
            }
        }
        // Canonical input and output: those of the children that stay an input / an
        // output of this model (Mithril's cin/cout bookkeeping).
        let consumed: BTreeSet<SlotId> =
            self.nodes[start..].iter().flat_map(|n| n.inputs.iter().map(|(_, s)| self.find(*s))).collect();
        let cout = children
            .values()
            .rev()
            .filter_map(|(inst, _)| inst.cout)
            .find(|&s| !consumed.contains(&self.find(s)));
        let cin = children
            .values()
            .filter_map(|(inst, _)| inst.cin)
            .find(|&s| self.slot(s).producer.is_none());
        self.apply_assigned(node, &named, &children)?;
        Ok(Instance { keys: named, cin, cout, unsupported: false })
    }

    /// The slot of key `key` of child `id`. `$n` keys of a child `Model` that its own
    /// connections never name are its canonical output (if exposed) or input.
    fn child_key(
        &mut self,
        children: &IndexMap<String, (Instance, &ModelNode)>,
        id: &str,
        key: &str,
        what: &str,
    ) -> Result<SlotId> {
        let (inst, child) = &children[id];
        if let Some(&s) = inst.keys.get(key) {
            return Ok(s);
        }
        if inst.unsupported {
            return Ok(self.new_slot());
        }
        if key.starts_with('$') && child.is_composite() {
            let canonical = if child.exposed_keys.iter().any(|k| k == key) { inst.cout } else { inst.cin };
            if let Some(s) = canonical {
                return Ok(s);
            }
        }
        Err(Error::user(format!(
            "{what}: {} has no key `{key}` (its keys: {})",
            describe(&child.path, &child.class),
            inst.keys.keys().cloned().collect::<Vec<_>>().join(", ")
        )))
    }

    /// `assigned_shapes`, `assigned_types` and `assigned_differentiabilities` of a node.
    fn apply_assigned(&mut self, node: &ModelNode, own: &Keys, children: &IndexMap<String, (Instance, &ModelNode)>) -> Result<()> {
        let resolve = |r: &KeyRef| -> Result<SlotId> {
            let bad = || Error::user(format!("{}: assigned info refers to a missing key {r:?}", node.describe()));
            match r {
                KeyRef::Named(n) => own.get(n).copied().ok_or_else(bad),
                KeyRef::Child(m, i) if m == "self" => own.get_index(*i).map(|(_, s)| *s).ok_or_else(bad),
                KeyRef::Child(m, i) => {
                    let (inst, _) = children.get(m).ok_or_else(bad)?;
                    inst.keys.get_index(*i).map(|(_, s)| *s).ok_or_else(bad)
                }
            }
        };
        for group in &node.assigned_shapes {
            let mut entries = Vec::new();
            for (r, dims) in group {
                entries.push((resolve(r)?, dims.clone()));
            }
            self.templates.push(Template { origin: format!("{}: assigned_shapes", node.describe()), user: true, entries });
        }
        for (r, d) in &node.assigned_differentiabilities {
            let s = resolve(r)?;
            self.slot_mut(s).differentiable = Some(*d);
        }
        for (r, ty) in &node.assigned_types {
            let s = resolve(r)?;
            if let Some(d) = tensor_dtype(ty) {
                self.slot_mut(s).dtype = Some(d);
            }
        }
        Ok(())
    }
}

/// `{"Tensor": ["int"]}` → i32; a float or mixed tensor type says nothing definite.
fn tensor_dtype(ty: &serde_json::Value) -> Option<Dtype> {
    let elems = ty.get("Tensor")?;
    let names: Vec<&str> = match elems {
        serde_json::Value::Array(a) => a.iter().filter_map(|v| v.as_str()).collect(),
        serde_json::Value::String(s) => vec![s.as_str()],
        _ => return None,
    };
    match names.as_slice() {
        ["int"] => Some(Dtype::I32),
        ["bool"] => Some(Dtype::Bool),
        _ => None,
    }
}

/// An input of a primitive being built by a library expansion: a slot, or a constant.
pub enum In {
    Slot(SlotId),
    Const(Static),
}

impl From<SlotId> for In {
    fn from(s: SlotId) -> In {
        In::Slot(s)
    }
}

impl From<Static> for In {
    fn from(v: Static) -> In {
        In::Const(v)
    }
}

/// Builds the inside of one named library model.
pub struct Scope<'a> {
    pub net: &'a mut Net,
    node: &'a ModelNode,
    depth: usize,
    keys: Keys,
}

impl<'a> Scope<'a> {
    pub fn new(net: &'a mut Net, node: &'a ModelNode, depth: usize) -> Scope<'a> {
        Scope { net, node, depth, keys: Keys::new() }
    }

    pub fn origin(&self) -> String {
        self.node.describe()
    }

    /// The model's key `name` (created on first use).
    pub fn key(&mut self, name: &str) -> SlotId {
        if let Some(&s) = self.keys.get(name) {
            return s;
        }
        let s = self.net.new_slot();
        self.net.name_slot(s, name, self.depth);
        self.keys.insert(name.to_string(), s);
        s
    }

    /// A trainable parameter key (differentiable unless the file says otherwise).
    pub fn param(&mut self, name: &str) -> SlotId {
        let s = self.key(name);
        self.net.slot_mut(s).differentiable.get_or_insert(true);
        s
    }

    /// Gives a key its constructor value (which the parent's connections may override).
    pub fn set_value(&mut self, s: SlotId, v: Static, arg: &str) -> Result<()> {
        let from = format!("argument `{arg}` of {}", self.origin());
        self.net.set_value(s, v, from, true)
    }

    fn input(&mut self, i: In) -> Result<SlotId> {
        Ok(match i {
            In::Slot(s) => s,
            In::Const(v) => {
                let s = self.net.new_slot();
                let from = format!("a constant inside {}", self.origin());
                self.net.set_value(s, v, from, false)?;
                s
            }
        })
    }

    /// Adds primitive `formula` with the given inputs; returns its output slot.
    pub fn prim(&mut self, formula: Formula, inputs: Vec<(&str, In)>) -> Result<SlotId> {
        let out = self.net.new_slot();
        self.prim_into(formula, inputs, out)?;
        Ok(out)
    }

    /// Adds primitive `formula` whose output is the existing slot `out`.
    pub fn prim_into(&mut self, formula: Formula, inputs: Vec<(&str, In)>, out: SlotId) -> Result<()> {
        let mut resolved = Vec::new();
        for (k, i) in inputs {
            resolved.push((k.to_string(), self.input(i)?));
        }
        let origin = self.origin();
        self.net.add_node(formula, resolved, out, origin)
    }

    pub fn union(&mut self, a: SlotId, b: SlotId) -> Result<()> {
        let what = self.origin();
        self.net.union(a, b, &what)
    }

    /// Adds a group of shape templates (named dimensions shared across the group).
    pub fn template(&mut self, entries: Vec<(SlotId, Vec<TemplateDim>)>) {
        let origin = self.origin();
        self.net.templates.push(Template { origin, user: false, entries });
    }

    /// Instantiates a nested model node (an activation argument) one level deeper.
    pub fn instantiate(&mut self, node: &ModelNode) -> Result<Keys> {
        Ok(self.net.instantiate(node, self.depth + 1)?.keys)
    }

    /// Puts the keys in Mithril's external key order (others keep their order after).
    pub fn order(&mut self, order: &[&str]) {
        let mut keys = Keys::new();
        for k in order {
            if let Some((name, s)) = self.keys.shift_remove_entry(*k) {
                keys.insert(name, s);
            }
        }
        keys.extend(self.keys.drain(..));
        self.keys = keys;
    }

    pub fn finish(self) -> Keys {
        self.keys
    }
}

/// Template dimensions from names: `dims(&["B", "C", "d"])`.
pub fn dims(names: &[&str]) -> Vec<TemplateDim> {
    names.iter().map(|n| TemplateDim::Sym(n.to_string())).collect()
}
