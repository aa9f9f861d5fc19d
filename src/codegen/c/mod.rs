//! The C target: a [`Program`] as portable C99 with no allocation, plus the runtime,
//! a Makefile and a demo program.
//!
//! Symbolic dimensions (bounded by `--max`) are `int64_t` arguments of the forward
//! functions, stored in the kernels' context as `dims[i]`; loops over them run to the
//! run-time value while every buffer keeps the layout of the maxima. The runtime's
//! kernels are f32; f64 products run as plain loops here (convolution, pooling and
//! softmax already lowered to loops: `lower/loops.rs`). Limits: f16/bf16 have no C
//! arithmetic yet.
//!
//! Weights ([`WeightsMode`]): `file` writes `weights.bin` (the layout of
//! `<NAME>_WEIGHT_<i>_OFFSET`) for the caller to load or map; `embed` also assembles it
//! into the library with `.incbin` (no C compiler parses megabytes of literals) as
//! `<name>_weights_data`; `safetensors` writes no blob and the demo reads the
//! parameters from a safetensors file at run time.
//!
//! Files written (for a model named `mlp`): `mlp.h`, `mlp.c`, the runtime
//! ([`RUNTIME_FILES`]: `mithril_ops.h`, `mithril_runtime.h` and the `mr_*` files),
//! `mlp_demo.c`, `Makefile`, and `weights.bin` (+ `mlp_weights.S` when embedded) when
//! parameter values were given.

use std::fmt::Write as _;

use serde::Serialize;

use super::cstyle::{pad, Dialect, Renderer, C, C_OPS_HEADER};
use crate::error::{Error, Result};
use crate::hash::fnv1a;
use crate::ir::{Dtype, PoolKind};
use crate::lower::{align, Kernel, Layout, Program, Storage, View, PANEL};
use crate::tensor::Tensor;

/// The runtime (`runtime-c/`), copied verbatim into every output directory: its
/// headers, then its sources, which the generated Makefile builds and links, one
/// file per concern (`mr_internal.h` is what they share).
pub const RUNTIME_FILES: &[(&str, &str)] = &[
    ("mithril_ops.h", C_OPS_HEADER),
    ("mithril_runtime.h", include_str!("../../../runtime-c/mithril_runtime.h")),
    ("mr_internal.h", include_str!("../../../runtime-c/mr_internal.h")),
    ("mr_gemm.c", include_str!("../../../runtime-c/mr_gemm.c")),
    ("mr_conv.c", include_str!("../../../runtime-c/mr_conv.c")),
    ("mr_winograd.c", include_str!("../../../runtime-c/mr_winograd.c")),
    ("mr_pool.c", include_str!("../../../runtime-c/mr_pool.c")),
    ("mr_softmax.c", include_str!("../../../runtime-c/mr_softmax.c")),
    ("mr_train.c", include_str!("../../../runtime-c/mr_train.c")),
    ("mr_threads.c", include_str!("../../../runtime-c/mr_threads.c")),
];

/// The runtime's C sources (of [`RUNTIME_FILES`]), which every library compiles.
pub fn runtime_sources() -> impl Iterator<Item = &'static str> {
    RUNTIME_FILES.iter().map(|(name, _)| *name).filter(|name| name.ends_with(".c"))
}

#[cfg(test)]
mod runtime_facts;

/// How the generated library gets its weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightsMode {
    /// `weights.bin`, loaded or mapped by the caller.
    #[default]
    File,
    /// Assembled into the library (`<name>_weights_data`), for firmware.
    Embed,
    /// Read from a safetensors file at run time by the demo's loader.
    Safetensors,
}

impl WeightsMode {
    pub fn parse(s: &str) -> Result<WeightsMode> {
        match s {
            "file" => Ok(WeightsMode::File),
            "embed" => Ok(WeightsMode::Embed),
            "safetensors" => Ok(WeightsMode::Safetensors),
            other => Err(Error::usage(format!("--weights {other}: expected file, embed or safetensors"))),
        }
    }
}

/// Everything that changes what the C target writes.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The model file, named in generated comments.
    pub source: String,
    /// Parameter values by name, written to `weights.bin` when given.
    pub weights: Option<std::collections::BTreeMap<String, Tensor>>,
    pub mode: WeightsMode,
}

/// The longest identifier [`identifier`] makes (file names are built from it too).
const MAX_IDENTIFIER: usize = 48;

/// A C identifier (and file-name stem) from a model name: legal, lower case, at most
/// [`MAX_IDENTIFIER`] characters (a longer one keeps its start and gains a hash of the
/// whole name, so distinct names stay distinct), and never one of the runtime's names
/// (`mithril_runtime`, `mithril_ops`, `mr_*`: their files, include guards and symbols).
/// Callers that need uniqueness among several names add a number
/// ([`dim_params`], buffer names).
pub fn identifier(name: &str) -> String {
    let mut s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) || s.starts_with('_') {
        s.insert(0, 'm');
    }
    if s == "mr" || s.starts_with("mr_") || s.starts_with("mithril_") {
        s.insert_str(0, "model_");
    }
    if s.len() > MAX_IDENTIFIER {
        s.truncate(MAX_IDENTIFIER - 17);
        let _ = write!(s, "_{:016x}", fnv1a(name.as_bytes()));
    }
    s
}

/// The longest name, in bytes, that generated code spells out in a string literal
/// (C99 promises literals of 4,095 characters; escapes only shorten the count).
const MAX_LABEL: usize = 1000;

/// A port's name as the demo spells it (`--input NAME=`, its messages): the name, or
/// for one over [`MAX_LABEL`] bytes its start, `~` and a hash of the whole name.
pub fn port_label(name: &str) -> String {
    if name.len() <= MAX_LABEL {
        return name.to_string();
    }
    let mut end = MAX_LABEL - 17;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}~{:016x}", &name[..end], fnv1a(name.as_bytes()))
}


/// The files of the C target, by name, in a fixed order.
/// `backward` (from `--grad`) adds `<name>_backward` and, when it has a loss,
/// `<name>_train_step`; the demo then runs the backward pass.
pub fn emit(p: &Program, backward: Option<&Program>, opts: &Options) -> Result<Vec<(String, Vec<u8>)>> {
    let name = identifier(&p.name);
    let upper = name.to_uppercase();
    let train = match backward {
        Some(b) => TrainLayout::new(p, b)?,
        None => None,
    };
    let ctx = TemplateContext::new(p, backward, train.as_ref(), &name, &upper, opts)?;
    let mut tera = tera::Tera::default();
    let templates = [
        ("model.h", include_str!("../../../templates/c/model.h.tera")),
        ("Makefile", include_str!("../../../templates/c/Makefile.tera")),
        ("demo.c", include_str!("../../../templates/c/demo.c.tera")),
    ];
    for (n, t) in templates {
        tera.add_raw_template(n, t).map_err(|e| Error::internal(format!("template {n}: {e}")))?;
    }
    // (Each context is serialized once: it lists every parameter.)
    let context = |ctx: &TemplateContext| tera::Context::from_serialize(ctx).map_err(|e| Error::internal(format!("template context: {e}")));
    let render = |n: &str, context: &tera::Context| tera.render(n, context).map_err(|e| Error::internal(format!("template {n}: {e:?}")));
    let (main, demo) = (context(&ctx)?, context(&ctx.for_demo())?);
    let mut files = vec![
        (format!("{name}.h"), render("model.h", &main)?.into_bytes()),
        (format!("{name}.c"), model_c(p, backward, train.as_ref(), &name, opts)?.into_bytes()),
    ];
    files.extend(RUNTIME_FILES.iter().map(|(file, text)| (file.to_string(), text.as_bytes().to_vec())));
    files.extend([
        (format!("{name}_demo.c"), render("demo.c", &demo)?.into_bytes()),
        ("Makefile".to_string(), render("Makefile", &main)?.into_bytes()),
    ]);
    match (opts.mode, &opts.weights) {
        (WeightsMode::Safetensors, _) => {}
        (WeightsMode::Embed, None) if p.weights_size > 0 => {
            return Err(Error::user("--weights embed needs the parameter values (--params FILE)".to_string()))
        }
        (mode, Some(values)) => {
            files.push(("weights.bin".to_string(), weights_blob(p, values)?));
            if mode == WeightsMode::Embed {
                files.push((format!("{name}_weights.S"), embed_asm(&name).into_bytes()));
            }
        }
        (_, None) => {}
    }
    Ok(files)
}

