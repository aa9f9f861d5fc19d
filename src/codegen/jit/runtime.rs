//! runtime-c inside mithrilc (compiled by `build.rs` with the prefix `mithrilc_jit_`):
//! the library kernels the program driver calls ([`crate::codegen::jit::program`]), and
//! [`HELPERS`], the scalar functions the JIT's code calls by name: `mithril_ops.h`'s
//! (through `runtime-c/mr_jit_ops.c`) and the C library's math. One table gives each
//! helper's name, address and signature, so the three cannot drift apart.

use std::ffi::c_void;

/// `mr_task`: `task(ctx, begin, end)`.
pub type MrTask = unsafe extern "C" fn(*mut c_void, i64, i64);

/// `mr_threads`: the hook the runtime splits work through (`mithril_runtime.h`).
#[repr(C)]
pub struct MrThreads {
    pub parallel_for: Option<unsafe extern "C" fn(*mut c_void, MrTask, *mut c_void, i64)>,
    pub user: *mut c_void,
}

/// `mr_epilogue_fn`: rewrites rows `[i0, i1)` and columns `[j0, j1)` of a result.
pub type MrEpilogueFn = unsafe extern "C" fn(*const c_void, i64, i64, i64, i64, i64);

/// `mr_epilogue`.
#[repr(C)]
pub struct MrEpilogue {
    pub func: MrEpilogueFn,
    pub ctx: *const c_void,
    pub n: i64,
}

