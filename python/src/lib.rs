//! `mithrilc._mithrilc`: the Python package's native half. It holds what must be fast or
//! must not be copied (a model's call: NumPy arrays in and out through the buffer
//! protocol, the GIL released while it runs) and what only Rust knows (the compiler);
//! `python/mithrilc/__init__.py` gives it the API its users see.
//!
//! Every entry point runs under [`guarded`]: a mithrilc error becomes the exception of
//! its exit kind, and a panic becomes `InternalError`, never a crash of the interpreter.

use std::collections::BTreeMap;
use std::sync::RwLock;

use mithrilc::exec::{Array, Executable, Interpreter, Jit, Pass};
use mithrilc::ir::{Dim, Dtype, Graph};
use mithrilc::tensor::{RawTensor, Tensor};
use mithrilc::{ErrorKind, Result};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

create_exception!(mithrilc, Error, PyException, "Any error mithrilc reports; its subclass says whose fault it is (the command's exit code).");
create_exception!(mithrilc, ModelError, Error, "The model or its data is wrong: a malformed model, an input of the wrong shape or type, a missing input (the command's exit 1).");
create_exception!(mithrilc, UsageError, Error, "The call is wrong: an unknown target or option, a flag the target does not take (the command's exit 2).");
create_exception!(mithrilc, ToolchainError, Error, "An external toolchain is missing or failed: a C compiler, nvcc (the command's exit 3).");
create_exception!(mithrilc, InternalError, Error, "A bug in mithrilc, a Rust panic included (the command's exit 101): please report it.");

/// The exception of `e`'s kind, with the command's message.
fn exception(e: mithrilc::Error) -> PyErr {
    let text = e.to_string();
    match e.kind {
        ErrorKind::User => ModelError::new_err(text),
        ErrorKind::Usage => UsageError::new_err(text),
        ErrorKind::Toolchain => ToolchainError::new_err(text),
        ErrorKind::Internal => InternalError::new_err(text),
    }
}

/// Runs `f`, its error (a panic included) as the exception of its kind.
fn guarded<T>(f: impl FnOnce() -> Result<T>) -> PyResult<T> {
    mithrilc::error::catch_panic("mithrilc panicked", f).map_err(exception)
}

/// NumPy's name of `dtype`'s arrays.
fn numpy_name(dtype: Dtype) -> Option<&'static str> {
    Some(match dtype {
        Dtype::F32 => "float32",
        Dtype::F64 => "float64",
        Dtype::F16 => "float16",
        Dtype::I8 => "int8",
        Dtype::I16 => "int16",
        Dtype::I32 => "int32",
        Dtype::I64 => "int64",
        Dtype::U8 => "uint8",
        Dtype::U16 => "uint16",
        Dtype::U32 => "uint32",
        Dtype::U64 => "uint64",
        Dtype::Bool => "bool",
        _ => return None,
    })
}

/// The element type a buffer's struct-module format (`"f"`, `"<d"`, `"l"`) and item size
/// describe, if mithrilc has it; big-endian formats have none.
fn buffer_dtype(format: &str, size: usize) -> Option<Dtype> {
    let code = format.strip_prefix(['@', '=', '<']).unwrap_or(format);
    Some(match (code, size) {
        ("f", 4) => Dtype::F32,
        ("d", 8) => Dtype::F64,
        ("e", 2) => Dtype::F16,
        ("?", 1) => Dtype::Bool,
        ("b", 1) => Dtype::I8,
        ("B", 1) => Dtype::U8,
        ("h", 2) => Dtype::I16,
        ("H", 2) => Dtype::U16,
        ("i" | "l" | "q", 4) => Dtype::I32,
        ("i" | "l" | "q", 8) => Dtype::I64,
        ("I" | "L" | "Q", 4) => Dtype::U32,
        ("I" | "L" | "Q", 8) => Dtype::U64,
        _ => return None,
    })
}

/// An array handed in: its buffer (held until the run ends) and what it holds.
struct Given {
    buffer: PyUntypedBuffer,
    dtype: Dtype,
    shape: Vec<u64>,
}

