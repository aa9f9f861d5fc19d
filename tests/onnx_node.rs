//! ONNX's own backend node tests (1,765 one-operator models, with inputs and expected
//! outputs, shipped in the pinned onnx 1.22.0 wheel's `onnx/backend/test/data/node`),
//! run through the interpreter and through the C target (the runtime built once, the
//! cases compiled two at a time) and compared with the expected outputs.
//!
//! `.ci/run` installs the wheel into `~/.cache/mithrilc/onnx-1.22.0`;
//! `MITHRILC_ONNX_NODE_TESTS` names another copy of the folder. The test prints the pass
//! rate overall, per operator and per category of failure, writes the same report to
//! `target/onnx-node-report-{interp,c}.txt`, and fails when a test listed in
//! `tests/onnx/node_pass_{interp,c}.txt` no longer passes. `MITHRILC_ONNX_UPDATE=1`
//! rewrites the lists from this run.
//!
//! Inputs that an operator needs known when compiling (a shape, axes, pads), which the
//! node tests give as graph inputs, are given as a user would, with `--const`: a model
//! that fails to load for that reason is loaded again with the inputs the error names
//! fixed to the test's values (or, when it names a value computed from inputs, the
//! integer inputs).

use crate::common::{self, c_build};

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
    /// An opset older than those read (7).
    Opset,
    /// The model failed to load for another reason: a bug, or a model mithrilc rejects.
    Load,
    /// Loaded, but the target cannot compile it (an element type or op it lacks).
    Target,
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
            Category::Opset => "opset older than 7",
            Category::Load => "load error",
            Category::Target => "unsupported by the target",
            Category::Run => "run error",
            Category::Values => "wrong values",
        }
    }

    /// The category of a load error, from its message.
    fn of_load_error(msg: &str) -> Category {
        if msg.contains("element type") && msg.contains("not supported") || msg.contains("is not a tensor") {
            Category::Dtype
        } else if ["no ONNX operator", "control flow", "sequences and optionals", "strings are not", "random operators", "contrib operator", "operators of domain", "shape depends on the input"].iter().any(|w| msg.contains(w)) {
            Category::Operator
        } else if msg.contains("older than the opsets") {
            Category::Opset
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
    /// The IR ops the frontend made of the model (before any pass), when it loaded.
    ir_ops: BTreeSet<&'static str>,
}

/// The IR ops (other than inputs, parameters and constants) the frontend makes of the
/// model, for the listing of which ONNX operator becomes which IR ops.
fn ir_ops(model: &Path) -> BTreeSet<&'static str> {
    let Ok(m) = frontend::load(model, &Default::default()) else { return BTreeSet::new() };
    m.graph.nodes.iter().filter(|n| !matches!(n.op, mithrilc::ir::Op::Input | mithrilc::ir::Op::Param | mithrilc::ir::Op::Constant(_))).map(|n| n.op.name()).collect()
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

/// What runs a loaded model.
#[derive(Clone, Copy)]
enum Runner {
    Interp,
    C(&'static c_build::Toolchain),
}

impl Runner {
    fn name(self) -> &'static str {
        match self {
            Runner::Interp => "interp",
            Runner::C(_) => "c",
        }
    }
}

fn run_one(dir: &Path, runner: Runner) -> Result<(), (Category, String)> {
    let model = dir.join("model.onnx");
    let set = dir.join("test_data_set_0");
    let inputs = tensors(&set, "input_").map_err(|e| (Category::Dtype, e))?;
    let outputs = tensors(&set, "output_").map_err(|e| (Category::Dtype, e))?;
    let mut fixed: Vec<(String, serde_json::Value)> = Vec::new();
    let loaded = loop {
        match load(&model, fixed.clone()) {
            Err(e) if e.to_string().contains("known when compiling") => {
                let msg = e.to_string();
                let named = |n: &str| msg.contains(&format!(" ({n}) is computed at run time"));
                let open = |n: &str| !fixed.iter().any(|(f, _)| f == n);
                let mut more: Vec<_> = inputs.iter().filter(|(n, _)| named(n) && open(n)).map(|(n, t)| (n.clone(), json(t))).collect();
                if more.is_empty() {
                    // Computed from inputs: fix the integer ones (sizes, counts).
                    more = inputs.iter().filter(|(n, t)| !t.dtype.is_float() && open(n)).map(|(n, t)| (n.clone(), json(t))).collect();
                }
                if more.is_empty() {
                    break Err(e);
                }
                fixed.extend(more);
            }
            other => break other,
        }
    }
    .map_err(|e| (Category::of_load_error(&e.to_string()), e.to_string()))?;
    let params: BTreeMap<String, Tensor> = loaded.weights.into_iter().map(|(n, t)| (n, t.to_tensor())).collect();
    let got = match runner {
        Runner::Interp => {
            let exe = Interpreter::new(loaded.graphs, params);
            let feeds: BTreeMap<String, Tensor> = inputs.into_iter().filter(|(n, _)| exe.inputs().contains(n)).collect();
            exe.run(&feeds).map_err(|e| (Category::Run, e.to_string()))?
        }
        Runner::C(tc) => {
            // As `pipeline::emit` hands the graphs to the target: checked, composites
            // the target lacks decomposed.
            let target = &mithrilc::codegen::c::backend::CTarget;
            pipeline::check(target, &loaded.graphs, &Default::default()).map_err(|e| (Category::Target, e.to_string()))?;
            let graphs = pipeline::for_target(target, &loaded.graphs, &[]).map_err(|e| (Category::Target, e.to_string()))?;
            let mut feeds = params;
            feeds.extend(inputs);
            let scratch = tc.dir.path().join(dir.file_name().unwrap());
            let got = c_build::run_c(tc, &graphs, &feeds, &scratch).map_err(|e| (Category::Run, e));
            let _ = std::fs::remove_dir_all(&scratch);
            got?
        }
    };
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
fn report(outcomes: &[Outcome], runner: Runner) -> String {
    let total = outcomes.len();
    let passed = outcomes.iter().filter(|o| o.failure.is_none()).count();
    let mut s = format!("ONNX node tests (onnx 1.22.0), {}: {passed} of {total} pass ({:.1}%)\n", runner.name(), 100.0 * passed as f64 / total.max(1) as f64);
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
    node_tests_pass(|| Some(Runner::Interp));
}

#[test]
fn onnx_node_tests_pass_on_the_c_target() {
    node_tests_pass(|| match c_build::toolchain(&c_build::for_this_cpu("-O1")) {
        Some(tc) => Some(Runner::C(tc)),
        None => {
            common::skip("no C compiler");
            None
        }
    });
}

/// Runs every node test with the runner `runner()` makes, reports, and checks the pass
/// list.
fn node_tests_pass(runner: impl FnOnce() -> Option<Runner>) {
    let Some(root) = node_tests() else {
        return common::skip("ONNX's node tests are not installed (.ci/run installs onnx 1.22.0 into ~/.cache/mithrilc/onnx-1.22.0)");
    };
    let Some(runner) = runner() else { return };
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root).unwrap().flatten().map(|e| e.path()).filter(|p| p.join("model.onnx").is_file()).collect();
    dirs.sort();
    assert!(dirs.len() > 1000, "{} holds {} node tests, expected 1,765", root.display(), dirs.len());
    let outcomes = std::sync::Mutex::new(Vec::new());
    common::each_case(&dirs, |dir| {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let failure = match std::panic::catch_unwind(|| run_one(dir, runner)) {
            Ok(r) => r.err(),
            Err(_) => Some((Category::Load, "panicked".to_string())),
        };
        let ir_ops = match runner {
            Runner::Interp if failure.is_none() => ir_ops(&dir.join("model.onnx")),
            _ => BTreeSet::new(),
        };
        outcomes.lock().unwrap().push(Outcome { name, op: operator(&dir.join("model.onnx")), failure, ir_ops });
        Ok(())
    });
    let mut outcomes = outcomes.into_inner().unwrap();
    outcomes.sort_by(|a, b| a.name.cmp(&b.name));
    let text = report(&outcomes, runner);
    println!("{text}");
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    let _ = std::fs::create_dir_all(&target);
    let _ = std::fs::write(target.join(format!("onnx-node-report-{}.txt", runner.name())), &text);

    if let Runner::Interp = runner {
        check_listing(&outcomes);
    }
    let list_path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/onnx/node_pass_{}.txt", runner.name()));
    let passing: BTreeSet<&str> = outcomes.iter().filter(|o| o.failure.is_none()).map(|o| o.name.as_str()).collect();
    if std::env::var("MITHRILC_ONNX_UPDATE").is_ok_and(|v| v == "1") {
        let body: String = passing.iter().map(|n| format!("{n}\n")).collect();
        let header = format!("# ONNX node tests that pass on the {} runner (tests/onnx_node.rs; MITHRILC_ONNX_UPDATE=1 rewrites)\n", runner.name());
        std::fs::write(&list_path, header + &body).unwrap();
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
        println!("{new} test(s) pass that {} does not list (MITHRILC_ONNX_UPDATE=1 adds them)", list_path.display());
    }
    assert!(regressed.is_empty(), "{} listed ONNX node test(s) no longer pass on the {} runner:\n{}", regressed.len(), runner.name(), regressed.join("\n"));
}

/// `docs/onnx-ops.md`: each ONNX operator with a passing one-node test, the IR ops the
/// frontend makes of it, and how many of its node tests pass on the interpreter. Written
/// under `MITHRILC_ONNX_UPDATE=1`, else compared with the file.
fn check_listing(outcomes: &[Outcome]) {
    let mut by_op: BTreeMap<&str, (usize, usize, BTreeSet<&str>)> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| !o.op.contains(' ') && o.op != "?") {
        let e = by_op.entry(o.op.as_str()).or_default();
        e.1 += 1;
        if o.failure.is_none() {
            e.0 += 1;
            e.2.extend(&o.ir_ops);
        }
    }
    let mut text = String::from("# ONNX operators\n\n<!-- Generated by tests/onnx_node.rs from ONNX's node tests; MITHRILC_ONNX_UPDATE=1 rewrites it. -->\n\n");
    text.push_str("Which IR ops (`docs/ops.md`) the ONNX frontend makes of each ONNX operator, read from the one-node models of ONNX's backend node tests (onnx 1.22.0) that pass on the interpreter, and how many of the operator's tests pass. Operators read in part list the IR ops of the tests that pass; `docs/frontend-onnx.md` says what is refused and why.\n\n");
    text.push_str("| ONNX operator | IR ops | node tests passing |\n|---|---|---|\n");
    for (op, (pass, total, ops)) in &by_op {
        let ir = if ops.is_empty() { "—".to_string() } else { ops.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>().join(", ") };
        text.push_str(&format!("| {op} | {ir} | {pass} of {total} |\n"));
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/onnx-ops.md");
    if std::env::var("MITHRILC_ONNX_UPDATE").is_ok_and(|v| v == "1") {
        std::fs::write(&path, text).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(committed == text, "docs/onnx-ops.md is not what the node tests give (MITHRILC_ONNX_UPDATE=1 rewrites it)");
}
