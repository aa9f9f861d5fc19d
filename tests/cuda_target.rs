//! The CUDA target on real toolchains, without a GPU: every conformance case (forward
//! and gradients) and every benchmark model is
//! - built with nvcc (for sm_90, host code and device code warning-free, every warning
//!   an error; cicc at -O1, which halves the time), and the bench models at batch 1 as
//!   the full artifact `make` builds at full optimisation (the fat binary for sm_80,
//!   sm_89 and sm_90 plus PTX for mlp; sm_90 for the others, gpt_block's built with
//!   `--gemm cublaslt`; the shared library, the demo), whose ptxas report must show no
//!   register spills;
//! - built again as host C++ against `runtime-cuda/cuda_emu.h`, its kernels run on the
//!   CPU, and compared with the interpreter within 1e-4 absolute + 1e-4 relative
//!   (`run --target cuda --emulate`). Emulation tests the kernels' logic: no GPU runs.
//!
//! On a machine with an NVIDIA GPU, `cargo test --release --test suite cuda_target::
//! -- --ignored` also runs every case and the reduced precisions on the GPU itself.
//! Cases run as many at a time as the machine has cores.

use std::path::Path;
use std::process::Command;

use mithrilc::backend::Backend;
use mithrilc::cli::{self, BuildConfig, Gemm, Precision};
use mithrilc::codegen::cuda::backend::CudaTarget;
use mithrilc::error::ErrorKind;

use crate::common::{self, cases};
use cases::{cases, shared, Case};
use common::each_case;

/// `../shared`, when it and what emulation builds with (make, a C++ compiler) are
/// present; otherwise says why the test is skipped.
fn emulation_ready() -> Option<std::path::PathBuf> {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return None;
    };
    if !common::have("c++") || !common::have("make") {
        common::skip("make and a C++ compiler are needed (apt-get install make g++)");
        return None;
    }
    Some(dir)
}

#[test]
fn every_model_matches_the_interpreter_under_emulation() {
    let Some(dir) = emulation_ready() else { return };
    cases::every_case_matches(&dir, &CudaTarget, &BuildConfig { emulate: true, ..Default::default() }, "under CUDA emulation");
}

/// The reduced precisions (`--precision`), each within its tolerance of the
/// interpreter, relative to each output's largest magnitude: the bench models (mlp at
/// batch 32, whose products have more than 4 rows and so run on tensor cores; the
/// others at batch 1) in each precision, and with TF32 the cases whose gradients run
/// every kind of product (nothing else depends on the precision): batched and
/// transposed matrix products (attention_block, matmul_batched, gpt_tiny), strided and
/// padded convolutions (conv2d_stride_pad) and grouped ones (grouped_conv_pools). The
/// other conformance cases with products run the same kernels on smaller shapes; on a
/// GPU (`--ignored`) every case with a product runs with TF32, and gpt_block at batch 8
/// with BF16, whose attention runs on tensor cores. Operands rounded to 11 significant bits (TF32, F16) give errors near
/// 1e-3 of the output's scale; 8 bits (BF16) near 1e-2. The kernel library's tests
/// (`runtime-cuda/test_kernels.cu`) check that these paths do round.
/// Whether a case's graph (its backward pass, with gradients) has a matrix product or
/// a convolution.
fn has_products(case: &Case) -> bool {
    let g = case.graph();
    g.ids().any(|v| matches!(g.node(v).op.name(), "matmul" | "conv"))
}

/// The reduced-precision runs `(precision, tolerance, case)` of `all` described above;
/// `every` runs TF32 on every case with a product (on the GPU, where runs are cheap).
fn precision_runs(all: &[Case], every: bool) -> Vec<(Precision, f64, &Case)> {
    const TF32_GRADIENTS: [&str; 5] = ["attention_block.npz", "matmul_batched.npz", "gpt_tiny.npz", "conv2d_stride_pad.npz", "grouped_conv_pools (gradients)"];
    let tf32 = |c: &&Case| if every { !c.label.ends_with("b32") && !c.label.ends_with("b8") && has_products(c) } else { cases::precision_bench(c) || TF32_GRADIENTS.contains(&c.label.as_str()) };
    // gpt_block at batch 8: its attention's 64-row tiles fill an H100, so it runs the
    // tensor-core attention. On the GPU only: emulated, it takes 118 s of CPU (the kernel
    // library's tests check that kernel under emulation).
    let attention_tc = |c: &&Case| every && c.label == "gpt_block b8";
    [(Precision::Bf16, 2e-2), (Precision::F16, 4e-3)]
        .into_iter()
        .flat_map(|(p, tol)| all.iter().filter(cases::precision_bench).map(move |c| (p, tol, c)))
        .chain(all.iter().filter(tf32).map(|c| (Precision::Tf32, 4e-3, c)))
        .chain(all.iter().filter(attention_tc).map(|c| (Precision::Bf16, 2e-2, c)))
        .collect()
}

