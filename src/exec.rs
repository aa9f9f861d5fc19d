//! Things that run a model, in one shape: load once (the graphs and the parameters),
//! then run on named inputs as often as wanted and get named outputs. `mithrilc run`,
//! the tests and embedders use [`Executable`] whatever runs underneath: the reference
//! interpreter ([`Interpreter`]) or an artifact a target built ([`Built`]).

use std::collections::BTreeMap;

use crate::backend::{Backend, BuildConfig, EmitOptions, Entry};
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::passes::Graphs;
use crate::pipeline;
use crate::tensor::{RawTensor, Tensor};

/// A loaded model that runs.
pub trait Executable {
    /// The inputs [`Executable::run`] takes, by name, in order (the parameters were
    /// given at load).
    fn inputs(&self) -> &[String];
    /// The outputs it returns, by name, in order.
    fn outputs(&self) -> &[String];
    /// Runs on `inputs` (by name; every one of [`Executable::inputs`] must be there,
    /// anything else is ignored) and returns the outputs in order.
    fn run(&self, inputs: &BTreeMap<String, Tensor>) -> Result<Vec<(String, Tensor)>>;
}

/// The reference interpreter over one graph (the backward graph when gradients were
/// asked for), with its parameters bound.
pub struct Interpreter {
    graph: Graph,
    params: BTreeMap<String, Tensor>,
    inputs: Vec<String>,
    outputs: Vec<String>,
}

impl Interpreter {
    /// Runs `graphs`' main graph with the parameters `params` (by name; the graph's
    /// others are read from each run's inputs).
    pub fn new(graphs: Graphs, params: BTreeMap<String, Tensor>) -> Interpreter {
        let graph = graphs.backward.unwrap_or(graphs.forward);
        let inputs = port_names(&graph, graph.inputs().chain(graph.params()).filter(|&v| !graph.node(v).name.as_ref().is_some_and(|n| params.contains_key(n))));
        let outputs = graph.outputs.iter().map(|o| o.name.clone()).collect();
        Interpreter { graph, params, inputs, outputs }
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }
}

impl Executable for Interpreter {
    fn inputs(&self) -> &[String] {
        &self.inputs
    }

    fn outputs(&self) -> &[String] {
        &self.outputs
    }

    fn run(&self, inputs: &BTreeMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        check_given(&self.inputs, inputs)?;
        let mut feeds = self.params.clone();
        feeds.extend(self.inputs.iter().map(|n| (n.clone(), inputs[n].clone())));
        crate::interp::run(&self.graph, &feeds)
    }
}

/// An artifact a target emitted and its toolchain built, in a scratch directory that
/// lives as long as this does.
pub struct Built<'t> {
    target: &'t dyn Backend,
    build: BuildConfig,
    entry: Entry,
    _scratch: crate::outdir::Scratch,
    dir: std::path::PathBuf,
}

impl<'t> Built<'t> {
    /// Emits `graphs` for `target` with the parameters `params` as its weights (every
    /// parameter of the forward graph must be there) and builds what its runner needs.
    /// `opts` are the emit options beyond the weights (which this fills in).
    pub fn new(target: &'t dyn Backend, graphs: &Graphs, params: &BTreeMap<String, Tensor>, build: BuildConfig, opts: EmitOptions) -> Result<Built<'t>> {
        let forward = &graphs.forward;
        let missing: Vec<String> = forward.params().filter_map(|v| forward.node(v).name.clone()).filter(|n| !params.contains_key(n)).collect();
        if !missing.is_empty() {
            return Err(Error::user(format!("no value for the parameter(s) {}", missing.join(", "))));
        }
        let opts = EmitOptions { weights: Some(param_weights(forward, params)), ..opts };
        let emitted = pipeline::emit(target, graphs, &opts)?;
        let scratch = crate::outdir::Scratch::new()?;
        let dir = scratch.path().join("build");
        crate::outdir::write_atomically(&dir, &emitted.files, &Default::default(), |d| target.toolchain().build_to_run(d, &build).map(drop))?;
        Ok(Built { target, build, entry: emitted.entry, _scratch: scratch, dir })
    }
}

impl Executable for Built<'_> {
    fn inputs(&self) -> &[String] {
        &self.entry.inputs
    }

    fn outputs(&self) -> &[String] {
        &self.entry.outputs
    }

    fn run(&self, inputs: &BTreeMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        check_given(&self.entry.inputs, inputs)?;
        self.target.toolchain().run(&self.dir, &self.build, &self.entry, inputs)
    }
}

/// The names of the nodes `ids`.
fn port_names(graph: &Graph, ids: impl Iterator<Item = crate::ir::ValueId>) -> Vec<String> {
    ids.filter_map(|v| graph.node(v).name.clone()).collect()
}

/// Refuses a run that lacks some of `names` (naming each).
fn check_given(names: &[String], inputs: &BTreeMap<String, Tensor>) -> Result<()> {
    let missing: Vec<&str> = names.iter().filter(|n| !inputs.contains_key(*n)).map(String::as_str).collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::user(format!("no value for the input(s) {}", missing.join(", "))))
}

/// The values `feeds` give the parameters of `graph`, as a target's weights.
pub fn param_weights(graph: &Graph, feeds: &BTreeMap<String, Tensor>) -> BTreeMap<String, RawTensor> {
    graph.params().filter_map(|v| graph.node(v).name.clone()).filter_map(|n| feeds.get(&n).map(|t| (n, RawTensor::from_tensor(t)))).collect()
}

/// Builds `graphs` for `target` and runs it once on `feeds` (the inputs and the
/// parameters by name), the model named after the file `source` in messages.
pub fn run_once(target: &dyn Backend, graphs: &Graphs, feeds: &BTreeMap<String, Tensor>, source: &std::path::Path, build: &BuildConfig, opts: EmitOptions) -> Result<Vec<(String, Tensor)>> {
    let opts = EmitOptions { source: crate::outdir::file_name(source), ..opts };
    Built::new(target, graphs, feeds, build.clone(), opts)?.run(feeds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(shape: &[u64], data: &[f64]) -> Tensor {
        Tensor::new(crate::ir::Dtype::F32, shape.to_vec(), data.to_vec())
    }

    /// Parameters bound once, inputs given per run; a run without an input names it.
    #[test]
    fn the_interpreter_loads_once_and_runs_many() {
        let text = "graph g {\n  %0 = input \"x\" : f32[2]\n  %1 = param \"w\" : f32[2]\n  %2 = mul %0, %1 : f32[2]\n  output \"y\" = %2\n}\n";
        let graphs = Graphs::new(crate::ir::parse::parse(text).unwrap(), &Default::default(), |_, _| {}).unwrap();
        let exe = Interpreter::new(graphs, [("w".to_string(), tensor(&[2], &[2.0, 3.0]))].into());
        assert_eq!((exe.inputs(), exe.outputs()), (&["x".to_string()][..], &["y".to_string()][..]));
        for x in [1.0, -4.0] {
            let got = exe.run(&[("x".to_string(), tensor(&[2], &[x, x]))].into()).unwrap();
            assert_eq!(got[0].1.data, vec![2.0 * x, 3.0 * x]);
        }
        assert_eq!(exe.run(&BTreeMap::new()).unwrap_err().to_string(), "no value for the input(s) x");
    }
}
