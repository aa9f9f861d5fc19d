//! ONNX's own backend node tests (1,765 one-operator models, with inputs and expected
//! outputs, shipped in the pinned onnx 1.22.0 wheel's `onnx/backend/test/data/node`),
//! run through the interpreter and compared with the expected outputs.
//!
//! `.ci/run` installs the wheel into `~/.cache/mithrilc/onnx-1.22.0`;
//! `MITHRILC_ONNX_NODE_TESTS` names another copy of the folder. The test prints the pass
//! rate overall, per operator and per category of failure, writes the same report to
//! `target/onnx-node-report.txt`, and fails when a test listed in
//! `tests/onnx/node_pass.txt` no longer passes. `MITHRILC_ONNX_UPDATE=1` rewrites the list
//! from this run.
//!
//! Inputs that an operator needs known when compiling (a shape, axes, pads), which the
//! node tests give as graph inputs, are given as a user would, with `--const`: a model
//! that fails to load for that reason is loaded again with its integer inputs fixed, and
//! the float inputs the error names (Resize's scales, OneHot's depth).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use mithrilc::exec::{Executable, Interpreter};
use mithrilc::frontend::onnx::proto::ModelProto;
use mithrilc::frontend::{self, onnx};
use mithrilc::ir::Dtype;
use mithrilc::pipeline::{self, ModelSpec};
use mithrilc::tensor::Tensor;
use prost::Message;

/// The node tests' folder, if installed.
fn node_tests() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("MITHRILC_ONNX_NODE_TESTS") {
        return Some(PathBuf::from(dir));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let lib = cache.join("mithrilc/onnx-1.22.0/lib");
    std::fs::read_dir(&lib).ok()?.flatten().map(|e| e.path().join("site-packages/onnx/backend/test/data/node")).find(|p| p.is_dir())
}

/// Why a test did not pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Category {
    /// An element type mithrilc lacks (uint8, float8, strings, ...).
    Dtype,
    /// An operator mithrilc does not read (control flow, sequences, others).
    Operator,
    /// The operator is read, but not with this node's attributes or run-time inputs.
    Feature,
    /// The model failed to load for another reason: a bug, or a model mithrilc rejects.
    Load,
    /// Loaded, but running failed.
    Run,
    /// Ran, and computed other values.
    Values,
}

impl Category {
    fn name(self) -> &'static str {
        match self {
            Category::Dtype => "unsupported element type",
            Category::Operator => "unsupported operator",
            Category::Feature => "unsupported feature",
            Category::Load => "load error",
            Category::Run => "run error",
            Category::Values => "wrong values",
        }
    }

    /// The category of a load error, from its message.
    fn of_load_error(msg: &str) -> Category {
        if msg.contains("element type") && msg.contains("not supported") || msg.contains("is not a tensor") {
            Category::Dtype
        } else if ["no ONNX operator", "control flow", "sequences and optionals", "strings are not", "random operators", "contrib operator", "operators of domain"].iter().any(|w| msg.contains(w)) {
            Category::Operator
        } else if msg.contains("cannot be compiled") {
            Category::Feature
        } else {
            Category::Load
        }
    }
}

struct Outcome {
    name: String,
    op: String,
    failure: Option<(Category, String)>,
}

/// The operator a test is about: its one node's, or the last node's of an expanded
/// function.
fn operator(model: &Path) -> String {
    let bytes = std::fs::read(model).unwrap_or_default();
    let Ok(m) = ModelProto::decode(bytes.as_slice()) else { return "?".into() };
    let nodes = m.graph.map(|g| g.node).unwrap_or_default();
    match nodes.as_slice() {
        [one] => one.op_type.clone().unwrap_or_default(),
        [.., last] => format!("{} (expanded)", last.op_type.clone().unwrap_or_default()),
        [] => "?".into(),
    }
}

/// The tensors of one data set's files `prefix_*.pb`, by name, in file order.
fn tensors(set: &Path, prefix: &str) -> Result<Vec<(String, Tensor)>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(set).map_err(|e| e.to_string())?.flatten().map(|e| e.path()).filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix) && n.ends_with(".pb"))).collect();
    files.sort_by_key(|p| p.file_stem().and_then(|s| s.to_str()).and_then(|s| s.rsplit('_').next()?.parse::<u32>().ok()).unwrap_or(0));
    files.iter().map(|f| onnx::read_tensor_file(f).map(|(n, t)| (n, t.to_tensor())).map_err(|e| e.to_string())).collect()
}

