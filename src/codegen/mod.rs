//! Code generators, one module per target, all shaped alike (Options, emit) and fed
//! a lowered [`crate::lower::Program`]. `cstyle` is the renderer C-like targets share
//! (`c`, and the kernels of `cuda` and `metal`, which are not compile targets yet);
//! `names`, `weights` and `train` hold what every target writes alike (identifiers and
//! labels, the weights blob, the training step's layout).

pub mod c;
pub mod cstyle;
pub mod cuda;
pub mod metal;
pub mod names;
pub mod train;
pub mod weights;