/// An assembler file that puts `weights.bin` into read-only data as
/// `<name>_weights_data`, 64-byte aligned (ELF and Mach-O spellings).
fn embed_asm(name: &str) -> String {
    format!(
        "/* {name}_weights.S: generated by mithrilc {v}. Embeds weights.bin as {name}_weights_data. */\n\
#if defined(__APPLE__)\n\
    .section __TEXT,__const\n\
    .globl _{name}_weights_data\n\
    .p2align 6\n\
_{name}_weights_data:\n\
#else\n\
    .section .rodata\n\
    .globl {name}_weights_data\n\
    .type {name}_weights_data, %object\n\
    .balign 64\n\
{name}_weights_data:\n\
#endif\n\
    .incbin \"weights.bin\"\n\
#if defined(__ELF__)\n\
    .size {name}_weights_data, . - {name}_weights_data\n\
    .section .note.GNU-stack,\"\",%progbits\n\
#endif\n",
        v = env!("CARGO_PKG_VERSION")
    )
}

/// The weights blob in the layout of the program's weight offsets.
pub fn weights_blob(p: &Program, values: &std::collections::BTreeMap<String, Tensor>) -> Result<Vec<u8>> {
    let mut blob = vec![0u8; p.weights_size as usize];
    for port in &p.weights {
        let (name, shape) = (&port.name, &port.shape);
        let t = values.get(name).ok_or_else(|| Error::user(format!("no value for the parameter `{name}`")))?;
        if &t.shape != shape {
            return Err(Error::user(format!("parameter `{name}` has shape {:?}, the model needs {:?}", t.shape, shape)));
        }
        let b = &p.buffers[port.buf.0];
        let Storage::Weight { offset } = b.storage else { return Err(Error::internal(format!("weight {name} is not in the blob"))) };
        let stored = stored_values(t, port.layout);
        let end = offset as usize + stored.data.len() * b.dtype.size();
        let Some(slot) = blob.get_mut(offset as usize..end) else {
            return Err(Error::internal(format!("weight {name} does not fit the blob")));
        };
        write_elements(&stored.data, b.dtype, slot);
    }
    Ok(blob)
}

