//! The C target: a [`Program`] as portable C99 with no allocation, plus the runtime,
//! a Makefile and a demo program.
//!
//! Symbolic dimensions (bounded by `--max`) are `int64_t` arguments of the forward
//! functions, stored in the kernels' context as `dims[i]`; loops over them run to the
//! run-time value while every buffer keeps the layout of the maxima. The runtime's
//! kernels are f32 ([`LIBRARY`]); lowering gives other element types loop kernels.
//! [`PASSES`] (`layout.rs`) lay out the program for the runtime before fusion.
//! Limits: f16/bf16 have no C arithmetic yet.
//!
//! Weights ([`WeightsMode`]): `file` writes `weights.bin` (the layout of
//! `<NAME>_WEIGHT_<i>_OFFSET`) for the caller to load or map; `embed` also assembles it
//! into the library with `.incbin` (no C compiler parses megabytes of literals) as
//! `<name>_weights_data`; `embed-c` compiles it in as C instead, for toolchains
//! without `.incbin` ([`embed_c`]); `safetensors` writes no blob and the demo reads the
//! parameters from a safetensors file at run time.
//!
//! Files written (for a model named `mlp`): `mlp.h`, `mlp.c`, the runtime
//! ([`RUNTIME_FILES`]: `mithril_ops.h`, `mithril_runtime.h` and the `mr_*` files),
//! `mlp_demo.c` and its file readers ([`DEMO_FILES`]: `mr_files.h`, `mr_files.c`),
//! `Makefile`, and `weights.bin` (+ `mlp_weights.S` when embedded) when parameter values
//! were given.

pub mod backend;
pub mod dialect;
pub mod layout;
pub(crate) mod library;
pub(crate) mod program;

use program::program_c;

use std::fmt::Write as _;

use serde::Serialize;

use super::cstyle::{Dialect, C_OPS_HEADER};
use dialect::C;
use super::names::{c_string, comment_safe, dim_params, identifier, port_label};
use super::train::TrainLayout;
use super::weights::weights_blob;
pub use crate::backend::WeightsMode;
use crate::error::{Error, Result};
use crate::ir::Dtype;
use crate::lower::{Layout, Program, Storage};

/// What the runtime computes (`mithril_runtime.h`): f32 matrix products, 1-d and 2-d
/// convolution and pooling, and softmax.
pub const LIBRARY: crate::lower::Library = crate::lower::Library {
    gemm: &[Dtype::F32],
    conv: &[Dtype::F32],
    pool: &[Dtype::F32],
    softmax: &[Dtype::F32],
    window_rank: 2,
    attention: &[],
    attention_dim: 0,
    rows: &[],
};

/// How the C target stores the weights `--quantize` narrows (the values it takes:
/// `CTarget::quantizations`).
pub fn stored(quantize: crate::backend::Quantize) -> Result<crate::lower::Stored> {
    use crate::backend::Quantize;
    use crate::lower::Stored;
    crate::backend::check_quantize(&backend::CTarget, quantize)?;
    match quantize {
        Quantize::F32 => Ok(Stored::F32),
        Quantize::F16 => Ok(Stored::F16),
        Quantize::Bf16 => Ok(Stored::Bf16),
        Quantize::Q8_0 => Ok(Stored::Q8_0),
        Quantize::Int8 => Ok(Stored::Int8),
        Quantize::Q4_0 => Err(Error::internal("--quantize q4_0 passed the C target's check".to_string())),
    }
}

/// The runtime's name for a stored form (`MR_Q8_0`, `mithril_runtime.h`).
pub fn runtime_type(stored: crate::lower::Stored) -> &'static str {
    use crate::lower::Stored;
    match stored {
        Stored::F32 => "MR_F32",
        Stored::F16 => "MR_F16",
        Stored::Bf16 => "MR_BF16",
        Stored::Q8_0 => "MR_Q8_0",
        Stored::Int8 => "MR_INT8",
    }
}

