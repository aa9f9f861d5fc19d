//! Code generators. Program targets (C; CUDA and Metal next) render a lowered
//! [`crate::lower::Program`] through `cstyle`, the renderer C-like languages share;
//! graph targets (ggml, XLA) write the IR graph through [`graph`]. `names`, `weights`
//! and `train` hold what every target writes alike: identifiers and labels, the
//! weights blob, the training step's layout. Each target is a `crate::backend::Backend`.

pub mod c;
pub mod cstyle;
pub mod graph;
pub mod names;
pub mod train;
pub mod weights;
