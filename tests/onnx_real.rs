//! Real models exported by PyTorch's exporters (`torch.onnx.export`, classic and
//! dynamo), committed under `tests/onnx/real/` with ONNX Runtime's outputs by
//! `tools/onnx_real_exports.py` (CI needs neither torch nor that script): each export
//! runs through the interpreter, the C target and `--target cuda --emulate`, at the
//! shapes of its data, and must match ONNX Runtime within 1e-4 absolute + 1e-3
//! relative. An export with symbolic dimensions (dim_params) is also compiled with them
//! kept symbolic (`--max` twice the data's sizes) for C and CUDA, and run at the data's
//! sizes.
//!
//! What mithrilc cannot do yet is listed, with the exact error, in
//! `tests/onnx/real/expected_failures.txt`; the test fails when a run not listed fails,
//! when a listed one passes (remove it from the list) or fails with another error, and
//! when the list names a run that does not exist. The C runtime is built once; runs go
//! as many at a time as there are cores.

use crate::common::{self, c_build};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use mithrilc::cli::BuildConfig;
use mithrilc::data;
use mithrilc::frontend;
use mithrilc::ir::{Shape, TensorType};
use mithrilc::pipeline::{self, ModelSpec};
use mithrilc::tensor::Tensor;

/// Where the exports are, relative to the package root (the tests' working directory):
/// messages name the models by these paths on every machine.
const ROOT: &str = "tests/onnx/real";
const ATOL: f64 = 1e-4;
const RTOL: f64 = 1e-3;

/// One exported model with its data.
struct Export {
    name: String,
    inputs: Vec<(String, Tensor)>,
    /// ONNX Runtime's outputs.
    outputs: Vec<(String, Tensor)>,
    /// Each symbolic dimension of the inputs, with its size in the data.
    symbols: BTreeMap<String, u64>,
}

impl Export {
    fn model(&self) -> PathBuf {
        Path::new(ROOT).join(&self.name).join("model.onnx")
    }
}

/// Every export that `MANIFEST.json` lists, with its inputs and outputs in the graph's order.
fn exports() -> Vec<Export> {
    let text = std::fs::read_to_string(Path::new(ROOT).join("MANIFEST.json")).expect("tests/onnx/real/MANIFEST.json");
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    let npy = |name: &str, file: String| -> Tensor {
        let path = Path::new(ROOT).join(name).join(file);
        data::read_arrays(&path).unwrap_or_else(|e| panic!("{e}")).arrays.into_values().next().unwrap()
    };
    manifest
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, m)| {
            let mut symbols = BTreeMap::new();
            let inputs = m["inputs"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(input, dims)| {
                    let t = npy(name, format!("input_{input}.npy"));
                    for (d, size) in dims.as_array().unwrap().iter().zip(&t.shape) {
                        if let Some(sym) = d.as_str() {
                            symbols.insert(sym.to_string(), *size);
                        }
                    }
                    (input.clone(), t)
                })
                .collect();
            let outputs = m["outputs"].as_object().unwrap().keys().map(|o| (o.clone(), npy(name, format!("output_{o}.npy")))).collect();
            Export { name: name.clone(), inputs, outputs, symbols }
        })
        .collect()
}

/// How an export is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Runner {
    Interp,
    C,
    CudaEmulate,
    /// Compiled with its symbolic dimensions kept symbolic.
    CSymbolic,
    CudaEmulateSymbolic,
}

impl Runner {
    const ALL: [Runner; 5] = [Runner::Interp, Runner::C, Runner::CudaEmulate, Runner::CSymbolic, Runner::CudaEmulateSymbolic];

    fn name(self) -> &'static str {
        match self {
            Runner::Interp => "interp",
            Runner::C => "c",
            Runner::CudaEmulate => "cuda-emulate",
            Runner::CSymbolic => "c-symbolic",
            Runner::CudaEmulateSymbolic => "cuda-emulate-symbolic",
        }
    }

    fn symbolic(self) -> bool {
        matches!(self, Runner::CSymbolic | Runner::CudaEmulateSymbolic)
    }

    /// Slowest first: a long run started last would leave the other cores idle.
    fn cost(self) -> u8 {
        match self {
            Runner::CudaEmulate | Runner::CudaEmulateSymbolic => 0,
            Runner::C | Runner::CSymbolic => 1,
            Runner::Interp => 2,
        }
    }
}

