//! Checkpoints in another float type than the model's: each bench model's weights
//! rounded to f16 and to bf16 (to nearest, ties to even) and saved as safetensors, as
//! most published checkpoints are, compile for the f32 C target and run. The library
//! gives the interpreter's outputs on the same rounded weights (it converts them on load
//! exactly as the compiler does), and both say how many parameters they converted.
//! Compiling a model takes about its weights file in memory, not the f64 copy it took.

use std::process::Command;

use mithrilc::cli::{self, CompileArgs, ModelArgs, RunArgs};
use mithrilc::data;
use mithrilc::ir::Dtype;
use mithrilc::tensor::Tensor;

mod common;
#[path = "common/cases.rs"]
mod cases;

/// `params` with every float array rounded to `dtype`, as safetensors bytes.
fn rounded_checkpoint(params: &data::ArrayFile, dtype: Dtype) -> Vec<u8> {
    let arrays: Vec<(String, Tensor)> =
        params.arrays.iter().map(|(name, t)| (name.clone(), Tensor::new(dtype, t.shape.clone(), t.data.clone()))).collect();
    data::safetensors_bytes(&arrays).unwrap()
}

#[test]
fn half_precision_checkpoints_of_every_bench_model_compile_and_run() {
    let Some(dir) = cases::shared_with_build() else { return };
    let bench = dir.join("bench");
    for model in ["mlp", "lenet", "cnn", "gpt_block"] {
        let params = data::read_arrays(&bench.join(format!("{model}.safetensors"))).unwrap();
        let input_path = bench.join(format!("{model}_b1_input.npy"));
        let input = data::read_arrays(&input_path).unwrap();
        let shape: Vec<String> = input.arrays[0].shape.iter().map(u64::to_string).collect();
        for (dtype, name) in [(Dtype::F16, "f16"), (Dtype::Bf16, "bf16")] {
            let label = format!("{model} {name}");
            let tmp = tempfile::tempdir().unwrap();
            let checkpoint = tmp.path().join(format!("{model}_{name}.safetensors"));
            std::fs::write(&checkpoint, rounded_checkpoint(&params, dtype)).unwrap();
            let note = format!("note: converted {} parameters from {name} to f32 on load\n", params.arrays.len());
            let model_args = ModelArgs { model: bench.join(format!("{model}.json")), shapes: vec![format!("input={}", shape.join(","))], ..Default::default() };

            let out = tmp.path().join("out");
            let args = CompileArgs { model: model_args.clone(), params: Some(checkpoint.clone()), out: Some(out.clone()), cflags: Some("-O2".into()), ..Default::default() };
            let report = cli::compile(&args).unwrap_or_else(|e| panic!("{label}: {e}"));
            assert!(report.contains(&note), "{label}: the compile report should say `{note}`: {report}");

            let run = RunArgs {
                model: model_args,
                target: cli::RunTarget::Interp,
                check: false,
                emulate: false,
                precision: Default::default(),
                quantize: Default::default(),
                data: vec![format!("input={}", input_path.display())],
                params: Some(checkpoint),
                output: None,
                triple: None,
                no_cache: false,
            };
            let (want, report) = cli::run(&run).unwrap_or_else(|e| panic!("{label}: {e}"));
            assert!(report.starts_with(&note), "{label}: the run report should start with `{note}`: {report}");

            let demo = Command::new(out.join(format!("{model}_demo")))
                .current_dir(&out)
                .arg("--input")
                .arg(format!("input={}", input_path.display()))
                .arg("--out")
                .arg(&out)
                .output()
                .unwrap();
            assert!(demo.status.success(), "{label}: {}", String::from_utf8_lossy(&demo.stderr));
            let got = data::read_arrays(&out.join("output_0.npy")).unwrap();
            let got = got.arrays.values().next().unwrap();
            assert_eq!((got.dtype, &got.shape), (Dtype::F32, &want[0].1.shape), "{label}");
            let mut worst = 0.0f64;
            for (x, y) in got.data.iter().zip(&want[0].1.data) {
                assert!((x - y).abs() <= 1e-4 + 1e-4 * y.abs(), "{label}: got {x}, interpreter {y}");
                worst = worst.max((x - y).abs());
            }
            println!("{label}: largest difference from the interpreter {worst:.2e}");
        }
    }
}

