//! The in-process JIT (`--target jit`): the program the C target renders (the same
//! lowering, runtime-c's library and the C target's program passes), compiled to
//! machine code in this process with cranelift. Loop kernels (map, reduce,
//! arg-reduce) and the epilogues of products and convolutions become cranelift
//! functions (`kernels.rs`, `expr.rs`); the library kernels (GEMM, convolution,
//! Winograd, pooling, softmax, dequantization, the training step's SGD) are runtime-c's
//! own, compiled into mithrilc by `build.rs`; the scalar helpers the kernels call are
//! `mithril_ops.h`'s (`runtime.rs`), so the JIT computes what `--target c` computes.
//! A Rust driver runs the steps (`program.rs`), splitting work over a pool of threads
//! (`threads.rs`).
//!
//! Limits: the host CPU only; no f8, f4 or sub-byte integer arithmetic yet (the C
//! target has it).

pub mod backend;
mod expr;
mod kernels;
#[cfg(feature = "llvm")]
mod llvm;
mod math;
mod vector;
mod module;
pub mod program;
pub mod runtime;
pub mod threads;

use crate::error::Result;
use crate::lower::Program;
use program::{Runner, StepCode};

pub use expr::supports;
pub use module::Code;

/// A compiled model: the forward program and, with `--grad`, the backward one, and the
/// machine code they run (freed with this).
pub struct Compiled {
    pub forward: Runner,
    pub backward: Option<Runner>,
    _code: Code,
}

/// Compiles `forward` (and `backward`) with the code generator `tier` (LLVM's for the
/// CPU `cpu`, default the host's); with `text`, also returns the CLIF of every function
/// (`compile --target jit`).
pub fn compile(forward: Program, backward: Option<Program>, text: bool, tier: crate::backend::JitTier, cpu: Option<&str>) -> Result<(Compiled, Option<String>)> {
    let (m, ids, plans) = functions(&forward, backward.as_ref(), text, tier, cpu)?;
    let mut m = m;
    let text = m.text.take();
    let (code, addrs) = m.finish(&ids)?;
    // SAFETY (each transmute): the function at that address was defined with the
    // signature of the type it becomes (kernels.rs).
    let resolve = |steps: Vec<(Option<usize>, Option<usize>, Option<usize>)>| -> Vec<StepCode> {
        steps
            .into_iter()
            .map(|(t, e, c)| StepCode {
                task: t.map(|i| unsafe { std::mem::transmute::<*const u8, runtime::MrTask>(addrs[i]) }),
                epilogue: e.map(|i| unsafe { std::mem::transmute::<*const u8, runtime::MrEpilogueFn>(addrs[i]) }),
                check: c.map(|i| unsafe { std::mem::transmute::<*const u8, program::CheckFn>(addrs[i]) }),
            })
            .collect()
    };
    let mut plans = plans.into_iter();
    let forward_steps = resolve(plans.next().expect("the forward program's"));
    let backward_steps = plans.next().map(resolve);
    let forward = Runner::new(forward, forward_steps)?;
    let backward = backward.zip(backward_steps).map(|(p, s)| Runner::new(p, s)).transpose()?;
    Ok((Compiled { forward, backward, _code: code }, text))
}

/// What the JIT compiles, as text and bytes to read (`compile --target jit`).
pub struct Listing {
    /// cranelift's IR of every function.
    pub clif: String,
    /// With LLVM: the optimized module as LLVM IR, and as an object file.
    pub llvm: Option<(String, Vec<u8>)>,
}

/// The listing of `forward` (and `backward`) compiled by `tier`.
pub fn listing(forward: Program, backward: Option<Program>, tier: crate::backend::JitTier, cpu: Option<&str>) -> Result<Listing> {
    let (mut m, _, _) = functions(&forward, backward.as_ref(), true, tier, cpu)?;
    let clif = m.text.take().unwrap_or_default();
    #[cfg(feature = "llvm")]
    if let Some(l) = m.llvm_listing()? {
        return Ok(Listing { clif, llvm: Some(l) });
    }
    Ok(Listing { clif, llvm: None })
}

/// Every step's functions, written into a module: the module, the ids of the functions,
/// and for each program each step's (task, epilogue, check) as indices into the ids.
#[allow(clippy::type_complexity)]
fn functions(forward: &Program, backward: Option<&Program>, text: bool, tier: crate::backend::JitTier, cpu: Option<&str>) -> Result<(module::Builder, Vec<cranelift_module::FuncId>, Vec<Vec<(Option<usize>, Option<usize>, Option<usize>)>>)> {
    let mut m = module::Builder::new(text, tier, cpu)?;
    // Each step's functions, as indices into `ids`.
    let mut ids = Vec::new();
    let mut plans = Vec::new();
    // (the backward program's functions are named apart: `backward_k0`)
    for (p, prefix) in std::iter::once(forward).chain(backward).zip(["", "backward_"]) {
        let mut steps = Vec::new();
        for (k, step) in p.steps.iter().enumerate() {
            let mut slot = |id: Option<cranelift_module::FuncId>| {
                id.map(|id| {
                    ids.push(id);
                    ids.len() - 1
                })
            };
            let task = if matches!(step.kernel, crate::lower::Kernel::Map { .. } | crate::lower::Kernel::Reduce { .. } | crate::lower::Kernel::ArgReduce { .. }) {
                Some(kernels::task(&mut m, p, prefix, k, step)?)
            } else {
                None
            };
            let task = slot(task);
            let epilogue = slot(kernels::epilogue(&mut m, p, prefix, k, step)?);
            let check = slot(kernels::check(&mut m, p, prefix, k, step)?);
            steps.push((task, epilogue, check));
        }
        plans.push(steps);
    }
    Ok((m, ids, plans))
}