/// A parameter's values in the order its layout stores them (row-major ones as they
/// are: a large parameter is not copied).
fn stored_values(t: &Tensor, layout: Layout) -> std::borrow::Cow<'_, Tensor> {
    let (n, k) = (t.shape.first().copied().unwrap_or(1) as usize, t.shape.get(1).copied().unwrap_or(1) as usize);
    let data = match layout {
        Layout::RowMajor => return std::borrow::Cow::Borrowed(t),
        // [N, K] as [K, N]: element (j, i) of the transpose is t[i, j].
        Layout::Transposed => (0..k * n).map(|x| t.data[(x % n) * k + x / n]).collect(),
        // [K, N] in column panels: panel q, row kk, lane l is column q*PANEL + l
        // (MR_PANEL_INDEX; runtime_facts checks that the runtime reads what this writes).
        Layout::Panels => {
            let w = PANEL as usize;
            let mut data = vec![0.0; n.div_ceil(w) * w * k];
            for i in 0..n {
                for j in 0..k {
                    data[(i / w) * k * w + j * w + i % w] = t.data[i * k + j];
                }
            }
            data
        }
        // [O, C, 3, 3] as [36, O, C]: G g G^T for each (o, c), as mr_winograd_weights_f32
        // (bit for bit: runtime_facts).
        Layout::Winograd => {
            const G: [[f64; 3]; 6] = [
                [1.0 / 4.0, 0.0, 0.0],
                [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
                [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
                [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
                [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
                [0.0, 0.0, 1.0],
            ];
            let (o, c) = (n, k);
            let mut data = vec![0.0; 36 * o * c];
            for (oc, g) in t.data.chunks_exact(9).enumerate() {
                for (xi, u) in data.iter_mut().skip(oc).step_by(o * c).enumerate() {
                    let (i, j) = (xi / 6, xi % 6);
                    *u = (0..9).map(|ab| G[i][ab / 3] * g[ab] * G[j][ab % 3]).sum();
                }
            }
            data
        }
    };
    std::borrow::Cow::Owned(Tensor { dtype: t.dtype, shape: vec![data.len() as u64], data })
}

/// Writes `values` as little-endian elements of `dtype` at the start of `out` (which
/// the weights' layout sized for them).
fn write_elements(values: &[f64], dtype: Dtype, out: &mut [u8]) {
    fn put<const N: usize>(values: &[f64], out: &mut [u8], bytes: impl Fn(f64) -> [u8; N]) {
        for (&x, slot) in values.iter().zip(out.chunks_exact_mut(N)) {
            slot.copy_from_slice(&bytes(x));
        }
    }
    match dtype {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => put(values, out, |x| (x as f32).to_le_bytes()),
        Dtype::F64 => put(values, out, f64::to_le_bytes),
        Dtype::I32 => put(values, out, |x| (x as i32).to_le_bytes()),
        Dtype::I64 => put(values, out, |x| (x as i64).to_le_bytes()),
        Dtype::Bool => put(values, out, |x| [u8::from(x != 0.0)]),
    }
}

#[derive(Serialize, Clone)]
struct TensorInfo {
    name: String,
    /// The symbol index of each dimension, -1 for a static one (`0` for a scalar, as
    /// C has no empty initializers).
    dim_syms_or0: String,
    name_c: String,
    ctype: &'static str,
    descr: &'static str,
    elem: usize,
    size: u64,
    rank: usize,
    shape_text: String,
    shape_list: String,
    shape_list_or0: String,
    offset: u64,
    bytes: u64,
    /// The name as a JSON string's body (a safetensors key), as a C string's body.
    json_key_c: String,
    st_dtype: &'static str,
    /// How the blob stores it: 0 row-major, 1 transposed (a matrix `[rows, cols]` kept
    /// as `[cols, rows]`), 2 that transpose in column panels (see `Layout`).
    layout: u8,
    rows: u64,
    cols: u64,
}

#[derive(Serialize, Clone)]
struct TemplateContext {
    name: String,
    #[serde(rename = "NAME")]
    upper: String,
    version: &'static str,
    source: String,
    weights_size: u64,
    arena_size: u64,
    weights_default: String,
    embedded: bool,
    safetensors: bool,
    /// Whether some parameter is stored in a layout other than row-major.
    relaid: bool,
    /// The runtime's sources without `.c` (the Makefile's objects), and its headers.
    runtime: Vec<&'static str>,
    runtime_headers: String,
    inputs: Vec<TensorInfo>,
    outputs: Vec<TensorInfo>,
    weights: Vec<TensorInfo>,
    /// Symbolic dimensions, each a run-time argument of the forward functions.
    dims: Vec<DimInfo>,
    /// The function the demo runs: `forward`, or `backward` (whose ports `inputs` and
    /// `outputs` then are, in the demo's context).
    entry: &'static str,
    backward: Option<Ports>,
    train: Option<TrainInfo>,
    error_size: i32,
    error_index: i32,
    /// The demo's exit status when the model returns an error for its inputs.
    rejected_exit: i32,
}

#[derive(Serialize, Clone)]
struct Ports {
    inputs: Vec<TensorInfo>,
    outputs: Vec<TensorInfo>,
}

#[derive(Serialize, Clone)]
struct TrainInfo {
    state_size: u64,
    /// The C type of the learning rate, momentum and loss.
    scalar: String,
    /// The loss: its name and its index among the backward pass's outputs.
    loss: String,
    loss_index: usize,
    /// The parameters the step updates, by name.
    params: Vec<String>,
}

#[derive(Serialize, Clone)]
struct DimInfo {
    name: String,
    /// The argument's C name.
    param: String,
    max: u64,
}

/// The C parameter of each symbolic dimension: `dim_<name>`, numbered as well if two
/// names would collide.
fn dim_params(p: &Program) -> Vec<String> {
    let plain: Vec<String> = p.symbols.iter().map(|(n, _)| format!("dim_{}", identifier(n))).collect();
    let unique = plain.iter().collect::<std::collections::BTreeSet<_>>().len() == plain.len();
    if unique {
        plain
    } else {
        plain.iter().enumerate().map(|(i, n)| format!("{n}_{i}")).collect()
    }
}

impl TemplateContext {
    fn new(p: &Program, backward: Option<&Program>, train: Option<&TrainLayout>, name: &str, upper: &str, opts: &Options) -> Result<TemplateContext> {
        let info = |p: &Program, port: &crate::lower::Port| {
            let (n, buf, shape) = (port.name.as_str(), port.buf, port.shape.as_slice());
            let b = &p.buffers[buf.0];
            let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            let symbolic: Vec<String> =
                shape.iter().zip(&port.dims).map(|(n, d)| d.map_or(n.to_string(), |s| p.symbols[s].0.clone())).collect();
            TensorInfo {
                dim_syms_or0: if shape.is_empty() {
                    "0".into()
                } else {
                    port.dims.iter().map(|d| d.map_or(-1, |s| s as i64).to_string()).collect::<Vec<_>>().join(", ")
                },
                name: comment_safe(n),
                name_c: c_string(&port_label(n)),
                ctype: C_TYPE.ty(b.dtype),
                descr: npy_descr(b.dtype),
                elem: b.dtype.size(),
                size: shape.iter().product(),
                rank: shape.len(),
                shape_text: format!("[{}]", symbolic.join(", ")),
                shape_list: dims.join(", "),
                shape_list_or0: if dims.is_empty() { "0".into() } else { dims.join(", ") },
                offset: match b.storage {
                    Storage::Weight { offset } => offset,
                    _ => 0,
                },
                bytes: shape.iter().product::<u64>() * b.dtype.size() as u64,
                json_key_c: c_string(&port_label(serde_json::to_string(n).unwrap_or_default().trim_matches('"'))),
                st_dtype: match b.dtype {
                    Dtype::F32 | Dtype::F16 | Dtype::Bf16 => "F32",
                    Dtype::F64 => "F64",
                    Dtype::I32 => "I32",
                    Dtype::I64 => "I64",
                    Dtype::Bool => "BOOL",
                },
                layout: match port.layout {
                    Layout::RowMajor => 0,
                    Layout::Transposed => 1,
                    Layout::Panels => 2,
                    Layout::Winograd => 3,
                },
                rows: shape.first().copied().unwrap_or(1),
                cols: shape.get(1).copied().unwrap_or(1),
            }
        };
        Ok(TemplateContext {
            name: name.to_string(),
            upper: upper.to_string(),
            version: env!("CARGO_PKG_VERSION"),
            source: comment_safe(&opts.source),
            weights_size: p.weights_size,
            arena_size: [Some(p.arena_size), backward.map(|b| b.arena_size), train.map(|t| t.arena_size)].into_iter().flatten().max().unwrap_or(0),
            weights_default: if opts.weights.is_some() && opts.mode == WeightsMode::File { "\"weights.bin\"".into() } else { "NULL".into() },
            embedded: opts.mode == WeightsMode::Embed && p.weights_size > 0,
            safetensors: opts.mode == WeightsMode::Safetensors && p.weights_size > 0,
            relaid: p.weights.iter().any(|w| w.layout != Layout::RowMajor),
            runtime: runtime_sources().filter_map(|file| file.strip_suffix(".c")).collect(),
            runtime_headers: RUNTIME_FILES.iter().map(|(file, _)| *file).filter(|file| file.ends_with(".h")).collect::<Vec<_>>().join(" "),
            inputs: p.inputs.iter().map(|port| info(p, port)).collect(),
            outputs: p.outputs.iter().map(|port| info(p, port)).collect(),
            weights: p.weights.iter().map(|port| info(p, port)).collect(),
            dims: p.symbols.iter().zip(dim_params(p)).map(|((n, max), param)| DimInfo { name: comment_safe(n), param, max: *max }).collect(),
            entry: "forward",
            backward: backward.map(|b| Ports {
                inputs: b.inputs.iter().map(|port| info(b, port)).collect(),
                outputs: b.outputs.iter().map(|port| info(b, port)).collect(),
            }),
            train: train.zip(backward).map(|(t, b)| TrainInfo {
                state_size: t.state_size,
                scalar: C.ty(t.scalar).to_string(),
                loss: comment_safe(&b.outputs[t.loss].name),
                loss_index: t.loss,
                params: t.updates.iter().map(|u| comment_safe(&u.name)).collect(),
            }),
            error_size: ERROR_SIZE,
            error_index: ERROR_INDEX,
            rejected_exit: DEMO_REJECTED_EXIT,
        })
    }

    /// The demo's context: it runs the backward pass when there is one.
    fn for_demo(&self) -> TemplateContext {
        let mut demo = self.clone();
        if let Some(b) = &self.backward {
            demo.entry = "backward";
            demo.inputs = b.inputs.clone();
            demo.outputs = b.outputs.clone();
        }
        demo
    }
}

/// Where `<name>_train_step` keeps things: the backward pass's outputs in the arena
/// after the backward pass's own buffers, and one velocity per trained parameter in the
/// caller's optimizer state.
struct TrainLayout {
    /// The loss among the backward pass's outputs.
    loss: usize,
    /// The arena offset of each backward output.
    outputs: Vec<u64>,
    /// The arena the step needs.
    arena_size: u64,
    updates: Vec<Update>,
    state_size: u64,
    /// The loss's type: the step's learning rate, momentum and result have it.
    scalar: Dtype,
}

/// One parameter's SGD update.
struct Update {
    name: String,
    /// Its offset in the weights blob, in bytes.
    offset: u64,
    /// The index of its gradient among the backward pass's outputs.
    grad: usize,
    /// The offset of its velocity in the optimizer state, in bytes.
    state: u64,
    len: u64,
    /// The parameter's (and its gradient's and velocity's) type: f32 or f64.
    dtype: Dtype,
}

impl TrainLayout {
    /// `None` when the backward pass has no loss to descend.
    fn new(forward: &Program, backward: &Program) -> Result<Option<TrainLayout>> {
        // One blob serves both passes (and the step updates it in place).
        let same = |a: &crate::lower::Port, b: &crate::lower::Port| {
            a.name == b.name && a.shape == b.shape && a.layout == b.layout && forward.buffers[a.buf.0].storage == backward.buffers[b.buf.0].storage
        };
        if forward.weights.len() != backward.weights.len() || !forward.weights.iter().zip(&backward.weights).all(|(a, b)| same(a, b)) {
            return Err(Error::internal("the forward and backward programs lay out the weights differently"));
        }
        let Some(loss) = backward.loss else { return Ok(None) };
        let mut outputs = Vec::new();
        let mut cursor = align(backward.arena_size);
        for port in &backward.outputs {
            outputs.push(cursor);
            let bytes = port.shape.iter().product::<u64>() * backward.buffers[port.buf.0].dtype.size() as u64;
            cursor = align(cursor + bytes);
        }
        // Each weight's gradient among the outputs, found by name (not by a scan per weight).
        let output_index: std::collections::HashMap<&str, usize> = backward.outputs.iter().enumerate().rev().map(|(i, o)| (o.name.as_str(), i)).collect();
        let mut updates = Vec::new();
        let mut state = 0;
        for w in &backward.weights {
            let Some(&grad) = output_index.get(crate::passes::autodiff::grad_name(&w.name).as_str()) else { continue };
            let buf = &backward.buffers[w.buf.0];
            if !matches!(buf.dtype, Dtype::F32 | Dtype::F64) || backward.buffers[backward.outputs[grad].buf.0].dtype != buf.dtype {
                return Err(Error::user(format!("the training step updates f32 and f64 parameters only; `{}` is {}", w.name, buf.dtype)));
            }
            let (Storage::Weight { offset }, Layout::RowMajor) = (&buf.storage, w.layout) else {
                return Err(Error::internal(format!("trained parameter `{}` is not a row-major weight", w.name)));
            };
            let len = w.shape.iter().product::<u64>();
            updates.push(Update { name: w.name.clone(), offset: *offset, grad, state, len, dtype: buf.dtype });
            state = align(state + len * buf.dtype.size() as u64);
        }
        let scalar = backward.buffers[backward.outputs[loss].buf.0].dtype;
        if !matches!(scalar, Dtype::F32 | Dtype::F64) {
            return Err(Error::user(format!("the training step descends an f32 or f64 loss; `{}` is {scalar}", backward.outputs[loss].name)));
        }
        Ok(Some(TrainLayout { loss, outputs, arena_size: cursor, updates, state_size: state, scalar }))
    }
}

/// `<name>_train_step` (and `_threaded`): the backward pass into the arena, then an SGD
/// step with momentum on each trained parameter; returns the loss before the step.
fn train_step_c(b: &Program, t: &TrainLayout, name: &str, s: &mut String) {
    let params = dim_params(b);
    let decl: String = params.iter().map(|n| format!(", int64_t {n}")).collect();
    let args: String = params.iter().map(|n| format!(", {n}")).collect();
    let ty = C.ty(t.scalar);
    let _ = writeln!(s, "\n{ty} {name}_train_step(void *weights, const void *const inputs[], {ty} lr, {ty} momentum, void *state, void *arena{decl})\n{{");
    let _ = writeln!(s, "    return {name}_train_step_threaded(weights, inputs, lr, momentum, state, arena, NULL{args});\n}}");
    let _ = writeln!(
        s,
        "\n{ty} {name}_train_step_threaded(void *weights, const void *const inputs[], {ty} lr, {ty} momentum, void *state, void *arena,\n    const mr_threads *threads{decl})\n{{"
    );
    let _ = writeln!(s, "    unsigned char *w = (unsigned char *)weights;\n    unsigned char *a = (unsigned char *)arena;");
    let _ = writeln!(s, "    unsigned char *v = (unsigned char *)state;\n    void *outputs[{}];", b.outputs.len());
    let _ = writeln!(s, "    (void)v;");
    for (i, off) in t.outputs.iter().enumerate() {
        let _ = writeln!(s, "    outputs[{i}] = a + {off};");
    }
    let call = format!("{name}_backward_threaded(weights, inputs, outputs, arena, threads{args})");
    let _ = writeln!(s, "    if ({call} != 0) {{\n        return NAN;\n    }}");
    for u in &t.updates {
        let (p, sfx) = (C.ty(u.dtype), if u.dtype == Dtype::F64 { "f64" } else { "f32" });
        let _ = writeln!(s, "    /* {} */", comment_safe(&u.name));
        let _ = writeln!(
            s,
            "    mr_sgd_{sfx}(({p} *)(void *)(w + {}), (const {p} *)outputs[{}], momentum != 0 ? ({p} *)(void *)(v + {}) : NULL, {}, ({p})lr, ({p})momentum);",
            u.offset, u.grad, u.state, u.len
        );
    }
    let _ = writeln!(s, "    return *(const {ty} *)outputs[{}];\n}}", t.loss);
}

const C_TYPE: C = C;

fn npy_descr(d: Dtype) -> &'static str {
    match d {
        Dtype::F32 | Dtype::F16 | Dtype::Bf16 => "<f4",
        Dtype::F64 => "<f8",
        Dtype::I32 => "<i4",
        Dtype::I64 => "<i8",
        Dtype::Bool => "|b1",
    }
}

/// A model name inside a C comment: no `*/`, printable ASCII only.
/// Text from the model as it may stand in a C comment (or a Makefile's): printable
/// ASCII, with `_` for anything else, for a backslash, and for the second character of
/// any pair that could end or open a comment (`*/`, `/*`) or start a trigraph (`??`).
fn comment_safe(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev = ' ';
    for c in s.chars() {
        let c = if (c.is_ascii_graphic() || c == ' ') && c != '\\' { c } else { '_' };
        let c = match (prev, c) {
            ('*', '/') | ('/', '*') | ('?', '?') => '_',
            _ => c,
        };
        out.push(c);
        prev = c;
    }
    out
}

/// A model name as the body of a C string literal (`?` escaped, so no `??x` is read
/// as a trigraph).
fn c_string(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '"' | '\\' | '?' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_ascii_graphic() || c == ' ' => out.push(c),
            c => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(out, "\\{b:03o}");
                }
            }
        }
    }
    out
}

