//! Targets. A [`Backend`] is what `--target NAME` compiles to: which nodes it can
//! compile, what it offers ([`Capabilities`]) and the files it writes, all without
//! starting a process; its [`Toolchain`] builds those files and runs the result.
//! [`BACKENDS`] is the one table the command line reads (its `--help`, the values
//! `--target` accepts); a new target is one `impl Backend`, one `impl Toolchain` and
//! one entry there.
//!
//! Targets come in two shapes. Program targets (C, CUDA, Metal) lower the graph
//! to a [`Program`] with their kernel library's capabilities ([`lower_programs`]), run
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
}

impl Capabilities {
    /// f32 only, on one device, for the host.
    pub const NONE: Capabilities =
        Capabilities {
        precisions: &[Precision::F32],
        quantizations: &[Quantize::F32],
        weights_modes: &[WeightsMode::File],
        emulates: false,
        shards: false,
        picks_cpu: false,
        cross_builds: false,
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

/// Every target, in the order `--help` lists them.
pub static BACKENDS: &[&dyn Backend] = &[
    &crate::codegen::c::backend::CTarget,
    &crate::codegen::cuda::backend::CudaTarget,
    &crate::codegen::metal::backend::MetalTarget,
    &crate::codegen::ggml::backend::GgmlTarget,
    &crate::codegen::xla::backend::XlaTarget,
];

/// The target called `name`.
pub fn find(name: &str) -> Option<&'static dyn Backend> {
    BACKENDS.iter().copied().find(|b| b.name() == name)
}

/// Every pass `--print-after` can name: the graph passes (`decompose` last), every
/// target's program passes, and the shared program passes.
pub fn pass_names() -> Vec<&'static str> {
    let mut names = passes::names(&[]);
    for b in BACKENDS {
        for (name, _) in b.program_passes() {
            if !names.contains(name) {
                names.insert(passes::PIPELINE.len() + 1, name);
            }
        }
    }
    names
}

/// The names of every target, for messages (`c, cuda`).
pub fn names() -> String {
    BACKENDS.iter().map(|b| b.name()).collect::<Vec<_>>().join(", ")
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
    pub triple: Option<crate::codegen::c::Triple>,
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

/// Refuses a `--precision` the target does not offer (a usage error naming those it does).
pub fn check_precision(target: &dyn Backend, precision: Precision) -> Result<()> {
    check_offered("--precision", precision, target.capabilities().precisions, Precision::name, &format!("the {} target computes in", target.name()))
}

/// How the weights of matrix products and convolutions are stored (`--quantize`); the
/// products compute in f32 whatever this says. Each target says which it takes
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
}

/// How a target builds: the compiler and its flags (`$CC` and `--cflags` for C), and the
/// build cache.
#[derive(Debug, Clone)]
pub struct BuildConfig {
    pub cc: String,
    pub cflags: String,
    /// Build a GPU target's code for CPU emulation (`run --emulate`) instead of the GPU.
    pub emulate: bool,
    pub cache: Cache,
}

/// The C compiler's flags unless `--cflags` says otherwise: optimised, for no CPU in
/// particular (the CPU comes from `--cpu`, the runtime's kernels from the CPU it runs
/// on).
pub const HOST_CFLAGS: &str = "-O3";

