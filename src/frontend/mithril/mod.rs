//! The frontend for Mithril's serialized model JSON (`model_to_dict` output; see
//! `../shared/formats/mithril-json.md`).
//!
//! Three steps, one file each: `json` parses the file into model nodes, `net`
//! instantiates them into primitives over union-found value slots (expanding named
//! models with `library`), and `emit` evaluates compile-time values and emits the IR
//! (`formulas`: each primitive's ops) through the shared [`crate::ir::builder`].

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

use std::path::Path;

use crate::error::Result;

/// What only Mithril's model JSON understands, beyond [`super::Options`].
#[derive(Debug, Clone, Default)]
pub struct Extra {
    /// Constructor values Mithril did not write to the JSON (`--set PATH.KEY=VALUE`).
    pub set: Vec<(String, serde_json::Value)>,
    /// Top-level keys that are lists of tensors (`--list NAME=N`).
    pub list_inputs: Vec<(String, usize)>,
}

/// Mithril's model JSON as a [`super::Format`].
pub struct MithrilJson;

impl super::Format for MithrilJson {
    fn name(&self) -> &'static str {
        "Mithril model JSON"
    }

    /// Text: JSON has no binary form, and a text file that is not a model gets the JSON
    /// parser's message, which says where it goes wrong.
    fn recognizes(&self, head: &[u8]) -> bool {
        let text = match std::str::from_utf8(head) {
            Ok(text) => text,
            // The head may end inside a character.
            Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default(),
            Err(_) => return false,
        };
        !text.contains('\0')
    }

    fn load(&self, path: &Path, opts: &super::Options) -> Result<super::Model> {
        Ok(super::Model { graph: load(path, &emit_options(opts))?, weights: Default::default() })
    }
}

/// A model's JSON held in memory (an embedder's model dict, serialized); `path` names it
/// in messages and gives the model its name (its stem).
pub fn load_text(path: &Path, text: &str, opts: &super::Options) -> Result<super::Model> {
    let name = path.file_stem().map_or("model".to_string(), |s| s.to_string_lossy().into_owned());
    Ok(super::Model { graph: load_str(text, &path.display().to_string(), &name, &emit_options(opts))?, weights: Default::default() })
}

/// What the frontends' options tell this one.
fn emit_options(opts: &super::Options) -> Options {
    Options {
        shapes: opts.shapes.clone(),
        known_types: opts.known_types.clone(),
        set: opts.mithril.set.clone(),
        data_keys: Default::default(),
        constants: opts.constants.clone(),
        list_inputs: opts.mithril.list_inputs.clone(),
    }
}
