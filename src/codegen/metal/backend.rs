//! The Metal target as a [`Backend`]: lowers with the Metal library's kernels (the same
//! f32 library as C's), writes the sources ([`super::emit`]), builds them on macOS with
//! xcrun, or for `--emulate` with the host C and C++ compilers, and runs the demo for
//! `run --target metal`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::backend::{Accumulate, Backend, BuildConfig, Capabilities, EmitOptions, Emitted, Entry, Precision, Toolchain, WeightsMode};
use crate::codegen::program_target::{emit_device, program_target_lacks};
use crate::passes::Graphs;
use crate::codegen::c::backend::run_demo;
use crate::codegen::cstyle::Dialect;
use crate::error::{Error, ErrorKind, Result};
use crate::ir::{Graph, ValueId};
use crate::tensor::Tensor;

pub struct MetalTarget;

impl Backend for MetalTarget {
    fn name(&self) -> &'static str {
        "metal"
    }

    fn about(&self) -> &'static str {
        "Metal Shading Language kernels and C host code for Apple GPUs, built on macOS with xcrun: a metallib, a library, a header and a demo program"
    }

    /// What lowering cannot express, and element types Metal lacks (f64).
    fn claims(&self, c: crate::ir::Composite) -> bool {
        crate::codegen::cstyle::composite_helper(c).is_some()
    }

    fn lacks(&self, graph: &Graph, v: ValueId) -> Option<String> {
        program_target_lacks(graph, v, |d| super::Metal.supports(d))
    }

    fn emit(&self, graphs: &Graphs, opts: &EmitOptions) -> Result<Emitted> {
        emit_device(graphs, opts, super::LIBRARY, super::emit)
    }

    fn weights_program(&self, graphs: &Graphs, opts: &EmitOptions) -> Result<Option<crate::lower::Program>> {
        Ok(Some(crate::codegen::program_target::device_programs(graphs, opts, super::LIBRARY)?.0))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { precisions: &[Precision::F32, Precision::Bf16, Precision::F16], accumulators: &[Accumulate::F32], emulates: true, weights_modes: &[WeightsMode::File, WeightsMode::Safetensors], ..Capabilities::NONE }
    }

    fn toolchain(&self) -> &dyn Toolchain {
        self
    }
}

impl Toolchain for MetalTarget {
    fn needs(&self) -> &'static str {
        "make and xcrun metal (macOS with Xcode); run --emulate: C and C++ compilers ($CC, $CXX)"
    }

    /// `make` with xcrun's Metal compiler on macOS; the host C and C++ compilers (`$CC`,
    /// `$CXX`) for emulation. Elsewhere a real build is refused: no Metal compiler runs
    /// there.
    fn build(&self, dir: &Path, build: &BuildConfig) -> Result<Option<crate::build::CacheUse>> {
        let mut vars = Vec::new();
        if build.emulate {
            for (var, default) in [("CC", "cc"), ("CXX", "c++")] {
                let value = std::env::var(var).ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| default.to_string());
                vars.push(crate::build::make_var(var, &value, &format!("${var}"))?);
            }
            vars.extend(build.cxxflags_var()?);
        } else if !cfg!(target_os = "macos") {
            return Err(Error::new(
                ErrorKind::Toolchain,
                "the Metal target builds with Apple's Metal compiler (xcrun -sdk macosx metal), which runs only on macOS; here, `compile --emit source` writes the sources without building them, and `run --emulate` compiles the kernels as C++ and runs them on the CPU".to_string(),
            ));
        }
        // The Metal runtime's emulation is the same for every model, as are the demo's readers.
        let runtime: Vec<&str> = super::RUNTIME_FILES.iter().map(|(file, _)| *file).collect();
        let (goals, more) = if build.emulate { (&["emulate"][..], vec!["mithril_metal_emu.o".to_string(), "simt_emu.o".to_string()]) } else { (&[][..], Vec::new()) };
        let shared = crate::codegen::c::shared_with_readers("mr_files.o", &runtime, more);
        let install = "on macOS: xcode-select --install (the Metal compiler comes with Xcode); for --emulate: apt-get install make gcc g++ (Debian/Ubuntu)";
        crate::build::make_cached(dir, &vars, goals, &shared, &build.cache, install).map(Some)
    }

    fn run(&self, dir: &Path, build: &BuildConfig, entry: &Entry, feeds: &BTreeMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        let demo = dir.join(format!("{}_demo{}", entry.name, if build.emulate { "_emu" } else { "" }));
        let no_gpu = (super::DEMO_NO_GPU_EXIT, ErrorKind::Toolchain, "run --target metal needs a Metal device (macOS); --emulate runs the kernels on the CPU instead");
        run_demo(&demo, dir, entry, feeds, &[no_gpu])
    }
}