/// ONNX's backend test tolerance (numpy's `assert_allclose` with rtol 1e-3, atol 1e-7);
/// exact for integers and bools. NaNs must match.
fn close(want: &Tensor, got: &Tensor) -> Result<(), String> {
    if want.shape != got.shape {
        return Err(format!("shape {:?}, expected {:?}", got.shape, want.shape));
    }
    let (rtol, atol) = if want.dtype.is_float() { (1e-3, 1e-7) } else { (0.0, 0.0) };
    for (i, (&w, &g)) in want.data.iter().zip(&got.data).enumerate() {
        let ok = (w.is_nan() && g.is_nan()) || w == g || (g - w).abs() <= atol + rtol * w.abs();
        if !ok {
            return Err(format!("element {i}: {g}, expected {w}"));
        }
    }
    Ok(())
}

/// Loads the model, with `constants` fixed.
fn load(model: &Path, constants: Vec<(String, serde_json::Value)>) -> mithrilc::Result<pipeline::Loaded> {
    let spec = ModelSpec { path: model.to_path_buf(), frontend: frontend::Options { constants, ..Default::default() }, ..Default::default() };
    pipeline::load(&spec)
}

/// A tensor as nested JSON lists, for `--const`.
fn json(t: &Tensor) -> serde_json::Value {
    fn nest(shape: &[u64], data: &[f64]) -> serde_json::Value {
        match shape.split_first() {
            None => serde_json::json!(data[0]),
            Some((&n, rest)) => {
                let step = rest.iter().product::<u64>() as usize;
                serde_json::Value::Array((0..n as usize).map(|i| nest(rest, &data[i * step..(i + 1) * step])).collect())
            }
        }
    }
    nest(&t.shape, &t.data)
}

fn run_one(dir: &Path) -> Result<(), (Category, String)> {
    let model = dir.join("model.onnx");
    let set = dir.join("test_data_set_0");
    let inputs = tensors(&set, "input_").map_err(|e| (Category::Dtype, e))?;
    let outputs = tensors(&set, "output_").map_err(|e| (Category::Dtype, e))?;
    // The integer inputs, then also each float one an error names (Resize's scales).
    let mut loaded = load(&model, Vec::new());
    let mut named: Vec<&str> = Vec::new();
    while let Err(e) = &loaded {
        let msg = e.to_string();
        if !msg.contains("known when compiling") {
            break;
        }
        let more: Vec<&str> = inputs.iter().map(|(n, _)| n.as_str()).filter(|n| !named.contains(n) && msg.contains(&format!("({n}) is computed at run time"))).collect();
        if !named.is_empty() && more.is_empty() {
            break;
        }
        named.extend(more);
        let fixed = inputs.iter().filter(|(n, t)| !t.dtype.is_float() || named.contains(&n.as_str())).map(|(n, t)| (n.clone(), json(t))).collect();
        loaded = load(&model, fixed);
    }
    let loaded = loaded.map_err(|e| (Category::of_load_error(&e.to_string()), e.to_string()))?;
    let params = loaded.weights.into_iter().map(|(n, t)| (n, t.to_tensor())).collect();
    let exe = Interpreter::new(loaded.graphs, params);
    let feeds: BTreeMap<String, Tensor> = inputs.into_iter().filter(|(n, _)| exe.inputs().contains(n)).collect();
    let got = exe.run(&feeds).map_err(|e| (Category::Run, e.to_string()))?;
    if got.len() != outputs.len() {
        return Err((Category::Values, format!("{} outputs, expected {}", got.len(), outputs.len())));
    }
    for ((name, want), (_, g)) in outputs.iter().zip(&got) {
        let g = if g.dtype == want.dtype || !(want.dtype == Dtype::Bool || want.dtype.is_int()) { g.clone() } else { Tensor::new(want.dtype, g.shape.clone(), g.data.clone()) };
        if g.dtype != want.dtype {
            return Err((Category::Values, format!("output {name}: {}, expected {}", g.dtype, want.dtype)));
        }
        close(want, &g).map_err(|e| (Category::Values, format!("output {name}: {e}")))?;
    }
    Ok(())
}

