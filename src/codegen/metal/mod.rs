//! The Metal target: a [`Program`] as Metal Shading Language compute kernels for Apple
//! GPUs (`<name>.metal`), with host code in C (`<name>.c`) that encodes them in order
//! into the caller's command buffer through `runtime-metal/mithril_metal.h`, a small C
//! API over Metal whose Objective-C implementation (`mithril_metal.m`) the Makefile
//! builds on macOS. The same `.metal` source also compiles as C++17 against
//! `runtime-metal/metal_emu.h`, whose implementation of that API (`mithril_metal_emu.cpp`)
//! runs every kernel over its grid on the CPU: `run --target metal --emulate`, a test of
//! kernel logic where there is no Apple GPU.
//!
//! Metal is a [`Dialect`] of the shared C-style renderer: loop kernels are `kernel`
//! functions in a grid-stride loop (`[[thread_position_in_grid]]`), long reductions a
//! SIMD group per output combined by `simd_shuffle_down`. Buffers are `device` pointers
//! (`const` where only read), symbolic dimensions `constant long &`, each at its own
//! `[[buffer(n)]]` in argument order. Metal has no double: sums of floats accumulate in
//! float, and a kernel that computes in f64 is refused. Matrix products, convolutions,
//! pooling and softmax run in `runtime-metal/mithril_metal_kernels.h` (threadgroup
//! memory tiles; `simdgroup_matrix` under `--precision f16|bf16`), called from a
//! generated kernel with the kernel's epilogue as a functor (`program.rs`).
//!
//! Files written (for a model named `mlp`): `mlp.h`, `mlp.c`, `mlp.metal`, `mlp_emu.cpp`
//! (the kernels' table for emulation), the runtime ([`RUNTIME_FILES`]), `mlp_demo.c`
//! (the C target's demo) and its file readers ([`crate::codegen::c::DEMO_FILES`]), `Makefile`, and `weights.bin` when parameter values were given.

pub mod backend;
mod program;

use std::fmt::Write as _;

use crate::backend::Precision;
use crate::codegen::c::{Options, TemplateContext, Templates, DEMO};
use crate::codegen::cstyle::device::{grid_indices, grid_size, Device};
use crate::codegen::cstyle::{pad, Dialect, Param, ParamKind, Warp, C_OPS_HEADER};
use crate::codegen::names::identifier;
use crate::codegen::train::TrainLayout;
use crate::codegen::weights::device_weights;
use crate::error::Result;
use crate::ir::Dtype;
use crate::lower::Program;

/// What the host functions return when Metal refuses a command (`<NAME>_ERROR_METAL`;
/// `mr_metal_last_error()` says why): `mithril_metal.h`'s `MR_METAL_ERROR`.
pub const ERROR_METAL: i32 = -3;

/// The demo's exit status when no Metal device (or no metallib) can be opened.
pub const DEMO_NO_GPU_EXIT: i32 = crate::codegen::cuda::DEMO_NO_GPU_EXIT;

/// What the kernel library computes: what runtime-c does (f32 matrix products,
/// convolutions, pooling and softmax), without fused attention; row kernels as loop
/// kernels (a SIMD group a row).
pub const LIBRARY: crate::lower::Library = crate::lower::Library { rows: &[Dtype::F32], ..crate::codegen::c::LIBRARY };

/// The runtime, copied into every output directory: the scalar helpers, the kernel
/// library and the sizes its dispatches take, the host API and its two
/// implementations, and the shim that compiles Metal as C++ for emulation.
pub const RUNTIME_FILES: &[(&str, &str)] = &[
    ("mithril_ops.h", C_OPS_HEADER),
    ("mithril_metal_kernels.h", include_str!("../../../runtime-metal/mithril_metal_kernels.h")),
    ("mithril_metal_shapes.h", include_str!("../../../runtime-metal/mithril_metal_shapes.h")),
    ("mithril_metal.h", include_str!("../../../runtime-metal/mithril_metal.h")),
    ("mithril_metal.m", include_str!("../../../runtime-metal/mithril_metal.m")),
    ("mithril_metal_emu.cpp", include_str!("../../../runtime-metal/mithril_metal_emu.cpp")),
    ("metal_emu.h", include_str!("../../../runtime-metal/metal_emu.h")),
    ("metal_stdlib", include_str!("../../../runtime-metal/metal_stdlib")),
    ("simt_emu.h", include_str!("../../../runtime-emu/simt_emu.h")),
    ("simt_emu.cpp", include_str!("../../../runtime-emu/simt_emu.cpp")),
];