/// The C target's program passes, run between lowering and `fuse`.
pub const PASSES: &[crate::passes::ProgramPass] = &[("c-layout", |p, o| layout::run(p, o.quantize))];

/// [`PASSES`] keeping every weight row-major (training: a training step updates the
/// weights in place with gradients in that layout, and a forward and a backward
/// program share one blob; or `--weight-layout plain`).
pub const PASSES_ROW_MAJOR: &[crate::passes::ProgramPass] = &[("c-layout", |p, o| layout::run_row_major(p, o.quantize))];

/// The runtime (`runtime-c/`), copied verbatim into every output directory: its
/// headers, then its sources, which the generated Makefile builds and links, one
/// file per concern (`mr_internal.h` is what they share).
pub const RUNTIME_FILES: &[(&str, &str)] = &[
    ("mithril_ops.h", C_OPS_HEADER),
    ("mithril_runtime.h", include_str!("../../../runtime-c/mithril_runtime.h")),
    ("mr_internal.h", include_str!("../../../runtime-c/mr_internal.h")),
    ("mr_isa_variant.h", include_str!("../../../runtime-c/mr_isa_variant.h")),
    ("mr_gemm.c", include_str!("../../../runtime-c/mr_gemm.c")),
    ("mr_gemm_i8.c", include_str!("../../../runtime-c/mr_gemm_i8.c")),
    ("mr_conv.c", include_str!("../../../runtime-c/mr_conv.c")),
    ("mr_winograd.c", include_str!("../../../runtime-c/mr_winograd.c")),
    ("mr_pool.c", include_str!("../../../runtime-c/mr_pool.c")),
    ("mr_softmax.c", include_str!("../../../runtime-c/mr_softmax.c")),
    ("mr_train.c", include_str!("../../../runtime-c/mr_train.c")),
    ("mr_threads.c", include_str!("../../../runtime-c/mr_threads.c")),
    // The kernels again for AVX2 and for AVX-512 (x86-64; empty elsewhere), and the
    // public names, which call the best set the CPU runs.
    ("mr_isa_avx2.c", include_str!("../../../runtime-c/mr_isa_avx2.c")),
    ("mr_isa_avx512.c", include_str!("../../../runtime-c/mr_isa_avx512.c")),
    ("mr_dispatch.c", include_str!("../../../runtime-c/mr_dispatch.c")),
];

/// The demo program's file readers and writers (`.npy`, safetensors, the weights blob)
/// and its command line, copied into the output directory of every target with a C
/// demo (the C template's: C, CUDA, Metal; and ggml's): host code that prints and
/// allocates, which the demo links and no library does (`runtime-c/mr_files.h`).
pub const DEMO_FILES: &[(&str, &str)] =
    &[("mr_files.h", include_str!("../../../runtime-c/mr_files.h")), ("mr_files.c", include_str!("../../../runtime-c/mr_files.c"))];

/// What the build of a target whose demo links the file readers ([`DEMO_FILES`]) shares
/// with every other model's: their object `object` (`mr_files.o`, or another name where
/// the Makefile compiles them differently), and `more` of its own, built from `sources`
/// besides the readers'.
pub fn shared_with_readers<'a>(object: &str, sources: &[&'a str], more: Vec<String>) -> crate::build::Shared<'a> {
    crate::build::Shared {
        sources: DEMO_FILES.iter().map(|(file, _)| *file).chain(sources.iter().copied()).collect(),
        products: more.into_iter().chain([object.to_string()]).collect(),
    }
}

/// The compiler flags of a build for one CPU (`--cpu NAME`, a `-march` value): its
/// vector extensions everywhere, so the runtime compiles one kernel set and the
/// generated kernels no clones (`MR_NO_DISPATCH`).
pub fn cpu_flags(cpu: &str) -> String {
    format!("-march={cpu} -DMR_NO_DISPATCH")
}

/// The runtime's C sources (of [`RUNTIME_FILES`]), which every library compiles.
pub fn runtime_sources() -> impl Iterator<Item = &'static str> {
    RUNTIME_FILES.iter().map(|(name, _)| *name).filter(|name| name.ends_with(".c"))
}