#[test]
fn reduced_precisions_under_emulation() {
    let Some(dir) = emulation_ready() else { return };
    let all = cases(&dir);
    cases::reduced_precisions_match(&CudaTarget, &BuildConfig { emulate: true, ..Default::default() }, Gemm::Builtin, &precision_runs(&all, false));
}

/// `../shared` when this machine has an NVIDIA GPU that its driver answers for, and nvcc;
/// panics otherwise, naming what is missing: the GPU tests run only when asked for
/// (`--ignored`), so a machine that cannot run them is a mistake to report, not a skip.
fn gpu_ready() -> std::path::PathBuf {
    let dir = shared().expect("../shared is not present");
    common::require_gpu();
    dir
}

/// On an NVIDIA GPU: every case (forward and gradients, the bench models at every batch)
/// built as `run --target cuda` builds it (for this GPU's architecture alone) and run there,
/// within the same tolerance of the interpreter as under emulation. CI has no GPU, so
/// this runs only when asked: `cargo test --release --test suite cuda_target:: -- --ignored`.
#[test]
#[ignore = "needs an NVIDIA GPU: cargo test --release --test suite cuda_target:: -- --ignored on a machine with one"]
fn every_model_matches_the_interpreter_on_the_gpu() {
    let dir = gpu_ready();
    cases::every_case_matches(&dir, &CudaTarget, &BuildConfig::default(), "on the GPU");
}

/// On an NVIDIA GPU: the reduced precisions, whose products run on its tensor cores
/// (emulation runs the same fragments' arithmetic on the CPU), within the tolerances above.
#[test]
#[ignore = "needs an NVIDIA GPU: cargo test --release --test suite cuda_target:: -- --ignored on a machine with one"]
fn reduced_precisions_on_the_gpu() {
    let dir = gpu_ready();
    let all = cases(&dir);
    cases::reduced_precisions_match(&CudaTarget, &BuildConfig::default(), Gemm::Builtin, &precision_runs(&all, true));
}

/// The runs of `--gemm cublaslt`: exact f32 and TF32, on the bench models with products
/// (gpt_block's bias, residual and GELU epilogues; mlp's bias and ReLU) and the cases whose
/// gradients have batched and transposed products; TF32 on each where cuBLASLt runs
/// (`gpu`), else on gpt_block alone (emulated, the precision changes only which built-in
/// kernel runs). cuBLASLt's exact f32 sums in another order than the built-in kernels,
/// within the same tolerance of the interpreter's; TF32 as the built-in TF32 kernels.
fn cublaslt_runs(all: &[Case], gpu: bool) -> Vec<(Precision, f64, &Case)> {
    const CASES: [&str; 4] = ["mlp b32", "gpt_block b1", "attention_block.npz", "matmul_batched.npz"];
    let runs = all.iter().filter(|c| CASES.contains(&c.label.as_str())).map(|c| (Precision::F32, 1e-4, c));
    runs.chain(all.iter().filter(|c| gpu && CASES.contains(&c.label.as_str()) || c.label == "gpt_block b1").map(|c| (Precision::Tf32, 4e-3, c))).collect()
}

/// `--gemm cublaslt` under emulation, which has no cuBLASLt: each product runs the
/// built-in kernels with the epilogue the call site describes to cuBLASLt as their functor
/// (`mr_lt_functor`), so this checks that description (bias, residual and its strides,
/// scale, activation) against the interpreter. The mapping onto cuBLASLt's column-major
/// problem is checked by the kernel library's tests, cuBLASLt itself on a GPU.
#[test]
fn cublaslt_products_fall_back_under_emulation() {
    let Some(dir) = emulation_ready() else { return };
    let all = cases(&dir);
    cases::reduced_precisions_match(&CudaTarget, &BuildConfig { emulate: true, ..Default::default() }, Gemm::Cublaslt, &cublaslt_runs(&all, false));
}

