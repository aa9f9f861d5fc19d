//! The CUDA target: a [`Program`] as CUDA C++ for NVIDIA GPUs, a shared library whose
//! functions take device pointers and a stream, with a header, a demo and a Makefile
//! that builds it with nvcc (or, with `-DMR_CUDA_EMULATE`, as host C++ whose kernels
//! run on the CPU: `runtime-cuda/cuda_emu.h`, a test of kernel logic).
//!
//! CUDA is a [`Dialect`] of the shared C-style renderer: the loop kernels of the
//! Program are `__global__` functions, one thread per output element in a grid-stride
//! loop, and long reductions a warp per output combined by shuffles. C's scalar
//! spellings and `mithril_ops.h` serve as they are (its helpers become `__device__`
//! functions under nvcc). Matrix products, convolutions, pooling and softmax run in
//! `runtime-cuda/mithril_cuda.h`'s kernels, with a kernel's epilogue as a functor they
//! call on each element they store (`program.rs`). The host code launches everything
//! in order on the caller's stream and never synchronises.
//!
//! Files written (for a model named `mlp`): `mlp.h`, `mlp.cu`, the runtime
//! ([`RUNTIME_FILES`]), `mlp_demo.cu` (the C target's demo, compiled as C++) and its file
//! readers (`mr_files.h`, `mr_files.c`: [`crate::codegen::c::DEMO_FILES`]), `Makefile`,
//! and `weights.bin` when parameter values were given.

pub mod backend;
pub mod cublaslt;
pub mod plan;
mod program;
pub mod report;
mod vector;

use std::fmt::Write as _;

use crate::codegen::c::dialect::C;
use crate::backend::{Accumulate, Gemm, Precision};
use crate::codegen::c::{Options, TemplateContext, Templates, DEMO};
use crate::codegen::cstyle::device::{grid_indices, grid_size, Device};
use crate::codegen::cstyle::{pad, Dialect, Param, ParamKind, Warp, C_OPS_HEADER};
use crate::codegen::names::{comment_safe, identifier};
use crate::codegen::train::TrainLayout;
use crate::codegen::weights::device_weights;
use crate::error::Result;
use crate::ir::Dtype;
use crate::lower::Program;

/// What the functions return when a CUDA call fails (a launch, most often): the
/// caller's `cudaGetLastError()` says why. `<NAME>_ERROR_CUDA` in the header.
pub const ERROR_CUDA: i32 = -3;

/// What `<name>_load_weights` returns when the file cannot be opened or is short:
/// `<NAME>_ERROR_FILE`.
pub const ERROR_FILE: i32 = -4;

/// The demo's exit status when no GPU or driver can be used.
pub const DEMO_NO_GPU_EXIT: i32 = 5;

/// What the kernel library computes (`runtime-cuda/mithril_cuda.h`): what runtime-c
/// does, and attention in one kernel with head dimensions up to `MR_ATTN_MAX_DIM`.
pub const LIBRARY: crate::lower::Library = crate::lower::Library { attention: &[Dtype::F32], attention_dim: 128, rows: &[Dtype::F32, Dtype::F64], ..crate::codegen::c::LIBRARY };

/// The runtime, copied into every output directory: the scalar helpers, the kernel
/// library, and the CPU emulation of CUDA that `-DMR_CUDA_EMULATE` builds use.
pub const RUNTIME_FILES: &[(&str, &str)] = &[
    ("mithril_ops.h", C_OPS_HEADER),
    ("mithril_cuda.h", include_str!("../../../runtime-cuda/mithril_cuda.h")),
    ("mr_cuda_plan.h", include_str!("../../../runtime-cuda/mr_cuda_plan.h")),
    ("mr_ptx.h", include_str!("../../../runtime-cuda/mr_ptx.h")),
    ("cuda_emu.h", include_str!("../../../runtime-cuda/cuda_emu.h")),
    ("cuda_emu.cpp", include_str!("../../../runtime-cuda/cuda_emu.cpp")),
    ("simt_emu.h", include_str!("../../../runtime-emu/simt_emu.h")),
    ("simt_emu.cpp", include_str!("../../../runtime-emu/simt_emu.cpp")),
];

