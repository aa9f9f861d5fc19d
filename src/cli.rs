//! The `mithrilc` commands, as library functions (the binary is a thin clap front).
//!
//! Every command turns its arguments into what the pipeline takes
//! ([`crate::pipeline`]: load, passes, a target; [`crate::exec`]: running), and prints
//! or writes the result; all failures come back as [`Error`]s whose kind is the exit
//! code. Nothing below this module imports it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::backend::{Accumulate, Backend, EmitOptions};
pub use crate::backend::{BuildConfig, Gemm, Precision, Quantize, WeightLayout, WeightsMode, HOST_CFLAGS};
use crate::build::CacheUse;
use crate::cache::Cache;
use crate::data::{self, Array, ArrayFile};
use crate::error::{Error, Result};
use crate::exec::Executable;
use crate::frontend;
use crate::ir::{self, Graph, Op, Shape, TensorType};
use crate::outdir::file_name;
use crate::passes;
use crate::pipeline::{self, Graphs, ModelSpec};
use crate::tensor::{RawTensor, Tensor};

/// What every command that reads a model takes.
#[derive(Debug, Clone, Default)]
pub struct ModelArgs {
    pub model: PathBuf,
    /// The model's Mithril JSON when it is held in memory (`model` then only names it).
    pub text: Option<std::sync::Arc<str>>,
    /// `NAME=D0,D1,...` (a dimension may be a symbol).
    pub shapes: Vec<String>,
    /// `PATH.KEY=VALUE` (VALUE is JSON; a bare word is a string).
    pub set: Vec<String>,
    /// `NAME=VALUE` (VALUE is JSON): a value for one of the model's keys.
    pub constants: Vec<String>,
    /// `NAME=N`: key NAME is a list of N tensors.
    pub lists: Vec<String>,
    /// Passes after which the IR is printed (to stderr).
    pub print_after: Vec<String>,
    /// The gradients to derive (`--grad`).
    pub grad: passes::autodiff::Wrt,
}

pub use crate::frontend::{parse_set_arg, parse_shape_arg};

impl ModelArgs {
    /// What the pipeline loads: the model, with the arguments parsed and the types
    /// `known_types` gives (from data files, [`known_types`]).
    pub fn spec(&self, known_types: BTreeMap<String, TensorType>) -> Result<ModelSpec> {
        let mut opts = frontend::Options { known_types, ..Default::default() };
        for s in &self.shapes {
            let (name, shape) = parse_shape_arg(s)?;
            opts.shapes.insert(name, shape);
        }
        for s in &self.set {
            opts.mithril.set.push(parse_set_arg(s)?);
        }
        for s in &self.constants {
            let (name, value) = s
                .split_once('=')
                .ok_or_else(|| Error::usage(format!("--const {s}: expected NAME=VALUE, e.g. axis=1 or kernel=[[1.0,0.0],[0.0,1.0]]")))?;
            let value = serde_json::from_str(value).map_err(|e| Error::usage(format!("--const {s}: the value is not JSON ({e})")))?;
            opts.constants.push((name.trim().to_string(), value));
        }
        for s in &self.lists {
            let n = s
                .split_once('=')
                .and_then(|(name, n)| Some((name.trim().to_string(), n.trim().parse::<usize>().ok()?)))
                .ok_or_else(|| Error::usage(format!("--list {s}: expected NAME=N, e.g. input=3")))?;
            opts.mithril.list_inputs.push(n);
        }
        Ok(ModelSpec { path: self.model.clone(), text: self.text.clone(), frontend: opts, grad: self.grad.clone(), print_after: self.print_after.clone() })
    }
}

/// Reads the model into verified IR after the pass pipeline: with `--grad`, the graph
/// with its backward pass. `files` supply the types of inputs and parameters they hold.
pub fn load_model(args: &ModelArgs, files: &[&ArrayFile]) -> Result<Graph> {
    let graphs = load_graphs(args, files)?;
    Ok(graphs.backward.unwrap_or(graphs.forward))
}

/// [`load_model`], keeping the forward graph too.
pub fn load_graphs(args: &ModelArgs, files: &[&ArrayFile]) -> Result<Graphs> {
    Ok(load_known(args, known_types(files)?, files)?.0)
}

/// Loads the model through the pipeline given the types the data files hold
/// ([`known_types`]), printing the frontend's warnings. Returns the graphs and the
/// parameter values the model file carries (ONNX's initializers), as a file of their
/// own: the model's path, and no array the data files `given` also hold (a parameters
/// file overrides the model's values by name).
fn load_known<A>(args: &ModelArgs, known_types: BTreeMap<String, TensorType>, given: &[&ArrayFile<A>]) -> Result<(Graphs, Option<ArrayFile<RawTensor>>)> {
    let loaded = pipeline::load(&args.spec(known_types)?)?;
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let overridden: BTreeSet<&str> = given.iter().flat_map(|f| f.arrays.keys().map(|k| argument_name(k))).collect();
    let mut weights = loaded.weights;
    weights.retain(|name, _| !overridden.contains(name.as_str()));
    let carried = (!weights.is_empty()).then(|| ArrayFile { path: args.model.clone(), arrays: weights });
    Ok((loaded.graphs, carried))
}