/// `model.c`: the forward pass, and with `--grad` the backward pass and the training
/// step.
fn model_c(p: &Program, backward: Option<&Program>, train: Option<&TrainLayout>, name: &str, opts: &Options) -> Result<String> {
    let mut s = String::new();
    let _ = writeln!(s, "/* {name}.c: generated by mithrilc {} from {}. Do not edit. */", env!("CARGO_PKG_VERSION"), comment_safe(&opts.source));
    let _ = writeln!(s, "#include <math.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <string.h>\n");
    let _ = writeln!(s, "#include \"{name}.h\"\n#include \"mithril_ops.h\"\n#include \"mithril_runtime.h\"\n");
    program_c(p, name, &format!("{name}_forward"), &mut s)?;
    if let Some(b) = backward {
        let _ = writeln!(s, "\n/* The backward pass: the forward pass again, then the gradients. */");
        program_c(b, &format!("{name}_bwd"), &format!("{name}_backward"), &mut s)?;
        if let Some(t) = train {
            train_step_c(b, t, name, &mut s);
        }
    }
    Ok(s)
}

/// One program as C: constants, one function per loop kernel (a task over a range of
/// its outermost non-trivial dimension, so the caller's threads can split it), and the
/// function `entry` (and `entry`_threaded) that runs the kernels in order. File-scope
/// names start with `name`.
fn program_c(p: &Program, name: &str, entry: &str, s: &mut String) -> Result<()> {
    let names: Vec<String> = p.buffers.iter().enumerate().map(|(i, b)| format!("b{i}_{}", identifier(&b.name))).collect();
    let r = Renderer { p, d: &C, names: &names };
    // Weights stored in column panels, by buffer (looked up at each matmul).
    let mut panels = vec![false; p.buffers.len()];
    for w in p.weights.iter().filter(|w| w.layout == Layout::Panels) {
        panels[w.buf.0] = true;
    }
    for (i, t) in p.consts.iter().enumerate() {
        let ty = C.ty(t.dtype());
        // Written straight into the file: a large constant's literals are never held
        // as strings of their own.
        let _ = write!(s, "static const {ty} {name}_const{i}[{}] = {{ ", t.numel().max(1));
        for (j, x) in t.values().enumerate() {
            if j > 0 {
                s.push_str(", ");
            }
            s.push_str(&r.literal(x, t.dtype()));
        }
        s.push_str(" };\n");
    }
    let _ = writeln!(s, "\n/* What every kernel reads its buffers from. */");
    let dims_field = if p.symbols.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = p.symbols.iter().map(|(n, _)| comment_safe(n)).collect();
        format!("    int64_t dims[{}]; /* run-time sizes: {} */\n", p.symbols.len(), names.join(", "))
    };
    let _ = writeln!(
        s,
        "struct {name}_ctx {{\n    const unsigned char *w;\n    unsigned char *a;\n    const void *const *inputs;\n    void *const *outputs;\n    const mr_threads *threads;\n{dims_field}}};"
    );
    // Loop kernels as tasks.
    let mut calls: Vec<String> = Vec::new();
    for (k, step) in p.steps.iter().enumerate() {
        let comment = format!("/* kernel {k}: {} */", comment_safe(&step.origins.join("; ")));
        if index_checks(&r, name, k, step, s) {
            calls.push(format!("\n    if ({name}_check{k}(&ctx) != 0) {{\n        return {ERROR_INDEX};\n    }}"));
        }
        match &step.kernel {
            Kernel::Map { out, .. } | Kernel::Reduce { out, .. } | Kernel::ArgReduce { out, .. } => {
                let ext = extents(step, "ctx->");
                // Tasks split the outermost loop that can run more than once.
                let split = ext[..out.shape.len()].iter().position(|e| e != "1");
                let extent = split.map_or("1".to_string(), |d| extents(step, "ctx.")[d].clone());
                let _ = writeln!(s, "\n{comment}\nstatic void {name}_k{k}(void *vctx, int64_t begin, int64_t end)\n{{");
                let _ = writeln!(s, "    const struct {name}_ctx *ctx = (const struct {name}_ctx *)vctx;");
                declare(s, p, &names, &buffers_of(&step.kernel), "ctx->", name);
                if split.is_none() {
                    s.push_str("    (void)begin;\n    (void)end;\n");
                }
                loop_kernel(&r, &step.kernel, &ext, split, s)?;
                s.push_str("}\n");
                let cost = out.shape.iter().product::<u64>() * work_per_element(&step.kernel);
                calls.push(format!("\n    {comment}\n    mr_run(threads, {name}_k{k}, &ctx, {extent}, {cost}.0);"));
            }
            Kernel::Gemm { a, b, c, epilogue } if c.shape.len() > 2 => {
                // Batched: a task over the flattened batch, split across threads when it
                // pays; a task that gets the whole batch splits each product instead.
                let has_ep = epilogue_fn(&r, name, k, &step.kernel, s)?;
                let rank = c.shape.len();
                let ext = extents(step, "ctx->");
                let count = product(&ext[..rank - 2]);
                let _ = writeln!(s, "\n{comment}\nstatic void {name}_k{k}(void *vctx, int64_t begin, int64_t end)\n{{");
                let _ = writeln!(s, "    const struct {name}_ctx *ctx = (const struct {name}_ctx *)vctx;");
                let _ = writeln!(s, "    const mr_threads *threads = begin == 0 && end == {count} ? ctx->threads : NULL;");
                declare(s, p, &names, &call_buffers(&r, &step.kernel), "ctx->", name);
                s.push_str("    (void)threads;\n");
                if has_ep {
                    let _ = writeln!(s, "    mr_epilogue ep;\n    ep.fn = {name}_e{k};\n    ep.ctx = ctx;\n    ep.n = 0;");
                }
                s.push_str("    for (int64_t bi = begin; bi < end; ++bi) {\n");
                for d in 0..rank - 2 {
                    let _ = writeln!(s, "        const int64_t i{d} = bi / {} % {};\n        (void)i{d};", product(&ext[d + 1..rank - 2]), ext[d]);
                }
                gemm(&r, a, b, c, &ext, epilogue.as_ref(), has_ep.then_some("&ep"), false, &panels, s)?;
                s.push_str("    }\n}\n");
                let cost = step.kernel.domain().iter().product::<u64>() * 2;
                let total = product(&extents(step, "ctx.")[..rank - 2]);
                calls.push(format!("\n    {comment}\n    mr_run(threads, {name}_k{k}, &ctx, {total}, {cost}.0);"));
            }
            other => {
                let mut body = String::new();
                let ep = if epilogue_fn(&r, name, k, other, s)? {
                    let _ = writeln!(body, "        mr_epilogue ep;\n        ep.fn = {name}_e{k};\n        ep.ctx = &ctx;\n        ep.n = 0;");
                    Some("&ep")
                } else {
                    None
                };
                runtime_call(&r, other, &extents(step, "ctx."), ep, &panels, &mut body)?;
                calls.push(format!("\n    {comment}\n    {{\n{body}    }}"));
            }
        }
    }
    // Symbolic dimensions are trailing arguments, checked against their maxima.
    let params = dim_params(p);
    let decl: String = params.iter().map(|n| format!(", int64_t {n}")).collect();
    let args: String = params.iter().map(|n| format!(", {n}")).collect();
    let _ = writeln!(s, "\nint {entry}(const void *weights, const void *const inputs[], void *const outputs[], void *arena{decl})\n{{");
    let _ = writeln!(s, "    return {entry}_threaded(weights, inputs, outputs, arena, NULL{args});\n}}");
    let _ = writeln!(
        s,
        "\nint {entry}_threaded(const void *weights, const void *const inputs[], void *const outputs[], void *arena,\n    const mr_threads *threads{decl})\n{{"
    );
    let _ = writeln!(s, "    struct {name}_ctx ctx;");
    for (i, (param, (_, max))) in params.iter().zip(&p.symbols).enumerate() {
        let _ = writeln!(s, "    if ({param} < 1 || {param} > {max}) {{\n        return {ERROR_SIZE};\n    }}\n    ctx.dims[{i}] = {param};");
    }
    let _ = writeln!(s, "    ctx.w = (const unsigned char *)weights;\n    ctx.a = (unsigned char *)arena;");
    let _ = writeln!(s, "    ctx.inputs = inputs;\n    ctx.outputs = outputs;\n    ctx.threads = threads;");
    // Buffers the runtime calls use directly (a batched product is a task of its own).
    let mut direct = Vec::new();
    for step in &p.steps {
        match &step.kernel {
            Kernel::Gemm { c, .. } if c.shape.len() > 2 => {}
            Kernel::Map { .. } | Kernel::Reduce { .. } | Kernel::ArgReduce { .. } => {}
            call => direct.extend(call_buffers(&r, call)),
        }
    }
    direct.sort();
    direct.dedup();
    declare(s, p, &names, &direct, "ctx.", name);
    for c in calls {
        s.push_str(&c);
        s.push('\n');
    }
    s.push_str("    return 0;\n}\n");
    Ok(())
}

