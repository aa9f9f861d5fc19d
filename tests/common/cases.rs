//! The models every target is checked on against the interpreter: each conformance
//! case of `../shared/testdata` (with the gradients of all its parameters), each bench
//! model at each batch size, and a few of our own; and how outputs are compared.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use mithrilc::cli;
use mithrilc::data::{self, ArrayFile};
use mithrilc::frontend::mithril;
use mithrilc::ir::{Graph, Shape};
use mithrilc::passes::autodiff::Wrt;
use mithrilc::tensor::Tensor;

use crate::common;

pub fn shared() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    dir.join("testdata/manifest.json").exists().then_some(dir)
}

/// `../shared`, when it and a C build (make, cc) are present; otherwise says why the
/// test is skipped.
pub fn shared_with_build() -> Option<PathBuf> {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return None;
    };
    if !common::have("make") || !common::have("cc") {
        common::skip("make and cc are needed (apt-get install make gcc)");
        return None;
    }
    Some(dir)
}

/// A model with its data: the graphs, the feeds, and the model file.
pub struct Case {
    pub label: String,
    pub graphs: mithrilc::pipeline::Graphs,
    pub feeds: BTreeMap<String, Tensor>,
    pub source: PathBuf,
}

impl Case {
    /// What the library's demo runs: the backward pass when there is one.
    pub fn graph(&self) -> &Graph {
        self.graphs.main()
    }
}

/// `grad`: the gradients autodiff appends (outputs `grad/NAME`, checked like the others).
pub fn load(json: &Path, files: &[&ArrayFile], set: Vec<(String, serde_json::Value)>, grad: Wrt, label: String) -> Case {
    let known_types = cli::known_types(files).unwrap_or_else(|e| panic!("{label}: {e}"));
    let opts = mithril::Options { set, known_types, ..Default::default() };
    let graph = mithril::load(json, &opts).unwrap_or_else(|e| panic!("{label}: {e}"));
    let graphs = mithrilc::pipeline::Graphs::new(graph, &grad, |_, _| {}).unwrap_or_else(|e| panic!("{label}: {e}"));
    let feeds = cli::feeds(graphs.main(), files).unwrap_or_else(|e| panic!("{label}: {e}"));
    Case { label, graphs, feeds, source: json.to_path_buf() }
}

pub fn latent(case: &str) -> Vec<(String, serde_json::Value)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/latent").join(format!("{case}.json"));
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["set"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// Every bench model at every batch size and every testdata variant (with the
/// gradients of all its parameters). The largest come first: the cases run as many at a
/// time as there are cores ([`crate::common::each_case`]), and a large one started last
/// would keep one core busy after the others are done.
pub fn cases(dir: &Path) -> Vec<Case> {
    let mut out = Vec::new();
    for (model, batches) in [("gpt_block", [8, 1]), ("cnn", [32, 1]), ("lenet", [32, 1]), ("mlp", [32, 1])] {
        let params = data::read_arrays(&dir.join(format!("bench/{model}.safetensors"))).unwrap();
        for b in batches {
            let input = data::read_arrays(&dir.join(format!("bench/{model}_b{b}_input.npy"))).unwrap();
            let input = ArrayFile { path: input.path, arrays: [("input".to_string(), input.arrays[0].clone())].into_iter().collect() };
            out.push(load(&dir.join(format!("bench/{model}.json")), &[&params, &input], vec![], Wrt::None, format!("{model} b{b}")));
        }
    }
    let text = std::fs::read_to_string(dir.join("testdata/manifest.json")).unwrap();
    let text = text.replace(": Infinity", ": null").replace(": NaN", ": null");
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (case, entry) in manifest.as_object().unwrap() {
        let Some(vars) = entry["variants"].as_array() else { continue };
        for v in vars {
            let npz = v["npz"].as_str().unwrap();
            let file = data::read_arrays(&dir.join("testdata").join(npz)).unwrap();
            let json = dir.join("testdata").join(entry["json"].as_str().unwrap());
            out.push(load(&json, &[&file], latent(case), Wrt::AllParams, npz.to_string()));
        }
    }
    out.extend(own_cases());
    out
}

/// Our own models, for gradients no conformance case has: grouped convolutions (their
/// input and weight gradients) and pooling whose windows overlap, stride and are
/// padded; and LayerNorm over 45 and 16 features, whose sums run in partial sums (with
/// and without a tail; the conformance cases reduce fewer than 16 elements).
pub fn own_cases() -> Vec<Case> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cases = vec![own_case(&root.join("tests/models/grouped_conv_pools.json"), &[("input", &[2, 4, 7, 7]), ("conv1_w", &[6, 2, 3, 3]), ("conv2_w", &[6, 2, 3, 3])], "grouped_conv_pools")];
    if let Some(dir) = shared() {
        for d in [45, 16] {
            cases.push(own_case(&dir.join("testdata/layernorm.json"), &[("input", &[2, 3, d])], &format!("layernorm over {d}")));
        }
    }
    cases
}

