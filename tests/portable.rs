//! The C target's portable artifacts (issue "Fast on every CPU it ships to"): built with
//! no `-march`, a library's vector instructions beyond baseline x86-64 lie only in the
//! runtime's dispatched kernels (`mr_isa_avx2.o`, `mr_isa_avx512.o`) and in the clones
//! of the model's own kernels (MR_CLONES), which it picks at run time; each kernel set it can pick (`MR_ISA`) gives every bench model's reference
//! output; `--cpu` builds for one CPU; and the AArch64 build, cross-compiled, runs under
//! qemu-user.

use std::path::{Path, PathBuf};
use std::process::Command;

use mithrilc::cli;
use mithrilc::codegen::c::backend::CTarget;
use mithrilc::data;

use crate::common::{self, cases};
use cases::shared;

/// The bench models at batch 1, each with its input's shape.
const BENCH: [(&str, &str); 4] = [("mlp", "input=1,784"), ("lenet", "input=1,1,28,28"), ("cnn", "input=1,3,32,32"), ("gpt_block", "input=1,128,768")];

/// `model` compiled and built for the C target into `out` (default flags, or `cpu`).
fn build(dir: &Path, model: &str, shape: &str, cpu: Option<&str>, out: &Path) {
    let args = cli::CompileArgs {
        model: cli::ModelArgs { model: dir.join(format!("bench/{model}.json")), shapes: vec![shape.into()], ..Default::default() },
        target: &CTarget,
        params: Some(dir.join(format!("bench/{model}.safetensors"))),
        out: Some(out.to_path_buf()),
        cpu: cpu.map(str::to_string),
        ..Default::default()
    };
    cli::compile(&args).unwrap_or_else(|e| panic!("{model}: {e}"));
}

/// Whether this is an x86-64 machine with `objdump`; else says why the test is skipped.
fn x86_with_objdump() -> bool {
    if !cfg!(target_arch = "x86_64") {
        common::skip("the dispatched kernels are x86-64's");
        return false;
    }
    if !common::have("objdump") {
        common::skip("objdump is not installed (apt-get install binutils)");
        return false;
    }
    true
}

/// Whether an instruction (objdump's text after the address) goes beyond baseline
/// x86-64 (SSE2): VEX or EVEX encoded (AVX, AVX2, FMA, AVX-512: mnemonics `v...`, the
/// 256- and 512-bit registers, mask registers).
fn beyond_baseline(ins: &str) -> bool {
    let mnemonic = ins.split_whitespace().next().unwrap_or("");
    (mnemonic.starts_with('v') && mnemonic != "verr" && mnemonic != "verw") || ins.contains("%ymm") || ins.contains("%zmm") || ins.contains("%k")
}

/// The functions of a built library directory's objects that hold instructions beyond
/// baseline x86-64, each as (object, function, its first such instruction).
fn functions_beyond_baseline(out: &Path) -> Vec<(String, String, String)> {
    let mut objects: Vec<PathBuf> = std::fs::read_dir(out).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "o")).collect();
    objects.sort();
    assert!(objects.len() > 3, "no objects in {}", out.display());
    let mut found: Vec<(String, String, String)> = Vec::new();
    for o in objects {
        let object = o.file_name().unwrap().to_string_lossy().into_owned();
        let dump = Command::new("objdump").args(["-d", "--no-show-raw-insn"]).arg(&o).output().unwrap();
        assert!(dump.status.success(), "objdump {}", o.display());
        let text = String::from_utf8_lossy(&dump.stdout);
        let mut function = String::new();
        for line in text.lines() {
            // A function's header: "0000000000000000 <name>:"
            if let Some((_, name)) = line.strip_suffix(">:").and_then(|l| l.split_once(" <")) {
                function = name.to_string();
                continue;
            }
            // Instruction lines: "  addr:\tmnemonic operands"
            let Some((_, ins)) = line.split_once(":\t") else { continue };
            let ins = ins.trim();
            let first_here = found.last().is_none_or(|(o, f, _)| *o != object || *f != function);
            if first_here && beyond_baseline(ins) {
                found.push((object.clone(), function.clone(), ins.to_string()));
            }
        }
    }
    found
}