/// On an NVIDIA GPU with cuBLASLt (libcublasLt.so.13 where the loader finds it, or
/// `$MR_CUBLASLT`): the same runs through cuBLASLt (a product it refuses runs the built-in
/// kernels; `MR_CUBLASLT_REQUIRE=1` makes that a failure).
#[test]
#[ignore = "needs an NVIDIA GPU: cargo test --release --test suite cuda_target:: -- --ignored on a machine with one"]
fn cublaslt_products_match_the_interpreter_on_the_gpu() {
    let dir = gpu_ready();
    let all = cases(&dir);
    cases::reduced_precisions_match(&CudaTarget, &BuildConfig::default(), Gemm::Cublaslt, &cublaslt_runs(&all, true));
}

/// `--gemm cublaslt` without cuBLASLt's header beside nvcc: a toolchain error that says
/// how to install it (its real build is gpt_block's in [`every_model_builds_with_nvcc`]).
#[test]
fn a_missing_cublaslt_header_is_a_toolchain_error() {
    let bare = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(bare.path().join("bin")).unwrap();
    std::fs::create_dir_all(bare.path().join("include")).unwrap();
    std::fs::write(bare.path().join("bin/nvcc"), "").unwrap();
    let nvcc = bare.path().join("bin/nvcc");
    let e = mithrilc::codegen::cuda::backend::cublaslt_headers(&nvcc).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Toolchain);
    let want = format!(
        "--gemm cublaslt compiles against cuBLASLt's header, cublasLt.h, which is not beside nvcc ({})\n  note: install it where nvcc is: pip install {} (or build with a CUDA toolkit's nvcc)",
        nvcc.display(),
        mithrilc::build::CUBLAS_WHEEL
    );
    assert_eq!(e.to_string(), want);
    std::fs::write(bare.path().join("include/cublasLt.h"), "").unwrap();
    mithrilc::codegen::cuda::backend::cublaslt_headers(&bare.path().join("bin/nvcc")).unwrap();
}

