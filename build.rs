//! Compiles the C runtime (`runtime-c/`) into mithrilc for the in-process JIT
//! (`src/codegen/jit`): its library kernels (GEMM, convolution, pooling, softmax, the
//! training step) and the scalar helpers of `mithril_ops.h` (`mr_jit_ops.c`), with the
//! flags a generated Makefile gives them, so the JIT computes what `--target c`
//! computes. One build with no `-m` flags: the runtime picks its AVX2 or AVX-512
//! kernels at run time (`mr_dispatch.c`). Its names get the prefix `mithrilc_jit_`, so
//! a program that links mithrilc and a generated C library has no clashes.
//! It also compiles the CUDA kernel library's launch planner (`runtime-cuda/mr_cuda_plan.h`)
//! for the CUDA target's codegen and cost report.

use std::path::Path;

fn main() {
    let dir = Path::new("runtime-c");
    let makefile = std::fs::read_to_string(dir.join("Makefile")).expect("runtime-c/Makefile");
    let mut sources = runtime_sources(&makefile);
    sources.push("mr_jit_ops.c".to_string());
    let mut build = cc::Build::new();
    build
        .files(sources.iter().map(|f| dir.join(f)))
        .include(dir)
        .std("c99")
        .flag_if_supported("-pedantic")
        .flag_if_supported("-fno-trapping-math")
        // At -O3 in every Cargo profile: a debug build of mithrilc still runs models fast.
        .opt_level(3)
        .debug(false)
        .define("MR_PREFIX", "mithrilc_jit_")
        .warnings_into_errors(true);
    build.compile("mithril_runtime_jit");
    // The CUDA kernel library's launch planner (src/codegen/cuda/plan.rs).
    cc::Build::new()
        .file("src/codegen/cuda/plan.c")
        .include("runtime-cuda")
        .std("c99")
        .flag_if_supported("-pedantic")
        .opt_level(2)
        .debug(false)
        .warnings_into_errors(true)
        .compile("mithril_cuda_plan");
    println!("cargo:rerun-if-changed=src/codegen/cuda/plan.c");
    println!("cargo:rerun-if-changed=runtime-cuda/mr_cuda_plan.h");
    for entry in std::fs::read_dir(dir).expect("runtime-c/").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("mr") && (name.ends_with(".c") || name.ends_with(".h")) || name == "Makefile" || name == "mithril_ops.h" {
            println!("cargo:rerun-if-changed=runtime-c/{name}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}

/// The `RUNTIME = ...` sources of the runtime's Makefile (with `\` continuations): the
/// one list of what a library compiles.
fn runtime_sources(makefile: &str) -> Vec<String> {
    let mut lines = makefile.lines().skip_while(|l| !l.starts_with("RUNTIME ="));
    let mut files = Vec::new();
    let first = lines.next().expect("runtime-c/Makefile has a RUNTIME = line");
    let mut line = first.trim_start_matches("RUNTIME =");
    loop {
        let more = line.trim_end().ends_with('\\');
        files.extend(line.trim_end().trim_end_matches('\\').split_whitespace().map(str::to_string));
        match lines.next() {
            Some(next) if more => line = next,
            _ => break,
        }
    }
    assert!(!files.is_empty(), "runtime-c/Makefile's RUNTIME lists no sources");
    files
}
