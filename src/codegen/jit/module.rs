//! Cranelift's side of the JIT: the host's ISA, one `JITModule` per compiled model
//! with every helper of [`super::runtime::helpers`] imported by name, each function
//! defined (a cranelift error names the kernel it came from), and the finished code,
//! which lives as long as [`Code`] does.

use std::collections::{HashMap, HashSet};

use cranelift_codegen::ir::{types, AbiParam, Signature, UserFuncName};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::Context;
use cranelift_frontend::FunctionBuilderContext;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module};

use super::runtime::{helpers, Scalar};
use crate::backend::JitTier;
use crate::error::{Error, Result};

/// Machine code of one model's functions; freed when dropped.
pub struct Code {
    module: Option<JITModule>,
    #[cfg(feature = "llvm")]
    _llvm: Option<super::llvm::LlvmCode>,
}

impl Drop for Code {
    fn drop(&mut self) {
        if let Some(m) = self.module.take() {
            // SAFETY: nothing calls the code any more: whatever held its function
            // pointers (the compiled model) owns this and is being dropped.
            unsafe { m.free_memory() };
        }
    }
}

// SAFETY: the module is only read after it is finished (its code is immutable), and
// freed once, on drop.
unsafe impl Send for Code {}
unsafe impl Sync for Code {}

/// A module being filled with functions.
pub struct Builder {
    pub module: JITModule,
    /// The helpers, by the name JIT code imports them.
    pub helpers: HashMap<&'static str, (FuncId, Vec<Scalar>, Scalar)>,
    ctx: Context,
    pub fctx: FunctionBuilderContext,
    /// The text of every function defined, when asked for (`--emit source`).
    pub text: Option<String>,
    /// Whether innermost loops run in cranelift's vectors (not for LLVM, whose loop
    /// vectorizer widens the scalar loops to the CPU's width).
    pub vectors: bool,
    /// The values of the function being written that hold addresses of buffers or of
    /// tables of them (what the LLVM tier makes pointers).
    pub pointers: HashSet<cranelift_codegen::ir::Value>,
    /// The functions defined, by id: their names (the LLVM tier finds them so).
    names: HashMap<FuncId, String>,
    #[cfg(feature = "llvm")]
    llvm: Option<super::llvm::Translator>,
}

impl Builder {
    /// A module for this machine's CPU (its vector extensions found at run time);
    /// `text` keeps every function's CLIF.
    pub fn new(text: bool, tier: JitTier, cpu: Option<&str>) -> Result<Builder> {
        let mut flags = settings::builder();
        let set = |f: &mut settings::Builder, k: &str, v: &str| f.set(k, v).map_err(|e| Error::internal(format!("jit: cranelift setting {k}={v}: {e}")));
        set(&mut flags, "opt_level", "speed")?;
        set(&mut flags, "is_pic", "false")?;
        set(&mut flags, "use_colocated_libcalls", "false")?;
        // The verifier checks each function as it is compiled; tests and debug builds only.
        set(&mut flags, "enable_verifier", if cfg!(debug_assertions) { "true" } else { "false" })?;
        let isa = cranelift_native::builder()
            .map_err(|e| Error::internal(format!("jit: this CPU is not one cranelift compiles for: {e}")))?
            .finish(settings::Flags::new(flags))
            .map_err(|e| Error::internal(format!("jit: cranelift's ISA: {e}")))?;
        let mut jb = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
        let table = helpers();
        for h in table {
            jb.symbol(h.name, h.address as *const u8);
        }
        let mut module = JITModule::new(jb);
        let mut imported = HashMap::new();
        for h in table {
            let mut sig = module.make_signature();
            sig.params.extend(h.params.iter().map(|&s| abi(s)));
            sig.returns.push(abi(h.result));
            let id = module.declare_function(h.name, Linkage::Import, &sig).map_err(|e| Error::internal(format!("jit: importing {}: {e}", h.name)))?;
            imported.insert(h.name, (id, h.params.to_vec(), h.result));
        }
        let ctx = module.make_context();
        #[cfg(feature = "llvm")]
        let llvm = match tier {
            // (`native`, as `--cpu` takes it for the C target, is the host's)
            JitTier::Llvm => Some(super::llvm::Translator::new(cpu.filter(|c| *c != "native"))?),
            JitTier::Cranelift => None,
        };
        #[cfg(not(feature = "llvm"))]
        let _ = cpu;
        #[cfg(not(feature = "llvm"))]
        if tier == JitTier::Llvm {
            return Err(Error::usage("the jit-llvm target needs mithrilc built with LLVM (cargo build --features llvm; docs/jit.md)".to_string()));
        }
        Ok(Builder {
            module,
            helpers: imported,
            ctx,
            fctx: FunctionBuilderContext::new(),
            text: text.then(String::new),
            vectors: tier == JitTier::Cranelift,
            pointers: HashSet::new(),
            names: HashMap::new(),
            #[cfg(feature = "llvm")]
            llvm,
        })
    }

    /// The pointer type.
    pub fn ptr(&self) -> types::Type {
        self.module.target_config().pointer_type()
    }

    /// A signature of the host's calling convention.
    pub fn signature(&self, params: &[types::Type], returns: &[types::Type]) -> Signature {
        let mut sig = self.module.make_signature();
        sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
        sig.returns.extend(returns.iter().map(|&t| AbiParam::new(t)));
        sig
    }

