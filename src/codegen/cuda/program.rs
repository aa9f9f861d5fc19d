//! One [`Program`] as CUDA C++: its constants in device memory, each loop kernel as a
//! `__global__` function (`cstyle::device`), each library kernel's epilogue as a functor
//! the runtime's kernel calls on every element it stores, and the host function that
//! launches them in order on the caller's stream.

use std::fmt::Write as _;

use super::vector::vector_kernel;
use super::Cuda;
use crate::codegen::c::dialect::C;
use crate::backend::Precision;
use crate::codegen::c::program::declare;
use crate::codegen::cstyle::device::{batch_decl, batch_dims, batch_list, device_kernel, epilogue_functor, index_check, kernel_params, library_kernel, library_operands, view_base};
use crate::codegen::cstyle::kernel::{extents, gather_checks, product, warp_reduce, warp_rows};
use crate::codegen::cstyle::{Dialect, Renderer};
use crate::codegen::names::{comment_safe, dim_params, identifier};
use crate::error::{Error, Result};
use crate::ir::Dtype;
use crate::lower::{BufId, Kernel, Program, Step, Storage};

/// Split-K's partial sums in the arena: `floats` floats from byte `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scratch {
    pub at: u64,
    pub floats: i64,
}

/// What a model keeps in its arena past its buffers, at byte offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workspace {
    /// Split-K's partial sums (when some product's plans split K).
    pub scratch: Option<Scratch>,
    /// The word that gather checks set when an index is out of range (when some program
    /// of the model gathers).
    pub flag: Option<u64>,
    /// cuBLASLt's workspace, [`super::cublaslt::WORKSPACE_BYTES`] from this byte (`--gemm
    /// cublaslt`, when some product may run on it).
    pub lt: Option<u64>,
}