impl Given {
    /// `obj` as an array of `want` for input `name`: its own memory where it is a
    /// C-contiguous buffer of that type (a NumPy array, a memoryview) or a DLPack tensor
    /// on the CPU, else a contiguous copy (`numpy.ascontiguousarray`); a list or a number
    /// becomes an array of `want`.
    /// An array of another type is refused: mithrilc converts nothing behind the
    /// caller's back.
    fn new(py: Python<'_>, name: &str, obj: &Bound<'_, PyAny>, want: Dtype) -> PyResult<Given> {
        let np = numpy(py)?;
        let (buffer, shape) = match export(py, obj) {
            Ok((b, shape)) if b.is_c_contiguous() => (b, shape),
            Ok(_) => export(py, &np.call_method1("ascontiguousarray", (obj,))?)?,
            // A DLPack tensor (a PyTorch or JAX tensor on the CPU) as a NumPy view of
            // its memory: NumPy reads DLPack without a copy.
            Err(_) if obj.hasattr("__dlpack__")? => export(py, &np.call_method1("ascontiguousarray", (np.call_method1("from_dlpack", (obj,))?,))?)?,
            Err(_) => {
                let dtype = numpy_name(want).ok_or_else(|| ModelError::new_err(format!("input `{name}` is {want}, which NumPy has no type for")))?;
                export(py, &np.call_method1("ascontiguousarray", (obj, dtype))?)?
            }
        };
        let format = buffer.format().to_string_lossy().into_owned();
        let dtype = buffer_dtype(&format, buffer.item_size());
        let dtype = match dtype {
            Some(d) if d == want => d,
            _ => {
                let given = obj.getattr("dtype").map(|d| d.to_string()).unwrap_or(format);
                let hint = numpy_name(want).map(|n| format!(" (convert it: x.astype(numpy.{n}))")).unwrap_or_default();
                return Err(ModelError::new_err(format!("input `{name}` is {given}, the model takes {want}{hint}")));
            }
        };
        Ok(Given { buffer, dtype, shape })
    }

    fn bytes(&self) -> Raw {
        Raw { ptr: self.buffer.buf_ptr() as usize, len: self.buffer.len_bytes() }
    }
}

/// `obj`'s buffer and shape. A 0-d NumPy array exports no shape (CPython's buffer
/// protocol cannot say "rank 0" with a shape pointer): its one element is exported as a
/// 1-element view of the same memory.
fn export(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<(PyUntypedBuffer, Vec<u64>)> {
    match PyUntypedBuffer::get(obj) {
        Ok(b) => {
            let shape = b.shape().iter().map(|&n| n as u64).collect();
            Ok((b, shape))
        }
        Err(e) => match obj.getattr("ndim").and_then(|n| n.extract::<usize>()) {
            Ok(0) => Ok((PyUntypedBuffer::get(&numpy(py)?.call_method1("ascontiguousarray", (obj,))?.call_method1("reshape", (1,))?)?, Vec::new())),
            _ => Err(e),
        },
    }
}

/// Memory a buffer holds, sent to the thread that runs without the GIL (the buffers
/// stay exported, so held, until the run returns).
#[derive(Clone, Copy)]
struct Raw {
    ptr: usize,
    len: usize,
}

impl Raw {
    /// # Safety
    /// The buffer is still exported and `len` bytes long.
    unsafe fn slice<'a>(self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        std::slice::from_raw_parts(self.ptr as *const u8, self.len)
    }
    /// # Safety
    /// As [`Raw::slice`], and nothing else writes it meanwhile.
    unsafe fn slice_mut<'a>(self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.len)
    }
}

/// The `numpy` module.
fn numpy(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    py.import("numpy")
}

/// A new NumPy array of `dtype` and `shape`, and its writable memory.
fn new_array<'py>(py: Python<'py>, dtype: Dtype, shape: &[u64]) -> PyResult<(Bound<'py, PyAny>, PyUntypedBuffer)> {
    let name = numpy_name(dtype).ok_or_else(|| ModelError::new_err(format!("an output is {dtype}, which NumPy has no type for")))?;
    let array = numpy(py)?.call_method1("empty", (shape.to_vec(), name))?;
    let (buffer, _) = export(py, &array)?;
    Ok((array, buffer))
}

