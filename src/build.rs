//! Running external toolchains.
//!
//! A missing toolchain is an error of kind [`ErrorKind::Toolchain`] (exit 3) that says
//! how to install it; a failing one reports its output. Where their output goes is
//! `outdir`'s business.

use std::path::Path;
use std::process::Command;

use crate::error::{io_message, Error, ErrorKind, Result};

/// The C compiler: `$CC`, else `cc`.
pub fn c_compiler() -> String {
    std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "cc".to_string())
}

/// Runs `make` in `dir` with the C compiler and flags given.
pub fn make(dir: &Path, cc: &str, cflags: &str) -> Result<()> {
    let mut cmd = Command::new("make");
    cmd.current_dir(dir).arg("-s").arg(format!("CC={cc}")).arg(format!("CFLAGS={cflags}"));
    run_tool(cmd, "make", "apt-get install make gcc (Debian/Ubuntu), or set CC to your C compiler")
}

/// Runs a toolchain command; its failure is an error of kind `Toolchain`.
pub fn run_tool(cmd: Command, tool: &str, install: &str) -> Result<()> {
    run_checked(cmd, tool, install, None)
}

/// Runs a program built from the user's model: exit status `rejects` is the program
/// saying the user's data is wrong (an error of kind `User` with its message); any
/// other failure is the toolchain's.
pub fn run_program(cmd: Command, tool: &str, install: &str, rejects: i32) -> Result<()> {
    run_checked(cmd, tool, install, Some(rejects))
}

fn run_checked(mut cmd: Command, tool: &str, install: &str, rejects: Option<i32>) -> Result<()> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| {
        Error::new(ErrorKind::Toolchain, format!("cannot run {tool}: {}", io_message(&e))).note(format!("install it: {install}"))
    })?;
    if rejects.is_some() && out.status.code() == rejects {
        let text = String::from_utf8_lossy(&out.stderr);
        let message = text.lines().last().unwrap_or_default();
        let message = message.split_once(": ").map_or(message, |(_, m)| m);
        return Err(Error::user(format!("{tool}: {message}")));
    }
    if !out.status.success() {
        let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stdout));
        let tail: Vec<&str> = text.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
        return Err(Error::new(ErrorKind::Toolchain, format!("{tool} failed ({}): {shown}\n{}", out.status, tail.join("\n"))));
    }
    Ok(())
}
