//! The JIT's LLVM tier (`--target jit-llvm`, Cargo feature `llvm`): every function the
//! JIT writes in cranelift IR (scalar: no `F32X4` loops) is translated instruction by
//! instruction into LLVM IR, optimized at O3 for this CPU (its vector extensions, so
//! LLVM's loop vectorizer widens the loops to AVX2 or AVX-512), and compiled by LLVM's
//! MCJIT. The kernels are written once (`kernels.rs`, `expr.rs`); this file knows only
//! the instructions they use, and refuses any other as an internal error naming the
//! kernel.
//!
//! Pointers: cranelift's are plain integers. The values the kernels load as buffer
//! addresses (the context, its tables, each buffer's base: [`super::module::Builder`]
//! records them) become LLVM pointers, and an address computed from one a
//! `getelementptr`, so that LLVM sees which buffer each load and store touches.

use std::collections::{HashMap, HashSet};

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{self, types, InstructionData, Opcode};
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::basic_block::BasicBlock;
use inkwell::builder::Builder as IrBuilder;
use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine};
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum};
use inkwell::values::{BasicMetadataValueEnum, BasicValue, BasicValueEnum, FunctionValue, PhiValue};
use inkwell::{AddressSpace, FloatPredicate, IntPredicate, OptimizationLevel};

use super::runtime::{Helper, Scalar};
use crate::error::{Error, Result};

/// An LLVM module being filled with the translations of cranelift functions.
pub struct Translator {
    // Dropped before the context it borrows (fields drop in order).
    module: Option<Module<'static>>,
    context: Box<Context>,
    machine: TargetMachine,
    cpu: String,
    features: String,
    /// Helpers declared so far, with their addresses.
    helpers: HashMap<&'static str, (FunctionValue<'static>, usize)>,
}

/// Machine code LLVM compiled; freed when dropped.
pub struct LlvmCode {
    _engine: ExecutionEngine<'static>,
    _context: Box<Context>,
}

// SAFETY: the engine's code is immutable once compiled; nothing else touches the
// context after that.
unsafe impl Send for LlvmCode {}
unsafe impl Sync for LlvmCode {}

fn internal(what: &str, e: impl std::fmt::Display) -> Error {
    Error::internal(format!("jit (llvm): {what}: {e}"))
}

impl Translator {
    /// A module for this machine (or for `cpu`, an LLVM CPU name such as `znver4`).
    pub fn new(cpu: Option<&str>) -> Result<Translator> {
        Target::initialize_native(&InitializationConfig::default()).map_err(|e| internal("initializing LLVM for this machine", e))?;
        let triple = TargetMachine::get_default_triple();
        let target = Target::from_triple(&triple).map_err(|e| internal("this machine's target", e))?;
        let (cpu, features) = match cpu {
            Some(c) => (c.to_string(), String::new()),
            None => (TargetMachine::get_host_cpu_name().to_string(), TargetMachine::get_host_cpu_features().to_string()),
        };
        let machine = target
            .create_target_machine(&triple, &cpu, &features, OptimizationLevel::Aggressive, RelocMode::Default, CodeModel::JITDefault)
            .ok_or_else(|| internal("a target machine", format!("LLVM has no CPU `{cpu}` for {}", triple.as_str().to_string_lossy())))?;
        let context = Box::new(Context::create());
        // SAFETY: the context is boxed (it does not move) and outlives the module, which
        // is dropped first (`Translator`, `LlvmCode`).
        let ctx: &'static Context = unsafe { &*(context.as_ref() as *const Context) };
        let module = ctx.create_module("mithrilc");
        module.set_triple(&triple);
        module.set_data_layout(&machine.get_target_data().get_data_layout());
        Ok(Translator { module: Some(module), context, machine, cpu, features, helpers: HashMap::new() })
    }