/// One program as CUDA: constants, kernels and epilogue functors named after `name`,
/// and the host function `entry` that runs them on a stream, returning the header's
/// error codes (`<upper>_ERROR_*`). Matrix products and convolutions round as
/// `precision` allows.
/// `ws`: what the model keeps past its buffers in the arena.
#[allow(clippy::too_many_arguments)]
pub fn program_cu(p: &Program, d: &Cuda, name: &str, entry: &str, upper: &str, precision: Precision, ws: Workspace, s: &mut String) -> Result<()> {
    let flag = ws.flag;
    let (error_cuda, error_size) = (format!("{upper}_ERROR_CUDA"), format!("{upper}_ERROR_SIZE"));
    let names: Vec<String> = p.buffers.iter().enumerate().map(|(i, b)| format!("b{i}_{}", identifier(&b.name))).collect();
    let r = Renderer { p, d, names: &names, loads: None };
    r.check_all(|_| true)?;
    for (i, t) in p.consts.iter().enumerate() {
        let _ = write!(s, "static __device__ const {} {name}_const{i}[{}] = ", C.ty(t.dtype()), t.numel().max(1));
        r.initializer(t, s);
    }
    let dims = dim_params(p);
    let mut launches = String::new();
    let mut launches_head = String::new();
    for (k, step) in p.steps.iter().enumerate() {
        let comment = format!("/* kernel {k}: {} */", comment_safe(&step.origins.join("; ")));
        let ext = extents(step, &p.symbols, |i| dims[i].clone());
        let _ = writeln!(launches, "\n    {comment}");
        if let Some(at) = flag {
            for (g, check) in gather_checks(&step.kernel).iter().enumerate() {
                let (count, params) = index_check(&r, &format!("{name}_c{k}_{g}"), k, step, check, &ext, s);
                let args: String = params[..params.len() - 1].iter().map(|p| format!("{}, ", p.name)).collect();
                let _ = writeln!(launches, "    MR_LAUNCH({name}_c{k}_{g}, mr_blocks({count}), MR_THREADS, stream, {args}(int32_t *)(void *)(a + {at}));");
                let _ = writeln!(launches, "    if (cudaGetLastError() != cudaSuccess) {{\n        return {error_cuda};\n    }}");
            }
        }
        if library_kernel(&step.kernel).is_none() {
            s.push('\n');
            s.push_str(&device_kernel(&r, &format!("{name}_k{k}"), k, step)?);
            let args: Vec<String> = kernel_params(&r, step).into_iter().map(|p| p.name).collect();
            let (launch, count) = match &step.kernel {
                Kernel::Reduce { out, .. } if warp_reduce(&r, &step.kernel).is_some() => ("mr_warp_blocks", product(&ext[..out.shape.len()])),
                Kernel::Rows { out, cols, .. } => (if warp_rows(&r, &step.kernel).is_some() { "mr_warp_blocks" } else { "mr_blocks" }, product(&ext[..out.shape.len() - cols])),
                Kernel::Map { out, .. } | Kernel::Reduce { out, .. } | Kernel::ArgReduce { out, .. } => ("mr_blocks", product(&ext[..out.shape.len()])),
                _ => unreachable!("library kernels are handled below"),
            };
            let args = args.join(", ");
            let scalar = format!("MR_LAUNCH({name}_k{k}, {launch}({count}), MR_THREADS, stream, {args});");
            match vector_kernel(&r, &format!("{name}_k{k}"), k, step, &ext) {
                Some(v) => {
                    s.push_str(&v.source);
                    let aligned: Vec<String> = v.buffers.iter().map(|b| format!("mr_aligned16({})", names[b.0])).collect();
                    let _ = writeln!(
                        launches,
                        "    if ({}) {{\n        MR_LAUNCH({name}_k{k}_v4, mr_blocks({}), MR_THREADS, stream, {args});\n    }} else {{\n        {scalar}\n    }}",
                        aligned.join(" && "),
                        v.count
                    );
                }
                None => {
                    let _ = writeln!(launches, "    {scalar}");
                }
            }
            let _ = writeln!(launches, "    if (cudaGetLastError() != cudaSuccess) {{\n        return {error_cuda};\n    }}");
            continue;
        }
        let ep = epilogue_functor(&r, name, k, step, &ext, &|_| false, s)?.map_or(String::new(), |f| f.declare("        "));
        let (decl, call) = library_call(&r, &format!("{name}_lt{k}"), step, &ext, precision, ws, s)?;
        let _ = writeln!(launches, "    {{\n{ep}{decl}        if ({call} != cudaSuccess) {{\n            return {error_cuda};\n        }}\n    }}");
    }
    // Symbolic dimensions are trailing arguments, checked against their maxima.
    let decl: String = dims.iter().map(|n| format!(", int64_t {n}")).collect();
    let _ = writeln!(
        s,
        "\nextern \"C\" int {entry}(const void *weights, const void *const inputs[], void *const outputs[], void *arena, cudaStream_t stream{decl})\n{{"
    );
    for (param, (_, max)) in dims.iter().zip(&p.symbols) {
        let _ = writeln!(s, "    if ({param} < 1 || {param} > {max}) {{\n        return {error_size};\n    }}");
    }
    let mut used: Vec<BufId> = p.steps.iter().flat_map(|st| crate::codegen::cstyle::kernel::buffers_of(p, &st.kernel)).collect();
    for st in &p.steps {
        if let Kernel::Conv { scratch: Some(v), .. } = &st.kernel {
            used.push(v.buf);
        }
    }
    used.sort();
    used.dedup();
    let (consts, others): (Vec<BufId>, Vec<BufId>) = used.into_iter().partition(|b| matches!(p.buffers[b.0].storage, Storage::Const(_)));
    // The base pointers the buffers are found from, and the arguments no kernel uses.
    let uses = |f: fn(&Storage) -> bool| others.iter().any(|b| f(&p.buffers[b.0].storage));
    if uses(|s| matches!(s, Storage::Weight { .. })) {
        s.push_str("    const unsigned char *w = (const unsigned char *)weights;\n");
    } else {
        s.push_str("    (void)weights;\n");
    }
    if let Some(at) = flag {
        // A fresh call has seen no index out of range.
        let _ = writeln!(launches_head, "    if (cudaMemsetAsync(a + {at}, 0, sizeof(int32_t), stream) != cudaSuccess) {{\n        return {error_cuda};\n    }}");
    }
    let lt = ws.lt.is_some() && p.steps.iter().any(|st| super::cublaslt::epilogue(p, &st.kernel).is_some());
    if flag.is_some() || ws.scratch.is_some() || lt || uses(|s| matches!(s, Storage::Arena { .. })) {
        s.push_str("    unsigned char *a = (unsigned char *)arena;\n");
    } else {
        s.push_str("    (void)arena;\n");
    }
    if !uses(|s| matches!(s, Storage::Input(_))) {
        s.push_str("    (void)inputs;\n");
    }
    if !uses(|s| matches!(s, Storage::Output(_))) {
        s.push_str("    (void)outputs;\n");
    }
    declare(s, p, &names, &others, "", name);
    for b in consts {
        let Storage::Const(k) = p.buffers[b.0].storage else { continue };
        // A `__device__` array's address comes from the runtime, not from `&`.
        let ty = C.ty(p.buffers[b.0].dtype);
        let n = &names[b.0];
        let _ = writeln!(s, "    const {ty} *{n} = NULL;");
        let _ = writeln!(s, "    if (cudaGetSymbolAddress((void **)&{n}, {name}_const{k}) != cudaSuccess) {{\n        return {error_cuda};\n    }}");
    }
    s.push_str(&launches_head);
    s.push_str(&launches);
    s.push_str("    return 0;\n}\n");
    Ok(())
}

