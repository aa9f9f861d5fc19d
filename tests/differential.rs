//! The interpreter against the C target and the JIT, forward and backward. Every test-data case,
//! every benchmark model and a stream of random small models (tests/common/
//! random_model.rs: convolutions, pooling, linear layers, activations, residuals,
//! reshapes, softmax, reductions at awkward sizes, strides, padding and dilation) is
//! compiled twice: forward only (the fast weight layouts: GEMM panels, Winograd) and
//! with `--grad` (the library's `_backward`: every output and every parameter's
//! gradient, the input's too for random models, whose input is differentiable). Each
//! run is compared with the interpreter on the same graph, and so is the same model
//! through the in-process JIT (`mithrilc::exec::Jit`, which lowers as the C target
//! does), at the same tolerance.
//!
//! The C library is built the way `mithrilc::exec::run_once` builds it (same lowering options
//! and files), except that the runtime is compiled once per test process, into a runner
//! that loads each model as a shared object in place of its demo (tests/common/c_build.rs),
//! and cases run on every core: building the 2,000-line runtime and a demo per model
//! would dominate the test's time.
//!
//! The compiler is `$CC` (default `cc`), with `run --target c`'s optimisation (`-O3`)
//! for this CPU alone (`-march=native -DMR_NO_DISPATCH`, as `--cpu native` builds: the
//! vector code this machine runs, without the kernel sets and clones it would not)
//! unless `MITHRILC_DIFF_CFLAGS` gives other flags.
//! `MITHRILC_DIFF_MODELS=N` (default 64; half as many in f64) sets how many random models run, from seed
//! `MITHRILC_DIFF_SEED` (default 1) on (`MITHRILC_DIFF_LIST=1` prints each model's
//! layers); a failure prints its seed, the model's layers, its JSON and the largest
//! difference, and keeps its C sources under `target/differential/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use mithrilc::backend::JitTier;
use mithrilc::pipeline::Graphs;
use mithrilc::data::{self, ArrayFile};
use mithrilc::frontend::mithril;
use mithrilc::ir::{Dtype, Graph, Shape, TensorType};
use mithrilc::passes::autodiff::Wrt;
use mithrilc::tensor::Tensor;

use crate::common::{self, c_build, random_model};

use c_build::Toolchain;

/// The C compiler's flags: `run --target c`'s optimisation for this CPU (the runtime's
/// vector paths for this machine), or `MITHRILC_DIFF_CFLAGS`.
fn cflags() -> Vec<String> {
    match std::env::var("MITHRILC_DIFF_CFLAGS") {
        Ok(flags) => flags.split_whitespace().map(str::to_string).collect(),
        Err(_) => c_build::for_this_cpu(mithrilc::cli::HOST_CFLAGS),
    }
}

fn shared() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    dir.join("testdata/manifest.json").exists().then_some(dir)
}

/// The process's C toolchain (the runtime built once), or `None` after saying why
/// the tests skip.
fn toolchain() -> Option<&'static Toolchain> {
    let tc = c_build::toolchain(&cflags());
    if tc.is_none() {
        common::skip("a C compiler is needed (apt-get install gcc, or set CC)");
    }
    tc
}

/// `../shared` and the toolchain, or `None` after saying why the test skips.
fn shared_and_toolchain() -> Option<(PathBuf, &'static Toolchain)> {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return None;
    };
    Some((dir, toolchain()?))
}

/// The bound on an output's error, absolute and relative, by its type: f64 outputs are
/// computed in f64 by both, so they may differ only by rounding in other orders of
/// summation; f32 ones by [`mismatch`]'s argument.
fn tolerance(dtype: Dtype) -> f64 {
    if dtype == Dtype::F64 {
        1e-10
    } else {
        1e-4
    }
}

/// One model with its data, run forward or backward.
struct Case {
    label: String,
    graphs: Graphs,
    feeds: BTreeMap<String, Tensor>,
    /// What a failure prints to reproduce it (the random model's seed and JSON).
    repro: String,
}

