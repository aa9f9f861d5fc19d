//! Things that run a model, in one shape: load once (the graphs and the parameters),
//! then run on named inputs as often as wanted and get named outputs. `mithrilc run`,
//! the tests and embedders use [`Executable`] whatever runs underneath: the reference
//! interpreter ([`Interpreter`]), machine code compiled in this process ([`Jit`]), or an
//! artifact a target built ([`Built`]).

use std::collections::BTreeMap;

use crate::backend::{Backend, BuildConfig, EmitOptions, Entry};
use crate::error::{Error, Result};
use crate::ir::{Dtype, Graph};
use crate::passes::Graphs;
use crate::pipeline;
use crate::codegen::jit::program::Aligned;
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
        check_params(forward, params)?;
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

/// A model compiled in this process (`--target jit`): the C target's program as
/// cranelift machine code ([`crate::codegen::jit`]), its weights in memory, run on the
/// caller's arrays without files or a C compiler.
pub struct Jit {
    compiled: crate::codegen::jit::Compiled,
    weights: Aligned,
    inputs: Vec<String>,
    outputs: Vec<String>,
    /// The arena of the last run, kept for the next (a run that finds it taken, on
    /// another thread, makes its own).
    arena: std::sync::Mutex<Option<Aligned>>,
    /// The larger pass's arena: what a run needs.
    arena_size: u64,
    pool: Option<crate::codegen::jit::threads::Pool>,
    /// With `--grad` and a loss: where the training step keeps things, its arena and
    /// each trained parameter's velocity.
    train: Option<Training>,
    /// What `compile --report` prints of its programs: kernels, weights and arena.
    report: String,
}

/// Which of a compiled model's programs a run runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The model's outputs from its inputs.
    Forward,
    /// With gradients (`--grad`): the outputs and the gradients (`grad/NAME`), from the
    /// inputs and, unless the model has a loss, the outputs' cotangents
    /// (`output_grad/NAME`).
    Backward,
}

/// A training step's layout and memory.
struct Training {
    layout: crate::codegen::train::TrainLayout,
    arena: Aligned,
    state: Aligned,
}

impl Jit {
    /// Compiles `graphs` with the parameters `params` as its weights (every parameter
    /// of the forward graph must be there); `opts` are the lowering's options beyond
    /// the weights (`--max`, `--quantize`, `--weight-layout`). It runs on as many threads
    /// as the machine has.
    pub fn new(graphs: &Graphs, params: &BTreeMap<String, Tensor>, opts: EmitOptions) -> Result<Jit> {
        Jit::with_tier(crate::backend::JitTier::Cranelift, graphs, params, opts)
    }

    /// [`Jit::new`] with the code generator `tier` (LLVM needs the `llvm` feature).
    pub fn with_tier(tier: crate::backend::JitTier, graphs: &Graphs, params: &BTreeMap<String, Tensor>, opts: EmitOptions) -> Result<Jit> {
        let target = match tier {
            crate::backend::JitTier::Cranelift => &crate::codegen::jit::backend::JIT,
            crate::backend::JitTier::Llvm => &crate::codegen::jit::backend::JIT_LLVM,
        };
        check_params(&graphs.forward, params)?;
        let opts = EmitOptions { weights: Some(param_weights(&graphs.forward, params)), ..opts };
        let graphs = pipeline::for_target(target, graphs, &opts.print_after)?;
        pipeline::check(target, &graphs, &opts)?;
        let (forward, backward) = crate::codegen::jit::backend::programs(&graphs, &opts).map_err(|e| e.context(&opts.source))?;
        // Memory first: a model too large for this machine is refused before anything
        // is compiled.
        let main = backward.as_ref().unwrap_or(&forward);
        // One arena serves either pass.
        let arena_size = backward.as_ref().map_or(0, |b| b.arena_size).max(forward.arena_size);
        check_memory(arena_size, forward.weights_size)?;
        let arena = Aligned::zeroed(arena_size)?;
        let mut weights = Aligned::zeroed(forward.weights_size)?;
        let blob = crate::codegen::weights::weights_blob(&forward, opts.weights.as_ref().expect("set above"))?;
        if blob.len() as u64 != forward.weights_size {
            return Err(Error::internal(format!("the weights blob has {} bytes, the program {}", blob.len(), forward.weights_size)));
        }
        weights.bytes_mut().copy_from_slice(&blob);
        drop(blob);
        let train = match crate::codegen::train::TrainLayout::of(&forward, backward.as_ref())? {
            Some(layout) => Some(Training { arena: Aligned::zeroed(layout.arena_size)?, state: Aligned::zeroed(layout.state_size)?, layout }),
            None => None,
        };
        let ports = |ports: &[crate::lower::Port]| ports.iter().map(|p| p.name.clone()).collect();
        let (inputs, outputs) = (ports(&main.inputs), ports(&main.outputs));
        let report = crate::codegen::program_target::program_emitted(Vec::new(), &forward, backward.as_ref()).report;
        let (compiled, _) = crate::codegen::jit::compile(forward, backward, false, tier, opts.cpu.as_deref())?;
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        let pool = (threads > 1).then(|| crate::codegen::jit::threads::Pool::new(threads));
        Ok(Jit { compiled, weights, inputs, outputs, arena: std::sync::Mutex::new(Some(arena)), arena_size, pool, train, report })
    }

