//! Builds and runs models on the C target the way `mithrilc::exec::run_once` does (same lowering
//! options and files), except that what is the same for every model is compiled once per
//! test process (and C flags): the runtime, and in place of each model's demo a runner
//! (`c_runner.c`) that loads the model as a shared object and reads and writes its
//! inputs and outputs with the demo's readers. Building those per model would dominate
//! a test's time (for a one-node model, the demo's compile and link took longer than the
//! model's); the demo is `tests/c_target.rs`'s and `tests/demo_files.rs`'s to test. The
//! compiler is `$CC` (default `cc`) with the warning flags every generated file must
//! build under.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use mithrilc::pipeline::Graphs;
use mithrilc::data;
use mithrilc::ir::Graph;
use mithrilc::tensor::Tensor;

/// Flags every generated file must build under (as its Makefile gives them).
pub const WARNINGS: &[&str] = &["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror"];

/// `opt` for this machine's CPU alone, as `--cpu native` builds: the runtime's kernel set
/// for this CPU (the one a portable build would pick here) and each generated kernel
/// compiled once, rather than three kernel sets and three clones of every kernel of
/// which this machine runs one (a model's C then compiles in about half the time).
/// The portable build itself is `tests/c_target.rs`'s and `tests/portable.rs`'s to test.
pub fn for_this_cpu(opt: &str) -> Vec<String> {
    format!("{opt} {}", mithrilc::codegen::c::cpu_flags("native")).split_whitespace().map(str::to_string).collect()
}

/// A scratch directory with the runtime and the runner compiled once.
pub struct Toolchain {
    pub dir: tempfile::TempDir,
    /// `c_runner.c` linked with the runtime's objects and the demo's file readers'
    /// (`mr_files.o`), which it exports to the models it loads.
    pub runner: PathBuf,
    pub cflags: Vec<String>,
    /// Said under any failure: whether this compiler, with these flags, miscompiles
    /// [`SELECT_PROBE`].
    pub note: String,
}

/// The shape of the generated kernels for relu's and max pooling's VJPs (a select in a
/// short nested loop, here in place), reduced to a program that checks itself. gcc 12.2
/// at -O3 with AVX2 or AVX-512 (`-march=native` here) vectorizes it wrongly and exits 1;
/// clang, and gcc at -O2 or with -fno-tree-loop-vectorize, exit 0.
const SELECT_PROBE: &str = r#"
#include <stdio.h>
void k(float *x, const float *g, long n) {
    for (long i = 0; i < n; ++i)
        for (long j = 0; j < 10; ++j)
            x[i * 10 + j] = x[i * 10 + j] > 0.0f ? g[i * 10 + j] : 0.0f;
}
int main(void) {
    static float x[160], g[160];
    int i, bad = 0;
    for (i = 0; i < 160; i++) { x[i] = (float)(i % 3) - 1.0f; g[i] = (float)i; }
    k(x, g, 16);
    for (i = 0; i < 160; i++) { bad += x[i] != (i % 3 == 2 ? (float)i : 0.0f); }
    printf("%d of 160 wrong\n", bad);
    return bad != 0;
}
"#;

/// Builds and runs [`SELECT_PROBE`] with the test's compiler and flags; a sentence for
/// failure reports when it computes wrong results.
fn probe_selects(dir: &Path, cflags: &[String]) -> String {
    let src = dir.join("select_probe.c");
    std::fs::write(&src, SELECT_PROBE).unwrap();
    let exe = dir.join("select_probe");
    let built = Command::new(mithrilc::build::c_compiler()).args(cflags).arg(&src).arg("-o").arg(&exe).output();
    match built.map(|b| b.status.success()).ok().and_then(|ok| ok.then(|| Command::new(&exe).output().ok()).flatten()) {
        Some(run) if !run.status.success() => format!(
            "\nnote: {} {} miscompiles the select loop of tests/differential.rs's SELECT_PROBE ({}); mismatches in \
             VJP select kernels may be the compiler's (try MITHRILC_DIFF_CFLAGS=\"-O3 -march=native -fno-tree-loop-vectorize\" or CC=clang)",
            mithrilc::build::c_compiler(),
            cflags.join(" "),
            String::from_utf8_lossy(&run.stdout).trim()
        ),
        _ => String::new(),
    }
}