    fn ctx(&self) -> &'static Context {
        // SAFETY: as in `new`.
        unsafe { &*(self.context.as_ref() as *const Context) }
    }

    fn module(&self) -> &Module<'static> {
        self.module.as_ref().expect("the module until it is finished")
    }

    fn scalar_type(&self, t: ir::Type) -> Result<BasicTypeEnum<'static>> {
        let c = self.ctx();
        Ok(match t {
            types::I8 => c.i8_type().into(),
            types::I16 => c.i16_type().into(),
            types::I32 => c.i32_type().into(),
            types::I64 => c.i64_type().into(),
            types::F32 => c.f32_type().into(),
            types::F64 => c.f64_type().into(),
            other => return Err(internal("a type", format!("no LLVM type for {other} here (the LLVM tier takes scalar kernels)"))),
        })
    }

    /// Helper `h`, declared once (its address mapped when the engine is made).
    fn helper(&mut self, h: &Helper) -> FunctionValue<'static> {
        if let Some(&(f, _)) = self.helpers.get(h.name) {
            return f;
        }
        let c = self.ctx();
        let ty = |s: Scalar| -> BasicTypeEnum<'static> {
            match s {
                Scalar::F32 => c.f32_type().into(),
                Scalar::F64 => c.f64_type().into(),
                Scalar::I64 => c.i64_type().into(),
                Scalar::I32 => c.i32_type().into(),
                Scalar::U16 => c.i16_type().into(),
            }
        };
        let params: Vec<BasicMetadataTypeEnum> = h.params.iter().map(|&s| ty(s).into()).collect();
        let fn_ty = ty(h.result).fn_type(&params, false);
        let f = self.module().add_function(&format!("mithrilc_helper_{}", h.name), fn_ty, None);
        for (i, &s) in h.params.iter().enumerate() {
            let ext = match s {
                Scalar::U16 => Some("zeroext"),
                Scalar::I32 => Some("signext"),
                _ => None,
            };
            if let Some(kind) = ext {
                f.add_attribute(AttributeLoc::Param(i as u32), c.create_enum_attribute(Attribute::get_named_enum_kind_id(kind), 0));
            }
        }
        self.helpers.insert(h.name, (f, h.address));
        f
    }

    /// Translates cranelift function `func` as `name`; `pointers` are its values that
    /// hold addresses of buffers (and of the tables that hold those); `helpers` names
    /// what its calls call, by the names it declared them under (`imports`).
    pub fn add(&mut self, func: &ir::Function, name: &str, pointers: &HashSet<ir::Value>, imports: &dyn Fn(&ir::ExternalName) -> Option<&'static Helper>, what: &str) -> Result<()> {
        let fail = |e: String| Error::internal(format!("jit (llvm): {what}: {e}"));
        let c = self.ctx();
        let dfg = &func.dfg;
        let ptr_ty = c.ptr_type(AddressSpace::default());
        let is_ptr = |v: ir::Value| pointers.contains(&dfg.resolve_aliases(v));
        let entry = func.layout.entry_block().ok_or_else(|| fail("a function without blocks".into()))?;
        let mut param_types: Vec<BasicMetadataTypeEnum> = Vec::new();
        for &p in dfg.block_params(entry) {
            param_types.push(if is_ptr(p) { ptr_ty.into() } else { self.scalar_type(dfg.value_type(p)).map_err(|e| fail(e.message))?.into() });
        }
        let fn_ty = match func.signature.returns.as_slice() {
            [] => c.void_type().fn_type(&param_types, false),
            [r] => self.scalar_type(r.value_type).map_err(|e| fail(e.message))?.fn_type(&param_types, false),
            _ => return Err(fail("several results".into())),
        };
        let f = self.module().add_function(name, fn_ty, None);
        for (k, v) in [("target-cpu", self.cpu.clone()), ("target-features", self.features.clone())] {
            f.add_attribute(AttributeLoc::Function, c.create_string_attribute(k, &v));
        }
        f.add_attribute(AttributeLoc::Function, c.create_enum_attribute(Attribute::get_named_enum_kind_id("nounwind"), 0));
        let b = c.create_builder();
        let mut t = Lowering { tr: self, b, values: HashMap::new(), blocks: HashMap::new(), phis: Vec::new(), is_ptr: &is_ptr, imports, dfg };
        // A basic block per block, a phi per parameter (the entry's are the function's).
        for block in func.layout.blocks() {
            let bb = c.append_basic_block(f, &block.to_string());
            t.blocks.insert(block, bb);
        }
        for (i, &p) in dfg.block_params(entry).iter().enumerate() {
            t.values.insert(p, f.get_nth_param(i as u32).expect("the parameter"));
        }
        for block in func.layout.blocks() {
            t.b.position_at_end(t.blocks[&block]);
            if block != entry {
                for &p in dfg.block_params(block) {
                    let ty: BasicTypeEnum = if is_ptr(p) { ptr_ty.into() } else { t.tr.scalar_type(dfg.value_type(p)).map_err(|e| fail(e.message))? };
                    let phi = t.b.build_phi(ty, "").map_err(|e| fail(e.to_string()))?;
                    t.values.insert(p, phi.as_basic_value());
                }
            }
        }
        for block in func.layout.blocks() {
            t.b.position_at_end(t.blocks[&block]);
            for inst in func.layout.block_insts(block) {
                t.inst(inst).map_err(|e| fail(format!("{}: {e}", func.dfg.display_inst(inst))))?;
            }
        }
        // The phis' incoming values, now that every block is translated.
        let phis = std::mem::take(&mut t.phis);
        for (phi, v, from) in phis {
            let value = t.value(v).map_err(fail)?;
            phi.add_incoming(&[(&value as &dyn BasicValue, from)]);
        }
        Ok(())
    }

    /// Optimizes the module at O3 for the CPU and compiles it: the address of each
    /// function of `names`, and the code, which lives as long as the returned owner.
    pub fn finish(mut self, names: &[String]) -> Result<(LlvmCode, Vec<*const u8>)> {
        let module = self.module.take().expect("the module");
        module.verify().map_err(|e| internal("the translated module does not verify", e.to_string()))?;
        module.run_passes("default<O3>", &self.machine, PassBuilderOptions::create()).map_err(|e| internal("LLVM's optimizer", e.to_string()))?;
        let engine = module.create_jit_execution_engine(OptimizationLevel::Aggressive).map_err(|e| internal("LLVM's JIT", e.to_string()))?;
        for (f, address) in self.helpers.values() {
            engine.add_global_mapping(f, *address);
        }
        let addresses = names
            .iter()
            .map(|n| engine.get_function_address(n).map(|a| a as *const u8).map_err(|e| internal(&format!("function {n}"), format!("{e:?}"))))
            .collect::<Result<Vec<_>>>()?;
        Ok((LlvmCode { _engine: engine, _context: std::mem::replace(&mut self.context, Box::new(Context::create())) }, addresses))
    }

    /// The module as LLVM IR text, optimized as [`Translator::finish`] would.
    pub fn ir_text(&self) -> Result<String> {
        let m = self.module();
        m.run_passes("default<O3>", &self.machine, PassBuilderOptions::create()).map_err(|e| internal("LLVM's optimizer", e.to_string()))?;
        Ok(m.print_to_string().to_string())
    }

    /// The module as an object file for this machine.
    pub fn object(&self) -> Result<Vec<u8>> {
        let m = self.module();
        m.run_passes("default<O3>", &self.machine, PassBuilderOptions::create()).map_err(|e| internal("LLVM's optimizer", e.to_string()))?;
        let buf = self.machine.write_to_memory_buffer(m, FileType::Object).map_err(|e| internal("an object file", e.to_string()))?;
        Ok(buf.as_slice().to_vec())
    }
}

