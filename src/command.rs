//! The `mithrilc` command line: its clap definitions over [`crate::cli`], in the library
//! so that every program that is `mithrilc` (the binary, the Python package's command
//! and its `mithrilc.compile`) parses the same flags: [`main`] is the process, [`execute`]
//! one command for an embedder.

use std::path::PathBuf;
use std::ffi::OsString;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use crate::backend::{Accumulate, Backend, Gemm, Precision, Quantize, WeightLayout, WeightsMode};
use crate::cli;
use crate::codegen;
use crate::error::Error;

/// `--target` of `compile`: a name from the backend table (`--help` lists them, with
/// what each builds; any other name is a usage error that lists them).
fn compile_target() -> impl TypedValueParser<Value = &'static dyn Backend> {
    let values = codegen::TARGETS.iter().map(|b| PossibleValue::new(b.name()).help(b.about()));
    PossibleValuesParser::new(values).map(|name| codegen::find(&name).expect("a listed target"))
}

/// `--target` of `run`: the interpreter or a compiled target.
fn run_target() -> impl TypedValueParser<Value = cli::RunTarget> {
    let interp = PossibleValue::new("interp").help("the reference interpreter (default)");
    let values = std::iter::once(interp).chain(codegen::TARGETS.iter().map(|b| PossibleValue::new(b.name()).help(b.about())));
    PossibleValuesParser::new(values).map(|name| match codegen::find(&name) {
        Some(b) => cli::RunTarget::Compiled(b),
        None => cli::RunTarget::Interp,
    })
}

