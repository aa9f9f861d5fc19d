//! Generated code, committed: the C, CUDA, Metal and ggml targets' sources for every
//! `../shared/bench` model at batch 1, two of them with `--grad` (the backward pass and
//! the training step), one with `--quantize q8_0` (the C target's alone: cnn, whose
//! weights are read narrow by the GEMM and widened for the convolutions), and every
//! test-data case.
//! - `tests/out/c/{bench,testdata}/<case>/`: the C files as `mithrilc compile --target c
//!   --emit source` writes them. The runtime's files (`mithril_*` and `mr_*`, copied
//!   verbatim from `runtime-c/`, the demo's file readers `mr_files.*` among them), the
//!   runtime's renaming list `<name>.syms` (the same names for every model) and
//!   `weights.bin` are not kept.
//! - `tests/out/cuda/.../`: `<name>.cu` and `<name>.h` as `compile --target cuda --emit
//!   source` writes them (the demo and Makefile come from templates the C files show;
//!   `tests/cuda_target.rs` builds everything with nvcc and runs it under emulation).
//! - `tests/out/ggml/.../`: `<name>.c` and `<name>.h` as `compile --target ggml --emit
//!   source` writes them (`tests/ggml_target.rs` builds and runs them against ggml).
//! - `tests/out/metal/.../`: `<name>.metal`, `<name>.c` and `<name>.h` as `compile
//!   --target metal --emit source` writes them (`tests/metal_target.rs` runs them under
//!   emulation); a model Metal refuses (it has no f64) keeps the refusal instead, as a
//!   file `refused` starting `refused: `.
//!
//! A change to lowering or codegen shows up as a diff of these files in review. Each is
//! stored as `NAME.golden` (`mlp.c.golden`): generated code repeats itself by design,
//! and the suffix keeps it out of the tree's duplicate-code reports.
//! `UPDATE_EXPECT=1 cargo test --test suite golden::` rewrites the files and prints what
//! changed as a unified diff.
//! The same compiles check the program's text form: printed after each program pass, it
//! parses back to the same program.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use mithrilc::backend::Backend;
use mithrilc::cli;
use mithrilc::codegen::{c, cuda, ggml, metal};
use mithrilc::data;
use mithrilc::lower::{parse::parse, print::print};
use mithrilc::passes::autodiff::Wrt;

use crate::common;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Generated files by name, or why there are none.
type Files = Result<BTreeMap<String, String>, String>;

/// What writes one target's files for a case.
type Generate = fn(&Case) -> Files;

/// One model compiled for the golden files.
struct Case {
    /// `bench/<model>` or `testdata/<case>`: its directory under `tests/out/<target>`.
    name: String,
    model: PathBuf,
    shapes: Vec<String>,
    set: Vec<String>,
    params: Option<PathBuf>,
    grad: bool,
    /// `--quantize` (other than f32: the C target's only).
    quantize: cli::Quantize,
}

impl Case {
    fn model_args(&self) -> cli::ModelArgs {
        let grad = if self.grad { Wrt::AllParams } else { Wrt::None };
        cli::ModelArgs { model: self.model.clone(), shapes: self.shapes.clone(), set: self.set.clone(), grad, ..Default::default() }
    }
}

/// The files of one `compile --emit source` for `target`, by name, that `keep` keeps
/// (the runtime's copies, its renaming list `<name>.syms`, `weights.bin` and the output
/// directory's own record never).
fn generate(case: &Case, target: &'static dyn Backend, runtime: &[(&str, &str)], keep: impl Fn(&str) -> bool) -> Files {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let args = cli::CompileArgs {
        model: case.model_args(),
        target,
        params: case.params.clone(),
        out: Some(out.clone()),
        emit: mithrilc::cli::Emit::Source,
        quantize: case.quantize,
        ..Default::default()
    };
    cli::compile(&args).map_err(|e| format!("{}: {e}", case.model.display()))?;
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&out).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let copied = runtime.iter().chain(c::DEMO_FILES).any(|(file, _)| *file == name);
        if copied || name == "weights.bin" || name.ends_with(".syms") || name.starts_with('.') || !keep(&name) {
            continue;
        }
        files.insert(name.clone(), std::fs::read_to_string(out.join(&name)).unwrap());
    }
    Ok(files)
}

