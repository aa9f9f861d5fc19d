//! The CUDA target as a [`Backend`]: lowers with the CUDA runtime's kernels (the same
//! f32 library as C's), writes the sources ([`super::emit`]), builds them with nvcc, or
//! for `--emulate` with the host C++ compiler, and runs the demo for `run --target cuda`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::backend::{Accumulate, Backend, BuildConfig, Capabilities, EmitOptions, Emitted, Entry, Gemm, Precision, Toolchain, WeightsMode};
use std::fmt::Write as _;

use crate::codegen::program_target::{device_programs, program_emitted, program_target_lacks};
use crate::passes::Graphs;
use crate::codegen::c::backend::run_demo;
use crate::codegen::cstyle::Dialect;
use crate::error::{ErrorKind, Result};
use crate::ir::{Graph, ValueId};
use crate::tensor::Tensor;

pub struct CudaTarget;

impl Backend for CudaTarget {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn about(&self) -> &'static str {
        "CUDA C++ for NVIDIA GPUs (sm_80 and newer), built with nvcc: a shared library, a header and a demo program"
    }

    /// What lowering cannot express, and element types the dialect lacks.
    fn claims(&self, c: crate::ir::Composite) -> bool {
        crate::codegen::cstyle::composite_helper(c).is_some()
    }

    fn lacks(&self, graph: &Graph, v: ValueId) -> Option<String> {
        program_target_lacks(graph, v, |d| super::Cuda::F32.supports(d))
    }

    /// With `--report`'s launches on `--gpu` (an H100 by default).
    fn emit(&self, graphs: &Graphs, opts: &EmitOptions) -> Result<Emitted> {
        let (forward, backward) = device_programs(graphs, opts, super::LIBRARY)?;
        let d = super::Cuda::accumulating(crate::backend::accumulator(self, opts.accumulate)?);
        let products = super::Products { precision: opts.precision, gemm: opts.gemm };
        let files = super::emit(&forward, backward.as_ref(), &crate::codegen::c::Options::of(opts), products, d)?;
        let mut emitted = program_emitted(files, &forward, backward.as_ref());
        let gpu = opts.gpu.unwrap_or(&super::plan::GPUS[0]);
        let scratch = super::plan::scratch_floats(&forward, backward.as_ref());
        if scratch > 0 {
            let _ = writeln!(emitted.report, "split-K scratch (after the arena): {} B", scratch * 4);
        }
        emitted.report.push_str(&super::report::launches_text("launches", &forward, gpu, opts.precision, scratch));
        emitted.sizes["launches"] = super::report::launches_json(&forward, gpu, opts.precision, scratch);
        if let Some(b) = &backward {
            emitted.report.push_str(&super::report::launches_text("backward pass launches", b, gpu, opts.precision, scratch));
            emitted.sizes["backward"]["launches"] = super::report::launches_json(b, gpu, opts.precision, scratch);
        }
        if opts.gemm == Gemm::Cublaslt {
            emitted.report.push_str(&super::cublaslt::report_text("matrix products", &forward));
            emitted.sizes["cublaslt"] = super::cublaslt::report_json(&forward);
            if let Some(b) = &backward {
                emitted.report.push_str(&super::cublaslt::report_text("backward pass matrix products", b));
                emitted.sizes["backward"]["cublaslt"] = super::cublaslt::report_json(b);
            }
        }
        Ok(emitted)
    }

    fn weights_program(&self, graphs: &Graphs, opts: &EmitOptions) -> Result<Option<crate::lower::Program>> {
        Ok(Some(device_programs(graphs, opts, super::LIBRARY)?.0))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { precisions: &[Precision::F32, Precision::Tf32, Precision::Bf16, Precision::F16], gemms: &[Gemm::Builtin, Gemm::Cublaslt], accumulators: &[Accumulate::F32, Accumulate::F64], reports_launches: true, emulates: true, weights_modes: &[WeightsMode::File, WeightsMode::Safetensors], ..Capabilities::NONE }
    }

    fn toolchain(&self) -> &dyn Toolchain {
        self
    }
}