/// The runtime call (an expression of type `cudaError_t`) that runs a library kernel
/// once `ep` is declared, after the declarations it needs; `ext` are the extents of
/// its domain.
/// A matrix product or convolution gets the tile kernels its plans may choose
/// ([`super::plan::needs`]) and, when they split K, the arena's scratch; with cuBLASLt's
/// workspace (`ws.lt`), a product whose epilogue cuBLASLt computes may run on it:
/// `mr_cuda_sgemm_lt`, which caches its choices in the static `site` (declared in `s`).
fn library_call(r: &Renderer<Cuda>, site: &str, step: &Step, ext: &[String], precision: Precision, ws: Workspace, s: &mut String) -> Result<(String, String)> {
    let k = &step.kernel;
    // Exact f32, or tensor cores with the operands rounded (`mr_precision`).
    let tc = match precision {
        Precision::F32 => None,
        Precision::Tf32 => Some("MR_TF32"),
        Precision::Bf16 => Some("MR_BF16"),
        Precision::F16 => Some("MR_F16"),
    };
    require_f32(r, k)?;
    let ops = library_operands(r, k, ext)?;
    let (decl, batch) = match &ops.batched {
        Some((ext, views)) => {
            let ty = if matches!(k, Kernel::Attention { .. }) { "mr_attn_batch" } else { "mr_batch" };
            match batch_decl("CUDA", "        ", ty, ext, views)? {
                Some(decl) => (decl, "&batch"),
                None => (String::new(), "NULL"),
            }
        }
        None => (String::new(), ""),
    };
    let args = ops.args;
    let (mask, scratch) = match super::plan::needs(step, &r.p.symbols) {
        Some(n) => {
            let at = ws.scratch.filter(|_| n.scratch > 0);
            (format!("0x{:x}u", n.mask), at.map_or("mr_scratch{NULL, 0}".to_string(), |s| format!("mr_scratch{{(float *)(void *)(a + {}), {}}}", s.at, s.floats)))
        }
        None => (String::new(), String::new()),
    };
    if let (Some(at), Some(e), Kernel::Gemm { c, .. }) = (ws.lt, super::cublaslt::epilogue(r.p, k), k) {
        let rank = c.shape.len();
        let lead = batch_dims(&ext[..rank - 2]);
        let res = e.res.as_ref().map_or("NULL, 0, 0, {0, 0, 0, 0}".to_string(), |v| {
            format!("{}, {}, {}, {}", view_base(r, v), v.strides[rank - 2], v.strides[rank - 1], batch_list(&lead, &|d| v.strides[d].to_string()))
        });
        let bias = e.bias.as_ref().map_or("NULL".to_string(), |v| view_base(r, v));
        let lt = format!("        const mr_lt_epilogue lt = {{{}, {}, {bias}, {res}}};\n", e.act.constant(), r.literal(e.alpha, Dtype::F32));
        let _ = writeln!(s, "\n/* cuBLASLt's choices for {site}'s product, per shape (its epilogue: {}) */\nstatic mr_lt_site {site};", e.describe());
        let call = format!("mr_cuda_sgemm_lt<{}, {mask}>(&{site}, stream, {args}, {batch}, {scratch}, mr_lt_workspace{{a + {at}, {}}}, lt, ep)", tc.unwrap_or("MR_F32"), super::cublaslt::WORKSPACE_BYTES);
        return Ok((format!("{decl}{lt}"), call));
    }
    let call = match (k, tc) {
        (Kernel::Gemm { .. }, None) => format!("mr_cuda_sgemm<{mask}>(stream, {args}, {batch}, {scratch}, ep)"),
        (Kernel::Gemm { .. }, Some(p)) => format!("mr_cuda_sgemm_tc<{p}, {mask}>(stream, {args}, {batch}, {scratch}, ep)"),
        (Kernel::Conv { .. }, None) => format!("mr_cuda_conv2d<{mask}>(stream, {args}, {scratch}, ep)"),
        (Kernel::Conv { .. }, Some(p)) => format!("mr_cuda_conv2d_tc<{p}, {mask}>(stream, {args}, {scratch}, ep)"),
        (Kernel::Pool { .. }, _) => format!("mr_cuda_pool2d(stream, {args})"),
        (Kernel::Softmax { .. }, _) => format!("mr_cuda_softmax(stream, {args})"),
        (Kernel::Attention { .. }, _) => {
            let mask = super::plan::attention_mask(step, &r.p.symbols, tc.is_some()).unwrap_or_else(super::plan::all_attention);
            match tc {
                None => format!("mr_cuda_attention<0x{mask:x}u>(stream, {args}, {batch}, ep)"),
                Some(p) => format!("mr_cuda_attention_tc<{p}, 0x{mask:x}u>(stream, {args}, {batch}, ep)"),
            }
        }
        _ => return Err(Error::internal("loop kernels are launched, not library calls".to_string())),
    };
    Ok((decl, call))
}

