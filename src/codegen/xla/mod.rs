//! The XLA target: the model as XLA HLO module text, which any XLA runtime (CPU, GPU,
//! TPU, through PJRT) parses, verifies and compiles; the artifact runs here through
//! jaxlib's PJRT CPU client (`runtime-xla/run_hlo.py`, shipped with it).
//!
//! Why HLO text and not StableHLO: HLO is the form XLA itself compiles and the form its
//! tools read (`hlo_module_from_text` parses and verifies it, `run_hlo_module` runs it),
//! it spells each op with one instruction and its attributes in a line, and its
//! sharding annotations are what the SPMD partitioner reads. StableHLO is a versioned
//! MLIR dialect meant for exchange between frameworks: its text needs MLIR's parser
//! and, for portability, serialization with a pinned version; nothing here needs that.
//!
//! Files written (for a model named `mlp`): `mlp.hlo` (the forward pass), with `--grad`
//! `mlp_backward.hlo` (the backward graph, which computes the outputs too: its outputs
//! are the model's outputs, then `grad/NAME` for each gradient) and, when the model has
//! a loss, `mlp_train_step.hlo` (the backward graph, then SGD with momentum as the C
//! target's step does; parameters `train/lr`, `train/momentum` and a velocity
//! `train/velocity/NAME` per trained weight after the graph's; outputs the loss, the
//! new weights, the new velocities), `mlp.safetensors` (the
//! parameters, named as in the model, when their values are given), `manifest.json`
//! (each module's parameters and outputs, for the runner) and `run_hlo.py`.
//!
//! Limits: shapes are static (symbolic dimensions need `--shape`); arithmetic on bool
//! tensors other than logic and comparison is not written; a gather index outside
//! `[-n, n)` is clamped by XLA where the interpreter reports it; integer division by
//! zero and integer powers with negative exponents follow XLA, not the interpreter.

pub mod backend;
pub mod hlo;
pub mod mesh;
pub mod toolchain;

use std::collections::BTreeMap;

use serde_json::json;

use crate::passes::Graphs;
use crate::codegen::graph::{write_graph, GraphWriter};
use crate::codegen::names::identifier;
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::tensor::RawTensor;
use hlo::{element_type, HloWriter, Parameter, Shardings};

/// The runner shipped with every artifact.
pub const RUNNER: &str = include_str!("../../../runtime-xla/run_hlo.py");

/// The runner's exit statuses (its docstring and docs/xla.md list them; a unit test
/// checks that the runner defines the same): the data (a file missing, malformed or
/// not of the type and shape the model declares; an unusable `--out`).
pub const RUNNER_DATA_EXIT: i32 = 1;

/// The runner's arguments are wrong.
pub const RUNNER_USAGE_EXIT: i32 = 2;

/// jax, jaxlib or safetensors is missing or not the pinned version (or XLA has too
/// few devices for the mesh).
pub const RUNNER_TOOLCHAIN_EXIT: i32 = 3;

/// The model refused its inputs (a gather index out of range): the C demo's status.
pub const RUNNER_REJECTED_EXIT: i32 = crate::codegen::c::DEMO_REJECTED_EXIT;

/// XLA failed to parse, compile or run a module, or the runner failed.
pub const RUNNER_XLA_EXIT: i32 = 5;

/// Everything the XLA target's emit takes.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The model file's name, for metadata.
    pub source: String,
    /// Parameter values by name, written to `<name>.safetensors` when given.
    pub weights: Option<BTreeMap<String, RawTensor>>,
    /// The device mesh to partition over (`--mesh`, [`mesh::parse`]); empty: one device.
    pub mesh: Vec<(String, u64)>,
}

/// One module's text and its entry's parameters.
pub struct Module {
    pub text: String,
    pub parameters: Vec<Parameter>,
    pub outputs: Vec<String>,
    /// How the parameters split over the mesh, by name (absent: replicated).
    pub specs: BTreeMap<String, mesh::Spec>,
}

/// Why the target cannot write node `v` (`Backend::lacks`).
pub fn lacks(graph: &Graph, v: crate::ir::ValueId) -> Option<String> {
    HloWriter::new("m", "", None).lacks(graph, v)
}

/// A writer of `graph` as module `module`, partitioned over `opts.mesh` when given,
/// and how the mesh splits the parameters.
fn writer(graph: &Graph, module: &str, opts: &Options) -> (BTreeMap<String, mesh::Spec>, HloWriter) {
    let specs = mesh::specs(graph, &opts.mesh);
    let shardings = (!opts.mesh.is_empty()).then(|| specs.iter().map(|(n, s)| (n.clone(), mesh::hlo_sharding(s, &opts.mesh))).collect::<Shardings>());
    (specs, HloWriter::new(module, &opts.source, shardings))
}

/// The HLO module `module` computing `graph`.
pub fn module(graph: &Graph, module: &str, opts: &Options) -> Result<Module> {
    let (specs, mut w) = writer(graph, module, opts);
    write_graph(graph, &mut w)?;
    let outputs = graph.outputs.iter().map(|o| o.name.clone()).collect();
    Ok(Module { text: w.text(), parameters: w.parameters().to_vec(), outputs, specs })
}