/// What a model's functions return when a run-time size is outside 1 to its maximum
/// (nothing is computed): `<NAME>_ERROR_SIZE` in the header.
pub const ERROR_SIZE: i32 = -1;
/// What they return when a gather or embedding index is outside `[-n, n)` (as the
/// interpreter, which reports it, and NumPy define it): `<NAME>_ERROR_INDEX`. The
/// kernels before it have run; outputs are unspecified.
pub const ERROR_INDEX: i32 = -2;
/// The demo's exit status when the model returns an error for the inputs it was given
/// (its message says which), as opposed to 1 for the demo's own failures.
pub const DEMO_REJECTED_EXIT: i32 = 4;

/// For a kernel that gathers, `name_check<k>`: checks every index it will use before it
/// runs (the kernel itself then wraps negative indices and never reads out of bounds),
/// evaluating each index expression over the loop variables it depends on. Returns
/// whether there is one.
fn index_checks(r: &Renderer<C>, name: &str, k: usize, step: &crate::lower::Step, s: &mut String) -> bool {
    let mut gathers: Vec<(u64, crate::lower::Expr)> = Vec::new();
    for e in crate::lower::kernel_exprs(&step.kernel) {
        e.walk(&mut |e| {
            if let crate::lower::Expr::Gather { view, axis, index, .. } = e {
                gathers.push((view.shape[*axis], (**index).clone()));
            }
        });
    }
    if gathers.is_empty() {
        return false;
    }
    let ext = extents(step, "ctx->");
    let _ = writeln!(s, "\n/* kernel {k}'s gather indices, each in [-n, n) for an axis of size n: {} */", comment_safe(&step.origins.join("; ")));
    let _ = writeln!(s, "static int {name}_check{k}(const struct {name}_ctx *ctx)\n{{");
    let mut bufs = Vec::new();
    for (_, index) in &gathers {
        crate::lower::expr_bufs(index, &mut bufs);
    }
    bufs.sort();
    bufs.dedup();
    declare(s, r.p, r.names, &bufs, "ctx->", name);
    s.push_str("    (void)ctx;\n");
    for (n, index) in gathers {
        let mut vars = Vec::new();
        index.walk(&mut |e| match e {
            crate::lower::Expr::Load { vars: v, .. } | crate::lower::Expr::Gather { vars: v, .. } => vars.extend(v.iter().copied().filter(|&v| v != usize::MAX)),
            crate::lower::Expr::Index(v) => vars.push(*v),
            _ => {}
        });
        vars.sort();
        vars.dedup();
        let mut depth = 1;
        for &v in &vars {
            let _ = writeln!(s, "{}for (int64_t i{v} = 0; i{v} < {}; ++i{v}) {{", pad(depth), ext[v]);
            depth += 1;
        }
        let _ = writeln!(s, "{}const int64_t j = {};", pad(depth), r.as_type(&index, Dtype::I64));
        let _ = writeln!(s, "{}if (j < -INT64_C({n}) || j >= INT64_C({n})) {{\n{}return 1;\n{}}}", pad(depth), pad(depth + 1), pad(depth));
        for d in (1..depth).rev() {
            let _ = writeln!(s, "{}}}", pad(d));
        }
    }
    s.push_str("    return 0;\n}\n");
    true
}

/// The extents of a step's loops ([`Kernel::domain`]): static sizes, or a symbol's
/// run-time value read through `via` (`ctx->` or `ctx.`).
fn extents(step: &crate::lower::Step, via: &str) -> Vec<String> {
    let domain = step.kernel.domain();
    domain.iter().enumerate().map(|(d, n)| step.dims.get(d).copied().flatten().map_or(n.to_string(), |s| format!("{via}dims[{s}]"))).collect()
}

/// `a * b * ...` for extents (`1` for none).
fn product(ext: &[String]) -> String {
    let factors: Vec<&str> = ext.iter().map(String::as_str).filter(|e| *e != "1").collect();
    match factors.len() {
        0 => "1".to_string(),
        1 => factors[0].to_string(),
        _ => format!("({})", factors.join(" * ")),
    }
}

/// The buffers a kernel touches.
fn buffers_of(k: &Kernel) -> Vec<crate::lower::BufId> {
    let mut v = crate::lower::kernel_reads(k);
    v.push(crate::lower::kernel_writes(k));
    v.sort();
    v.dedup();
    v
}

