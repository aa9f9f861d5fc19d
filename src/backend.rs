//! Targets. A [`Backend`] is what `--target NAME` compiles to: which nodes it can
//! compile, what it offers ([`Capabilities`]) and the files it writes, all without
//! starting a process; its [`Toolchain`] builds those files and runs the result.
//! `codegen::TARGETS` is the one table of them the command line reads (its `--help`,
//! the values `--target` accepts); a new target is one `impl Backend`, one `impl
//! Toolchain` and one entry there. This module names no target: the targets import it.
//!
//! Targets come in two shapes. Program targets (C, CUDA, Metal) lower the graph
//! to a [`Program`] with their kernel library's capabilities
//! (`codegen::program_target::lower_programs`), run
//! their own program passes, and render its kernels through the C-style renderer
//! (`codegen::cstyle`). Graph targets (ggml, XLA) write one library call or instruction
//! per node of the graph itself (`codegen::graph`).

use std::collections::BTreeMap;
use std::path::Path;

use crate::build::CacheUse;
use crate::cache::Cache;
use crate::passes::Graphs;
use crate::error::{Error, Result};
use crate::ir::{Composite, Graph, Op, UnaryOp, ValueId};
use crate::lower::Program;
use crate::passes;
use crate::tensor::{RawTensor, Tensor};

/// One compile target: what it can compile and the files it writes. Nothing here
/// starts a process or writes a file; building and running what it wrote is its
/// [`Toolchain`]'s.
pub trait Backend: Sync {
    /// The name `--target` takes.
    fn name(&self) -> &'static str;
    /// What it builds, in a line (for `--help`).
    fn about(&self) -> &'static str;
    /// What it offers beyond compiling the graph (the flags it takes).
    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
    }
    /// The program passes a program target runs between lowering and `fuse` (none for a
    /// graph target); `--print-after` takes their names.
    fn program_passes(&self) -> &'static [passes::ProgramPass] {
        &[]
    }
    /// Whether it computes composite `c` whole, with a function of its own; the
    /// `decompose` pass rewrites the composites it does not claim into primitives
    /// before the graphs reach it ([`crate::pipeline::emit`]). Answered from the same
    /// function that writes them, so the two cannot drift.
    fn claims(&self, _c: Composite) -> bool {
        false
    }
    /// Why the target cannot compile node `v` of a graph whose shapes are known, if it
    /// cannot. [`check_supported`] asks this of every node before anything is written.
    fn lacks(&self, graph: &Graph, v: ValueId) -> Option<String>;
    /// The artifact's files, by name in a fixed order (what `--emit source` writes).
    fn emit(&self, graphs: &Graphs, opts: &EmitOptions) -> Result<Emitted>;
    /// The program whose weight offsets and layouts the artifact's `weights.bin` has, as
    /// `emit` lowers it (`export-weights` reads the blob back through it); `None` for a
    /// target that writes no `weights.bin`.
    fn weights_program(&self, _graphs: &Graphs, _opts: &EmitOptions) -> Result<Option<Program>> {
        Ok(None)
    }
    /// What builds and runs the files `emit` writes.
    fn toolchain(&self) -> &dyn Toolchain;
}

/// What a target offers beyond compiling the graph: the command line asks this, never
/// the target's name.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// The `--precision` values its matrix products and convolutions offer.
    pub precisions: &'static [Precision],
    /// The `--gemm` values its matrix products offer (`builtin` first).
    pub gemms: &'static [Gemm],
    /// The `--accumulate` values its reductions offer, its default first.
    pub accumulators: &'static [Accumulate],
    /// The `--quantize` values it stores matrix-product and convolution weights in.
    pub quantizations: &'static [Quantize],
    /// `run --emulate` can run its kernels on the CPU (a GPU target's).
    pub emulates: bool,
    /// `--mesh` can partition its program over several devices (XLA's).
    pub shards: bool,
    /// The `--weights` modes it writes (every target takes `file`, its own weights file).
    pub weights_modes: &'static [WeightsMode],
    /// `--cpu` builds its library for one CPU (C's).
    pub picks_cpu: bool,
    /// `--triple` cross-builds it (C's).
    pub cross_builds: bool,
    /// `--report` plans its launches on the GPU `--gpu` names (CUDA's).
    pub reports_launches: bool,
    /// It runs in this process ([`crate::exec::Jit`]), not from the files it writes,
    /// compiled by this code generator.
    pub in_process: Option<JitTier>,
}

/// The code generators of the in-process JIT (`docs/jit.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JitTier {
    /// cranelift: compiles in milliseconds, 128-bit vectors.
    #[default]
    Cranelift,
    /// LLVM at O3 for this CPU (Cargo feature `llvm`).
    Llvm,
}

