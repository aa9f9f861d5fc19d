/* mr_jit_ops.c: the helpers of mithril_ops.h that the in-process JIT calls
 * (src/codegen/jit), as functions with external names: `mithrilc_jit_` and the
 * helper's own name. The JIT's code calls these, so it computes what the C target's
 * generated code computes with the same helpers inlined. Compiled into mithrilc by
 * build.rs with the runtime; never part of a generated library. */
#include "mithril_ops.h"

#define MR_JIT_1(ret, name, t1) \
    ret mithrilc_jit_##name(t1 a); \
    ret mithrilc_jit_##name(t1 a) { return name(a); }
#define MR_JIT_2(ret, name, t1, t2) \
    ret mithrilc_jit_##name(t1 a, t2 b); \
    ret mithrilc_jit_##name(t1 a, t2 b) { return name(a, b); }
#define MR_JIT_3(ret, name, t1, t2, t3) \
    ret mithrilc_jit_##name(t1 a, t2 b, t3 c); \
    ret mithrilc_jit_##name(t1 a, t2 b, t3 c) { return name(a, b, c); }

/* f32: the fast exponential and tanh (not libm's), and the composites */
MR_JIT_1(float, mr_fast_expf, float)
MR_JIT_1(float, mr_fast_tanhf, float)
MR_JIT_1(float, mr_sigmoidf, float)
MR_JIT_1(float, mr_geluf, float)
MR_JIT_1(float, mr_gelu_tanhf, float)
MR_JIT_1(float, mr_softplusf, float)
/* f64 composites */
MR_JIT_1(double, mr_sigmoid, double)
MR_JIT_1(double, mr_gelu, double)
MR_JIT_1(double, mr_gelu_tanh, double)
MR_JIT_1(double, mr_softplus, double)
/* Python's integer semantics */
MR_JIT_2(int64_t, mr_floordiv_i64, int64_t, int64_t)
MR_JIT_2(uint64_t, mr_floordiv_u64, uint64_t, uint64_t)
MR_JIT_2(int64_t, mr_pow_i64, int64_t, int64_t)
MR_JIT_2(uint64_t, mr_pow_u64, uint64_t, uint64_t)
MR_JIT_3(int64_t, mr_shl_i64, int64_t, int64_t, int)
MR_JIT_3(int64_t, mr_shr_i64, int64_t, int64_t, int)
MR_JIT_3(uint64_t, mr_shl_u64, uint64_t, uint64_t, int)
MR_JIT_3(uint64_t, mr_shr_u64, uint64_t, uint64_t, int)
/* f16 and bf16, held as their bits */
MR_JIT_1(float, mr_f16_to_f32, uint16_t)
MR_JIT_1(uint16_t, mr_f32_to_f16, float)
MR_JIT_1(float, mr_bf16_to_f32, uint16_t)
MR_JIT_1(uint16_t, mr_f32_to_bf16, float)
MR_JIT_1(float, mr_round_f16, float)
MR_JIT_1(float, mr_round_bf16, float)