    /// Defines function `name` of signature `sig`, its body written by `body` into
    /// the function it is given; `what` names it in errors (the kernel and its ops).
    pub fn define(
        &mut self,
        name: &str,
        sig: Signature,
        what: &str,
        body: impl FnOnce(&mut Builder, &mut cranelift_codegen::ir::Function, &mut FunctionBuilderContext) -> Result<()>,
    ) -> Result<FuncId> {
        let id = self.module.declare_function(name, Linkage::Local, &sig).map_err(|e| Error::internal(format!("jit: {what}: {e}")))?;
        let mut ctx = std::mem::replace(&mut self.ctx, Context::new());
        ctx.func.signature = sig;
        ctx.func.name = UserFuncName::user(0, id.as_u32());
        let mut fctx = std::mem::take(&mut self.fctx);
        self.pointers.clear();
        self.names.insert(id, name.to_string());
        // A panic in cranelift (or in writing the body) is an internal error naming the
        // kernel, not a crash of the process that embeds mithrilc.
        let defined = crate::error::catch_panic(&format!("jit: cranelift failed on {what}"), || {
            body(self, &mut ctx.func, &mut fctx)?;
            if let Some(text) = &mut self.text {
                text.push_str(&format!("; {name}: {}\n{}\n", what.replace('\n', " "), ctx.func.display()));
            }
            #[cfg(feature = "llvm")]
            if let Some(llvm) = &mut self.llvm {
                let by_id: HashMap<u32, &'static super::runtime::Helper> = helpers().iter().map(|h| (self.helpers[h.name].0.as_u32(), h)).collect();
                let func = &ctx.func;
                let imports = |n: &cranelift_codegen::ir::ExternalName| match n {
                    cranelift_codegen::ir::ExternalName::User(r) => by_id.get(&func.params.user_named_funcs()[*r].index).copied(),
                    _ => None,
                };
                return llvm.add(func, name, &self.pointers, &imports, what);
            }
            self.module.define_function(id, &mut ctx).map_err(|e| Error::internal(format!("jit: cranelift could not compile {what}: {}", describe(&e))))
        });
        self.fctx = fctx;
        self.module.clear_context(&mut ctx);
        self.ctx = ctx;
        defined.map(|()| id)
    }

    /// With LLVM: the optimized module as LLVM IR and as an object file.
    #[cfg(feature = "llvm")]
    pub fn llvm_listing(&self) -> Result<Option<(String, Vec<u8>)>> {
        match &self.llvm {
            Some(l) => Ok(Some((l.ir_text()?, l.object()?))),
            None => Ok(None),
        }
    }

    /// Finishes the module: the code of each function of `ids`, in order.
    pub fn finish(mut self, ids: &[FuncId]) -> Result<(Code, Vec<*const u8>)> {
        #[cfg(feature = "llvm")]
        if let Some(llvm) = self.llvm.take() {
            let names: Vec<String> = ids.iter().map(|id| self.names[id].clone()).collect();
            let (code, addresses) = llvm.finish(&names)?;
            return Ok((Code { module: Some(self.module), _llvm: Some(code) }, addresses));
        }
        self.module.finalize_definitions().map_err(|e| Error::internal(format!("jit: cranelift could not link the model's functions: {e}")))?;
        let code = ids.iter().map(|&id| self.module.get_finalized_function(id)).collect();
        Ok((Code {
            module: Some(self.module),
            #[cfg(feature = "llvm")]
            _llvm: None,
        }, code))
    }
}

/// A cranelift error with the verifier's findings, when it has them.
fn describe(e: &cranelift_module::ModuleError) -> String {
    match e {
        cranelift_module::ModuleError::Compilation(cranelift_codegen::CodegenError::Verifier(errors)) => format!("verifier: {errors}"),
        other => other.to_string(),
    }
}

/// A helper's parameter as the C ABI passes it.
pub fn abi(s: Scalar) -> AbiParam {
    match s {
        Scalar::F32 => AbiParam::new(types::F32),
        Scalar::F64 => AbiParam::new(types::F64),
        Scalar::I64 => AbiParam::new(types::I64),
        Scalar::I32 => AbiParam::new(types::I32).sext(),
        Scalar::U16 => AbiParam::new(types::I16).uext(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cranelift_codegen::ir::InstBuilder;
    use cranelift_frontend::FunctionBuilder;

    /// A function cranelift refuses, and a panic while one is written, are internal
    /// errors that name the kernel; the process goes on.
    #[test]
    fn a_failing_function_is_an_internal_error_naming_its_kernel() {
        let mut m = Builder::new(false, JitTier::Cranelift, None).unwrap();
        let sig = m.signature(&[], &[types::I32]);
        // Returns nothing from a function that returns an int: the verifier (on in
        // tests) or the lowering refuses it.
        let err = m
            .define("bad", sig.clone(), "kernel 7 (relu (m_0))", |m, func, fctx| {
                let mut b = FunctionBuilder::new(func, fctx);
                let block = b.create_block();
                b.switch_to_block(block);
                b.ins().return_(&[]);
                b.seal_all_blocks();
                b.finalize(m.module.target_config());
                Ok(())
            })
            .unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::Internal);
        assert!(err.message.contains("kernel 7 (relu (m_0))"), "{err}");
        let err = m.define("worse", sig, "kernel 8 (exp (m_1))", |_, _, _| panic!("an assertion in a builder")).unwrap_err();
        assert_eq!((err.kind, err.message.as_str()), (crate::ErrorKind::Internal, "jit: cranelift failed on kernel 8 (exp (m_1)): an assertion in a builder"));
    }
}
