//! The JIT as a [`Backend`]: it lowers as the C target does (runtime-c's library and
//! the C target's program passes) and compiles in this process. `run --target jit` and
//! embedders run it through [`crate::exec::Jit`]; `compile --target jit` writes the
//! CLIF of its functions (`<name>.clif`), for reading and for tests.

use std::collections::BTreeMap;
use std::path::Path;

use crate::backend::{Backend, BuildConfig, Capabilities, EmitOptions, Emitted, Entry, JitTier, Quantize, Toolchain};
use crate::build::CacheUse;
use crate::codegen::program_target::{program_emitted, program_target_lacks};
use crate::error::{Error, Result};
use crate::ir::{Graph, ValueId};
use crate::lower::Program;
use crate::passes::{Graphs, ProgramPass};
use crate::tensor::Tensor;

/// The JIT with one of its code generators.
pub struct JitTarget {
    pub tier: JitTier,
}

/// `--target jit`: cranelift.
pub static JIT: JitTarget = JitTarget { tier: JitTier::Cranelift };
/// `--target jit-llvm`: LLVM (Cargo feature `llvm`).
pub static JIT_LLVM: JitTarget = JitTarget { tier: JitTier::Llvm };

impl Backend for JitTarget {
    fn name(&self) -> &'static str {
        match self.tier {
            JitTier::Cranelift => "jit",
            JitTier::Llvm => "jit-llvm",
        }
    }

    fn about(&self) -> &'static str {
        match self.tier {
            JitTier::Cranelift => "machine code compiled in this process by cranelift (run --target jit; no C compiler needed)",
            JitTier::Llvm => "machine code compiled in this process by LLVM at O3 for this CPU (run --target jit-llvm)",
        }
    }

    fn program_passes(&self) -> &'static [ProgramPass] {
        crate::codegen::c::PASSES
    }

    fn claims(&self, c: crate::ir::Composite) -> bool {
        crate::codegen::cstyle::composite_helper(c).is_some()
    }

    fn lacks(&self, graph: &Graph, v: ValueId) -> Option<String> {
        program_target_lacks(graph, v, super::supports)
    }

    /// What the JIT compiles, for reading: cranelift's IR of every function
    /// (`<name>.clif`); with LLVM, the optimized module as LLVM IR (`<name>.ll`) and as
    /// an object file for this machine (`<name>.o`) too.
    fn emit(&self, graphs: &Graphs, opts: &EmitOptions) -> Result<Emitted> {
        let (forward, backward) = programs(graphs, opts)?;
        let name = crate::codegen::names::identifier(&forward.name);
        let listing = super::listing(forward.clone(), backward.clone(), self.tier, opts.cpu.as_deref())?;
        let mut files = vec![(format!("{name}.clif"), listing.clif.into_bytes())];
        if let Some((ir, obj)) = listing.llvm {
            files.push((format!("{name}.ll"), ir.into_bytes()));
            files.push((format!("{name}.o"), obj));
        }
        Ok(program_emitted(files, &forward, backward.as_ref()))
    }

    fn weights_program(&self, graphs: &Graphs, opts: &EmitOptions) -> Result<Option<Program>> {
        Ok(Some(programs(graphs, opts)?.0))
    }

    /// The C target's stored forms; runs in this process; with LLVM, `--cpu` names the
    /// CPU it compiles for (an LLVM CPU name: `znver4`, `x86-64-v3`; default the host's).
    fn capabilities(&self) -> Capabilities {
        Capabilities { quantizations: &[Quantize::F32, Quantize::F16, Quantize::Bf16, Quantize::Q8_0, Quantize::Int8], in_process: Some(self.tier), picks_cpu: self.tier == JitTier::Llvm, ..Capabilities::NONE }
    }

    fn toolchain(&self) -> &dyn Toolchain {
        self
    }
}

impl Toolchain for JitTarget {
    fn needs(&self) -> &'static str {
        "nothing: the code is compiled in this process"
    }

    fn build(&self, _dir: &Path, _build: &BuildConfig) -> Result<Option<CacheUse>> {
        Ok(None)
    }

    fn run(&self, _dir: &Path, _build: &BuildConfig, _entry: &Entry, _feeds: &BTreeMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        Err(Error::internal("the jit target runs in this process (exec::Jit), not from files"))
    }
}

/// The forward (and backward) program the JIT compiles: the C target's.
pub fn programs(graphs: &Graphs, opts: &EmitOptions) -> Result<(Program, Option<Program>)> {
    crate::codegen::c::backend::programs(graphs, opts)
}