/// The case's CUDA sources, as `compile --target cuda --emit source --gemm GEMM` writes
/// them; returns the entry the demo runs.
fn emit(case: &Case, out: &Path, gemm: Gemm) -> Result<mithrilc::backend::Entry, String> {
    let graph = &case.graphs.forward;
    let opts = mithrilc::backend::EmitOptions { source: "model.json".into(), gemm, weights: Some(mithrilc::exec::param_weights(graph, &case.feeds)), ..Default::default() };
    let emitted = CudaTarget.emit(&case.graphs, &opts).map_err(|e| format!("{}: {e}", case.label))?;
    std::fs::create_dir_all(out).unwrap();
    for (name, bytes) in &emitted.files {
        std::fs::write(out.join(name), bytes).unwrap();
    }
    Ok(emitted.entry)
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
    let lt = match mithrilc::codegen::cuda::backend::cublaslt_headers(&nvcc) {
        Ok(()) => true,
        Err(e) => {
            common::skip(&format!("gpt_block's --gemm cublaslt build: {}", e.to_string().replace('\n', " ")));
            false
        }
    };
    let failures = each_case(&all, |case| {
        let out = scratch.path().join(case.label.replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
        // gpt_block's whole artifact with --gemm cublaslt: its products' calls compile the
        // built-in kernels in as their fallback, and the cuBLASLt glue beside them, against
        // the pinned wheel's cublasLt.h, linked with -ldl.
        let gemm = if lt && case.label == "gpt_block b1" { Gemm::Cublaslt } else { Gemm::Builtin };
        let entry = emit(case, &out, gemm)?;
        if gemm == Gemm::Cublaslt {
            let cu = std::fs::read_to_string(out.join(format!("{}.cu", entry.name))).unwrap();
            if cu.matches("mr_cuda_sgemm_lt<").count() != 4 {
                return Err(format!("{}: not gpt_block's four products on cuBLASLt", case.label));
            }
        }
        let cu = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).find(|n| n.ends_with(".cu") && !n.ends_with("_demo.cu")).unwrap();
        // The whole artifact once per bench model; the rest compile for sm_90 alone.
        let bench = case.label.ends_with(" b1");
        let mut cmd = if bench {
            // The whole artifact, as compile --target cuda builds it: the smallest model's as
            // the fat binary (the Makefile's default), the others' for sm_90 alone (their
            // generated kernels are the same code at each architecture, and nvcc-check builds
            // the library's for all three), a fraction of the fat binary's nvcc time.
            let mut make = Command::new("make");
            make.arg("-s").arg(format!("NVCC={}", nvcc.display()));
            if !case.label.starts_with("mlp") {
                make.arg("GENCODE=-gencode arch=compute_90,code=sm_90");
            }
            make
        } else {
            // The device code: nvcc's front end reads the whole file and cicc compiles its
            // kernels to PTX, each warning an error; cicc at -O1 halves that. The host
            // compiler and ptxas run on the bench models' whole artifacts above, and the
            // host side of every case compiles under emulation (with g++, -Wall -Wextra
            // -Werror): here they would more than double the time.
            let mut one = Command::new(&nvcc);
            one.args(["-ptx", "-std=c++17", "-arch=sm_90", "-Werror", "all-warnings", "-Xcicc", "-O1", &cu]);
            one
        };
        let run = cmd.current_dir(&out).output().unwrap();
        if !run.status.success() {
            return Err(format!("{}: {}{}", case.label, String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr)));
        }
        if bench {
            // What --report prints: every kernel, the library's and the generated ones,
            // without register spills at sm_90.
            let report = CudaTarget.toolchain().built_report(&out, &entry).map_err(|e| format!("{}: {e}", case.label))?;
            let kernels: Vec<&str> = report.lines().skip(1).collect();
            let spilling: Vec<&&str> = kernels.iter().filter(|l| !l.ends_with("no spills")).collect();
            if kernels.len() < 2 || !report.contains("mr_k_") || !spilling.is_empty() {
                return Err(format!("{}: ptxas report:\n{report}", case.label));
            }
        }
        Ok(())
    });
    println!("{} models built with {}", all.len() - failures.len(), nvcc.display());
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// Without a GPU, `run --target cuda` (no --emulate) stops with a toolchain error (exit
/// 3) that says so, never falling back to the CPU: before building, where the machine
/// shows no NVIDIA GPU at all.
#[test]
fn running_without_a_gpu_is_a_toolchain_error() {
    if mithrilc::build::local_gpu_arch().is_some() || mithrilc::build::nvidia_device_nodes() {
        common::skip("this machine shows an NVIDIA GPU or its driver");
        return;
    }
    let e = cli::run(&cases::example_mlp_run(&CudaTarget)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Toolchain, "{e}");
    assert!(e.to_string().contains("no usable CUDA device") && e.to_string().contains("--emulate"), "{e}");
}

