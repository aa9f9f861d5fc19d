//! Elementwise kernels with vector memory access: a thread computes 4 consecutive
//! elements of the output's last dimension, reading each operand that runs along it
//! with one 16-byte `float4` load and writing the 4 results with one `float4` store
//! (a quarter of the memory instructions, and 16-byte transactions). Operands that do
//! not depend on the last dimension (broadcasts) are read once per lane as scalars.
//!
//! A kernel qualifies when this is exact and in bounds whatever the data: an f32 output
//! and f32 vector operands, the last dimension static and a multiple of 4, every
//! vector access starting on a multiple of 4 elements, and no conditional load
//! (`Select`) or gather, which could read past a guard, and no use of the last
//! dimension's index as a value. 16-byte alignment of the buffers themselves is only
//! known at run time: the host launches this kernel when every vector buffer is
//! aligned (cudaMalloc's are), else the scalar kernel of the same step.

use std::fmt::Write as _;

use super::Cuda;
use crate::codegen::cstyle::device::{kernel_params, unflatten};
use crate::codegen::cstyle::kernel::product;
use crate::codegen::cstyle::{Dialect, Renderer};
use crate::codegen::names::comment_safe;
use crate::ir::Dtype;
use crate::lower::{BufId, Expr, Kernel, Step, View};

/// Elements per thread.
const WIDTH: u64 = 4;

/// A step's vector kernel.
pub struct VectorKernel {
    /// Its source, named `<scalar kernel>_v4`.
    pub source: String,
    /// The threads its grid covers.
    pub count: String,
    /// The buffers it reads or writes with vector accesses (the host checks that each
    /// is 16-byte aligned).
    pub buffers: Vec<BufId>,
}

/// Step `k` (`fname` its scalar kernel's name) as a vector kernel, when it qualifies.
pub fn vector_kernel(r: &Renderer<Cuda>, fname: &str, k: usize, step: &Step, ext: &[String]) -> Option<VectorKernel> {
    let Kernel::Map { out, expr } = &step.kernel else { return None };
    let p = r.p;
    let rank = out.shape.len();
    let last = rank.checked_sub(1)?;
    let n = out.shape[last];
    let f32_at = |v: &View| p.buffers[v.buf.0].dtype == Dtype::F32;
    // Every vector access starts on a multiple of WIDTH elements.
    let aligned = |v: &View, dims: &[usize]| v.offset % WIDTH as i64 == 0 && dims.iter().all(|&d| v.strides[d] % WIDTH as i64 == 0);
    let other_dims: Vec<usize> = (0..last).collect();
    if !f32_at(out) || ext[last] != n.to_string() || n % WIDTH != 0 || out.strides[last] != 1 || !aligned(out, &other_dims) {
        return None;
    }
    // The operands along the last dimension, each read as one vector.
    let mut vectors: Vec<(View, Vec<usize>)> = Vec::new();
    let mut ok = true;
    expr.walk(&mut |e| match e {
        Expr::Select(..) | Expr::Gather { .. } => ok = false,
        Expr::Index(v) if *v == last => ok = false,
        Expr::Load { view, vars } => {
            let Some(d) = vars.iter().position(|&v| v == last) else { return };
            if vars.iter().filter(|&&v| v == last).count() > 1 {
                ok = false;
                return;
            }
            match view.strides[d] {
                0 => {}
                1 => {
                    let others: Vec<usize> = (0..vars.len()).filter(|&i| i != d).collect();
                    if !f32_at(view) || !aligned(view, &others) {
                        ok = false;
                    } else if !vectors.iter().any(|(w, u)| w == view && u == vars) {
                        vectors.push((view.clone(), vars.clone()));
                    }
                }
                _ => ok = false,
            }
        }
        _ => {}
    });
    if !ok || vectors.is_empty() {
        return None;
    }
    // Loop variable `rank` is the first of the thread's elements along the last
    // dimension (the Map's own variables are 0..rank), `rank + 1` its quarter.
    let base = rank;
    let at = |view: &View, vars: &[usize]| {
        let vars: Vec<usize> = vars.iter().map(|&v| if v == last { base } else { v }).collect();
        format!("{} + {}", r.names[view.buf.0], r.index(view, &vars))
    };
    let quarter = (n / WIDTH).to_string();
    let mut outer = ext[..last].to_vec();
    outer.push(quarter.clone());
    let count = product(&outer);
    let params = kernel_params(r, step);
    let mut s = format!(
        "\n/* kernel {k}, {WIDTH} elements a thread with float4 loads and stores: {} */\n{}\n{{\n",
        comment_safe(&step.origins.join("; ")),
        r.d.kernel_signature(&format!("{fname}_v4"), &params)
    );
    let _ = writeln!(s, "    for (int64_t gid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; gid < {count}; gid += (int64_t)gridDim.x * blockDim.x) {{");
    let vars: Vec<usize> = (0..last).chain([base + 1]).collect();
    unflatten(r.d, &mut s, "gid", &vars, &outer, 2);
    let _ = writeln!(s, "        const int64_t i{base} = i{} * {WIDTH};", base + 1);
    for (j, (view, vars)) in vectors.iter().enumerate() {
        let _ = writeln!(s, "        const float4 v{j} = *reinterpret_cast<const float4 *>({});", at(view, vars));
    }
    let lanes = ["x", "y", "z", "w"];
    for (l, lane) in lanes.iter().enumerate() {
        let spell = |view: &View, vars: &[usize]| vectors.iter().position(|(w, u)| w == view && u == vars).map(|j| format!("v{j}.{lane}"));
        let lane_r = Renderer { p, d: r.d, names: r.names, loads: Some(&spell) };
        let value = lane_r.expr(&Expr::Cast(Box::new(expr.clone()), Dtype::F32));
        let _ = writeln!(s, "        const float l{l} = {value};");
    }
    let store = at(out, &(0..rank).collect::<Vec<_>>());
    let _ = writeln!(s, "        *reinterpret_cast<float4 *>({store}) = make_float4(l0, l1, l2, l3);\n    }}\n}}");
    let mut buffers: Vec<BufId> = vectors.iter().map(|(v, _)| v.buf).chain([out.buf]).collect();
    buffers.sort();
    buffers.dedup();
    Some(VectorKernel { source: s, count, buffers })
}
