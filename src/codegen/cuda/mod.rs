//! CUDA as a [`Dialect`] of the shared C-style renderer: the loop kernels of a
//! [`Program`] as `__global__` functions, one thread per output element in a
//! grid-stride loop (a launch may cover the output with fewer threads). C's scalar
//! spellings and `mithril_ops.h` serve as they are (its helpers become `__device__`
//! functions under nvcc). Only the kernels are rendered: the library kernels (matmul,
//! convolution, pooling, softmax) and the host code come with the CUDA target, which is
//! not a compile target yet.

use std::fmt::Write as _;

use crate::codegen::c::dialect::C;
use crate::codegen::cstyle::device::{grid_indices, grid_size};
use crate::codegen::cstyle::{pad, Dialect, Param, ParamKind};
use crate::error::Result;
use crate::ir::Dtype;
use crate::lower::Program;

/// CUDA C++ (nvcc, sm_75 and newer).
pub struct Cuda;

impl Dialect for Cuda {
    fn name(&self) -> &'static str {
        "CUDA"
    }
    fn supports(&self, d: Dtype) -> bool {
        C.supports(d)
    }
    fn ty(&self, d: Dtype) -> &'static str {
        C.ty(d)
    }
    fn open_outer(&self, s: &mut String, ext: &[String]) -> usize {
        let _ = writeln!(
            s,
            "{}for (int64_t gid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; gid < {}; gid += (int64_t)gridDim.x * blockDim.x) {{",
            pad(1),
            grid_size(ext)
        );
        grid_indices(self, s, ext, 2);
        2
    }
    fn close_outer(&self, s: &mut String, _ext: &[String]) {
        let _ = writeln!(s, "{}}}", pad(1));
    }
    fn kernel_signature(&self, name: &str, params: &[Param]) -> String {
        let args: Vec<String> = params
            .iter()
            .map(|p| match p.kind {
                ParamKind::Read => format!("const {} *__restrict__ {}", self.ty(p.dtype), p.name),
                ParamKind::Write => format!("{} *__restrict__ {}", self.ty(p.dtype), p.name),
                ParamKind::Dim => format!("int64_t {}", p.name),
            })
            .collect();
        format!("extern \"C\" __global__ void {name}({})", args.join(", "))
    }
    fn barrier(&self) -> Option<&'static str> {
        Some("__syncthreads();")
    }
    fn prelude(&self) -> &'static str {
        "#include <stdint.h>\n#include \"mithril_ops.h\"\n"
    }
}

/// The loop kernels of `p` as one `.cu` file (see [`crate::codegen::cstyle::device`]).
pub fn render_kernels(p: &Program) -> Result<String> {
    crate::codegen::cstyle::device::render_kernels(p, &Cuda)
}