fn generate_c(case: &Case) -> Files {
    generate(case, &c::backend::CTarget, c::RUNTIME_FILES, |_| true)
}

/// The CUDA model's own source and header.
fn generate_cuda(case: &Case) -> Files {
    generate(case, &cuda::backend::CudaTarget, cuda::RUNTIME_FILES, |name| (name.ends_with(".cu") && !name.ends_with("_demo.cu")) || name.ends_with(".h"))
}

/// The ggml model's own source and header (the demo and Makefile are templates; the
/// GGUF file holds data, and needs the parameters); a model the target refuses keeps
/// the refusal instead, as `refused`, starting `refused: `.
fn generate_ggml(case: &Case) -> Files {
    refused_as_file(generate(case, &ggml::backend::GgmlTarget, &[], |name| (name.ends_with(".c") && !name.ends_with("_demo.c")) || name.ends_with(".h")), "ggml")
}

/// A model `target` refuses as one file `refused`, holding the refusal (without the
/// model's path, which names this checkout).
fn refused_as_file(files: Files, target: &str) -> Files {
    files.or_else(|e| match e.split_once(": ").filter(|(_, why)| why.contains(&format!("the {target} target cannot compile"))) {
        Some((_, why)) => Ok([("refused".to_string(), format!("refused: {why}\n"))].into_iter().collect()),
        None => Err(e),
    })
}

/// How a target's programs are compiled: its library, and its program passes for a
/// case that trains (`true`) or not.
type TargetPrograms = (mithrilc::lower::Library, fn(bool) -> &'static [mithrilc::passes::ProgramPass]);

const C_PROGRAMS: TargetPrograms = (c::LIBRARY, |training| if training { c::PASSES_ROW_MAJOR } else { c::PASSES });

/// The CUDA target's: its library adds attention, and it has no program passes.
const CUDA_PROGRAMS: TargetPrograms = (cuda::LIBRARY, |_| &[]);

/// A case's programs (forward, then backward with `--grad`) as `target` compiles them;
/// `after` sees each program after every pass.
fn programs(case: &Case, (library, passes): &TargetPrograms, mut after: impl FnMut(&str, &mithrilc::lower::Program)) -> Result<Vec<mithrilc::lower::Program>, String> {
    let err = |e: mithrilc::error::Error| format!("{}: {e}", case.model.display());
    let params = case.params.as_deref().map(data::read_arrays).transpose().map_err(err)?;
    let graphs = cli::load_graphs(&case.model_args(), &params.iter().collect::<Vec<_>>()).map_err(err)?;
    let quantize = if *library == c::LIBRARY { c::stored(case.quantize).map_err(err)? } else { Default::default() };
    let opts = mithrilc::lower::Options { library: *library, quantize, ..Default::default() };
    let passes = passes(graphs.backward.is_some());
    std::iter::once(&graphs.forward).chain(&graphs.backward).map(|g| mithrilc::passes::compile(g, &opts, passes, &mut after).map_err(err)).collect()
}

/// The Metal model's kernels, host code and header (the demo and Makefile are
/// templates; `<name>_emu.cpp` a table of the kernels); a model the target refuses (it
/// has no f64) keeps the refusal instead, as `refused`, starting `refused: `.
fn generate_metal(case: &Case) -> Files {
    let keep = |name: &str| name.ends_with(".metal") || (name.ends_with(".c") && !name.ends_with("_demo.c")) || name.ends_with(".h");
    refused_as_file(generate(case, &metal::backend::MetalTarget, metal::RUNTIME_FILES, keep), "metal")
}

/// A bench model at batch 1 (its parameters from its safetensors file).
fn bench(model: &str, grad: bool) -> Case {
    let bench = root().join("../shared/bench");
    let input = data::read_arrays(&bench.join(format!("{model}_b1_input.npy"))).unwrap();
    let shape = input.arrays.values().next().expect("one array").shape.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    Case {
        name: format!("bench/{model}{}", if grad { "_grad" } else { "" }),
        model: bench.join(format!("{model}.json")),
        shapes: vec![format!("input={shape}")],
        set: vec![],
        params: Some(bench.join(format!("{model}.safetensors"))),
        grad,
        quantize: cli::Quantize::F32,
    }
}

/// Every test-data case of `../shared/testdata/manifest.json` (its first variant's
/// shapes, and the constructor values its JSON lost from `tests/conformance/latent`).
fn testdata() -> Vec<Case> {
    let dir = root().join("../shared/testdata");
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text.replace(": Infinity", ": null").replace(": NaN", ": null")).unwrap();
    let mut out = Vec::new();
    for (case, entry) in manifest.as_object().unwrap() {
        let (Some(json), Some(variant)) = (entry["json"].as_str(), entry["variants"].get(0)) else { continue };
        let mut shapes = Vec::new();
        for kind in ["inputs", "params"] {
            for (name, dims) in variant[kind].as_object().into_iter().flatten() {
                let dims: Vec<String> = dims.as_array().unwrap().iter().map(|d| d.to_string()).collect();
                shapes.push(format!("{name}={}", dims.join(",")));
            }
        }
        let latent = root().join("tests/conformance/latent").join(format!("{case}.json"));
        let set = std::fs::read_to_string(latent).map_or_else(
            |_| Vec::new(),
            |t| {
                let v: serde_json::Value = serde_json::from_str(&t).unwrap();
                v["set"].as_object().unwrap().iter().map(|(k, v)| format!("{k}={v}")).collect()
            },
        );
        out.push(Case { name: format!("testdata/{case}"), model: dir.join(json), shapes, set, params: None, grad: false, quantize: cli::Quantize::F32 });
    }
    out
}

