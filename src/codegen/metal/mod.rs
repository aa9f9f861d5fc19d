//! Metal Shading Language as a [`Dialect`] of the shared C-style renderer: the loop
//! kernels of a [`Program`] as `kernel` functions, one thread per output element
//! (`[[thread_position_in_grid]]`, bounds-checked: a dispatch rounds the grid up to
//! whole threadgroups). Buffers are `device` pointers (`const` where only read), the
//! symbolic dimensions `constant` scalars, each at its own `[[buffer(n)]]` index in
//! argument order. Metal has no double: sums of floats accumulate in float, and a
//! kernel that computes in f64 is refused. `mithril_ops.h` supplies the helpers (and
//! the few C math names Metal lacks). Only the kernels are rendered: the library kernels
//! and the host code come with the Metal target, which is not a compile target yet.

use std::fmt::Write as _;

use crate::codegen::cstyle::device::{grid_indices, grid_size};
use crate::codegen::cstyle::{pad, Dialect, Param, ParamKind};
use crate::error::Result;
use crate::ir::Dtype;
use crate::lower::Program;

/// Metal Shading Language 2.3 or newer (64-bit integers in kernels).
pub struct Metal;

impl Dialect for Metal {
    fn name(&self) -> &'static str {
        "Metal"
    }
    fn supports(&self, d: Dtype) -> bool {
        !matches!(d, Dtype::F64 | Dtype::F16 | Dtype::Bf16)
    }
    fn ty(&self, d: Dtype) -> &'static str {
        match d {
            Dtype::F32 | Dtype::F64 | Dtype::F16 | Dtype::Bf16 => "float",
            Dtype::I32 => "int",
            Dtype::I64 => "long",
            Dtype::Bool => "uchar",
        }
    }
    /// `metal::` has the float functions (overloaded, no `f` suffix) except `erf`,
    /// which `mithril_ops.h` defines as `erff`.
    fn math(&self, name: &str, _d: Dtype) -> String {
        match name {
            "erf" => "erff".to_string(),
            _ => format!("metal::{name}"),
        }
    }
    fn i64_literal(&self, v: i64) -> String {
        format!("((long){v})")
    }
    fn float_to_int(&self, s: &str, _from: Dtype, to: Dtype) -> String {
        let f = if to == Dtype::I32 { "mr_f2i32f" } else { "mr_f2i64f" };
        format!("{f}({s})")
    }
    fn accumulator(&self) -> Dtype {
        Dtype::F32
    }
    fn open_outer(&self, s: &mut String, ext: &[String]) -> usize {
        let _ = writeln!(s, "{p}const long gid = (long)tid;\n{p}if (gid >= {}) {{\n{p}    return;\n{p}}}", grid_size(ext), p = pad(1));
        grid_indices(self, s, ext, 1);
        1
    }
    fn close_outer(&self, _s: &mut String, _ext: &[String]) {}
    fn kernel_signature(&self, name: &str, params: &[Param]) -> String {
        let mut args: Vec<String> = params
            .iter()
            .enumerate()
            .map(|(i, p)| match p.kind {
                ParamKind::Read => format!("device const {} *{} [[buffer({i})]]", self.ty(p.dtype), p.name),
                ParamKind::Write => format!("device {} *{} [[buffer({i})]]", self.ty(p.dtype), p.name),
                ParamKind::Dim => format!("constant long &{} [[buffer({i})]]", p.name),
            })
            .collect();
        args.push("uint tid [[thread_position_in_grid]]".to_string());
        format!("kernel void {name}({})", args.join(",\n    "))
    }
    fn barrier(&self) -> Option<&'static str> {
        Some("threadgroup_barrier(mem_flags::mem_threadgroup);")
    }
    fn prelude(&self) -> &'static str {
        "#include <metal_stdlib>\n#include \"mithril_ops.h\"\n"
    }
}

/// The loop kernels of `p` as one `.metal` file (see [`crate::codegen::cstyle::device`]).
pub fn render_kernels(p: &Program) -> Result<String> {
    crate::codegen::cstyle::device::render_kernels(p, &Metal)
}