/// The process's [`Toolchain`] for `cflags`, built on first use, once per distinct
/// flags (the suite's tests ask for several: differential's -O3, mithril_suite's
/// -O1...); `None` when there is no C compiler (the caller says why it skips). The
/// tests that share one share its directory, each naming its scratch directories in it
/// its own way.
pub fn toolchain(cflags: &[String]) -> Option<&'static Toolchain> {
    // One cell per flags, leaked as a static would live; each built outside the map's
    // lock, so that two flags' builds can run side by side.
    static BY_FLAGS: Mutex<BTreeMap<Vec<String>, &'static OnceLock<Option<Toolchain>>>> = Mutex::new(BTreeMap::new());
    let cell = *BY_FLAGS.lock().unwrap().entry(cflags.to_vec()).or_insert_with(|| Box::leak(Box::default()));
    cell.get_or_init(|| build_toolchain(cflags)).as_ref()
}

/// The runtime compiled with `cflags` in a new scratch directory; `None` when there is
/// no C compiler.
fn build_toolchain(cflags: &[String]) -> Option<Toolchain> {
    if !crate::common::have(&mithrilc::build::c_compiler()) {
        return None;
    }
    // Under target/tmp: a leaked TempDir is never dropped, so `cargo clean` is what
    // removes it.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a scratch directory");
    let runtime_dir = dir.path().join("runtime");
    std::fs::create_dir_all(&runtime_dir).unwrap();
    // The runtime's files as the C target writes them into every library, its sources
    // compiled in one run (each to its own object).
    for (name, text) in mithrilc::codegen::c::RUNTIME_FILES.iter().chain(mithrilc::codegen::c::DEMO_FILES) {
        std::fs::write(runtime_dir.join(name), text).unwrap();
    }
    let sources: Vec<&str> = mithrilc::codegen::c::runtime_sources().chain(["mr_files.c"]).collect();
    let runtime: Vec<PathBuf> = sources.iter().map(|c| runtime_dir.join(c.replace(".c", ".o"))).collect();
    let out = Command::new(mithrilc::build::c_compiler())
        .current_dir(&runtime_dir)
        .args(WARNINGS)
        .args(cflags)
        .arg("-c")
        .args(&sources)
        .output()
        .expect("cc runs");
    assert!(out.status.success(), "the runtime does not build: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(runtime_dir.join("c_runner.c"), include_str!("c_runner.c")).unwrap();
    let runner = dir.path().join("c_runner");
    let out = Command::new(mithrilc::build::c_compiler())
        .current_dir(&runtime_dir)
        .args(WARNINGS)
        .args(cflags)
        .args(["-rdynamic", "c_runner.c"])
        .args(&runtime)
        .args(["-ldl", "-lm", "-pthread", "-o"])
        .arg(&runner)
        .output()
        .expect("cc runs");
    assert!(out.status.success(), "the test runner does not build: {}", String::from_utf8_lossy(&out.stderr));
    let note = probe_selects(dir.path(), cflags);
    Some(Toolchain { dir, runner, cflags: cflags.to_vec(), note })
}

/// Builds `graphs` as a C library in `dir` and runs it as its demo would (the backward
/// pass when there is one) on `feeds`: the outputs in the program's order, by name.
pub fn run_c(tc: &Toolchain, graphs: &Graphs, feeds: &BTreeMap<String, Tensor>, dir: &Path) -> Result<Vec<(String, Tensor)>, String> {
    run_c_with(tc, graphs, feeds, dir, mithrilc::codegen::c::LIBRARY)
}

/// [`run_c`], lowering for `library` in place of the runtime's (an empty one: every
/// op as loop kernels).
pub fn run_c_with(tc: &Toolchain, graphs: &Graphs, feeds: &BTreeMap<String, Tensor>, dir: &Path, library: mithrilc::lower::Library) -> Result<Vec<(String, Tensor)>, String> {
    run_c_lowered(tc, graphs, feeds, dir, &mithrilc::lower::Options { library, ..Default::default() })
}

/// [`run_c`] with the lowering options `opts` (`quantize`: weights stored narrow).
pub fn run_c_lowered(tc: &Toolchain, graphs: &Graphs, feeds: &BTreeMap<String, Tensor>, dir: &Path, opts: &mithrilc::lower::Options) -> Result<Vec<(String, Tensor)>, String> {
    // As `mithrilc::exec::run_once`: the fast layouts forward; row-major when training.
    let passes = if graphs.backward.is_some() { mithrilc::codegen::c::PASSES_ROW_MAJOR } else { mithrilc::codegen::c::PASSES };
    let lower = |g: &Graph| mithrilc::passes::compile(g, opts, passes, |_, _| {}).map_err(|e| format!("lowering: {e}"));
    let forward = lower(&graphs.forward)?;
    let backward = graphs.backward.as_ref().map(lower).transpose()?;
    let g = &graphs.forward;
    let copts = mithrilc::codegen::c::Options { source: "model.json".into(), weights: Some(mithrilc::exec::param_weights(g, feeds)), ..Default::default() };
    let files = mithrilc::codegen::c::emit(&forward, backward.as_ref(), &copts).map_err(|e| format!("emit: {e}"))?;
    let program = backward.as_ref().unwrap_or(&forward);
    let name = mithrilc::codegen::names::identifier(&program.name);
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    for (file, bytes) in &files {
        std::fs::write(dir.join(file), bytes).unwrap();
    }
    // The model, with the test's flags, as a shared object the runner loads.
    let cc = Command::new(mithrilc::build::c_compiler())
        .current_dir(dir)
        .args(WARNINGS)
        .args(&tc.cflags)
        .args(["-pthread", "-shared", "-fPIC"])
        // The runtime's symbols are the runner's, found when it loads the model.
        .args(if cfg!(target_os = "macos") { &["-undefined", "dynamic_lookup"][..] } else { &[] })
        .arg(format!("{name}.c"))
        .args(["-lm", "-o", "model.so"])
        .output()
        .unwrap();
    if !cc.status.success() {
        return Err(format!("cc failed:\n{}", String::from_utf8_lossy(&cc.stderr)));
    }
    // As the demo: the entry point, the blob of `<NAME>_WEIGHTS_SIZE` (the forward pass's
    // layout, which the backward pass shares) and an arena for the larger of the two
    // passes (`<NAME>_ARENA_SIZE` covers the training step's too, which is not run here).
    let entry = format!("{name}_{}", if backward.is_some() { "backward" } else { "forward" });
    let arena = forward.arena_size.max(backward.as_ref().map_or(0, |b| b.arena_size));
    let mut run = Command::new(&tc.runner);
    run.current_dir(dir).arg(dir.join("model.so")).arg(entry).arg(dir.join("weights.bin"));
    run.args([forward.weights_size.to_string(), arena.to_string()]).arg(dir);
    // The symbolic dimensions at their maxima, which the inputs' shapes then set.
    run.arg(program.symbols.len().to_string()).args(program.symbols.iter().map(|(_, max)| max.to_string()));
    let port = |run: &mut Command, way: &str, port: &mithrilc::lower::Port| {
        let dtype = program.buffers[port.buf.0].dtype;
        run.args([way, data::npy_descr(dtype), &dtype.size().to_string(), &port.shape.len().to_string()]);
        run.args(port.shape.iter().zip(&port.dims).map(|(n, sym)| sym.map_or(n.to_string(), |s| format!("{n}/{s}"))));
    };
    for (i, p) in program.inputs.iter().enumerate() {
        let t = feeds.get(&p.name).ok_or_else(|| format!("no feed for {}", p.name))?;
        let path = dir.join(format!("input_{i}.npy"));
        data::write_npy(&path, t).unwrap();
        port(&mut run, "in", p);
        run.arg(path);
    }
    for p in &program.outputs {
        port(&mut run, "out", p);
    }
    let out = run.output().unwrap();
    if !out.status.success() {
        return Err(format!("the model failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let mut outputs = Vec::new();
    for (i, port) in program.outputs.iter().enumerate() {
        let file = data::read_arrays(&dir.join(format!("output_{i}.npy"))).map_err(|e| e.to_string())?;
        let t = file.arrays.into_values().next().ok_or("an empty output file")?;
        // A bf16 output's file holds f32 (NumPy has no bf16), a narrow float's its codes,
        // a 4- or 2-bit integer's int8 or uint8: the same values (`data::npy_descr`).
        let dtype = program.buffers[port.buf.0].dtype;
        let t = if dtype == t.dtype { t } else { data::from_stand_in(&t, dtype).ok_or_else(|| format!("output {}: {} values in a file for {dtype}", port.name, t.dtype))? };
        outputs.push((port.name.clone(), t));
    }
    Ok(outputs)
}
