//! Frontends: input formats parsed into the IR. Nothing downstream knows which
//! format a graph came from: every frontend emits its nodes through the shared
//! [`builder::Builder`], so the same model read from two formats is the same graph.

pub mod builder;
pub mod mithril;
