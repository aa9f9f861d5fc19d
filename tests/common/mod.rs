//! Helpers shared by the suite's modules (`crate::common`), the larger ones as its
//! submodules. Dead code is allowed: a helper whose callers are all behind a
//! platform's `cfg` (checkpoints' Linux tests, metal_target's macOS one) still builds
//! elsewhere without a warning.
#![allow(dead_code)]

pub mod c_build;
pub mod cases;
pub mod onnx_build;
pub mod random_model;

use std::process::Command;
use std::sync::Mutex;

/// Says why a test does not run here (a missing toolchain, or `../shared` absent) and
/// lets it return. Under `MITHRILC_REQUIRE_TOOLS=1`, which `.ci/run` sets, the test
/// fails instead: a CI machine without the tools must not pass having tested nothing.
pub fn skip(why: &str) {
    let required = std::env::var("MITHRILC_REQUIRE_TOOLS").is_ok_and(|v| !v.is_empty() && v != "0");
    assert!(!required, "MITHRILC_REQUIRE_TOOLS is set, and this test cannot run: {why}");
    println!("skipped: {why}");
}

/// Whether `tool --version` runs: an optional toolchain is installed.
pub fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// How many cases, or make jobs, run at a time: as many as the machine has cores (2 on
/// CI's and the developers' machines, 16 on the GPU machines).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// `make -s ARGS` in `dir` of the repository (`runtime-c`...), [`cores`] jobs at a time,
/// each job's output kept together: what it printed, which is also printed; fails the
/// test, with that text, when make fails.
pub fn make_in(dir: &str, args: &[String]) -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let out = Command::new("make").arg("-s").arg(format!("-j{}", cores())).arg("-Otarget").arg("-C").arg(&dir).args(args).output().expect("make runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(out.status.success(), "make {} in {} failed:\n{text}", args.join(" "), dir.display());
    text
}

/// One step of xorshift64 (shifts 13, 7, 17; the examples' C code uses the same):
/// deterministic test data. `state` must not be zero.
pub fn xorshift64(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Runs `f` on every item, [`cores`] at a time; returns the failures, sorted.
pub fn each_case<T: Sync>(items: &[T], f: impl Fn(&T) -> Result<(), String> + Sync) -> Vec<String> {
    let next = Mutex::new(0usize);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..cores() {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    *n += 1;
                    *n - 1
                };
                let Some(item) = items.get(i) else { break };
                if let Err(e) = f(item) {
                    failures.lock().unwrap().push(e);
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort();
    failures
}

/// A version 1.0 `.npy` file whose header is the text `dict` (padded as NumPy pads it),
/// then `data`: any header at all, for tests of the readers of generated programs.
pub fn npy_file(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut header = dict.to_string();
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    bytes
}

/// For a test behind `--ignored` that needs an NVIDIA GPU: prints the GPUs
/// `nvidia-smi -L` lists and the nvcc `run --target cuda` would use (panicking, with
/// why, where there is no driver, no GPU or no nvcc), and returns that nvcc.
pub fn require_gpu() -> std::path::PathBuf {
    let smi = std::process::Command::new("nvidia-smi").arg("-L").output();
    match smi {
        Ok(out) if out.status.success() && !out.stdout.is_empty() => print!("{}", String::from_utf8_lossy(&out.stdout)),
        Ok(out) => panic!("nvidia-smi -L finds no GPU: {}", String::from_utf8_lossy(&out.stderr).trim()),
        Err(e) => panic!("no NVIDIA driver here (nvidia-smi: {e})"),
    }
    let nvcc = mithrilc::build::nvcc().unwrap_or_else(|e| panic!("{e}"));
    println!("nvcc: {}", nvcc.display());
    nvcc
}
