//! The C target as a [`Backend`]: lowers with runtime-c's kernels, writes the library's
//! sources ([`super::emit`]), builds them with make and the C compiler, and runs the
//! demo program for `run --target c`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::build::{CacheUse, Shared};
use crate::backend::{Backend, BuildConfig, Capabilities, EmitOptions, Emitted, Entry, Quantize, Toolchain, WeightLayout, WeightsMode};
use crate::codegen::program_target::{lower_programs, program_emitted, program_target_lacks};
use crate::passes::Graphs;
use crate::data;
use crate::error::{Error, Result};
use crate::codegen::cstyle::Dialect;
use crate::ir::{Graph, ValueId};
use crate::lower::Program;
use crate::passes::ProgramPass;
use crate::tensor::Tensor;

pub struct CTarget;

impl Backend for CTarget {
    fn name(&self) -> &'static str {
        "c"
    }

    fn about(&self) -> &'static str {
        "portable C99 with no allocation: a static library, a shared library, a header and a demo program"
    }

    fn program_passes(&self) -> &'static [ProgramPass] {
        super::PASSES
    }

    /// What lowering cannot express, and element types the C dialect lacks (f16/bf16
    /// have no C arithmetic yet).
    fn claims(&self, c: crate::ir::Composite) -> bool {
        crate::codegen::cstyle::composite_helper(c).is_some()
    }

    fn lacks(&self, graph: &Graph, v: ValueId) -> Option<String> {
        program_target_lacks(graph, v, |d| super::dialect::C.supports(d))
    }

    fn emit(&self, graphs: &Graphs, opts: &EmitOptions) -> Result<Emitted> {
        let (forward, backward) = programs(graphs, opts)?;
        let c = super::Options::of(opts);
        let files = super::emit(&forward, backward.as_ref(), &c)?;
        Ok(program_emitted(files, &forward, backward.as_ref()))
    }

    fn weights_program(&self, graphs: &Graphs, opts: &EmitOptions) -> Result<Option<Program>> {
        Ok(Some(programs(graphs, opts)?.0))
    }

    /// Weights stored narrow in `weights.bin` and widened to f32 as the kernels read
    /// them (`layout.rs`); a library for one CPU (`--cpu`) or another machine (`--triple`).
    fn capabilities(&self) -> Capabilities {
        Capabilities { quantizations: &[Quantize::F32, Quantize::F16, Quantize::Bf16, Quantize::Q8_0, Quantize::Int8], picks_cpu: true, cross_builds: true, weights_modes: &[WeightsMode::File, WeightsMode::Embed, WeightsMode::EmbedC, WeightsMode::Safetensors], ..Capabilities::NONE }
    }

    fn toolchain(&self) -> &dyn Toolchain {
        self
    }
}

impl Toolchain for CTarget {
    fn needs(&self) -> &'static str {
        "make and a C99 compiler ($CC, default cc; a cross compiler through $CC)"
    }

    fn build(&self, dir: &Path, build: &BuildConfig) -> Result<Option<CacheUse>> {
        make(dir, build, &[])
    }

    /// The demo alone (the shared library is not needed to run).
    fn build_to_run(&self, dir: &Path, build: &BuildConfig) -> Result<Option<CacheUse>> {
        make(dir, build, &["demo"])
    }

    fn run(&self, dir: &Path, _build: &BuildConfig, entry: &Entry, feeds: &BTreeMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        run_demo(&dir.join(format!("{}_demo", entry.name)), dir, entry, feeds, &[])
    }
}

/// `make goals` in `dir`, with the objects that are the same for every model (the
/// runtime's, compiled with its own names, and the demo's file readers) from the build
/// cache ([`crate::build::make_cached`]): the runtime is most of a small model's build
/// (at -O3, 7.8 s of mlp's 8.2).
fn make(dir: &Path, build: &BuildConfig, goals: &[&str]) -> Result<Option<CacheUse>> {
    let sources: Vec<&str> = super::RUNTIME_FILES.iter().map(|(file, _)| *file).collect();
    let objects: Vec<String> = super::runtime_sources().map(|c| format!("{}.any.o", c.trim_end_matches(".c"))).collect();
    // The demo's readers are there where the target is hosted.
    let shared = if dir.join("mr_files.c").exists() { super::shared_with_readers("mr_files.o", &sources, objects) } else { Shared { sources, products: objects } };
    let install = "apt-get install make gcc binutils (Debian/Ubuntu; for --triple, its gcc and binutils), or set CC and OBJCOPY";
    crate::build::make_cached(dir, &crate::build::c_vars(&build.cc, &build.cflags)?, goals, &shared, &build.cache, install).map(Some)
}