/// A tensor of mithrilc's (a parameter's value) as a NumPy array.
fn tensor_array<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let raw = RawTensor::from_tensor(t);
    let (array, buffer) = new_array(py, raw.dtype, &raw.shape)?;
    // SAFETY: a new array of this type and shape: the raw tensor's byte count.
    unsafe { Raw { ptr: buffer.buf_ptr() as usize, len: buffer.len_bytes() }.slice_mut() }.copy_from_slice(raw.bytes());
    Ok(array)
}

/// A NumPy array (or anything with the buffer protocol) as a tensor: a parameter's value.
fn array_tensor(py: Python<'_>, name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let (buffer, shape) = match export(py, obj) {
        Ok((b, shape)) if b.is_c_contiguous() => (b, shape),
        _ => export(py, &numpy(py)?.call_method1("ascontiguousarray", (obj,))?)?,
    };
    let format = buffer.format().to_string_lossy().into_owned();
    let dtype = buffer_dtype(&format, buffer.item_size()).ok_or_else(|| ModelError::new_err(format!("parameter `{name}`: arrays of format `{format}` are not read (give float32, float64, float16, an integer or bool array)")))?;
    // SAFETY: the buffer is exported for this scope, C-contiguous and len_bytes long.
    let bytes = unsafe { Raw { ptr: buffer.buf_ptr() as usize, len: buffer.len_bytes() }.slice() }.to_vec();
    let raw = RawTensor::owned(dtype, shape, bytes).ok_or_else(|| InternalError::new_err(format!("parameter `{name}`: its bytes do not fill its shape")))?;
    Ok(raw.to_tensor())
}

/// A dict of arrays by name as tensors.
fn dict_tensors(py: Python<'_>, dict: &Bound<'_, PyDict>) -> PyResult<BTreeMap<String, Tensor>> {
    let mut out = BTreeMap::new();
    for (k, v) in dict.iter() {
        let name: String = k.extract()?;
        let t = array_tensor(py, &name, &v)?;
        out.insert(name, t);
    }
    Ok(out)
}

/// Tensors by name as a dict of NumPy arrays.
fn tensors_dict<'py>(py: Python<'py>, tensors: impl IntoIterator<Item = (String, Tensor)>) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, t) in tensors {
        dict.set_item(name, tensor_array(py, &t)?)?;
    }
    Ok(dict)
}

/// One input, output or parameter of a model: its name, NumPy type and shape (a symbol
/// of the shape as its name).
#[pyclass(module = "mithrilc", frozen, get_all)]
struct Port {
    name: String,
    dtype: String,
    shape: Py<PyTuple>,
}

#[pymethods]
impl Port {
    #[new]
    fn py_new(name: String, dtype: String, shape: Py<PyTuple>) -> Port {
        Port { name, dtype, shape }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let repr = |s: &str| pyo3::types::PyString::new(py, s).repr().map(|r| r.to_string());
        Ok(format!("Port(name={}, dtype={}, shape={})", repr(&self.name)?, repr(&self.dtype)?, self.shape.bind(py).repr()?))
    }
}

/// The ports of the nodes `ids` of `graph`.
fn ports(py: Python<'_>, graph: &Graph, ids: impl Iterator<Item = (String, mithrilc::ir::ValueId)>) -> PyResult<Vec<Py<Port>>> {
    ids.map(|(name, v)| {
        let ty = &graph.node(v).ty;
        let dims: Vec<Bound<'_, PyAny>> = ty
            .shape
            .0
            .iter()
            .map(|d| match d {
                Dim::Known(n) => n.into_pyobject(py).map(Bound::into_any).map_err(PyErr::from),
                other => other.to_string().into_pyobject(py).map(Bound::into_any).map_err(PyErr::from),
            })
            .collect::<PyResult<_>>()?;
        let dtype = numpy_name(ty.dtype).map_or_else(|| ty.dtype.to_string(), str::to_string);
        Py::new(py, Port { name, dtype, shape: PyTuple::new(py, dims)?.unbind() })
    })
    .collect()
}