/// Typed pointers to `bufs`, from a filled context through `via` (`ctx->` or `ctx.`).
fn declare(s: &mut String, p: &Program, names: &[String], bufs: &[crate::lower::BufId], via: &str, prefix: &str) {
    for b in bufs {
        let buf = &p.buffers[b.0];
        let ty = C.ty(buf.dtype);
        let n = &names[b.0];
        let _ = match buf.storage {
            Storage::Input(k) => writeln!(s, "    const {ty} *{n} = (const {ty} *){via}inputs[{k}];"),
            Storage::Output(k) => writeln!(s, "    {ty} *{n} = ({ty} *){via}outputs[{k}];"),
            Storage::Weight { offset } => writeln!(s, "    const {ty} *{n} = (const {ty} *)(const void *)({via}w + {offset});"),
            Storage::Arena { offset } => writeln!(s, "    {ty} *{n} = ({ty} *)(void *)({via}a + {offset});"),
            Storage::Const(k) => writeln!(s, "    const {ty} *{n} = {prefix}_const{k};"),
        };
    }
}

/// A rough count of operations per output element, for the threading threshold.
fn work_per_element(k: &Kernel) -> u64 {
    match k {
        Kernel::Reduce { reduced, .. } => reduced.iter().product::<u64>().max(1),
        Kernel::ArgReduce { reduced, .. } => (*reduced).max(1),
        _ => 4,
    }
}

/// `ptr + offset` for a view's first element.
fn base(r: &Renderer<C>, v: &View) -> String {
    if v.offset == 0 {
        r.names[v.buf.0].clone()
    } else {
        format!("({} + {})", r.names[v.buf.0], v.offset)
    }
}

/// Loops over the output dimensions of a task (extents `ext`): dimension `split` runs
/// over `[begin, end)`, the size-1 dimensions before it are fixed at 0. Returns the
/// depth.
fn open_outer(s: &mut String, ext: &[String], split: Option<usize>, indent: usize) -> usize {
    let mut depth = indent;
    for (d, n) in ext.iter().enumerate() {
        match split {
            Some(k) if d == k => {
                let _ = writeln!(s, "{}for (int64_t i{d} = begin; i{d} < end; ++i{d}) {{", pad(depth));
            }
            Some(k) if d > k => {
                let _ = writeln!(s, "{}for (int64_t i{d} = 0; i{d} < {n}; ++i{d}) {{", pad(depth));
            }
            _ => {
                let _ = writeln!(s, "{}{{\n{}const int64_t i{d} = 0;\n{}(void)i{d};", pad(depth), pad(depth + 1), pad(depth + 1));
            }
        }
        depth += 1;
    }
    depth
}

/// A loop kernel's body as a task over `[begin, end)` of dimension `split`; `ext` are
/// the extents of its domain.
fn loop_kernel(r: &Renderer<C>, k: &Kernel, ext: &[String], split: Option<usize>, s: &mut String) -> Result<()> {
    match k {
        Kernel::Map { out, expr } => {
            let depth = open_outer(s, &ext[..out.shape.len()], split, 1);
            let vars: Vec<usize> = (0..out.shape.len()).collect();
            let t = r.p.buffers[out.buf.0].dtype;
            let value = r.expr(&crate::lower::Expr::Cast(Box::new(expr.clone()), t));
            let _ = writeln!(s, "{}{}[{}] = {value};", pad(depth), r.names[out.buf.0], r.index(out, &vars));
            r.close_loops(s, out.shape.len(), 1);
        }
        Kernel::Reduce { out, reduced, kind, expr, scale } => {
            let t = r.p.buffers[out.buf.0].dtype;
            // Sums accumulate in double, as the interpreter does.
            let acc_ty = if t.is_float() && matches!(kind, crate::ir::ReduceKind::Sum | crate::ir::ReduceKind::Prod) { Dtype::F64 } else { t };
            let depth = open_outer(s, &ext[..out.shape.len()], split, 1);
            let (init, step) = r.reduce_parts(*kind, acc_ty);
            let v = r.expr(&crate::lower::Expr::Cast(Box::new(expr.clone()), acc_ty));
            let rv = out.shape.len(); // the first reduced loop variable
            // one static reduced extent, long enough for partial sums
            let long = match &ext[rv..] {
                [n] => n.parse::<usize>().ok().filter(|&n| n >= 2 * SUM_LANES),
                _ => None,
            };
            match long {
                Some(n) if acc_ty == Dtype::F64 && *kind == crate::ir::ReduceKind::Sum => lane_sum(s, n, rv, &v, depth),
                _ => {
                    let _ = writeln!(s, "{}{} acc = {init};", pad(depth), C.ty(acc_ty));
                    let inner = r.open_loops(s, &ext[rv..], rv, depth);
                    let _ = writeln!(s, "{}{} v = {v};", pad(inner), C.ty(acc_ty));
                    let _ = writeln!(s, "{}acc = {step};", pad(inner));
                    r.close_loops(s, reduced.len(), depth);
                }
            }
            let vars: Vec<usize> = (0..out.shape.len()).collect();
            let value = match scale {
                Some(f) => format!("({}) (acc * {})", C.ty(t), r.literal(*f, Dtype::F64)),
                None => format!("({}) acc", C.ty(t)),
            };
            let _ = writeln!(s, "{}{}[{}] = {value};", pad(depth), r.names[out.buf.0], r.index(out, &vars));
            r.close_loops(s, out.shape.len(), 1);
        }
        Kernel::ArgReduce { out, kind, expr, .. } => {
            let t = r.dtype(expr);
            let depth = open_outer(s, &ext[..out.shape.len()], split, 1);
            let _ = writeln!(s, "{}{} best = 0;\n{}int64_t at = -1;", pad(depth), C.ty(t), pad(depth));
            let r_var = out.shape.len();
            let inner = r.open_loops(s, &ext[r_var..], r_var, depth);
            let _ = writeln!(s, "{}{} v = {};", pad(inner), C.ty(t), r.expr(expr));
            let _ = writeln!(s, "{}if (at < 0 || {}) {{ best = v; at = i{r_var}; }}", pad(inner), r.arg_better(*kind, t));
            r.close_loops(s, 1, depth);
            let vars: Vec<usize> = (0..out.shape.len()).collect();
            let _ = writeln!(s, "{}{}[{}] = at;", pad(depth), r.names[out.buf.0], r.index(out, &vars));
            r.close_loops(s, out.shape.len(), 1);
        }
        other => return Err(Error::internal(format!("not a loop kernel: {other:?}"))),
    }
    Ok(())
}

/// Partial sums of a long reduction: see [`lane_sum`].
const SUM_LANES: usize = 8;

/// `double acc = sum of v over i<rv> in [0, n)` (n static, at least 2 * SUM_LANES) in
/// SUM_LANES interleaved partial sums added pairwise at the end. A single running sum
/// waits on each addition's latency; the lanes' loop vectorizes (gpt_block's LayerNorm
/// mean and variance over 768: 65 -> 15 us each), and its rounding errors are smaller.
fn lane_sum(s: &mut String, n: usize, rv: usize, v: &str, depth: usize) {
    let (p, q, l) = (pad(depth), pad(depth + 1), pad(depth + 2));
    let zeros = ["0"; SUM_LANES].join(", ");
    let body = n - n % SUM_LANES;
    let _ = writeln!(s, "{p}double part[{SUM_LANES}] = {{{zeros}}};\n{p}int64_t i{rv};");
    let _ = writeln!(s, "{p}for (int64_t base = 0; base < {body}; base += {SUM_LANES}) {{");
    let _ = writeln!(s, "{q}for (i{rv} = base; i{rv} < base + {SUM_LANES}; ++i{rv}) {{\n{l}double v = {v};\n{l}part[i{rv} - base] += v;\n{q}}}\n{p}}}");
    if body < n {
        let _ = writeln!(s, "{p}for (i{rv} = {body}; i{rv} < {n}; ++i{rv}) {{\n{q}double v = {v};\n{q}part[i{rv} - {body}] += v;\n{p}}}");
    }
    let mut terms: Vec<String> = (0..SUM_LANES).map(|i| format!("part[{i}]")).collect();
    while terms.len() > 1 {
        terms = terms.chunks(2).map(|c| format!("({} + {})", c[0], c[1])).collect();
    }
    let _ = writeln!(s, "{p}double acc = {};", terms[0]);
}

