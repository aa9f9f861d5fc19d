//! The `mithrilc` command line: a thin clap front over `mithrilc::cli`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use mithrilc::cli;

#[derive(Parser)]
#[command(name = "mithrilc", version, about = "Ahead-of-time compiler for Mithril models", propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct ModelOpts {
    /// Mithril model JSON (the output of `model_to_dict`)
    model: PathBuf,
    /// Shape of an input or parameter, as NAME=D0,D1,... (a dimension may be a symbol: input=B,784)
    #[arg(long = "shape", value_name = "NAME=DIMS")]
    shapes: Vec<String>,
    /// A constructor value that Mithril did not write to the JSON, as PATH.KEY=VALUE
    /// (PATH as in error messages, e.g. submodels.m_2.index=0; VALUE is JSON)
    #[arg(long = "set", value_name = "PATH.KEY=VALUE")]
    set: Vec<String>,
}

impl ModelOpts {
    fn into_args(self) -> cli::ModelArgs {
        cli::ModelArgs { model: self.model, shapes: self.shapes, set: self.set }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Print the model's IR after shape inference, with parameter count and FLOPs
    Inspect {
        #[command(flatten)]
        model: ModelOpts,
        /// Parameters (.safetensors or .npz) whose shapes complete the model's
        #[arg(long, value_name = "FILE")]
        params: Option<PathBuf>,
    },
    /// Run the model with the reference interpreter
    Run {
        #[command(flatten)]
        model: ModelOpts,
        /// Inputs: FILE (.npz, .npy or .safetensors; arrays named NAME or input/NAME),
        /// or NAME=FILE for a file holding the one array of input NAME
        #[arg(long, value_name = "FILE", required = true)]
        data: Vec<String>,
        /// Parameters (.safetensors or .npz); arrays named NAME or param/NAME
        #[arg(long, value_name = "FILE")]
        params: Option<PathBuf>,
        /// Write the outputs to this .npz, one array per output named by its key
        #[arg(short, long, value_name = "OUT.npz")]
        output: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect { model, params } => cli::inspect(&model.into_args(), params.as_deref()),
        Command::Run { model, data, params, output } => {
            cli::run(&cli::RunArgs { model: model.into_args(), data, params, output }).map(|(_, report)| report)
        }
    };
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.kind.exit_code() as u8)
        }
    }
}