/// Integer or boolean arrays for a trained parameter are refused (exit 1, naming the
/// parameter and its type), not converted: they are a wrong file or key, and the model
/// would run on truncated weights. mlp's weights as i32, and one as bool.
#[test]
fn integer_parameters_are_refused() {
    let Some(dir) = cases::shared() else {
        common::skip("../shared is not present");
        return;
    };
    let bench = dir.join("bench");
    let params = data::read_arrays(&bench.join("mlp.safetensors")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for dtype in [Dtype::I32, Dtype::Bool] {
        let mut arrays: Vec<(String, Tensor)> = params.arrays.iter().map(|(n, t)| (n.clone(), t.clone())).collect();
        let (name, t) = &mut arrays[0];
        let name = name.clone();
        *t = Tensor::new(dtype, t.shape.clone(), t.data.iter().map(|x| if dtype == Dtype::Bool { (*x != 0.0) as u8 as f64 } else { x.trunc() }).collect());
        let file = tmp.path().join(format!("mlp_{dtype}.safetensors"));
        std::fs::write(&file, data::safetensors_bytes(&arrays).unwrap()).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_mithrilc"))
            .args(["compile", "mlp.json", "--target", "c", "--shape", "input=1,784", "--emit", "source", "--params"])
            .arg(&file)
            .arg("-o")
            .arg(tmp.path().join("out"))
            .current_dir(&bench)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{dtype}: {stderr}");
        let want = format!("parameter `{name}` is {dtype} in the data, but a trained parameter is floating point");
        assert!(stderr.contains(&want), "{dtype}: expected `{want}` in: {stderr}");
        assert!(!tmp.path().join("out").exists(), "{dtype}: nothing is written on failure");
    }
}

/// Compiling gpt_block (28 MB of f32 weights) for the C target, XLA and ggml peaks at
/// no more than twice its weights file in memory, the compiler's own footprint
/// included: the weights go from the mapped file into the blob (C), the safetensors
/// file (XLA) or the GGUF file (ggml) with no f64 copy and no second copy of the
/// output, and each parameter's pages are let go once written. Measured as the child's peak resident set, from `wait4`'s
/// rusage of that one child (not of every child the test binary ran).
#[cfg(target_os = "linux")]
#[test]
fn compiling_gpt_block_takes_at_most_twice_its_weights_file_in_memory() {
    let Some(dir) = cases::shared() else {
        common::skip("../shared is not present");
        return;
    };
    let bench = dir.join("bench");
    let size = std::fs::metadata(bench.join("gpt_block.safetensors")).unwrap().len();
    let tmp = tempfile::tempdir().unwrap();
    for target in ["c", "xla", "ggml"] {
        let child = Command::new(env!("CARGO_BIN_EXE_mithrilc"))
            .args(["compile", "gpt_block.json", "--target", target, "--shape", "input=1,128,768", "--params", "gpt_block.safetensors", "--emit", "source", "-o"])
            .arg(tmp.path().join(target))
            .current_dir(&bench)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        let mut status = 0;
        // SAFETY: rusage is plain data, for wait4 to fill in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits once for the child spawned above, which nothing else waits for,
        // writing only into the two locals.
        let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "mithrilc compile --target {target} failed (status {status:#x})");
        // ru_maxrss is in kilobytes on Linux.
        let peak = usage.ru_maxrss as u64 * 1024;
        println!("gpt_block for {target}: peak resident {:.1} MB for a {:.1} MB weights file", peak as f64 / 1e6, size as f64 / 1e6);
        assert!(peak <= 2 * size, "{target}: peak resident {peak} bytes is more than twice the weights file ({size} bytes)");
    }
}