/// What runs a model: machine code compiled in this process, or the interpreter.
/// (One per model: the variants' sizes do not matter.)
#[allow(clippy::large_enum_variant)]
enum Engine {
    Jit(Jit),
    /// The forward graph's interpreter and, with gradients, the backward one's.
    Interp(Interpreter, Option<Interpreter>),
}

/// The interpreters of `model`'s passes.
fn interpreters(model: &mithrilc::Model) -> Engine {
    let graphs = model.graphs();
    let forward = mithrilc::pipeline::Graphs { forward: graphs.forward.clone(), backward: None };
    let backward = graphs.backward.is_some().then(|| model.interpreter());
    Engine::Interp(Interpreter::new(forward, model.params().clone()), backward)
}

/// Names and types of one pass's inputs and outputs.
struct Signature {
    inputs: Vec<(String, Dtype)>,
    outputs: Vec<String>,
}

/// A model loaded and compiled: see `Model` in `mithrilc/_mithrilc.pyi`. Calls on
/// several threads run at once (each with an arena of its own); a training step or
/// `load_state_dict` waits for them and has the model alone (a read-write lock).
///
/// The locks are never held while the GIL is taken back: a guard held across
/// `Python::detach`'s return could wait on a writer that waits on it while another
/// thread, holding the GIL, waits to read (guards with the GIL held are only taken
/// briefly, and writers hold theirs without the GIL).
#[pyclass(module = "mithrilc._mithrilc", frozen)]
struct Model {
    engine: RwLock<Engine>,
    model: RwLock<mithrilc::Model>,
    forward: Signature,
    backward: Option<Signature>,
    #[pyo3(get)]
    inputs: Vec<Py<Port>>,
    #[pyo3(get)]
    outputs: Vec<Py<Port>>,
    #[pyo3(get)]
    params: Vec<Py<Port>>,
    #[pyo3(get)]
    target: String,
}

/// Reads `lock`, even one a panicking thread held (its data is whole: nothing panics
/// halfway through changing it).
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

/// The inputs and outputs of the graph `g`, as [`Signature`].
fn graph_signature(g: &Graph) -> Signature {
    let inputs = g.inputs().map(|v| (g.node(v).name.clone().unwrap_or_default(), g.node(v).ty.dtype)).collect();
    Signature { inputs, outputs: g.outputs.iter().map(|o| o.name.clone()).collect() }
}

fn program_signature(p: &mithrilc::lower::Program) -> Signature {
    let inputs = p.inputs.iter().map(|port| (port.name.clone(), p.buffers[port.buf.0].dtype)).collect();
    Signature { inputs, outputs: p.outputs.iter().map(|port| port.name.clone()).collect() }
}

/// What `load` is told, normalized by `mithrilc/__init__.py` (a dict).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct LoadArgs {
    /// The model file, or the name a model given as JSON text stands under.
    path: String,
    json: Option<String>,
    params_path: Option<String>,
    params: Option<Py<PyDict>>,
    shapes: BTreeMap<String, String>,
    /// `PATH.KEY=VALUE` (`--set`).
    set: Vec<String>,
    max: BTreeMap<String, u64>,
    /// None: no gradients; an empty list: every parameter's; else those named.
    grad: Option<Vec<String>>,
    target: String,
    threads: Option<usize>,
    quantize: String,
}