/// `mithrilc inspect`: the IR after shape inference and a summary.
pub fn inspect(args: &ModelArgs, params: Option<&Path>) -> Result<String> {
    let params = params.map(data::read_raw_arrays).transpose()?;
    let params: Vec<&ArrayFile<RawTensor>> = params.iter().collect();
    let (graphs, carried) = load_known(args, known_types(&params)?, &params)?;
    let params: Vec<&ArrayFile<RawTensor>> = carried.iter().chain(params).collect();
    let graph = graphs.main();
    let mut out = pipeline::describe(graph);
    out.push_str(&conversion_note(graph, &params)?);
    Ok(out)
}



/// `mithrilc run`: evaluates the model on the given data with the interpreter or a
/// compiled target.
pub struct RunArgs {
    pub model: ModelArgs,
    pub target: RunTarget,
    /// Also run the interpreter and report the largest difference per output.
    pub check: bool,
    /// Run a GPU target's kernels on the CPU by emulation.
    pub emulate: bool,
    /// How a compiled target's matrix products and convolutions may round.
    pub precision: Precision,
    /// `--gemm`: what runs a compiled target's matrix products.
    pub gemm: Gemm,
    /// `--accumulate`: the type a compiled target's float sums accumulate in.
    pub accumulate: Option<Accumulate>,
    /// How a compiled target stores the weights of matrix products and convolutions.
    pub quantize: Quantize,
    /// Data files: `FILE` (arrays named by key) or `NAME=FILE` (a one-array file
    /// whose array is the input `NAME`).
    pub data: Vec<String>,
    pub params: Option<PathBuf>,
    /// Where the outputs go: a `.npz`, `.npy` (one output) or `.safetensors` file.
    pub output: Option<PathBuf>,
    /// `--triple`: refused unless it is this machine's (compile cross-builds).
    pub triple: Option<String>,
    /// `--no-cache`: build without the build cache.
    pub no_cache: bool,
    /// `--threads`: the threads an in-process run splits its work over (default: every core).
    pub threads: Option<u32>,
    /// `--repeat N`: run N times more and report the median time of a run.
    pub repeat: Option<u32>,
}

/// Reads a `--data` argument: `FILE`, or `NAME=FILE` for a file holding one array.
/// Returns the name a `NAME=FILE` binds, with the file.
pub fn read_data_arg(arg: &str) -> Result<(Option<String>, ArrayFile)> {
    match arg.split_once('=') {
        Some((_, "")) => Err(Error::usage(format!("--data {arg}: the file name is empty (expected NAME=FILE)"))),
        Some((name, path)) if !name.is_empty() && !Path::new(arg).exists() => {
            let file = data::read_arrays(Path::new(path))?;
            if file.arrays.len() != 1 {
                return Err(Error::user(format!(
                    "--data {arg}: {path} holds {} arrays; NAME=FILE needs a file with exactly one",
                    file.arrays.len()
                )));
            }
            let t = file.arrays.into_values().next().expect("one array");
            Ok((Some(name.to_string()), ArrayFile { path: file.path, arrays: [(name.to_string(), t)].into_iter().collect() }))
        }
        _ => Ok((None, data::read_arrays(Path::new(arg))?)),
    }
}

/// The data and parameters files of `run`, each array given once. A `--data NAME=FILE`
/// binding is the user saying which array is NAME: it wins over arrays found under
/// that name (`NAME`, `input/NAME`, `param/NAME`) in the other files, which are dropped.
/// Any other array given twice is refused by [`arrays_by_name`].
fn run_files(args: &RunArgs) -> Result<Vec<ArrayFile>> {
    let mut files = Vec::new();
    if let Some(p) = args.params.as_deref() {
        files.push((None, data::read_arrays(p)?));
    }
    let mut bound: BTreeMap<String, &str> = BTreeMap::new();
    for arg in &args.data {
        let (name, file) = read_data_arg(arg)?;
        if let Some(name) = &name {
            if let Some(first) = bound.insert(name.clone(), arg) {
                return Err(Error::usage(format!("--data {arg}: input {name} is already given by --data {first}")));
            }
        }
        files.push((name, file));
    }
    for (binds, file) in &mut files {
        if binds.is_none() {
            file.arrays.retain(|key, _| !bound.contains_key(argument_name(key)));
        }
    }
    Ok(files.into_iter().map(|(_, f)| f).collect())
}

/// The model argument an array's key names: `NAME`, `input/NAME` and `param/NAME` all
/// name `NAME`; any other key (`output/NAME`, `output_grad/NAME`) names itself.
fn argument_name(key: &str) -> &str {
    key.strip_prefix("input/").or_else(|| key.strip_prefix("param/")).unwrap_or(key)
}

/// The types of the model arguments the files hold ([`arrays_by_name`]), for the
/// frontend to complete the model's shapes with.
pub fn known_types<A: Array>(files: &[&ArrayFile<A>]) -> Result<BTreeMap<String, TensorType>> {
    let mut out = BTreeMap::new();
    for (name, found) in arrays_by_name(files)? {
        if found.key != name || !name.contains('/') {
            // output/, grad/, output_grad/ arrays are not model arguments.
            out.insert(name, TensorType::new(found.tensor.dtype(), Shape::known(found.tensor.shape())));
        }
    }
    Ok(out)
}

/// One array of the data, where it was found.
pub struct Found<'a, A = Tensor> {
    pub path: &'a Path,
    pub key: &'a str,
    pub tensor: &'a A,
}