/// Kernel `k`'s epilogue as an `mr_epilogue_fn` named `<name>_e<k>` that rewrites a
/// block of the result (see `mithril_runtime.h`); false when the kernel has none.
fn epilogue_fn(r: &Renderer<C>, name: &str, k: usize, kernel: &Kernel, s: &mut String) -> Result<bool> {
    let (out, expr, conv) = match kernel {
        // Other element types run the epilogue inside their plain loops.
        Kernel::Gemm { a, b, c, epilogue: Some(e) } if runtime_gemm(r, a, b, c) => (c, e, false),
        Kernel::Conv { out, epilogue: Some(e), .. } => (out, e, true),
        _ => return Ok(false),
    };
    let rank = out.shape.len();
    let _ = writeln!(s, "\n/* the epilogue of kernel {k} */");
    let _ = writeln!(s, "static void {name}_e{k}(const void *vctx, int64_t n, int64_t r0, int64_t r1, int64_t c0, int64_t c1)\n{{");
    let _ = writeln!(s, "    const struct {name}_ctx *ctx = (const struct {name}_ctx *)vctx;");
    let mut bufs = crate::lower::kernel_exprs(kernel).iter().flat_map(|e| {
        let mut v = Vec::new();
        crate::lower::expr_bufs(e, &mut v);
        v
    }).collect::<Vec<_>>();
    bufs.push(out.buf);
    bufs.sort();
    bufs.dedup();
    declare(s, r.p, r.names, &bufs, "ctx->", name);
    // Rows, columns and n in the runtime's coordinates become the loop variables.
    let (row, lead) = if conv { (1, 1) } else { (rank - 2, rank - 2) };
    if conv {
        s.push_str("    const int64_t i0 = n;\n    (void)i0;\n");
    } else {
        let mut inner = 1u64;
        for d in (0..lead).rev() {
            let _ = writeln!(s, "    const int64_t i{d} = n / {inner} % {};\n    (void)i{d};", out.shape[d]);
            inner *= out.shape[d];
        }
        if lead == 0 {
            s.push_str("    (void)n;\n");
        }
    }
    let _ = writeln!(s, "    for (int64_t i{row} = r0; i{row} < r1; ++i{row}) {{");
    // A 2-d convolution's output positions are [c0, c1) flattened: one loop over them
    // when every load can be indexed by the flat position (i3), else rows of them.
    let flat = match (conv, rank) {
        (true, 4) => flatten_spatial(&crate::lower::Expr::Load { view: out.clone(), vars: (0..4).collect() }, out.shape[3])
            .zip(flatten_spatial(expr, out.shape[3])),
        _ => None,
    };
    let depth = match (conv, rank, &flat) {
        (true, 4, Some(_)) => {
            let _ = writeln!(s, "        for (int64_t i3 = c0; i3 < c1; ++i3) {{");
            3
        }
        (true, 4, None) => {
            // Flattened positions [c0, c1) as rows of the output image.
            let ow = out.shape[3];
            let _ = writeln!(s, "        for (int64_t i2 = c0 / {ow}; i2 * {ow} < c1; ++i2) {{");
            let _ = writeln!(s, "            const int64_t lo = c0 > i2 * {ow} ? c0 - i2 * {ow} : 0;");
            let _ = writeln!(s, "            const int64_t hi = c1 < (i2 + 1) * {ow} ? c1 - i2 * {ow} : {ow};");
            let _ = writeln!(s, "            for (int64_t i3 = lo; i3 < hi; ++i3) {{");
            4
        }
        _ => {
            let col = row + 1;
            let _ = writeln!(s, "        for (int64_t i{col} = c0; i{col} < c1; ++i{col}) {{");
            3
        }
    };
    let t = r.p.buffers[out.buf.0].dtype;
    let (target, expr) = match flat {
        Some((target, e)) => (target, e),
        None => (crate::lower::Expr::Load { view: out.clone(), vars: (0..rank).collect() }, expr.clone()),
    };
    let value = r.expr(&crate::lower::Expr::Cast(Box::new(expr), t));
    let _ = writeln!(s, "{}{} = {value};", pad(depth), r.expr(&target));
    r.close_loops(s, depth - 1, 1);
    s.push_str("}\n");
    Ok(true)
}

/// The expression with loop variable 3 running over flattened positions `i2 * ow + i3`
/// of the last two dimensions (and 2 unused), when every load reads them that way: its
/// strides for the two are `(ow * s, s)` (or both 0) and nothing else uses i2 or i3.
fn flatten_spatial(e: &crate::lower::Expr, ow: u64) -> Option<crate::lower::Expr> {
    use crate::lower::Expr;
    let mut ok = true;
    let mut out = e.clone();
    out.walk_mut(&mut |e| match e {
        Expr::Index(2 | 3) => ok = false,
        Expr::Load { view, vars } | Expr::Gather { view, vars, .. } => {
            let at = |v: usize| vars.iter().position(|&x| x == v);
            match (at(2), at(3)) {
                (None, None) => {}
                (Some(d2), Some(d3)) if view.strides[d2] == view.strides[d3] * ow as i64 => {
                    view.strides[d2] = 0;
                    vars[d2] = usize::MAX;
                    view.shape[d3] *= view.shape[d2];
                }
                _ => ok = false,
            }
        }
        _ => {}
    });
    ok.then_some(out)
}

/// A kernel that calls the runtime, inline in the forward function; `ext` are the
/// extents of its domain, `ep` the address of its `mr_epilogue`, if it has one;
/// `panels` marks the weights stored in column panels.
fn runtime_call(r: &Renderer<C>, k: &Kernel, ext: &[String], ep: Option<&str>, panels: &[bool], s: &mut String) -> Result<()> {
    let ep_arg = ep.unwrap_or("NULL");
    match k {
        Kernel::Map { .. } | Kernel::Reduce { .. } | Kernel::ArgReduce { .. } => {
            return Err(Error::internal("loop kernels are tasks, not runtime calls".to_string()))
        }
        Kernel::Gemm { a, b, c, epilogue } => gemm(r, a, b, c, ext, epilogue.as_ref(), ep, true, panels, s)?,
        Kernel::Conv { x, w, out, attrs, scratch, .. } => {
            require_f32(r, &[x, w, out], "convolution")?;
            let (n, ch) = (&ext[0], x.shape[1]);
            let win = Window2d::new(&attrs.stride, &attrs.padding, &attrs.dilation);
            let ((h, wd), (kh, kw), (oh, ow)) = (win.spatial(x), win.spatial(w), win.spatial(out));
            if let Some(scratch) = scratch {
                let _ = writeln!(
                    s,
                    "        mr_conv2d_winograd_f32_mt(threads, {}, {}, {}, {n}, {ch}, {h}, {wd}, {}, {oh}, {ow}, {}, {}, {}, {ep_arg});",
                    base(r, x),
                    base(r, w),
                    base(r, out),
                    w.shape[0],
                    attrs.padding[0].0,
                    attrs.padding[1].0,
                    base(r, scratch)
                );
                return Ok(());
            }
            let _ = writeln!(
                s,
                "        mr_conv2d_f32_mt(threads, {}, {}, {}, {n}, {ch}, {h}, {wd}, {}, {kh}, {kw}, {oh}, {ow}, {}, {}, {ep_arg});",
                base(r, x),
                base(r, w),
                base(r, out),
                w.shape[0],
                win.args(),
                attrs.groups
            );
        }
        Kernel::Pool { x, out, attrs } => {
            require_f32(r, &[x, out], "pooling")?;
            let lead = product(&ext[..x.shape.len() - attrs.kernel.len()]);
            let win = Window2d::new(&attrs.stride, &attrs.padding, &attrs.dilation);
            let ((h, wd), (oh, ow), (kh, kw)) = (win.spatial(x), win.spatial(out), win.pair(&attrs.kernel, 1));
            let _ = writeln!(
                s,
                "        mr_pool2d_f32_mt(threads, {}, {}, 1, {lead}, {h}, {wd}, {kh}, {kw}, {oh}, {ow}, {}, {});",
                base(r, x),
                base(r, out),
                win.args(),
                i32::from(attrs.kind == PoolKind::Max)
            );
        }
        Kernel::Softmax { x, out, axis } => {
            require_f32(r, &[x, out], "softmax")?;
            let outer = product(&ext[..*axis]);
            let inner: u64 = x.shape[axis + 1..].iter().product();
            let _ = writeln!(s, "        mr_softmax_f32_mt(threads, {}, {}, {outer}, {}, {inner});", base(r, x), base(r, out), x.shape[*axis]);
        }
    }
    Ok(())
}

