//! How names from the model become names in generated code: identifiers and file
//! stems, port labels, and text inside comments and string literals of C-like languages
//! (C, CUDA and Metal spell these alike). Model names never become paths or shell words
//! any other way.

use std::fmt::Write as _;

use crate::hash::fnv1a;
use crate::lower::Program;

/// The longest identifier [`identifier`] makes (file names are built from it too).
const MAX_IDENTIFIER: usize = 48;

/// A C identifier (and file-name stem) from a model name: legal, lower case, at most
/// [`MAX_IDENTIFIER`] characters (a longer one keeps its start and gains a hash of the
/// whole name, so distinct names stay distinct), and never one of the runtime's names
/// (`mithril_runtime`, `mithril_ops`, `mr_*`: their files, include guards and symbols).
/// Callers that need uniqueness among several names add a number
/// ([`dim_params`], buffer names).
pub fn identifier(name: &str) -> String {
    let mut s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) || s.starts_with('_') {
        s.insert(0, 'm');
    }
    if s == "mr" || s.starts_with("mr_") || s.starts_with("mithril_") {
        s.insert_str(0, "model_");
    }
    if s.len() > MAX_IDENTIFIER {
        s.truncate(MAX_IDENTIFIER - 17);
        let _ = write!(s, "_{:016x}", fnv1a(name.as_bytes()));
    }
    s
}

/// The longest name, in bytes, that generated code spells out in a string literal
/// (C99 promises literals of 4,095 characters; escapes only shorten the count).
const MAX_LABEL: usize = 1000;

/// A port's name as the demo spells it (`--input NAME=`, its messages): the name, or
/// for one over [`MAX_LABEL`] bytes its start, `~` and a hash of the whole name.
pub fn port_label(name: &str) -> String {
    if name.len() <= MAX_LABEL {
        return name.to_string();
    }
    let mut end = MAX_LABEL - 17;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}~{:016x}", &name[..end], fnv1a(name.as_bytes()))
}

/// Text from the model as it may stand in a C comment (or a Makefile's): printable
/// ASCII, with `_` for anything else, for a backslash, and for the second character of
/// any pair that could end or open a comment (`*/`, `/*`) or start a trigraph (`??`).
pub fn comment_safe(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev = ' ';
    for c in s.chars() {
        let c = if (c.is_ascii_graphic() || c == ' ') && c != '\\' { c } else { '_' };
        let c = match (prev, c) {
            ('*', '/') | ('/', '*') | ('?', '?') => '_',
            _ => c,
        };
        out.push(c);
        prev = c;
    }
    out
}

/// A model name as the body of a C string literal (`?` escaped, so no `??x` is read
/// as a trigraph).
pub fn c_string(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '"' | '\\' | '?' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_ascii_graphic() || c == ' ' => out.push(c),
            c => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(out, "\\{b:03o}");
                }
            }
        }
    }
    out
}

/// The C parameter of each symbolic dimension: `dim_<name>`, numbered as well if two
/// names would collide.
pub fn dim_params(p: &Program) -> Vec<String> {
    let plain: Vec<String> = p.symbols.iter().map(|(n, _)| format!("dim_{}", identifier(n))).collect();
    let unique = plain.iter().collect::<std::collections::BTreeSet<_>>().len() == plain.len();
    if unique {
        plain
    } else {
        plain.iter().enumerate().map(|(i, n)| format!("{n}_{i}")).collect()
    }
}