/// Every array of the files by the model argument it names ([`argument_name`]). A name
/// given by two arrays (in two files, or as `x` and `input/x` in one) is an error naming
/// both, whatever their values: a run must never quietly pick one. The same file given
/// twice is one source.
pub fn arrays_by_name<'a, A>(files: &[&'a ArrayFile<A>]) -> Result<BTreeMap<String, Found<'a, A>>> {
    let mut out: BTreeMap<String, Found<'a, A>> = BTreeMap::new();
    let mut seen_files: Vec<PathBuf> = Vec::new();
    for f in files {
        let canonical = f.path.canonicalize().unwrap_or_else(|_| f.path.clone());
        if seen_files.contains(&canonical) {
            continue;
        }
        seen_files.push(canonical);
        for (key, tensor) in &f.arrays {
            let name = argument_name(key);
            let found = Found { path: &f.path, key, tensor };
            if let Some(first) = out.get(name) {
                let place = |x: &Found<A>| {
                    if x.key == name { x.path.display().to_string() } else { format!("{} (as {})", x.path.display(), x.key) }
                };
                return Err(Error::user(format!("`{name}` is given twice: in {} and in {}", place(first), place(&found)))
                    .note(format!("give each array once, or say which one is `{name}` with --data {name}=FILE (a file holding that one array)")));
            }
            out.insert(name.to_string(), found);
        }
    }
    Ok(out)
}

/// Runs the model; returns the outputs and a printable report.
pub fn run(args: &RunArgs) -> Result<(Vec<(String, Tensor)>, String)> {
    if let Some(t) = args.triple.as_deref().map(crate::build::Triple::parse).transpose()?.filter(|t| !t.runs_here()) {
        let host = format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS);
        return Err(Error::usage(format!("run builds and runs the model on this machine ({host}), which cannot run code for {}", t.as_str()))
            .note(format!("cross-build it with `mithrilc compile --target c --triple {}` and run its demo there (or under an emulator such as qemu-user)", t.as_str())));
    }
    let mut owned = run_files(args)?;
    let given: Vec<&ArrayFile> = owned.iter().collect();
    let (graphs, carried) = load_known(&args.model, known_types(&given)?, &given)?;
    if let Some(c) = carried {
        owned.insert(0, ArrayFile { path: c.path, arrays: c.arrays.into_iter().map(|(k, t)| (k, t.to_tensor())).collect() });
    }
    let files: Vec<&ArrayFile> = owned.iter().collect();
    let graph = graphs.main();
    if let Some(path) = &args.output {
        let names: Vec<String> = graph.outputs.iter().map(|o| o.name.clone()).collect();
        data::check_output(path, &names)?;
        let inputs: Vec<&Path> = std::iter::once(args.model.model.as_path()).chain(owned.iter().map(|f| f.path.as_path())).collect();
        crate::outdir::check_not_input(path, &inputs, "-o")?;
    }
    let feeds = feeds(graph, &files).map_err(|e| e.context(args.model.model.display()))?;
    let mut report = conversion_note(graph, &files)?;
    if args.repeat.is_some() && !matches!(args.target, RunTarget::Interp) && !args.target_in_process() {
        return Err(Error::usage("--repeat times runs in this process: give --target jit or interp (a compiled target's demo takes --repeat)".to_string()));
    }
    if args.threads.is_some() && !args.target_in_process() {
        return Err(Error::usage("--threads is for --target jit (a compiled target's demo takes --threads)".to_string()));
    }
    // The data files give the parameters with the inputs: the model takes them all.
    let model = crate::Model::new(graphs, feeds, args.model.model.clone());
    let (graphs, feeds) = (model.graphs(), model.params());
    let interp = || model.interpreter().run(feeds).map_err(|e| e.context(args.model.model.display()));
    let outputs = match args.target {
        RunTarget::Interp if args.emulate => return Err(Error::usage("--emulate runs a GPU target's kernels on the CPU: give --target cuda or metal".to_string())),
        RunTarget::Interp if args.precision != Precision::F32 => {
            return Err(Error::usage("--precision is for a compiled target: the interpreter computes in the model's types".to_string()))
        }
        RunTarget::Interp if args.gemm != Gemm::Builtin => return Err(Error::usage("--gemm is for a compiled target (--target cuda): the interpreter has no kernels to choose".to_string())),
        RunTarget::Interp if args.accumulate.is_some_and(|a| a != Accumulate::F64) => {
            return Err(Error::usage("--accumulate is for a compiled target: the interpreter accumulates in f64".to_string()))
        }
        RunTarget::Interp if args.quantize != Quantize::F32 => {
            return Err(Error::usage("--quantize is for a compiled target (--target c or ggml): the interpreter reads the parameters as given".to_string()))
        }
        RunTarget::Interp => {
            let exe = model.interpreter();
            let outputs = exe.run(feeds).map_err(|e| e.context(args.model.model.display()))?;
            if let Some(n) = args.repeat {
                report.push_str(&time_runs(|| exe.run(feeds).map(drop), n, "the interpreter")?);
            }
            outputs
        }
        RunTarget::Compiled(target) => {
            // The in-process targets are not emitted, whose checks would refuse it.
            crate::backend::check_gemm(target, args.gemm)?;
            if args.emulate && !target.capabilities().emulates {
                return Err(Error::usage(format!("--emulate is for GPU targets; the {} target runs natively", target.name())));
            }
            let build = BuildConfig { emulate: args.emulate, cache: cache_of(args.no_cache), ..Default::default() };
            let opts = EmitOptions { source: file_name(&args.model.model), print_after: args.model.print_after.clone(), precision: args.precision, gemm: args.gemm, accumulate: args.accumulate, quantize: args.quantize, ..Default::default() };
            let outputs = if let Some(tier) = target.capabilities().in_process {
                let jit = crate::model::JitOptions { tier, quantize: args.quantize, threads: args.threads.map(|t| t as usize), print_after: args.model.print_after.clone(), ..Default::default() };
                let exe = model.jit(&jit)?;
                let outputs = exe.run(feeds)?;
                if let Some(n) = args.repeat {
                    // The model's own time, as a C demo's --repeat times it: the arrays
                    // are made once, outside the runs.
                    let raw: Vec<crate::tensor::RawTensor> = exe.inputs().iter().map(|n| crate::tensor::RawTensor::from_tensor(&feeds[n])).collect();
                    let arrays: Vec<crate::exec::Array> = raw.iter().map(|r| crate::exec::Array { dtype: r.dtype, shape: &r.shape, data: r.bytes() }).collect();
                    let shapes: Vec<_> = arrays.iter().map(|a| (a.dtype, a.shape)).collect();
                    let mut made = exe.output_shapes(exe.main_pass(), &shapes)?.iter().map(|(d, s)| crate::codegen::jit::program::Aligned::zeroed(s.iter().product::<u64>() * d.size() as u64)).collect::<Result<Vec<_>>>()?;
                    let time = || {
                        let mut outs: Vec<&mut [u8]> = made.iter_mut().map(|a| a.bytes_mut()).collect();
                        exe.run_arrays(exe.main_pass(), &arrays, &mut outs)
                    };
                    report.push_str(&time_runs(time, n, &format!("{} thread(s)", exe.threads()))?);
                }
                outputs
            } else {
                crate::exec::Built::new(target, graphs, feeds, build, opts)?.run(feeds)?
            };
            if args.check {
                let want = interp()?;
                for ((name, diff), (_, reference)) in compare(&outputs, &want).into_iter().zip(&want) {
                    let scale = reference.data.iter().filter(|x| x.is_finite()).fold(0.0f64, |m, x| m.max(x.abs()));
                    let relative = if scale > 0.0 { format!(", {:.3e} of it", diff.largest / scale) } else { String::new() };
                    let non_finite = match diff.non_finite {
                        0 => String::new(),
                        n => format!("; {n} position(s) NaN or infinite in one and not the same in the other"),
                    };
                    let _ = writeln!(
                        report,
                        "check {name}: largest difference from the interpreter {:.3e} (largest |interpreter| {scale:.3e}{relative}){non_finite}",
                        diff.largest
                    );
                }
            }
            outputs
        }
    };
    match &args.output {
        Some(path) => {
            data::write_arrays(path, &outputs)?;
            let _ = writeln!(report, "wrote {} output(s) to {}", outputs.len(), path.display());
            let npz = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("npz"));
            for (name, _) in outputs.iter().filter(|_| npz) {
                let key = data::npz_key(name);
                if key != *name {
                    let _ = writeln!(report, "note: output `{name}` is the array `{key}` (a name safe to unzip)");
                }
            }
        }
        None => {
            for (name, t) in &outputs {
                let _ = writeln!(report, "{}", describe_tensor(name, t));
            }
        }
    }
    Ok((outputs, report))
}

