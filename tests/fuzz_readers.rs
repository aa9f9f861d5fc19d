//! The readers of the generated programs, fuzzed with libFuzzer under AddressSanitizer
//! and UBSan for a bounded time on every run of the suite: `runtime-c/mr_files.c`'s
//! `.npy`, safetensors and weights-blob readers and the demos' command line
//! (`make -C runtime-c fuzz`, harnesses in `runtime-c/fuzz/`), and the ggml target's GGUF
//! loader (`tests/fuzz-ggml/run.sh`). Each starts from its committed seed corpus and
//! fails on the first crash, sanitizer report or broken invariant, leaving the input
//! where its script says.
//!
//! Each harness runs `MITHRILC_READER_FUZZ_SECS` seconds (20 by default: most of what a run
//! finds from the corpora it finds early, and the suite has a time budget), two at a
//! time; a longer campaign is the same commands with a larger time.

use std::path::Path;
use std::process::Command;

use crate::common;

/// The seconds each harness runs.
fn seconds() -> u64 {
    std::env::var("MITHRILC_READER_FUZZ_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(20)
}

/// Whether clang links a libFuzzer harness here; else says why the test is skipped.
fn have_libfuzzer(dir: &Path) -> bool {
    let source = dir.join("probe.c");
    std::fs::write(&source, "#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n").unwrap();
    let built = Command::new("clang").args(["-fsanitize=fuzzer,address,undefined", "-o"]).arg(dir.join("probe")).arg(&source).output();
    if built.is_ok_and(|o| o.status.success()) && common::have("make") {
        return true;
    }
    common::skip("clang with libFuzzer and make are needed (apt-get install clang libclang-rt-14-dev make)");
    false
}

/// Runs `program args` in the repository; its failure is the harness's finding.
fn fuzz(name: &str, program: &str, args: &[String]) -> Result<(), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(program)
        .args(args)
        .current_dir(root)
        .env("MITHRILC_BIN", env!("CARGO_BIN_EXE_mithrilc"))
        .output()
        .map_err(|e| format!("{name}: cannot run {program}: {e}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let executed: Vec<&str> = text.lines().filter(|l| l.starts_with("stat::number_of_executed_units")).collect();
    println!("{name}: {} s, {}", seconds(), executed.join(", "));
    if out.status.success() {
        Ok(())
    } else {
        let tail: Vec<&str> = text.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
        Err(format!("{name} ({}):\n{}", out.status, tail.join("\n")))
    }
}

#[test]
fn generated_readers_survive_fuzzing() {
    let probe = tempfile::tempdir().unwrap();
    if !have_libfuzzer(probe.path()) {
        return;
    }
    let secs = seconds().to_string();
    // (name, program, arguments)
    let mut harnesses: Vec<(String, &str, Vec<String>)> = ["npy", "safetensors", "blob", "cli"]
        .into_iter()
        .map(|f| (format!("mr_files {f}"), "make", ["-s", "-C", "runtime-c", "fuzz", &format!("FUZZERS={f}"), &format!("FUZZ_TIME={secs}")].map(String::from).to_vec()))
        .collect();
    match mithrilc::build::ggml() {
        Ok(_) => harnesses.push(("ggml gguf".to_string(), "bash", vec!["tests/fuzz-ggml/run.sh".to_string(), secs.clone()])),
        Err(e) => common::skip(&format!("the GGUF loader's harness needs ggml: {}", e.to_string().replace('\n', " "))),
    }
    let failures = common::each_case(&harnesses, |(name, program, args)| fuzz(name, program, args));
    assert!(failures.is_empty(), "{} finding(s):\n{}", failures.len(), failures.join("\n\n"));
}
