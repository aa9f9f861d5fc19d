//! Errors, and the exit code each kind maps to.
//!
//! Every failure a user can cause is an [`Error`] with [`ErrorKind::User`]; nothing a
//! model file or a data file contains may reach a panic. Messages name the file, the
//! JSON path or IR node, and the shapes involved; notes add hints on separate lines.

use std::fmt;

/// Which side is at fault, which decides the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The user's model or data is wrong (exit 1).
    User,
    /// The command line is wrong (exit 2; clap reports most of these itself).
    Usage,
    /// An external toolchain is missing or failed (exit 3).
    Toolchain,
    /// A bug in mithrilc (exit 101).
    Internal,
}

impl ErrorKind {
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::User => 1,
            ErrorKind::Usage => 2,
            ErrorKind::Toolchain => 3,
            ErrorKind::Internal => 101,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    pub notes: Vec<String>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into(), notes: Vec::new() }
    }
    pub fn user(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::User, message)
    }
    pub fn usage(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Usage, message)
    }
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Internal, message)
    }
    /// Adds a hint printed under the message.
    pub fn note(mut self, note: impl Into<String>) -> Error {
        self.notes.push(note.into());
        self
    }
    /// Prefixes the message with where it happened (`file.json: ...`).
    pub fn context(mut self, prefix: impl fmt::Display) -> Error {
        self.message = format!("{prefix}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        for note in &self.notes {
            write!(f, "\n  note: {note}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// Runs `f`, a panic in it becoming an internal error (`"{context}: {the panic's
/// message}"`) rather than unwinding into the caller: a process that embeds mithrilc
/// (the Python interpreter) gets an error, not a crash.
pub fn catch_panic<T>(context: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let why = panic.downcast_ref::<String>().map(String::as_str).or_else(|| panic.downcast_ref::<&str>().copied()).unwrap_or("a panic");
        Err(Error::internal(format!("{context}: {why}")))
    })
}

impl ErrorKind {
    /// The name `--message-format json` gives the kind.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::User => "user",
            ErrorKind::Usage => "usage",
            ErrorKind::Toolchain => "toolchain",
            ErrorKind::Internal => "internal",
        }
    }
}

impl Error {
    /// The error as one JSON object (`--message-format json`): `kind`, `exit_code`,
    /// `message`, `notes`, and `file` (with `line` and `column` where given) when the
    /// message starts by naming one, as messages do (`FILE: ...`, `FILE:LINE:COL: ...`,
    /// `cannot read FILE: ...`).
    pub fn to_json(&self) -> serde_json::Value {
        let mut out = serde_json::json!({
            "kind": self.kind.name(),
            "exit_code": self.kind.exit_code(),
            "message": self.message,
            "notes": self.notes,
        });
        if let Some((file, place)) = self.file() {
            out["file"] = file.into();
            if let Some((line, column)) = place {
                out["line"] = line.into();
                out["column"] = column.into();
            }
        }
        out
    }

    /// The file the message starts by naming, and the line and column after it if any.
    fn file(&self) -> Option<(&str, Option<(u64, u64)>)> {
        let m = &self.message;
        let m = m.strip_prefix("cannot read ").or_else(|| m.strip_prefix("cannot write ")).unwrap_or(m);
        let (head, _) = m.split_once(": ")?;
        let mut parts = head.rsplitn(3, ':');
        let (col, line, file) = (parts.next(), parts.next(), parts.next());
        if let (Some(Ok(col)), Some(Ok(line)), Some(file)) = (col.map(str::parse), line.map(str::parse), file) {
            return Some((file, Some((line, col))));
        }
        // A file name has an extension and no spaces: not a `--flag VALUE` or a sentence.
        let named = !head.contains(' ') && std::path::Path::new(head).extension().is_some();
        named.then_some((head, None))
    }
}

/// An I/O error's message without the trailing ` (os error N)`.
pub fn io_message(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// `user_error!("...", args)`: an [`Error`] of kind [`ErrorKind::User`].
#[macro_export]
macro_rules! user_error {
    ($($arg:tt)*) => { $crate::error::Error::user(format!($($arg)*)) };
}

/// `internal_error!("...", args)`: an [`Error`] of kind [`ErrorKind::Internal`].
#[macro_export]
macro_rules! internal_error {
    ($($arg:tt)*) => { $crate::error::Error::internal(format!($($arg)*)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_an_internal_error_not_an_unwind() {
        let e = catch_panic("embedding", || -> Result<()> { panic!("boom {}", 1) }).unwrap_err();
        assert_eq!((e.kind, e.message.as_str()), (ErrorKind::Internal, "embedding: boom 1"));
        let e = catch_panic("embedding", || -> Result<()> { std::panic::panic_any(7) }).unwrap_err();
        assert_eq!(e.message, "embedding: a panic");
        assert_eq!(catch_panic("embedding", || Ok(3)), Ok(3));
    }
}