impl Capabilities {
    /// f32 only, on one device, for the host.
    pub const NONE: Capabilities =
        Capabilities {
        precisions: &[Precision::F32],
        gemms: &[Gemm::Builtin],
        accumulators: &[Accumulate::F64],
        quantizations: &[Quantize::F32],
        weights_modes: &[WeightsMode::File],
        emulates: false,
        shards: false,
        picks_cpu: false,
        cross_builds: false,
        reports_launches: false,
        in_process: None,
    };
}

/// How a target's files are built and run: its compilers and its runner. Everything
/// here may start processes; it reads and writes only inside the directory it is given.
pub trait Toolchain: Sync {
    /// What building and running needs, in a line (for `mithrilc targets`).
    fn needs(&self) -> &'static str;
    /// Builds the files `emit` wrote into `dir`; says how it had the files it takes from
    /// the build cache, if it takes any (`--report`).
    fn build(&self, dir: &Path, build: &BuildConfig) -> Result<Option<CacheUse>>;
    /// Builds what `run` needs of them ([`crate::exec::Built`]): `dir` is scratch and
    /// only the target's runner uses what is built.
    fn build_to_run(&self, dir: &Path, build: &BuildConfig) -> Result<Option<CacheUse>> {
        self.build(dir, build)
    }
    /// Runs the artifact built in `dir` (with `build`) on `feeds` (its inputs by name)
    /// and returns the entry's outputs, in order.
    fn run(&self, dir: &Path, build: &BuildConfig, entry: &Entry, feeds: &BTreeMap<String, Tensor>) -> Result<Vec<(String, Tensor)>>;
    /// What `--report` adds once the artifact is built in `dir` (the CUDA target: ptxas's
    /// registers, shared memory and spills per kernel).
    fn built_report(&self, _dir: &Path, _entry: &Entry) -> Result<String> {
        Ok(String::new())
    }
}

/// What every target's `emit` takes beyond the graphs.
#[derive(Debug, Clone, Default)]
pub struct EmitOptions {
    /// The model file's name (without its directory), for generated comments.
    pub source: String,
    /// Parameter values by name, when given: the artifact's weights, each in its
    /// file's type (the writer of the weights converts it).
    pub weights: Option<BTreeMap<String, RawTensor>>,
    /// How the artifact gets its weights.
    pub weights_mode: WeightsMode,
    /// How the weights are laid out.
    pub layout: WeightLayout,
    /// The largest run-time value of each symbolic dimension.
    pub max: BTreeMap<String, u64>,
    /// Passes after which the IR or program is printed (to stderr).
    pub print_after: Vec<String>,
    /// How matrix products and convolutions may round.
    pub precision: Precision,
    /// The device mesh to partition over (`--mesh`: axis names and sizes); empty: one device.
    pub mesh: Vec<(String, u64)>,
    /// How the weights of matrix products and convolutions are stored (`--quantize`).
    pub quantize: Quantize,
    /// The one CPU the C target's library is built for (`--cpu`, a `-march` value);
    /// `None`: portable, its kernels chosen at run time for the CPU it runs on.
    pub cpu: Option<String>,
    /// The C target's cross-build triple (`--triple`); `None`: the host.
    pub triple: Option<crate::build::Triple>,
    /// `--accumulate`: the type the target's float sums accumulate in (`None`: its
    /// default, [`Capabilities::accumulators`]).
    pub accumulate: Option<Accumulate>,
    /// The GPU of the CUDA target's launch report (`--gpu`); `None`: an H100.
    pub gpu: Option<&'static crate::codegen::cuda::plan::Gpu>,
    /// What runs the matrix products (`--gemm`).
    pub gemm: Gemm,
}

/// How matrix products and convolutions may round (`--precision`). Everything else
/// computes in the model's types whatever this says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Precision {
    /// Exact f32 products and sums, as the interpreter computes them up to rounding
    #[default]
    F32,
    /// Operands rounded to TF32 (a 10-bit mantissa) for tensor cores, sums in f32 (cuda)
    Tf32,
    /// Operands rounded to bfloat16 for tensor cores, sums in f32 (cuda)
    Bf16,
    /// Operands rounded to float16 for tensor cores, sums in f32 (cuda; values beyond
    /// 65504 overflow)
    F16,
}

impl Precision {
    /// The name `--precision` takes.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Tf32 => "tf32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        }
    }
}

/// What runs a target's matrix products (`--gemm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Gemm {
    /// The target's own kernels
    #[default]
    Builtin,
    /// cuBLASLt where it loads at run time and takes the product, with its bias, ReLU,
    /// GELU (tanh) and residual epilogues; the built-in kernels elsewhere (cuda)
    Cublaslt,
}

