//! Frontends: input formats parsed into the IR. Nothing downstream knows which
//! format a graph came from.

pub mod mithril;