    /// One step of training (a model compiled with gradients of a loss): the backward
    /// pass on `inputs` (by name, as [`Executable::run`] takes them), then SGD with
    /// `momentum` on every trained parameter, in place: `v = momentum * v + g`,
    /// `w -= lr * v`, each parameter's velocity `v` kept from step to step (zero at
    /// first). Returns the loss before the update. Later runs use the updated weights.
    pub fn train_step(&mut self, inputs: &BTreeMap<String, Tensor>, lr: f64, momentum: f64) -> Result<f64> {
        check_given(&self.inputs, inputs)?;
        let (Some(runner), Some(train)) = (self.compiled.backward.as_ref(), self.train.as_mut()) else {
            return Err(Error::usage("a training step needs a model compiled with the gradients of a loss (--grad of a model with a loss)".to_string()));
        };
        let p = &runner.p;
        let raw: Vec<RawTensor> = self.inputs.iter().map(|n| RawTensor::from_tensor(&inputs[n])).collect();
        let shapes: Vec<(Dtype, &[u64])> = raw.iter().map(|r| (r.dtype, &r.shape[..])).collect();
        let dims = bind_symbols(p, &shapes)?;
        let mut copies = Vec::new();
        for r in &raw {
            let mut a = Aligned::zeroed(r.bytes().len() as u64)?;
            a.bytes_mut().copy_from_slice(r.bytes());
            copies.push(a);
        }
        let ins: Vec<*const u8> = copies.iter().map(|a| a.ptr as *const u8).collect();
        let t = &train.layout;
        // The backward pass's outputs in the step's arena, after its own buffers.
        let outs: Vec<*mut u8> = t.outputs.iter().map(|&off| train.arena.ptr.wrapping_add(off as usize)).collect();
        let hook = self.pool.as_ref().map(|pool| pool.hook());
        let threads = hook.as_ref().map_or(std::ptr::null(), |h| h as *const _);
        // SAFETY: as in `run_arrays`; the outputs lie in the step's arena, laid out for
        // the symbols' maxima (`TrainLayout`).
        let status = unsafe { runner.run(self.weights.ptr, &ins, &outs, train.arena.ptr, &dims, threads) };
        if status == crate::codegen::c::ERROR_INDEX {
            return Err(Error::user("a gather or embedding index is out of range (outside [-n, n) for an axis of size n)"));
        } else if status != 0 {
            return Err(Error::internal(format!("the compiled model returned {status} for sizes it was checked to take")));
        }
        use crate::codegen::jit::runtime::{mr_sgd_f32, mr_sgd_f64};
        for u in &t.updates {
            let w = self.weights.ptr.wrapping_add(u.offset as usize);
            let v = if momentum != 0.0 { train.state.ptr.wrapping_add(u.state as usize) } else { std::ptr::null_mut() };
            let g = outs[u.grad];
            // SAFETY: the parameter, its gradient and its velocity: `len` elements each.
            unsafe {
                match u.dtype {
                    Dtype::F64 => mr_sgd_f64(w as *mut f64, g as *const f64, v as *mut f64, u.len as i64, lr, momentum),
                    _ => mr_sgd_f32(w as *mut f32, g as *const f32, v as *mut f32, u.len as i64, lr as f32, momentum as f32),
                }
            }
        }
        // SAFETY: the loss output is one element of the loss's type.
        Ok(unsafe {
            match t.scalar {
                Dtype::F64 => *(outs[t.loss] as *const f64),
                _ => f64::from(*(outs[t.loss] as *const f32)),
            }
        })
    }

