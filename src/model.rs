//! Embedding mithrilc in a Rust program: load a model file (Mithril's model JSON or
//! ONNX) and its parameters, compile it in this process ([`Model::jit`], machine code
//! through cranelift, no C compiler needed) or take the reference interpreter
//! ([`Model::interpreter`]), and run it on arrays as often as wanted, from any thread.
//! `mithrilc run` makes its runs through the same calls.
//!
//! ```
//! use mithrilc::exec::Executable;
//! use mithrilc::tensor::Tensor;
//!
//! // The example MLP of the repository, its parameters from a .npz file (a safetensors
//! // file works the same), with a batch of any size up to 16.
//! let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/mlp");
//! let model = mithrilc::Model::open(format!("{dir}/mlp.json"))
//!     .shape("input", "B,5")?
//!     .params(format!("{dir}/data.npz"))
//!     .load()?;
//! let jit = model.jit(&mithrilc::model::JitOptions { max: [("B".into(), 16)].into(), ..Default::default() })?;
//! assert_eq!(jit.inputs(), ["input"]);
//!
//! // Three rows in, three rows out.
//! let x = Tensor::new(mithrilc::ir::Dtype::F32, vec![3, 5], vec![0.5; 15]);
//! let outputs = jit.run(&[("input".to_string(), x.clone())].into())?;
//! let (name, y) = &outputs[0];
//! assert_eq!((name.as_str(), y.shape[0]), ("output", 3));
//!
//! // The interpreter computes the same (in f64) to within f32 rounding; it runs
//! // static shapes only.
//! let fixed = mithrilc::Model::open(format!("{dir}/mlp.json")).shape("input", "3,5")?.params(format!("{dir}/data.npz")).load()?;
//! let want = fixed.interpreter().run(&[("input".to_string(), x)].into())?;
//! assert!(y.data.iter().zip(&want[0].1.data).all(|(a, b)| (a - b).abs() < 1e-5));
//! # Ok::<(), mithrilc::Error>(())
//! ```
//!
//! For arrays that are bytes already (a NumPy array's buffer, a memory-mapped file),
//! [`crate::exec::Jit::run_arrays`] runs on them without conversions; a model compiled
//! with gradients of a loss ([`ModelBuilder::grad`]) trains with
//! [`crate::exec::Jit::train_step`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::backend::{EmitOptions, Quantize};
use crate::error::{Error, Result};
use crate::exec::{Interpreter, Jit};
use crate::ir::{Shape, TensorType};
use crate::passes::autodiff::Wrt;
use crate::pipeline::{Graphs, ModelSpec};
use crate::tensor::Tensor;

/// A loaded model: its graphs after the passes, and the parameter values it was given
/// (a file's, and the model file's own, as ONNX's initializers).
pub struct Model {
    graphs: Graphs,
    params: BTreeMap<String, Tensor>,
    source: PathBuf,
}

/// What [`Model::open`] is told before it loads.
pub struct ModelBuilder {
    spec: ModelSpec,
    params: Option<PathBuf>,
    /// Parameter values given in memory (over the file's).
    values: BTreeMap<String, Tensor>,
}

/// How [`Model::jit`] compiles.
#[derive(Debug, Clone, Default)]
pub struct JitOptions {
    /// The largest value of each symbolic dimension (`--max`; those not given take the
    /// default of `--max`).
    pub max: BTreeMap<String, u64>,
    /// How the weights of matrix products and convolutions are stored (`--quantize`).
    pub quantize: Quantize,
    /// The threads a run splits its work over (`None`: every core).
    pub threads: Option<usize>,
    /// Passes after which the IR or program is printed to stderr (`--print-after`).
    pub print_after: Vec<String>,
    /// The code generator: cranelift (the default) or LLVM (the `llvm` feature).
    pub tier: crate::backend::JitTier,
}

impl Model {
    /// Starts loading the model file at `path` (Mithril JSON or ONNX, told apart by
    /// their contents).
    pub fn open(path: impl Into<PathBuf>) -> ModelBuilder {
        ModelBuilder { spec: ModelSpec { path: path.into(), ..Default::default() }, params: None, values: BTreeMap::new() }
    }

    /// Starts loading a Mithril model JSON held in memory (`model_to_dict`'s output,
    /// serialized); `name` stands for its file in messages, and its stem names the model
    /// (`"mlp.json"`).
    pub fn from_json(text: impl Into<std::sync::Arc<str>>, name: impl Into<PathBuf>) -> ModelBuilder {
        ModelBuilder { spec: ModelSpec { path: name.into(), text: Some(text.into()), ..Default::default() }, params: None, values: BTreeMap::new() }
    }

    /// A model from graphs already through the passes and the parameter values by name
    /// (what `mithrilc run` has once it has read its files).
    pub fn new(graphs: Graphs, params: BTreeMap<String, Tensor>, source: PathBuf) -> Model {
        Model { graphs, params, source }
    }

    pub fn graphs(&self) -> &Graphs {
        &self.graphs
    }

    /// The parameter values it was given, by name.
    pub fn params(&self) -> &BTreeMap<String, Tensor> {
        &self.params
    }