impl Toolchain for CudaTarget {
    fn needs(&self) -> &'static str {
        "make and nvcc from the CUDA toolkit, an NVIDIA GPU to run; run --emulate: a C++ compiler ($CXX, default c++)"
    }

    /// nvcc for the GPU (found by [`crate::build::nvcc`]): the fat binary; or the host
    /// C++ compiler (`$CXX`, else `c++`) for emulation.
    fn build(&self, dir: &Path, build: &BuildConfig) -> Result<Option<crate::build::CacheUse>> {
        make(dir, build, None)
    }

    /// For this machine's GPU alone (its compute capability from `nvidia-smi`, sm_80 or
    /// newer): one code generation instead of the fat binary's. An older GPU keeps
    /// the fat binary (whose run then says what is missing); a machine that shows no
    /// NVIDIA GPU at all is refused before nvcc spends half a minute on a program that
    /// cannot run.
    fn build_to_run(&self, dir: &Path, build: &BuildConfig) -> Result<Option<crate::build::CacheUse>> {
        let arch = (!build.emulate).then(crate::build::local_gpu_arch).flatten();
        if !build.emulate && arch.is_none() && !crate::build::nvidia_device_nodes() {
            return Err(crate::error::Error::new(ErrorKind::Toolchain, "no usable CUDA device: this machine shows no NVIDIA GPU (nvidia-smi names none, and there is no /dev/nvidiactl or /dev/dxg)").note(NO_GPU));
        }
        make(dir, build, arch.filter(|&a| a >= 80))
    }

    fn run(&self, dir: &Path, build: &BuildConfig, entry: &Entry, feeds: &BTreeMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        let demo = dir.join(format!("{}_demo{}", entry.name, if build.emulate { "_emu" } else { "" }));
        run_demo(&demo, dir, entry, feeds, &[(super::DEMO_NO_GPU_EXIT, ErrorKind::Toolchain, NO_GPU)])
    }

    fn built_report(&self, dir: &Path, entry: &Entry) -> Result<String> {
        super::report::ptxas_report(dir, &entry.name)
    }
}

/// What `run --target cuda` without a GPU should do instead.
const NO_GPU: &str = "run --target cuda needs an NVIDIA GPU and its driver; --emulate runs the kernels on the CPU instead";

/// `make` in `dir`: with nvcc, for the architecture `arch` alone (sm_`arch`) where one
/// is given, else the Makefile's fat binary; with `build.emulate`, the emulation build.
fn make(dir: &Path, build: &BuildConfig, arch: Option<u32>) -> Result<Option<crate::build::CacheUse>> {
    // The demo's file readers are compiled as C++, by the compiler that builds the rest;
    // they, the emulation's scheduler and its CUDA runtime are the same for every model.
    let (mut vars, goals, shared) = if build.emulate {
        let emulation = ["cuda_emu.h", "cuda_emu.cpp", "simt_emu.h", "simt_emu.cpp"];
        let shared = crate::codegen::c::shared_with_readers("mr_files_emu.o", &emulation, vec!["cuda_emu.o".to_string(), "simt_emu.o".to_string()]);
        (vec![crate::build::make_var("CXX", &cxx(), "$CXX")?], &["emulate"][..], shared)
    } else {
        let nvcc = crate::build::nvcc()?;
        if dir.join(super::CUBLASLT_FILE.0).exists() {
            cublaslt_headers(&nvcc)?;
        }
        (vec![crate::build::make_word("NVCC", &nvcc)?], &[][..], crate::codegen::c::shared_with_readers("mr_files.o", &[], Vec::new()))
    };
    if build.emulate {
        vars.extend(build.cxxflags_var()?);
    }
    if let Some(arch) = arch {
        vars.push(crate::build::make_var("GENCODE", &format!("-gencode arch=compute_{arch},code=sm_{arch}"), "GENCODE")?);
    }
    crate::build::make_cached(dir, &vars, goals, &shared, &build.cache, "apt-get install make g++ (Debian/Ubuntu)").map(Some)
}

/// Refuses to build `--gemm cublaslt`'s files where cuBLASLt's header is not where nvcc
/// looks (beside its own headers: a toolkit's `include` or `targets/*/include`, the
/// wheels' `nvidia/cu13/include`; or a directory of `$CPATH`), saying how to install it,
/// rather than leaving nvcc's "file not found" to explain it.
pub fn cublaslt_headers(nvcc: &Path) -> Result<()> {
    let real = std::fs::canonicalize(nvcc).unwrap_or_else(|_| nvcc.to_path_buf());
    let mut dirs: Vec<std::path::PathBuf> = std::env::var_os("CPATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    if let Some(root) = real.parent().and_then(Path::parent) {
        dirs.push(root.join("include"));
        let targets = std::fs::read_dir(root.join("targets")).into_iter().flatten().flatten();
        dirs.extend(targets.map(|t| t.path().join("include")));
    }
    match dirs.iter().any(|d| d.join("cublasLt.h").is_file()) {
        true => Ok(()),
        false => Err(crate::error::Error::new(ErrorKind::Toolchain, format!("--gemm cublaslt compiles against cuBLASLt's header, cublasLt.h, which is not beside nvcc ({})", nvcc.display()))
            .note(format!("install it where nvcc is: pip install {} (or build with a CUDA toolkit's nvcc)", crate::build::CUBLAS_WHEEL))),
    }
}

/// The host C++ compiler: `$CXX`, else `c++`.
fn cxx() -> String {
    std::env::var("CXX").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "c++".to_string())
}