    /// Runs split their work over `n` threads (1: the calling thread alone).
    pub fn set_threads(&mut self, n: usize) {
        self.pool = (n > 1).then(|| crate::codegen::jit::threads::Pool::new(n));
    }

    /// The threads a run splits its work over.
    pub fn threads(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.threads())
    }

    /// The pass [`Executable::run`] runs: the backward one when gradients were asked
    /// for.
    pub fn main_pass(&self) -> Pass {
        if self.compiled.backward.is_some() {
            Pass::Backward
        } else {
            Pass::Forward
        }
    }

    /// The program of `pass`: its inputs, outputs and parameters (`Program::weights`).
    pub fn program(&self, pass: Pass) -> Result<&crate::lower::Program> {
        Ok(&self.runner(pass)?.p)
    }

    fn runner(&self, pass: Pass) -> Result<&crate::codegen::jit::program::Runner> {
        match pass {
            Pass::Forward => Ok(&self.compiled.forward),
            Pass::Backward => self.compiled.backward.as_ref().ok_or_else(|| Error::usage("the model was compiled without gradients (--grad)")),
        }
    }

    /// What `compile --report` prints: each program's kernels, weights and arena.
    pub fn report(&self) -> &str {
        &self.report
    }

    /// The values the model computes with, by parameter name, in its parameters' order:
    /// the weights as compiled, or as training steps or [`Jit::load_state_dict`] left
    /// them. A weight stored narrow (`--quantize`) is read as the values it stores; one
    /// stored Winograd-transformed cannot be read back (an error says so).
    pub fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        crate::codegen::weights::blob_values(&self.compiled.forward.p, self.weights.bytes())
    }

    /// Replaces the weights: `values` by parameter name, each of the parameter's shape
    /// (in any element type, converted); parameters not named keep their values. It
    /// refuses a name that is no parameter, and changes nothing then.
    pub fn load_state_dict(&mut self, values: &BTreeMap<String, Tensor>) -> Result<()> {
        let p = &self.compiled.forward.p;
        if let Some(unknown) = values.keys().find(|n| !p.weights.iter().any(|w| &w.name == *n)) {
            let names: Vec<&str> = p.weights.iter().map(|w| w.name.as_str()).collect();
            return Err(Error::user(format!("`{unknown}` is not a parameter of the model (its parameters: {})", names.join(", "))));
        }
        let mut all: BTreeMap<String, RawTensor> = BTreeMap::new();
        if values.len() < p.weights.len() {
            all.extend(self.state_dict()?.into_iter().map(|(n, t)| (n, RawTensor::from_tensor(&t))));
        }
        all.extend(values.iter().map(|(n, t)| (n.clone(), RawTensor::from_tensor(t))));
        let blob = crate::codegen::weights::weights_blob(p, &all)?;
        self.weights.bytes_mut().copy_from_slice(&blob);
        Ok(())
    }
}

impl Jit {
    /// The shape and type of each output of `pass` (in its program's order) for inputs
    /// of these shapes and types (in its order), after checking them against the
    /// program's inputs.
    pub fn output_shapes(&self, pass: Pass, inputs: &[(Dtype, &[u64])]) -> Result<Vec<(Dtype, Vec<u64>)>> {
        let p = &self.runner(pass)?.p;
        let dims = bind_symbols(p, inputs)?;
        Ok(p.outputs.iter().map(|port| (p.buffers[port.buf.0].dtype, port_shape(port, &dims))).collect())
    }