/// Loads the export at its data's shapes, or with its symbols kept (`symbolic`); the
/// graphs, and the feeds (the model's initializers and the inputs).
fn load(export: &Export, symbolic: bool) -> Result<(pipeline::Graphs, BTreeMap<String, Tensor>), String> {
    let known_types = if symbolic {
        BTreeMap::new()
    } else {
        export.inputs.iter().map(|(n, t)| (n.clone(), TensorType::new(t.dtype, Shape::known(&t.shape)))).collect()
    };
    let spec = ModelSpec { path: export.model(), frontend: frontend::Options { known_types, ..Default::default() }, ..Default::default() };
    let loaded = pipeline::load(&spec).map_err(|e| e.to_string())?;
    let mut feeds: BTreeMap<String, Tensor> = loaded.weights.iter().map(|(n, t)| (n.clone(), t.to_tensor())).collect();
    feeds.extend(export.inputs.iter().cloned());
    Ok((loaded.graphs, feeds))
}

/// The export's outputs from `runner`.
fn run(export: &Export, runner: Runner, tc: &c_build::Toolchain) -> Result<Vec<(String, Tensor)>, String> {
    let (graphs, feeds) = load(export, runner.symbolic())?;
    // Twice the data's sizes: the code must not be specialised to them.
    let max: BTreeMap<String, u64> = if runner.symbolic() { export.symbols.iter().map(|(s, n)| (s.clone(), 2 * n)).collect() } else { BTreeMap::new() };
    match runner {
        Runner::Interp => mithrilc::interp::run(graphs.main(), &feeds).map_err(|e| e.to_string()),
        Runner::C | Runner::CSymbolic => {
            let target = &mithrilc::codegen::c::backend::CTarget;
            pipeline::check(target, &graphs, &Default::default()).map_err(|e| e.to_string())?;
            let graphs = pipeline::for_target(target, &graphs, &[]).map_err(|e| e.to_string())?;
            let scratch = tc.dir.path().join(format!("{}-{}", export.name, runner.name()));
            let opts = mithrilc::lower::Options { max, library: mithrilc::codegen::c::LIBRARY, ..Default::default() };
            let got = c_build::run_c_lowered(tc, &graphs, &feeds, &scratch, &opts);
            let _ = std::fs::remove_dir_all(&scratch);
            got
        }
        Runner::CudaEmulate | Runner::CudaEmulateSymbolic => {
            let target = &mithrilc::codegen::cuda::backend::CudaTarget;
            let opts = mithrilc::backend::EmitOptions { max, ..Default::default() };
            // At -O0 unless the environment's CXXFLAGS says otherwise (over the generated
            // Makefile's -O1): the same kernels, compiled in a third of -O1's time, and
            // these models run in milliseconds either way. Given to this build's make
            // alone: the other tests in this process build at their own flags.
            let cxxflags = std::env::var_os("CXXFLAGS").is_none().then(|| "-O0".to_string());
            let build = BuildConfig { emulate: true, cxxflags, ..Default::default() };
            mithrilc::exec::run_once(target, &graphs, &feeds, &export.model(), &build, opts).map_err(|e| e.to_string())
        }
    }
}

/// `got` against ONNX Runtime's outputs within 1e-4 + 1e-3 |want|: the largest error,
/// or the first element of the first output that differs.
fn compare(got: &[(String, Tensor)], want: &[(String, Tensor)]) -> Result<f64, String> {
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    let want_names: Vec<&str> = want.iter().map(|(n, _)| n.as_str()).collect();
    if names != want_names {
        return Err(format!("outputs {names:?}, ONNX Runtime's are {want_names:?}"));
    }
    let mut worst = 0.0f64;
    for ((name, g), (_, w)) in got.iter().zip(want) {
        if g.shape != w.shape {
            return Err(format!("output {name}: shape {:?}, ONNX Runtime's {:?}", g.shape, w.shape));
        }
        for (i, (x, y)) in g.data.iter().zip(&w.data).enumerate() {
            let err = (x - y).abs();
            // Negated, so that a NaN on either side fails.
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            if !(err <= ATOL + RTOL * y.abs()) {
                return Err(format!("output {name}: element {i} is {x}, ONNX Runtime's {y}"));
            }
            worst = worst.max(err);
        }
    }
    Ok(worst)
}

/// A run: the export's name and the runner's.
type Key = (String, String);

