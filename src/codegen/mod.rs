//! Code generators, one module per target, all shaped alike (Options, emit) and fed
//! a lowered [`crate::lower::Program`]. `cstyle` is the renderer C-like targets share.

pub mod c;
pub mod cstyle;