/// One function being translated.
struct Lowering<'t, 'f> {
    tr: &'t mut Translator,
    b: IrBuilder<'static>,
    values: HashMap<ir::Value, BasicValueEnum<'static>>,
    blocks: HashMap<ir::Block, BasicBlock<'static>>,
    /// (phi, the value it takes, from which block), filled in at the end.
    phis: Vec<(PhiValue<'static>, ir::Value, BasicBlock<'static>)>,
    is_ptr: &'f dyn Fn(ir::Value) -> bool,
    imports: &'f dyn Fn(&ir::ExternalName) -> Option<&'static Helper>,
    dfg: &'f ir::DataFlowGraph,
}

type R<T> = std::result::Result<T, String>;

fn ll<T>(r: std::result::Result<T, inkwell::builder::BuilderError>) -> R<T> {
    r.map_err(|e| e.to_string())
}

impl Lowering<'_, '_> {
    fn value(&self, v: ir::Value) -> R<BasicValueEnum<'static>> {
        let v = self.dfg.resolve_aliases(v);
        self.values.get(&v).copied().ok_or_else(|| format!("{v} is used before it is defined"))
    }

    fn int(&self, v: ir::Value) -> R<inkwell::values::IntValue<'static>> {
        match self.value(v)? {
            BasicValueEnum::IntValue(i) => Ok(i),
            BasicValueEnum::PointerValue(p) => ll(self.b.build_ptr_to_int(p, self.tr.ctx().i64_type(), "")),
            other => Err(format!("{v} is not an integer: {other:?}")),
        }
    }

    fn float(&self, v: ir::Value) -> R<inkwell::values::FloatValue<'static>> {
        match self.value(v)? {
            BasicValueEnum::FloatValue(x) => Ok(x),
            other => Err(format!("{v} is not a float: {other:?}")),
        }
    }

    /// `v` as an address: a pointer, or an integer made one.
    fn pointer(&self, v: ir::Value) -> R<inkwell::values::PointerValue<'static>> {
        match self.value(v)? {
            BasicValueEnum::PointerValue(p) => Ok(p),
            BasicValueEnum::IntValue(i) => ll(self.b.build_int_to_ptr(i, self.tr.ctx().ptr_type(AddressSpace::default()), "")),
            other => Err(format!("{v} is not an address: {other:?}")),
        }
    }

    /// `base + offset` bytes, a pointer.
    fn offset(&self, base: inkwell::values::PointerValue<'static>, offset: inkwell::values::IntValue<'static>) -> R<inkwell::values::PointerValue<'static>> {
        // SAFETY (of the GEP): kernels address within their buffers.
        unsafe { ll(self.b.build_gep(self.tr.ctx().i8_type(), base, &[offset], "")) }
    }

    fn intrinsic(&self, name: &str, types: &[BasicTypeEnum<'static>], args: &[BasicMetadataValueEnum<'static>]) -> R<BasicValueEnum<'static>> {
        let i = Intrinsic::find(name).ok_or_else(|| format!("LLVM has no intrinsic {name}"))?;
        let decl = i.get_declaration(self.tr.module(), types).ok_or_else(|| format!("no declaration of {name} for {types:?}"))?;
        let call = ll(self.b.build_call(decl, args, ""))?;
        call.try_as_basic_value().basic().ok_or_else(|| format!("{name} returned nothing"))
    }

    fn bool_to_i8(&self, b: inkwell::values::IntValue<'static>) -> R<BasicValueEnum<'static>> {
        Ok(ll(self.b.build_int_z_extend(b, self.tr.ctx().i8_type(), ""))?.into())
    }

    fn truth(&self, v: ir::Value) -> R<inkwell::values::IntValue<'static>> {
        let i = self.int(v)?;
        ll(self.b.build_int_compare(IntPredicate::NE, i, i.get_type().const_zero(), ""))
    }

    /// Records the branch's arguments for `block`'s phis, from the current block.
    fn pass(&mut self, call: &ir::BlockCall) -> R<BasicBlock<'static>> {
        let pool = &self.dfg.value_lists;
        let block = call.block(pool);
        let from = self.b.get_insert_block().ok_or("no current block")?;
        let params = self.dfg.block_params(block).to_vec();
        for (p, arg) in params.iter().zip(call.args(pool)) {
            let ir::BlockArg::Value(v) = arg else { return Err("a block argument that is not a value".into()) };
            let phi = self.values[p].as_instruction_value().and_then(|i| PhiValue::try_from(i).ok()).ok_or("a block parameter that is not a phi")?;
            self.phis.push((phi, v, from));
        }
        Ok(self.blocks[&block])
    }

    fn inst(&mut self, inst: ir::Inst) -> R<()> {
        let dfg = self.dfg;
        let data = &dfg.insts[inst];
        let args: Vec<ir::Value> = dfg.inst_args(inst).to_vec();
        let result = dfg.inst_results(inst).first().copied();
        let rty = result.map(|r| dfg.value_type(r));
        let c = self.tr.ctx();
        let int_of = |t: ir::Type| -> R<inkwell::types::IntType<'static>> {
            match self.tr.scalar_type(t).map_err(|e| e.message)? {
                BasicTypeEnum::IntType(i) => Ok(i),
                other => Err(format!("{other:?} is not an integer type")),
            }
        };
        let b = &self.b;
        let out: Option<BasicValueEnum<'static>> = match (data.opcode(), data) {
            (Opcode::Iconst, InstructionData::UnaryImm { imm, .. }) => Some(int_of(rty.unwrap())?.const_int(imm.bits() as u64, false).into()),
            (Opcode::F32const, InstructionData::UnaryIeee32 { imm, .. }) => Some(c.f32_type().const_float(f64::from(f32::from_bits(imm.bits()))).into()),
            (Opcode::F64const, InstructionData::UnaryIeee64 { imm, .. }) => Some(c.f64_type().const_float(f64::from_bits(imm.bits())).into()),
            (Opcode::Iadd, _) if (self.is_ptr)(args[0]) || (self.is_ptr)(args[1]) => {
                let (p, i) = if (self.is_ptr)(args[0]) { (args[0], args[1]) } else { (args[1], args[0]) };
                Some(self.offset(self.pointer(p)?, self.int(i)?)?.into())
            }
            (Opcode::Iadd | Opcode::Isub | Opcode::Imul | Opcode::Udiv | Opcode::Sdiv | Opcode::Srem | Opcode::Urem | Opcode::Band | Opcode::Bor | Opcode::Bxor | Opcode::Ishl, _) => {
                let (x, y) = (self.int(args[0])?, self.int(args[1])?);
                Some(ll(match data.opcode() {
                    Opcode::Iadd => b.build_int_add(x, y, ""),
                    Opcode::Isub => b.build_int_sub(x, y, ""),
                    Opcode::Imul => b.build_int_mul(x, y, ""),
                    Opcode::Udiv => b.build_int_unsigned_div(x, y, ""),
                    Opcode::Sdiv => b.build_int_signed_div(x, y, ""),
                    Opcode::Srem => b.build_int_signed_rem(x, y, ""),
                    Opcode::Urem => b.build_int_unsigned_rem(x, y, ""),
                    Opcode::Band => b.build_and(x, y, ""),
                    Opcode::Bor => b.build_or(x, y, ""),
                    Opcode::Ishl => b.build_left_shift(x, y, ""),
                    _ => b.build_xor(x, y, ""),
                })?
                .into())
            }
            (Opcode::Bnot, _) => Some(ll(b.build_not(self.int(args[0])?, ""))?.into()),
            (Opcode::Ineg, _) => Some(ll(b.build_int_neg(self.int(args[0])?, ""))?.into()),
            (Opcode::Iabs, _) => {
                let x = self.int(args[0])?;
                Some(self.intrinsic("llvm.abs", &[x.get_type().into()], &[x.into(), c.bool_type().const_zero().into()])?)
            }
            (op @ (Opcode::Smax | Opcode::Smin | Opcode::Umax | Opcode::Umin), _) => {
                let (x, y) = (self.int(args[0])?, self.int(args[1])?);
                let name = match op {
                    Opcode::Smax => "llvm.smax",
                    Opcode::Smin => "llvm.smin",
                    Opcode::Umax => "llvm.umax",
                    _ => "llvm.umin",
                };
                Some(self.intrinsic(name, &[x.get_type().into()], &[x.into(), y.into()])?)
            }
            (Opcode::Icmp, InstructionData::IntCompare { cond, .. }) => {
                let (x, y) = (self.int(args[0])?, self.int(args[1])?);
                Some(self.bool_to_i8(ll(b.build_int_compare(int_predicate(*cond), x, y, ""))?)?)
            }
            (Opcode::Fcmp, InstructionData::FloatCompare { cond, .. }) => {
                let (x, y) = (self.float(args[0])?, self.float(args[1])?);
                Some(self.bool_to_i8(ll(b.build_float_compare(float_predicate(*cond)?, x, y, ""))?)?)
            }
            (Opcode::Select, _) => {
                let cond = self.truth(args[0])?;
                Some(ll(b.build_select(cond, self.value(args[1])?, self.value(args[2])?, ""))?)
            }
            (op @ (Opcode::Fadd | Opcode::Fsub | Opcode::Fmul | Opcode::Fdiv), _) => {
                let (x, y) = (self.float(args[0])?, self.float(args[1])?);
                Some(ll(match op {
                    Opcode::Fadd => b.build_float_add(x, y, ""),
                    Opcode::Fsub => b.build_float_sub(x, y, ""),
                    Opcode::Fmul => b.build_float_mul(x, y, ""),
                    _ => b.build_float_div(x, y, ""),
                })?
                .into())
            }
            (Opcode::Fneg, _) => Some(ll(b.build_float_neg(self.float(args[0])?, ""))?.into()),
            (op @ (Opcode::Fabs | Opcode::Sqrt | Opcode::Floor), _) => {
                let x = self.float(args[0])?;
                let name = match op {
                    Opcode::Fabs => "llvm.fabs",
                    Opcode::Sqrt => "llvm.sqrt",
                    _ => "llvm.floor",
                };
                Some(self.intrinsic(name, &[x.get_type().into()], &[x.into()])?)
            }
            (Opcode::Fpromote, _) => Some(ll(b.build_float_ext(self.float(args[0])?, c.f64_type(), ""))?.into()),
            (Opcode::Fdemote, _) => Some(ll(b.build_float_trunc(self.float(args[0])?, c.f32_type(), ""))?.into()),
            (op @ (Opcode::FcvtToSintSat | Opcode::FcvtToUintSat), _) => {
                let x = self.float(args[0])?;
                let to = int_of(rty.unwrap())?;
                let name = if op == Opcode::FcvtToSintSat { "llvm.fptosi.sat" } else { "llvm.fptoui.sat" };
                Some(self.intrinsic(name, &[to.into(), x.get_type().into()], &[x.into()])?)
            }
            (op @ (Opcode::FcvtFromSint | Opcode::FcvtFromUint), _) => {
                let x = self.int(args[0])?;
                let to = match self.tr.scalar_type(rty.unwrap()).map_err(|e| e.message)? {
                    BasicTypeEnum::FloatType(f) => f,
                    other => return Err(format!("{other:?} is not a float type")),
                };
                Some(ll(if op == Opcode::FcvtFromSint { b.build_signed_int_to_float(x, to, "") } else { b.build_unsigned_int_to_float(x, to, "") })?.into())
            }
            (op @ (Opcode::Sextend | Opcode::Uextend | Opcode::Ireduce), _) => {
                let x = self.int(args[0])?;
                let to = int_of(rty.unwrap())?;
                Some(ll(match op {
                    Opcode::Sextend => b.build_int_s_extend(x, to, ""),
                    Opcode::Uextend => b.build_int_z_extend(x, to, ""),
                    _ => b.build_int_truncate(x, to, ""),
                })?
                .into())
            }
            (Opcode::Bitcast, _) => {
                let to = self.tr.scalar_type(rty.unwrap()).map_err(|e| e.message)?;
                Some(ll(b.build_bit_cast(self.value(args[0])?, to, ""))?)
            }
            (Opcode::Load, InstructionData::Load { offset, .. }) => {
                let r = result.unwrap();
                let ty: BasicTypeEnum = if (self.is_ptr)(r) { c.ptr_type(AddressSpace::default()).into() } else { self.tr.scalar_type(dfg.value_type(r)).map_err(|e| e.message)? };
                let at = self.offset(self.pointer(args[0])?, c.i64_type().const_int(i64::from(i32::from(*offset)) as u64, true))?;
                let v = ll(b.build_load(ty, at, ""))?;
                let size = dfg.value_type(r).bytes();
                v.as_instruction_value().map(|i| i.set_alignment(size)).transpose().map_err(|e| e.to_string())?;
                Some(v)
            }
            (Opcode::Store, InstructionData::Store { offset, .. }) => {
                let at = self.offset(self.pointer(args[1])?, c.i64_type().const_int(i64::from(i32::from(*offset)) as u64, true))?;
                let s = ll(b.build_store(at, self.value(args[0])?))?;
                s.set_alignment(dfg.value_type(args[0]).bytes()).map_err(|e| e.to_string())?;
                None
            }
            (Opcode::Call, InstructionData::Call { func_ref, .. }) => {
                let name = &dfg.ext_funcs[*func_ref].name;
                let h = (self.imports)(name).ok_or_else(|| format!("a call to {name:?}, which is no helper"))?;
                let f = self.tr.helper(h);
                let call_args: Vec<BasicMetadataValueEnum> = args.iter().map(|&a| self.value(a).map(Into::into)).collect::<R<_>>()?;
                let call = ll(self.b.build_call(f, &call_args, ""))?;
                call.try_as_basic_value().basic()
            }
            (Opcode::Jump, InstructionData::Jump { destination, .. }) => {
                let to = self.pass(destination)?;
                ll(self.b.build_unconditional_branch(to))?;
                None
            }
            (Opcode::Brif, InstructionData::Brif { blocks, .. }) => {
                let cond = self.truth(args[0])?;
                let (yes, no) = (self.pass(&blocks[0])?, self.pass(&blocks[1])?);
                ll(self.b.build_conditional_branch(cond, yes, no))?;
                None
            }
            (Opcode::Return, _) => {
                match args.first() {
                    Some(&v) => ll(self.b.build_return(Some(&self.value(v)?)))?,
                    None => ll(self.b.build_return(None))?,
                };
                None
            }
            (op, _) => return Err(format!("the LLVM tier has no translation of {op}")),
        };
        if let (Some(r), Some(v)) = (result, out) {
            self.values.insert(r, v);
        }
        Ok(())
    }
}

