//! Firmware check: LeNet compiled with embedded weights cross-compiles for a Cortex-M4
//! (`arm-none-eabi-gcc -mcpu=cortex-m4 -mthumb -Os -ffreestanding`, warnings as
//! errors), and the objects need nothing but libm, memcpy/memset and the compiler's
//! runtime helpers: no malloc, no printf, no OS. Prints text/data/bss and the arena.

use std::path::Path;
use std::process::Command;

use mithrilc::cli;

mod common;

fn tool(name: &str) -> bool {
    Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success())
}

#[test]
fn lenet_cross_compiles_for_cortex_m4() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/bench");
    if !shared.join("lenet.json").exists() {
        common::skip("../shared/bench is not present");
        return;
    }
    if !tool("arm-none-eabi-gcc") {
        common::skip("arm-none-eabi-gcc is not installed (apt-get install gcc-arm-none-eabi)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("lenet-m4");
    let args = cli::CompileArgs {
        model: cli::ModelArgs { model: shared.join("lenet.json"), shapes: vec!["input=1,1,28,28".into()], ..Default::default() },
        params: Some(shared.join("lenet.safetensors")),
        out: Some(out.clone()),
        emit: mithrilc::cli::Emit::Source,
        report: true,
        weights: mithrilc::codegen::c::WeightsMode::Embed,
        layout: cli::WeightLayout::Fast,
        ..Default::default()
    };
    let report = cli::compile(&args).unwrap();
    // Small GEMM blocks keep the runtime's stack use to a few KiB.
    let flags = [
        "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-Os", "-ffreestanding",
        "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror",
        "-DMR_SGEMM_MR=4", "-DMR_SGEMM_NR=4", "-DMR_SGEMM_KC=64", "-DMR_SGEMM_NC=16",
    ];
    let sources: Vec<&str> = ["lenet.c"].into_iter().chain(mithrilc::codegen::c::runtime_sources()).chain(["lenet_weights.S"]).collect();
    let objs: Vec<String> = sources.iter().map(|src| src.replace(".c", ".o").replace(".S", ".o")).collect();
    for (src, obj) in sources.iter().zip(&objs) {
        let cc = Command::new("arm-none-eabi-gcc").current_dir(&out).args(flags).args(["-c", src, "-o", obj]).output().unwrap();
        assert!(cc.status.success(), "{src}: {}", String::from_utf8_lossy(&cc.stderr));
    }
    let size = Command::new("arm-none-eabi-size").current_dir(&out).args(&objs).output().unwrap();
    println!("{}{}", String::from_utf8_lossy(&size.stdout), report);
    let nm = Command::new("arm-none-eabi-nm").current_dir(&out).arg("-u").args(&objs).output().unwrap();
    let allowed = |s: &str| {
        s.starts_with("mr_") || s.starts_with("__aeabi_") || matches!(s, "memcpy" | "memset" | "memmove")
            || ["exp", "log", "sqrt", "tanh", "erf", "erfc", "sin", "cos", "pow", "floor", "fabs", "log1p"].iter().any(|m| s == *m || s == format!("{m}f"))
    };
    let undefined: Vec<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("U ").map(str::to_string))
        .filter(|s| !allowed(s))
        .collect();
    assert!(undefined.is_empty(), "the firmware objects need {undefined:?}");
}