/// Every case: the bench models (two also with `--grad`), then the test data.
fn cases() -> Vec<Case> {
    let mut cases: Vec<Case> = [("mlp", false), ("lenet", false), ("cnn", false), ("gpt_block", false), ("mlp", true), ("lenet", true)]
        .into_iter()
        .map(|(model, grad)| bench(model, grad))
        .collect();
    cases.push(Case { name: "bench/cnn_q8_0".into(), quantize: cli::Quantize::Q8_0, ..bench("cnn", false) });
    cases.extend(testdata());
    cases
}

/// Where generated file `name` is kept.
fn golden(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.golden"))
}

/// Where `got` and the committed files in `dir` differ: one line per file.
fn compare(dir: &Path, got: &BTreeMap<String, String>) -> Vec<String> {
    let mut problems = Vec::new();
    let committed: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().trim_end_matches(".golden").to_string()).collect())
        .unwrap_or_default();
    for name in committed.iter().filter(|n| !got.contains_key(*n)) {
        problems.push(format!("{}: no longer generated", golden(dir, name).display()));
    }
    for (name, text) in got {
        let want = std::fs::read_to_string(golden(dir, name)).unwrap_or_default();
        if *text != want {
            let line = text.lines().zip(want.lines()).position(|(a, b)| a != b).unwrap_or_else(|| text.lines().count().min(want.lines().count()));
            let show = |s: &str| s.lines().nth(line).unwrap_or("(end of file)").to_string();
            problems.push(format!("{}: line {}\n    now: {}\n    was: {}", golden(dir, name).display(), line + 1, show(text), show(&want)));
        }
    }
    problems
}

/// Rewrites the committed files of one case with `got`, printing a unified diff of
/// what changed (through `diff -u`, where it is installed).
fn rewrite(dir: &Path, got: &BTreeMap<String, String>) {
    let old = tempfile::tempdir().unwrap();
    if dir.exists() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), old.path().join(entry.file_name())).unwrap();
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
    std::fs::create_dir_all(dir).unwrap();
    for (name, text) in got {
        std::fs::write(golden(dir, name), text).unwrap();
    }
    if let Ok(o) = Command::new("diff").args(["-u", "-N", "-r"]).arg(old.path()).arg(dir).output() {
        print!("{}", String::from_utf8_lossy(&o.stdout));
    }
}

/// Whether `../shared` (the bench models and test data) is missing, after saying so.
fn shared_missing() -> bool {
    let missing = !root().join("../shared/bench").exists() || !root().join("../shared/testdata").exists();
    if missing {
        common::skip("../shared is not present");
    }
    missing
}

