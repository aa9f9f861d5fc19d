//! The ggml target: C that builds the model's ggml graph once and computes it on ggml's
//! CPU backend with a caller-chosen thread count, its weights in a GGUF file.
//!
//! A graph target (`codegen::graph`): [`writer`] turns each IR node into ggml calls;
//! [`gguf`] writes the parameters (and the graph's constants) as the GGUF file the
//! library loads. Files written for a model named `mlp`: `mlp.h` (`mlp_init`,
//! `mlp_forward`, `mlp_free`; `docs/ggml.md`), `mlp.c`, `mlp_demo.c` and its file
//! readers and command line ([`crate::codegen::c::DEMO_FILES`]: `mr_files.h`,
//! `mr_files.c`), `Makefile` (`libmlp.so` and the demo, linked against ggml with an
//! rpath) and, when the parameters' values are given, `mlp.gguf`.
//!
//! Limits: static shapes of rank 4 (higher only where leading axes merge alike:
//! `writer::merges_alike`); f32 arithmetic, booleans as 0 and 1,
//! integers only as gather indices or compile-time constants. What ggml cannot express
//! (integer arithmetic, products over an axis, 3-d windows, row-strided slices,
//! non-zero padding) is refused by [`writer::lacks`], every node at once; ops it
//! has no kernel for (where, pow, erf, isnan, backwards slices), or whose kernel drops
//! NaN (relu, sign, max, min, comparisons, max pooling), are small C kernels run as
//! ggml custom ops. Inputs and outputs have the model's element types; `_forward`
//! checks and converts them (gather indices in their own type before narrowing them to
//! ggml's int32 rows). Tensors of no elements are never made (ggml cannot allocate
//! them).
//! `--quantize` stores the weights of matrix products as f16, bf16, q8_0 or q4_0
//! ([`Quantize`]); everything else stays f32.

pub mod backend;
pub mod gguf;
pub mod writer;

use std::collections::BTreeMap;

use serde::Serialize;

use super::graph::write_graph;
use super::names::{c_string, comment_safe, identifier, port_label};
use crate::backend::Quantize;
use crate::error::{Error, Result};
use crate::ir::{Dtype, Graph, Op, ValueId};
use crate::tensor::RawTensor;
use writer::Writer;

/// The GGUF type `--quantize` stores the weights of matrix products in (the target's
/// capabilities refuse int8 before it emits).
fn tensor_type(q: Quantize) -> Result<gguf::TensorType> {
    match q {
        Quantize::F32 => Ok(gguf::TensorType::F32),
        Quantize::F16 => Ok(gguf::TensorType::F16),
        Quantize::Bf16 => Ok(gguf::TensorType::Bf16),
        Quantize::Q8_0 => Ok(gguf::TensorType::Q8_0),
        Quantize::Q4_0 => Ok(gguf::TensorType::Q4_0),
        Quantize::Int8 => Err(Error::internal("--quantize int8 passed the ggml target's check".to_string())),
    }
}

/// What the ggml target's emit takes.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The model file's name, for generated comments.
    pub source: String,
    /// The parameters' values by name: with them (all of them) the GGUF file is
    /// written; without them, the C alone (its GGUF file made by a later compile).
    pub weights: Option<BTreeMap<String, RawTensor>>,
    pub quantize: Quantize,
}

/// The status the demo exits with when the library cannot be initialised from the GGUF
/// file (the C target's status for a refused input: `run_demo` reports it as the user's).
pub const DEMO_REJECTED_EXIT: i32 = crate::codegen::c::DEMO_REJECTED_EXIT;

/// A parameter's name as a GGUF tensor name: itself when it fits ggml's names, else its
/// start and a hash of the whole name (every parameter name is in `mithrilc.parameters`).
pub fn gguf_name(name: &str) -> String {
    if name.len() <= gguf::MAX_NAME {
        return name.to_string();
    }
    let mut end = gguf::MAX_NAME - 17;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}~{:016x}", &name[..end], crate::hash::fnv1a(name.as_bytes()))
}

/// The GGUF name of a constant of the graph (node `v`).
fn const_name(v: ValueId) -> String {
    format!("mithrilc.const.{}", v.0)
}

/// The values of a node stored in the GGUF file other than a parameter: a constant, or
/// an iota (known at compile time).
fn known_value(graph: &Graph, v: ValueId) -> Option<Vec<f32>> {
    match &graph.node(v).op {
        Op::Constant(c) => Some(graph.consts[c.0 as usize].values().map(|x| x as f32).collect()),
        Op::Iota { shape, axis, .. } => {
            let dims = shape.as_known()?;
            let inner: u64 = dims[axis + 1..].iter().product();
            let n: u64 = dims.iter().product();
            Some((0..n).map(|i| ((i / inner) % dims[*axis]) as f32).collect())
        }
        _ => None,
    }
}