    /// Runs `pass` on arrays the caller holds: `inputs` (in its program's order) as
    /// little-endian row-major elements of their types, and `outputs` (in its order) to
    /// fill, of the sizes [`Jit::output_shapes`] gives. Nothing is converted or copied
    /// but an input not aligned to its element type. Runs on several threads at once
    /// share the weights; each has an arena of its own (one is kept for the next run).
    pub fn run_arrays(&self, pass: Pass, inputs: &[Array], outputs: &mut [&mut [u8]]) -> Result<()> {
        let runner = self.runner(pass)?;
        let p = &runner.p;
        let shapes: Vec<(Dtype, &[u64])> = inputs.iter().map(|a| (a.dtype, a.shape)).collect();
        let dims = bind_symbols(p, &shapes)?;
        let mut copies = Vec::new();
        let mut ins = Vec::with_capacity(inputs.len());
        for (a, port) in inputs.iter().zip(&p.inputs) {
            let n: u64 = a.shape.iter().product();
            if a.data.len() as u64 != n * a.dtype.size() as u64 {
                return Err(Error::user(format!("input `{}` has {} bytes for {n} elements of {}", port.name, a.data.len(), a.dtype)));
            }
            if (a.data.as_ptr() as usize).is_multiple_of(a.dtype.size()) {
                ins.push(a.data.as_ptr());
            } else {
                let mut copy = Aligned::zeroed(a.data.len() as u64)?;
                copy.bytes_mut().copy_from_slice(a.data);
                ins.push(copy.ptr as *const u8);
                copies.push(copy);
            }
        }
        if outputs.len() != p.outputs.len() {
            return Err(Error::user(format!("{} output buffers for the model's {} outputs", outputs.len(), p.outputs.len())));
        }
        let mut outs = Vec::with_capacity(outputs.len());
        for (o, port) in outputs.iter_mut().zip(&p.outputs) {
            let dtype = p.buffers[port.buf.0].dtype;
            let want = port_shape(port, &dims).iter().product::<u64>() * dtype.size() as u64;
            if o.len() as u64 != want || !(o.as_ptr() as usize).is_multiple_of(dtype.size()) {
                return Err(Error::user(format!("output `{}` needs {want} bytes aligned to {}, given {}", port.name, dtype.size(), o.len())));
            }
            outs.push(o.as_mut_ptr());
        }
        let kept = self.arena.lock().unwrap_or_else(|e| e.into_inner()).take();
        let arena = match kept {
            Some(a) => a,
            None => Aligned::zeroed(self.arena_size)?,
        };
        let hook = self.pool.as_ref().map(|pool| pool.hook());
        let threads = hook.as_ref().map_or(std::ptr::null(), |h| h as *const _);
        // SAFETY: every buffer has the size the program needs at these dims (checked
        // above against the ports), and the weights blob and arena are the program's own.
        let status = unsafe { runner.run(self.weights.ptr, &ins, &outs, arena.ptr, &dims, threads) };
        *self.arena.lock().unwrap_or_else(|e| e.into_inner()) = Some(arena);
        match status {
            0 => Ok(()),
            crate::codegen::c::ERROR_INDEX => Err(Error::user("a gather or embedding index is out of range (outside [-n, n) for an axis of size n)")),
            other => Err(Error::internal(format!("the compiled model returned {other} for sizes it was checked to take"))),
        }
    }
}

/// An input array as its bytes: little-endian elements of `dtype`, row-major in `shape`.
#[derive(Debug, Clone, Copy)]
pub struct Array<'a> {
    pub dtype: Dtype,
    pub shape: &'a [u64],
    pub data: &'a [u8],
}

impl Executable for Jit {
    fn inputs(&self) -> &[String] {
        &self.inputs
    }

    fn outputs(&self) -> &[String] {
        &self.outputs
    }

    fn run(&self, inputs: &BTreeMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        check_given(&self.inputs, inputs)?;
        let raw: Vec<RawTensor> = self.inputs.iter().map(|n| RawTensor::from_tensor(&inputs[n])).collect();
        let arrays: Vec<Array> = raw.iter().map(|r| Array { dtype: r.dtype, shape: &r.shape, data: r.bytes() }).collect();
        let shapes: Vec<(Dtype, &[u64])> = arrays.iter().map(|a| (a.dtype, a.shape)).collect();
        let pass = self.main_pass();
        let wanted = self.output_shapes(pass, &shapes)?;
        let mut made = wanted.iter().map(|(d, s)| Aligned::zeroed(s.iter().product::<u64>() * d.size() as u64)).collect::<Result<Vec<_>>>()?;
        let mut outs: Vec<&mut [u8]> = made.iter_mut().map(Aligned::bytes_mut).collect();
        self.run_arrays(pass, &arrays, &mut outs)?;
        self.outputs
            .iter()
            .zip(wanted)
            .zip(&made)
            .map(|((name, (dtype, shape)), a)| {
                let raw = RawTensor::owned(dtype, shape, a.bytes().to_vec()).ok_or_else(|| Error::internal(format!("output {name}: the wrong number of bytes")))?;
                Ok((name.clone(), raw.to_tensor()))
            })
            .collect()
    }
}

/// A port's shape at the symbols' run-time values `dims`.
fn port_shape(port: &crate::lower::Port, dims: &[i64]) -> Vec<u64> {
    port.shape.iter().zip(&port.dims).map(|(&n, s)| s.map_or(n, |s| dims[s] as u64)).collect()
}

