//! Code generators. Program targets (C, CUDA, Metal) render a lowered
//! [`crate::lower::Program`] through `cstyle`, the renderer C-like languages share
//! (`c`, and the kernels of `cuda` and `metal`);
//! graph targets (ggml, XLA) write the IR graph through [`graph`]. `names`, `weights`
//! and `train` hold what every target writes alike: identifiers and labels, the
//! weights blob, the training step's layout. Each target is a `crate::backend::Backend`.

pub mod c;
pub mod cstyle;
pub mod cuda;
pub mod ggml;
pub mod graph;
pub mod metal;
pub mod names;
pub mod train;
pub mod weights;
pub mod xla;