/// The tensors for every input and parameter of the graph, looked up by name
/// (`NAME`, `input/NAME` or `param/NAME`, given once: [`arrays_by_name`]); output cotangents
/// (`output_grad/NAME`, see `--grad`) that no file holds are ones.
pub fn feeds(graph: &Graph, files: &[&ArrayFile]) -> Result<BTreeMap<String, Tensor>> {
    let arrays = arrays_by_name(files)?;
    let mut feeds = BTreeMap::new();
    let mut missing = Vec::new();
    for v in graph.inputs().chain(graph.params()) {
        let node = graph.node(v);
        let name = node.name.clone().unwrap_or_default();
        // An output's cotangent defaults to ones (the gradient of the output's sum).
        let ones = || {
            let shape = node.ty.shape.as_known()?;
            name.starts_with("output_grad/").then(|| Tensor::new(node.ty.dtype, shape.clone(), vec![1.0; shape.iter().product::<u64>() as usize]))
        };
        let found = match arrays.get(&name) {
            Some(f) => {
                check_model_type(f, &name, &node.ty)?;
                Some(Tensor::new(node.ty.dtype, f.tensor.shape.clone(), f.tensor.data.clone()))
            }
            None => None,
        };
        match found.or_else(ones) {
            Some(t) => {
                feeds.insert(name, t);
            }
            None => missing.push(format!(
                "`{name}` {} ({})",
                node.ty,
                if node.op == Op::Param { "parameter" } else { "input" }
            )),
        }
    }
    if !missing.is_empty() {
        let looked: Vec<String> = files.iter().map(|f| f.path.display().to_string()).collect();
        let mut err = Error::user(format!(
            "{} of the model's inputs and parameters {} not in the data: {}",
            missing.len(),
            if missing.len() == 1 { "is" } else { "are" },
            missing.join(", ")
        ))
        .note(format!("looked for NAME, input/NAME and param/NAME in {}", looked.join(" and ")));
        // A bare .npy names its one array after the file, which is rarely an input name.
        let bare_npy = files.iter().any(|f| {
            f.path.extension().is_some_and(|e| e == "npy")
                && f.path.file_stem().is_some_and(|stem| f.arrays.contains_key(stem.to_string_lossy().as_ref()))
        });
        if bare_npy {
            err = err.note("a .npy file's array is named after the file; give it as --data NAME=FILE.npy");
        }
        return Err(err);
    }
    Ok(feeds)
}