/// The runtime's kernels are f32 (lowering gives other element types loops).
fn require_f32(r: &Renderer<Cuda>, k: &Kernel) -> Result<()> {
    match crate::codegen::c::library::call_buffers(k).into_iter().map(|b| r.p.buffers[b.0].dtype).find(|d| *d != Dtype::F32) {
        Some(d) => Err(Error::internal(format!("the CUDA runtime's kernels are f32, given {d}"))),
        None => Ok(()),
    }
}

/// Whether a kernel gathers (its indices are checked, [`index_check`]).
pub fn has_gather(k: &Kernel) -> bool {
    !gather_checks(k).is_empty()
}

/// `<name>_check`: whether the last call's gathers met an index out of range (waits for
/// the stream). `flag`: where the checks keep that, when the model gathers.
pub fn check_cu(name: &str, flag: Option<u64>, s: &mut String) {
    let upper = name.to_uppercase();
    let _ = writeln!(s, "\nextern \"C\" int {name}_check(const void *arena, cudaStream_t stream)\n{{");
    match flag {
        None => s.push_str("    (void)arena;\n    (void)stream;\n    return 0;\n}\n"),
        Some(at) => {
            let _ = writeln!(s, "    int32_t error = 0;");
            let _ = writeln!(
                s,
                "    if (cudaMemcpyAsync(&error, (const unsigned char *)arena + {at}, sizeof error, cudaMemcpyDeviceToHost, stream) != cudaSuccess ||\n        cudaStreamSynchronize(stream) != cudaSuccess) {{\n        return {upper}_ERROR_CUDA;\n    }}"
            );
            let _ = writeln!(s, "    return error != 0 ? {upper}_ERROR_INDEX : 0;\n}}");
        }
    }
}

