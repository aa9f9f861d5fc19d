//! C99 as a [`Dialect`] of the shared renderer: the spellings the trait provides, plus
//! how a loop kernel becomes a task (its outermost loop that can run more than once
//! split over `[begin, end)`, which the caller's threads share out).

use std::fmt::Write as _;

use crate::codegen::cstyle::{pad, Dialect, Param};
use crate::ir::Dtype;

/// Standard C99.
pub struct C;

impl Dialect for C {
    fn name(&self) -> &'static str {
        "C"
    }
    /// Every type: f16, bf16 and the narrow floats are held as their bits and computed
    /// in float; i4, u4, i2 and u2 a byte each, wrapped to their width.
    fn supports(&self, _d: Dtype) -> bool {
        true
    }
    /// A task reads the symbols from its context.
    fn symbol(&self, _p: &crate::lower::Program, i: usize) -> String {
        format!("ctx->dims[{i}]")
    }
    fn ty(&self, d: Dtype) -> &'static str {
        match d {
            Dtype::F32 => "float",
            Dtype::F64 => "double",
            Dtype::I32 => "int32_t",
            Dtype::I64 => "int64_t",
            Dtype::Bool => "uint8_t",
            Dtype::I8 => "int8_t",
            Dtype::U8 => "uint8_t",
            Dtype::I16 => "int16_t",
            Dtype::U16 => "uint16_t",
            Dtype::U32 => "uint32_t",
            Dtype::U64 => "uint64_t",
            Dtype::F16 | Dtype::Bf16 => "float",
            Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz | Dtype::F4E2M1 => "float",
            Dtype::I4 | Dtype::I2 => "int8_t",
            Dtype::U4 | Dtype::U2 => "uint8_t",
        }
    }
    fn storage(&self, d: Dtype) -> &'static str {
        match d {
            Dtype::F16 | Dtype::Bf16 => "uint16_t",
            _ if d.is_narrow_float() => "uint8_t",
            _ => self.ty(d),
        }
    }
    fn partial_sums(&self) -> bool {
        true
    }
    /// The task's dimension (the first of extent other than 1) runs over
    /// `[begin, end)`, the size-1 dimensions before it are fixed at 0.
    fn open_outer(&self, s: &mut String, ext: &[String]) -> usize {
        let split = ext.iter().position(|e| e != "1");
        let mut depth = 1;
        for (d, n) in ext.iter().enumerate() {
            match split {
                Some(k) if d == k => {
                    let _ = writeln!(s, "{}for (int64_t i{d} = begin; i{d} < end; ++i{d}) {{", pad(depth));
                }
                Some(k) if d > k => {
                    let _ = writeln!(s, "{}for (int64_t i{d} = 0; i{d} < {n}; ++i{d}) {{", pad(depth));
                }
                _ => {
                    let _ = writeln!(s, "{}{{\n{}const int64_t i{d} = 0;\n{}(void)i{d};", pad(depth), pad(depth + 1), pad(depth + 1));
                }
            }
            depth += 1;
        }
        depth
    }
    fn close_outer(&self, s: &mut String, ext: &[String]) {
        for k in (0..ext.len()).rev() {
            let _ = writeln!(s, "{}}}", pad(1 + k));
        }
    }
    /// A task: C kernels read their buffers through the context `vctx` (declared by
    /// `program.rs`), so `params` are not arguments. MR_CLONES (mithril_ops.h): a
    /// portable build runs it at the CPU's vector width.
    fn kernel_signature(&self, name: &str, _params: &[Param]) -> String {
        format!("static MR_CLONES void {name}(void *vctx, int64_t begin, int64_t end)")
    }
    fn barrier(&self) -> Option<&'static str> {
        None
    }
    fn prelude(&self) -> &'static str {
        "#include \"mithril_ops.h\"\n"
    }
}