/// The model at `json` with the given input and parameter shapes, its gradients, and
/// values on a 1/64 grid (exact in f32, so max pooling sees the same ties as the
/// interpreter).
pub fn own_case(json: &Path, shapes: &[(&str, &[u64])], label: &str) -> Case {
    let mut opts = mithril::Options::default();
    for (name, shape) in shapes {
        opts.shapes.insert((*name).into(), Shape::known(shape));
    }
    let graph = mithril::load(json, &opts).unwrap();
    let graphs = mithrilc::pipeline::Graphs::new(graph, &Wrt::AllParams, |_, _| {}).unwrap();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || (common::xorshift64(&mut state) % 129) as f64 / 64.0 - 1.0;
    let g = graphs.main();
    let feeds = g
        .inputs()
        .chain(g.params())
        .map(|v| {
            let ty = &g.node(v).ty;
            let shape = ty.shape.as_known().unwrap();
            let data = (0..shape.iter().product::<u64>()).map(|_| next()).collect();
            (g.node(v).name.clone().unwrap(), Tensor::new(ty.dtype, shape, data))
        })
        .collect();
    Case { label: format!("{label} (gradients)"), graphs, feeds, source: json.to_path_buf() }
}

/// Where `got` (a target's outputs) differs from `want` (the interpreter's) by more
/// than `tol` absolute + `tol` relative: one line per output that does (its first
/// such element). Returns the lines and the largest absolute difference.
pub fn compare(label: &str, got: &[(String, Tensor)], want: &[(String, Tensor)], tol: f64) -> (Vec<String>, f64) {
    let mut failures = Vec::new();
    let mut worst = 0.0f64;
    if got.len() != want.len() {
        failures.push(format!("{label}: {} outputs, the interpreter has {}", got.len(), want.len()));
    }
    for ((name, g), (_, w)) in got.iter().zip(want) {
        if g.shape != w.shape {
            failures.push(format!("{label}: {name}: shape {:?}, interpreter {:?}", g.shape, w.shape));
            continue;
        }
        for (x, y) in g.data.iter().zip(&w.data) {
            let err = if x == y || (x.is_nan() && y.is_nan()) { 0.0 } else { (x - y).abs() };
            // (a NaN error fails)
            let bound = if y.is_nan() { tol } else { tol + tol * y.abs() };
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            if !(err <= bound) {
                failures.push(format!("{label}: {name}: got {x}, interpreter {y}"));
                break;
            }
            worst = worst.max(err);
        }
    }
    (failures, worst)
}

/// Runs a built demo (`demo`, in `out`) of bench model `model` on the first `n` items
/// of `big` (a reference input) with `args` besides its input and output directory and
/// `env` in its environment, and compares its output with the interpreter's on the same
/// items within 1e-4.
#[allow(clippy::too_many_arguments)]
pub fn check_demo_at_batch(dir: &Path, model: &str, params: &ArrayFile, big: &Tensor, n: u64, demo: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    let out = demo.parent().unwrap();
    let per: usize = big.shape[1..].iter().product::<u64>() as usize;
    let mut shape = big.shape.clone();
    shape[0] = n;
    let input = Tensor { dtype: big.dtype, shape, data: big.data[..per * n as usize].to_vec() };
    let input_path = out.join(format!("input_b{n}.npy"));
    data::write_npy(&input_path, &input).unwrap();
    let run = std::process::Command::new(demo)
        .current_dir(out)
        .arg("--input")
        .arg(format!("input={}", input_path.display()))
        .arg("--out")
        .arg(out)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    if !run.status.success() {
        return Err(format!("{model} at B={n}: {}", String::from_utf8_lossy(&run.stderr)));
    }
    let got = data::read_arrays(&out.join("output_0.npy")).unwrap();
    let got = vec![("output".to_string(), got.arrays.values().next().unwrap().clone())];
    let file = ArrayFile { path: input_path.clone(), arrays: [("input".to_string(), input)].into_iter().collect() };
    let case = load(&dir.join(format!("bench/{model}.json")), &[params, &file], vec![], Wrt::None, format!("{model} B={n}"));
    let want = mithrilc::interp::run(case.graph(), &case.feeds).unwrap();
    let (bad, _) = compare(&case.label, &got, &want, 1e-4);
    if bad.is_empty() { Ok(()) } else { Err(bad.join("\n")) }
}