/// Where `got` differs from the interpreter's `want` for output `name`, if it does.
///
/// Every f32 output, gradients included, gets tests/c_target.rs's bound: 1e-4 absolute +
/// 1e-4 relative ([`tolerance`]). A gradient is a sum over everything its output depends on, which the
/// C target accumulates in f32 in other orders (blocked GEMMs, partial sums) than the
/// interpreter's f64, so it could need more; it has not: on every case here, with
/// clang, and with gcc once its vectorizer bug is avoided (see `worst`), the largest
/// gradient error stays within the forward bound. A NaN must meet a NaN.
fn mismatch(label: &str, name: &str, got: &Tensor, want: &Tensor, worst: &Mutex<(f64, String)>) -> Option<String> {
    if got.shape != want.shape {
        return Some(format!("{name}: shape {:?}, interpreter {:?}", got.shape, want.shape));
    }
    // Each element's error as a fraction of its bound (NaN against a number: infinite).
    let tol = tolerance(want.dtype);
    let ratio = |(x, y): (&f64, &f64)| {
        if x == y || (x.is_nan() && y.is_nan()) {
            0.0
        } else if x.is_nan() || y.is_nan() {
            f64::INFINITY
        } else {
            (x - y).abs() / (tol + tol * y.abs())
        }
    };
    let ratios: Vec<f64> = got.data.iter().zip(&want.data).map(ratio).collect();
    let i = (0..ratios.len()).fold(0, |w, i| if ratios[i] > ratios[w] { i } else { w });
    let &r = ratios.get(i)?;
    {
        let mut worst = worst.lock().unwrap();
        if r > worst.0 {
            *worst = (r, format!("{label}: {name}"));
        }
    }
    let bad = ratios.iter().filter(|&&r| r > 1.0).count();
    (bad > 0).then(|| {
        format!(
            "{name} {:?}: {bad} of {} elements differ; worst at flat index {i}: C {}, interpreter {}",
            want.shape,
            want.data.len(),
            got.data[i],
            want.data[i]
        )
    })
}

/// Moves a failed case's build directory to `target/differential/<label>`, with the
/// interpreter's outputs (`interp.npz`) and the failure report (`failure.txt`).
fn keep(dir: &Path, label: &str, want: &[(String, Tensor)], report: &str) -> PathBuf {
    let name: String = label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let kept = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/differential").join(name);
    let _ = std::fs::remove_dir_all(&kept);
    std::fs::create_dir_all(kept.parent().unwrap()).unwrap();
    // A rename fails across file systems: copy then.
    if std::fs::rename(dir, &kept).is_err() {
        std::fs::create_dir_all(&kept).unwrap();
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), kept.join(e.file_name())).unwrap();
        }
    }
    data::write_npz(&kept.join("interp.npz"), want).unwrap();
    std::fs::write(kept.join("failure.txt"), report).unwrap();
    kept
}

/// What [`check`] found: how many runs, each failure's report, and the largest error
/// relative to its bound with the output it was in.
struct Checked {
    runs: usize,
    failures: Vec<String>,
    worst: (f64, String),
}

/// Runs `cases` on every core, each against the interpreter: on the C target and
/// through the JIT.
fn check(tc: &Toolchain, cases: Vec<Case>) -> Checked {
    check_with(tc, cases, mithrilc::codegen::c::LIBRARY, true)
}