#[derive(Serialize)]
struct Port {
    label: String,
    comment: String,
    /// The .npy element type.
    descr: &'static str,
    /// What the library takes or gives, the type the model declares: float, uint8_t
    /// (bool), int32_t or int64_t.
    ctype: &'static str,
    /// The same as a code of the library's `struct port` (`T_FLOAT` ...).
    code: &'static str,
    rank: usize,
    /// The shape, comma-separated (`0` for a scalar, whose rank is 0).
    shape: String,
    /// The symbol of each dimension for the demo's `mr_port`: `-1` each (static), one
    /// `-1` for a scalar (C has no empty array).
    syms: String,
    size: u64,
    /// For a gather's indices, the rows they index (0: not indices): `_forward` checks
    /// them against `[-rows, rows)`, since ggml_get_rows aborts on one out of range.
    rows: u64,
    /// Whether `_forward` counts negative indices from the end as it narrows them (they
    /// index tables of one size); otherwise it refuses them.
    wrap: u8,
}

#[derive(Serialize)]
struct Stored {
    name: String,
    ty: &'static str,
    ne: String,
}

/// Whether parameter `v` is read only as a matrix product's weight (through its
/// transposition), and so may be quantized; ggml's quantized products also need rows
/// (`ne0`) a whole number of blocks long.
fn product_weight(graph: &Graph, v: ValueId, ty: gguf::TensorType) -> bool {
    let users: Vec<ValueId> = graph.ids().filter(|&u| graph.node(u).args.contains(&v)).collect();
    let row = graph.ty(v).shape.as_known().and_then(|s| s.last().copied()).unwrap_or(0);
    !users.is_empty()
        && graph.ty(v).rank() == 2
        && row.is_multiple_of(ty.block() as u64)
        && !graph.outputs.iter().any(|o| o.value == v)
        && users.iter().all(|&u| writer::folded_into_products(graph, u) && graph.node(u).args[0] == v)
}