/// [`compare`] for reduced precision: each output within `1e-4 + rel * max |want|` of the
/// interpreter, `want`'s largest magnitude setting the scale of its rounding errors.
pub fn compare_scaled(label: &str, got: &[(String, Tensor)], want: &[(String, Tensor)], rel: f64) -> (Vec<String>, f64) {
    let mut failures = Vec::new();
    let mut worst = 0.0f64;
    for ((name, g), (_, w)) in got.iter().zip(want) {
        let scale = w.data.iter().filter(|x| x.is_finite()).fold(0.0f64, |m, x| m.max(x.abs()));
        let (bad, err) = compare(label, &[(name.clone(), g.clone())], &[(name.clone(), w.clone())], 1e-4 + rel * scale);
        failures.extend(bad);
        worst = worst.max(if scale > 0.0 { err / scale } else { err });
    }
    (failures, worst)
}

/// The largest error any case has shown so far, and which case (cases run in threads).
#[derive(Default)]
pub struct Worst(Mutex<(f64, String)>);

impl Worst {
    pub fn note(&self, err: f64, label: &str) {
        let mut w = self.0.lock().unwrap();
        if err > w.0 {
            *w = (err, label.to_string());
        }
    }
    pub fn get(self) -> (f64, String) {
        self.0.into_inner().unwrap()
    }
}

/// Runs `graphs` (what `case` compiles, or a part of it) through `target` built with
/// `build` and compares every output with the interpreter's within 1e-4, noting the
/// largest error in `worst`.
pub fn matches_interpreter(target: &dyn mithrilc::backend::Backend, case: &Case, graphs: &mithrilc::pipeline::Graphs, build: &cli::BuildConfig, worst: &Worst) -> Result<(), String> {
    let want = mithrilc::interp::run(graphs.main(), &case.feeds).map_err(|e| format!("{}: interpreter: {e}", case.label))?;
    let got = mithrilc::exec::run_once(target, graphs, &case.feeds, &case.source, build, Default::default()).map_err(|e| format!("{}: {e}", case.label))?;
    let (bad, err) = compare(&case.label, &got, &want, 1e-4);
    worst.note(err, &case.label);
    if bad.is_empty() { Ok(()) } else { Err(bad.join("\n")) }
}

/// A bench model compiled for a GPU target with a symbolic batch (`--shape
/// input=B,... --max B=max`, sources only) into `out`, its emulated demo built (`make
/// emulate`) and run at B = 1, 3 and `max` against the interpreter; `more` then runs it
/// again as it likes, given the demo, the parameters and the reference input (of batch
/// `file_batch`).
#[allow(clippy::too_many_arguments)]
pub fn symbolic_batch_under_emulation(
    dir: &Path,
    target: &'static dyn mithrilc::backend::Backend,
    model: &str,
    file_batch: u64,
    max: u64,
    out: &Path,
    more: impl Fn(&Path, &ArrayFile, &Tensor) -> Result<(), String>,
) -> Result<(), String> {
    let params_path = dir.join(format!("bench/{model}.safetensors"));
    let params = data::read_arrays(&params_path).unwrap();
    let big = data::read_arrays(&dir.join(format!("bench/{model}_b{file_batch}_input.npy"))).unwrap();
    let big = big.arrays.values().next().unwrap().clone();
    let row: Vec<String> = big.shape[1..].iter().map(|d| d.to_string()).collect();
    let args = cli::CompileArgs {
        model: cli::ModelArgs { model: dir.join(format!("bench/{model}.json")), shapes: vec![format!("input=B,{}", row.join(","))], ..Default::default() },
        target,
        params: Some(params_path.clone()),
        out: Some(out.to_path_buf()),
        emit: mithrilc::cli::Emit::Source,
        max: vec![format!("B={max}")],
        ..Default::default()
    };
    cli::compile(&args).map_err(|e| format!("{model}: {e}"))?;
    make_emulate(out)?;
    let demo = out.join(format!("{model}_demo_emu"));
    for n in [1, 3, max].into_iter().filter(|&n| n <= max) {
        check_demo_at_batch(dir, model, &params, &big, n, &demo, &[], &[])?;
    }
    more(&demo, &params, &big)
}

/// `make emulate` in an output directory: a GPU target's emulated demo.
pub fn make_emulate(out: &Path) -> Result<(), String> {
    let make = std::process::Command::new("make").current_dir(out).args(["-s", "emulate"]).output().unwrap();
    if make.status.success() { Ok(()) } else { Err(format!("make emulate in {}: {}", out.display(), String::from_utf8_lossy(&make.stderr))) }
}