impl Gemm {
    /// The name `--gemm` takes.
    pub fn name(self) -> &'static str {
        match self {
            Gemm::Builtin => "builtin",
            Gemm::Cublaslt => "cublaslt",
        }
    }
}

/// The type sums of floats accumulate in (`--accumulate`): a target's loop reductions
/// (the CUDA target's: LayerNorm's mean and variance, a softmax's sum, ...); matrix
/// products accumulate in f32 whatever this says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Accumulate {
    /// f32, in blocks (docs/cuda.md gives the error bound): fast on every GPU
    F32,
    /// f64, as the interpreter does: slow on GPUs with little f64 throughput
    F64,
}

impl Accumulate {
    /// The name `--accumulate` takes.
    pub fn name(self) -> &'static str {
        match self {
            Accumulate::F32 => "f32",
            Accumulate::F64 => "f64",
        }
    }
}

/// The accumulator of `target`'s reductions: `asked`, or its default; a usage error
/// naming those it offers when it does not offer `asked`.
pub fn accumulator(target: &dyn Backend, asked: Option<Accumulate>) -> Result<Accumulate> {
    let offered = target.capabilities().accumulators;
    match asked {
        Some(a) => check_offered("--accumulate", a, offered, Accumulate::name, &format!("the {} target accumulates in", target.name())).map(|()| a),
        None => Ok(offered[0]),
    }
}

/// Refuses a `--precision` the target does not offer (a usage error naming those it does).
pub fn check_precision(target: &dyn Backend, precision: Precision) -> Result<()> {
    check_offered("--precision", precision, target.capabilities().precisions, Precision::name, &format!("the {} target computes in", target.name()))
}

/// Refuses a `--gemm` the target does not offer (a usage error naming those it does).
pub fn check_gemm(target: &dyn Backend, gemm: Gemm) -> Result<()> {
    check_offered("--gemm", gemm, target.capabilities().gemms, Gemm::name, &format!("the {} target's matrix products run on", target.name()))
}

/// How the weights of matrix products and convolutions are stored (`--quantize`); the
/// products compute in f32, but for `int8`'s. Each target says which it takes
/// ([`Backend::quantizations`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Quantize {
    /// Every weight f32
    #[default]
    F32,
    /// As IEEE float16 (c, ggml)
    F16,
    /// As bfloat16, the f32's upper half (c, ggml)
    Bf16,
    /// In 8-bit blocks of 32 with a scale (c: an f32 scale; ggml: its q8_0, an f16 scale)
    #[value(name = "q8_0")]
    Q8_0,
    /// In 4-bit blocks of 32 with an f16 scale (ggml's q4_0)
    #[value(name = "q4_0")]
    Q4_0,
    /// Int8 products (c): matrix products' weights int8 with a scale per output column, their inputs quantized per row as they run, int8 multiply-adds; other weights as q8_0
    Int8,
}

impl Quantize {
    /// The name `--quantize` takes.
    pub fn name(self) -> &'static str {
        match self {
            Quantize::F32 => "f32",
            Quantize::F16 => "f16",
            Quantize::Bf16 => "bf16",
            Quantize::Q8_0 => "q8_0",
            Quantize::Q4_0 => "q4_0",
            Quantize::Int8 => "int8",
        }
    }
}

/// Refuses a `--quantize` the target does not take (a usage error naming those it does).
pub fn check_quantize(target: &dyn Backend, quantize: Quantize) -> Result<()> {
    check_offered("--quantize", quantize, target.capabilities().quantizations, Quantize::name, &format!("the {} target stores its weights as", target.name()))
}

/// Refuses a `--weights` mode the target does not write (a usage error naming those it does).
pub fn check_weights_mode(target: &dyn Backend, mode: WeightsMode) -> Result<()> {
    check_offered("--weights", mode, target.capabilities().weights_modes, WeightsMode::name, &format!("the {} target writes its weights as", target.name()))
}

/// A usage error for `flag value` unless `value` is `offered`: `"{flag} {value}: {says}
/// {offered...}"`.
fn check_offered<T: PartialEq + Copy>(flag: &str, value: T, offered: &[T], name: fn(T) -> &'static str, says: &str) -> Result<()> {
    if offered.contains(&value) {
        return Ok(());
    }
    let names: Vec<&str> = offered.iter().map(|&v| name(v)).collect();
    Err(Error::usage(format!("{flag} {}: {says} {}", name(value), names.join(", "))))
}

/// How the generated library gets its weights (`--weights`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum WeightsMode {
    /// Write weights.bin, loaded or mapped by the caller
    #[default]
    File,
    /// Also assemble weights.bin into the library, for firmware
    Embed,
    /// Also compile weights.bin into the library as C arrays, for toolchains without the
    /// assembler's .incbin (IAR, Keil, MSVC; slower to compile: docs/c.md)
    #[value(name = "embed-c")]
    EmbedC,
    /// The demo reads the parameters from a safetensors file at run time
    Safetensors,
}