/// The forward (and backward) program the C target renders, with its program passes.
pub(crate) fn programs(graphs: &Graphs, opts: &EmitOptions) -> Result<(Program, Option<Program>)> {
    // Training updates the weights in place with row-major gradients, and the
    // forward and backward programs share one blob: both store them row-major.
    let row_major = opts.layout == WeightLayout::Plain || graphs.backward.is_some();
    let passes = if row_major { super::PASSES_ROW_MAJOR } else { super::PASSES };
    let quantize = super::stored(opts.quantize)?;
    let lower = crate::lower::Options { max: opts.max.clone(), library: super::LIBRARY, quantize };
    lower_programs(graphs, &lower, passes, &opts.print_after)
}

/// Runs a demo program built in `dir` (the C target's, or another target's built from
/// the same template or taking the same arguments: the ggml demo) on `feeds`, through
/// .npy files ([`pass_inputs`]), and reads its outputs back ([`read_outputs`]). Its exit
/// statuses besides the model's rejection are `statuses` ([`crate::build::run_program`]).
pub(crate) fn run_demo(
    demo: &Path,
    dir: &Path,
    entry: &Entry,
    feeds: &BTreeMap<String, Tensor>,
    statuses: &[(i32, crate::error::ErrorKind, &str)],
) -> Result<Vec<(String, Tensor)>> {
    let mut cmd = std::process::Command::new(demo);
    cmd.current_dir(dir);
    pass_inputs(&mut cmd, dir, entry, feeds)?;
    crate::build::run_program(cmd, "the compiled model", "the build above should have produced it", super::DEMO_REJECTED_EXIT, statuses)?;
    read_outputs(dir, entry)
}

/// Writes input `i` of `entry` as `dir/input_<i>.npy` and gives `cmd` the arguments
/// every demo and runner takes: `--out dir`, and `--input-index I=FILE` for each input,
/// by its position (a name may hold `=`, which would make `--input NAME=FILE`
/// ambiguous).
pub(crate) fn pass_inputs(cmd: &mut std::process::Command, dir: &Path, entry: &Entry, feeds: &BTreeMap<String, Tensor>) -> Result<()> {
    cmd.arg("--out").arg(dir);
    for (i, input) in entry.inputs.iter().enumerate() {
        let t = feeds.get(input).ok_or_else(|| Error::internal(format!("no feed for {input}")))?;
        let path = dir.join(format!("input_{i}.npy"));
        data::write_npy(&path, t)?;
        let mut spec = std::ffi::OsString::from(format!("{i}="));
        spec.push(&path);
        cmd.arg("--input-index").arg(spec);
    }
    Ok(())
}

/// The outputs a demo or runner wrote into `dir` (`output_<i>.npy`), by name.
pub(crate) fn read_outputs(dir: &Path, entry: &Entry) -> Result<Vec<(String, Tensor)>> {
    let mut outputs = Vec::new();
    for (i, name) in entry.outputs.iter().enumerate() {
        let file = data::read_arrays(&dir.join(format!("output_{i}.npy")))?;
        let t = file.arrays.into_values().next().ok_or_else(|| Error::internal("empty output file"))?;
        // A type NumPy lacks comes back as its stand-in (`data::npy_descr`).
        let t = match entry.output_types.get(i) {
            Some(&d) if d != t.dtype => data::from_stand_in(&t, d).ok_or_else(|| Error::internal(format!("output {name}: {} values in a file for {d}", t.dtype)))?,
            _ => t,
        };
        outputs.push((name.clone(), t));
    }
    Ok(outputs)
}