/// The report: pass rate overall, per category, per operator.
fn report(outcomes: &[Outcome]) -> String {
    let total = outcomes.len();
    let passed = outcomes.iter().filter(|o| o.failure.is_none()).count();
    let mut s = format!("ONNX node tests (onnx 1.22.0), interpreter: {passed} of {total} pass ({:.1}%)\n", 100.0 * passed as f64 / total.max(1) as f64);
    let mut by_cat: BTreeMap<Category, Vec<&Outcome>> = BTreeMap::new();
    for o in outcomes {
        if let Some((c, _)) = &o.failure {
            by_cat.entry(*c).or_default().push(o);
        }
    }
    for (c, list) in &by_cat {
        let _ = writeln!(s, "  {:>4} {}", list.len(), c.name());
    }
    let mut by_op: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for o in outcomes {
        let e = by_op.entry(o.op.as_str()).or_default();
        e.1 += 1;
        e.0 += usize::from(o.failure.is_none());
    }
    s.push_str("per operator (passed/tests):\n");
    for (op, (p, t)) in &by_op {
        let _ = writeln!(s, "  {op}: {p}/{t}");
    }
    s.push_str("failures:\n");
    for (c, list) in &by_cat {
        for o in list {
            let msg = o.failure.as_ref().map(|(_, m)| m.lines().collect::<Vec<_>>().join(" / ")).unwrap_or_default();
            let _ = writeln!(s, "  [{}] {}: {}", c.name(), o.name, msg.chars().take(300).collect::<String>());
        }
    }
    s
}

#[test]
fn onnx_node_tests_pass_on_the_interpreter() {
    let Some(root) = node_tests() else {
        return common::skip("ONNX's node tests are not installed (.ci/run installs onnx 1.22.0 into ~/.cache/mithrilc/onnx-1.22.0)");
    };
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root).unwrap().flatten().map(|e| e.path()).filter(|p| p.join("model.onnx").is_file()).collect();
    dirs.sort();
    assert!(dirs.len() > 1000, "{} holds {} node tests, expected 1,765", root.display(), dirs.len());
    let outcomes = std::sync::Mutex::new(Vec::new());
    common::each_case(&dirs, |dir| {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let failure = match std::panic::catch_unwind(|| run_one(dir)) {
            Ok(r) => r.err(),
            Err(_) => Some((Category::Load, "panicked".to_string())),
        };
        outcomes.lock().unwrap().push(Outcome { name, op: operator(&dir.join("model.onnx")), failure });
        Ok(())
    });
    let mut outcomes = outcomes.into_inner().unwrap();
    outcomes.sort_by(|a, b| a.name.cmp(&b.name));
    let text = report(&outcomes);
    println!("{text}");
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    let _ = std::fs::create_dir_all(&target);
    let _ = std::fs::write(target.join("onnx-node-report.txt"), &text);

    let list_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/onnx/node_pass.txt");
    let passing: BTreeSet<&str> = outcomes.iter().filter(|o| o.failure.is_none()).map(|o| o.name.as_str()).collect();
    if std::env::var("MITHRILC_ONNX_UPDATE").is_ok_and(|v| v == "1") {
        let body: String = passing.iter().map(|n| format!("{n}\n")).collect();
        std::fs::write(&list_path, format!("# ONNX node tests that pass on the interpreter (tests/onnx_node.rs; MITHRILC_ONNX_UPDATE=1 rewrites)\n{body}")).unwrap();
        return;
    }
    let listed = std::fs::read_to_string(&list_path).unwrap_or_default();
    let listed: BTreeSet<&str> = listed.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).map(str::trim).collect();
    let regressed: Vec<String> = listed
        .iter()
        .filter(|n| !passing.contains(*n))
        .map(|n| {
            let why = outcomes.iter().find(|o| o.name == *n).and_then(|o| o.failure.as_ref()).map_or("not found".to_string(), |(c, m)| format!("{}: {m}", c.name()));
            format!("{n}: {why}")
        })
        .collect();
    let new = passing.iter().filter(|n| !listed.contains(*n)).count();
    if new > 0 {
        println!("{new} test(s) pass that tests/onnx/node_pass.txt does not list (MITHRILC_ONNX_UPDATE=1 adds them)");
    }
    assert!(regressed.is_empty(), "{} listed ONNX node test(s) no longer pass:\n{}", regressed.len(), regressed.join("\n"));
}