/// The cuBLASLt glue (`--gemm cublaslt`), written only for a model that uses it: it
/// compiles against cuBLASLt's header, which nvcc alone does not have.
pub const CUBLASLT_FILE: (&str, &str) = ("mr_cublaslt.h", include_str!("../../../runtime-cuda/mr_cublaslt.h"));

/// A warp of 32 lanes; a block's threads are 8 warps (`MR_THREADS` is 256).
static WARP: Warp = Warp {
    lanes: 32,
    first: "((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32",
    count: "((int64_t)gridDim.x * blockDim.x / 32)",
    lane: "(int64_t)(threadIdx.x % 32)",
    shuffle_down: "__shfl_down_sync(0xffffffffu, {v}, {off})",
    shuffle_xor: "__shfl_xor_sync(0xffffffffu, {v}, {off})",
    types: &[Dtype::F32, Dtype::F64, Dtype::I32, Dtype::I64],
};

/// CUDA C++ (nvcc, sm_75 and newer), its float sums accumulating in `acc`
/// (`--accumulate`).
pub struct Cuda {
    acc: Dtype,
}

impl Cuda {
    /// Sums in f32, in blocks ([`crate::codegen::cstyle::kernel`]'s warp sums): the default.
    pub const F32: Cuda = Cuda { acc: Dtype::F32 };
    /// Sums in f64, as the interpreter's.
    pub const F64: Cuda = Cuda { acc: Dtype::F64 };

    /// The dialect whose sums accumulate as `a` says.
    pub fn accumulating(a: Accumulate) -> &'static Cuda {
        match a {
            Accumulate::F32 => &Cuda::F32,
            Accumulate::F64 => &Cuda::F64,
        }
    }
}

impl Dialect for Cuda {
    fn name(&self) -> &'static str {
        "CUDA"
    }
    /// f32, f64, i32, i64 and bool: f16 and bf16 tensors and the other integer types
    /// have no CUDA kernels yet (the C dialect's loads, stores and the host's files for
    /// them are untested here; `--precision` runs the products in f16 or bf16 instead).
    fn supports(&self, d: Dtype) -> bool {
        matches!(d, Dtype::F32 | Dtype::F64 | Dtype::I32 | Dtype::I64 | Dtype::Bool)
    }
    fn ty(&self, d: Dtype) -> &'static str {
        C.ty(d)
    }
    fn accumulator(&self) -> Dtype {
        self.acc
    }
    fn open_outer(&self, s: &mut String, ext: &[String]) -> usize {
        let _ = writeln!(s, "{}{} {{", pad(1), self.grid_loop(&grid_size(ext)));
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
    fn warp(&self) -> Option<&'static Warp> {
        Some(&WARP)
    }
}

impl Device for Cuda {
    fn grid_loop(&self, count: &str) -> String {
        format!("for (int64_t gid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; gid < {count}; gid += (int64_t)gridDim.x * blockDim.x)")
    }
    fn member(&self) -> &'static str {
        "__device__ "
    }
    fn pointer(&self, d: Dtype, konst: bool) -> String {
        format!("{}{} *", if konst { "const " } else { "" }, self.ty(d))
    }
}

/// How matrix products and convolutions run: `--precision` and `--gemm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Products {
    pub precision: Precision,
    pub gemm: Gemm,
}