#[derive(Parser)]
#[command(name = "mithrilc", version, about = "Ahead-of-time compiler for Mithril models", propagate_version = true)]
struct Cli {
    /// How errors are written to stderr: human (text) or json (one object: kind,
    /// exit_code, message, notes and, when the message names one, file)
    #[arg(long, global = true, value_enum, default_value_t, value_name = "FORMAT")]
    message_format: MessageFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
enum MessageFormat {
    #[default]
    Human,
    Json,
}

#[derive(Args)]
struct ModelOpts {
    /// The model: Mithril model JSON (the output of `model_to_dict`) or ONNX (`.onnx`)
    model: PathBuf,
    /// Shape of an input or parameter, as NAME=D0,D1,... (a dimension may be a symbol: input=B,784)
    #[arg(long = "shape", value_name = "NAME=DIMS")]
    shapes: Vec<String>,
    /// A constructor value that Mithril did not write to the JSON, as PATH.KEY=VALUE
    /// (PATH as in error messages, e.g. submodels.m_2.index=0; VALUE is JSON)
    #[arg(long = "set", value_name = "PATH.KEY=VALUE")]
    set: Vec<String>,
    /// A value for one of the model's keys fixed at compile time, as NAME=VALUE (VALUE
    /// is JSON: a number, or a nested list for a tensor key; Mithril's constant_keys)
    #[arg(long = "const", value_name = "NAME=VALUE")]
    constants: Vec<String>,
    /// A key of the model that is a list of N tensors (a Concat's input), as NAME=N: it
    /// becomes N inputs NAME_0 ... NAME_{N-1}
    #[arg(long = "list", value_name = "NAME=N")]
    lists: Vec<String>,
    /// Print the IR (or, after a program pass, the program) after this pass, to stderr;
    /// repeatable
    #[arg(long = "print-after", value_name = "PASS", value_parser = PossibleValuesParser::new(codegen::pass_names()))]
    print_after: Vec<String>,
}

impl ModelOpts {
    fn into_args(self) -> cli::ModelArgs {
        cli::ModelArgs { model: self.model, text: None, shapes: self.shapes, set: self.set, constants: self.constants, lists: self.lists, print_after: self.print_after, grad: Default::default() }
    }
}

/// `--grad` or `--grad NAME,...`.
#[derive(Args)]
struct GradOpts {
    /// Also derive gradients: of every parameter (bare --grad), or of the named ones.
    /// Output cotangents come from arrays output_grad/NAME in the data (ones where
    /// absent; a model with a loss is differentiated through the loss); each gradient is
    /// an output grad/NAME. compile adds <name>_backward and, with a loss,
    /// <name>_train_step
    #[arg(long, value_name = "NAMES", num_args = 0..=1, default_missing_value = "", require_equals = false)]
    grad: Option<String>,
}

impl GradOpts {
    fn wrt(&self) -> Result<crate::passes::autodiff::Wrt, Error> {
        use crate::passes::autodiff::Wrt;
        match self.grad.as_deref() {
            None => Ok(Wrt::None),
            Some("") => Ok(Wrt::AllParams),
            Some(names) => {
                let names: Vec<String> = names.split(',').map(|n| n.trim().to_string()).collect();
                if names.iter().any(String::is_empty) {
                    return Err(Error::usage(format!(
                        "--grad {}: a parameter name is empty (give NAME,NAME,... or a bare --grad for every parameter)",
                        self.grad.as_deref().unwrap_or_default()
                    )));
                }
                Ok(Wrt::Params(names))
            }
        }
    }
}

/// The model arguments with the gradients asked for.
fn with_grad(model: ModelOpts, grad: &GradOpts) -> Result<cli::ModelArgs, Error> {
    Ok(cli::ModelArgs { grad: grad.wrt()?, ..model.into_args() })
}

#[derive(Subcommand)]
enum Command {
    /// Print the model's IR after shape inference, with parameter count and FLOPs
    Inspect {
        #[command(flatten)]
        model: ModelOpts,
        #[command(flatten)]
        grad: GradOpts,
        /// Parameters (.safetensors or .npz) whose shapes complete the model's
        #[arg(long, value_name = "FILE")]
        params: Option<PathBuf>,
    },
    /// Run the model with the reference interpreter or a compiled target
    Run {
        #[command(flatten)]
        model: ModelOpts,
        #[command(flatten)]
        grad: GradOpts,
        /// Inputs: FILE (.npz, .npy or .safetensors; arrays named NAME or input/NAME),
        /// or NAME=FILE for a file holding the one array of input NAME
        #[arg(long, value_name = "FILE", required = true)]
        data: Vec<String>,
        /// Parameters (.safetensors or .npz); arrays named NAME or param/NAME
        #[arg(long, value_name = "FILE")]
        params: Option<PathBuf>,
        /// Write the outputs to this file, by its extension: .npz or .safetensors (every
        /// output under its key) or .npy (a run with one output)
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Where to run: the reference interpreter, or a target (compiled, built and run)
        #[arg(long, default_value = "interp", value_name = "TARGET", value_parser = run_target())]
        target: cli::RunTarget,
        /// Also run the interpreter and print the largest difference per output
        #[arg(long)]
        check: bool,
        /// Run a GPU target's kernels on the CPU (--target cuda, compiled as host C++
        /// against mithrilc's emulation of CUDA): a test of the kernels' logic that needs
        /// no GPU, not a measure of speed
        #[arg(long)]
        emulate: bool,
        /// How a compiled target's matrix products and convolutions may round: f32
        /// (exact, the default) or, on cuda, tf32, bf16 or f16 on tensor cores
        #[arg(long, value_enum, default_value_t, value_name = "PRECISION")]
        precision: Precision,
        /// What runs the matrix products: builtin (the target's kernels, the default) or,
        /// on cuda, cublaslt (cuBLASLt loaded at run time where it takes the product and
        /// its epilogue; the built-in kernels elsewhere and under --emulate; docs/cuda.md)
        #[arg(long, value_enum, default_value_t, value_name = "KERNELS")]
        gemm: Gemm,
        /// The type float sums (reductions: LayerNorm's mean and variance, softmax's
        /// sum) accumulate in: cuda f32 (the default: fast on every GPU, within the
        /// bound docs/cuda.md gives) or f64 (the interpreter's; slow where f64 is)
        #[arg(long, value_enum, value_name = "TYPE")]
        accumulate: Option<Accumulate>,
        /// How a compiled target stores the weights of matrix products and convolutions
        /// (computing in f32): c takes f16, bf16, q8_0, and int8 (int8 products); ggml
        /// f16, bf16, q8_0, q4_0. With --check, the difference from the interpreter is the
        /// narrowing's error
        #[arg(long, value_enum, default_value_t, value_name = "TYPE")]
        quantize: Quantize,
        /// Refused unless this machine's: compile --triple cross-builds
        #[arg(long, value_name = "TRIPLE")]
        triple: Option<String>,
        /// Build without the build cache (so does MITHRILC_NO_CACHE=1; see mithrilc cache)
        #[arg(long)]
        no_cache: bool,
        /// --target jit: the threads a run splits its work over (default: every core)
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
        threads: Option<u32>,
        /// --target jit or interp: run N times more after the first and print the median
        /// time of a run (the model is compiled once)
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        repeat: Option<u32>,
    },
    /// Compile the model for a target and build it
    Compile {
        #[command(flatten)]
        model: ModelOpts,
        #[command(flatten)]
        grad: GradOpts,
        /// The target
        #[arg(long, value_name = "TARGET", value_parser = compile_target())]
        target: &'static dyn Backend,
        /// Parameters (.safetensors or .npz): their shapes complete the model's, their
        /// values are written to weights.bin
        #[arg(long, value_name = "FILE")]
        params: Option<PathBuf>,
        /// Output directory, written atomically (nothing is left on failure): a new or
        /// empty directory, or one mithrilc wrote before (listed in its .mithrilc-output)
        #[arg(short, long, value_name = "OUTDIR")]
        output: Option<PathBuf>,
        /// Replace a previous output of mithrilc even where its files were changed since
        /// it wrote them (a directory holding files mithrilc did not write is never replaced)
        #[arg(long)]
        force: bool,
        /// What to produce
        #[arg(long, value_enum, default_value_t, value_name = "WHAT")]
        emit: cli::Emit,
        /// Print the kernel count, weights size, arena size and its peak-live lower bound:
        /// as text, or (--report=json) as one JSON object on stdout. The `=` is required,
        /// so a bare --report never takes the next argument as its format
        #[arg(long, value_enum, value_name = "FORMAT", num_args = 0..=1, require_equals = true, default_missing_value = "human")]
        report: Option<cli::ReportFormat>,
        /// How the library gets its weights
        #[arg(long, value_enum, default_value_t, value_name = "MODE")]
        weights: WeightsMode,
        /// How the weights are stored. With --grad the weights are always plain:
        /// training updates them in place
        #[arg(long = "weight-layout", value_enum, default_value_t, value_name = "LAYOUT")]
        weight_layout: WeightLayout,
        /// C compiler flags for the build (default "-O3"). CC picks the compiler
        #[arg(long, value_name = "FLAGS", allow_hyphen_values = true)]
        cflags: Option<String>,
        /// Build the C target's library for one CPU: a -march value (native: this
        /// machine; haswell, znver3, x86-64-v3, armv8.2-a, ...). By default the library
        /// is portable: it runs on any CPU of its architecture and picks the runtime's
        /// AVX2 or AVX-512 kernels at run time where the CPU has them
        #[arg(long, value_name = "CPU")]
        cpu: Option<String>,
        /// Cross-build the C target for a target triple (aarch64-linux-gnu, arm-none-eabi:
        /// docs/c.md) with the compiler $CC, else TRIPLE-gcc
        #[arg(long, value_name = "TRIPLE")]
        triple: Option<String>,
        /// The largest run-time value of a symbolic dimension, as NAME=N (e.g. --shape
        /// input=B,784 --max B=64): the library takes B as an argument and its arena is
        /// sized for N; repeatable
        #[arg(long = "max", value_name = "NAME=N")]
        max: Vec<String>,
        /// How matrix products and convolutions may round: f32 (exact, the default) or,
        /// on cuda, tf32, bf16 or f16 on tensor cores (docs/cuda.md gives their errors)
        #[arg(long, value_enum, default_value_t, value_name = "PRECISION")]
        precision: Precision,
        /// What runs the matrix products: builtin (the target's kernels, the default) or,
        /// on cuda, cublaslt (cuBLASLt loaded at run time where it takes the product and
        /// its epilogue; the built-in kernels elsewhere and under --emulate; docs/cuda.md)
        #[arg(long, value_enum, default_value_t, value_name = "KERNELS")]
        gemm: Gemm,
        /// The type float sums (reductions: LayerNorm's mean and variance, softmax's
        /// sum) accumulate in: cuda f32 (the default: fast on every GPU, within the
        /// bound docs/cuda.md gives) or f64 (the interpreter's; slow where f64 is)
        #[arg(long, value_enum, value_name = "TYPE")]
        accumulate: Option<Accumulate>,
        /// Partition over a device mesh, as AXIS=N,... with axes data and model (xla: e.g.
        /// --mesh data=4 or data=2,model=2; docs/xla.md says what is split)
        #[arg(long, value_name = "AXIS=N,...")]
        mesh: Option<String>,
        /// The GPU whose launches --target cuda's --report shows (waves, tiles, a roofline
        /// estimate): h100 (the default), h200, a100, l4 or rtx4090
        #[arg(long, value_name = "NAME")]
        gpu: Option<String>,
        /// How the weights of matrix products and convolutions are stored, computing in
        /// f32: c takes f16, bf16 and q8_0, and int8, whose matrix products multiply in
        /// int8 (docs/c.md); ggml f16, bf16, q8_0 and q4_0 (docs/ggml.md); other targets
        /// f32 only. Not with --grad
        #[arg(long, value_enum, default_value_t, value_name = "TYPE")]
        quantize: Quantize,
        /// Build without the build cache (so does MITHRILC_NO_CACHE=1; see mithrilc cache)
        #[arg(long)]
        no_cache: bool,
    },
    /// Show the build cache: where it is, its entries and their size (`clean` empties it)
    ///
    /// compile and run keep the objects that are the same for every model (the C
    /// target's runtime) in it, and copy them instead of compiling them again. It is
    /// $MITHRILC_CACHE_DIR, else $XDG_CACHE_HOME/mithrilc/builds, else
    /// ~/.cache/mithrilc/builds; MITHRILC_NO_CACHE=1 or --no-cache turns it off
    Cache {
        #[command(subcommand)]
        action: Option<CacheAction>,
    },
    /// List the targets, with what each builds and the tools it needs
    Targets {
        /// Instead, the element types each target compiles each IR op in, from the
        /// targets' own checks
        #[arg(long)]
        ops: bool,
    },
    /// Print a shell completion script
    ///
    /// For example: mithrilc completions bash > ~/.local/share/bash-completion/completions/mithrilc
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write a compiled model's weights.bin back to a parameters file
    ///
    /// The blob (after <name>_train_step updated it, or copied from a device) is read
    /// under the model's parameter names. Give the model and the flags it was compiled
    /// with: they decide where each parameter is in the blob
    ExportWeights {
        #[command(flatten)]
        model: ModelOpts,
        #[command(flatten)]
        grad: GradOpts,
        /// The target it was compiled for (c, cuda or metal: those that write weights.bin)
        #[arg(long, value_name = "TARGET", value_parser = compile_target(), default_value = "c")]
        target: &'static dyn Backend,
        /// How compile stored the weights (--weight-layout); a Winograd-transformed
        /// convolution weight cannot be read back: compile with plain to export
        #[arg(long = "weight-layout", value_enum, default_value_t, value_name = "LAYOUT")]
        weight_layout: WeightLayout,
        /// The --max compile was given, as NAME=N; repeatable
        #[arg(long = "max", value_name = "NAME=N")]
        max: Vec<String>,
        /// The --quantize compile was given: narrowed weights are read back as the f32
        /// values they store (the approximations the library computes with)
        #[arg(long, value_enum, default_value_t, value_name = "TYPE")]
        quantize: Quantize,
        /// The parameters file compile was given, if any: its shapes complete the model's
        #[arg(long, value_name = "FILE")]
        params: Option<PathBuf>,
        /// The weights blob
        #[arg(long, value_name = "WEIGHTS.bin")]
        weights: PathBuf,
        /// The header compile wrote with it, whose <NAME>_WEIGHTS_LAYOUT the blob's layout
        /// must match (default: <name>.h beside the blob, where there is one)
        #[arg(long, value_name = "NAME.h")]
        header: Option<PathBuf>,
        /// The parameters file to write, by its extension: .safetensors, .npz or (a model
        /// with one parameter) .npy
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
    },
}

#[derive(Subcommand)]
enum CacheAction {
    /// Remove every entry (only what mithrilc put there)
    Clean,
}

/// Whether the raw arguments ask for JSON errors, for the errors clap finds before the
/// parsed `--message-format` exists.
fn json_requested(args: &[OsString]) -> bool {
    // OsString: an argument that is not UTF-8 (a path) must not panic here.
    args.iter().any(|a| a == "--message-format=json") || args.windows(2).any(|w| w[0] == "--message-format" && w[1] == "json")
}

/// `mithrilc targets`: each target, what it builds and what it needs.
fn targets() -> String {
    let mut s = String::new();
    for b in codegen::TARGETS {
        s.push_str(&format!("{}\n  builds: {}\n  needs:  {}\n", b.name(), b.about(), b.toolchain().needs()));
    }
    s
}

/// The `mithrilc` process: parses `args` (the program's name first), runs the command,
/// prints its output to stdout and an error to stderr (as `--message-format` asks), and
/// returns the exit code. It removes its scratch directories on SIGINT, SIGTERM and
/// SIGHUP, so it takes those signals over: call it as a process's whole work.
pub fn main(args: impl IntoIterator<Item = impl Into<OsString>>) -> u8 {
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() && json_requested(&args) => {
            let error = clap_error(&e);
            eprintln!("{}", error.to_json());
            return error.kind.exit_code() as u8;
        }
        Err(e) => {
            // --help and --version to stdout (exit 0), usage errors to stderr (exit 2).
            let _ = e.print();
            return e.exit_code() as u8;
        }
    };
    crate::outdir::remove_scratch_on_signals();
    let format = cli.message_format;
    match run(cli) {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            match format {
                MessageFormat::Human => eprintln!("error: {e}"),
                MessageFormat::Json => eprintln!("{}", e.to_json()),
            }
            e.kind.exit_code() as u8
        }
    }
}

