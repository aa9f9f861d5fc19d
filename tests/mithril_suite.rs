//! Mithril's own test cases (`tests/mithril_suite/*.json`, from synnada-ai/mithril at
//! the pinned commit; see its README) on the interpreter and on the C target, in
//! float64 as Mithril runs them and cast to float32, compared with Mithril's numbers.
//!
//! Each case becomes what `mithrilc run` takes, following Mithril's harness
//! (`tests/scripts/helper.py::evaluate_case` and `test_utils.py::finalize_model`):
//! - `model` is the model file; `output_specs` (with `final_loss_combiner` and
//!   `regularizations`) make it a TrainModel file as `train_model_to_dict` writes one.
//! - Every entry of `inputs` that Mithril differentiates (a key of `results.grad`) is a
//!   parameter, given as data; every other entry, and every `static_keys` entry, is a
//!   value fixed at compile time (`--const`), as Mithril's `constant_keys` are.
//! - `output_grads` are the output cotangents (`output_grad/NAME`); an output without
//!   one gets zeros, as Mithril's `evaluate(output_gradients=...)` gives it. A
//!   TrainModel is differentiated through its loss.
//! - The outputs, less `discard_keys`, must be the case's outputs when it lists any
//!   (the harness asserts it).
//! - Every parameter's gradient is derived (`--grad`); the set of gradients must be
//!   Mithril's, and each output and gradient of `results` must match.
//! - `primitives_directed_test.json`'s older form (a class name, one `output_grad`, an
//!   unnamed result) is read as a model of that one class whose inputs with a gradient
//!   are differentiable; `error_test.json`'s cases pass when the harness would raise
//!   for them too (mithrilc refuses the model, or its outputs are not the case's).
//!
//! A case passes in a mode when its numbers are within 1e-10 absolute + 1e-10 relative
//! of Mithril's in float64 (both compute in float64; only summation orders differ) and
//! 1e-4 + 1e-3 relative in float32 (Mithril's float64 numbers against ours from
//! rounded data). The report prints the pass rate per file and per class and every
//! failure with its reason. `tests/mithril_suite/passing.txt` lists the cases that
//! pass in each mode: one of them failing fails the test. A case that runs and gives
//! numbers other than Mithril's (rather than being refused with an error) also fails
//! the test unless `tests/mithril_suite/differs.txt` lists it with the reason (and an
//! entry there that no longer differs fails it too).
//!
//! `MITHRILC_SUITE_UPDATE=1` rewrites `passing.txt`; `MITHRILC_SUITE_EXPORT=DIR` writes
//! every case as a directory for `mithrilc run` (`model.json`, `data.npz`,
//! `expected.npz`, `run.sh`); `MITHRILC_SUITE_ONLY=SUBSTRING` runs only matching cases.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use serde_json::{json, Map, Value};

use mithrilc::pipeline::Graphs;
use mithrilc::data;
use mithrilc::frontend::mithril;
use mithrilc::ir::{Dtype, Op, Shape, TensorType};
use mithrilc::passes::autodiff::Wrt;
use mithrilc::tensor::Tensor;

use crate::common::{self, c_build};

const FILES: &[&str] = &[
    "models_directed_test",
    "integration_directed_test",
    "no_grad_inference_test",
    "primitives_directed_test",
    "error_test",
];

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mithril_suite")
}