/// `<name>_train_step`: the backward pass into the arena, then an SGD step with
/// momentum on each trained parameter on the same stream; waits for the stream to
/// return the loss before the step.
pub fn train_step_cu(b: &Program, t: &crate::codegen::train::TrainLayout, name: &str, s: &mut String) {
    let params = dim_params(b);
    let decl: String = params.iter().map(|n| format!(", int64_t {n}")).collect();
    let args: String = params.iter().map(|n| format!(", {n}")).collect();
    let ty = C.ty(t.scalar);
    let _ = writeln!(
        s,
        "\nextern \"C\" {ty} {name}_train_step(void *weights, const void *const inputs[], {ty} lr, {ty} momentum, void *state, void *arena,\n    cudaStream_t stream{decl})\n{{"
    );
    let _ = writeln!(s, "    unsigned char *w = (unsigned char *)weights;\n    unsigned char *a = (unsigned char *)arena;");
    let _ = writeln!(s, "    unsigned char *v = (unsigned char *)state;\n    void *outputs[{}];\n    {ty} loss = NAN;", b.outputs.len());
    let _ = writeln!(s, "    (void)w;\n    (void)v;");
    for (i, off) in t.outputs.iter().enumerate() {
        let _ = writeln!(s, "    outputs[{i}] = a + {off};");
    }
    let _ = writeln!(s, "    if ({name}_backward(weights, inputs, outputs, arena, stream{args}) != 0) {{\n        return NAN;\n    }}");
    for u in &t.updates {
        let (p, sfx) = (C.ty(u.dtype), if u.dtype == Dtype::F64 { "f64" } else { "f32" });
        let _ = writeln!(s, "    /* {} */", comment_safe(&u.name));
        let _ = writeln!(
            s,
            "    if (mr_cuda_sgd_{sfx}(stream, ({p} *)(void *)(w + {}), (const {p} *)outputs[{}], momentum != 0 ? ({p} *)(void *)(v + {}) : NULL, {}, ({p})lr, ({p})momentum) != cudaSuccess) {{\n        return NAN;\n    }}",
            u.offset, u.grad, u.state, u.len
        );
    }
    let _ = writeln!(
        s,
        "    if (cudaMemcpyAsync(&loss, outputs[{}], sizeof loss, cudaMemcpyDeviceToHost, stream) != cudaSuccess || cudaStreamSynchronize(stream) != cudaSuccess) {{\n        return NAN;\n    }}\n    return loss;\n}}",
        t.loss
    );
}