/// A 1-d or 2-d window (convolution, pooling) in the runtime's 2-d terms: a 1-d window
/// is one of height 1.
struct Window2d {
    two: bool,
    stride: (u64, u64),
    /// Top and left padding (the bottom and right follow from the output size).
    pad: (u64, u64),
    dilation: (u64, u64),
}

impl Window2d {
    fn new(stride: &[u64], padding: &[(u64, u64)], dilation: &[u64]) -> Window2d {
        let two = stride.len() == 2;
        let w = Window2d { two, stride: (0, 0), pad: (0, 0), dilation: (0, 0) };
        let before: Vec<u64> = padding.iter().map(|p| p.0).collect();
        Window2d { stride: w.pair(stride, 1), pad: w.pair(&before, 0), dilation: w.pair(dilation, 1), ..w }
    }

    /// (height, width) of a per-dimension parameter; a 1-d window's height is `one`.
    fn pair(&self, v: &[u64], one: u64) -> (u64, u64) {
        if self.two {
            (v[0], v[1])
        } else {
            (one, v[0])
        }
    }

    /// The runtime's `stride_h, stride_w, pad_top, pad_left, dil_h, dil_w` arguments.
    fn args(&self) -> String {
        let (s, p, d) = (self.stride, self.pad, self.dilation);
        format!("{}, {}, {}, {}, {}, {}", s.0, s.1, p.0, p.1, d.0, d.1)
    }

    /// (height, width) of a view's trailing spatial dimensions.
    fn spatial(&self, v: &View) -> (u64, u64) {
        let n = v.shape.len();
        self.pair(&v.shape[n - 1 - usize::from(self.two)..], 1)
    }
}

fn require_f32(r: &Renderer<C>, views: &[&View], what: &str) -> Result<()> {
    for v in views {
        let d = r.p.buffers[v.buf.0].dtype;
        if d != Dtype::F32 {
            // (lowering gives other element types loops: `lower::loops::runtime_kernel`)
            return Err(Error::internal(format!("the runtime's {what} is f32, given {d}")));
        }
    }
    Ok(())
}

/// Whether the runtime computes this matrix product (`mr_sgemm`, f32 throughout);
/// other element types run as plain loops with the epilogue inline.
fn runtime_gemm(r: &Renderer<C>, a: &View, b: &View, c: &View) -> bool {
    [a, b, c].iter().all(|v| r.p.buffers[v.buf.0].dtype == Dtype::F32)
}

/// The buffers a kernel that calls the runtime names where it makes the call: the
/// call's operands, and the buffers of an epilogue run inline (not by the runtime).
fn call_buffers(r: &Renderer<C>, k: &Kernel) -> Vec<crate::lower::BufId> {
    let mut bufs = match k {
        Kernel::Gemm { a, b, c, epilogue } => {
            let mut bufs = vec![a.buf, b.buf, c.buf];
            if let Some(e) = epilogue.as_ref().filter(|_| !runtime_gemm(r, a, b, c)) {
                crate::lower::expr_bufs(e, &mut bufs);
            }
            bufs
        }
        Kernel::Conv { x, w, out, scratch, .. } => [x.buf, w.buf, out.buf].into_iter().chain(scratch.as_ref().map(|s| s.buf)).collect(),
        Kernel::Pool { x, out, .. } | Kernel::Softmax { x, out, .. } => vec![x.buf, out.buf],
        Kernel::Map { .. } | Kernel::Reduce { .. } | Kernel::ArgReduce { .. } => vec![],
    };
    bufs.sort();
    bufs.dedup();
    bufs
}

/// A matrix product: one `mr_sgemm_mt` per batch index (f32), or plain loops; `at` is
/// the address of the `mr_epilogue` that runs `epilogue` for the runtime. With
/// `batch_loops`, loops over the batch dimensions come first; without, the caller has
/// set the batch loop variables. `panels` marks the weights stored in column panels.
#[allow(clippy::too_many_arguments)]
fn gemm(
    r: &Renderer<C>,
    a: &View,
    b: &View,
    c: &View,
    ext: &[String],
    epilogue: Option<&crate::lower::Expr>,
    at: Option<&str>,
    batch_loops: bool,
    panels: &[bool],
    s: &mut String,
) -> Result<()> {
    let rank = c.shape.len();
    let (m, n, k) = (&ext[rank - 2], &ext[rank - 1], &ext[rank]);
    let depth = if batch_loops { r.open_loops(s, &ext[..rank - 2], 0, 2) } else { 2 };
    if at.is_some() && rank > 2 {
        // The epilogue's n is the flattened batch index (for the maximal shape, as the
        // epilogue unflattens it).
        let strides = crate::lower::contiguous_strides(&c.shape[..rank - 2]);
        let terms: Vec<String> = strides.iter().enumerate().map(|(d, st)| format!("i{d} * {st}")).collect();
        let _ = writeln!(s, "{}ep.n = {};", pad(depth), terms.join(" + "));
    }
    // An operand as (pointer + batch offset, row stride, column stride).
    let operand = |v: &View| {
        let mut terms = vec![v.offset.to_string()];
        for (d, st) in v.strides[..rank - 2].iter().enumerate() {
            if *st != 0 {
                terms.push(format!("i{d} * {st}"));
            }
        }
        (format!("{} + {}", r.names[v.buf.0], terms.join(" + ")), v.strides[rank - 2], v.strides[rank - 1])
    };
    let ((pa, ra, ca), (pb, rb, cb), (pc, rc, cc)) = (operand(a), operand(b), operand(c));
    let tc = r.p.buffers[c.buf.0].dtype;
    if panels[b.buf.0] {
        // A weight in column panels: the whole [K, N] matrix, the same for every batch
        // index (lowering stores a weight so only when every use is such an operand).
        if b.offset != 0 || b.strides[..rank - 2].iter().any(|&st| st != 0) || !runtime_gemm(r, a, b, c) {
            return Err(Error::internal(format!("a weight in panels is used as {b:?}")));
        }
        let _ = writeln!(
            s,
            "{}mr_sgemm_panels_mt(threads, {m}, {n}, {k}, 1.0f, {pa}, {ra}, {ca}, {}, 0.0f, {pc}, {rc}, {cc}, {});",
            pad(depth),
            r.names[b.buf.0],
            at.unwrap_or("NULL")
        );
    } else if runtime_gemm(r, a, b, c) {
        let _ = writeln!(
            s,
            "{}mr_sgemm_mt(threads, {m}, {n}, {k}, 1.0f, {pa}, {ra}, {ca}, {pb}, {rb}, {cb}, 0.0f, {pc}, {rc}, {cc}, {});",
            pad(depth),
            at.unwrap_or("NULL")
        );
    } else {
        // Other element types: plain loops, accumulating in double; the epilogue (over
        // c's loop variables) follows each element.
        let (i, j, l) = (rank - 2, rank - 1, rank);
        let _ = writeln!(s, "{}for (int64_t i{i} = 0; i{i} < {m}; ++i{i}) for (int64_t i{j} = 0; i{j} < {n}; ++i{j}) {{", pad(depth));
        let _ = writeln!(s, "{}double acc = 0;", pad(depth + 1));
        let _ = writeln!(
            s,
            "{}for (int64_t i{l} = 0; i{l} < {k}; ++i{l}) acc += (double)({pa})[i{i} * {ra} + i{l} * {ca}] * (double)({pb})[i{l} * {rb} + i{j} * {cb}];",
            pad(depth + 1)
        );
        let _ = writeln!(s, "{}({pc})[i{i} * {rc} + i{j} * {cc}] = ({})acc;", pad(depth + 1), C.ty(tc));
        if let Some(e) = epilogue {
            let vars: Vec<usize> = (0..rank).collect();
            let value = r.expr(&crate::lower::Expr::Cast(Box::new(e.clone()), tc));
            let _ = writeln!(s, "{}{}[{}] = {value};", pad(depth + 1), r.names[c.buf.0], r.index(c, &vars));
        }
        let _ = writeln!(s, "{}}}", pad(depth));
    }
    if batch_loops {
        r.close_loops(s, rank - 2, 2);
    }
    Ok(())
}