#[pyfunction]
fn load(py: Python<'_>, args: LoadArgs) -> PyResult<Model> {
    let values = args.params.as_ref().map(|d| dict_tensors(py, d.bind(py))).transpose()?.unwrap_or_default();
    let quantize = <mithrilc::backend::Quantize as clap::ValueEnum>::from_str(&args.quantize, true);
    py.detach(move || {
        guarded(|| {
            let quantize = quantize.map_err(|_| mithrilc::Error::usage(format!("quantize={:?}: not one of f32, f16, bf16, q8_0, int8", args.quantize)))?;
            let mut builder = match args.json {
                Some(text) => mithrilc::Model::from_json(text, &args.path),
                None => mithrilc::Model::open(&args.path),
            };
            for (name, dims) in &args.shapes {
                builder = builder.shape(name, dims)?;
            }
            for arg in &args.set {
                builder = builder.set(arg)?;
            }
            if let Some(p) = &args.params_path {
                builder = builder.params(p);
            }
            builder = builder.values(values);
            builder = match args.grad {
                None => builder,
                Some(names) if names.is_empty() => builder.grad(),
                Some(names) => builder.grad_of(mithrilc::passes::autodiff::Wrt::Params(names)),
            };
            let model = builder.load()?;
            let engine = match args.target.as_str() {
                "interp" => interpreters(&model),
                "jit" | "jit-llvm" => {
                    let tier = if args.target == "jit" { mithrilc::backend::JitTier::Cranelift } else { mithrilc::backend::JitTier::Llvm };
                    let opts = mithrilc::model::JitOptions { max: args.max.clone(), quantize, threads: args.threads, tier, ..Default::default() };
                    Engine::Jit(model.jit(&opts)?)
                }
                other => return Err(mithrilc::Error::usage(format!("target={other:?}: load runs \"jit\", \"jit-llvm\" or \"interp\" (compile() builds the other targets)"))),
            };
            Ok((model, engine, args.target))
        })
    })
    .and_then(|(model, engine, target)| Model::new(py, model, engine, target))
}

impl Model {
    fn new(py: Python<'_>, model: mithrilc::Model, engine: Engine, target: String) -> PyResult<Model> {
        let g = &model.graphs().forward;
        let named = |v: mithrilc::ir::ValueId| (g.node(v).name.clone().unwrap_or_default(), v);
        let inputs = ports(py, g, g.inputs().map(named))?;
        let params = ports(py, g, g.params().map(named))?;
        let outputs = ports(py, g, g.outputs.iter().map(|o| (o.name.clone(), o.value)))?;
        let (forward, backward) = match &engine {
            Engine::Jit(jit) => (program_signature(jit.program(Pass::Forward).map_err(exception)?), jit.program(Pass::Backward).ok().map(program_signature)),
            Engine::Interp(..) => (graph_signature(g), model.graphs().backward.as_ref().map(graph_signature)),
        };
        Ok(Model { engine: RwLock::new(engine), model: RwLock::new(model), forward, backward, inputs, outputs, params, target })
    }

    fn signature(&self, pass: Pass) -> PyResult<&Signature> {
        match pass {
            Pass::Forward => Ok(&self.forward),
            Pass::Backward => self.backward.as_ref().ok_or_else(|| UsageError::new_err("the model was loaded without gradients: load it with grad=True (or grad=[names])")),
        }
    }

    /// The arrays of a call in `sig`'s input order: positional ones first, then
    /// keywords by name (`None` where not given).
    fn gather<'py>(&self, sig: &Signature, args: &Bound<'py, PyTuple>, kwargs: Option<&Bound<'py, PyDict>>) -> PyResult<Vec<Option<Bound<'py, PyAny>>>> {
        let mut given: Vec<Option<Bound<'py, PyAny>>> = vec![None; sig.inputs.len()];
        if args.len() > sig.inputs.len() {
            return Err(ModelError::new_err(format!("{} arrays given for the model's {} inputs ({})", args.len(), sig.inputs.len(), names(&sig.inputs))));
        }
        for (slot, a) in given.iter_mut().zip(args.iter()) {
            *slot = Some(a);
        }
        for (k, v) in kwargs.into_iter().flatten() {
            let key: String = k.extract()?;
            let Some(i) = sig.inputs.iter().position(|(n, _)| *n == key) else {
                return Err(ModelError::new_err(format!("`{key}` is not an input of the model (its inputs: {})", names(&sig.inputs))));
            };
            if given[i].replace(v).is_some() {
                return Err(ModelError::new_err(format!("input `{key}` is given twice, by position and by name")));
            }
        }
        Ok(given)
    }