    /// Gives parameters new values by name (the others keep theirs): what
    /// [`Model::jit`] and [`Model::interpreter`] take from now on. Refuses, changing
    /// nothing, what [`Model::check_params`] refuses.
    pub fn set_params(&mut self, values: BTreeMap<String, Tensor>) -> Result<()> {
        self.check_params(&values)?;
        self.params.extend(values);
        Ok(())
    }

    /// Whether `values` could be the values of parameters of the model: each names one,
    /// in its shape.
    pub fn check_params(&self, values: &BTreeMap<String, Tensor>) -> Result<()> {
        let g = &self.graphs.forward;
        let params: BTreeMap<&str, Option<Vec<u64>>> = g.params().filter_map(|v| Some((g.node(v).name.as_deref()?, g.node(v).ty.shape.as_known()))).collect();
        for (name, t) in values {
            match params.get(name.as_str()) {
                None => return Err(Error::user(format!("`{name}` is not a parameter of the model (its parameters: {})", params.keys().copied().collect::<Vec<_>>().join(", ")))),
                Some(Some(shape)) if *shape != t.shape => return Err(Error::user(format!("parameter `{name}` has shape {:?}, the model's is {shape:?}", t.shape))),
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Compiles it in this process (`--target jit`): every parameter of the model must
    /// have a value.
    pub fn jit(&self, opts: &JitOptions) -> Result<Jit> {
        let emit = EmitOptions { source: crate::outdir::file_name(&self.source), max: opts.max.clone(), quantize: opts.quantize, print_after: opts.print_after.clone(), ..Default::default() };
        let mut jit = Jit::with_tier(opts.tier, &self.graphs, &self.params, emit)?;
        if let Some(n) = opts.threads {
            jit.set_threads(n);
        }
        Ok(jit)
    }

    /// What `mithrilc inspect` prints of it: the IR after the passes (with gradients,
    /// the backward graph), its counts of inputs, parameters and ops, and its FLOPs.
    pub fn inspect(&self) -> String {
        crate::pipeline::describe(self.graphs.main())
    }

    /// The reference interpreter over it, the parameters bound (those without a value
    /// are read from each run's inputs). It runs models of static shapes only.
    pub fn interpreter(&self) -> Interpreter {
        Interpreter::new(self.graphs.clone(), self.params.clone())
    }
}

impl ModelBuilder {
    /// The shape of input or parameter `name`, as `--shape` takes it: sizes and symbols
    /// separated by commas (`"B,784"`).
    pub fn shape(mut self, name: &str, dims: &str) -> Result<ModelBuilder> {
        let (name, shape) = crate::frontend::parse_shape_arg(&format!("{name}={dims}"))?;
        self.spec.frontend.shapes.insert(name, shape);
        Ok(self)
    }

    /// A constructor value that Mithril left out of the JSON, as `--set` takes it:
    /// `PATH.KEY=VALUE` (VALUE is JSON).
    pub fn set(mut self, arg: &str) -> Result<ModelBuilder> {
        self.spec.frontend.mithril.set.push(crate::frontend::parse_set_arg(arg)?);
        Ok(self)
    }

    /// The parameters' values from a file (.safetensors or .npz; arrays named NAME or
    /// param/NAME), which also give their shapes.
    pub fn params(mut self, path: impl Into<PathBuf>) -> ModelBuilder {
        self.params = Some(path.into());
        self
    }

    /// Parameter values given in memory, by name; they override a file's
    /// ([`ModelBuilder::params`]) and give their shapes as a file's do.
    pub fn values(mut self, values: impl IntoIterator<Item = (String, Tensor)>) -> ModelBuilder {
        self.values.extend(values);
        self
    }

    /// Derive the gradients of every parameter (`--grad`): runs give them, and a model
    /// with a loss trains ([`Jit::train_step`]).
    pub fn grad(self) -> ModelBuilder {
        self.grad_of(Wrt::AllParams)
    }

    /// Derive the gradients of the parameters `wrt` names (`--grad NAME,...`).
    pub fn grad_of(mut self, wrt: Wrt) -> ModelBuilder {
        self.spec.grad = wrt;
        self
    }

    /// Reads the files and runs the graph passes.
    pub fn load(mut self) -> Result<Model> {
        let mut params = BTreeMap::new();
        if let Some(path) = &self.params {
            let file = crate::data::read_arrays(path)?;
            for (key, t) in file.arrays {
                // (outputs and gradients a data file may hold are not parameters)
                let name = key.strip_prefix("param/").unwrap_or(&key);
                if key.starts_with("param/") || !key.contains('/') {
                    self.spec.frontend.known_types.insert(name.to_string(), TensorType::new(t.dtype, Shape::known(&t.shape)));
                    params.insert(name.to_string(), t);
                }
            }
        }
        for (name, t) in std::mem::take(&mut self.values) {
            self.spec.frontend.known_types.insert(name.clone(), TensorType::new(t.dtype, Shape::known(&t.shape)));
            params.insert(name, t);
        }
        let loaded = crate::pipeline::load(&self.spec)?;
        for (name, w) in loaded.weights {
            params.entry(name).or_insert_with(|| w.to_tensor());
        }
        if loaded.graphs.forward.params().next().is_some() && params.is_empty() {
            return Err(Error::user(format!("{}: the model has parameters and no values were given for them (ModelBuilder::params)", self.spec.path.display())));
        }
        Ok(Model { graphs: loaded.graphs, params, source: self.spec.path })
    }
}