/// One of Mithril's cases, converted.
struct Case {
    /// Every model class the case uses (for the per-class report).
    classes: BTreeSet<String>,
    /// The model file's JSON.
    model: Value,
    /// `--const NAME=VALUE`.
    constants: Vec<(String, Value)>,
    /// The differentiated inputs, in float64 (ints and bools as Mithril types them).
    params: Vec<(String, Tensor)>,
    /// Given output cotangents, by output name.
    cotangents: BTreeMap<String, Tensor>,
    /// Mithril's outputs and gradients (by parameter name).
    outputs: Vec<(String, Tensor)>,
    grads: Vec<(String, Tensor)>,
    /// Mithril refuses the model (`error_test.json`).
    expect_error: bool,
    /// Outputs the case drops (Mithril's `compile(discard_keys=...)`).
    discard: BTreeSet<String>,
    /// `--list KEY=N`: inputs that are lists of tensors.
    lists: Vec<(String, usize)>,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Mode {
    InterpF64,
    InterpF32,
    CF64,
    CF32,
    JitF64,
    JitF32,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::InterpF64 => "interp-f64",
            Mode::InterpF32 => "interp-f32",
            Mode::CF64 => "c-f64",
            Mode::CF32 => "c-f32",
            Mode::JitF64 => "jit-f64",
            Mode::JitF32 => "jit-f32",
        }
    }

    fn dtype(self) -> Dtype {
        match self {
            Mode::InterpF64 | Mode::CF64 | Mode::JitF64 => Dtype::F64,
            Mode::InterpF32 | Mode::CF32 | Mode::JitF32 => Dtype::F32,
        }
    }

    /// (absolute, relative) tolerance.
    fn tolerance(self) -> (f64, f64) {
        if self.dtype() == Dtype::F64 {
            (1e-10, 1e-10)
        } else {
            (1e-4, 1e-3)
        }
    }
}

/// A nested JSON list (or a scalar) as a tensor, typed as Mithril's `determine_dtype`
/// types it at 64-bit precision: float64 if any element is a float, else int64 if any
/// is an int, else bool.
fn tensor(v: &Value) -> Result<Tensor, String> {
    fn walk(v: &Value, depth: usize, shape: &mut Vec<u64>, data: &mut Vec<f64>, kind: &mut u8) -> Result<(), String> {
        match v {
            Value::Array(items) => {
                if shape.len() == depth {
                    shape.push(items.len() as u64);
                } else if shape[depth] != items.len() as u64 {
                    return Err("a ragged list".into());
                }
                items.iter().try_for_each(|it| walk(it, depth + 1, shape, data, kind))
            }
            _ if shape.len() != depth => Err("a ragged list".into()),
            Value::Bool(b) => {
                data.push(f64::from(u8::from(*b)));
                Ok(())
            }
            Value::Number(n) => {
                *kind = (*kind).max(if n.is_f64() { 2 } else { 1 });
                data.push(n.as_f64().unwrap());
                Ok(())
            }
            other => Err(format!("not a number: {other}")),
        }
    }
    let (mut shape, mut data, mut kind) = (Vec::new(), Vec::new(), 0u8);
    walk(v, 0, &mut shape, &mut data, &mut kind)?;
    let dtype = [Dtype::Bool, Dtype::I64, Dtype::F64][kind as usize];
    Ok(Tensor::new(dtype, shape, data))
}

/// A reference value: per-backend values (`{"numpy": ..., "torch": ...}`) give the
/// NumPy backend's, whose formulas mithrilc follows.
fn reference(v: &Value) -> &Value {
    match v {
        Value::Object(m) => m.get("numpy").unwrap_or(v),
        _ => v,
    }
}