/// [`check`], lowering for `library` in place of the C runtime's; the JIT too when `jit`
/// (it lowers for the C runtime's).
fn check_with(tc: &Toolchain, cases: Vec<Case>, library: mithrilc::lower::Library, jit: bool) -> Checked {
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let worst = Mutex::new((0.0, String::new()));
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(cases.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                // Unique in the process: the three tests run at once.
                static DIRS: AtomicUsize = AtomicUsize::new(0);
                let id = DIRS.fetch_add(1, Ordering::Relaxed);
                let report = |what: String| failures.lock().unwrap().push(format!("{}: {what}{}", case.label, case.repro));
                let want = match mithrilc::interp::run(case.graphs.main(), &case.feeds) {
                    Ok(w) => w,
                    Err(e) => {
                        report(format!("the interpreter fails: {e}"));
                        continue;
                    }
                };
                // Each tier of the JIT this build has (LLVM with the `llvm` feature).
                let tiers: &[JitTier] = if !jit { &[] } else if cfg!(feature = "llvm") { &[JitTier::Cranelift, JitTier::Llvm] } else { &[JitTier::Cranelift] };
                for &tier in tiers {
                    let run = || -> Result<Vec<(String, Tensor)>, String> {
                        use mithrilc::exec::Executable;
                        let mut exe = mithrilc::exec::Jit::with_tier(tier, &case.graphs, &case.feeds, Default::default()).map_err(|e| e.to_string())?;
                        exe.set_threads(1);
                        exe.run(&case.feeds).map_err(|e| e.to_string())
                    };
                    match run() {
                        Err(e) => report(format!("jit ({tier:?}): {e}")),
                        Ok(got) => {
                            let diffs: Vec<String> = got.iter().zip(&want).filter_map(|((name, g), (_, w))| mismatch(&format!("{} (jit, {tier:?})", case.label), name, g, w, &worst)).collect();
                            if !diffs.is_empty() {
                                report(format!("jit ({tier:?}): {}", diffs.join("\n    ")));
                            }
                        }
                    }
                }
                let dir = tc.dir.path().join(format!("case{id}"));
                let failure = match c_build::run_c_with(tc, &case.graphs, &case.feeds, &dir, library) {
                    Err(e) => Some(e),
                    Ok(got) if got.len() != want.len() => Some(format!("{} outputs, the interpreter {}", got.len(), want.len())),
                    Ok(got) => {
                        let diffs: Vec<String> =
                            got.iter().zip(&want).filter_map(|((name, g), (_, w))| mismatch(&case.label, name, g, w, &worst)).collect();
                        (!diffs.is_empty()).then(|| diffs.join("\n    "))
                    }
                };
                match failure {
                    None => {
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                    Some(what) => {
                        let kept = keep(&dir, &case.label, &want, &format!("{what}{}", case.repro));
                        report(format!("{what}\n  (C sources, inputs and the interpreter's outputs kept in {})", kept.display()));
                    }
                }
            });
        }
    });
    Checked { runs: cases.len(), failures: failures.into_inner().unwrap(), worst: worst.into_inner().unwrap() }
}

/// Values on a 1/64 grid in [-1, 1]: exact in f32, so sums of a few products are exact
/// in both the C target and the interpreter and max pooling sees the same ties.
fn grid(state: &mut u64, n: usize) -> Vec<f64> {
    (0..n).map(|_| (common::xorshift64(state) % 129) as f64 / 64.0 - 1.0).collect()
}

/// Feeds for every input and parameter of `g`: from `files` where they hold it,
/// else grid values (output cotangents always: ones would make softmax's gradient
/// vanish).
fn feeds(g: &Graph, files: &[&ArrayFile], seed: u64) -> BTreeMap<String, Tensor> {
    let mut state = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    let arrays = mithrilc::cli::arrays_by_name(files).expect("each array given once");
    g.inputs()
        .chain(g.params())
        .map(|v| {
            let node = g.node(v);
            let name = node.name.clone().expect("inputs and parameters are named");
            let found = if name.starts_with("output_grad/") { None } else { arrays.get(&name) };
            let t = match found {
                Some(found) => found.tensor.clone(),
                None => {
                    let shape = node.ty.shape.as_known().expect("static shapes");
                    let n = shape.iter().product::<u64>() as usize;
                    Tensor::new(node.ty.dtype, shape, grid(&mut state, n))
                }
            };
            (name, t)
        })
        .collect()
}

