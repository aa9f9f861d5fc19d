//! The frontend for Mithril's serialized model JSON (`model_to_dict` output; see
//! `../shared/formats/mithril-json.md`).
//!
//! Three steps, one file each: `json` parses the file into model nodes, `net`
//! instantiates them into primitives over union-found value slots (expanding named
//! models with `library`), and `emit` evaluates compile-time values and emits the IR
//! (`formulas`: each primitive's ops) through the shared [`crate::frontend::builder`].

mod attrs;
mod emit;
mod formulas;
mod json;
mod library;
mod net;
mod template;
mod value;

pub use emit::{expand, load, load_str, Options};
pub use library::{known_classes, Formula, COMPOSITES, MITHRIL_UNSUPPORTED, PRIMITIVES};