/// The files of the ggml target for `graph`, by name in a fixed order.
pub fn emit(graph: &Graph, opts: &Options) -> Result<Vec<(String, Vec<u8>)>> {
    let name = identifier(&graph.name);
    let mut w = Writer::default();
    let mut tensors = Vec::new();
    let mut types = BTreeMap::new();
    for v in graph.ids() {
        let node = graph.node(v);
        let shape = node.ty.shape.as_known().unwrap_or_default();
        // (a tensor of no elements is never made: `writer::Writer::node`)
        if shape.contains(&0) {
            continue;
        }
        let (stored, data, ty) = match node.op {
            Op::Param => {
                let pname = node.name.clone().unwrap_or_default();
                let q = tensor_type(opts.quantize)?;
                let ty = if q != gguf::TensorType::F32 && product_weight(graph, v, q) { q } else { gguf::TensorType::F32 };
                let data = match &opts.weights {
                    Some(weights) => {
                        let t = weights.get(&pname).ok_or_else(|| Error::user(format!("the ggml target writes the weights into {name}.gguf: parameter `{pname}` has no value in the parameters")))?;
                        if t.shape != shape {
                            return Err(Error::user(format!("parameter `{pname}` is {:?} in the parameters, {:?} in the model", t.shape, shape)));
                        }
                        // Encoded from the mapped file as it is read, its pages let go after.
                        let data = ty.encode(t.values().map(|x| x as f32));
                        t.release();
                        data
                    }
                    None => Vec::new(),
                };
                (gguf_name(&pname), data, ty)
            }
            _ => match known_value(graph, v) {
                Some(values) if writer::indices_only(graph, v) => (const_name(v), gguf::TensorType::I32.encode(values), gguf::TensorType::I32),
                Some(values) => (const_name(v), gguf::TensorType::F32.encode(values), gguf::TensorType::F32),
                None => continue,
            },
        };
        let dims: Vec<u64> = if shape.is_empty() { vec![1] } else { shape.iter().rev().copied().collect() };
        w.stored.insert(v, stored.clone());
        types.insert(stored.clone(), ty);
        tensors.push(gguf::Tensor { name: stored, dims, ty, data });
    }
    write_graph(graph, &mut w)?;
    let params: Vec<String> = graph.params().filter_map(|v| graph.node(v).name.clone()).collect();
    let metadata = vec![
        ("general.architecture".to_string(), gguf::Value::Str("mithrilc".into())),
        ("general.name".to_string(), gguf::Value::Str(graph.name.clone())),
        ("mithrilc.model".to_string(), gguf::Value::Str(name.clone())),
        ("mithrilc.version".to_string(), gguf::Value::Str(env!("CARGO_PKG_VERSION").into())),
        ("mithrilc.source".to_string(), gguf::Value::Str(opts.source.clone())),
        ("mithrilc.parameters".to_string(), gguf::Value::Strs(params)),
        ("mithrilc.quantize".to_string(), gguf::Value::Str(opts.quantize.name().into())),
    ];

    let index_rows = crate::codegen::graph::gather_index_rows(graph);
    let port = |v: ValueId, label: &str| -> Port {
        let ty = graph.ty(v);
        let shape = ty.shape.as_known().unwrap_or_default();
        // (every other type `writer::lacks` refuses)
        let (descr, ctype, code) = match ty.dtype {
            Dtype::Bool => ("|b1", "uint8_t", "T_BOOL"),
            Dtype::I32 => ("<i4", "int32_t", "T_INT32"),
            Dtype::I64 => ("<i8", "int64_t", "T_INT64"),
            _ => ("<f4", "float", "T_FLOAT"),
        };
        Port {
            label: c_string(&port_label(label)),
            comment: comment_safe(&format!("{label}: {ty}")),
            descr,
            ctype,
            code,
            rank: shape.len(),
            shape: if shape.is_empty() { "0".into() } else { shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ") },
            syms: vec!["-1"; shape.len().max(1)].join(", "),
            size: shape.iter().product(),
            rows: index_rows.get(&v).map_or(0, |r| r.0),
            wrap: u8::from(index_rows.get(&v).is_some_and(|r| r.0 == r.1)),
        }
    };
    let inputs: Vec<Port> = graph.inputs().map(|v| port(v, graph.node(v).name.as_deref().unwrap_or_default())).collect();
    let outputs: Vec<Port> = graph.outputs.iter().map(|o| port(o.value, &o.name)).collect();
    let stored: Vec<Stored> = w
        .loads
        .iter()
        .map(|(n, shape)| Stored { name: c_string(n), ty: types.get(n).map_or("F32", |t| t.ggml_name()), ne: shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ") })
        .collect();
    let mut ctx = tera::Context::new();
    ctx.insert("name", &name);
    ctx.insert("NAME", &name.to_uppercase());
    ctx.insert("version", env!("CARGO_PKG_VERSION"));
    ctx.insert("source", &comment_safe(&opts.source));
    let fed = || inputs.iter().zip(&w.inputs);
    ctx.insert("checks_indices", &fed().any(|(_, t)| t.index != "NULL"));
    ctx.insert("stages_numbers", &fed().any(|(p, t)| t.number != "NULL" && p.code != "T_FLOAT"));
    ctx.insert("converts_outputs", &outputs.iter().zip(&w.outputs).any(|(p, t)| t != "NULL" && p.code != "T_FLOAT"));
    ctx.insert("inputs", &inputs);
    ctx.insert("outputs", &outputs);
    ctx.insert("stored", &stored);
    ctx.insert("code", w.code.trim_end());
    ctx.insert("makes_tensors", &(w.tensors > 0));
    ctx.insert("kernels", w.customs.iter().map(|k| writer::custom_kernel(k)).collect::<Vec<_>>().join("\n").trim_end());
    ctx.insert("input_vars", &w.inputs);
    ctx.insert("output_vars", &w.outputs);
    // Every tensor the calls create, the weights' views included, and room for the graph
    // to list each once as a node or a leaf.
    ctx.insert("graph_size", &(w.tensors + w.loads.len() + 16));
    ctx.insert("rejected_exit", &DEMO_REJECTED_EXIT);
    let mut tera = tera::Tera::default();
    let templates = [
        ("model.h", include_str!("../../../templates/ggml/model.h.tera")),
        ("model.c", include_str!("../../../templates/ggml/model.c.tera")),
        ("demo.c", include_str!("../../../templates/ggml/demo.c.tera")),
        ("Makefile", include_str!("../../../templates/ggml/Makefile.tera")),
    ];
    tera.add_raw_templates(templates).map_err(|e| Error::internal(format!("ggml templates: {e:?}")))?;
    tera.autoescape_on(vec![]);
    let render = |t: &str| tera.render(t, &ctx).map(String::into_bytes).map_err(|e| Error::internal(format!("ggml template {t}: {e:?}")));
    let mut files = vec![
        (format!("{name}.h"), render("model.h")?),
        (format!("{name}.c"), render("model.c")?),
        (format!("{name}_demo.c"), render("demo.c")?),
        ("Makefile".to_string(), render("Makefile")?),
    ];
    // The demo's file readers and command line, the C target's demo's.
    files.extend(crate::codegen::c::DEMO_FILES.iter().map(|(file, text)| (file.to_string(), text.as_bytes().to_vec())));
    if opts.weights.is_some() {
        files.push((format!("{name}.gguf"), gguf::write(&metadata, tensors)));
    }
    Ok(files)
}