/// Every class name in a model node (and its nested model-valued args).
fn classes(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::String(s) => {
            out.insert(s.clone());
        }
        Value::Object(m) => {
            if let Some(Value::String(name)) = m.get("name") {
                if name != "Model" {
                    out.insert(name.clone());
                }
            }
            for key in ["submodels", "args"] {
                if let Some(Value::Object(children)) = m.get(key) {
                    for c in children.values() {
                        if c.get("name").is_some() || key == "submodels" {
                            classes(c, out);
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

/// A loss or reduce step given as a class name or `{"fn": name, "params": {...}}`.
fn model_node(spec: &Value) -> Result<Value, String> {
    match spec {
        Value::String(name) => Ok(json!({ "name": name })),
        Value::Object(m) => {
            if m.get("call_kwargs").is_some_and(|k| k.as_object().is_some_and(|k| !k.is_empty())) {
                return Err("a loss with tensor call arguments".into());
            }
            let name = m.get("fn").and_then(Value::as_str).ok_or("a loss without `fn`")?;
            Ok(json!({ "name": name, "args": m.get("params").cloned().unwrap_or(json!({})) }))
        }
        _ => Err(format!("a loss given as {spec}")),
    }
}

/// `finalize_model`: the TrainModel file for a case with `output_specs`.
fn train_model(case: &Map<String, Value>, model: Value) -> Result<Value, String> {
    let specs = case["output_specs"].as_object().ok_or("output_specs is not an object")?;
    let mut losses = Vec::new();
    for (output, spec) in specs {
        if spec.get("metrics").and_then(Value::as_array).is_some_and(|m| !m.is_empty()) {
            return Err("metrics".into());
        }
        let Some(loss) = spec.get("loss") else { continue };
        let mut args = Map::new();
        args.insert("input".into(), json!(output));
        if let Some(target) = spec.get("target_key").and_then(Value::as_str) {
            args.insert("target".into(), json!(target));
        }
        let steps: Vec<Value> = spec.get("reduce_steps").and_then(Value::as_array).cloned().unwrap_or_default();
        let steps = steps.iter().map(model_node).collect::<Result<Vec<_>, _>>()?;
        losses.push(json!({ "model": model_node(loss)?, "reduce_steps": steps, "args": args }));
    }
    let mut regularizations = Vec::new();
    for reg in case.get("regularizations").and_then(Value::as_array).into_iter().flatten() {
        let reg = reg.as_object().ok_or("a regularization is not an object")?;
        let mut args = Map::new();
        for (k, v) in reg {
            if !["model", "regex", "coef"].contains(&k.as_str()) {
                let regex = reg.get("regex").and_then(Value::as_bool).unwrap_or(false);
                args.insert(k.clone(), if regex { json!({ "pattern": v }) } else { v.clone() });
            }
        }
        regularizations.push(json!({
            "model": model_node(&reg["model"])?,
            "coef": reg["coef"],
            "reg_key": Value::Null,
            "args": args,
        }));
    }
    // `train_model_to_dict` does not write the loss combiner (Mithril's default is
    // `Sum`); of one loss, `Mean` is the same.
    let combiner = case.get("final_loss_combiner").and_then(Value::as_str).unwrap_or("Sum");
    if combiner != "Sum" && losses.len() > 1 {
        return Err(format!("a `{combiner}` loss combiner, which Mithril's TrainModel JSON cannot record"));
    }
    Ok(json!({ "is_train_model": true, "model": model, "losses": losses, "regularizations": regularizations }))
}

/// Converts one case, or says why it cannot be run.
fn convert(file: &str, raw: &Value) -> Result<Case, String> {
    let mut case = raw.as_object().ok_or("not an object")?.clone();
    if let Some(Value::Object(train)) = case.remove("train_context") {
        // An alternative spelling of a TrainModel: its losses name their model's output.
        let mut specs = Map::new();
        for loss in train.get("losses").and_then(Value::as_array).into_iter().flatten() {
            let output = loss.get("input").and_then(Value::as_str).ok_or("a train_context loss without `input`")?;
            specs.insert(
                output.to_string(),
                json!({ "loss": loss["model"], "reduce_steps": loss.get("reduces").cloned().unwrap_or(json!([])), "target_key": loss.get("target") }),
            );
        }
        case.insert("output_specs".into(), Value::Object(specs));
        for key in ["model", "regularizations", "final_loss_combiner"] {
            if let Some(v) = train.get(key) {
                case.insert(key.into(), v.clone());
            }
        }
    }
    let case = &case;
    // `pre_gradient` (an intermediate Jacobian the old per-primitive harness checked),
    // `diag_zero: false` (the default) and `constants` (keys of the older classes,
    // `input2`, that today's have not; the case still lists their gradients) change
    // nothing that is compared here.
    if case.get("diag_zero").is_some_and(|d| d != &json!(false)) {
        return Err("uses `diag_zero`, an option of the older per-primitive harness".into());
    }
    if case.contains_key("injected_static_keys") {
        return Err("uses the harness option `injected_static_keys`, which sets values inside Mithril's Python objects".into());
    }
    let primitive = file == "primitives_directed_test";
    let results = case.get("results").and_then(Value::as_object).ok_or("no results")?;
    let mut want_grads: Map<String, Value> = results.get("grad").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut model = match &case["model"] {
        Value::String(class) => json!({ "name": class }),
        m => m.clone(),
    };
    if primitive {
        // The old per-primitive form differentiates the inputs it lists gradients for.
        let diff: Vec<Value> = want_grads.keys().map(|k| json!([k, true])).collect();
        if !diff.is_empty() {
            model["assigned_differentiabilities"] = Value::Array(diff);
        }
    }
    let mut found = BTreeSet::new();
    classes(&model, &mut found);
    let mut model = if case.contains_key("output_specs") { train_model(case, model)? } else { model };
    if let Value::Object(m) = &model {
        for loss in m.get("losses").and_then(Value::as_array).into_iter().flatten() {
            classes(&loss["model"], &mut found);
        }
        for reg in m.get("regularizations").and_then(Value::as_array).into_iter().flatten() {
            classes(&reg["model"], &mut found);
        }
    }
    let mut inputs = case.get("inputs").and_then(Value::as_object).cloned().unwrap_or_default();
    if primitive && found.contains("Concat") && inputs.contains_key("input1") {
        // The older Concat(n=...) had keys input1 .. inputN: today's list input.
        let n = inputs.len();
        let item = |m: &Map<String, Value>, i: usize| m.get(&format!("input{i}")).cloned().ok_or(format!("Concat(n={n}) has no input{i}"));
        let items = (1..=n).map(|i| item(&inputs, i)).collect::<Result<Vec<_>, _>>()?;
        let grads = (1..=n).map(|i| item(&want_grads, i)).collect::<Result<Vec<_>, _>>()?;
        inputs = Map::from_iter([("input".to_string(), Value::Array(items)), ("is_list".to_string(), json!(true))]);
        want_grads = Map::from_iter([("input".to_string(), Value::Array(grads))]);
        if let Some(args) = model.get_mut("args").and_then(Value::as_object_mut) {
            args.remove("n");
        }
    }
    let mut constants = Vec::new();
    let mut params = Vec::new();
    let mut lists = Vec::new();
    let mut grads = Vec::new();
    if inputs.remove("is_list").is_some_and(|v| v == json!(true)) {
        // Each input is a list of tensors, made differentiable by the harness
        // (`set_values(key=[Tensor(differentiable=True), ...])`): `--list KEY=N`, its
        // items inputs KEY_0, KEY_1, ... with a gradient each.
        let mut differentiable = Vec::new();
        for (k, v) in &inputs {
            let items = v.as_array().ok_or_else(|| format!("list input {k} is not a list"))?;
            lists.push((k.clone(), items.len()));
            differentiable.push(json!([k, true]));
            for (i, item) in items.iter().enumerate() {
                params.push((format!("{k}_{i}"), tensor(item).map_err(|e| format!("input {k}[{i}]: {e}"))?));
            }
            let want: &[Value] = want_grads.get(k).and_then(Value::as_array).map_or(&[], Vec::as_slice);
            for (i, g) in want.iter().enumerate() {
                grads.push((format!("{k}_{i}"), tensor(reference(g)).map_err(|e| format!("gradient {k}[{i}]: {e}"))?));
            }
        }
        model["assigned_differentiabilities"] = Value::Array(differentiable);
    } else {
        for (k, v) in &inputs {
            if want_grads.contains_key(k) {
                params.push((k.clone(), tensor(v).map_err(|e| format!("input {k}: {e}"))?));
            } else {
                constants.push((k.clone(), v.clone()));
            }
        }
        for (k, v) in want_grads.iter().filter(|(_, v)| !v.is_null()) {
            grads.push((k.clone(), tensor(reference(v)).map_err(|e| format!("gradient {k}: {e}"))?));
        }
    }
    for key in ["static_keys", "static_inputs"] {
        for (k, v) in case.get(key).and_then(Value::as_object).into_iter().flatten() {
            constants.push((k.clone(), v.clone()));
        }
    }
    let mut cotangents = BTreeMap::new();
    let mut outputs = Vec::new();
    if primitive {
        if let Some(g) = case.get("output_grad") {
            cotangents.insert("output".to_string(), tensor(g)?);
        }
        outputs.push(("output".to_string(), tensor(reference(&results["eval"]))?));
    } else {
        for (k, g) in case.get("output_grads").and_then(Value::as_object).into_iter().flatten() {
            cotangents.insert(k.clone(), tensor(g).map_err(|e| format!("output_grad {k}: {e}"))?);
        }
        for (k, v) in results.get("eval").and_then(Value::as_object).into_iter().flatten() {
            outputs.push((k.clone(), tensor(reference(v)).map_err(|e| format!("result {k}: {e}"))?));
        }
    }
    // As Mithril matches them: ignoring case (`l2` is L2).
    let canonical = mithril::known_classes();
    let found = found.into_iter().map(|c| canonical.iter().find(|k| k.eq_ignore_ascii_case(&c)).map_or(c, |k| k.to_string())).collect();
    Ok(Case {
        classes: found,
        model,
        constants,
        params,
        cotangents,
        outputs,
        grads,
        expect_error: file == "error_test",
        lists,
        discard: case.get("discard_keys").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(String::from).collect(),
    })
}

/// Every case of every file: converted, or the reason it is skipped.
fn cases() -> &'static Vec<(String, Result<Case, String>)> {
    static CASES: OnceLock<Vec<(String, Result<Case, String>)>> = OnceLock::new();
    CASES.get_or_init(|| {
        let only = std::env::var("MITHRILC_SUITE_ONLY").unwrap_or_default();
        let mut out = Vec::new();
        for file in FILES {
            let text = std::fs::read_to_string(suite_dir().join(format!("{file}.json"))).unwrap();
            let all: Map<String, Value> = serde_json::from_str(&text).unwrap();
            for (name, raw) in &all {
                let id = format!("{file}/{name}");
                if id.contains(&only) {
                    out.push((id, convert(file, raw)));
                }
            }
        }
        out
    })
}

/// Casts float64 data to `dtype` (other dtypes stay).
fn cast(t: &Tensor, dtype: Dtype) -> Tensor {
    if t.dtype == Dtype::F64 {
        Tensor::new(dtype, t.shape.clone(), t.data.clone())
    } else {
        t.clone()
    }
}

/// The frontend's graphs for a case and its feeds, in `mode`'s float type.
fn prepare(case: &Case, mode: Mode) -> Result<(Graphs, BTreeMap<String, Tensor>), String> {
    let dtype = mode.dtype();
    let params: BTreeMap<String, Tensor> = case.params.iter().map(|(k, t)| (k.clone(), cast(t, dtype))).collect();
    let mut opts = mithril::Options { constants: case.constants.clone(), list_inputs: case.lists.clone(), ..Default::default() };
    for (k, t) in &params {
        opts.known_types.insert(k.clone(), TensorType::new(t.dtype, Shape::known(&t.shape)));
    }
    let text = case.model.to_string();
    let graph = mithril::load_str(&text, "model.json", "model", &opts).map_err(|e| e.to_string())?;
    let wrt = if graph.params().next().is_some() { Wrt::AllParams } else { Wrt::None };
    let graphs = Graphs::new(graph, &wrt, |_, _| {}).map_err(|e| e.to_string())?;
    let g = graphs.main();
    let mut feeds = BTreeMap::new();
    for v in g.inputs().chain(g.params()) {
        let node = g.node(v);
        let name = node.name.clone().unwrap_or_default();
        let t = if let Some(out) = name.strip_prefix("output_grad/") {
            let shape = node.ty.shape.as_known().ok_or_else(|| format!("output {out} has no static shape"))?;
            match case.cotangents.get(out) {
                Some(t) => Tensor::new(node.ty.dtype, t.shape.clone(), t.data.clone()),
                None => Tensor::new(node.ty.dtype, shape.clone(), vec![0.0; shape.iter().product::<u64>() as usize]),
            }
        } else {
            params.get(&name).cloned().ok_or_else(|| format!("the model's {} `{name}` {} is not in the case", if node.op == Op::Param { "parameter" } else { "input" }, node.ty))?
        };
        feeds.insert(name, t);
    }
    Ok((graphs, feeds))
}

/// How a case ended in one mode.
enum Outcome {
    Pass,
    /// mithrilc refused it (an error, as a user would see).
    Refused(String),
    /// It ran and gave other numbers (or other outputs) than Mithril.
    Differs(String),
}

/// Compares `got` with Mithril's value: how many elements are off, and the first.
/// NaN matches NaN (an element is off unless it equals or is within the bound).
fn differs(name: &str, got: &Tensor, want: &Tensor, (atol, rtol): (f64, f64)) -> Option<String> {
    if got.shape != want.shape {
        return Some(format!("{name}: shape {:?}, Mithril {:?}", got.shape, want.shape));
    }
    let within = |(g, w): (&f64, &f64)| g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= atol + rtol * w.abs();
    let off: Vec<usize> = got.data.iter().zip(&want.data).enumerate().filter(|&(_, p)| !within(p)).map(|(i, _)| i).collect();
    let &i = off.first()?;
    Some(format!("{name}{:?}: {} of {} differ; at flat index {i}: {}, Mithril {}", want.shape, off.len(), want.data.len(), got.data[i], want.data[i]))
}

/// How a case ends; an `error_test.json` case passes when the harness would raise for
/// it too: mithrilc refuses it, or its outputs are not the ones the case lists.
fn judge(case: &Case, mode: Mode, got: Result<Vec<(String, Tensor)>, String>) -> Outcome {
    match compare(case, mode, got) {
        Outcome::Pass if case.expect_error => Outcome::Differs("Mithril's harness raises on this case; mithrilc ran it and matched".into()),
        _ if case.expect_error => Outcome::Pass,
        outcome => outcome,
    }
}

fn compare(case: &Case, mode: Mode, got: Result<Vec<(String, Tensor)>, String>) -> Outcome {
    let got = match got {
        Err(e) => return Outcome::Refused(e),
        Ok(g) => g,
    };
    let by_name: BTreeMap<&str, &Tensor> = got.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut problems = Vec::new();
    // The harness asserts that the model's outputs are the case's, when it lists any.
    let ours: BTreeSet<&str> = got.iter().map(|(n, _)| n.as_str()).filter(|n| !n.starts_with("grad/") && !case.discard.contains(*n)).collect();
    let theirs: BTreeSet<&str> = case.outputs.iter().map(|(n, _)| n.as_str()).collect();
    if !theirs.is_empty() && ours != theirs {
        problems.push(format!("outputs {ours:?}, Mithril {theirs:?}"));
    }
    for (name, want) in &case.outputs {
        if let Some(t) = by_name.get(name.as_str()) {
            problems.extend(differs(name, t, want, mode.tolerance()));
        }
    }
    let ours: BTreeSet<&str> = got.iter().filter_map(|(n, _)| n.strip_prefix("grad/")).collect();
    let theirs: BTreeSet<&str> = case.grads.iter().map(|(n, _)| n.as_str()).collect();
    if ours != theirs {
        problems.push(format!("gradients of {ours:?}, Mithril {theirs:?}"));
    }
    for (name, want) in &case.grads {
        if let Some(t) = by_name.get(format!("grad/{name}").as_str()) {
            problems.extend(differs(&format!("grad/{name}"), t, want, mode.tolerance()));
        }
    }
    if problems.is_empty() {
        Outcome::Pass
    } else {
        Outcome::Differs(problems.join("; "))
    }
}

/// Runs one case in one mode.
fn run(case: &Case, mode: Mode, scratch: Option<(&c_build::Toolchain, &Path)>) -> Outcome {
    let got = prepare(case, mode).and_then(|(graphs, feeds)| match scratch {
        None if matches!(mode, Mode::JitF64 | Mode::JitF32) => {
            use mithrilc::backend::JitTier;
            use mithrilc::exec::Executable;
            // Each tier this build has; the LLVM tier's outputs must be the cranelift
            // tier's bits (both compute what the C target computes).
            let tiers: &[JitTier] = if cfg!(feature = "llvm") { &[JitTier::Cranelift, JitTier::Llvm] } else { &[JitTier::Cranelift] };
            let mut first: Option<Vec<(String, Tensor)>> = None;
            for &tier in tiers {
                let mut exe = mithrilc::exec::Jit::with_tier(tier, &graphs, &feeds, Default::default()).map_err(|e| format!("{tier:?}: {e}"))?;
                // (the cases run on every core already)
                exe.set_threads(1);
                let got = exe.run(&feeds).map_err(|e| format!("{tier:?}: {e}"))?;
                if let Some(f) = &first {
                    let same = f.iter().zip(&got).all(|((_, a), (_, b))| a.shape == b.shape && a.data.iter().zip(&b.data).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())));
                    if !same {
                        return Err(format!("the {tier:?} tier's outputs differ from cranelift's"));
                    }
                }
                first.get_or_insert(got);
            }
            Ok(first.expect("one tier at least"))
        }
        None => mithrilc::interp::run(graphs.main(), &feeds).map_err(|e| e.to_string()),
        Some((tc, dir)) => {
            let r = c_build::run_c(tc, &graphs, &feeds, dir);
            let _ = std::fs::remove_dir_all(dir);
            r
        }
    });
    judge(case, mode, got)
}

/// `passing.txt`: `MODE FILE/CASE` lines.
fn listed(file: &str) -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(suite_dir().join(file)).unwrap_or_default();
    text.lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once(' ').map(|(m, c)| (m.to_string(), c.trim().to_string())))
        .collect()
}

/// Runs every case in `mode` (on every core) and checks the result against the lists.
fn suite(mode: Mode) {
    let c = matches!(mode, Mode::CF64 | Mode::CF32);
    let tc = if c {
        match c_build::toolchain(&c_build::for_this_cpu("-O1")) {
            Some(tc) => Some(tc),
            None => {
                common::skip("a C compiler is needed (apt-get install gcc, or set CC)");
                return;
            }
        }
    } else {
        None
    };
    let all = cases();
    let outcomes: Mutex<Vec<(usize, Outcome)>> = Mutex::new(Vec::new());
    let next = AtomicUsize::new(0);
    let jit = matches!(mode, Mode::JitF64 | Mode::JitF32);
    let threads = if c || jit { std::thread::available_parallelism().map_or(2, |n| n.get()) } else { 1 };
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((_, converted)) = all.get(i) else { break };
                let Ok(case) = converted else { continue };
                let dir = tc.map(|tc| tc.dir.path().join(format!("{}-{i}", mode.name())));
                let outcome = run(case, mode, tc.zip(dir.as_deref()));
                outcomes.lock().unwrap().push((i, outcome));
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap();
    outcomes.sort_by_key(|(i, _)| *i);
    report(mode, all, &outcomes);
}

fn report(mode: Mode, all: &[(String, Result<Case, String>)], outcomes: &[(usize, Outcome)]) {
    let mut text = String::new();
    // Per file and per class: (passed, run).
    let mut per_file: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut per_class: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut passing = BTreeSet::new();
    let mut failures = Vec::new();
    for (i, outcome) in outcomes {
        let (id, Ok(case)) = &all[*i] else { continue };
        let pass = matches!(outcome, Outcome::Pass);
        let file = id.split('/').next().unwrap();
        let e = per_file.entry(file).or_default();
        e.0 += pass as usize;
        e.1 += 1;
        for class in &case.classes {
            let e = per_class.entry(class).or_default();
            e.0 += pass as usize;
            e.1 += 1;
        }
        match outcome {
            Outcome::Pass => {
                passing.insert(id.clone());
            }
            Outcome::Refused(e) => failures.push((id.clone(), false, e.clone())),
            Outcome::Differs(e) => failures.push((id.clone(), true, e.clone())),
        }
    }
    let (passed, ran) = per_file.values().fold((0, 0), |(p, r), (a, b)| (p + a, r + b));
    let _ = writeln!(text, "== Mithril's suite, {}: {passed} of {ran} cases pass ({:.1}%)", mode.name(), 100.0 * passed as f64 / ran.max(1) as f64);
    for (file, (p, r)) in &per_file {
        let _ = writeln!(text, "  {file}: {p}/{r}");
    }
    let _ = writeln!(text, "  per class:");
    for (class, (p, r)) in &per_class {
        if p != r {
            let _ = writeln!(text, "    {class}: {p}/{r}");
        }
    }
    let full: Vec<&str> = per_class.iter().filter(|(_, (p, r))| p == r).map(|(c, _)| *c).collect();
    let _ = writeln!(text, "    all pass: {}", full.join(", "));
    let skips: Vec<(&String, &String)> = all.iter().filter_map(|(id, c)| c.as_ref().err().map(|why| (id, why))).collect();
    let _ = writeln!(text, "  skipped ({}):", skips.len());
    for (id, why) in &skips {
        let _ = writeln!(text, "    {id}: {why}");
    }
    let _ = writeln!(text, "  failing ({}):", failures.len());
    for (id, wrong, why) in &failures {
        let why: String = why.lines().next().unwrap_or("").chars().take(300).collect();
        let _ = writeln!(text, "    {id} [{}]: {why}", if *wrong { "wrong numbers" } else { "refused" });
    }
    println!("{text}");

    let name = mode.name();
    if std::env::var_os("MITHRILC_SUITE_UPDATE").is_some() {
        // The modes run at once: write under a lock.
        static WRITE: Mutex<()> = Mutex::new(());
        let _guard = WRITE.lock().unwrap();
        let mut merged = listed("passing.txt").into_iter().filter(|(m, _)| m != name).collect::<BTreeSet<_>>();
        merged.extend(passing.iter().map(|id| (name.to_string(), id.clone())));
        let mut out = String::from("# Cases of Mithril's suite that pass, per mode (tests/mithril_suite.rs; MITHRILC_SUITE_UPDATE=1 rewrites it)\n");
        for (m, id) in merged {
            let _ = writeln!(out, "{m} {id}");
        }
        std::fs::write(suite_dir().join("passing.txt"), out).unwrap();
        return;
    }
    let only = std::env::var("MITHRILC_SUITE_ONLY").unwrap_or_default();
    let listed_passing: BTreeSet<String> = listed("passing.txt").into_iter().filter(|(m, _)| m == name).map(|(_, id)| id).collect();
    let regressions: Vec<&String> = listed_passing.iter().filter(|id| id.contains(&only) && !passing.contains(*id)).collect();
    let explained = listed("differs.txt");
    let wrong: Vec<&String> = failures.iter().filter(|(id, w, _)| *w && !explained.contains(&(name.to_string(), id.clone()))).map(|(id, _, _)| id).collect();
    // An explanation of a difference that no longer happens is stale.
    let differing: BTreeSet<&String> = failures.iter().filter(|(_, w, _)| *w).map(|(id, _, _)| id).collect();
    let stale: Vec<&String> =
        explained.iter().filter(|(m, id)| m == name && id.contains(&only) && !differing.contains(id)).map(|(_, id)| id).collect();
    assert!(stale.is_empty(), "{name}: differs.txt explains {} case(s) that no longer differ: {stale:?}", stale.len());
    let newly = passing.difference(&listed_passing).count();
    if newly > 0 {
        println!("{newly} case(s) pass that passing.txt does not list for {name}: MITHRILC_SUITE_UPDATE=1 records them");
    }
    assert!(regressions.is_empty(), "{name}: {} case(s) listed in passing.txt fail: {regressions:?}", regressions.len());
    assert!(wrong.is_empty(), "{name}: {} case(s) give numbers other than Mithril's without an entry in differs.txt: {wrong:?}", wrong.len());
}

#[test]
fn interpreter_f64() {
    suite(Mode::InterpF64);
}

#[test]
fn interpreter_f32() {
    suite(Mode::InterpF32);
}

#[test]
fn c_target_f64() {
    suite(Mode::CF64);
}

#[test]
fn c_target_f32() {
    suite(Mode::CF32);
}

#[test]
fn jit_f64() {
    suite(Mode::JitF64);
}

#[test]
fn jit_f32() {
    suite(Mode::JitF32);
}

/// `MITHRILC_SUITE_EXPORT=DIR`: each case as a directory `mithrilc run` takes.
#[test]
fn export() {
    let Some(dir) = std::env::var_os("MITHRILC_SUITE_EXPORT") else {
        println!("skipped: set MITHRILC_SUITE_EXPORT=DIR to write every case for `mithrilc run`");
        return;
    };
    for (id, converted) in cases() {
        let Ok(case) = converted else { continue };
        let out = Path::new(&dir).join(id);
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("model.json"), serde_json::to_string_pretty(&case.model).unwrap()).unwrap();
        let mut arrays: Vec<(String, Tensor)> = case.params.clone();
        arrays.extend(case.cotangents.iter().map(|(k, t)| (format!("output_grad/{k}"), t.clone())));
        data::write_npz(&out.join("data.npz"), &arrays).unwrap();
        let mut expected = case.outputs.clone();
        expected.extend(case.grads.iter().map(|(k, t)| (format!("grad/{k}"), t.clone())));
        data::write_npz(&out.join("expected.npz"), &expected).unwrap();
        let consts: String = case.constants.iter().map(|(k, v)| format!(" --const '{k}={v}'")).collect();
        std::fs::write(out.join("run.sh"), format!("mithrilc run model.json --data data.npz --grad{consts} -o out.npz\n")).unwrap();
    }
}