/// A SIMD group of 32 lanes; the loop kernels' threadgroups are 8 of them.
static SIMD: Warp = Warp {
    lanes: 32,
    first: "(long)(tid / 32)",
    count: "(long)(threads / 32)",
    lane: "(long)(tid % 32)",
    shuffle_down: "metal::simd_shuffle_down({v}, (ushort){off})",
    shuffle_xor: "metal::simd_shuffle_xor({v}, (ushort){off})",
    // Metal shuffles 32-bit values (and half, which no accumulator is).
    types: &[Dtype::F32, Dtype::I32],
};

/// The arguments the hardware supplies to a loop kernel, each `(name, attribute)`.
pub const LOOP_ATTRS: &[(&str, &str)] = &[("tid", "thread_position_in_grid"), ("threads", "threads_per_grid")];

/// Metal Shading Language 2.3 or newer (64-bit integers in kernels).
pub struct Metal;

impl Dialect for Metal {
    fn name(&self) -> &'static str {
        "Metal"
    }
    /// No f64 in Metal; f16/bf16 and the integer types other than i32 and i64 have
    /// no kernels here yet (their loads, stores and the host's files are untested).
    fn supports(&self, d: Dtype) -> bool {
        matches!(d, Dtype::F32 | Dtype::I32 | Dtype::I64 | Dtype::Bool)
    }
    fn ty(&self, d: Dtype) -> &'static str {
        match d {
            Dtype::F32 | Dtype::F64 | Dtype::F16 | Dtype::Bf16 => "float",
            Dtype::I32 => "int",
            Dtype::I64 => "long",
            Dtype::Bool => "uchar",
            Dtype::I8 => "char",
            Dtype::U8 => "uchar",
            Dtype::I16 => "short",
            Dtype::U16 => "ushort",
            Dtype::U32 => "uint",
            Dtype::U64 => "ulong",
            // (refused by `supports`)
            Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz | Dtype::F4E2M1 => "float",
            Dtype::I4 | Dtype::I2 => "char",
            Dtype::U4 | Dtype::U2 => "uchar",
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
        let _ = writeln!(s, "{}{} {{", pad(1), self.grid_loop(&grid_size(ext)));
        grid_indices(self, s, ext, 2);
        2
    }
    fn close_outer(&self, s: &mut String, _ext: &[String]) {
        let _ = writeln!(s, "{}}}", pad(1));
    }
    fn kernel_signature(&self, name: &str, params: &[Param]) -> String {
        let args: Vec<Arg> = params.iter().map(Arg::of).chain(LOOP_ATTRS.iter().map(|&(n, a)| Arg::Attr(n, a))).collect();
        signature(name, &args)
    }
    fn barrier(&self) -> Option<&'static str> {
        Some("metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);")
    }
    fn prelude(&self) -> &'static str {
        "#include <metal_stdlib>\n#include \"mithril_ops.h\"\n"
    }
    fn warp(&self) -> Option<&'static Warp> {
        Some(&SIMD)
    }
}

impl Device for Metal {
    fn grid_loop(&self, count: &str) -> String {
        format!("for (long gid = tid; gid < {count}; gid += threads)")
    }
    fn member(&self) -> &'static str {
        ""
    }
    fn pointer(&self, d: Dtype, konst: bool) -> String {
        format!("device {}{} *", if konst { "const " } else { "" }, self.ty(d))
    }
}

