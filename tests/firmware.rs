//! Firmware check: LeNet compiled with embedded weights for `--triple arm-none-eabi`
//! builds for a Cortex-M4 through the generated Makefile's library target (`make lib`
//! with `-mcpu=cortex-m4 -mthumb -Os -ffreestanding`, warnings as errors), and the
//! archive needs nothing but libm, memcpy/memset and the compiler's runtime helpers: no
//! malloc, no printf, no OS. Prints text/data/bss and the arena.

use std::path::Path;
use std::process::Command;

use mithrilc::cli;

use crate::common;

#[test]
fn lenet_cross_compiles_for_cortex_m4() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/bench");
    if !shared.join("lenet.json").exists() {
        common::skip("../shared/bench is not present");
        return;
    }
    if !common::have("arm-none-eabi-gcc") || !common::have("make") {
        common::skip("arm-none-eabi-gcc is not installed (apt-get install gcc-arm-none-eabi make)");
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
        triple: Some("arm-none-eabi".into()),
        ..Default::default()
    };
    let report = cli::compile(&args).unwrap();
    // Small GEMM blocks keep the runtime's stack use to a few KiB.
    let cflags = "CFLAGS=-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16 -Os -ffreestanding \
                  -DMR_SGEMM_MR=4 -DMR_SGEMM_NR=4 -DMR_SGEMM_KC=64 -DMR_SGEMM_NC=16";
    let make = Command::new("make").current_dir(&out).args(["-s", "lib", "CC=arm-none-eabi-gcc", "AR=arm-none-eabi-ar", cflags]).output().unwrap();
    assert!(make.status.success(), "make lib: {}{}", String::from_utf8_lossy(&make.stdout), String::from_utf8_lossy(&make.stderr));
    let built: Vec<String> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(built.contains(&"liblenet.a".to_string()) && !built.iter().any(|f| f.contains(".so")), "a static library only: {built:?}");
    let size = Command::new("arm-none-eabi-size").current_dir(&out).arg("liblenet.a").output().unwrap();
    println!("{}{}", String::from_utf8_lossy(&size.stdout), report);
    let nm = Command::new("arm-none-eabi-nm").current_dir(&out).args(["-u", "liblenet.a"]).output().unwrap();
    let allowed = |s: &str| {
        s.starts_with("lenet_mr_") || s.starts_with("__aeabi_") || matches!(s, "memcpy" | "memset" | "memmove")
            || ["exp", "log", "sqrt", "tanh", "erf", "erfc", "sin", "cos", "pow", "floor", "fabs", "log1p"].iter().any(|m| s == *m || s == format!("{m}f"))
    };
    let undefined: Vec<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("U ").map(str::to_string))
        .filter(|s| !allowed(s))
        .collect();
    assert!(undefined.is_empty(), "the firmware library needs {undefined:?}");
}