/// Where the driver is there but no device is usable, the demo itself says so (its exit
/// status `DEMO_NO_GPU_EXIT`): the run's error is then a toolchain error with the demo's
/// reason and the same note. A stand-in demo answers as the real one does.
#[test]
fn a_demo_without_a_usable_device_is_a_toolchain_error() {
    use mithrilc::backend::Entry;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("m_demo");
    let status = mithrilc::codegen::cuda::DEMO_NO_GPU_EXIT;
    std::fs::write(&demo, format!("#!/bin/sh\necho 'm_demo: no usable CUDA device: cudaGetDeviceCount: no CUDA-capable device is detected' >&2\nexit {status}\n")).unwrap();
    std::fs::set_permissions(&demo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let entry = Entry { name: "m".into(), inputs: vec![], outputs: vec!["y".into()], output_types: vec![mithrilc::ir::Dtype::F32] };
    let e = CudaTarget.toolchain().run(dir.path(), &BuildConfig::default(), &entry, &Default::default()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Toolchain, "{e}");
    let text = e.to_string();
    assert!(text.contains("no usable CUDA device: cudaGetDeviceCount: no CUDA-capable device is detected") && text.contains("--emulate"), "{text}");
}

/// A symbolic batch (`--shape input=B,... --max B=N`): each bench model is compiled once,
/// and its emulated demo runs at B = 1, 3 and N (gpt_block up to 2, to keep the
/// emulation short), matching the interpreter at each; at N once more with
/// `MR_EMU_SCALAR=1`, which runs the paths taken for buffers that are not 16-byte
/// aligned (the scalar twins of the vector kernels and loads).
#[test]
fn symbolic_batch_runs_at_every_size_under_emulation() {
    let Some(dir) = emulation_ready() else { return };
    let tmp = tempfile::tempdir().unwrap();
    // (model, the batch of its reference input file, the largest batch compiled)
    let models = [("mlp", 32u64, 32u64), ("lenet", 32, 32), ("gpt_block", 8, 2)];
    let failures = each_case(&models, |&(model, file_batch, max)| {
        cases::symbolic_batch_under_emulation(&dir, &CudaTarget, model, file_batch, max, &tmp.path().join(model), |demo, params, big| {
            // As if no buffer were 16-byte aligned: the scalar twins of the float4 paths.
            cases::check_demo_at_batch(&dir, model, params, big, max, demo, &[], &[("MR_EMU_SCALAR", "1")])
        })
    });
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// `--weights safetensors`: the demo reads the parameters from the safetensors file at
/// run time and copies them to the device; its emulated run gives the reference output,
/// called directly and replayed from a captured CUDA graph (`--graph`).
#[test]
fn the_demo_reads_a_safetensors_file_and_replays_a_graph() {
    let Some(dir) = emulation_ready() else { return };
    cases::safetensors_demo_under_emulation(&dir, &CudaTarget, &[&[], &["--graph", "--repeat", "3"]]);
}

/// `compile --target cuda --report=json`'s launches (no GPU, no nvcc): every matrix
/// product and convolution of the bench models, at batch 1 and at their larger batch,
/// keeps at least 85% of an H100's SMs busy (split-K and the smaller tiles see to it),
/// or is too small for that to matter: a roofline time under 2 us, what the planner takes
/// a kernel launch to cost (the batch-1 GEMVs, lenet's and mlp's layers, the
/// classifiers' last products). The plans split K for gpt_block's batch-1 products,
/// whose 128-row tiles once left 120 of 132 SMs idle. Every GPU `--gpu` names gets a
/// report (on the smaller ones, 58 SMs for an L4, a plan may rightly leave a few idle
/// rather than pay a second wave).
#[test]
fn bench_products_fill_an_h100() {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    let bench = dir.join("bench");
    let out = tempfile::tempdir().unwrap();
    let mut split_gpt = false;
    for (model, shapes) in [("mlp", ["1,784", "32,784"]), ("lenet", ["1,1,28,28", "32,1,28,28"]), ("cnn", ["1,3,32,32", "32,3,32,32"]), ("gpt_block", ["1,128,768", "8,128,768"])] {
        for shape in shapes {
            for gpu in mithrilc::codegen::cuda::plan::GPUS {
                let args = cli::CompileArgs {
                    model: cli::ModelArgs { model: bench.join(format!("{model}.json")), shapes: vec![format!("input={shape}")], ..Default::default() },
                    target: &CudaTarget,
                    out: Some(out.path().join(format!("{model}-{gpu}", gpu = gpu.name))),
                    emit: cli::Emit::Source,
                    report: true,
                    report_format: cli::ReportFormat::Json,
                    gpu: Some(gpu.name.to_string()),
                    force: true,
                    ..Default::default()
                };
                let report: serde_json::Value = serde_json::from_str(&cli::compile(&args).unwrap()).unwrap();
                let launches = report["sizes"]["launches"]["launches"].as_array().unwrap();
                for l in launches.iter().filter(|l| l["product"] == true) {
                    let (waves, us) = (l["waves"].as_f64().unwrap(), l["roofline_us"].as_f64().unwrap());
                    if gpu.sms == 132 {
                        assert!(waves >= mithrilc::codegen::cuda::report::FULL || us < 2.0, "{model} {shape} on {}: {l}", gpu.name);
                    }
                    if model == "gpt_block" && shape.starts_with("1,") && gpu.name == "h100" {
                        split_gpt |= l["kernel"].as_str().unwrap().contains("slices");
                    }
                }
            }
        }
    }
    assert!(split_gpt, "gpt_block's batch-1 products split K on an H100");
}

/// `compile --report` with `--gemm cublaslt` says which products cuBLASLt may run, with
/// which epilogue, and which stay built in: gpt_block's four, as text and as JSON.
#[test]
fn the_report_lists_the_cublaslt_products() {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let compile = |format| {
        let args = cli::CompileArgs {
            model: cli::ModelArgs { model: dir.join("bench/gpt_block.json"), shapes: vec!["input=1,128,768".to_string()], ..Default::default() },
            target: &CudaTarget,
            out: Some(out.path().join("gpt")),
            emit: cli::Emit::Source,
            report: true,
            report_format: format,
            gemm: Gemm::Cublaslt,
            force: true,
            ..Default::default()
        };
        cli::compile(&args).unwrap()
    };
    let text = compile(cli::ReportFormat::Human);
    let listed: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("matrix products on cuBLASLt")).skip(1).collect();
    assert_eq!(listed, ["  step 1: epilogue bias", "  step 3: epilogue bias, residual", "  step 5: epilogue bias, gelu_tanh", "  step 6: epilogue bias, residual"], "{text}");
    let json: serde_json::Value = serde_json::from_str(&compile(cli::ReportFormat::Json)).unwrap();
    let rows = json["sizes"]["cublaslt"]["products"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["epilogue"].as_str().unwrap()).collect::<Vec<_>>(), ["bias", "bias, residual", "bias, gelu_tanh", "bias, residual"]);
}