extern "C" {
    #[link_name = "mithrilc_jit_mr_run"]
    pub fn mr_run(threads: *const MrThreads, task: MrTask, ctx: *mut c_void, n: i64, cost: f64);
    #[link_name = "mithrilc_jit_mr_sgemm_mt"]
    pub fn mr_sgemm_mt(
        threads: *const MrThreads, m: i64, n: i64, k: i64, alpha: f32,
        a: *const f32, a_rs: i64, a_cs: i64, b: *const f32, b_rs: i64, b_cs: i64,
        beta: f32, c: *mut f32, c_rs: i64, c_cs: i64, ep: *const MrEpilogue,
    );
    #[link_name = "mithrilc_jit_mr_sgemm_panels_mt"]
    pub fn mr_sgemm_panels_mt(
        threads: *const MrThreads, m: i64, n: i64, k: i64, alpha: f32, a: *const f32, a_rs: i64, a_cs: i64,
        bp: *const f32, beta: f32, c: *mut f32, c_rs: i64, c_cs: i64, ep: *const MrEpilogue,
    );
    #[link_name = "mithrilc_jit_mr_sgemm_panels_q_mt"]
    pub fn mr_sgemm_panels_q_mt(
        threads: *const MrThreads, m: i64, n: i64, k: i64, alpha: f32, a: *const f32, a_rs: i64, a_cs: i64,
        bp: *const c_void, btype: i32, beta: f32, c: *mut f32, c_rs: i64, c_cs: i64, ep: *const MrEpilogue,
    );
    #[link_name = "mithrilc_jit_mr_gemm_i8_mt"]
    pub fn mr_gemm_i8_mt(
        threads: *const MrThreads, batch: i64, m: i64, n: i64, k: i64, alpha: f32, a: *const f32, a_bs: i64, a_rs: i64,
        a_cs: i64, bq: *const c_void, beta: f32, c: *mut f32, c_bs: i64, c_rs: i64, c_cs: i64, scratch: *mut c_void,
        ep: *const MrEpilogue,
    );
    #[link_name = "mithrilc_jit_mr_conv2d_q_mt"]
    pub fn mr_conv2d_q_mt(
        threads: *const MrThreads, x: *const f32, w: *const c_void, wtype: i32, y: *mut f32,
        n: i64, c: i64, h: i64, w_: i64, o: i64, kh: i64, kw: i64, oh: i64, ow: i64,
        stride_h: i64, stride_w: i64, pad_top: i64, pad_left: i64, dil_h: i64, dil_w: i64, groups: i64,
        ep: *const MrEpilogue,
    );
    #[link_name = "mithrilc_jit_mr_conv2d_winograd_q_mt"]
    pub fn mr_conv2d_winograd_q_mt(
        threads: *const MrThreads, x: *const f32, u: *const c_void, utype: i32, y: *mut f32,
        n: i64, c: i64, h: i64, w: i64, o: i64, oh: i64, ow: i64, pad_top: i64, pad_left: i64,
        scratch: *mut f32, ep: *const MrEpilogue,
    );
    #[link_name = "mithrilc_jit_mr_conv2d_i8_mt"]
    pub fn mr_conv2d_i8_mt(
        threads: *const MrThreads, x: *const f32, wq: *const c_void, y: *mut f32, n: i64, c: i64, h: i64, w: i64,
        o: i64, kh: i64, kw: i64, oh: i64, ow: i64, stride_h: i64, stride_w: i64, pad_top: i64, pad_left: i64,
        dil_h: i64, dil_w: i64, scratch: *mut c_void, ep: *const MrEpilogue,
    );
    #[link_name = "mithrilc_jit_mr_pool2d_f32_mt"]
    pub fn mr_pool2d_f32_mt(
        threads: *const MrThreads, x: *const f32, y: *mut f32, n: i64, c: i64, h: i64, w: i64,
        kh: i64, kw: i64, oh: i64, ow: i64, stride_h: i64, stride_w: i64, pad_top: i64, pad_left: i64,
        dil_h: i64, dil_w: i64, is_max: i32,
    );
    #[link_name = "mithrilc_jit_mr_softmax_f32_mt"]
    pub fn mr_softmax_f32_mt(threads: *const MrThreads, x: *const f32, y: *mut f32, outer: i64, n: i64, inner: i64);
    #[link_name = "mithrilc_jit_mr_dequantize"]
    pub fn mr_dequantize(kind: i32, src: *const c_void, n: i64, dst: *mut f32);
    #[link_name = "mithrilc_jit_mr_sgd_f32"]
    pub fn mr_sgd_f32(w: *mut f32, g: *const f32, v: *mut f32, n: i64, lr: f32, momentum: f32);
    #[link_name = "mithrilc_jit_mr_sgd_f64"]
    pub fn mr_sgd_f64(w: *mut f64, g: *const f64, v: *mut f64, n: i64, lr: f64, momentum: f64);
    #[link_name = "mithrilc_jit_mr_isa_name"]
    fn mr_isa_name() -> *const std::ffi::c_char;
}

/// The runtime's kernel variant for this CPU (`avx512`, `avx2`, `neon`, `generic`).
pub fn isa_name() -> String {
    // SAFETY: mr_isa_name returns a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(mr_isa_name()) }.to_string_lossy().into_owned()
}

/// A scalar type of a helper's signature (`int`-sized flags are `I32`; `U16` is a
/// `uint16_t`, zero-extended as the C ABI passes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    F32,
    F64,
    I64,
    I32,
    U16,
}

/// A function JIT code calls: its name there, its address, its parameters and result.
pub struct Helper {
    pub name: &'static str,
    pub address: usize,
    pub params: &'static [Scalar],
    pub result: Scalar,
}

macro_rules! helpers {
    ($($link:literal fn $name:ident($($p:ident),*) -> $r:ident;)*) => {
        mod ffi {
            #[allow(unused_imports)]
            use super::*;
            extern "C" {
                $(#[link_name = $link] pub fn $name($(_: helpers!(@rust $p)),*) -> helpers!(@rust $r);)*
            }
        }
        /// Every helper JIT code may call, by the name it imports.
        pub fn helpers() -> &'static [Helper] {
            static TABLE: std::sync::OnceLock<Vec<Helper>> = std::sync::OnceLock::new();
            TABLE.get_or_init(|| vec![$(Helper { name: stringify!($name), address: ffi::$name as *const () as usize, params: &[$(Scalar::$p),*], result: Scalar::$r }),*])
        }
    };
    (@rust F32) => { f32 };
    (@rust F64) => { f64 };
    (@rust I64) => { i64 };
    (@rust I32) => { i32 };
    (@rust U16) => { u16 };
}