/// The training step of `backward` (from `--grad`), when it has a loss: the backward
/// graph, then SGD with momentum on every parameter it has the gradient of
/// ([`HloWriter::train_step`]).
pub fn train_module(backward: &Graph, module: &str, opts: &Options) -> Result<Option<Module>> {
    let Some(loss) = backward.outputs.iter().find(|o| o.loss) else { return Ok(None) };
    let scalar = backward.ty(loss.value).dtype;
    let mut trained = Vec::new();
    for p in backward.params() {
        let name = backward.node(p).name.clone().ok_or_else(|| Error::internal(format!("xla: parameter %{} has no name", p.0)))?;
        let Some(grad) = backward.outputs.iter().find(|o| o.name == crate::passes::autodiff::grad_name(&name)) else { continue };
        let d = backward.ty(p).dtype;
        if !matches!(d, crate::ir::Dtype::F32 | crate::ir::Dtype::F64) || backward.ty(grad.value).dtype != d || !scalar.is_float() {
            return Err(Error::user(format!("the training step updates f32 and f64 parameters only; `{name}` is {d}")));
        }
        trained.push(hlo::Trained { name, param: p, grad: grad.value });
    }
    let (specs, mut w) = writer(backward, module, opts);
    for v in backward.ids() {
        w.node(backward, v)?;
    }
    w.train_step(backward, loss.value, &trained)?;
    let mut outputs = vec![loss.name.clone()];
    outputs.extend(trained.iter().map(|t| t.name.clone()));
    outputs.extend(trained.iter().map(|t| hlo::velocity_name(&t.name)));
    Ok(Some(Module { text: w.text(), parameters: w.parameters().to_vec(), outputs, specs }))
}

/// The artifact's files, in a fixed order: the modules, the manifest, the weights when
/// given, the runner.
pub fn emit(graphs: &Graphs, opts: &Options) -> Result<Vec<(String, Vec<u8>)>> {
    let name = identifier(&graphs.forward.name);
    let mut files = Vec::new();
    let mut modules = serde_json::Map::new();
    let mut parts = vec![("forward", &graphs.forward, format!("{name}.hlo"))];
    if let Some(b) = &graphs.backward {
        parts.push(("backward", b, format!("{name}_backward.hlo")));
    }
    // Each parameter's name, type, the rows it indexes if it is a gather's indices
    // and, partitioned, the mesh axis splitting each
    // dimension (null: none), for the runner.
    let params = |m: &Module, graph: &Graph| -> Vec<serde_json::Value> {
        // XLA clamps an index out of range: the runner checks these inputs.
        let rows: BTreeMap<String, u64> =
            crate::codegen::graph::gather_index_rows(graph).into_iter().filter_map(|(v, (n, _))| Some((graph.node(v).name.clone()?, n))).collect();
        m.parameters
            .iter()
            .map(|p| {
                let mut j = json!({"name": p.name, "weight": p.weight, "dtype": element_type(p.dtype), "shape": p.shape});
                if let Some(n) = rows.get(&p.name) {
                    j["rows"] = json!(n);
                }
                if !opts.mesh.is_empty() {
                    let spec = m.specs.get(&p.name).cloned().unwrap_or_else(|| vec![None; p.shape.len()]);
                    j["split"] = json!(spec.iter().map(|a| a.map(|a| opts.mesh[a].0.clone())).collect::<Vec<_>>());
                }
                j
            })
            .collect()
    };
    for (role, graph, file) in parts {
        let m = module(graph, &format!("{name}_{role}"), opts)?;
        let train = match role {
            "backward" => train_module(graph, &format!("{name}_train_step"), opts)?,
            _ => None,
        };
        modules.insert(role.to_string(), json!({"hlo": file, "parameters": params(&m, graph), "outputs": m.outputs}));
        files.push((file, m.text.into_bytes()));
        if let Some(t) = train {
            let file = format!("{name}_train_step.hlo");
            modules.insert("train_step".to_string(), json!({"hlo": file, "parameters": params(&t, graph), "outputs": t.outputs}));
            files.push((file, t.text.into_bytes()));
        }
    }
    let weights_file = format!("{name}.safetensors");
    let weights = match &opts.weights {
        Some(values) => Some(weights(&graphs.forward, values)?),
        None => None,
    };
    let manifest = json!({
        "format": "mithrilc-xla 1",
        "model": name,
        "source": opts.source,
        "main": if graphs.backward.is_some() { "backward" } else { "forward" },
        "weights": weights.as_ref().map(|_| weights_file.clone()),
        "mesh": (!opts.mesh.is_empty()).then(|| opts.mesh.iter().map(|(a, n)| json!([a, n])).collect::<Vec<_>>()),
        "modules": modules,
    });
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| Error::internal(format!("xla manifest: {e}")))?;
    files.push(("manifest.json".to_string(), format!("{text}\n").into_bytes()));
    if let Some(bytes) = weights {
        files.push((weights_file, bytes));
    }
    files.push(("run_hlo.py".to_string(), RUNNER.as_bytes().to_vec()));
    Ok(files)
}

/// The safetensors file of the model's parameters, each in its declared type and
/// under its name in the model.
fn weights(graph: &Graph, values: &BTreeMap<String, RawTensor>) -> Result<Vec<u8>> {
    let mut arrays = Vec::new();
    for v in graph.params() {
        let node = graph.node(v);
        let name = node.name.clone().ok_or_else(|| Error::internal(format!("xla: parameter %{} has no name", v.0)))?;
        let t = values.get(&name).ok_or_else(|| Error::user(format!("no value for the parameter `{name}`")))?;
        let want = node.ty.shape.as_known().ok_or_else(|| Error::internal(format!("xla: parameter `{name}` has a symbolic shape")))?;
        if t.shape != want {
            return Err(Error::user(format!("parameter `{name}` has shape {:?}, the model needs {:?}", t.shape, want)));
        }
        arrays.push((name, t.converted(node.ty.dtype)));
    }
    crate::data::raw_safetensors_bytes(&arrays)
}
