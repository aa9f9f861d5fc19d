//! Build time with and without the build cache (not a test: it prints a table). For each
//! benchmark model at batch 1 and one small test-data case, side by side in one run:
//! `compile --emit source`; `compile --target c` with an empty cache (cold) and again
//! with the entry the first made (warm); the same for `run --target c`; and `run` on the
//! interpreter. Each is the `mithrilc` command as a user runs it, timed from spawn to
//! exit, the best of R rounds (2 by default; the machines are shared), the rounds
//! interleaved so that noise falls on every column alike.
//!
//!   cargo bench --bench build_time [-- [--runs R]]
//!
//! `MITHRILC_BIN=PATH` times another mithrilc (an older build: a before-and-after table).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// A model to time: its label, model file, parameters, compile's `--shape`, and run's
/// `--data`.
struct Case {
    label: String,
    model: PathBuf,
    params: PathBuf,
    shape: Option<&'static str>,
    data: String,
}

fn cases(shared: &Path) -> Vec<Case> {
    let bench = shared.join("bench");
    let mut all: Vec<Case> = [("mlp", "input=1,784"), ("lenet", "input=1,1,28,28"), ("cnn", "input=1,3,32,32"), ("gpt_block", "input=1,128,768")]
        .into_iter()
        .map(|(model, shape)| Case {
            label: format!("{model} b1"),
            model: bench.join(format!("{model}.json")),
            params: bench.join(format!("{model}.safetensors")),
            shape: Some(shape),
            data: format!("input={}", bench.join(format!("{model}_b1_input.npy")).display()),
        })
        .collect();
    let testdata = shared.join("testdata");
    all.push(Case {
        label: "conv_relu_pool (test data)".to_string(),
        model: testdata.join("conv_relu_pool.json"),
        params: testdata.join("conv_relu_pool.npz"),
        shape: None,
        data: testdata.join("conv_relu_pool.npz").display().to_string(),
    });
    all
}

/// The columns: what runs, and whether it starts from an empty cache.
const COLUMNS: [(&str, Step); 6] = [
    ("emit source", Step::Source),
    ("compile cold", Step::Compile { cold: true }),
    ("compile warm", Step::Compile { cold: false }),
    ("run c cold", Step::Run { cold: true }),
    ("run c warm", Step::Run { cold: false }),
    ("run interp", Step::Interp),
];

#[derive(Clone, Copy)]
enum Step {
    Source,
    Compile { cold: bool },
    Run { cold: bool },
    Interp,
}

/// Seconds `step` of `case` takes, with the build cache in `cache` (emptied first for a
/// cold step) and outputs under `scratch`.
fn time(case: &Case, step: Step, cache: &Path, scratch: &Path) -> Result<f64, String> {
    let mut cmd = Command::new(mithrilc());
    let out = scratch.join("out");
    let _ = std::fs::remove_dir_all(&out);
    match step {
        Step::Source | Step::Compile { .. } => {
            cmd.args(["compile", "--target", "c"]).arg(&case.model).arg("--params").arg(&case.params).arg("-o").arg(&out);
            if let Some(shape) = case.shape {
                cmd.args(["--shape", shape]);
            }
            if matches!(step, Step::Source) {
                cmd.args(["--emit", "source"]);
            }
        }
        Step::Run { .. } | Step::Interp => {
            let target = if matches!(step, Step::Interp) { "interp" } else { "c" };
            cmd.args(["run", "--target", target]).arg(&case.model).arg("--params").arg(&case.params).args(["--data", &case.data]);
        }
    }
    if matches!(step, Step::Compile { cold: true } | Step::Run { cold: true }) {
        let _ = std::fs::remove_dir_all(cache);
    }
    cmd.env("MITHRILC_CACHE_DIR", cache).env_remove("MITHRILC_NO_CACHE");
    let start = Instant::now();
    let done = cmd.output().map_err(|e| format!("cannot run mithrilc: {e}"))?;
    let seconds = start.elapsed().as_secs_f64();
    if !done.status.success() {
        return Err(format!("{}: {}", case.label, String::from_utf8_lossy(&done.stderr)));
    }
    Ok(seconds)
}

/// The mithrilc timed: `$MITHRILC_BIN`, else this build's.
fn mithrilc() -> PathBuf {
    std::env::var_os("MITHRILC_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_mithrilc")), PathBuf::from)
}

/// The CPU's model name, as `lscpu` gives it, and the cores this process may use.
fn machine() -> String {
    let lscpu = Command::new("lscpu").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let model = lscpu.lines().find_map(|l| l.strip_prefix("Model name:")).map_or("unknown CPU", str::trim).to_string();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{model}, {cores} cores")
}

fn main() {
    let mut runs = 2;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => match args.next().and_then(|r| r.parse().ok()) {
                Some(r) if r >= 1 => runs = r,
                _ => return fail("--runs takes a count of at least 1"),
            },
            // What cargo passes to every bench binary.
            "--bench" => {}
            other => return fail(&format!("unknown argument {other}")),
        }
    }
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    if !shared.join("bench/mlp.json").exists() {
        return fail("../shared/bench is missing");
    }
    let scratch = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return fail(&format!("cannot create a scratch directory: {e}")),
    };
    let cache = scratch.path().join("cache");
    let all = cases(&shared);
    let mut best = vec![[f64::INFINITY; COLUMNS.len()]; all.len()];
    for _ in 0..runs {
        for (case, row) in all.iter().zip(&mut best) {
            // In column order: each warm step follows its cold one, on the entry it made.
            for (cell, (_, step)) in row.iter_mut().zip(COLUMNS) {
                match time(case, step, &cache, scratch.path()) {
                    Ok(s) => *cell = cell.min(s),
                    Err(e) => return fail(&e),
                }
            }
        }
    }
    println!("seconds per command ({} as a user runs it, spawn to exit), best of {runs} round(s); {}", mithrilc().display(), machine());
    print!("{:<28}", "case");
    for (name, _) in COLUMNS {
        print!("{name:>14}");
    }
    println!();
    for (case, row) in all.iter().zip(&best) {
        print!("{:<28}", case.label);
        for s in row {
            print!("{s:>14.2}");
        }
        println!();
    }
}

fn fail(problem: &str) {
    eprintln!("build_time: {problem}");
    eprintln!("usage: cargo bench --bench build_time [-- [--runs R]]");
    std::process::exit(2);
}