    /// Runs `pass` on the call's arrays: the outputs by name. The backward pass takes
    /// ones for an absent cotangent `output_grad/NAME` (as the command does).
    fn call<'py>(&self, py: Python<'py>, pass: Pass, args: &Bound<'py, PyTuple>, kwargs: Option<&Bound<'py, PyDict>>) -> PyResult<Bound<'py, PyDict>> {
        let sig = self.signature(pass)?;
        let mut given = self.gather(sig, args, kwargs)?;
        if pass == Pass::Backward {
            self.fill_cotangents(py, &mut given)?;
        }
        let missing: Vec<&str> = sig.inputs.iter().zip(&given).filter(|(_, g)| g.is_none()).map(|((n, _), _)| n.as_str()).collect();
        if !missing.is_empty() {
            return Err(ModelError::new_err(format!("no value for the input(s) {}", missing.join(", "))));
        }
        let arrays: Vec<Given> = sig.inputs.iter().zip(&given).map(|((name, dtype), g)| Given::new(py, name, g.as_ref().expect("checked above"), *dtype)).collect::<PyResult<_>>()?;
        let engine = read(&self.engine);
        match &*engine {
            Engine::Jit(jit) => {
                let shapes: Vec<(Dtype, &[u64])> = arrays.iter().map(|a| (a.dtype, &a.shape[..])).collect();
                let wanted = jit.output_shapes(pass, &shapes).map_err(exception)?;
                let mut outs = Vec::with_capacity(wanted.len());
                for (dtype, shape) in &wanted {
                    outs.push(new_array(py, *dtype, shape)?);
                }
                let ins: Vec<(Dtype, Vec<u64>, Raw)> = arrays.iter().map(|a| (a.dtype, a.shape.clone(), a.bytes())).collect();
                let out_raw: Vec<Raw> = outs.iter().map(|(_, b)| Raw { ptr: b.buf_ptr() as usize, len: b.len_bytes() }).collect();
                drop(engine);
                py.detach(|| {
                    guarded(|| {
                        let engine = read(&self.engine);
                        let Engine::Jit(jit) = &*engine else { return Err(mithrilc::Error::internal("the engine changed during a call")) };
                        // SAFETY: the buffers stay exported until `arrays` and `outs` drop,
                        // after this returns; the outputs are new arrays no one else has.
                        let inputs: Vec<Array> = ins.iter().map(|(dtype, shape, raw)| Array { dtype: *dtype, shape, data: unsafe { raw.slice() } }).collect();
                        let mut outputs: Vec<&mut [u8]> = out_raw.iter().map(|r| unsafe { r.slice_mut() }).collect();
                        jit.run_arrays(pass, &inputs, &mut outputs)
                    })
                })?;
                let dict = PyDict::new(py);
                for (name, (array, _)) in sig.outputs.iter().zip(outs) {
                    dict.set_item(name, array)?;
                }
                Ok(dict)
            }
            Engine::Interp(..) => {
                drop(engine);
                let feeds: BTreeMap<String, Tensor> = sig
                    .inputs
                    .iter()
                    .zip(&arrays)
                    .map(|((name, _), a)| {
                        // SAFETY: exported for this scope.
                        let bytes = unsafe { a.bytes().slice() }.to_vec();
                        let raw = RawTensor::owned(a.dtype, a.shape.clone(), bytes).ok_or_else(|| InternalError::new_err("an array's bytes do not fill its shape"))?;
                        Ok((name.clone(), raw.to_tensor()))
                    })
                    .collect::<PyResult<_>>()?;
                let outputs = py.detach(|| {
                    guarded(|| match (&*read(&self.engine), pass) {
                        (Engine::Interp(forward, _), Pass::Forward) => forward.run(&feeds),
                        (Engine::Interp(_, Some(backward)), Pass::Backward) => backward.run(&feeds),
                        _ => Err(mithrilc::Error::internal("the engine changed during a call")),
                    })
                })?;
                let wanted: Vec<(String, Tensor)> = outputs.into_iter().filter(|(n, _)| sig.outputs.contains(n)).collect();
                tensors_dict(py, wanted)
            }
        }
    }

    /// Ones for every absent cotangent `output_grad/NAME`, of the forward output's
    /// type and shape at these inputs (which the compiled model computes from the
    /// inputs' shapes; the interpreter, by running the forward pass).
    fn fill_cotangents<'py>(&self, py: Python<'py>, given: &mut [Option<Bound<'py, PyAny>>]) -> PyResult<()> {
        let sig = self.signature(Pass::Backward)?;
        let absent: Vec<usize> = (0..given.len()).filter(|&i| given[i].is_none() && sig.inputs[i].0.starts_with("output_grad/")).collect();
        // The forward pass's inputs are the backward pass's by name.
        let forward: Option<Vec<Bound<'py, PyAny>>> = self.forward.inputs.iter().map(|(n, _)| sig.inputs.iter().position(|(m, _)| m == n).and_then(|i| given[i].clone())).collect();
        let (false, Some(forward)) = (absent.is_empty(), forward) else {
            return Ok(()); // (nothing to fill, or an input is missing: the caller says which)
        };
        let np = numpy(py)?;
        let shapes = match &*read(&self.engine) {
            Engine::Jit(jit) => {
                let arrays: Vec<Given> = self.forward.inputs.iter().zip(&forward).map(|((n, d), obj)| Given::new(py, n, obj, *d)).collect::<PyResult<_>>()?;
                let shapes: Vec<(Dtype, &[u64])> = arrays.iter().map(|a| (a.dtype, &a.shape[..])).collect();
                Some(jit.output_shapes(Pass::Forward, &shapes).map_err(exception)?)
            }
            Engine::Interp(..) => None,
        };
        let outputs: Vec<(String, Bound<'py, PyAny>)> = match shapes {
            Some(shapes) => {
                let ones = |(dtype, shape): &(Dtype, Vec<u64>)| np.call_method1("ones", (shape.clone(), numpy_name(*dtype).unwrap_or("float32")));
                self.forward.outputs.iter().cloned().zip(shapes.iter().map(ones).collect::<PyResult<Vec<_>>>()?).collect()
            }
            None => {
                let outputs = self.call(py, Pass::Forward, &PyTuple::new(py, &forward)?, None)?;
                outputs.iter().map(|(k, y)| Ok((k.extract()?, np.call_method1("ones_like", (y,))?))).collect::<PyResult<_>>()?
            }
        };
        for i in absent {
            let output = &sig.inputs[i].0["output_grad/".len()..];
            given[i] = outputs.iter().find(|(name, _)| name == output).map(|(_, ones)| ones.clone());
        }
        Ok(())
    }
}