/// f32 sums (`--accumulate f32`, the default) stay within the bound docs/cuda.md gives,
/// and f64 ones (`--accumulate f64`) round only once: `sum_axis1` over 3 x 200000
/// elements of mixed sign and magnitude (so cancellation matters), run under
/// emulation. The bound for a warp's blocked sum of n elements:
/// (32 + n / 1024 + 6) * 2^-24 * sum |x|, against the exact sum.
#[test]
fn f32_sums_stay_within_their_bound_under_emulation() {
    let Some(dir) = emulation_ready() else { return };
    let (rows, n) = (3u64, 200_000u64);
    let x: Vec<f64> = (0..rows * n).map(|i| f64::from((i * 7919 % 2001) as u32) / 1000.0 - 1.0 + if i % 97 == 0 { 300.0 } else { 0.0 }).map(|v| v as f32 as f64).collect();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("x.npy");
    mithrilc::data::write_npy(&data, &mithrilc::tensor::Tensor::new(mithrilc::ir::Dtype::F32, vec![rows, n], x.clone())).unwrap();
    let run = |accumulate| {
        let args = cli::RunArgs {
            model: cli::ModelArgs { model: dir.join("testdata/sum_axis1.json"), shapes: vec![format!("input={rows},{n}")], ..Default::default() },
            target: cli::RunTarget::Compiled(&CudaTarget),
            emulate: true,
            accumulate: Some(accumulate),
            data: vec![format!("input={}", data.display())],
            ..cases::example_mlp_run(&CudaTarget)
        };
        let (outputs, _) = cli::run(&args).unwrap();
        outputs[0].1.data.clone()
    };
    let (f32_sums, f64_sums) = (run(mithrilc::backend::Accumulate::F32), run(mithrilc::backend::Accumulate::F64));
    let u = f64::powi(2.0, -24);
    for r in 0..rows as usize {
        let row = &x[r * n as usize..(r + 1) * n as usize];
        let exact: f64 = row.iter().sum();
        let magnitude: f64 = row.iter().map(|v| v.abs()).sum();
        let bound = (32.0 + n as f64 / 1024.0 + 6.0) * u * magnitude;
        let err = (f32_sums[r] - exact).abs();
        assert!(err <= bound, "row {r}: f32 sum {} vs exact {exact}: error {err:.3e} over the bound {bound:.3e}", f32_sums[r]);
        assert!((f64_sums[r] - exact).abs() <= u * exact.abs(), "row {r}: f64 sum {} vs exact {exact}", f64_sums[r]);
        println!("row {r}: f32 error {err:.3e} ({:.1} units of 2^-24 sum|x|; bound {:.0})", err / (u * magnitude), bound / (u * magnitude));
    }
}