/// The run-time value of each symbol of `p`, read from the inputs' shapes (in the
/// program's input order), after checking every input against its port: its type,
/// its rank, its static sizes, and each symbol the same wherever it appears and within
/// 1 to its maximum.
fn bind_symbols(p: &crate::lower::Program, inputs: &[(Dtype, &[u64])]) -> Result<Vec<i64>> {
    if inputs.len() != p.inputs.len() {
        return Err(Error::user(format!("{} inputs for the model's {}", inputs.len(), p.inputs.len())));
    }
    let mut dims: Vec<Option<(i64, &str)>> = vec![None; p.symbols.len()];
    for (port, &(dtype, shape)) in p.inputs.iter().zip(inputs) {
        let want = p.buffers[port.buf.0].dtype;
        if dtype != want {
            return Err(Error::user(format!("input `{}` is {dtype}, the model takes {want}", port.name)));
        }
        let shape_text = |s: &[u64]| format!("[{}]", s.iter().map(u64::to_string).collect::<Vec<_>>().join(", "));
        // The port's shape with its symbols by name: [B, 784].
        let takes = format!("[{}]", port.shape.iter().zip(&port.dims).map(|(n, s)| s.map_or(n.to_string(), |s| p.symbols[s].0.clone())).collect::<Vec<_>>().join(", "));
        if shape.len() != port.shape.len() {
            return Err(Error::user(format!("input `{}` has shape {}, the model takes rank {} ({takes})", port.name, shape_text(shape), port.shape.len())));
        }
        for (d, (&n, sym)) in shape.iter().zip(&port.dims).enumerate() {
            match sym {
                None if n != port.shape[d] => {
                    return Err(Error::user(format!("input `{}` has shape {}, the model takes {takes}", port.name, shape_text(shape))));
                }
                None => {}
                Some(s) => {
                    let (name, max) = &p.symbols[*s];
                    if n < 1 || n > *max {
                        return Err(Error::user(format!("input `{}`: dimension {d} ({name}) is {n}, outside 1 to its maximum {max} (--max {name}=N)", port.name)));
                    }
                    match dims[*s] {
                        Some((m, other)) if m != n as i64 => {
                            return Err(Error::user(format!("`{name}` is {m} in input `{other}` and {n} in input `{}`", port.name)));
                        }
                        _ => dims[*s] = Some((n as i64, &port.name)),
                    }
                }
            }
        }
    }
    dims.iter()
        .zip(&p.symbols)
        .map(|(d, (name, _))| d.map(|(n, _)| n).ok_or_else(|| Error::internal(format!("no input gives the size `{name}`"))))
        .collect()
}

/// Refuses a model whose arena and weights together are more than this machine's
/// memory (on Linux, `MemTotal`): allocating them would succeed (memory is promised,
/// not given) and the process would be killed on touching them.
fn check_memory(arena: u64, weights: u64) -> Result<()> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemTotal:"))?.to_string();
        line.split_whitespace().nth(1)?.parse::<u64>().ok()?.checked_mul(1024)
    });
    let need = arena.saturating_add(weights);
    match total {
        Some(total) if need > total => Err(Error::user(format!(
            "the model needs {} bytes of memory (arena {}, weights {}), more than this machine has ({})",
            crate::backend::group(need),
            crate::backend::group(arena),
            crate::backend::group(weights),
            crate::backend::group(total)
        ))),
        _ => Ok(()),
    }
}

/// Refuses a compile that lacks a value for some parameter of `forward` (naming each).
fn check_params(forward: &Graph, params: &BTreeMap<String, Tensor>) -> Result<()> {
    let missing: Vec<String> = forward.params().filter_map(|v| forward.node(v).name.clone()).filter(|n| !params.contains_key(n)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::user(format!("no value for the parameter(s) {}", missing.join(", "))))
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

/// Builds `graphs` for `target` (in this process for the JIT) and runs it once on `feeds` (the inputs and the
/// parameters by name), the model named after the file `source` in messages.
pub fn run_once(target: &dyn Backend, graphs: &Graphs, feeds: &BTreeMap<String, Tensor>, source: &std::path::Path, build: &BuildConfig, opts: EmitOptions) -> Result<Vec<(String, Tensor)>> {
    let opts = EmitOptions { source: crate::outdir::file_name(source), ..opts };
    if let Some(tier) = target.capabilities().in_process {
        return Jit::with_tier(tier, graphs, feeds, opts)?.run(feeds);
    }
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
