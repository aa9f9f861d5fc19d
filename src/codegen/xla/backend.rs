//! The XLA target as a [`Backend`]: writes the HLO modules, weights and runner
//! ([`super::emit`]); building checks every module by parsing and compiling it through
//! PJRT with the runner, and `run --target xla` runs the runner on the data.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use crate::backend::{Backend, BuildConfig, Capabilities, EmitOptions, Emitted, Entry, Toolchain};
use crate::passes::Graphs;
use crate::codegen::names::identifier;
use crate::error::{ErrorKind, Result};
use crate::ir::{Graph, ValueId};
use crate::tensor::Tensor;

pub struct XlaTarget;

/// How the runner's exit statuses read as mithrilc's errors, each with the runner's
/// one-line message (its rejection of the inputs, [`super::RUNNER_REJECTED_EXIT`], is
/// the user's data too): data it refuses is the user's (mithrilc passes it on); wrong
/// arguments are mithrilc's own fault, since it writes them; a missing or broken jax,
/// and XLA's own failures, are the toolchain's.
const STATUSES: [(i32, ErrorKind, &str); 4] = [
    (super::RUNNER_DATA_EXIT, ErrorKind::User, ""),
    (super::RUNNER_USAGE_EXIT, ErrorKind::Internal, ""),
    (super::RUNNER_TOOLCHAIN_EXIT, ErrorKind::Toolchain, ""),
    (super::RUNNER_XLA_EXIT, ErrorKind::Toolchain, ""),
];

/// Runs the runner with `args`, its failures read as [`STATUSES`] say.
fn run_runner(dir: &Path, args: &[OsString], run: Option<(&Entry, &BTreeMap<String, Tensor>)>) -> Result<()> {
    // A run's refusals read as every target's do; a build's name the runner's check.
    let tool = if run.is_some() { "the compiled model" } else { "run_hlo.py --check" };
    let mut cmd = Command::new(super::toolchain::python()?);
    cmd.current_dir(dir).arg(dir.join("run_hlo.py")).args(args);
    if let Some((entry, feeds)) = run {
        crate::codegen::c::backend::pass_inputs(&mut cmd, dir, entry, feeds)?;
    }
    let install = format!("pip install {}", super::toolchain::RUNNER_WHEELS);
    crate::build::run_program(cmd, tool, &install, super::RUNNER_REJECTED_EXIT, &STATUSES)
}

impl Backend for XlaTarget {
    fn name(&self) -> &'static str {
        "xla"
    }

    fn about(&self) -> &'static str {
        "XLA HLO text run through PJRT (jaxlib's CPU client): HLO modules, weights as safetensors and a Python runner"
    }

    fn claims(&self, c: crate::ir::Composite) -> bool {
        super::hlo::composite_instruction(c).is_some()
    }

    fn lacks(&self, graph: &Graph, v: ValueId) -> Option<String> {
        super::lacks(graph, v)
    }

    fn emit(&self, graphs: &Graphs, opts: &EmitOptions) -> Result<Emitted> {
        let xla = super::Options { source: opts.source.clone(), weights: opts.weights.clone(), mesh: opts.mesh.clone() };
        let files = super::emit(graphs, &xla)?;
        let g = graphs.main();
        let names = |ids: &mut dyn Iterator<Item = ValueId>| ids.filter_map(|v| g.node(v).name.clone()).collect::<Vec<_>>();
        let entry = Entry {
            name: identifier(&graphs.forward.name),
            inputs: names(&mut g.inputs()),
            outputs: g.outputs.iter().map(|o| o.name.clone()).collect(),
            output_types: g.outputs.iter().map(|o| g.ty(o.value).dtype).collect(),
        };
        let modules: Vec<(&String, usize)> = files.iter().filter(|(f, _)| f.ends_with(".hlo")).map(|(f, text)| (f, instructions(&String::from_utf8_lossy(text)))).collect();
        let report = modules.iter().map(|(f, n)| format!("{f}: {n} instructions\n")).collect();
        let sizes = serde_json::json!({"hlo_instructions": modules.iter().map(|(f, n)| (f.to_string(), serde_json::json!(n))).collect::<serde_json::Map<_, _>>()});
        Ok(Emitted { files, entry, report, sizes })
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { shards: true, ..Capabilities::NONE }
    }

    fn toolchain(&self) -> &dyn Toolchain {
        self
    }
}

impl Toolchain for XlaTarget {
    fn needs(&self) -> &'static str {
        "Python 3 with the pinned jax and jaxlib (a build without them says the pip command)"
    }

    /// Parses, verifies and compiles every module through PJRT (`run_hlo.py --check`).
    fn build(&self, dir: &Path, _build: &BuildConfig) -> Result<Option<crate::build::CacheUse>> {
        run_runner(dir, &["--check".into()], None)?;
        Ok(None)
    }

    /// Nothing: the run checks every module first (`--check` beside the run, in the
    /// same process), which spares starting Python and importing jax twice (about 1.5 s)
    /// and compiling the module it runs twice.
    fn build_to_run(&self, _dir: &Path, _build: &BuildConfig) -> Result<Option<crate::build::CacheUse>> {
        Ok(None)
    }

    /// Writes each input to `input_<i>.npy` and gives it by its index (`--input-index
    /// I=FILE`: a name may hold `=`, so `--input NAME=FILE` could fit several), then
    /// reads `output_<i>.npy`.
    fn run(&self, dir: &Path, _build: &BuildConfig, entry: &Entry, feeds: &BTreeMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        run_runner(dir, &["--check".into()], Some((entry, feeds)))?;
        crate::codegen::c::backend::read_outputs(dir, entry)
    }
}

/// The instructions of an HLO module's text (its lines with an `=`).
fn instructions(text: &str) -> usize {
    text.lines().filter(|l| l.contains(" = ")).count()
}
