/* The CUDA kernel library's launch planner (runtime-cuda/mr_cuda_plan.h), compiled into
 * mithrilc by build.rs for src/codegen/cuda/plan.rs: what a model's kernels will launch,
 * planned by the same functions as at run time. */
#include "mr_cuda_plan.h"

mr_plan mithrilc_cuda_plan_gemm(int64_t m, int64_t n, int64_t k, int64_t nbatch, int64_t b_rs, int64_t b_cs, int tensor,
                                int sms, unsigned mask, int64_t scratch)
{
    return mr_plan_gemm(m, n, k, nbatch, b_rs, b_cs, tensor, sms, mask, scratch);
}

mr_plan mithrilc_cuda_plan_conv(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kh, int64_t kw, int64_t oh,
                                int64_t ow, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t groups, int tensor,
                                int sms, unsigned mask, int64_t scratch)
{
    return mr_plan_conv(n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, groups, tensor, sms, mask, scratch);
}

mr_plan mithrilc_cuda_plan_pool(int64_t planes, int64_t oh, int64_t ow) { return mr_plan_pool(planes, oh, ow); }

mr_plan mithrilc_cuda_plan_softmax(int64_t outer, int64_t n, int64_t inner) { return mr_plan_softmax(outer, n, inner); }

mr_plan mithrilc_cuda_plan_attention(int64_t m, int64_t n, int64_t d, int64_t e, int64_t nbatch, int tensor, int sms,
                                     unsigned mask)
{
    return mr_plan_attention(m, n, d, e, nbatch, tensor, sms, mask);
}

unsigned mithrilc_cuda_attention_all(void) { return MR_ATTN_ALL; }

unsigned mithrilc_cuda_attention_tc(void) { return MR_ATTN_TC; }

unsigned mithrilc_cuda_plan_bits(mr_plan p) { return mr_plan_bits(&p); }

unsigned mithrilc_cuda_plan_all(void) { return MR_PLAN_ALL; }

mr_tile_shape mithrilc_cuda_tile(int t) { return mr_tile_shape_of(t); }

unsigned mithrilc_cuda_plan_layout(int64_t a_rs, int64_t a_cs, int64_t b_rs, int64_t b_cs)
{
    return mr_plan_layout(a_rs, a_cs, b_rs, b_cs);
}

int64_t mithrilc_cuda_stride_blocks(int64_t n, int64_t per) { return mr_plan_stride_blocks(n, per); }

int mithrilc_cuda_threads(void) { return MR_THREADS; }
