//! The CUDA target on real toolchains, without a GPU: every conformance case (forward
//! and gradients) and every benchmark model is
//! - built with nvcc (for sm_90, host code and device code warning-free, every warning
//!   an error), and the bench models as the full artifact `make` builds (the fat
//!   binary for sm_80, sm_89 and sm_90 plus PTX, the shared library, the demo);
//! - built again as host C++ against `runtime-cuda/cuda_emu.h`, its kernels run on the
//!   CPU, and compared with the interpreter within 1e-4 absolute + 1e-4 relative
//!   (`run --target cuda --emulate`). Emulation tests the kernels' logic: no GPU runs.
//!
//! Cases run two at a time (the machines have two cores).

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use mithrilc::backend::Backend;
use mithrilc::cli::{self, BuildConfig};
use mithrilc::codegen::cuda::backend::CudaTarget;
use mithrilc::error::ErrorKind;

mod common;
#[path = "common/cases.rs"]
mod cases;
use cases::{cases, shared, Case};

/// Runs `f` on every case, two at a time; returns the failures.
fn each_case(cases: &[Case], f: impl Fn(&Case) -> Result<(), String> + Sync) -> Vec<String> {
    let next = Mutex::new(0usize);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    *n += 1;
                    *n - 1
                };
                let Some(case) = cases.get(i) else { break };
                if let Err(e) = f(case) {
                    failures.lock().unwrap().push(e);
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort();
    failures
}

#[test]
fn every_model_matches_the_interpreter_under_emulation() {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    if !common::have("c++") || !common::have("make") {
        common::skip("make and a C++ compiler are needed (apt-get install make g++)");
        return;
    }
    let all = cases(&dir);
    let worst = Mutex::new((0.0f64, String::new()));
    let build = BuildConfig { emulate: true, ..Default::default() };
    let failures = each_case(&all, |case| {
        let want = mithrilc::interp::run(case.graph(), &case.feeds).map_err(|e| format!("{}: interpreter: {e}", case.label))?;
        let got = cli::run_target(&CudaTarget, &case.graphs, &case.feeds, &case.source, &build, &[]).map_err(|e| format!("{}: {e}", case.label))?;
        let (bad, err) = cases::compare(&case.label, &got, &want, 1e-4);
        let mut w = worst.lock().unwrap();
        if err > w.0 {
            *w = (err, case.label.clone());
        }
        if bad.is_empty() { Ok(()) } else { Err(bad.join("\n")) }
    });
    let (err, label) = worst.into_inner().unwrap();
    println!("{} models run under CUDA emulation; worst abs error {err:.2e} ({label})", all.len() - failures.len());
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// The case's CUDA sources, as `compile --target cuda --emit source` writes them.
fn emit(case: &Case, out: &Path) -> Result<(), String> {
    let graph = &case.graphs.forward;
    let weights = graph.params().filter_map(|v| graph.node(v).name.clone()).filter_map(|n| case.feeds.get(&n).map(|t| (n, t.clone()))).collect();
    let opts = mithrilc::backend::EmitOptions { source: "model.json".into(), weights: Some(weights), ..Default::default() };
    let emitted = CudaTarget.emit(&case.graphs, &opts).map_err(|e| format!("{}: {e}", case.label))?;
    std::fs::create_dir_all(out).unwrap();
    for (name, bytes) in &emitted.files {
        std::fs::write(out.join(name), bytes).unwrap();
    }
    Ok(())
}

#[test]
fn every_model_builds_with_nvcc() {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    let nvcc = match mithrilc::build::nvcc() {
        Ok(nvcc) => nvcc,
        Err(e) => {
            common::skip(&e.to_string().replace('\n', " "));
            return;
        }
    };
    let all = cases(&dir);
    let scratch = tempfile::tempdir().unwrap();
    let failures = each_case(&all, |case| {
        let out = scratch.path().join(case.label.replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
        emit(case, &out)?;
        let cu = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).find(|n| n.ends_with(".cu") && !n.ends_with("_demo.cu")).unwrap();
        let bench = !case.label.ends_with(".npz") && !case.label.contains("(gradients)");
        let mut cmd = if bench {
            // The whole artifact, as compile --target cuda builds it.
            let mut make = Command::new("make");
            make.arg("-s").arg(format!("NVCC={}", nvcc.display()));
            make
        } else {
            let mut one = Command::new(&nvcc);
            one.args(["-c", "-std=c++17", "-arch=sm_90", "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror", &cu]);
            one
        };
        let run = cmd.current_dir(&out).output().unwrap();
        if run.status.success() { Ok(()) } else { Err(format!("{}: {}{}", case.label, String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr))) }
    });
    println!("{} models built with {}", all.len() - failures.len(), nvcc.display());
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// Without a GPU, `run --target cuda` (no --emulate) stops with a toolchain error (exit
/// 3) that says so, never falling back to the CPU.
#[test]
fn running_without_a_gpu_is_a_toolchain_error() {
    if Path::new("/dev/nvidia0").exists() {
        common::skip("this machine has a GPU");
        return;
    }
    let Ok(_) = mithrilc::build::nvcc() else {
        common::skip("nvcc is not installed");
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let args = cli::RunArgs {
        model: cli::ModelArgs { model: root.join("examples/mlp/mlp.json"), ..Default::default() },
        target: cli::RunTarget::Compiled(&CudaTarget),
        check: false,
        emulate: false,
        data: vec![root.join("examples/mlp/data.npz").display().to_string()],
        params: Some(root.join("examples/mlp/data.npz")),
        output: None,
    };
    let e = cli::run(&args).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Toolchain, "{e}");
    assert!(e.to_string().contains("no usable CUDA device") && e.to_string().contains("--emulate"), "{e}");
}
