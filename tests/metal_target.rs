//! The Metal target without an Apple GPU: every conformance case (forward and
//! gradients) and every benchmark model has its `.metal` source compiled as C++17
//! through `runtime-metal/metal_emu.h` (every warning an error, Metal's attributes
//! aside) and its host code as C99 (`-pedantic`), its kernels run on the CPU, and its
//! outputs compared with the interpreter within 1e-4 absolute + 1e-4 relative (`run
//! --target metal --emulate`). Emulation tests the kernels' logic: no GPU runs here.
//! On macOS with Xcode the same cases also run on the GPU (`run --target metal`).
//!
//! Cases run two at a time (the machines have two cores).


use mithrilc::cli::{self, BuildConfig, Precision};
use mithrilc::codegen::metal::backend::MetalTarget;
use mithrilc::error::ErrorKind;

use crate::common::{self, cases};
use cases::{cases, shared, Case};
use common::each_case;

/// `../shared`, when it and what emulation builds with (make, C and C++ compilers)
/// are present; otherwise says why the test is skipped.
fn emulation_ready() -> Option<std::path::PathBuf> {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return None;
    };
    if !common::have("c++") || !common::have("cc") || !common::have("make") {
        common::skip("make and C and C++ compilers are needed (apt-get install make gcc g++)");
        return None;
    }
    Some(dir)
}

#[test]
fn every_model_matches_the_interpreter_under_emulation() {
    let Some(dir) = emulation_ready() else { return };
    cases::every_case_matches(&dir, &MetalTarget, &BuildConfig { emulate: true, ..Default::default() }, "under Metal emulation");
}

/// `--precision f16|bf16`: the bench models' matrix products and convolutions on
/// `simdgroup_matrix` tiles with their operands rounded, each within its tolerance of
/// the interpreter relative to each output's largest magnitude (11 significant bits
/// give errors near 1e-3 of the output's scale, 8 bits near 1e-2).
#[test]
fn reduced_precisions_under_emulation() {
    let Some(dir) = emulation_ready() else { return };
    let all = cases(&dir);
    let runs: Vec<(Precision, f64, &Case)> =
        [(Precision::Bf16, 2e-2), (Precision::F16, 4e-3)].into_iter().flat_map(|(p, tol)| all.iter().filter(cases::precision_bench).map(move |c| (p, tol, c))).collect();
    cases::reduced_precisions_match(&MetalTarget, &BuildConfig { emulate: true, ..Default::default() }, cli::Gemm::Builtin, &runs);
}

/// Away from macOS, `run --target metal` (no --emulate) stops with a toolchain error
/// (exit 3) that says so and points to --emulate, never falling back to the CPU.
#[cfg(not(target_os = "macos"))]
#[test]
fn running_without_macos_is_a_toolchain_error() {
    let e = cli::run(&cases::example_mlp_run(&MetalTarget)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Toolchain, "{e}");
    assert!(e.to_string().contains("only on macOS") && e.to_string().contains("--emulate"), "{e}");
}

/// On macOS with Xcode's Metal compiler: every case built as the real artifact
/// (metallib, library, demo) and run on the GPU, against the interpreter. Only macOS
/// builds this test (`.github/workflows/metal.yml` runs it there); elsewhere
/// `running_without_macos_is_a_toolchain_error` stands in its place.
#[cfg(target_os = "macos")]
#[test]
fn every_model_matches_the_interpreter_on_the_gpu() {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    let xcrun = std::process::Command::new("xcrun").args(["-sdk", "macosx", "metal", "--version"]).output();
    if !xcrun.is_ok_and(|o| o.status.success()) {
        common::skip("xcrun -sdk macosx metal is not installed (xcode-select --install)");
        return;
    }
    cases::every_case_matches(&dir, &MetalTarget, &BuildConfig::default(), "on the GPU");
}

/// A symbolic batch (`--shape input=B,... --max B=N`): each bench model is compiled once,
/// and its emulated demo runs at B = 1, 3 and N (gpt_block up to 2, to keep the
/// emulation short), matching the interpreter at each.
#[test]
fn symbolic_batch_runs_at_every_size_under_emulation() {
    let Some(dir) = emulation_ready() else { return };
    let tmp = tempfile::tempdir().unwrap();
    // (model, the batch of its reference input file, the largest batch compiled)
    let models = [("mlp", 32u64, 32u64), ("lenet", 32, 32), ("gpt_block", 8, 2)];
    let failures = each_case(&models, |&(model, file_batch, max)| {
        cases::symbolic_batch_under_emulation(&dir, &MetalTarget, model, file_batch, max, &tmp.path().join(model), |_, _, _| Ok(()))
    });
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// `--weights safetensors`: the demo reads the parameters from the safetensors file at
/// run time into a Metal buffer; its emulated run gives the reference output.
#[test]
fn the_demo_reads_a_safetensors_file() {
    let Some(dir) = emulation_ready() else { return };
    cases::safetensors_demo_under_emulation(&dir, &MetalTarget, &[&["--repeat", "2"]]);
}