fn int_predicate(cc: IntCC) -> IntPredicate {
    match cc {
        IntCC::Equal => IntPredicate::EQ,
        IntCC::NotEqual => IntPredicate::NE,
        IntCC::SignedLessThan => IntPredicate::SLT,
        IntCC::SignedLessThanOrEqual => IntPredicate::SLE,
        IntCC::SignedGreaterThan => IntPredicate::SGT,
        IntCC::SignedGreaterThanOrEqual => IntPredicate::SGE,
        IntCC::UnsignedLessThan => IntPredicate::ULT,
        IntCC::UnsignedLessThanOrEqual => IntPredicate::ULE,
        IntCC::UnsignedGreaterThan => IntPredicate::UGT,
        IntCC::UnsignedGreaterThanOrEqual => IntPredicate::UGE,
    }
}

/// Cranelift's float conditions as LLVM's: `ne` is unordered or unequal (as C's `!=`),
/// the orderings are ordered (false with a NaN).
fn float_predicate(cc: FloatCC) -> R<FloatPredicate> {
    Ok(match cc {
        FloatCC::Equal => FloatPredicate::OEQ,
        FloatCC::NotEqual => FloatPredicate::UNE,
        FloatCC::LessThan => FloatPredicate::OLT,
        FloatCC::LessThanOrEqual => FloatPredicate::OLE,
        FloatCC::GreaterThan => FloatPredicate::OGT,
        FloatCC::GreaterThanOrEqual => FloatPredicate::OGE,
        FloatCC::Ordered => FloatPredicate::ORD,
        FloatCC::Unordered => FloatPredicate::UNO,
        FloatCC::UnorderedOrGreaterThan => FloatPredicate::UGT,
        FloatCC::UnorderedOrLessThan => FloatPredicate::ULT,
        FloatCC::UnorderedOrGreaterThanOrEqual => FloatPredicate::UGE,
        FloatCC::UnorderedOrLessThanOrEqual => FloatPredicate::ULE,
        FloatCC::OrderedNotEqual => FloatPredicate::ONE,
        FloatCC::UnorderedOrEqual => FloatPredicate::UEQ,
    })
}