/// One command, for a program that embeds mithrilc: parses `args` (the program's name
/// first) as [`main`] does and returns what the command prints (for `--help`, the help),
/// or its error; a malformed command line is a usage error with clap's message. It
/// prints nothing and leaves signals alone.
pub fn execute(args: impl IntoIterator<Item = impl Into<OsString>>) -> Result<String, Error> {
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    match Cli::try_parse_from(&args) {
        Ok(cli) => run(cli),
        Err(e) if !e.use_stderr() => Ok(e.render().to_string()),
        Err(e) => Err(clap_error(&e)),
    }
}

/// A usage error with clap's message, without its `error: ` prefix.
fn clap_error(e: &clap::Error) -> Error {
    Error::usage(e.render().to_string().trim_end().trim_start_matches("error: "))
}

/// Runs a parsed command: what it prints, or its error.
fn run(cli: Cli) -> Result<String, Error> {
    match cli.command {
        Command::Inspect { model, grad, params } => with_grad(model, &grad).and_then(|model| cli::inspect(&model, params.as_deref())),
        Command::Run { model, grad, data, params, output, target, check, emulate, precision, gemm, accumulate, quantize, triple, no_cache, threads, repeat } => with_grad(model, &grad)
            .and_then(|model| cli::run(&cli::RunArgs { model, target, check, emulate, precision, gemm, accumulate, quantize, data, params, output, triple, no_cache, threads, repeat }).map(|(_, report)| report)),
        Command::Compile { model, grad, target, params, output, force, emit, report, weights, weight_layout, cflags, cpu, triple, max, precision, gemm, accumulate, mesh, gpu, quantize, no_cache } => {
            with_grad(model, &grad).and_then(|model| {
                let (report, report_format) = (report.is_some(), report.unwrap_or_default());
                let args = cli::CompileArgs { model, target, params, out: output, emit, report, report_format, weights, layout: weight_layout, cflags, cpu, triple, max, force, precision, gemm, accumulate, mesh, gpu, quantize, no_cache };
                cli::compile(&args)
            })
        }
        Command::Cache { action } => Ok(cli::cache(matches!(action, Some(CacheAction::Clean)))),
        Command::Targets { ops: false } => Ok(targets()),
        Command::Targets { ops: true } => Ok(crate::docs::op_support_text()),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "mithrilc", &mut script);
            String::from_utf8(script).map_err(|e| Error::internal(format!("the completion script is not UTF-8: {e}")))
        }
        Command::ExportWeights { model, grad, target, weight_layout, max, quantize, params, weights, header, output } => with_grad(model, &grad)
            .and_then(|model| cli::export_weights(&cli::ExportArgs { model, params, target, layout: weight_layout, max, quantize, weights, header, output })),
    }
}