impl WeightsMode {
    /// The name `--weights` takes.
    pub fn name(self) -> &'static str {
        match self {
            WeightsMode::File => "file",
            WeightsMode::Embed => "embed",
            WeightsMode::EmbedC => "embed-c",
            WeightsMode::Safetensors => "safetensors",
        }
    }
}

/// How the weights blob stores the parameters (`--weight-layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum WeightLayout {
    /// In the layouts the kernels read fastest (transposed, in column panels, 3x3
    /// convolutions Winograd-transformed)
    #[default]
    Fast,
    /// Every parameter row-major as the model declares it: the blob holds the parameters
    /// file's values unchanged (smaller where Winograd applies; slower)
    Plain,
}

/// What `emit` produced.
#[derive(Debug, Clone)]
pub struct Emitted {
    pub files: Vec<(String, Vec<u8>)>,
    /// What `run` runs: the backward pass when there is one, else the forward pass.
    pub entry: Entry,
    /// Sizes for `--report`.
    pub report: String,
    /// The same sizes as a JSON object, for `--report=json`.
    pub sizes: serde_json::Value,
}

/// The function a built artifact's runner calls, by its ports.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The model's name as the artifact spells it (its files and symbols).
    pub name: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// Each output's element type: an output file that holds a stand-in for it (a
    /// narrow float's codes, bf16's f32: `data::npy_descr`) is read back as it.
    pub output_types: Vec<crate::ir::Dtype>,
}

/// How a target builds: the compiler and its flags (`$CC` and `--cflags` for C), and the
/// build cache.
#[derive(Debug, Clone)]
pub struct BuildConfig {
    pub cc: String,
    pub cflags: String,
    /// Build a GPU target's code for CPU emulation (`run --emulate`) instead of the GPU.
    pub emulate: bool,
    /// The C++ compiler's flags for an emulation build (make's `CXXFLAGS`); `None`: the
    /// environment's `CXXFLAGS`, else the generated Makefile's.
    pub cxxflags: Option<String>,
    pub cache: Cache,
}

/// The C compiler's flags unless `--cflags` says otherwise: optimised, for no CPU in
/// particular (the CPU comes from `--cpu`, the runtime's kernels from the CPU it runs
/// on).
pub const HOST_CFLAGS: &str = "-O3";

impl Default for BuildConfig {
    fn default() -> BuildConfig {
        BuildConfig { cc: crate::build::c_compiler(), cflags: HOST_CFLAGS.to_string(), emulate: false, cxxflags: None, cache: Cache::from_env() }
    }
}

impl BuildConfig {
    /// `CXXFLAGS=...` for make's command line, where [`BuildConfig::cxxflags`] gives them.
    pub fn cxxflags_var(&self) -> Result<Option<String>> {
        self.cxxflags.as_deref().map(|flags| crate::build::make_var("CXXFLAGS", flags, "CXXFLAGS")).transpose()
    }
}

/// Every node of `graph` that `backend` cannot compile, all at once: one error with a
/// line per node (its op, type and place in the model JSON, and why), and a note
/// summing up the ops.
pub fn check_supported(backend: &dyn Backend, graph: &Graph) -> Result<()> {
    let mut lines = Vec::new();
    let mut ops: Vec<&str> = Vec::new();
    for v in graph.ids() {
        let unclaimed = match graph.node(v).op {
            Op::Unary(UnaryOp::Composite(c)) if !backend.claims(c) => Some("a composite the target does not claim, left for the decompose pass to rewrite".to_string()),
            _ => None,
        };
        let Some(why) = unclaimed.or_else(|| backend.lacks(graph, v)) else { continue };
        let node = graph.node(v);
        let mut line = format!("  {} {}", node.op.name(), node.ty);
        match (&node.name, &node.origin) {
            (_, Some(origin)) => line.push_str(&format!(" at {origin}")),
            (Some(name), None) => line.push_str(&format!(" `{name}`")),
            (None, None) => {}
        }
        lines.push(format!("{line} (%{}): {why}", v.0));
        if !ops.contains(&node.op.name()) {
            ops.push(node.op.name());
        }
    }
    if lines.is_empty() {
        return Ok(());
    }
    let count = lines.len();
    let plural = if count == 1 { "" } else { "s" };
    Err(Error::user(format!("the {} target cannot compile {count} node{plural} of the model:\n{}", backend.name(), lines.join("\n")))
        .note(format!("ops it cannot compile here: {}", ops.join(", "))))
}

/// `1337344` → `1,337,344`.
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