/// lenet compiled for a GPU target with `--weights safetensors` (no `weights.bin`), its
/// emulated demo reading the parameters from the safetensors file at run time, run with
/// each of `runs` (arguments besides `--safetensors FILE`) against the interpreter.
pub fn safetensors_demo_under_emulation(dir: &Path, target: &'static dyn mithrilc::backend::Backend, runs: &[&[&str]]) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("lenet");
    let args = cli::CompileArgs {
        model: cli::ModelArgs { model: dir.join("bench/lenet.json"), shapes: vec!["input=1,1,28,28".into()], ..Default::default() },
        target,
        params: Some(dir.join("bench/lenet.safetensors")),
        out: Some(out.clone()),
        emit: mithrilc::cli::Emit::Source,
        weights: cli::WeightsMode::Safetensors,
        ..Default::default()
    };
    cli::compile(&args).unwrap();
    assert!(!out.join("weights.bin").exists());
    make_emulate(&out).unwrap();
    let params = data::read_arrays(&dir.join("bench/lenet.safetensors")).unwrap();
    let input = data::read_arrays(&dir.join("bench/lenet_b1_input.npy")).unwrap().arrays.values().next().unwrap().clone();
    let st = format!("{}", dir.join("bench/lenet.safetensors").display());
    for run in runs {
        let args: Vec<&str> = ["--safetensors", st.as_str()].into_iter().chain(run.iter().copied()).collect();
        check_demo_at_batch(dir, "lenet", &params, &input, 1, &out.join("lenet_demo_emu"), &args, &[]).unwrap();
    }
}

/// `run --target TARGET` (not emulated) on the example MLP with its data.
pub fn example_mlp_run(target: &'static dyn mithrilc::backend::Backend) -> cli::RunArgs {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    cli::RunArgs {
        model: cli::ModelArgs { model: root.join("examples/mlp/mlp.json"), ..Default::default() },
        target: cli::RunTarget::Compiled(target),
        check: false,
        emulate: false,
        precision: Default::default(),
        gemm: Default::default(),
        accumulate: None,
        quantize: Default::default(),
        data: vec![root.join("examples/mlp/data.npz").display().to_string()],
        params: Some(root.join("examples/mlp/data.npz")),
        output: None,
        triple: None,
        no_cache: false,
        threads: None,
        repeat: None,
    }
}

/// Every case through `target` with `build` (`what` names the run for the summary),
/// each within 1e-4 of the interpreter; prints the worst error.
pub fn every_case_matches(dir: &Path, target: &dyn mithrilc::backend::Backend, build: &cli::BuildConfig, what: &str) {
    let all = cases(dir);
    let worst = Worst::default();
    let failures = common::each_case(&all, |case| matches_interpreter(target, case, &case.graphs, build, &worst));
    let (err, label) = worst.get();
    println!("{} models run {what}; worst abs error {err:.2e} ({label})", all.len() - failures.len());
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// The bench cases a reduced `--precision` is measured on: mlp at batch 32 (whose
/// products have more than 4 rows, so they take the reduced paths), the others at 1.
pub fn precision_bench(case: &&Case) -> bool {
    matches!(case.label.as_str(), "mlp b32" | "lenet b1" | "cnn b1" | "gpt_block b1")
}

/// Each run `(precision, tolerance, case)` through `target` built as `build` says (under
/// emulation, or for the GPU), its products run as `gemm` says, within its tolerance of
/// the interpreter relative to each output's largest magnitude; prints the worst error of
/// each precision.
pub fn reduced_precisions_match(target: &dyn mithrilc::backend::Backend, build: &cli::BuildConfig, gemm: cli::Gemm, runs: &[(cli::Precision, f64, &Case)]) {
    let worst = Mutex::new(Vec::new());
    let failures = common::each_case(runs, |&(precision, tol, case)| {
        let label = format!("{} at {} (--gemm {})", case.label, precision.name(), gemm.name());
        let want = mithrilc::interp::run(case.graph(), &case.feeds).map_err(|e| format!("{label}: interpreter: {e}"))?;
        let opts = mithrilc::backend::EmitOptions { precision, gemm, ..Default::default() };
        let got = mithrilc::exec::run_once(target, &case.graphs, &case.feeds, &case.source, build, opts).map_err(|e| format!("{label}: {e}"))?;
        let (bad, err) = compare_scaled(&label, &got, &want, tol);
        worst.lock().unwrap().push((precision.name(), err, label));
        if bad.is_empty() { Ok(()) } else { Err(bad.join("\n")) }
    });
    let worst = worst.into_inner().unwrap();
    let mut names: Vec<&str> = worst.iter().map(|(n, _, _)| *n).collect();
    names.sort_unstable();
    names.dedup();
    for p in names {
        if let Some((_, err, label)) = worst.iter().filter(|(n, _, _)| *n == p).max_by(|a, b| a.1.total_cmp(&b.1)) {
            println!("{p}: worst error {err:.2e} of the output's scale ({label})");
        }
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}
