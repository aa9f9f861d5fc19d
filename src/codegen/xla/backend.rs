//! The XLA target as a [`Backend`]: writes the HLO modules, weights and runner
//! ([`super::emit`]); building checks every module by parsing and compiling it through
//! PJRT with the runner, and `run --target xla` runs the runner on the data.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::backend::{Backend, BuildConfig, EmitOptions, Emitted, Entry};
use crate::cli::Graphs;
use crate::codegen::c::backend::run_demo_command;
use crate::codegen::names::identifier;
use crate::error::{ErrorKind, Result};
use crate::ir::{Graph, ValueId};
use crate::tensor::Tensor;

pub struct XlaTarget;

/// How the runner's own failures read: jax missing where it runs.
const NO_JAX: (i32, ErrorKind, &str) =
    (super::RUNNER_NO_JAX_EXIT, ErrorKind::Toolchain, "the runner needs jax and jaxlib 0.10.2: pip install jax==0.10.2 jaxlib==0.10.2");

impl Backend for XlaTarget {
    fn name(&self) -> &'static str {
        "xla"
    }

    fn about(&self) -> &'static str {
        "XLA HLO text run through PJRT (jaxlib's CPU client): HLO modules, weights as safetensors and a Python runner"
    }

    fn toolchain(&self) -> &'static str {
        "Python 3 with the pinned jax and jaxlib (a build without them says the pip command)"
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
        };
        let modules: Vec<(&String, usize)> = files.iter().filter(|(f, _)| f.ends_with(".hlo")).map(|(f, text)| (f, instructions(&String::from_utf8_lossy(text)))).collect();
        let report = modules.iter().map(|(f, n)| format!("{f}: {n} instructions\n")).collect();
        let sizes = serde_json::json!({"hlo_instructions": modules.iter().map(|(f, n)| (f.to_string(), serde_json::json!(n))).collect::<serde_json::Map<_, _>>()});
        Ok(Emitted { files, entry, report, sizes })
    }

    /// Parses, verifies and compiles every module through PJRT (`run_hlo.py --check`).
    fn build(&self, dir: &Path, _build: &BuildConfig) -> Result<()> {
        let mut cmd = Command::new(super::toolchain::python()?);
        cmd.current_dir(dir).arg(dir.join("run_hlo.py")).arg("--check");
        crate::build::run_program(cmd, "run_hlo.py --check", &format!("pip install {}", super::toolchain::JAX_WHEELS), super::RUNNER_REJECTED_EXIT, &[NO_JAX])
    }

    fn shards(&self) -> bool {
        true
    }

    fn run(&self, dir: &Path, _build: &BuildConfig, entry: &Entry, feeds: &BTreeMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        let mut cmd = Command::new(super::toolchain::python()?);
        cmd.arg(dir.join("run_hlo.py"));
        run_demo_command(cmd, dir, entry, feeds, &[NO_JAX])
    }
}

/// The instructions of an HLO module's text (its lines with an `=`).
fn instructions(text: &str) -> usize {
    text.lines().filter(|l| l.contains(" = ")).count()
}