impl Default for BuildConfig {
    fn default() -> BuildConfig {
        BuildConfig { cc: crate::build::c_compiler(), cflags: HOST_CFLAGS.to_string(), emulate: false, cache: Cache::from_env() }
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

/// The programs of a program target: the forward pass and, with `--grad`, the backward
/// pass, each lowered with `lower` (the target's library) and run through
/// `target_passes` and the shared program passes, printed after those named in
/// `print_after`.
pub fn lower_programs(
    graphs: &Graphs,
    lower: &crate::lower::Options,
    target_passes: &[passes::ProgramPass],
    print_after: &[String],
) -> Result<(Program, Option<Program>)> {
    let one = |g: &Graph| {
        passes::compile(g, lower, target_passes, |name, p| {
            if print_after.iter().any(|n| n == name) {
                eprint!("// after {name}\n{}", crate::lower::print::print(p));
            }
        })
    };
    Ok((one(&graphs.forward)?, graphs.backward.as_ref().map(one).transpose()?))
}

/// Why a program target whose kernels compute in the element types `supports` accepts
/// cannot compile node `v` (its [`Backend::lacks`]).
pub fn program_target_lacks(graph: &Graph, v: ValueId, supports: impl Fn(crate::ir::Dtype) -> bool) -> Option<String> {
    let dtype = graph.ty(v).dtype;
    if !supports(dtype) {
        return Some(format!("no {dtype} arithmetic"));
    }
    crate::lower::lacking(graph, v)
}

/// What a GPU target writes, as files by name: the forward (and backward) program,
/// given the target's kernel library and its renderer.
pub type DeviceEmit = fn(&Program, Option<&Program>, &crate::codegen::c::Options, Precision) -> Result<Vec<(String, Vec<u8>)>>;

/// A GPU target's [`Backend::emit`]: the programs lowered with the target's `library`
/// (every weight row-major: its kernels read any strides) and rendered by `emit`.
pub fn emit_device(graphs: &Graphs, opts: &EmitOptions, library: crate::lower::Library, emit: DeviceEmit) -> Result<Emitted> {
    let (forward, backward) = device_programs(graphs, opts, library)?;
    let c = crate::codegen::c::Options::of(opts);
    let files = emit(&forward, backward.as_ref(), &c, opts.precision)?;
    Ok(program_emitted(files, &forward, backward.as_ref()))
}

/// The programs a GPU target's [`emit_device`] renders, lowered with its `library`.
pub fn device_programs(graphs: &Graphs, opts: &EmitOptions, library: crate::lower::Library) -> Result<(Program, Option<Program>)> {
    let lower = crate::lower::Options { max: opts.max.clone(), library, ..Default::default() };
    lower_programs(graphs, &lower, &[], &opts.print_after)
}

/// What a program target's `emit` returns for the programs it wrote as `files`: the
/// memory report of each, and the entry its demo runs (the backward pass when there is
/// one).
pub fn program_emitted(files: Vec<(String, Vec<u8>)>, forward: &Program, backward: Option<&Program>) -> Emitted {
    let mut report = memory_report(forward);
    let mut sizes = memory_sizes(forward);
    if let Some(b) = backward {
        report.push_str("backward pass:\n");
        report.push_str(&memory_report(b));
        sizes["backward"] = memory_sizes(b);
    }
    let program = backward.unwrap_or(forward);
    let ports = |ports: &[crate::lower::Port]| ports.iter().map(|p| p.name.clone()).collect();
    let entry = Entry { name: crate::codegen::names::identifier(&program.name), inputs: ports(&program.inputs), outputs: ports(&program.outputs) };
    Emitted { files, entry, report, sizes }
}

/// [`memory_report`]'s sizes as JSON (`--report=json`), in bytes; with weights stored
/// narrow, also what they would take in f32 (`weights_f32_bytes`).
pub fn memory_sizes(p: &Program) -> serde_json::Value {
    let mut sizes = serde_json::json!({"kernels": p.steps.len(), "weights_bytes": p.weights_size, "arena_bytes": p.arena_size, "peak_live_bytes": p.peak_live});
    if let Some(wide) = f32_weights_size(p) {
        sizes["weights_f32_bytes"] = wide.into();
    }
    sizes
}

/// `kernels`, `weights`, `arena` lines of `--report` for one program (the weights'
/// f32 size beside theirs when some are stored narrow).
pub fn memory_report(p: &Program) -> String {
    let ratio = if p.peak_live == 0 { 1.0 } else { p.arena_size as f64 / p.peak_live as f64 };
    let narrowed: Vec<&str> = p.weights.iter().filter(|w| w.stored != crate::lower::Stored::F32).map(|w| w.stored.name()).collect();
    let wide = match (f32_weights_size(p), narrowed.first()) {
        (Some(wide), Some(name)) => format!(" ({} of them as {name}; {} bytes in f32)", narrowed.len(), group(wide)),
        _ => String::new(),
    };
    format!(
        "kernels: {}\nweights: {} bytes{wide}\narena: {} bytes (peak live {} bytes, ratio {ratio:.3})\n",
        p.steps.len(),
        group(p.weights_size),
        group(p.arena_size),
        group(p.peak_live)
    )
}

/// The bytes the weights blob would take with every weight in f32 (in the same
/// layouts), when some weight is stored narrow.
fn f32_weights_size(p: &Program) -> Option<u64> {
    if p.weights.iter().all(|w| w.stored == crate::lower::Stored::F32) {
        return None;
    }
    p.weights.iter().try_fold(0u64, |offset, w| {
        let b = &p.buffers[w.buf.0];
        let n = if w.shape.iter().product::<u64>() == 0 { 0 } else { b.len };
        Some(crate::lower::align(offset.checked_add(n.checked_mul(b.dtype.size() as u64)?)?))
    })
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
