//! The `mithrilc` command line: [`mithrilc::command`] as a process.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(mithrilc::command::main(std::env::args_os()))
}