helpers! {
    "mithrilc_jit_mr_fast_expf" fn mr_fast_expf(F32) -> F32;
    "mithrilc_jit_mr_fast_tanhf" fn mr_fast_tanhf(F32) -> F32;
    "mithrilc_jit_mr_sigmoidf" fn mr_sigmoidf(F32) -> F32;
    "mithrilc_jit_mr_geluf" fn mr_geluf(F32) -> F32;
    "mithrilc_jit_mr_gelu_tanhf" fn mr_gelu_tanhf(F32) -> F32;
    "mithrilc_jit_mr_softplusf" fn mr_softplusf(F32) -> F32;
    "mithrilc_jit_mr_sigmoid" fn mr_sigmoid(F64) -> F64;
    "mithrilc_jit_mr_gelu" fn mr_gelu(F64) -> F64;
    "mithrilc_jit_mr_gelu_tanh" fn mr_gelu_tanh(F64) -> F64;
    "mithrilc_jit_mr_softplus" fn mr_softplus(F64) -> F64;
    "mithrilc_jit_mr_floordiv_i64" fn mr_floordiv_i64(I64, I64) -> I64;
    "mithrilc_jit_mr_floordiv_u64" fn mr_floordiv_u64(I64, I64) -> I64;
    "mithrilc_jit_mr_pow_i64" fn mr_pow_i64(I64, I64) -> I64;
    "mithrilc_jit_mr_pow_u64" fn mr_pow_u64(I64, I64) -> I64;
    "mithrilc_jit_mr_shl_i64" fn mr_shl_i64(I64, I64, I32) -> I64;
    "mithrilc_jit_mr_shr_i64" fn mr_shr_i64(I64, I64, I32) -> I64;
    "mithrilc_jit_mr_shl_u64" fn mr_shl_u64(I64, I64, I32) -> I64;
    "mithrilc_jit_mr_shr_u64" fn mr_shr_u64(I64, I64, I32) -> I64;
    "mithrilc_jit_mr_f16_to_f32" fn mr_f16_to_f32(U16) -> F32;
    "mithrilc_jit_mr_f32_to_f16" fn mr_f32_to_f16(F32) -> U16;
    "mithrilc_jit_mr_bf16_to_f32" fn mr_bf16_to_f32(U16) -> F32;
    "mithrilc_jit_mr_f32_to_bf16" fn mr_f32_to_bf16(F32) -> U16;
    "mithrilc_jit_mr_round_f16" fn mr_round_f16(F32) -> F32;
    "mithrilc_jit_mr_round_bf16" fn mr_round_bf16(F32) -> F32;
    // The C library's math, which the C target's code calls too.
    "exp" fn exp(F64) -> F64;
    "expf" fn expf(F32) -> F32;
    "log" fn log(F64) -> F64;
    "logf" fn logf(F32) -> F32;
    "sin" fn sin(F64) -> F64;
    "sinf" fn sinf(F32) -> F32;
    "cos" fn cos(F64) -> F64;
    "cosf" fn cosf(F32) -> F32;
    "tanh" fn tanh(F64) -> F64;
    "tanhf" fn tanhf(F32) -> F32;
    "atan" fn atan(F64) -> F64;
    "atanf" fn atanf(F32) -> F32;
    "erf" fn erf(F64) -> F64;
    "erff" fn erff(F32) -> F32;
    "pow" fn pow(F64, F64) -> F64;
    "powf" fn powf(F32, F32) -> F32;
}