/// `a, b, c` of the inputs' names.
fn names(inputs: &[(String, Dtype)]) -> String {
    inputs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
}

#[pymethods]
impl Model {
    /// Runs the model: inputs by position (in `inputs`' order) or by name; returns the
    /// outputs by name, as new NumPy arrays.
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__<'py>(&self, py: Python<'py>, args: &Bound<'py, PyTuple>, kwargs: Option<&Bound<'py, PyDict>>) -> PyResult<Bound<'py, PyDict>> {
        self.call(py, Pass::Forward, args, kwargs)
    }

    /// The gradients of the parameters (by name) at these inputs: of the loss, for a
    /// model with one, else of the outputs weighted by their cotangents
    /// `output_grad/NAME` (ones where not given).
    #[pyo3(signature = (*args, **kwargs))]
    fn backward<'py>(&self, py: Python<'py>, args: &Bound<'py, PyTuple>, kwargs: Option<&Bound<'py, PyDict>>) -> PyResult<Bound<'py, PyDict>> {
        let all = self.call(py, Pass::Backward, args, kwargs)?;
        let grads = PyDict::new(py);
        for (k, v) in all.iter() {
            let key: String = k.extract()?;
            if let Some(name) = key.strip_prefix("grad/") {
                grads.set_item(name, v)?;
            }
        }
        Ok(grads)
    }

    /// One SGD step: see `Model.train_step` in `mithrilc/__init__.pyi`.
    #[pyo3(signature = (batch, lr, momentum = 0.0))]
    fn train_step(&self, py: Python<'_>, batch: &Bound<'_, PyDict>, lr: f64, momentum: f64) -> PyResult<f64> {
        let feeds = dict_tensors(py, batch)?;
        py.detach(|| {
            guarded(|| match &mut *write(&self.engine) {
                Engine::Jit(jit) => jit.train_step(&feeds, lr, momentum),
                Engine::Interp(..) => Err(mithrilc::Error::usage("train_step runs on target=\"jit\" (the interpreter does not update parameters)")),
            })
        })
    }

    /// The parameters' current values by name (new arrays).
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let values = py.detach(|| {
            guarded(|| match &*read(&self.engine) {
                // Trained weights live in the compiled model alone.
                Engine::Jit(jit) if self.backward.is_some() => jit.state_dict(),
                _ => Ok(read(&self.model).params().iter().map(|(n, t)| (n.clone(), t.clone())).collect()),
            })
        })?;
        tensors_dict(py, values)
    }

    /// Replaces parameters' values by name (the others keep theirs).
    fn load_state_dict(&self, py: Python<'_>, values: &Bound<'_, PyDict>) -> PyResult<()> {
        let values = dict_tensors(py, values)?;
        py.detach(|| {
            guarded(|| {
                let mut engine = write(&self.engine);
                let mut model = write(&self.model);
                // Checked before anything changes: the compiled weights and the values
                // kept here change together or not at all.
                model.check_params(&values)?;
                if let Engine::Jit(jit) = &mut *engine {
                    jit.load_state_dict(&values)?;
                }
                model.set_params(values)?;
                if let Engine::Interp(..) = &*engine {
                    *engine = interpreters(&model);
                }
                Ok(())
            })
        })
    }

    /// What `mithrilc inspect` prints: the IR after the passes and its counts.
    fn ir(&self) -> String {
        read(&self.model).inspect()
    }

    /// What `compile --report` prints of the compiled model: kernels, weights, arena.
    fn report(&self) -> PyResult<String> {
        match &*read(&self.engine) {
            Engine::Jit(jit) => Ok(jit.report().to_string()),
            Engine::Interp(..) => Err(UsageError::new_err("the interpreter compiles nothing to report on (load with target=\"jit\")")),
        }
    }

    /// The threads a call splits its work over.
    #[getter]
    fn threads(&self) -> usize {
        match &*read(&self.engine) {
            Engine::Jit(jit) => jit.threads(),
            Engine::Interp(..) => 1,
        }
    }

    fn __repr__(&self) -> String {
        let list = |ports: &[Py<Port>]| ports.iter().map(|p| p.get().name.clone()).collect::<Vec<_>>().join(", ");
        format!("<mithrilc.Model {} on {}: inputs {}; outputs {}>", read(&self.model).graphs().forward.name, self.target, list(&self.inputs), list(&self.outputs))
    }
}

/// `mithrilc ARGS...` as a process would run it: prints and returns the exit code.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(|| mithrilc::error::catch_panic("mithrilc panicked", || Ok(mithrilc::command::main(argv))).unwrap_or(101))
}

/// One command (`["mithrilc", "compile", ...]`): what it prints, or its exception.
#[pyfunction]
fn command(py: Python<'_>, argv: Vec<String>) -> PyResult<String> {
    py.detach(|| guarded(|| mithrilc::command::execute(argv)))
}

#[pymodule]
fn _mithrilc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("ModelError", py.get_type::<ModelError>())?;
    m.add("UsageError", py.get_type::<UsageError>())?;
    m.add("ToolchainError", py.get_type::<ToolchainError>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    m.add_class::<Model>()?;
    m.add_class::<Port>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(command, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