/// The forward and the backward case of one model (the backward one only when it has
/// parameters).
fn both(label: &str, graph: Graph, files: &[&ArrayFile], repro: &str) -> Vec<Case> {
    let mut out = Vec::new();
    let has_params = graph.params().next().is_some();
    for wrt in [Wrt::None, Wrt::AllParams] {
        let backward = wrt != Wrt::None;
        if backward && !has_params {
            continue;
        }
        let graphs = Graphs::new(graph.clone(), &wrt, |_, _| {}).unwrap_or_else(|e| panic!("{label}: {e}{repro}"));
        // FNV-1a of the label: each case its own values, the same on every run.
        let seed = label.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        let feeds = feeds(graphs.main(), files, seed + backward as u64);
        let label = format!("{label} {}", if backward { "backward" } else { "forward" });
        out.push(Case { label, graphs, feeds, repro: repro.to_string() });
    }
    out
}

/// Loads a model with the types of the arrays in `files` known.
fn load(json: &Path, files: &[&ArrayFile], set: Vec<(String, serde_json::Value)>) -> Graph {
    let known_types = mithrilc::cli::known_types(files).expect("each array given once");
    let opts = mithril::Options { set, known_types, ..Default::default() };
    mithril::load(json, &opts).unwrap_or_else(|e| panic!("{}: {e}", json.display()))
}