/// Whether the array `found` can be the model's argument `name` of type `ty`: of that
/// type, or a parameter read in another float type (an f16 or bf16 checkpoint of an f32
/// model), which is converted to the model's, rounding to nearest where it is narrower.
/// Any other difference of type is the user's error.
fn check_model_type<A: Array>(found: &Found<A>, name: &str, ty: &TensorType) -> Result<()> {
    let dtype = found.tensor.dtype();
    if dtype == ty.dtype || dtype.is_float() && ty.dtype.is_float() {
        return Ok(());
    }
    Err(Error::user(format!("`{name}` is {dtype} in {}, but the model needs {}", found.path.display(), ty.dtype))
        .note("a parameter file may differ from the model in its float type only (f16, bf16, f32, f64)"))
}

/// The note that parameters were converted from their files' float types, if any were:
/// `note: converted 12 parameters from f16 to f32 on load`.
fn conversion_note<A: Array>(graph: &Graph, files: &[&ArrayFile<A>]) -> Result<String> {
    let arrays = arrays_by_name(files)?;
    let mut counts: BTreeMap<(ir::Dtype, ir::Dtype), usize> = BTreeMap::new();
    for v in graph.params() {
        let node = graph.node(v);
        let found = node.name.as_ref().and_then(|name| arrays.get(name));
        if let Some(found) = found.filter(|f| f.tensor.dtype() != node.ty.dtype) {
            *counts.entry((found.tensor.dtype(), node.ty.dtype)).or_default() += 1;
        }
    }
    let parts: Vec<String> = counts
        .iter()
        .map(|((from, to), n)| format!("{n} parameter{} from {from} to {to}", if *n == 1 { "" } else { "s" }))
        .collect();
    Ok(if parts.is_empty() { String::new() } else { format!("note: converted {} on load\n", parts.join(", ")) })
}

/// `output: f32[2, 10]  min .. max .. mean ..  [first values]`.
pub fn describe_tensor(name: &str, t: &Tensor) -> String {
    let ty = TensorType::new(t.dtype, Shape::known(&t.shape));
    if t.data.is_empty() {
        return format!("{name}: {ty} (empty)");
    }
    let min = t.data.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = t.data.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let mean = t.data.iter().sum::<f64>() / t.data.len() as f64;
    let head: Vec<String> = t.data.iter().take(6).map(|x| format!("{x:.6}")).collect();
    let more = if t.data.len() > 6 { ", ..." } else { "" };
    format!("{name}: {ty}  min {min:.6}  max {max:.6}  mean {mean:.6}  [{}{more}]", head.join(", "))
}

impl RunArgs {
    /// Whether the run happens in this process (`--target jit`).
    fn target_in_process(&self) -> bool {
        matches!(self.target, RunTarget::Compiled(t) if t.capabilities().in_process.is_some())
    }
}

/// `--repeat`: `n` more runs, and a line with the median time of one (on `how`).
fn time_runs(mut run: impl FnMut() -> Result<()>, n: u32, how: &str) -> Result<String> {
    let mut times = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let start = std::time::Instant::now();
        run()?;
        times.push(start.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok(format!("median {:.1} us per run over {n} runs ({how}), min {:.1} us\n", times[times.len() / 2], times[0]))
}

/// Where `run` evaluates the model: the reference interpreter or a compiled target.
#[derive(Clone, Copy)]
pub enum RunTarget {
    Interp,
    Compiled(&'static dyn Backend),
}

impl std::fmt::Debug for RunTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunTarget::Interp => write!(f, "interp"),
            RunTarget::Compiled(b) => write!(f, "{}", b.name()),
        }
    }
}

/// `mithrilc compile`.
pub struct CompileArgs {
    pub model: ModelArgs,
    pub target: &'static dyn Backend,
    pub params: Option<PathBuf>,
    pub out: Option<PathBuf>,
    pub emit: Emit,
    /// Print the report of sizes, in `report_format`.
    pub report: bool,
    pub report_format: ReportFormat,
    /// How the library gets its weights.
    pub weights: WeightsMode,
    /// How the weights blob stores the parameters.
    pub layout: WeightLayout,
    /// C compiler flags for the build (default: [`HOST_CFLAGS`]).
    pub cflags: Option<String>,
    /// `--cpu`: the one CPU the C target's library is built for (a `-march` value);
    /// `None`: portable.
    pub cpu: Option<String>,
    /// `--triple`: cross-build the C target for this target triple (with `$CC`, else
    /// `TRIPLE-gcc`); `None`: the host.
    pub triple: Option<String>,
    /// `NAME=N`: the largest run-time value of symbolic dimension NAME.
    pub max: Vec<String>,
    /// Replace a previous output of mithrilc even where its files were changed since.
    pub force: bool,
    /// How matrix products and convolutions may round.
    pub precision: Precision,
    /// `--gemm`: what runs the matrix products.
    pub gemm: Gemm,
    /// `--accumulate`: the type float sums accumulate in (`None`: the target's default).
    pub accumulate: Option<Accumulate>,
    /// `--mesh AXIS=N,...`: partition over a device mesh (the XLA target).
    pub mesh: Option<String>,
    /// `--gpu NAME`: the GPU of the CUDA target's launch report (`None`: an H100).
    pub gpu: Option<String>,
    /// How the weights of matrix products and convolutions are stored.
    pub quantize: Quantize,
    /// `--no-cache`: build without the build cache.
    pub no_cache: bool,
}

