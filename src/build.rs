//! Running external toolchains and writing output directories.
//!
//! A missing toolchain is an error of kind [`ErrorKind::Toolchain`] (exit 3) that says
//! how to install it; a failing one reports its output. Output directories are written
//! atomically: into a temporary sibling, then renamed into place, so a failure leaves
//! nothing half-written.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{io_message, Error, ErrorKind, Result};

/// Writes `files` into `dir` atomically (replacing a previous `dir`), then runs
/// `prepare` (e.g. the build) inside the temporary directory before the rename, so a
/// failed build leaves `dir` as it was.
pub fn write_dir_atomically(dir: &Path, files: &[(String, Vec<u8>)], prepare: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| Error::user(format!("cannot create {}: {}", parent.display(), io_message(&e))))?;
    let tmp = tempfile::Builder::new()
        .prefix(".mithrilc-")
        .tempdir_in(&parent)
        .map_err(|e| Error::user(format!("cannot create a directory in {}: {}", parent.display(), io_message(&e))))?;
    for (name, bytes) in files {
        let path = tmp.path().join(name);
        std::fs::write(&path, bytes).map_err(|e| Error::user(format!("cannot write {}: {}", path.display(), io_message(&e))))?;
    }
    prepare(tmp.path())?;
    let staged = tmp.keep();
    if dir.exists() {
        let old = parent.join(format!(".mithrilc-old-{}", std::process::id()));
        std::fs::rename(dir, &old).map_err(|e| Error::user(format!("cannot replace {}: {}", dir.display(), io_message(&e))))?;
        let moved = std::fs::rename(&staged, dir);
        let _ = std::fs::remove_dir_all(&old);
        moved.map_err(|e| Error::user(format!("cannot write {}: {}", dir.display(), io_message(&e))))?;
    } else {
        std::fs::rename(&staged, dir).map_err(|e| Error::user(format!("cannot write {}: {}", dir.display(), io_message(&e))))?;
    }
    Ok(())
}

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
pub fn run_tool(mut cmd: Command, tool: &str, install: &str) -> Result<()> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| {
        Error::new(ErrorKind::Toolchain, format!("cannot run {tool}: {}", io_message(&e))).note(format!("install it: {install}"))
    })?;
    if !out.status.success() {
        let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stdout));
        let tail: Vec<&str> = text.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
        return Err(Error::new(ErrorKind::Toolchain, format!("{tool} failed ({}): {shown}\n{}", out.status, tail.join("\n"))));
    }
    Ok(())
}