/// An argument of a generated kernel, from which both its declaration and its call
/// under emulation (`<name>_emu.cpp`) are written.
#[derive(Clone)]
pub enum Arg {
    /// A buffer of `ty` elements (`const` when only read).
    Buffer { name: String, ty: &'static str, konst: bool },
    /// A scalar passed by value (`constant ty &`): a run-time size, a learning rate.
    Scalar { name: String, ty: &'static str },
    /// The threadgroup memory at `[[threadgroup(0)]]`, as floats.
    Threadgroup,
    /// A value the hardware supplies: `(name, attribute)`.
    Attr(&'static str, &'static str),
}

impl Arg {
    fn of(p: &Param) -> Arg {
        match p.kind {
            ParamKind::Read => Arg::Buffer { name: p.name.clone(), ty: Metal.ty(p.dtype), konst: true },
            ParamKind::Write => Arg::Buffer { name: p.name.clone(), ty: Metal.ty(p.dtype), konst: false },
            ParamKind::Dim => Arg::Scalar { name: p.name.clone(), ty: "long" },
        }
    }
}

/// A kernel's signature over `args`: buffers and scalars at `[[buffer(i)]]` in order.
pub fn signature(name: &str, args: &[Arg]) -> String {
    let mut slot = 0;
    let decls: Vec<String> = args
        .iter()
        .map(|a| match a {
            Arg::Buffer { name, ty, konst } => {
                slot += 1;
                format!("device {}{ty} *{name} [[buffer({})]]", if *konst { "const " } else { "" }, slot - 1)
            }
            Arg::Scalar { name, ty } => {
                slot += 1;
                format!("constant {ty} &{name} [[buffer({})]]", slot - 1)
            }
            Arg::Threadgroup => "threadgroup float *tg [[threadgroup(0)]]".to_string(),
            Arg::Attr(name, attr) => format!("uint {name} [[{attr}]]"),
        })
        .collect();
    format!("kernel void {name}({})", decls.join(",\n    "))
}

/// The call of kernel `name` under emulation, from `metal_emu.h`'s bindings `a` and its
/// accessors (one per attribute, named after it). Plain C++ types: the shim's address
/// spaces are for kernels only.
pub fn emulated_call(name: &str, args: &[Arg]) -> String {
    let mut slot = 0;
    let values: Vec<String> = args
        .iter()
        .map(|a| match a {
            Arg::Buffer { ty, konst, .. } => {
                slot += 1;
                format!("({}{ty} *)a.buffer[{}]", if *konst { "const " } else { "" }, slot - 1)
            }
            Arg::Scalar { ty, .. } => {
                slot += 1;
                format!("*(const {ty} *)a.buffer[{}]", slot - 1)
            }
            Arg::Threadgroup => "(float *)mr_metal_emu::threadgroup_memory(0)".to_string(),
            Arg::Attr(_, attr) => format!("mr_metal_emu::{attr}()"),
        })
        .collect();
    format!("static void {name}_emu(const mr_metal_emu::Args &a)\n{{\n    {name}({});\n}}\n", values.join(",\n        "))
}

/// The files of the Metal target, by name, in a fixed order. `backward` (from `--grad`)
/// adds `<name>_backward` and, when it has a loss, `<name>_train_step`; the demo then
/// runs the backward pass. Matrix products and convolutions round as `precision`
/// allows.
pub fn emit(p: &Program, backward: Option<&Program>, opts: &Options, precision: Precision) -> Result<Vec<(String, Vec<u8>)>> {
    let name = identifier(&p.name);
    let upper = name.to_uppercase();
    let train = TrainLayout::of(p, backward)?;
    let mut ctx = TemplateContext::new(p, backward, train.as_ref(), &name, &upper, opts)?;
    ctx.metal = true;
    let sources = program::model(p, backward, train.as_ref(), &name, opts, precision)?;
    if let Some(at) = sources.flag {
        ctx.arena_size = at + crate::lower::align(1);
    }
    let tera = Templates::new(&[
        ("model.h", include_str!("../../../templates/metal/model.h.tera")),
        ("Makefile", include_str!("../../../templates/metal/Makefile.tera")),
    ])?;
    let (main, demo) = (ctx.context()?, ctx.for_demo().context()?);
    let mut files = vec![
        (format!("{name}.h"), tera.render("model.h", &main)?.into_bytes()),
        (format!("{name}.c"), sources.host.into_bytes()),
        (format!("{name}.metal"), sources.kernels.into_bytes()),
        (format!("{name}_emu.cpp"), sources.emulation.into_bytes()),
    ];
    files.extend(RUNTIME_FILES.iter().chain(crate::codegen::c::DEMO_FILES).map(|(file, text)| (file.to_string(), text.as_bytes().to_vec())));
    files.extend([
        (format!("{name}_demo.c"), tera.render(DEMO, &demo)?.into_bytes()),
        ("Makefile".to_string(), tera.render("Makefile", &main)?.into_bytes()),
    ]);
    files.extend(device_weights("Metal", p, opts)?);
    Ok(files)
}

/// The loop kernels of `p` as one `.metal` file (see [`crate::codegen::cstyle::device`]).
pub fn render_kernels(p: &Program) -> Result<String> {
    crate::codegen::cstyle::device::render_kernels(p, &Metal)
}