/// The files of the CUDA target, by name, in a fixed order. `backward` (from `--grad`)
/// adds `<name>_backward` and, when it has a loss, `<name>_train_step`; the demo then
/// runs the backward pass.
/// Matrix products and convolutions run as `products` says; float sums accumulate in
/// `d`'s accumulator.
pub fn emit(p: &Program, backward: Option<&Program>, opts: &Options, products: Products, d: &Cuda) -> Result<Vec<(String, Vec<u8>)>> {
    let name = identifier(&p.name);
    let upper = name.to_uppercase();
    let train = TrainLayout::of(p, backward)?;
    let mut ctx = TemplateContext::new(p, backward, train.as_ref(), &name, &upper, opts)?;
    ctx.cuda = true;
    // Split-K's partial sums, then the word where gather checks flag an index out of
    // range, after every program's arena.
    let programs = || std::iter::once(p).chain(backward);
    let floats = plan::scratch_floats(p, backward);
    let scratch = (floats > 0).then(|| {
        let at = crate::lower::align(ctx.arena_size);
        ctx.arena_size = at + crate::lower::align(floats as u64 * 4);
        program::Scratch { at, floats }
    });
    let gathers = programs().any(|p| p.steps.iter().any(|s| program::has_gather(&s.kernel)));
    let flag = gathers.then(|| crate::lower::align(ctx.arena_size));
    if let Some(at) = flag {
        ctx.arena_size = at + crate::lower::align(1);
    }
    // cuBLASLt's workspace, when some product may run on it.
    let lt = (products.gemm == Gemm::Cublaslt && programs().any(|p| p.steps.iter().any(|s| cublaslt::epilogue(p, &s.kernel).is_some()))).then(|| {
        // cuBLASLt wants its workspace 256-byte aligned, as cudaMalloc's arena is.
        let at = ctx.arena_size.div_ceil(256) * 256;
        ctx.arena_size = at + cublaslt::WORKSPACE_BYTES;
        at
    });
    let ws = program::Workspace { scratch, flag, lt };
    let tera = Templates::new(&[
        ("model.h", include_str!("../../../templates/cuda/model.h.tera")),
        ("Makefile", include_str!("../../../templates/cuda/Makefile.tera")),
    ])?;
    let (main, demo) = (ctx.context()?, ctx.for_demo().context()?);
    let mut files = vec![
        (format!("{name}.h"), tera.render("model.h", &main)?.into_bytes()),
        (format!("{name}.cu"), model_cu(p, backward, train.as_ref(), &name, opts, products.precision, d, ws)?.into_bytes()),
    ];
    let lt_file = ws.lt.map(|_| &CUBLASLT_FILE);
    files.extend(RUNTIME_FILES.iter().chain(lt_file).chain(crate::codegen::c::DEMO_FILES).map(|(file, text)| (file.to_string(), text.as_bytes().to_vec())));
    files.extend([
        (format!("{name}_demo.cu"), tera.render(DEMO, &demo)?.into_bytes()),
        ("Makefile".to_string(), tera.render("Makefile", &main)?.into_bytes()),
    ]);
    files.extend(device_weights("CUDA", p, opts)?);
    Ok(files)
}

/// `<name>.cu`: the forward pass, and with `--grad` the backward pass and the training
/// step.
#[allow(clippy::too_many_arguments)]
fn model_cu(p: &Program, backward: Option<&Program>, train: Option<&TrainLayout>, name: &str, opts: &Options, precision: Precision, d: &Cuda, ws: program::Workspace) -> Result<String> {
    let upper = name.to_uppercase();
    let mut s = String::new();
    let _ = writeln!(s, "/* {name}.cu: generated by mithrilc {} from {}. Do not edit. */", env!("CARGO_PKG_VERSION"), comment_safe(&opts.source));
    let _ = writeln!(s, "#include <math.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n");
    let _ = writeln!(s, "#include \"{name}.h\"\n#include \"mithril_ops.h\"\n#include \"mithril_cuda.h\"");
    if ws.lt.is_some() {
        let _ = writeln!(s, "#include \"{}\"", CUBLASLT_FILE.0);
    }
    s.push('\n');
    program::program_cu(p, d, name, &format!("{name}_forward"), &upper, precision, ws, &mut s)?;
    if let Some(b) = backward {
        let _ = writeln!(s, "\n/* The backward pass: the forward pass again, then the gradients. */");
        program::program_cu(b, d, &format!("{name}_bwd"), &format!("{name}_backward"), &upper, precision, ws, &mut s)?;
        if let Some(t) = train {
            program::train_step_cu(b, t, name, &mut s);
        }
    }
    program::graph_cu(p, name, ws.lt.is_some(), &mut s);
    program::check_cu(name, ws.flag, &mut s);
    program::load_weights_cu(p, name, &mut s);
    Ok(s)
}

/// The loop kernels of `p` as one `.cu` file (see [`crate::codegen::cstyle::device`]).
pub fn render_kernels(p: &Program) -> Result<String> {
    crate::codegen::cstyle::device::render_kernels(p, &Cuda::F32)
}
