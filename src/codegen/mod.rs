//! Code generators. Program targets (C, CUDA, Metal) render a lowered
//! [`crate::lower::Program`] through `cstyle`, the renderer C-like languages share
//! (`c`, and the kernels of `cuda` and `metal`);
//! graph targets (ggml, XLA) write the IR graph through [`graph`]. `names`, `weights`
//! and `train` hold what every target writes alike: identifiers and labels, the
//! weights blob, the training step's layout; `program_target` what the program
//! targets' `Backend`s share. Each target is a `crate::backend::Backend`, listed in
//! [`TARGETS`].

pub mod c;
pub mod cstyle;
pub mod cuda;
pub mod ggml;
pub mod graph;
pub mod jit;
pub mod metal;
pub mod names;
pub mod program_target;
pub mod train;
pub mod weights;
pub mod xla;

use crate::backend::Backend;
use crate::passes;

/// Every target, in the order `--help` lists them.
pub static TARGETS: &[&dyn Backend] = &[
    &c::backend::CTarget,
    &cuda::backend::CudaTarget,
    &metal::backend::MetalTarget,
    &ggml::backend::GgmlTarget,
    &xla::backend::XlaTarget,
    &jit::backend::JIT,
    #[cfg(feature = "llvm")]
    &jit::backend::JIT_LLVM,
];

/// The target called `name`.
pub fn find(name: &str) -> Option<&'static dyn Backend> {
    TARGETS.iter().copied().find(|b| b.name() == name)
}

/// Every pass `--print-after` can name: the graph passes (`decompose` last), every
/// target's program passes, and the shared program passes.
pub fn pass_names() -> Vec<&'static str> {
    let mut names = passes::names(&[]);
    for b in TARGETS {
        for (name, _) in b.program_passes() {
            if !names.contains(name) {
                names.insert(passes::PIPELINE.len() + 1, name);
            }
        }
    }
    names
}

/// The names of every target, for messages (`c, cuda`).
pub fn target_names() -> String {
    TARGETS.iter().map(|b| b.name()).collect::<Vec<_>>().join(", ")
}
