//! mithrilc: an ahead-of-time compiler for Mithril models.
//!
//! Data flows one way (see `docs/architecture.md`):
//! `frontend` (model JSON → [`ir::Graph`]) → [`passes`] → targets, with [`interp`] as
//! the reference semantics every target is tested against.
//!
//! To embed it (load a model, compile it in this process, run it on arrays), start at
//! [`Model`].

pub mod backend;
pub mod build;
pub mod cache;
pub mod cli;
pub mod codegen;
pub mod command;
pub mod data;
pub mod docs;
pub mod error;
pub mod exec;
pub mod frontend;
pub mod hash;
pub mod interp;
pub mod ir;
pub mod lower;
pub mod model;
pub mod narrow;
pub mod outdir;
pub mod passes;
pub mod pipeline;
pub mod tensor;

pub use error::{Error, ErrorKind, Result};
pub use model::Model;