/// `tests/onnx/real/expected_failures.txt`: `EXPORT RUNNER: ERROR` per line (the
/// error's lines joined by " / "), `#` comments.
fn expected_failures(text: &str) -> Result<BTreeMap<Key, String>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (key, why) = l.split_once(": ").ok_or_else(|| format!("`{l}` is not `EXPORT RUNNER: ERROR`"))?;
            let (export, runner) = key.split_once(' ').ok_or_else(|| format!("`{key}` is not `EXPORT RUNNER`"))?;
            Ok(((export.to_string(), runner.to_string()), why.to_string()))
        })
        .collect()
}

/// Each run's outcome judged against the list of expected failures: what to show of it,
/// and every way the two disagree (a run that fails unlisted, a listed one that passes
/// or fails otherwise, a listed run that does not exist).
fn judge(outcomes: &BTreeMap<Key, Result<f64, String>>, expected: &BTreeMap<Key, String>) -> (BTreeMap<Key, String>, Vec<String>) {
    const LIST: &str = "tests/onnx/real/expected_failures.txt";
    let mut problems: Vec<String> = expected.keys().filter(|k| !outcomes.contains_key(*k)).map(|(e, r)| format!("{LIST} lists {e} {r}, which is not a run of this test")).collect();
    let mut cells = BTreeMap::new();
    for (key @ (export, runner), outcome) in outcomes {
        let cell = match (outcome, expected.get(key)) {
            (Ok(err), None) => format!("pass ({err:.1e})"),
            (Ok(_), Some(_)) => {
                problems.push(format!("{export} {runner} passes: remove it from {LIST}"));
                "pass, but listed".to_string()
            }
            (Err(e), listed) => {
                let e = e.lines().collect::<Vec<_>>().join(" / ");
                match listed {
                    Some(why) if *why == e => "expected failure".to_string(),
                    Some(why) => {
                        problems.push(format!("{export} {runner} fails otherwise than {LIST} says:\n  now:    {e}\n  listed: {why}"));
                        "FAIL (otherwise)".to_string()
                    }
                    None => {
                        problems.push(format!("{export} {runner}: {e}"));
                        "FAIL".to_string()
                    }
                }
            }
        };
        cells.insert(key.clone(), cell);
    }
    (cells, problems)
}