/// The build cache, unless `--no-cache` turns it off.
fn cache_of(no_cache: bool) -> Cache {
    if no_cache {
        Cache::Off("--no-cache".to_string())
    } else {
        Cache::from_env()
    }
}

impl Default for CompileArgs {
    /// `compile --target c` of no model yet, built, with every other flag at its default.
    fn default() -> CompileArgs {
        CompileArgs {
            model: ModelArgs::default(),
            target: &crate::codegen::c::backend::CTarget,
            params: None,
            out: None,
            emit: Emit::Build,
            report: false,
            report_format: ReportFormat::Human,
            weights: Default::default(),
            layout: Default::default(),
            cflags: None,
            cpu: None,
            triple: None,
            max: Vec::new(),
            force: false,
            precision: Precision::F32,
            gemm: Gemm::Builtin,
            accumulate: None,
            mesh: None,
            gpu: None,
            quantize: Default::default(),
            no_cache: false,
        }
    }
}

/// What `compile` writes (`--emit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Emit {
    /// Write the files and build them
    #[default]
    Build,
    /// Write the files only
    Source,
    /// Print the IR after the passes; write nothing
    Ir,
    /// --target jit-llvm: write the optimized LLVM module as text (<name>.ll) only
    LlvmIr,
    /// --target jit-llvm: write the LLVM module as an object file for this machine (<name>.o) only
    Obj,
}

/// How `compile --report` prints the sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ReportFormat {
    /// Lines of text for people
    #[default]
    Human,
    /// One JSON object on stdout, for CI to track budgets
    Json,
}

/// Parses `--max NAME=N` arguments.
pub fn parse_max_args(args: &[String]) -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for arg in args {
        let parsed = arg.split_once('=').and_then(|(n, v)| Some((n.trim(), v.trim().parse::<u64>().ok()?)));
        match parsed {
            Some((name, n)) if !name.is_empty() && n >= 1 => {
                if out.insert(name.to_string(), n).is_some() {
                    return Err(Error::usage(format!("--max {arg}: {name} is given twice")));
                }
            }
            _ => return Err(Error::usage(format!("--max {arg}: expected NAME=N with N >= 1 (e.g. --max B=64)"))),
        }
    }
    Ok(out)
}

/// Compiles a model for a target; returns the report to print.
pub fn compile(args: &CompileArgs) -> Result<String> {
    let params = args.params.as_deref().map(data::read_raw_arrays).transpose()?;
    let given: Vec<&ArrayFile<RawTensor>> = params.iter().collect();
    let (graphs, carried) = load_known(&args.model, known_types(&given)?, &given)?;
    let params: Vec<&ArrayFile<RawTensor>> = carried.iter().chain(params.iter()).collect();
    if args.emit == Emit::Ir {
        return Ok(ir::print::print(graphs.main()));
    }
    let out = args.out.as_ref().ok_or_else(|| Error::usage("compile needs -o OUTDIR".to_string()))?;
    let weights = match params.is_empty() {
        false => Some(param_values(&graphs.forward, &params)?),
        true => None,
    };
    let triple = args.triple.as_deref().map(crate::build::Triple::parse).transpose()?;
    let opts = EmitOptions {
        source: file_name(&args.model.model),
        weights,
        weights_mode: args.weights,
        layout: args.layout,
        max: parse_max_args(&args.max)?,
        print_after: args.model.print_after.clone(),
        precision: args.precision,
        gemm: args.gemm,
        accumulate: args.accumulate,
        mesh: args.mesh.as_deref().map(crate::codegen::xla::mesh::parse).transpose()?.unwrap_or_default(),
        quantize: args.quantize,
        cpu: args.cpu.clone(),
        triple: triple.clone(),
        gpu: args.gpu.as_deref().map(gpu_arg).transpose()?,
    };
    if opts.gpu.is_some() && !args.target.capabilities().reports_launches {
        return Err(Error::usage(format!("--gpu names the GPU of --target cuda's launch report; the {} target has none", args.target.name())));
    }
    let mut emitted = pipeline::emit(args.target, &graphs, &opts)?;
    if let Some(ext) = match args.emit {
        Emit::LlvmIr => Some(".ll"),
        Emit::Obj => Some(".o"),
        _ => None,
    } {
        // The one file of the LLVM module that was asked for.
        emitted.files.retain(|(name, _)| name.ends_with(ext));
        if emitted.files.is_empty() {
            return Err(Error::usage(format!("--emit {}: the {} target writes no LLVM module (give --target jit-llvm)", if ext == ".ll" { "llvm-ir" } else { "obj" }, args.target.name())));
        }
    }
    let build = args.emit == Emit::Build;
    let mut inputs = vec![args.model.model.clone()];
    inputs.extend(args.params.clone());
    let guard = crate::outdir::Guard { inputs, force: args.force };
    let cflags = args.cflags.clone().unwrap_or_else(|| HOST_CFLAGS.to_string());
    let cache = cache_of(args.no_cache);
    let config = match &triple {
        Some(t) => BuildConfig { cc: t.c_compiler(), cflags, cache, ..Default::default() },
        None => BuildConfig { cflags, cache, ..Default::default() },
    };
    let mut built_report = String::new();
    let mut cache_use = None;
    crate::outdir::write_atomically(out, &emitted.files, &guard, |dir| {
        if build {
            cache_use = args.target.toolchain().build(dir, &config)?;
            if args.report && args.report_format == ReportFormat::Human {
                built_report = args.target.toolchain().built_report(dir, &emitted.entry)?;
            }
        }
        Ok(())
    })?;
    if args.report && args.report_format == ReportFormat::Json {
        let json = serde_json::json!({
            "output": out.display().to_string(),
            "target": args.target.name(),
            "files": emitted.files.len(),
            "built": build,
            "sizes": emitted.sizes,
            "cache": cache_use.as_ref().map(CacheUse::word),
        });
        return Ok(format!("{json}\n"));
    }
    let mut report = format!("wrote {} ({} files{})\n", out.display(), emitted.files.len(), if build { ", built" } else { "" });
    report.push_str(&conversion_note(&graphs.forward, &params)?);
    if args.report {
        report.push_str(&emitted.report);
        report.push_str(&built_report);
        if let Some(used) = &cache_use {
            report.push_str(&format!("{}\n", used.line()));
        }
    }
    Ok(report)
}