/// The target a generated kernel's clone (MR_CLONES in mithril_ops.h) was compiled for,
/// from its name (GCC: `f.avx2`, clang: `f.avx2.1`); None for any other function.
fn clone_target(function: &str) -> Option<&str> {
    function.split('.').nth(1).filter(|target| *target == "avx512f" || *target == "avx2")
}

/// Built with the default flags, every bench model's library has AVX, AVX2 or AVX-512
/// instructions only in the runtime's dispatched kernel sets and in the AVX-512 and
/// AVX2 clones of the model's own kernels; built with `--cpu native` on a CPU with AVX2,
/// its other code has them too (so the check can fail).
#[test]
fn portable_libraries_use_vector_extensions_only_in_dispatched_kernels() {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    if !x86_with_objdump() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for (model, shape) in BENCH {
        let out = tmp.path().join(model);
        build(&dir, model, shape, None, &out);
        let found = functions_beyond_baseline(&out);
        let outside: Vec<_> = found.iter().filter(|(o, f, _)| !o.starts_with("mr_isa_") && clone_target(f).is_none()).collect();
        assert!(outside.is_empty(), "{model}: instructions beyond baseline x86-64 outside the dispatched kernels: {outside:?}");
        assert!(found.iter().any(|(o, _, _)| o == "mr_isa_avx2.o"), "{model}: no AVX2 kernels ({found:?})");
        assert!(found.iter().any(|(o, _, _)| o == "mr_isa_avx512.o"), "{model}: no AVX-512 kernels ({found:?})");
        let model_o = format!("{model}.o");
        for target in ["avx2", "avx512f"] {
            let cloned = found.iter().any(|(o, f, _)| *o == model_o && clone_target(f) == Some(target));
            assert!(cloned, "{model}: no {target} clone of its kernels has {target} code ({found:?})");
        }
    }
    if std::arch::is_x86_feature_detected!("avx2") {
        let out = tmp.path().join("native");
        build(&dir, "mlp", "input=1,784", Some("native"), &out);
        let found = functions_beyond_baseline(&out);
        let own = found.iter().any(|(o, f, _)| (o == "mlp.o" || o == "mr_gemm.o") && clone_target(f).is_none());
        assert!(own, "--cpu native built no AVX code: {found:?}");
    }
}

/// The kernel sets this CPU can run, by the names `MR_ISA` takes.
fn kernel_sets() -> Vec<&'static str> {
    let mut sets = vec!["generic"];
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            sets.push("avx2");
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            sets.push("avx512");
        }
    }
    sets
}

