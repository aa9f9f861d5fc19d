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