#[test]
fn generated_code_matches_the_committed_files() {
    if shared_missing() {
        return;
    }
    let mut problems = Vec::new();
    for case in cases() {
        let targets: [(&str, Generate); 4] = [("c", generate_c), ("cuda", generate_cuda), ("metal", generate_metal), ("ggml", generate_ggml)];
        let quantized = case.quantize != cli::Quantize::F32;
        for (target, got) in targets.into_iter().filter(|(t, _)| !quantized || *t == "c").map(|(t, generate)| (t, generate(&case))) {
            let got = match got {
                Ok(g) => g,
                Err(e) => {
                    problems.push(format!("{target}/{}: {e}", case.name));
                    continue;
                }
            };
            let dir = root().join("tests/out").join(target).join(&case.name);
            if std::env::var_os("UPDATE_EXPECT").is_some() {
                rewrite(&dir, &got);
            } else {
                problems.extend(compare(&dir, &got));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the generated code differs from tests/out:\n{}\nrun `UPDATE_EXPECT=1 cargo test --test suite golden::` if intended, and review `git diff tests/out`",
        problems.join("\n")
    );
}

/// Every program the golden set compiles, after each program pass, prints as text that
/// parses back to the same program and prints the same again (the text is complete).
#[test]
fn printed_programs_parse_back() {
    if shared_missing() {
        return;
    }
    let mut problems = Vec::new();
    let mut programs = 0;
    let cases = cases();
    for (case, target) in cases.iter().flat_map(|c| [(c, &C_PROGRAMS), (c, &CUDA_PROGRAMS)]).filter(|(c, t)| c.quantize == cli::Quantize::F32 || t.0 == c::LIBRARY) {
        self::programs(case, target, |pass, p| {
            programs += 1;
            let text = print(p);
            match parse(&text) {
                Ok(back) if back == *p && print(&back) == text => {}
                Ok(back) => {
                    let line = text.lines().zip(print(&back).lines()).position(|(a, b)| a != b).map_or("(the text is the same)".to_string(), |n| text.lines().nth(n).unwrap_or_default().to_string());
                    problems.push(format!("{} after {pass}: reads back differently at: {line}", case.name));
                }
                Err(e) => problems.push(format!("{} after {pass}: {e}", case.name)),
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(programs > 0);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The committed files of a target (`cuda`), by path under `tests/out/<target>` without
/// `.golden`, sorted.
fn committed(target: &str) -> Vec<(String, String)> {
    let top = root().join("tests/out").join(target);
    let mut files = Vec::new();
    let mut stack = vec![top.clone()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if let Some(name) = path.strip_prefix(&top).unwrap().to_string_lossy().strip_suffix(".golden") {
                files.push((name.to_string(), std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    assert!(!files.is_empty(), "no files under {}", top.display());
    files.sort();
    files
}

/// Every committed `.metal` file parses and type-checks as C++17 with clang++
/// (`-fsyntax-only`, warnings as errors, Metal's attributes aside) against the
/// emulation's shim, `runtime-metal/metal_emu.h` (`tests/metal_target.rs` builds and
/// runs them with g++; no Metal compiler runs on Linux, `xcrun metal` on macOS).
#[test]
fn rendered_metal_parses_as_cpp() {
    if !common::have("clang++") {
        common::skip("clang++ is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut inputs = Vec::new();
    for (name, text) in committed("metal") {
        if !name.ends_with(".metal") {
            continue;
        }
        if text.starts_with("refused: ") {
            println!("not checked ({name}): {}", text.trim_end());
            continue;
        }
        let flat = dir.path().join(name.replace('/', "__"));
        std::fs::write(&flat, text).unwrap();
        inputs.push(flat);
    }
    // One clang++ a core, each with its share of the files.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runs: Vec<_> = inputs
        .chunks(inputs.len().div_ceil(cores).max(1))
        .map(|share| {
            Command::new("clang++")
                .args(["-x", "c++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-attributes"])
                .arg("-I")
                .arg(root().join("runtime-metal"))
                .arg("-I")
                .arg(root().join("runtime-emu"))
                .arg("-I")
                .arg(root().join("runtime-c"))
                .args(share)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for run in runs {
        let out = run.wait_with_output().unwrap();
        assert!(out.status.success(), "clang++ failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    println!("{} Metal files checked", inputs.len());
}