/// `--gpu NAME`: one of the GPUs the CUDA target's plans know.
fn gpu_arg(name: &str) -> Result<&'static crate::codegen::cuda::plan::Gpu> {
    use crate::codegen::cuda::plan::{gpu, GPUS};
    gpu(name).ok_or_else(|| Error::usage(format!("--gpu {name}: unknown GPU; known: {}", GPUS.iter().map(|g| g.name).collect::<Vec<_>>().join(", "))))
}

/// `mithrilc export-weights`: a compiled model's `weights.bin` (after a training step
/// updated it, or read back from a device) as a parameters file.
pub struct ExportArgs {
    /// The model, as it was compiled (the same shapes and `--grad`).
    pub model: ModelArgs,
    /// The parameters file it was compiled with, if any: only its shapes are used.
    pub params: Option<PathBuf>,
    /// The target it was compiled for, with its `--weight-layout` and `--max`: they
    /// decide where each parameter is in the blob.
    pub target: &'static dyn Backend,
    pub layout: WeightLayout,
    pub max: Vec<String>,
    /// The `--quantize` it was compiled with.
    pub quantize: Quantize,
    /// The blob.
    pub weights: PathBuf,
    /// The header compile wrote with the blob (default: `<name>.h` beside it, if there).
    pub header: Option<PathBuf>,
    /// A `.safetensors`, `.npz` or (one parameter) `.npy` file.
    pub output: PathBuf,
}

/// Reads the parameters back from a weights blob through the program the target lowers
/// the model to, as `compile` with the same flags does
/// ([`crate::codegen::weights::blob_values`]), and writes them under their names.
pub fn export_weights(args: &ExportArgs) -> Result<String> {
    let params = args.params.as_deref().map(data::read_arrays).transpose()?;
    let given: Vec<&ArrayFile> = params.iter().collect();
    let (graphs, _) = load_known(&args.model, known_types(&given)?, &given)?;
    let source = file_name(&args.model.model);
    let opts = EmitOptions { source: source.clone(), layout: args.layout, max: parse_max_args(&args.max)?, quantize: args.quantize, print_after: args.model.print_after.clone(), ..Default::default() };
    let program = pipeline::weights_program(args.target, &graphs, &opts)?.ok_or_else(|| {
        Error::usage(format!("the {} target writes no weights.bin (export-weights reads the c, cuda and metal targets' blobs)", args.target.name()))
    })?;
    let names: Vec<String> = program.weights.iter().map(|w| w.name.clone()).collect();
    data::check_output(&args.output, &names)?;
    let inputs = [Some(args.model.model.as_path()), args.params.as_deref(), Some(args.weights.as_path()), args.header.as_deref()];
    crate::outdir::check_not_input(&args.output, &inputs.into_iter().flatten().collect::<Vec<_>>(), "-o")?;
    let blob = read_at_most(&args.weights, program.weights_size)?
        .ok_or_else(|| {
            // A file says how long it is; a device or a pipe only that it goes on.
            let held = match std::fs::metadata(&args.weights) {
                Ok(m) if m.is_file() => m.len().to_string(),
                _ => format!("more than {}", program.weights_size),
            };
            Error::user(format!("{}: the blob holds {held} bytes, and the model's weights take {}", args.weights.display(), program.weights_size))
                .note(crate::codegen::weights::FLAGS_NOTE)
        })?;
    let values = crate::codegen::weights::blob_values(&program, &blob).map_err(|e| e.context(args.weights.display()))?;
    let checked = check_weights_layout(&program, args)?;
    data::write_arrays(&args.output, &values)?;
    let mut report = format!("wrote {} parameter(s) from {} to {}\n", values.len(), args.weights.display(), args.output.display());
    let narrowed: Vec<String> = program.weights.iter().filter(|w| w.stored != crate::lower::Stored::F32).map(|w| format!("{} ({})", w.name, w.stored.name())).collect();
    if !narrowed.is_empty() {
        let _ = writeln!(
            report,
            "note: {} parameter(s) were stored narrow and are written as the f32 values they store, the approximations the library computes with: {}",
            narrowed.len(),
            narrowed.join(", ")
        );
    }
    if let Some(unchecked) = checked {
        report.push_str(&unchecked);
    }
    Ok(report)
}