/// Constructor values a test-data case needs that its JSON lost (as tests/c_target.rs).
fn latent(case: &str) -> Vec<(String, serde_json::Value)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/latent").join(format!("{case}.json"));
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["set"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn finish(what: &str, c: Checked, note: &str) {
    let (runs, failures) = (c.runs, &c.failures);
    println!("{what}: {} of {runs} runs match the interpreter; largest error {:.2} of its bound ({})", runs - failures.len(), c.worst.0, c.worst.1);
    assert!(failures.is_empty(), "{} of {runs} runs differ:\n{}{note}", failures.len(), failures.join("\n\n"));
}

#[test]
fn every_testdata_case_forward_and_backward() {
    let Some((dir, tc)) = shared_and_toolchain() else { return };
    finish("test data", check(tc, testdata_cases(&dir, false)), &tc.note);
}

/// The test data with its f32 arrays widened to f64, as Mithril's own tests run.
#[test]
fn every_testdata_case_in_f64_forward_and_backward() {
    let Some((dir, tc)) = shared_and_toolchain() else { return };
    finish("test data in f64", check(tc, testdata_cases(&dir, true)), &tc.note);
}

/// Every variant of every test-data case, forward and backward; with `f64`, its f32
/// arrays (and so the model's types) made f64.
fn testdata_cases(dir: &Path, f64: bool) -> Vec<Case> {
    let text = std::fs::read_to_string(dir.join("testdata/manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text.replace(": Infinity", ": null").replace(": NaN", ": null")).unwrap();
    let mut cases = Vec::new();
    for (case, entry) in manifest.as_object().unwrap() {
        let Some(variants) = entry["variants"].as_array() else { continue };
        for v in variants {
            let npz = v["npz"].as_str().unwrap();
            let mut file = data::read_arrays(&dir.join("testdata").join(npz)).unwrap();
            if f64 {
                file.arrays.values_mut().filter(|t| t.dtype == Dtype::F32).for_each(|t| t.dtype = Dtype::F64);
            }
            let graph = load(&dir.join("testdata").join(entry["json"].as_str().unwrap()), &[&file], latent(case));
            cases.extend(both(&format!("{npz}{}", if f64 { " f64" } else { "" }), graph, &[&file], ""));
        }
    }
    cases
}

/// Each benchmark model at batch 1 (tests/c_target.rs runs the larger batches forward).
#[test]
fn every_bench_model_forward_and_backward() {
    let Some((dir, tc)) = shared_and_toolchain() else { return };
    finish("bench models", check(tc, bench_cases(&dir)), &tc.note);
}

/// Each benchmark model at batch 1, forward and backward.
fn bench_cases(dir: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    for model in ["mlp", "lenet", "cnn", "gpt_block"] {
        let params = data::read_arrays(&dir.join(format!("bench/{model}.safetensors"))).unwrap();
        let input = data::read_arrays(&dir.join(format!("bench/{model}_b1_input.npy"))).unwrap();
        let input = ArrayFile { path: input.path, arrays: [("input".to_string(), input.arrays[0].clone())].into_iter().collect() };
        let graph = load(&dir.join(format!("bench/{model}.json")), &[&params, &input], vec![]);
        cases.extend(both(&format!("{model} b1"), graph, &[&params, &input], ""));
    }
    cases
}

/// With an empty kernel library every matrix product, convolution, pooling and softmax
/// is a loop kernel (as on a target whose library has none of them), and the C target's
/// layout pass still lays weights out for how those loops read them: the bench models
/// and the test-data cases with such ops, forward and backward, give the interpreter's
/// numbers.
#[test]
fn everything_as_loops_without_a_kernel_library() {
    let Some((dir, tc)) = shared_and_toolchain() else { return };
    let mut cases = bench_cases(&dir);
    let some = ["linear", "conv", "lenet", "maxpool", "softmax", "attention", "matmul", "gpt_tiny", "shared_weight", "mlp"];
    cases.extend(testdata_cases(&dir, false).into_iter().filter(|c| some.iter().any(|s| c.label.contains(s))));
    finish("without a kernel library", check_with(tc, cases, mithrilc::lower::Library::default(), false), &tc.note);
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

#[test]
fn random_models_forward_and_backward() {
    let Some(tc) = toolchain() else { return };
    let (first, count) = (env_u64("MITHRILC_DIFF_SEED", 1), env_u64("MITHRILC_DIFF_MODELS", 64));
    finish(&format!("random models (seeds {first}..{})", first + count), check(tc, random_cases(first, count, false)), &tc.note);
}

/// The first half of the same random models with every input and parameter f64
/// (Mithril's own tests run in float64): the C target's f64 paths, forward and
/// backward, at f64's bound. They are the f32 kernels with another type, so half the
/// models cover them, and keep the suite in its time budget.
#[test]
fn random_models_in_f64_forward_and_backward() {
    let Some(tc) = toolchain() else { return };
    let (first, count) = (env_u64("MITHRILC_DIFF_SEED", 1), env_u64("MITHRILC_DIFF_MODELS", 64).div_ceil(2));
    finish(&format!("random f64 models (seeds {first}..{})", first + count), check(tc, random_cases(first, count, true)), &tc.note);
}

/// The forward and backward cases of the random models of seeds `first..first + count`,
/// in f64 when `f64`.
fn random_cases(first: u64, count: u64, f64: bool) -> Vec<Case> {
    let mut cases = Vec::new();
    for seed in first..first + count {
        let m = random_model::generate(seed, 8);
        let shapes: Vec<String> = m.shapes.iter().map(|(n, s)| format!("--shape {n}={}", s.iter().map(u64::to_string).collect::<Vec<_>>().join(","))).collect();
        let test = if f64 { "random_models_in_f64" } else { "random_models_forward" };
        let repro = format!(
            "\n  seed {seed}: {}\n  {}\n  rerun: MITHRILC_DIFF_SEED={seed} MITHRILC_DIFF_MODELS=1 cargo test --test suite differential::{test}\n  model JSON:\n{}",
            m.summary,
            shapes.join(" "),
            m.json
        );
        let mut opts = mithril::Options::default();
        for (name, shape) in &m.shapes {
            opts.shapes.insert(name.clone(), Shape::known(shape));
        }
        if std::env::var_os("MITHRILC_DIFF_LIST").is_some() {
            println!("seed {seed}: {}", m.summary);
        }
        let load = |opts: &mithril::Options| mithril::load_str(&m.json, "random.json", "random", opts).unwrap_or_else(|e| panic!("seed {seed}: {e}{repro}"));
        let mut graph = load(&opts);
        if f64 {
            // As data files of f64 arrays would type them.
            opts.known_types = graph.inputs().chain(graph.params()).map(|v| (graph.node(v).name.clone().unwrap(), TensorType::new(Dtype::F64, graph.ty(v).shape.clone()))).collect();
            graph = load(&opts);
        }
        let label = format!("seed {seed}{}", if f64 { " f64" } else { "" });
        cases.extend(both(&label, graph, &[], &repro));
    }
    cases
}