/// The sources `mr_isa_variant.h` includes, which `mr_isa_avx2.c` and `mr_isa_avx512.c`
/// compile again for their ISA (read from the header, so the Makefile cannot fall behind).
fn isa_variant_sources() -> impl Iterator<Item = &'static str> {
    let variant = RUNTIME_FILES.iter().find(|(name, _)| *name == "mr_isa_variant.h").map_or("", |(_, text)| *text);
    variant.lines().filter_map(|line| line.strip_prefix("#include \"")?.strip_suffix('"')).filter(|file| file.ends_with(".c"))
}

/// The external names the runtime's objects define and call one another by, compiled
/// without `MR_PREFIX` (as the Makefile compiles the objects every model shares), read
/// from the headers that rename them: `mithril_runtime.h`'s `#define mr_x MR_NAME(mr_x)`
/// lines, and each of `mr_internal.h`'s `#define mr_x MR_VARIANT(mr_x)` once per
/// variant suffix (`MR_VARIANT(name) MR_NAME(name##_avx2)`). A test checks that every
/// `mr_` symbol of the compiled objects is here.
pub fn runtime_names() -> Vec<String> {
    let header = |file: &str| RUNTIME_FILES.iter().find(|(name, _)| *name == file).map_or("", |(_, text)| *text);
    let renamed = |text: &'static str, macro_name: &'static str| {
        text.lines().filter_map(move |line| {
            let (name, value) = line.strip_prefix("#define ")?.split_once(' ')?;
            (value == format!("{macro_name}({name})")).then_some(name)
        })
    };
    let suffixes: Vec<&str> = header("mr_internal.h")
        .lines()
        .filter_map(|line| line.strip_prefix("#define MR_VARIANT(name) MR_NAME(name##")?.strip_suffix(')'))
        .collect();
    let mut names: Vec<String> = renamed(header("mithril_runtime.h"), "MR_NAME").map(str::to_string).collect();
    for name in renamed(header("mr_internal.h"), "MR_VARIANT") {
        names.extend(suffixes.iter().map(|suffix| format!("{name}{suffix}")));
    }
    names.sort();
    names.dedup();
    names
}

/// `<name>.syms`: objcopy's `--redefine-syms` list that gives the runtime's objects the
/// library's names (`mr_sgemm <name>_mr_sgemm`, as `-DMR_PREFIX=<name>_` would have).
fn runtime_syms(name: &str) -> String {
    runtime_names().iter().map(|n| format!("{n} {name}_{n}\n")).collect()
}

#[cfg(test)]
mod runtime_facts;

/// Everything that changes what the C target writes.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The model file, named in generated comments.
    pub source: String,
    /// Parameter values by name, written to `weights.bin` when given.
    pub weights: Option<std::collections::BTreeMap<String, crate::tensor::RawTensor>>,
    pub mode: WeightsMode,
    /// The one CPU the library is built for (a `-march` value), or portable (`None`).
    pub cpu: Option<String>,
    /// The target triple of a cross build ([`Triple`]), or the host's (`None`).
    pub triple: Option<Triple>,
}

impl Options {
    pub fn of(opts: &crate::backend::EmitOptions) -> Options {
        Options {
            source: opts.source.clone(),
            weights: opts.weights.clone(),
            mode: opts.weights_mode,
            cpu: opts.cpu.clone(),
            triple: opts.triple.clone(),
        }
    }
}

/// The version of the generated libraries' C API (`<NAME>_ABI_VERSION` in the header,
/// the shared library's SONAME `lib<name>.so.<ABI>`): raised when a change to mithrilc
/// changes what a caller of the same model must do (a function's arguments, the weights'
/// layout rules, the error codes), so a program built against an older library is not
/// run against an incompatible one.
pub const ABI_VERSION: u32 = 1;

pub use crate::build::Triple;

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