/// Checks the blob's layout against the header compile wrote with it: two builds may
/// lay out blobs of the same size differently (a matrix in panels or row-major), and
/// only the header's `<NAME>_WEIGHTS_LAYOUT` tells them apart. Returns a note when no
/// header was given or found beside the blob.
fn check_weights_layout(program: &crate::lower::Program, args: &ExportArgs) -> Result<Option<String>> {
    let name = crate::codegen::names::identifier(&program.name);
    let beside = args.weights.with_file_name(format!("{name}.h"));
    let header = match &args.header {
        Some(h) => h.clone(),
        None if beside.is_file() => beside,
        None => return Ok(Some(format!("note: the layout was not checked: no {name}.h beside the blob (give --header {name}.h)\n"))),
    };
    // A header is a few kilobytes; a file past this is not one (and is not read whole).
    const HEADER_MAX: u64 = 64 << 20;
    let text = read_at_most(&header, HEADER_MAX)?
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .ok_or_else(|| Error::user(format!("{}: longer than {HEADER_MAX} bytes: not a header mithrilc wrote", header.display())))?;
    let key = format!("#define {}_WEIGHTS_LAYOUT UINT64_C(0x", name.to_uppercase());
    let found = text.lines().find_map(|l| l.strip_prefix(&key)?.strip_suffix(')')).and_then(|hex| u64::from_str_radix(hex, 16).ok());
    let Some(found) = found else {
        return Err(Error::user(format!("{}: no {}_WEIGHTS_LAYOUT: not the header of {name}'s library, or written by an older mithrilc", header.display(), name.to_uppercase())));
    };
    let want = crate::codegen::weights::layout_fingerprint(program);
    if found != want {
        return Err(Error::user(format!(
            "{}: the blob was laid out by another build of {name} than these flags give ({} says layout {found:016x}, these flags {want:016x})",
            args.weights.display(),
            header.display()
        ))
        .note("give the flags the model was compiled with (--shape, --grad, --target, --weight-layout, --max, --quantize)"));
    }
    Ok(None)
}

/// The bytes of the file at `path` when it holds at most `limit` (`None` when it holds
/// more): it is read up to one byte past `limit`, never to its end, so a device such as
/// `/dev/zero` or a pipe ends the read too.
fn read_at_most(path: &Path, limit: u64) -> Result<Option<Vec<u8>>> {
    use std::io::Read;
    let cannot = |e: std::io::Error| Error::user(format!("cannot read {}: {}", path.display(), crate::error::io_message(&e)));
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(cannot)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}

/// Parameter values by name, from the parameters files (the model's own first), each in its file's type (the
/// weights' writer converts it to the model's).
fn param_values(graph: &Graph, files: &[&ArrayFile<RawTensor>]) -> Result<BTreeMap<String, RawTensor>> {
    let arrays = arrays_by_name(files)?;
    let mut out = BTreeMap::new();
    for v in graph.params() {
        let node = graph.node(v);
        let name = node.name.clone().unwrap_or_default();
        if let Some(found) = arrays.get(&name) {
            check_model_type(found, &name, &node.ty)?;
            out.insert(name, found.tensor.clone());
        }
    }
    Ok(out)
}

/// How one output of two runs differs: the largest |a - b| where both are finite, and
/// how many positions hold a NaN or an infinity in one run and not the same in the
/// other (both NaN, or the same infinity, agree). Outputs of different shapes differ
/// by infinity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Difference {
    pub largest: f64,
    pub non_finite: u64,
}

/// The [`Difference`] of each output between two runs.
pub fn compare(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> Vec<(String, Difference)> {
    a.iter()
        .zip(b)
        .map(|((n, x), (_, y))| {
            let mut d = Difference { largest: 0.0, non_finite: 0 };
            if x.shape != y.shape {
                d.largest = f64::INFINITY;
            }
            for (p, q) in x.data.iter().zip(&y.data).filter(|_| x.shape == y.shape) {
                if p.is_finite() && q.is_finite() {
                    d.largest = d.largest.max((p - q).abs());
                } else if !(p == q || (p.is_nan() && q.is_nan())) {
                    d.non_finite += 1;
                }
            }
            (n.clone(), d)
        })
        .collect()
}

/// `mithrilc cache`: where the build cache is and what it holds; with `clean`, empties
/// it first.
pub fn cache(clean: bool) -> String {
    let mib = |bytes: u64| format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64);
    let root = match Cache::from_env() {
        Cache::At(root) => root,
        Cache::Off(why) => return format!("build cache: off ({why})\n"),
    };
    let mut text = format!("build cache: {}\n", root.display());
    let usage = if clean {
        let before = crate::cache::clean(&root);
        // What is left is what could not be removed (a read-only directory).
        let after = crate::cache::usage(&root);
        text.push_str(&format!("removed {} entries ({})\n", before.entries.saturating_sub(after.entries), mib(before.bytes.saturating_sub(after.bytes))));
        after
    } else {
        crate::cache::usage(&root)
    };
    text.push_str(&format!("entries: {} ({}; at most {}, the entries used longest ago removed first)\n", usage.entries, mib(usage.bytes), mib(crate::cache::LIMIT)));
    text
}