#[test]
fn real_exports_match_onnx_runtime() {
    let Some(tc) = c_build::toolchain(&c_build::for_this_cpu("-O1")) else {
        return common::skip("a C compiler is needed (apt-get install gcc, or set CC)");
    };
    if !common::have("c++") || !common::have("make") {
        return common::skip("make and a C++ compiler are needed for CUDA emulation (apt-get install make g++)");
    }
    let exports = exports();
    let mut runs: Vec<(&Export, Runner)> = exports.iter().flat_map(|e| Runner::ALL.into_iter().filter(|r| !r.symbolic() || !e.symbols.is_empty()).map(move |r| (e, r))).collect();
    runs.sort_by_key(|(e, r)| (r.cost(), e.name.clone()));
    let outcomes = Mutex::new(BTreeMap::new());
    let seconds = Mutex::new(Vec::new());
    common::each_case(&runs, |&(export, runner)| {
        let start = std::time::Instant::now();
        // A panic is a failure of this run, reported with the others.
        let outcome = std::panic::catch_unwind(|| run(export, runner, tc).and_then(|got| compare(&got, &export.outputs))).unwrap_or_else(|p| {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            Err(format!("panicked: {msg}"))
        });
        seconds.lock().unwrap().push((runner, start.elapsed().as_secs_f64()));
        outcomes.lock().unwrap().insert((export.name.clone(), runner.name().to_string()), outcome);
        Ok(())
    });
    let outcomes = outcomes.into_inner().unwrap();

    let path = Path::new(ROOT).join("expected_failures.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let expected = expected_failures(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (cells, problems) = judge(&outcomes, &expected);
    let mut table: BTreeMap<&str, BTreeMap<&str, &str>> = BTreeMap::new();
    for ((export, runner), cell) in &cells {
        table.entry(export).or_default().insert(runner, cell);
    }
    let columns: Vec<&str> = Runner::ALL.iter().map(|r| r.name()).collect();
    println!("{:<28} {}", "export", columns.iter().map(|c| format!("{c:<22}")).collect::<String>());
    for (export, cells) in &table {
        let row: String = columns.iter().map(|c| format!("{:<22}", cells.get(c).copied().unwrap_or("-"))).collect();
        println!("{export:<28} {row}");
    }
    let passed = outcomes.values().filter(|o| o.is_ok()).count();
    println!("{passed} of {} runs pass ({} exports); a pass shows its largest difference from ONNX Runtime", outcomes.len(), table.len());
    let seconds = seconds.into_inner().unwrap();
    let per_runner: Vec<String> = Runner::ALL.iter().map(|r| format!("{} {:.0} s", r.name(), seconds.iter().filter(|(s, _)| s == r).map(|(_, t)| t).sum::<f64>())).collect();
    println!("time spent per runner (all threads): {}", per_runner.join(", "));
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
}

/// f64, whose values are the literals (f32 would round them).
fn f64s(shape: &[u64], data: &[f64]) -> Tensor {
    Tensor::new(mithrilc::ir::Dtype::F64, shape.to_vec(), data.to_vec())
}

/// The tolerance is 1e-4 absolute plus 1e-3 of ONNX Runtime's value, and names, shapes
/// and NaNs must agree.
#[test]
fn outputs_match_within_1e4_plus_1e3_relative() {
    let want = vec![("y".to_string(), f64s(&[3], &[0.0, 10.0, -1.0]))];
    let out = |d: &[f64]| vec![("y".to_string(), f64s(&[3], d))];
    assert_eq!(compare(&out(&[0.0, 10.0, -1.0]), &want), Ok(0.0));
    let err = compare(&out(&[9e-5, 10.01, -1.001]), &want).unwrap();
    assert!((err - 0.01).abs() < 1e-9, "{err}");
    assert_eq!(compare(&out(&[1.1e-4, 10.0, -1.0]), &want), Err("output y: element 0 is 0.00011, ONNX Runtime's 0".to_string()));
    assert_eq!(compare(&out(&[0.0, 10.0102, -1.0]), &want), Err("output y: element 1 is 10.0102, ONNX Runtime's 10".to_string()));
    assert_eq!(compare(&out(&[0.0, 10.0, f64::NAN]), &want), Err("output y: element 2 is NaN, ONNX Runtime's -1".to_string()));
    assert_eq!(compare(&[("y".to_string(), f64s(&[1, 3], &[0.0, 10.0, -1.0]))], &want), Err("output y: shape [1, 3], ONNX Runtime's [3]".to_string()));
    assert_eq!(compare(&[("z".to_string(), f64s(&[3], &[0.0, 10.0, -1.0]))], &want), Err("outputs [\"z\"], ONNX Runtime's are [\"y\"]".to_string()));
}

/// The list of expected failures stays true: a run that fails unlisted, a listed run
/// that passes or fails with another error, and a listed run that does not exist are
/// each reported.
#[test]
fn the_list_of_expected_failures_is_kept_true() {
    let key = |e: &str, r: &str| (e.to_string(), r.to_string());
    let expected = expected_failures(
        "# a comment\n\
         m c-symbolic: m/model.onnx: node 1 (Shape): why\n\
         m cuda-emulate-symbolic: the old error\n\
         n c: it fails\n\
         gone interp: no such export\n",
    )
    .unwrap();
    assert_eq!(expected[&key("m", "c-symbolic")], "m/model.onnx: node 1 (Shape): why");
    let outcomes: BTreeMap<Key, Result<f64, String>> = [
        (key("m", "interp"), Ok(1e-7)),
        (key("m", "c"), Err("cc failed:\nan error".to_string())),
        (key("m", "c-symbolic"), Err("m/model.onnx: node 1 (Shape): why".to_string())),
        (key("m", "cuda-emulate-symbolic"), Err("a new error".to_string())),
        (key("n", "c"), Ok(0.0)),
    ]
    .into_iter()
    .collect();
    let (cells, problems) = judge(&outcomes, &expected);
    assert_eq!(
        problems,
        [
            "tests/onnx/real/expected_failures.txt lists gone interp, which is not a run of this test",
            "m c: cc failed: / an error",
            "m cuda-emulate-symbolic fails otherwise than tests/onnx/real/expected_failures.txt says:\n  now:    a new error\n  listed: the old error",
            "n c passes: remove it from tests/onnx/real/expected_failures.txt",
        ]
    );
    assert_eq!(cells[&key("m", "interp")], "pass (1.0e-7)");
    assert_eq!(cells[&key("m", "c-symbolic")], "expected failure");
    assert_eq!(expected_failures("m c"), Err("`m c` is not `EXPORT RUNNER: ERROR`".to_string()));
}