/// `<name>_graph_create`, `_graph_launch` and `_graph_destroy`: one forward call
/// captured from its stream into an executable CUDA graph, replayed with one launch.
/// `warm`: the forward pass runs once before the capture, so that what runs on first
/// use (cuBLASLt's algorithm choice, its kernels' loading) is done outside the graph.
pub fn graph_cu(p: &Program, name: &str, warm: bool, s: &mut String) {
    let error_cuda = format!("{}_ERROR_CUDA", name.to_uppercase());
    let params = dim_params(p);
    let decl: String = params.iter().map(|n| format!(", int64_t {n}")).collect();
    let args: String = params.iter().map(|n| format!(", {n}")).collect();
    let _ = writeln!(
        s,
        "\nextern \"C\" int {name}_graph_create(cudaGraphExec_t *exec, const void *weights, const void *const inputs[], void *const outputs[], void *arena,\n    cudaStream_t stream{decl})\n{{"
    );
    let _ = writeln!(s, "    cudaGraph_t graph;\n    int status;");
    if warm {
        let _ = writeln!(s, "    status = {name}_forward(weights, inputs, outputs, arena, stream{args});");
        let _ = writeln!(s, "    if (status != 0) {{\n        return status;\n    }}");
        let _ = writeln!(s, "    if (cudaStreamSynchronize(stream) != cudaSuccess) {{\n        return {error_cuda};\n    }}");
    }
    let _ = writeln!(s, "    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {{\n        return {error_cuda};\n    }}");
    let _ = writeln!(s, "    status = {name}_forward(weights, inputs, outputs, arena, stream{args});");
    let _ = writeln!(s, "    if (cudaStreamEndCapture(stream, &graph) != cudaSuccess) {{\n        return status != 0 ? status : {error_cuda};\n    }}");
    let _ = writeln!(s, "    if (status == 0 && cudaGraphInstantiate(exec, graph, 0ULL) != cudaSuccess) {{\n        status = {error_cuda};\n    }}");
    let _ = writeln!(s, "    (void)cudaGraphDestroy(graph);\n    return status;\n}}");
    let _ = writeln!(
        s,
        "\nextern \"C\" int {name}_graph_launch(cudaGraphExec_t exec, cudaStream_t stream)\n{{\n    return cudaGraphLaunch(exec, stream) == cudaSuccess ? 0 : {error_cuda};\n}}"
    );
    let _ = writeln!(s, "\nextern \"C\" void {name}_graph_destroy(cudaGraphExec_t exec)\n{{\n    (void)cudaGraphExecDestroy(exec);\n}}");
}

/// `<name>_load_weights`: a weights file in the blob's layout (`weights.bin`) copied
/// to device memory in chunks (`p`'s blob: a model without weights reads nothing).
pub fn load_weights_cu(p: &Program, name: &str, s: &mut String) {
    let upper = name.to_uppercase();
    if p.weights_size == 0 {
        let _ = writeln!(s, "\nextern \"C\" int {name}_load_weights(const char *path, void *weights_dev)\n{{\n    (void)path;\n    (void)weights_dev;\n    return 0;\n}}");
        return;
    }
    let _ = writeln!(
        s,
        r#"
extern "C" int {name}_load_weights(const char *path, void *weights_dev)
{{
    static const size_t chunk_size = 1u << 20;
    unsigned char *chunk;
    size_t done = 0;
    int status = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {{
        return {upper}_ERROR_FILE;
    }}
    if (cudaMallocHost((void **)&chunk, chunk_size) != cudaSuccess) {{
        fclose(f);
        return {upper}_ERROR_CUDA;
    }}
    while (status == 0 && done < {upper}_WEIGHTS_SIZE) {{
        const size_t want = {upper}_WEIGHTS_SIZE - done < chunk_size ? {upper}_WEIGHTS_SIZE - done : chunk_size;
        if (fread(chunk, 1, want, f) != want) {{
            status = {upper}_ERROR_FILE;
        }} else if (cudaMemcpy((unsigned char *)weights_dev + done, chunk, want, cudaMemcpyHostToDevice) != cudaSuccess) {{
            status = {upper}_ERROR_CUDA;
        }}
        done += want;
    }}
    /* Exactly the blob: a longer file (or /dev/zero) is not these weights. */
    if (status == 0 && fgetc(f) != EOF) {{
        status = {upper}_ERROR_FILE;
    }}
    (void)cudaFreeHost(chunk);
    fclose(f);
    return status;
}}"#
    );
}