/// Every bench model, built portable, gives the reference output with each kernel set
/// this CPU can run (forced by `MR_ISA`), on one thread and two.
#[test]
fn every_kernel_set_matches_the_interpreter() {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    if !common::have("make") {
        common::skip("make is needed (apt-get install make)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let sets = kernel_sets();
    let failures = common::each_case(&BENCH, |&(model, shape)| {
        let out = tmp.path().join(model);
        build(&dir, model, shape, None, &out);
        let params = data::read_arrays(&dir.join(format!("bench/{model}.safetensors"))).unwrap();
        let input = data::read_arrays(&dir.join(format!("bench/{model}_b1_input.npy"))).unwrap().arrays.values().next().unwrap().clone();
        let demo = out.join(format!("{model}_demo"));
        for set in &sets {
            for threads in ["1", "2"] {
                cases::check_demo_at_batch(&dir, model, &params, &input, 1, &demo, &["--weights", "weights.bin", "--threads", threads], &[("MR_ISA", set)])
                    .map_err(|e| format!("{model} with MR_ISA={set}, {threads} thread(s): {e}"))?;
            }
            // The set asked for is the one that ran: the demo names it.
            let run = Command::new(&demo).current_dir(&out).env("MR_ISA", set).output().unwrap();
            let said = String::from_utf8_lossy(&run.stdout);
            if !said.contains(&format!(", {set} kernels")) {
                return Err(format!("{model}: MR_ISA={set} ran other kernels: {said}"));
            }
        }
        Ok(())
    });
    println!("kernel sets run: {}", sets.join(", "));
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// AArch64: every bench model cross-compiled by `compile --triple aarch64-linux-gnu` with
/// Debian's `aarch64-linux-gnu-gcc` (no dispatch there: NEON is AArch64's baseline),
/// its demo run under `qemu-aarch64` against the interpreter.
#[test]
fn aarch64_builds_run_under_qemu() {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    if !common::have("aarch64-linux-gnu-gcc") || !common::have("qemu-aarch64") || !common::have("make") {
        common::skip("a cross compiler and qemu-user are needed (apt-get install gcc-aarch64-linux-gnu qemu-user make)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let failures = common::each_case(&BENCH, |&(model, shape)| {
        let out = tmp.path().join(model);
        let args = cli::CompileArgs {
            model: cli::ModelArgs { model: dir.join(format!("bench/{model}.json")), shapes: vec![shape.into()], ..Default::default() },
            target: &CTarget,
            params: Some(dir.join(format!("bench/{model}.safetensors"))),
            out: Some(out.clone()),
            triple: Some("aarch64-linux-gnu".into()),
            ..Default::default()
        };
        // Built by mithrilc through the generated Makefile, with aarch64-linux-gnu-gcc.
        cli::compile(&args).map_err(|e| format!("{model} --triple aarch64-linux-gnu: {e}"))?;
        let file = Command::new("file").arg(out.join(format!("{model}_demo"))).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        if common::have("file") && !file.contains("aarch64") {
            return Err(format!("{model}: the demo is not an AArch64 program: {file}"));
        }
        // The demo through qemu, as check_demo_at_batch runs a program.
        let runner = out.join("demo_qemu");
        std::fs::write(&runner, format!("#!/bin/sh\nexec qemu-aarch64 -L /usr/aarch64-linux-gnu \"{}\" \"$@\"\n", out.join(format!("{model}_demo")).display())).unwrap();
        let mut perms = std::fs::metadata(&runner).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&runner, perms).unwrap();
        let params = data::read_arrays(&dir.join(format!("bench/{model}.safetensors"))).unwrap();
        let input = data::read_arrays(&dir.join(format!("bench/{model}_b1_input.npy"))).unwrap().arrays.values().next().unwrap().clone();
        cases::check_demo_at_batch(&dir, model, &params, &input, 1, &runner, &["--weights", "weights.bin"], &[]).map_err(|e| format!("{model} on AArch64 (qemu): {e}"))
    });
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// A library built under a sanitizer loads and runs, on two threads, with the output of
/// the interpreter: ThreadSanitizer with gcc, AddressSanitizer and UBSan with clang (the
/// model's loops are not cloned there: an ifunc resolver runs before the sanitizer has
/// started, and crashed a TSan build at load). lenet at batch 2 covers convolution,
/// pooling, products and the thread pool.
#[test]
fn sanitized_libraries_load_and_run() {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    for tool in ["make", "gcc", "clang"] {
        if !common::have(tool) {
            common::skip(&format!("{tool} is needed (apt-get install make gcc clang)"));
            return;
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let params = data::read_arrays(&dir.join("bench/lenet.safetensors")).unwrap();
    let input = data::read_arrays(&dir.join("bench/lenet_b32_input.npy")).unwrap().arrays.values().next().unwrap().clone();
    let builds = [("gcc", "thread", "-O1 -g -fsanitize=thread"), ("clang", "address", "-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all")];
    let failures = common::each_case(&builds, |&(cc, name, cflags)| {
        let out = tmp.path().join(name);
        let compile = Command::new(env!("CARGO_BIN_EXE_mithrilc"))
            .args(["compile", "bench/lenet.json", "--shape", "input=2,1,28,28", "--target", "c", "--params", "bench/lenet.safetensors", "--cflags", cflags, "-o"])
            .arg(&out)
            .current_dir(&dir)
            .env("CC", cc)
            .output()
            .unwrap();
        if !compile.status.success() {
            return Err(format!("{cc} {cflags}: {}", String::from_utf8_lossy(&compile.stderr)));
        }
        let demo = out.join("lenet_demo");
        cases::check_demo_at_batch(&dir, "lenet", &params, &input, 2, &demo, &["--weights", "weights.bin", "--threads", "2"], &[("TSAN_OPTIONS", "halt_on_error=1")])
            .map_err(|e| format!("{cc} {cflags}: {e}"))
    });
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}