/// The files of the C target, by name, in a fixed order.
/// `backward` (from `--grad`) adds `<name>_backward` and, when it has a loss,
/// `<name>_train_step`; the demo then runs the backward pass.
pub fn emit(p: &Program, backward: Option<&Program>, opts: &Options) -> Result<Vec<(String, Vec<u8>)>> {
    let name = identifier(&p.name);
    let upper = name.to_uppercase();
    let train = TrainLayout::of(p, backward)?;
    let ctx = TemplateContext::new(p, backward, train.as_ref(), &name, &upper, opts)?;
    let tera = Templates::new(&[
        ("model.h", include_str!("../../../templates/c/model.h.tera")),
        ("Makefile", include_str!("../../../templates/c/Makefile.tera")),
        ("pc", include_str!("../../../templates/c/model.pc.tera")),
        ("cmake", include_str!("../../../templates/c/Config.cmake.tera")),
    ])?;
    let render = |n: &str, context: &tera::Context| tera.render(n, context);
    let (main, demo) = (ctx.context()?, ctx.for_demo().context()?);
    let mut files = vec![
        (format!("{name}.h"), render("model.h", &main)?.into_bytes()),
        (format!("{name}.c"), model_c(p, backward, train.as_ref(), &name, opts)?.into_bytes()),
    ];
    // The demo's readers only where there is a demo (a hosted target).
    let demo_files = if ctx.hosted { DEMO_FILES } else { &[] };
    files.extend(RUNTIME_FILES.iter().chain(demo_files).map(|(file, text)| (file.to_string(), text.as_bytes().to_vec())));
    files.extend([
        (format!("{name}.syms"), runtime_syms(&name).into_bytes()),
        (format!("{name}_demo.c"), render(DEMO, &demo)?.into_bytes()),
        ("Makefile".to_string(), render("Makefile", &main)?.into_bytes()),
        // What `make install` fills in and installs.
        (format!("{name}.pc.in"), render("pc", &main)?.into_bytes()),
        (format!("{name}Config.cmake.in"), render("cmake", &main)?.into_bytes()),
    ]);
    match (opts.mode, &opts.weights) {
        (WeightsMode::Safetensors, _) => {}
        (WeightsMode::Embed | WeightsMode::EmbedC, None) if p.weights_size > 0 => {
            return Err(Error::user("--weights embed and embed-c need the parameter values (--params FILE)".to_string()))
        }
        (mode, Some(values)) => {
            let blob = weights_blob(p, values)?;
            match mode {
                WeightsMode::Embed => files.push((format!("{name}_weights.S"), embed_asm(&name).into_bytes())),
                WeightsMode::EmbedC if p.weights_size > 0 => files.extend(embed_c(&name, &blob)),
                _ => {}
            }
            files.push(("weights.bin".to_string(), blob));
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

/// How much of the blob one file of [`embed_c`]'s holds: a few MB of text, which
/// editors and diff tools still open.
const EMBED_C_CHUNK: usize = 1 << 20;

/// `<name>_weights.c`, which defines `<name>_weights_data` as an array of `uint64_t`
/// (C99's most aligned integer, so every element type's loads are aligned; 64 bytes
/// where the compiler has a way to say so), and its initializer in files of
/// [`EMBED_C_CHUNK`] bytes (`<name>_weights_<i>.inc`) that it includes, four words a
/// line. Words rather than bytes: a compiler parses an eighth of the literals (gcc 12
/// on gpt_block's 28 MB: 28 s and 0.95 GB; as bytes, 7 minutes and 3.9 GB: docs/c.md).
/// The words read
/// back as the blob's bytes on a little-endian target, as every C target's loads of
/// the blob assume.
fn embed_c(name: &str, blob: &[u8]) -> Vec<(String, Vec<u8>)> {
    let v = env!("CARGO_PKG_VERSION");
    let upper = name.to_uppercase();
    let chunks: Vec<&[u8]> = blob.chunks(EMBED_C_CHUNK).collect();
    let mut main = format!(
        "/* {name}_weights.c: generated by mithrilc {v}. Do not edit. weights.bin as C (compile --weights embed-c),\n \
         * for toolchains without .incbin: the blob's bytes as little-endian 64-bit words. */\n\
         #include <stdint.h>\n\n#include \"{name}.h\"\n\n\
         #if defined(__GNUC__)\n__attribute__((aligned(64)))\n#elif defined(_MSC_VER)\n__declspec(align(64))\n\
         #elif defined(__IAR_SYSTEMS_ICC__)\n_Pragma(\"data_alignment=64\")\n#endif\n\
         const uint64_t {name}_weights_data[({upper}_WEIGHTS_SIZE + 7) / 8] = {{\n"
    );
    let mut files = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let file = format!("{name}_weights_{i}.inc");
        let _ = writeln!(main, "#include \"{file}\"");
        let mut text = String::with_capacity(chunk.len() * 5 / 2 + 64);
        for line in chunk.chunks(32) {
            for word in line.chunks(8) {
                let mut bytes = [0u8; 8];
                bytes[..word.len()].copy_from_slice(word);
                let _ = write!(text, "0x{:016x},", u64::from_le_bytes(bytes));
            }
            text.push('\n');
        }
        files.push((file, text.into_bytes()));
    }
    main.push_str("};\n");
    files.insert(0, (format!("{name}_weights.c"), main.into_bytes()));
    files
}

/// The demo program's template: C99 that is also C++ (the CUDA target compiles it
/// with nvcc, its `cuda` context flag set).
pub(crate) const DEMO: &str = "demo.c";

/// A C-family target's templates: its own, plus those every such target shares (the
/// demo, and `ports.h`, the header's size and shape macros, which a header includes).
pub(crate) struct Templates(tera::Tera);

impl Templates {
    pub(crate) fn new(own: &[(&str, &str)]) -> Result<Templates> {
        let mut tera = tera::Tera::default();
        let shared = [("ports.h", include_str!("../../../templates/c/ports.h.tera")), (DEMO, include_str!("../../../templates/c/demo.c.tera"))];
        tera.add_raw_templates(shared.iter().chain(own).copied()).map_err(|e| Error::internal(format!("templates: {e:?}")))?;
        Ok(Templates(tera))
    }

    pub(crate) fn render(&self, name: &str, context: &tera::Context) -> Result<String> {
        self.0.render(name, context).map_err(|e| Error::internal(format!("template {name}: {e:?}")))
    }
}

#[derive(Serialize, Clone)]
struct TensorInfo {
    name: String,
    /// The symbol index of each dimension, -1 for a static one (`0` for a scalar, as
    /// C has no empty initializers).
    dim_syms_or0: String,
    /// The name as the demo spells it ([`port_label`]; a weight's safetensors key), as
    /// a C string's body.
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
    st_dtype: &'static str,
    /// How the blob stores it: 0 row-major, 1 transposed (a matrix `[rows, cols]` kept
    /// as `[cols, rows]`), 2 that transpose in column panels (see `Layout`).
    layout: u8,
    rows: u64,
    cols: u64,
    /// How a weight's elements are stored (`--quantize`): `f32`, `f16`, `bf16` or
    /// `q8_0`, its runtime code (`MR_F32` = 0 ...) and the bytes it takes.
    stored: &'static str,
    stored_code: u8,
    stored_bytes: u64,
}

#[derive(Serialize, Clone)]
pub(crate) struct TemplateContext {
    name: String,
    #[serde(rename = "NAME")]
    upper: String,
    version: &'static str,
    version_major: &'static str,
    version_minor: &'static str,
    version_patch: &'static str,
    abi: u32,
    /// The cross build's triple (empty: the host's).
    triple: String,
    /// Whether the target has an operating system: a shared library and the demo.
    hosted: bool,
    source: String,
    weights_size: u64,
    /// `codegen::weights::layout_fingerprint`, in hex.
    weights_layout: String,
    pub(crate) arena_size: u64,
    weights_default: String,
    embedded: bool,
    /// Embedded as C arrays (`embed-c`), in these files.
    embedded_c: bool,
    weight_chunks: Vec<String>,
    safetensors: bool,
    /// Whether `weights.bin` is the library's weights file (`make install` installs it).
    weights_file: bool,
    /// Whether some parameter is stored in a layout other than row-major.
    relaid: bool,
    /// Whether some parameter is stored narrow (`--quantize`).
    quantized: bool,
    /// The runtime's sources without `.c` (the Makefile's objects), and its headers.
    runtime: Vec<&'static str>,
    /// The sources the ISA variants (`mr_isa_*.c`) compile again, which their objects
    /// depend on as well.
    isa_sources: String,
    /// The compiler flags that build for `--cpu` (empty: portable, the runtime's
    /// kernels dispatched at run time).
    cpu_flags: String,
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
    /// Whether the artifact is the CUDA target's: the demo copies buffers to the GPU and
    /// runs the model on a stream.
    pub(crate) cuda: bool,
    /// Whether the artifact is the Metal target's: the demo makes Metal buffers and runs
    /// the model in a command buffer.
    pub(crate) metal: bool,
    /// The CUDA target's status for a failed CUDA call, and the demo's exit status
    /// when no GPU can be used.
    error_cuda: i32,
    error_file: i32,
    no_gpu_exit: i32,
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


impl TemplateContext {
    pub(crate) fn new(p: &Program, backward: Option<&Program>, train: Option<&TrainLayout>, name: &str, upper: &str, opts: &Options) -> Result<TemplateContext> {
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
                ctype: match b.dtype {
                    Dtype::F16 => "uint16_t (f16 bits)",
                    Dtype::Bf16 => "uint16_t (bf16 bits)",
                    Dtype::F8E4M3Fn => "uint8_t (f8e4m3fn bits)",
                    Dtype::F8E4M3Fnuz => "uint8_t (f8e4m3fnuz bits)",
                    Dtype::F8E5M2 => "uint8_t (f8e5m2 bits)",
                    Dtype::F8E5M2Fnuz => "uint8_t (f8e5m2fnuz bits)",
                    Dtype::F4E2M1 => "uint8_t (f4e2m1 bits, the low four)",
                    d => C.ty(d),
                },
                descr: crate::data::npy_descr(b.dtype),
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
                // A type safetensors lacks: no tensor of a file matches it (the demo's
                // loader refuses any in its place).
                st_dtype: crate::data::safetensors_dtype_name(b.dtype).unwrap_or(""),
                layout: match port.layout {
                    Layout::RowMajor => 0,
                    Layout::Transposed => 1,
                    Layout::Panels => 2,
                    Layout::Winograd => 3,
                    Layout::ConvPanels => 4,
                },
                rows: shape.first().copied().unwrap_or(1),
                cols: shape.get(1).copied().unwrap_or(1),
                stored: port.stored.name(),
                stored_code: port.stored as u8,
                stored_bytes: if shape.iter().product::<u64>() == 0 { 0 } else { port.stored_bytes(b.len, b.dtype).unwrap_or(0) },
            }
        };
        Ok(TemplateContext {
            name: name.to_string(),
            upper: upper.to_string(),
            version: env!("CARGO_PKG_VERSION"),
            version_major: env!("CARGO_PKG_VERSION_MAJOR"),
            version_minor: env!("CARGO_PKG_VERSION_MINOR"),
            version_patch: env!("CARGO_PKG_VERSION_PATCH"),
            abi: ABI_VERSION,
            triple: opts.triple.as_ref().map_or(String::new(), |t| t.as_str().to_string()),
            hosted: opts.triple.as_ref().is_none_or(Triple::hosted),
            source: comment_safe(&opts.source),
            weights_size: p.weights_size,
            weights_layout: format!("{:016x}", crate::codegen::weights::layout_fingerprint(p)),
            arena_size: [Some(p.arena_size), backward.map(|b| b.arena_size), train.map(|t| t.arena_size)].into_iter().flatten().max().unwrap_or(0),
            weights_default: if opts.weights.is_some() && opts.mode == WeightsMode::File { "\"weights.bin\"".into() } else { "NULL".into() },
            embedded: matches!(opts.mode, WeightsMode::Embed | WeightsMode::EmbedC) && p.weights_size > 0,
            embedded_c: opts.mode == WeightsMode::EmbedC && p.weights_size > 0,
            weight_chunks: match (opts.mode, &opts.weights) {
                (WeightsMode::EmbedC, Some(_)) => (0..(p.weights_size as usize).div_ceil(EMBED_C_CHUNK)).map(|i| format!("{name}_weights_{i}.inc")).collect(),
                _ => Vec::new(),
            },
            safetensors: opts.mode == WeightsMode::Safetensors && p.weights_size > 0,
            weights_file: opts.weights.is_some() && opts.mode == WeightsMode::File && p.weights_size > 0,
            relaid: p.weights.iter().any(|w| w.layout != Layout::RowMajor),
            quantized: p.weights.iter().any(|w| w.stored != crate::lower::Stored::F32),
            runtime: runtime_sources().filter_map(|file| file.strip_suffix(".c")).collect(),
            isa_sources: isa_variant_sources().collect::<Vec<_>>().join(" "),
            cpu_flags: opts.cpu.as_deref().map_or(String::new(), cpu_flags),
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
            cuda: false,
            metal: false,
            error_cuda: crate::codegen::cuda::ERROR_CUDA,
            error_file: crate::codegen::cuda::ERROR_FILE,
            no_gpu_exit: crate::codegen::cuda::DEMO_NO_GPU_EXIT,
        })
    }

    pub(crate) fn context(&self) -> Result<tera::Context> {
        tera::Context::from_serialize(self).map_err(|e| Error::internal(format!("template context: {e}")))
    }

    /// The demo's context: it runs the backward pass when there is one.
    pub(crate) fn for_demo(&self) -> TemplateContext {
        let mut demo = self.clone();
        if let Some(b) = &self.backward {
            demo.entry = "backward";
            demo.inputs = b.inputs.clone();
            demo.outputs = b.outputs.clone();
        }
        demo
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

/// `model.c`: the forward pass, and with `--grad` the backward pass and the training
/// step.
fn model_c(p: &Program, backward: Option<&Program>, train: Option<&TrainLayout>, name: &str, opts: &Options) -> Result<String> {
    let mut s = String::new();
    let _ = writeln!(s, "/* {name}.c: generated by mithrilc {} from {}. Do not edit. */", env!("CARGO_PKG_VERSION"), comment_safe(&opts.source));
    let _ = writeln!(s, "#include <math.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <string.h>\n");
    let _ = writeln!(s, "#include \"{name}.h\"\n{}#include \"mithril_runtime.h\"\n", C.prelude());
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


#[cfg(test)]
mod tests {
    use super::Triple;

    #[test]
    fn a_triple_is_one_word_and_says_whether_it_is_hosted_and_runs_here() {
        for bad in ["", "gnu", "-linux-gnu", "arm-none;rm", "aarch64 linux-gnu", "x86_64-linux-gnu$(id)", "a/b-c"] {
            assert!(Triple::parse(bad).is_err(), "{bad:?}");
        }
        let t = |s: &str| Triple::parse(s).unwrap();
        assert!(t("aarch64-linux-gnu").hosted() && t("x86_64-w64-mingw32").hosted());
        assert!(!t("arm-none-eabi").hosted() && !t("riscv64-unknown-elf").hosted());
        let os = if cfg!(target_os = "macos") { "apple-darwin" } else { std::env::consts::OS };
        let here = format!("{}-{os}", std::env::consts::ARCH);
        assert!(t(&here).runs_here(), "{here}");
        assert!(!t("riscv32-unknown-elf").runs_here() && !t(&format!("{}-none-eabi", std::env::consts::ARCH)).runs_here());
    }
}
