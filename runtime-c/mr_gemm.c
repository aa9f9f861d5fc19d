/*
 * mr_gemm.c -- mr_sgemm and mr_sgemm_panels: packing (strided, implicit im2col and
 * panel operands), the register micro-kernels (portable, AVX2, AVX-512 and NEON) and the blocked
 * driver that convolution shares (see mr_internal.h for the numerical choices).
 */
#include "mr_internal.h"

/* ------------------------------------------------------------------------------------ */
/* GEMM                                                                                 */
/* ------------------------------------------------------------------------------------ */

/* B(k, j) of a B in panels (mithril_runtime.h's layout). */
static const float *mr_panel_at(const mr_bsrc *src, int64_t k, int64_t j)
{
    j += src->j0;
    return src->p + MR_PANEL_INDEX(k, j, src->depth);
}

/* ------------------------------------------------------------------------------------ */
/* Narrow weights (mithril_runtime.h's MR_F16, MR_BF16, MR_Q8_0)                        */
/* ------------------------------------------------------------------------------------ */

/* mr_f16_to_f32 and mr_bf16_to_f32 widen the stored elements: mithril_ops.h. */

/* The q8_0 scale of block b of a sequence stored at src (read through memcpy: the
 * compiler makes it one load). */
static inline float mr_q8_scale(const void *src, int64_t b)
{
    float s;
    memcpy(&s, (const unsigned char *)src + 4 * b, sizeof s);
    return s;
}

/*
 * Widening in vector registers (mr_vf, MR_VN): mr_vf_f16, mr_vf_bf16 and mr_vf_q8 widen
 * MR_VN consecutive stored elements into one vector (q8_0 without its scale): F16C's
 * vcvtph2ps (part of AVX-512 F; the avx2 variant's target adds F16C, which every AVX2
 * CPU has), a 16-bit shift, a sign extension and a conversion; NEON's fcvtl, shll and
 * sxtl. Without them (the portable build) the loops below are plain C.
 */
#if defined(MR_AVX512) || defined(MR_AVX2)
/* x86: the same intrinsics at either width; the loads of MR_VN 16-bit and 8-bit
 * elements, and F16C's conversion, differ */
#if defined(MR_AVX512)
#define mr_vf_from_bits _mm512_castsi512_ps
#define mr_vf_load16(h) _mm256_loadu_si256((const __m256i *)(const void *)(h))
#define mr_vf_load8(q) _mm_loadu_si128((const __m128i *)(const void *)(q))
static inline mr_vf mr_vf_f16(const uint16_t *h) { return _mm512_cvtph_ps(mr_vf_load16(h)); }
#else
#define mr_vf_from_bits _mm256_castsi256_ps
#define mr_vf_load16(h) _mm_loadu_si128((const __m128i *)(const void *)(h))
#define mr_vf_load8(q) _mm_loadl_epi64((const __m128i *)(const void *)(q))
static inline mr_vf mr_vf_f16(const uint16_t *h)
{
#if defined(MR_ISA_UNITY) || defined(__F16C__)
    return _mm256_cvtph_ps(mr_vf_load16(h));
#else /* -mavx2 -mfma without -mf16c */
    float f[8];
    int t;
    for (t = 0; t < 8; ++t) f[t] = mr_f16_to_f32(h[t]);
    return _mm256_loadu_ps(f);
#endif
}
#endif
static inline mr_vf mr_vf_bf16(const uint16_t *h) { return mr_vf_from_bits(MR_VF(slli_epi32)(MR_VF(cvtepu16_epi32)(mr_vf_load16(h)), 16)); }
static inline mr_vf mr_vf_q8(const int8_t *q) { return MR_VF(cvtepi32_ps)(MR_VF(cvtepi8_epi32)(mr_vf_load8(q))); }
#elif defined(MR_NEON)
static inline mr_vf mr_vf_f16(const uint16_t *h) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h))); }
static inline mr_vf mr_vf_bf16(const uint16_t *h) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(h), 16)); }
static inline mr_vf mr_vf_q8(const int8_t *q)
{
    int32_t w;
    memcpy(&w, q, sizeof w);
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(w))))));
}
#endif

/* (A q8_0 block is a panel row: the loops below widen whole rows of both.) */
#if MR_PANEL != 32
#error "narrow panels assume MR_PANEL == 32, the q8_0 block"
#endif

/*
 * mr_dequant_rows: `rows` runs of len stored elements (of a sequence stored as `type`
 * at src), MR_PANEL apart from element e, widened into rows of len floats at d; a run
 * stays inside one q8_0 block (e % 32 + len <= 32). nb is the sequence's number of
 * q8_0 blocks (its int8 elements start after nb scales; unused for the other types).
 * The type is tested once, outside the loops.
 */
static void mr_dequant_rows(int type, const void *src, int64_t nb, int64_t e, int64_t rows, int64_t len,
                            float *restrict d)
{
    int64_t r, t;
    if (type == MR_F16) {
        for (r = 0; r < rows; ++r, d += len) {
            const uint16_t *h = (const uint16_t *)src + e + r * MR_PANEL;
            t = 0;
#if defined(MR_VN)
            for (; t + MR_VN <= len; t += MR_VN) mr_vf_store(d + t, mr_vf_f16(h + t));
#endif
            for (; t < len; ++t) d[t] = mr_f16_to_f32(h[t]);
        }
    } else if (type == MR_BF16) {
        for (r = 0; r < rows; ++r, d += len) {
            const uint16_t *h = (const uint16_t *)src + e + r * MR_PANEL;
            t = 0;
#if defined(MR_VN)
            for (; t + MR_VN <= len; t += MR_VN) mr_vf_store(d + t, mr_vf_bf16(h + t));
#endif
            for (; t < len; ++t) d[t] = mr_bf16_to_f32(h[t]);
        }
    } else if (type == MR_Q8_0) {
        const int8_t *q = (const int8_t *)((const unsigned char *)src + 4 * nb) + e;
        for (r = 0; r < rows; ++r, d += len, q += MR_PANEL) {
            const float s = mr_q8_scale(src, e / 32 + r);
            t = 0;
#if defined(MR_VN)
            for (; t + MR_VN <= len; t += MR_VN) mr_vf_store(d + t, mr_vf_mul(mr_vf_set1(s), mr_vf_q8(q + t)));
#endif
            for (; t < len; ++t) d[t] = s * (float)q[t];
        }
    } else {
        for (r = 0; r < rows; ++r, d += len) memcpy(d, (const float *)src + e + r * MR_PANEL, sizeof(float) * (size_t)len);
    }
}

/* mr_dequant_run: elements [e, e + n) of the sequence (as mr_dequant_rows) to d: the
 * rest of e's block, whole blocks, then the start of the last. */
void mr_dequant_run(int type, const void *src, int64_t nb, int64_t e, int64_t n, float *restrict d)
{
    const int64_t head = mr_min_i64(n, (32 - e % 32) % 32);
    mr_dequant_rows(type, src, nb, e, head > 0, head, d);
    e += head;
    d += head;
    n -= head;
    mr_dequant_rows(type, src, nb, e, n / 32, 32, d);
    mr_dequant_rows(type, src, nb, e + n / 32 * 32, n % 32 > 0, n % 32, d + n / 32 * 32);
}

/* (dispatched like the kernels: F16C's conversion where the CPU has it) */
void mr_dequantize(int type, const void *src, int64_t n, float *dst)
{
    if (n > 0) mr_dequant_run(type, src, (n + 31) / 32, 0, n, dst);
}

/* B(k, j), ..., B(k, j + n - 1) of a B in narrow panels, widened into d (a run may
 * cross from one panel into the next, where the stored elements are not adjacent). */
static void mr_panel_row_q(const mr_bsrc *src, int64_t k, int64_t j, int64_t n, float *d)
{
    j += src->j0;
    while (n > 0) {
        const int64_t len = mr_min_i64(n, MR_PANEL - j % MR_PANEL);
        mr_dequant_run(src->btype, src->q, src->nb, MR_PANEL_INDEX(k, j, src->depth), len, d);
        d += len;
        j += len;
        n -= len;
    }
}

/* Whether the micro-kernel can read B's panels in place (its panels split them). */
static int mr_panels_in_place(const mr_bsrc *src)
{
    return src->kind == MR_BSRC_PANELS && MR_PANEL % MR_SGEMM_NR == 0 && src->j0 % MR_SGEMM_NR == 0;
}

#ifdef MR_AVX512
/* d[0..len) = zeros in [0, za), lane t = the float at address `at` + 4t in [za, zb),
 * zeros in [zb, len), with masked loads and stores: no scalar loops. Lanes outside
 * [za, zb) are masked off, so their addresses (which may lie outside the input, hence
 * the integer address) are never read. */
static void mr_pack_piece_avx512(float *d, int64_t len, int64_t za, int64_t zb, uintptr_t at)
{
    int64_t t0;
    for (t0 = 0; t0 < len; t0 += 16) {
        const __m512 v = _mm512_maskz_loadu_ps((__mmask16)mr_lanes(za - t0, zb - t0), (const void *)(at + 4u * (uintptr_t)t0));
        _mm512_mask_storeu_ps(d + t0, (__mmask16)mr_lanes(0, len - t0), v);
    }
}
#endif

#if defined(MR_AVX512) && MR_SGEMM_NR == 32
/* Segments of one output row a 32-column panel can span, and taps per filter, that the
 * fast im2col packing handles. */
#define MR_IM2COL_SEGS 6
#define MR_IM2COL_TAPS 49

/*
 * mr_pack_im2col_fast: the im2col block of mr_sgemm_pack_b for stride 1 and dilation 1,
 * panel by panel. A panel's 32 columns are pieces (segments) of consecutive output
 * rows; for tap (kh, kw) segment s reads one run of input row oh_s + kh - pt, so every
 * depth row of the panel is, per segment and half, one masked load at an offset, with
 * masks and offsets that depend only on the tap: computed once per panel. Returns 0
 * (packing nothing) outside that case.
 */
static int mr_pack_im2col_fast(const mr_bsrc *src, int64_t pc, int64_t jc, int64_t kc, int64_t nc, float *bp)
{
    const int64_t NR = 32, taps = src->KH * src->KW, HW = src->H * src->W;
    int64_t q;
    if (src->kind != MR_BSRC_IM2COL || src->sh != 1 || src->sw != 1 || src->dh != 1 || src->dw != 1 ||
        taps > MR_IM2COL_TAPS || (NR + src->OW - 1) / src->OW + 1 > MR_IM2COL_SEGS) {
        return 0;
    }
    for (q = 0; q * NR < nc; ++q) {
        int64_t off[MR_IM2COL_TAPS][MR_IM2COL_SEGS];
        unsigned mask[MR_IM2COL_TAPS][MR_IM2COL_SEGS];
        int64_t seg_start[MR_IM2COL_SEGS], seg_oh[MR_IM2COL_SEGS], seg_ow[MR_IM2COL_SEGS];
        const int64_t nv = mr_min_i64(NR, nc - q * NR), p0 = src->j0 + jc + q * NR;
        int64_t nseg = 0, t = 0, tap, r, c, th, tw;
        float *dst = bp + q * kc * NR;
        /* the panel's lanes [0, nv) as runs of output rows */
        while (t < nv) {
            const int64_t p = p0 + t;
            seg_start[nseg] = t;
            seg_oh[nseg] = p / src->OW;
            seg_ow[nseg] = p % src->OW;
            t += mr_min_i64(nv - t, src->OW - seg_ow[nseg]);
            ++nseg;
        }
        for (tap = 0, th = 0, tw = 0; tap < taps; ++tap) {
            int64_t s;
            for (s = 0; s < nseg; ++s) {
                const int64_t end = s + 1 < nseg ? seg_start[s + 1] : nv;
                const int64_t ih = seg_oh[s] + th - src->pt;
                /* lane u of the segment reads column seg_ow + u + tw - pl of row ih */
                const int64_t shift = seg_ow[s] + tw - src->pl;
                const int64_t lo = mr_min_i64(end - seg_start[s], shift < 0 ? -shift : 0);
                const int64_t hi = mr_min_i64(end - seg_start[s], src->W - shift);
                const int row_ok = ih >= 0 && ih < src->H;
                mask[tap][s] = row_ok && hi > lo ? (unsigned)((((uint64_t)1 << hi) - 1u) & ~(((uint64_t)1 << lo) - 1u))
                                                       << seg_start[s]
                                                 : 0u;
                off[tap][s] = ih * src->W + shift - seg_start[s];
            }
            /* (th, tw) = (tap / KW, tap % KW), stepped instead of divided out */
            if (++tw == src->KW) {
                tw = 0;
                ++th;
            }
        }
        c = pc / taps;
        tap = pc % taps;
        for (r = 0; r < kc; ++r) {
            const uintptr_t xc = (uintptr_t)(src->p + c * HW);
            __m512 lo = _mm512_setzero_ps(), hi = lo;
            int64_t s;
            for (s = 0; s < nseg; ++s) {
                const uintptr_t at = xc + 4u * (uintptr_t)off[tap][s];
                lo = _mm512_mask_loadu_ps(lo, (__mmask16)(mask[tap][s] & 0xffffu), (const void *)at);
                hi = _mm512_mask_loadu_ps(hi, (__mmask16)(mask[tap][s] >> 16), (const void *)(at + 64u));
            }
            _mm512_storeu_ps(dst + r * NR, lo);
            _mm512_storeu_ps(dst + r * NR + 16, hi);
            if (++tap == taps) {
                tap = 0;
                ++c;
            }
        }
    }
    return 1;
}
#else
static int mr_pack_im2col_fast(const mr_bsrc *src, int64_t pc, int64_t jc, int64_t kc, int64_t nc, float *bp)
{
    (void)src; (void)pc; (void)jc; (void)kc; (void)nc; (void)bp;
    return 0;
}
#endif

/*
 * mr_sgemm_pack_b: copies the kc x nc block of B starting at (row pc, column jc) into bp,
 * laid out as ceil(nc/NR) consecutive micro-panels; micro-panel q holds columns
 * [q*NR, q*NR + NR) of the block as kc rows of NR contiguous floats:
 *   bp[(q*kc + r)*NR + t] = B(pc + r, jc + q*NR + t), zero for columns past nc.
 */
static void mr_sgemm_pack_b(const mr_bsrc *src, int64_t pc, int64_t jc, int64_t kc,
                            int64_t nc, float *bp)
{
    const int64_t NR = MR_SGEMM_NR;
    const int64_t npanels = (nc + NR - 1) / NR;
    int64_t q, r, t;
    if (src->kind == MR_BSRC_PANELS_Q) {
        for (q = 0; q < npanels; ++q) {
            const int64_t nv = mr_min_i64(NR, nc - q * NR), j = src->j0 + jc + q * NR;
            if (nv == NR && j % MR_PANEL + NR <= MR_PANEL) {
                /* a whole micro-panel inside one panel: kc runs of NR stored elements
                 * (one run when NR == MR_PANEL) */
                mr_dequant_rows(src->btype, src->q, src->nb, MR_PANEL_INDEX(pc, j, src->depth), kc, NR, bp + q * kc * NR);
                continue;
            }
            for (r = 0; r < kc; ++r) {
                float *d = bp + (q * kc + r) * NR;
                mr_panel_row_q(src, pc + r, jc + q * NR, nv, d);
                for (t = nv; t < NR; ++t) d[t] = 0.0f;
            }
        }
    } else if (src->kind == MR_BSRC_PANELS) {
        for (q = 0; q < npanels; ++q) {
            const int64_t nv = mr_min_i64(NR, nc - q * NR);
            for (r = 0; r < kc; ++r) {
                float *d = bp + (q * kc + r) * NR;
                for (t = 0; t < nv; ++t) d[t] = *mr_panel_at(src, pc + r, jc + q * NR + t);
                for (; t < NR; ++t) d[t] = 0.0f;
            }
        }
    } else if (src->kind == MR_BSRC_STRIDED && src->cs == 1 && nc % NR == 0) {
        /* Row-major B in whole panels (a weight stored transposed): each row's nc floats
         * are read in one contiguous sweep, and rows a few ahead are prefetched (the
         * rows are far apart, which defeats the hardware prefetcher). */
        for (r = 0; r < kc; ++r) {
            const float *s = src->p + (pc + r) * src->rs + jc;
#if defined(__GNUC__)
            if (r + 8 < kc) {
                for (t = 0; t < nc; t += 16) __builtin_prefetch(s + 8 * src->rs + t);
            }
#endif
            for (q = 0; q < npanels; ++q) {
                memcpy(bp + (q * kc + r) * NR, s + q * NR, sizeof(float) * (size_t)NR);
            }
        }
    } else if (src->kind == MR_BSRC_STRIDED) {
        for (q = 0; q < npanels; ++q) {
            const int64_t nv = mr_min_i64(NR, nc - q * NR);
            float *dst = bp + q * kc * NR;
            const float *s0 = src->p + pc * src->rs + (jc + q * NR) * src->cs;
            if (src->cs == 1 && nv == NR) {
                for (r = 0; r < kc; ++r) {
                    memcpy(dst + r * NR, s0 + r * src->rs, sizeof(float) * (size_t)NR);
                }
            } else {
                for (r = 0; r < kc; ++r) {
                    const float *s = s0 + r * src->rs;
                    float *d = dst + r * NR;
                    for (t = 0; t < nv; ++t) d[t] = s[t * src->cs];
                    for (; t < NR; ++t) d[t] = 0.0f;
                }
            }
        }
    } else if (mr_pack_im2col_fast(src, pc, jc, kc, nc, bp)) {
        /* done */
    } else {
        const int64_t padded = npanels * NR;
        const int64_t oh0 = (src->j0 + jc) / src->OW, ow0 = (src->j0 + jc) % src->OW;
        /* (c, kh, kw) of block row r, advanced incrementally instead of divided out */
        int64_t c = pc / (src->KH * src->KW), kh = (pc / src->KW) % src->KH, kw = pc % src->KW;
        for (r = 0; r < kc; ++r) {
            const float *xc = src->p + c * src->H * src->W;
            const int64_t woff = kw * src->dw - src->pl;
            int64_t lo, hi, j = 0, oh = oh0, ow = ow0;
            mr_out_range(src->OW, src->sw, woff, src->W, &lo, &hi);
            /* walk the block's columns one output row (oh) at a time, and each output row
             * in pieces that stay inside one micro-panel, so every piece is a contiguous
             * destination: zeros, then the in-range input taps, then zeros */
            while (j < nc) {
                const int64_t ih = oh * src->sh + kh * src->dh - src->pt;
                const int64_t row_end = mr_min_i64(src->OW, ow + (nc - j));
                const int row_ok = ih >= 0 && ih < src->H;
                const float *xr = xc + (row_ok ? ih * src->W : 0);
                while (ow < row_end) {
                    const int64_t off = j % NR;
                    const int64_t len = mr_min_i64(NR - off, row_end - ow);
                    float *restrict d = bp + ((j / NR) * kc + r) * NR + off;
                    const int64_t za = row_ok ? mr_min_i64(len, lo > ow ? lo - ow : 0) : len;
                    const int64_t zb = row_ok ? mr_min_i64(len, hi > ow ? hi - ow : 0) : len;
#ifdef MR_AVX512
                    if (src->sw == 1) {
                        mr_pack_piece_avx512(d, len, za, zb, (uintptr_t)xr + 4u * (uintptr_t)(ow + woff));
                        j += len;
                        ow += len;
                        continue;
                    }
#endif
                    for (t = 0; t < za; ++t) d[t] = 0.0f;
                    if (zb > za) {
                        /* xs[u*sw] = x[c, ih, (ow + za + u)*sw + woff], in range for u < zb-za */
                        const float *restrict xs = xr + (ow + za) * src->sw + woff;
                        if (src->sw == 1) {
                            for (t = za; t < zb; ++t) d[t] = xs[t - za];
                        } else {
                            for (t = za; t < zb; ++t) d[t] = xs[(t - za) * src->sw];
                        }
                    }
                    for (t = zb > za ? zb : za; t < len; ++t) d[t] = 0.0f;
                    j += len;
                    ow += len;
                }
                ow = 0;
                ++oh;
            }
            for (t = nc; t < padded; ++t) bp[((t / NR) * kc + r) * NR + t % NR] = 0.0f;
            if (++kw == src->KW) {
                kw = 0;
                if (++kh == src->KH) {
                    kh = 0;
                    ++c;
                }
            }
        }
    }
}

/*
 * mr_sgemm_pack_a: the mr x kc block of A at (row ic, column pc) into ap (MR * KC
 * floats), rows mr and up zero, for the micro-kernel to read as a[i*ars + r*acs]: as
 * rows of kc floats (ars = kc, acs = 1) for the x86 kernels (MR_A_ROWS) and for a narrow
 * A with unit column stride, whose rows are runs of stored elements widened in vector
 * registers (mr_dequant_run) straight into place; else as kc columns of MR (ars = 1,
 * acs = MR). Other narrow strides widen element by element.
 */
void mr_sgemm_pack_a(const mr_asrc *a, int64_t ic, int64_t pc, int64_t mr, int64_t kc, float *ap, int64_t *ars,
                     int64_t *acs)
{
    const int64_t MR = MR_SGEMM_MR;
    const int rows = MR_A_ROWS || (a->type != MR_F32 && a->cs == 1);
    const int64_t rs = rows ? kc : 1, cs = rows ? 1 : MR; /* element (i, r) goes to ap[i*rs + r*cs] */
    int64_t i, r;
    for (i = 0; i < mr; ++i) {
        const int64_t e = a->off + (ic + i) * a->rs + pc * a->cs;
        const float *s = (const float *)a->q + e;
        float *d = ap + i * rs;
        if (a->type != MR_F32 && a->cs == 1) { /* (rows) */
            mr_dequant_run(a->type, a->q, a->nb, e, kc, d);
        } else if (a->type != MR_F32) {
            for (r = 0; r < kc; ++r) mr_dequant_run(a->type, a->q, a->nb, e + r * a->cs, 1, d + r * cs);
        } else if (a->cs == 1 && rows) {
            memcpy(d, s, sizeof(float) * (size_t)kc);
        } else {
            for (r = 0; r < kc; ++r) d[r * cs] = s[r * a->cs];
        }
    }
    for (; i < MR; ++i) {
        for (r = 0; r < kc; ++r) ap[i * rs + r * cs] = 0.0f;
    }
    *ars = rs;
    *acs = cs;
}

/*
 * mr_sgemm_micro: the register micro-kernel. For i < rows (1 <= rows <= MR), j < NR, with
 *   s = sum_{r<kc} a[i*ars + r*acs] * b[r*bs + j], summed in increasing r:
 *   out[i*out_rs + j] = s, or out[i*out_rs + j] + s when `add`,
 * where b is a B micro-panel (kc rows of NR floats bs apart: packed, or a weight's
 * panel in place) and a is either a packed A sliver (mr_sgemm_pack_a) or A itself when
 * it has a unit stride (no copy needed); the x86 kernels take only acs == 1 (MR_A_ROWS).
 * out is the MR x NR tile or C itself. With MR_MICRO_ROWS nothing else is read or
 * written; the other kernels compute and store every row i < MR, reading MR rows of a
 * (a packed sliver, padded with zeros), so with fewer rows out must be the tile.
 * nr is how many columns the caller uses: where nr <= NR / 2 the x86 kernels compute and
 * store only j < NR / 2 (a last panel of a narrow B, such as mlp's 10 classes, in half
 * the time; the others ignore nr).
 * While it runs, the kernel may prefetch into L2 the pf_rows rows of NR floats (bs apart)
 * that start at pf (none when pf_rows == 0); it reads nothing there.
 * Each row of the tile is a separate accumulator array and every j loop has the
 * compile-time bound NR, so the compiler vectorizes along j and keeps the MR x NR tile in
 * registers; a[...] becomes one broadcast per row and step.
 */
#if defined(MR_AVX512) || defined(MR_MICRO_AVX2)
/*
 * The x86 kernels' loop over k: STEP (one step, reading B's row at b) kc times, b
 * advancing by bs, in groups of MR_K_GROUP steps, each group first prefetching into L2
 * its share of the pf_rows rows of NR floats at pf (bs apart): ceil(pf_rows / groups)
 * rows, so the last group has fetched them all (none if kc < MR_K_GROUP). Every sliver
 * after the first finds B's micro-panel in L1, but the first reads it from memory; the
 * slivers share out the next micro-panel (the driver's pf) so that it is in L2 by then.
 * Once a group and without a test per step: testing per step whether this step
 * prefetched (the loop before this one) cost gpt_block b1 9% on one thread and 11% on
 * two (avx512: 13.9 -> 12.7 ms, 7.38 -> 6.56 ms); groups of 4 and 16 were slower than 8,
 * and prefetching B's next rows into L1 as well (as that loop did) slowed it.
 */
#ifndef MR_K_GROUP
#define MR_K_GROUP 8
#endif
/* The taps kernels' B rows are scattered (off), which the hardware prefetcher cannot
 * follow: they are fetched MR_B_AHEAD rows ahead. */
#ifndef MR_B_AHEAD
#define MR_B_AHEAD 16
#endif
/* The taps kernels' loop over k: STEP on B's row r (the 32 floats at base + off[r]) for
 * r < kc, each first fetching both cache lines of row r + MR_B_AHEAD into L1. */
#define MR_TAPS_LOOP(STEP)                                                               \
    {                                                                                    \
        int64_t r_;                                                                      \
        for (r_ = 0; r_ + MR_B_AHEAD < kc; ++r_) {                                       \
            _mm_prefetch((const char *)(base + off[r_ + MR_B_AHEAD]), _MM_HINT_T0);      \
            _mm_prefetch((const char *)(base + off[r_ + MR_B_AHEAD] + 16), _MM_HINT_T0); \
            STEP(base + off[r_])                                                         \
        }                                                                                \
        for (; r_ < kc; ++r_) STEP(base + off[r_])                                       \
    }
/* The group's steps stay a loop: unrolled, each step's B row and A elements are at
 * offsets of their own (multiples of the run-time strides), and GCC, out of registers
 * for them in the AVX2 kernel (then 6 x 16), reloaded one from the stack before every
 * broadcast (AVX2 kernels on a Zen 4, gpt_block's four GEMMs, one thread: 87 -> 93
 * GFLOP/s; AVX-512's unchanged at 97). */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8)
#define MR_NO_UNROLL _Pragma("GCC unroll 1")
#else
#define MR_NO_UNROLL
#endif
#define MR_K_LOOP(STEP)                                                                  \
    {                                                                                    \
        const int64_t groups_ = kc / MR_K_GROUP;                                         \
        const int64_t per_ = groups_ > 0 ? (pf_rows + groups_ - 1) / groups_ : 0;        \
        int64_t r_ = 0, t_, o_;                                                          \
        for (; r_ + MR_K_GROUP <= kc; r_ += MR_K_GROUP) {                                \
            const int64_t n_ = mr_min_i64(per_, pf_rows);                                \
            for (t_ = 0; t_ < n_; ++t_, pf += bs) {                                      \
                for (o_ = 0; o_ < MR_SGEMM_NR; o_ += 16) {                               \
                    _mm_prefetch((const char *)(pf + o_), _MM_HINT_T1);                  \
                }                                                                        \
            }                                                                            \
            pf_rows -= n_;                                                               \
            MR_NO_UNROLL                                                                 \
            for (t_ = 0; t_ < MR_K_GROUP; ++t_, b += bs) STEP                            \
        }                                                                                \
        for (; r_ < kc; ++r_, b += bs) STEP                                              \
    }
#endif

/* Accumulator c<i><v> of an x86 tile, W bits: stored to out at row i, column `col`, or
 * added to what is there when `add`. */
#define MR_ACC_STORE_X86(i, v, W, col)                                      \
    {                                                                       \
        float *o_ = out + (i) * out_rs + (col);                             \
        if (add) c##i##v = _mm##W##_add_ps(_mm##W##_loadu_ps(o_), c##i##v); \
        _mm##W##_storeu_ps(o_, c##i##v);                                    \
    }

#if defined(MR_MICRO_AVX512)
/* The 8 x 32 tile in 16 zmm accumulators, written out with intrinsics: the same sums in
 * the same order (fused multiply-adds) as the portable kernel below. Its rows
 * [0, rows) only, rows a constant once inlined (MR_MICRO_ROWS). */
/* Row i of the tile: its A element times both halves of B's row (the first alone when
 * `half`, a constant once inlined). */
#define MR_ROW_FMA(i)                                                \
    if ((i) < rows) {                                                \
        x = _mm512_set1_ps(a[(i) * ars]);                            \
        c##i##0 = _mm512_fmadd_ps(x, b0, c##i##0);                   \
        if (!half) c##i##1 = _mm512_fmadd_ps(x, b1, c##i##1);        \
    }
#define MR_ROW_STORE(i)                                                        \
    if ((i) < rows) {                                                          \
        MR_ACC_STORE_X86(i, 0, 512, 0)                                         \
        if (!half) MR_ACC_STORE_X86(i, 1, 512, 16)                             \
    }
/* One step of k: B's row at `row` (both halves, or the first) against the tile's A
 * elements. */
#define MR_K_STEP(row)                                                                       \
    {                                                                                        \
        const float *bq = (row);                                                             \
        const __m512 b0 = _mm512_loadu_ps(bq), b1 = half ? b0 : _mm512_loadu_ps(bq + 16);    \
        __m512 x;                                                                            \
        MR_ROW_FMA(0) MR_ROW_FMA(1) MR_ROW_FMA(2) MR_ROW_FMA(3)                   \
        MR_ROW_FMA(4) MR_ROW_FMA(5) MR_ROW_FMA(6) MR_ROW_FMA(7)                   \
        ++a; /* acs == 1 (MR_A_ROWS) */                                           \
    }
#define MR_TILE_ZERO                                                                                       \
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00; \
    __m512 c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00
MR_BODY void mr_micro_body(const int rows, const int half, int64_t kc, const float *restrict a, int64_t ars,
                           const float *restrict b, int64_t bs, float *restrict out, int64_t out_rs, int add,
                           const float *pf, int64_t pf_rows)
{
    MR_TILE_ZERO;
    MR_K_LOOP(MR_K_STEP(b))
    MR_ROW_STORE(0) MR_ROW_STORE(1) MR_ROW_STORE(2) MR_ROW_STORE(3)
    MR_ROW_STORE(4) MR_ROW_STORE(5) MR_ROW_STORE(6) MR_ROW_STORE(7)
}

/* mr_conv2d_taps_gemm's kernel (MR_MICRO_TAPS): the 8 x 32 tile whose B row r is the
 * 32 floats at base + off[r], read in place; rows [0, mr) and columns [0, nr) of it are
 * stored to out (row i at out + i*out_rs), or added to it when `add`. */
MR_BODY void mr_micro_taps_body(const int rows, int64_t kc, const float *restrict a, int64_t ars,
                                const float *restrict base, const int64_t *off, float *restrict out,
                                int64_t out_rs, int64_t nr, int add)
{
    MR_TILE_ZERO;
    const __mmask16 m0 = (__mmask16)mr_lanes(0, nr), m1 = (__mmask16)mr_lanes(0, nr - 16);
    const int half = 0;
    MR_TAPS_LOOP(MR_K_STEP)
/* Row i's columns [0, nr): masked loads and stores touch no lane past nr, and the
 * second half's address is formed only when it has lanes. */
#define MR_ROW_STORE_MASKED(i)                                                               \
    if ((i) < rows) {                                                                        \
        float *o = out + (i) * out_rs;                                                       \
        if (add) c##i##0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, o), c##i##0);             \
        _mm512_mask_storeu_ps(o, m0, c##i##0);                                               \
        if (nr > 16) {                                                                       \
            if (add) c##i##1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, o + 16), c##i##1);    \
            _mm512_mask_storeu_ps(o + 16, m1, c##i##1);                                      \
        }                                                                                    \
    }
    MR_ROW_STORE_MASKED(0) MR_ROW_STORE_MASKED(1) MR_ROW_STORE_MASKED(2) MR_ROW_STORE_MASKED(3)
    MR_ROW_STORE_MASKED(4) MR_ROW_STORE_MASKED(5) MR_ROW_STORE_MASKED(6) MR_ROW_STORE_MASKED(7)
#undef MR_ROW_STORE_MASKED
}
#undef MR_ROW_FMA
#undef MR_ROW_STORE
#undef MR_K_STEP
#undef MR_TILE_ZERO
/* (mr_sgemm_micro's cases from 3 rows up: see MR_ROWS_SWITCH) */
#define MR_ROWS_CASES_TOP(F, ...)     \
    case 3: F(3, __VA_ARGS__); break; \
    case 4: F(4, __VA_ARGS__); break; \
    case 5: F(5, __VA_ARGS__); break; \
    case 6: F(6, __VA_ARGS__); break; \
    case 7: F(7, __VA_ARGS__); break; \
    default: F(8, __VA_ARGS__); break;

#elif defined(MR_MICRO_AVX2)
/* The 3 x 32 tile in 12 ymm accumulators, three for A's broadcasts and one for B's
 * vector: the same sums in the same order (fused multiply-adds) as the portable kernel
 * below, which GCC compiles for AVX2 at about a third of the FMA peak (it keeps part of
 * the tile in memory). Its rows [0, rows) only, rows a constant once inlined
 * (MR_MICRO_ROWS): the other rows' accumulators and A's elements are never touched.
 * A tile as wide as a weight panel reads each panel row whole: the 6 x 16 tile it
 * replaced read half of each 128-byte row, and ran gpt_block's GEMMs at 94.8 GFLOP/s
 * against this one's 99.1 (one thread, Zen 4, peak 113-117). */
/* Row i's product with B's vector v (bv). */
#define MR_ROW_FMA3(i, v) \
    if ((i) < rows) c##i##v = _mm256_fmadd_ps(x##i, bv, c##i##v);
/* One step of k: the tile's A elements against B's row at `row`, a vector at a time (the
 * first two alone when `half`, a constant once inlined). */
#define MR_K_STEP3(row)                                                                      \
    {                                                                                        \
        const float *bq = (row);                                                             \
        __m256 x0, x1 = _mm256_setzero_ps(), x2 = x1, bv;                                    \
        x0 = _mm256_broadcast_ss(a);                                                         \
        if (1 < rows) x1 = _mm256_broadcast_ss(a + ars);                                     \
        if (2 < rows) x2 = _mm256_broadcast_ss(a + 2 * ars);                                 \
        bv = _mm256_loadu_ps(bq);                                                            \
        MR_ROW_FMA3(0, 0) MR_ROW_FMA3(1, 0) MR_ROW_FMA3(2, 0)                                \
        bv = _mm256_loadu_ps(bq + 8);                                                        \
        MR_ROW_FMA3(0, 1) MR_ROW_FMA3(1, 1) MR_ROW_FMA3(2, 1)                                \
        if (!half) {                                                                         \
            bv = _mm256_loadu_ps(bq + 16);                                                   \
            MR_ROW_FMA3(0, 2) MR_ROW_FMA3(1, 2) MR_ROW_FMA3(2, 2)                            \
            bv = _mm256_loadu_ps(bq + 24);                                                   \
            MR_ROW_FMA3(0, 3) MR_ROW_FMA3(1, 3) MR_ROW_FMA3(2, 3)                            \
        }                                                                                    \
        ++a; /* acs == 1 (MR_A_ROWS) */                                                      \
    }
#define MR_ROW_STORE3(i)                                                                     \
    if ((i) < rows) {                                                                        \
        MR_ACC_STORE_X86(i, 0, 256, 0) MR_ACC_STORE_X86(i, 1, 256, 8)                        \
        if (!half) {                                                                         \
            MR_ACC_STORE_X86(i, 2, 256, 16) MR_ACC_STORE_X86(i, 3, 256, 24)                  \
        }                                                                                    \
    }
#define MR_TILE_ZERO3                                                                        \
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;                       \
    __m256 c10 = c00, c11 = c00, c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00
MR_BODY void mr_micro_body(const int rows, const int half, int64_t kc, const float *restrict a, int64_t ars,
                           const float *restrict b, int64_t bs, float *restrict out, int64_t out_rs, int add,
                           const float *pf, int64_t pf_rows)
{
    MR_TILE_ZERO3;
    MR_K_LOOP(MR_K_STEP3(b))
    MR_ROW_STORE3(0) MR_ROW_STORE3(1) MR_ROW_STORE3(2)
}

/* mr_conv2d_taps_gemm's kernel (MR_MICRO_TAPS) for AVX2: the 3 x 32 tile whose B row r
 * is the 32 floats at base + off[r], read in place, as the AVX-512 one above. Where it
 * was missing, the taps path copied every tile's B rows into a packed panel, and the
 * avx2 kernels ran lenet b32 2.6 times as long as the avx512 ones on the same Zen 4. */
MR_BODY void mr_micro_taps_body(const int rows, int64_t kc, const float *restrict a, int64_t ars,
                                const float *restrict base, const int64_t *off, float *restrict out,
                                int64_t out_rs, int64_t nr, int add)
{
    MR_TILE_ZERO3;
    float part[8];
    const int half = 0;
    int64_t t;
    MR_TAPS_LOOP(MR_K_STEP3)
/* Row i's columns [0, nr): its whole vectors as mr_sgemm_micro stores them, the vector
 * that nr cuts through `part`, one float at a time (AVX's masked store is microcoded on
 * AMD's cores, about 20 cycles). */
#define MR_ACC_STORE3_PART(i, v)                                                             \
    if (nr >= 8 * (v) + 8) {                                                                 \
        MR_ACC_STORE_X86(i, v, 256, 8 * (v))                                                 \
    } else if (nr > 8 * (v)) {                                                               \
        float *o = out + (i) * out_rs + 8 * (v);                                             \
        _mm256_storeu_ps(part, c##i##v);                                                     \
        for (t = 0; t < nr - 8 * (v); ++t) o[t] = add ? o[t] + part[t] : part[t];            \
    }
#define MR_ROW_STORE3_PART(i)                                                                \
    if ((i) < rows) {                                                                        \
        MR_ACC_STORE3_PART(i, 0) MR_ACC_STORE3_PART(i, 1)                                    \
        MR_ACC_STORE3_PART(i, 2) MR_ACC_STORE3_PART(i, 3)                                    \
    }
    MR_ROW_STORE3_PART(0) MR_ROW_STORE3_PART(1) MR_ROW_STORE3_PART(2)
#undef MR_ROW_STORE3_PART
#undef MR_ACC_STORE3_PART
}
#undef MR_TILE_ZERO3
#undef MR_ROW_FMA3
#undef MR_K_STEP3
#undef MR_ROW_STORE3
/* (mr_sgemm_micro's cases from 3 rows up: see MR_ROWS_SWITCH) */
#define MR_ROWS_CASES_TOP(F, ...) \
    default: F(3, __VA_ARGS__); break;
#elif defined(MR_MICRO_NEON)
/* The 12 x 8 tile in 24 q-register accumulators (AArch64 NEON), written out with
 * intrinsics: the same sums in the same order (fused multiply-adds) as the portable
 * kernel below. Each step loads B's row as two vectors and A's 12 elements as three,
 * and multiplies by A's lanes (FMLA by element), so no broadcasts are needed. */

/* A's elements i, i + ars, i + 2 ars, i + 3 ars as one vector: one load when packed
 * (ars == 1, the same at every step, so the branch is predicted). */
static inline float32x4_t mr_neon_a4(const float *a, int64_t ars)
{
    float32x4_t v;
    if (ars == 1) return vld1q_f32(a);
    v = vld1q_dup_f32(a);
    v = vld1q_lane_f32(a + ars, v, 1);
    v = vld1q_lane_f32(a + 2 * ars, v, 2);
    return vld1q_lane_f32(a + 3 * ars, v, 3);
}
/* Row i of the tile (lane l of A's vector x): its A element times both halves of B's row. */
#define MR_ROW_FMA_NEON(i, x, l)                        \
    c##i##_0 = vfmaq_laneq_f32(c##i##_0, b0, x, l);     \
    c##i##_1 = vfmaq_laneq_f32(c##i##_1, b1, x, l)
/* Rows r0..r3: the four lanes of A's vector x. */
#define MR_ROWS4_FMA_NEON(r0, r1, r2, r3, x)                                                  \
    MR_ROW_FMA_NEON(r0, x, 0); MR_ROW_FMA_NEON(r1, x, 1); MR_ROW_FMA_NEON(r2, x, 2); MR_ROW_FMA_NEON(r3, x, 3)
#define MR_ROW_STORE_NEON(i)                                                                  \
    if (add) {                                                                                \
        c##i##_0 = vaddq_f32(vld1q_f32(out + (i) * out_rs), c##i##_0);                        \
        c##i##_1 = vaddq_f32(vld1q_f32(out + (i) * out_rs + 4), c##i##_1);                    \
    }                                                                                         \
    vst1q_f32(out + (i) * out_rs, c##i##_0);                                                  \
    vst1q_f32(out + (i) * out_rs + 4, c##i##_1)
void mr_sgemm_micro(int64_t rows, int64_t nr, int64_t kc, const float *restrict a, int64_t ars, int64_t acs,
                    const float *restrict b, int64_t bs, float *restrict out, int64_t out_rs, int add,
                    const float *pf, int64_t pf_rows)
{
    (void)rows; /* the whole tile (not MR_MICRO_ROWS) */
    (void)nr;
    float32x4_t c0_0 = vdupq_n_f32(0.0f), c0_1 = c0_0, c1_0 = c0_0, c1_1 = c0_0, c2_0 = c0_0, c2_1 = c0_0;
    float32x4_t c3_0 = c0_0, c3_1 = c0_0, c4_0 = c0_0, c4_1 = c0_0, c5_0 = c0_0, c5_1 = c0_0;
    float32x4_t c6_0 = c0_0, c6_1 = c0_0, c7_0 = c0_0, c7_1 = c0_0, c8_0 = c0_0, c8_1 = c0_0;
    float32x4_t c9_0 = c0_0, c9_1 = c0_0, c10_0 = c0_0, c10_1 = c0_0, c11_0 = c0_0, c11_1 = c0_0;
    int64_t r;
    (void)pf; /* no prefetch: not measured on AArch64 hardware */
    (void)pf_rows;
    for (r = 0; r < kc; ++r, b += bs) {
        const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4);
        const float32x4_t x0 = mr_neon_a4(a, ars), x1 = mr_neon_a4(a + 4 * ars, ars), x2 = mr_neon_a4(a + 8 * ars, ars);
        MR_ROWS4_FMA_NEON(0, 1, 2, 3, x0);
        MR_ROWS4_FMA_NEON(4, 5, 6, 7, x1);
        MR_ROWS4_FMA_NEON(8, 9, 10, 11, x2);
        a += acs;
    }
    MR_ROW_STORE_NEON(0); MR_ROW_STORE_NEON(1); MR_ROW_STORE_NEON(2); MR_ROW_STORE_NEON(3);
    MR_ROW_STORE_NEON(4); MR_ROW_STORE_NEON(5); MR_ROW_STORE_NEON(6); MR_ROW_STORE_NEON(7);
    MR_ROW_STORE_NEON(8); MR_ROW_STORE_NEON(9); MR_ROW_STORE_NEON(10); MR_ROW_STORE_NEON(11);
}
#undef MR_ROW_FMA_NEON
#undef MR_ROWS4_FMA_NEON
#undef MR_ROW_STORE_NEON
#else
void mr_sgemm_micro(int64_t rows, int64_t nr, int64_t kc, const float *restrict a, int64_t ars, int64_t acs,
                    const float *restrict b, int64_t bs, float *restrict out, int64_t out_rs, int add,
                    const float *pf, int64_t pf_rows)
{
    (void)rows; /* the whole tile (not MR_MICRO_ROWS) */
    (void)nr;
    (void)pf; /* portable C has no prefetch */
    (void)pf_rows;
    float c0[MR_SGEMM_NR], c1[MR_SGEMM_NR], c2[MR_SGEMM_NR], c3[MR_SGEMM_NR];
#if MR_SGEMM_MR > 4
    float c4[MR_SGEMM_NR], c5[MR_SGEMM_NR];
#endif
#if MR_SGEMM_MR > 6
    float c6[MR_SGEMM_NR], c7[MR_SGEMM_NR];
#endif
    int64_t r;
    int j;
    for (j = 0; j < MR_SGEMM_NR; ++j) {
        c0[j] = 0.0f;
        c1[j] = 0.0f;
        c2[j] = 0.0f;
        c3[j] = 0.0f;
#if MR_SGEMM_MR > 4
        c4[j] = 0.0f;
        c5[j] = 0.0f;
#endif
#if MR_SGEMM_MR > 6
        c6[j] = 0.0f;
        c7[j] = 0.0f;
#endif
    }
    for (r = 0; r < kc; ++r) {
        const float a0 = a[0], a1 = a[ars], a2 = a[2 * ars], a3 = a[3 * ars];
#if MR_SGEMM_MR > 4
        const float a4 = a[4 * ars], a5 = a[5 * ars];
#endif
#if MR_SGEMM_MR > 6
        const float a6 = a[6 * ars], a7 = a[7 * ars];
#endif
        for (j = 0; j < MR_SGEMM_NR; ++j) {
            const float bj = b[j];
            c0[j] = MR_MADD(a0, bj, c0[j]);
            c1[j] = MR_MADD(a1, bj, c1[j]);
            c2[j] = MR_MADD(a2, bj, c2[j]);
            c3[j] = MR_MADD(a3, bj, c3[j]);
#if MR_SGEMM_MR > 4
            c4[j] = MR_MADD(a4, bj, c4[j]);
            c5[j] = MR_MADD(a5, bj, c5[j]);
#endif
#if MR_SGEMM_MR > 6
            c6[j] = MR_MADD(a6, bj, c6[j]);
            c7[j] = MR_MADD(a7, bj, c7[j]);
#endif
        }
        a += acs;
        b += bs;
    }
    for (j = 0; j < MR_SGEMM_NR; ++j) {
        out[j] = add ? out[j] + c0[j] : c0[j];
        out[out_rs + j] = add ? out[out_rs + j] + c1[j] : c1[j];
        out[2 * out_rs + j] = add ? out[2 * out_rs + j] + c2[j] : c2[j];
        out[3 * out_rs + j] = add ? out[3 * out_rs + j] + c3[j] : c3[j];
#if MR_SGEMM_MR > 4
        out[4 * out_rs + j] = add ? out[4 * out_rs + j] + c4[j] : c4[j];
        out[5 * out_rs + j] = add ? out[5 * out_rs + j] + c5[j] : c5[j];
#endif
#if MR_SGEMM_MR > 6
        out[6 * out_rs + j] = add ? out[6 * out_rs + j] + c6[j] : c6[j];
        out[7 * out_rs + j] = add ? out[7 * out_rs + j] + c7[j] : c7[j];
#endif
    }
}
#endif

#if MR_MICRO_ROWS
/* The x86 kernels: a switch over the inlined body for each row count (mr_micro_body,
 * mr_micro_taps_body), each an MR_KERNEL: inlined into its caller, the taps kernel ran
 * out of registers for A's row offsets in the caller's loops and spilled them (cnn b1
 * 1t, avx512: 2.23 -> 2.09 ms). */
#define MR_ROWS_SWITCH(n, F, ...)          \
    switch (n) {                           \
    case 1: F(1, __VA_ARGS__); break;      \
    case 2: F(2, __VA_ARGS__); break;      \
    MR_ROWS_CASES_TOP(F, __VA_ARGS__)      \
    }
/* mr_micro_body over the tile's whole width, or over its first half (half_), each
 * inlined. */
#define MR_MICRO_WIDTH(R, half_, ...)          \
    if (half_)                                 \
        mr_micro_body(R, 1, __VA_ARGS__);      \
    else                                       \
        mr_micro_body(R, 0, __VA_ARGS__)
MR_KERNEL void mr_sgemm_micro(int64_t rows, int64_t nr, int64_t kc, const float *restrict a, int64_t ars,
                              int64_t acs, const float *restrict b, int64_t bs, float *restrict out, int64_t out_rs,
                              int add, const float *pf, int64_t pf_rows)
{
    (void)acs;
    MR_ROWS_SWITCH(rows, MR_MICRO_WIDTH, nr <= MR_SGEMM_NR / 2, kc, a, ars, b, bs, out, out_rs, add, pf, pf_rows)
}
#undef MR_MICRO_WIDTH
MR_KERNEL void mr_sgemm_micro_taps(int64_t kc, const float *restrict a, int64_t ars, int64_t acs,
                                   const float *restrict base, const int64_t *off, float *restrict out,
                                   int64_t out_rs, int64_t mr, int64_t nr, int add)
{
    (void)acs;
    MR_ROWS_SWITCH(mr, mr_micro_taps_body, kc, a, ars, base, off, out, out_rs, nr, add)
}
#undef MR_ROWS_SWITCH
#undef MR_ROWS_CASES_TOP
#endif

/*
 * mr_sgemm_store: writes the top-left mr x nr part of the MR x NR tile t into C:
 *   overwrite != 0: C[i*c_rs + j*c_cs] = alpha * t[i*NR + j]            (C not read)
 *   overwrite == 0: C[i*c_rs + j*c_cs] = alpha * t[i*NR + j] + beta * C[...]
 */
static void mr_sgemm_store(const float *restrict t, int64_t mr, int64_t nr, float alpha,
                           float beta, int overwrite, float *restrict C, int64_t c_rs,
                           int64_t c_cs)
{
    int64_t i, j;
    for (i = 0; i < mr; ++i) {
        const float *ti = t + i * MR_SGEMM_NR;
        float *ci = C + i * c_rs;
        if (c_cs == 1) {
            if (overwrite) {
                for (j = 0; j < nr; ++j) ci[j] = alpha * ti[j];
            } else if (beta == 1.0f) {
                for (j = 0; j < nr; ++j) ci[j] = MR_MADD(alpha, ti[j], ci[j]);
            } else {
                for (j = 0; j < nr; ++j) ci[j] = MR_MADD(alpha, ti[j], beta * ci[j]);
            }
        } else {
            if (overwrite) {
                for (j = 0; j < nr; ++j) ci[j * c_cs] = alpha * ti[j];
            } else {
                for (j = 0; j < nr; ++j) ci[j * c_cs] = MR_MADD(alpha, ti[j], beta * ci[j * c_cs]);
            }
        }
    }
}

/*
 * mr_sgemm_driver: C = alpha * A * B + beta * C for an M x K matrix A (a), a K x N
 * matrix B described by src, and an M x N strided C; M, N, K >= 1. Loop nest (BLIS
 * order, the MC loop in mr_sgemm_driver): N in blocks of NC, K in blocks of KC (pack the
 * KC x NC block of B onto the stack, unless it is in panels), then the NR-wide
 * micro-panels of the B block and M in blocks of MR. An f32 A with a unit column stride
 * (or, for the kernels that read A by columns, a unit row stride) is read in place by
 * slivers of KC (mr_sliver_at; for a kernel that computes whole tiles a partial one is
 * packed, once per KC block) with B's
 * micro-panels outside; any other A (narrow, or no unit stride) is packed sliver by
 * sliver, with its slivers outside, so each is packed once per KC block.
 */

/* For the driver's prefetch: the in-place micro-panel it visits after the one at depth
 * pc and column j (the next NR columns of the column block [jc, jc + nc), else the next
 * depth block's first, else the next column block's first at depth k0), with its depth
 * in *kc; NULL (and *kc = 0) after the last. The block sums depths [k0, k1). */
static const float *mr_next_panel(const mr_bsrc *src, int64_t N, int64_t k0, int64_t k1, int64_t jc, int64_t nc,
                                  int64_t pc, int64_t j, int64_t *kc)
{
    j += MR_SGEMM_NR;
    if (j >= jc + nc) {
        j = jc;
        pc += MR_SGEMM_KC;
        if (pc >= k1) {
            pc = k0;
            j = jc + nc;
        }
    }
    *kc = j < N ? mr_min_i64(MR_SGEMM_KC, k1 - pc) : 0;
    return j < N ? mr_panel_at(src, pc, j) : NULL;
}

/* The packed product of the rows and depths [k0, k1) that fit MR_SGEMM_A_BYTES
 * (mr_sgemm_driver), added to C unless k0 == 0; the epilogue (at, given only with the
 * last depths) runs on each column panel once its last depth block is added. */
static void mr_sgemm_block(int64_t M, int64_t N, int64_t k0, int64_t k1, float alpha, const mr_asrc *a,
                           const mr_bsrc *src, float beta, float *C, int64_t c_rs, int64_t c_cs, const mr_epi_at *at)
{
    float bp[MR_SGEMM_KC * MR_SGEMM_NC];
    float ap[MR_SGEMM_MR * MR_SGEMM_KC];
    float tile[MR_SGEMM_MR * MR_SGEMM_NR];
    const int64_t slivers = mr_slivers(M);
    /* with a unit stride, an f32 A's slivers are read in place, except that a partial
     * last one (rows [tail, M)) is packed, once for every micro-panel of B, for a kernel
     * that computes whole tiles (not MR_MICRO_ROWS) */
    const int a_unit = a->type == MR_F32 && (a->cs == 1 || (!MR_A_ROWS && a->rs == 1));
    const int64_t tail = MR_MICRO_ROWS ? M : M - M % MR_SGEMM_MR;
    const float *A = (const float *)a->q + a->off; /* (f32 only) */
    int64_t jc, pc, outer, inner;
    for (jc = 0; jc < N; jc += MR_SGEMM_NC) {
        const int64_t nc = mr_min_i64(MR_SGEMM_NC, N - jc), npanels = (nc + MR_SGEMM_NR - 1) / MR_SGEMM_NR;
        for (pc = k0; pc < k1; pc += MR_SGEMM_KC) {
            const int64_t kc = mr_min_i64(MR_SGEMM_KC, k1 - pc);
            const int first = pc == 0;
            const float bet = first ? beta : 1.0f;
            const int overwrite = first && beta == 0.0f;
            const int in_place = mr_panels_in_place(src);
            int64_t tars = 1, tacs = MR_SGEMM_MR, pars = 1, pacs = MR_SGEMM_MR;
            if (!in_place) mr_sgemm_pack_b(src, pc, jc, kc, nc, bp);
            if (a_unit && tail < M) mr_sgemm_pack_a(a, tail, pc, M - tail, kc, ap, &tars, &tacs);
            /* A read in place: B's micro-panel outside, so it stays in L1 while every
             * sliver of A passes it (A's slivers stream from L2, 32 bytes a step where
             * B's panel would take 128: gpt_block's 128 x 768 x 2304 GEMM, 139 -> 158
             * GFLOP/s); A packed: its sliver outside, packed once */
            for (outer = 0; outer < (a_unit ? npanels : slivers); ++outer) {
              for (inner = 0; inner < (a_unit ? slivers : npanels); ++inner) {
                const int64_t jr = (a_unit ? outer : inner) * MR_SGEMM_NR;
                const int64_t sliver = a_unit ? inner : outer;
                const int64_t nr = mr_min_i64(MR_SGEMM_NR, nc - jr);
                int64_t mr;
                const int64_t ic = mr_sliver_at(M, sliver, &mr);
                /* B's micro-panel: packed, or in place in B's panels (which are
                 * zero-padded to whole panels, so a partial one reads zeros) */
                const float *pb = in_place ? mr_panel_at(src, pc, jc + jr) : bp + (jr / MR_SGEMM_NR) * kc * MR_SGEMM_NR;
                const int64_t bs = in_place ? MR_PANEL : MR_SGEMM_NR;
                /* in place, B comes from memory: the slivers share out the next
                 * micro-panel's rows to prefetch (per each) */
                int64_t next_kc = 0;
                const float *next = in_place ? mr_next_panel(src, N, k0, k1, jc, nc, pc, jc + jr, &next_kc) : NULL;
                const int64_t per = in_place ? (next_kc + slivers - 1) / slivers : 0;
                const int64_t pf0 = in_place ? sliver * per : 0;
                const float *pf = pf0 < next_kc ? next + pf0 * bs : NULL;
                const int64_t pf_rows = pf ? mr_min_i64(per, next_kc - pf0) : 0;
                const float *pa = ap;
                int64_t ars = tars, acs = tacs;
                float *cij = C + ic * c_rs + (jc + jr) * c_cs;
                if (a_unit && ic < tail) {
                    pa = A + ic * a->rs + pc * a->cs;
                    ars = a->rs;
                    acs = a->cs;
                } else if (!a_unit) {
                    if (jr == 0) mr_sgemm_pack_a(a, ic, pc, mr, kc, ap, &pars, &pacs);
                    ars = pars;
                    acs = pacs;
                }
                if ((MR_MICRO_ROWS || mr == MR_SGEMM_MR) && nr == MR_SGEMM_NR && c_cs == 1 && alpha == 1.0f &&
                    (overwrite || bet == 1.0f)) {
                    /* a whole tile of a row-major C (or the sliver's rows of it, with
                     * MR_MICRO_ROWS): written (or added to) directly, the same values as
                     * through the tile and mr_sgemm_store */
                    mr_sgemm_micro(mr, nr, kc, pa, ars, acs, pb, bs, cij, c_rs, !overwrite, pf, pf_rows);
                } else {
                    mr_sgemm_micro(mr, nr, kc, pa, ars, acs, pb, bs, tile, MR_SGEMM_NR, 0, pf, pf_rows);
                    mr_sgemm_store(tile, mr, nr, alpha, bet, overwrite, cij, c_rs, c_cs);
                }
              }
            }
        }
        mr_epi_call(at, 0, M, jc, jc + nc);
    }
}

/* Every column block passes over all of A's rows (mr_sgemm_block's loop nest), which
 * must stay in L2 to be read there: an A larger than three quarters of the core's L2
 * (MR_SGEMM_A_BYTES where fixed, or where cpuid does not say) goes as products of their
 * own, over chunks of depth (whole KC blocks: the same sums in the same order) or blocks
 * of rows that fit, whichever streams fewer bytes again: C once more a chunk, or B
 * (streaming from L3 with its prefetch) once more a block. Measured, 1 thread:
 *  - gpt_block's four GEMMs with 1024 rows, avx512: 123 -> 144 GFLOP/s with blocks of
 *    rows at 1 MiB (146 at 512 KiB, 141 at 2 MiB); with 128 rows, one block;
 *  - with 128 rows on a Zen 4 (1 MiB of L2), avx2 kernels: 93.2 GFLOP/s with 384 KiB,
 *    the fixed default before, 95.9 with the 768 KiB its L2 gives;
 *  - there, its 128 x 768 x 3072 product (1.5 MiB of A) as two chunks of depth rather
 *    than two blocks of rows: 90.9 -> 94.9 GFLOP/s (avx2), 90.8 -> 94.2 (avx512), best
 *    of 8 interleaved rounds. */
void mr_sgemm_driver(int64_t M, int64_t N, int64_t K, float alpha, const mr_asrc *a, const mr_bsrc *src,
                     float beta, float *C, int64_t c_rs, int64_t c_cs, const mr_epi_at *at)
{
    const int64_t l2 = MR_SGEMM_A_FIXED ? 0 : mr_l2_bytes();
    const int64_t budget = l2 > 0 ? l2 / 4 * 3 : MR_SGEMM_A_BYTES;
    const int64_t fit = mr_max_i64(budget / ((int64_t)sizeof(float) * K), 1);
    const int64_t kblocks = (K + MR_SGEMM_KC - 1) / MR_SGEMM_KC;
    const int64_t kfit = budget / ((int64_t)sizeof(float) * MR_SGEMM_KC * M);
    /* as few blocks as fit, of about equal rows (128 rows that fit 126 go as 66 and 62,
     * not as 126 and a 2-row block that streams B again for 2 rows), or of depth */
    const int64_t blocks = (M + fit - 1) / fit, rows = (M + blocks - 1) / blocks;
    const int64_t chunks = kfit >= 1 ? (kblocks + kfit - 1) / kfit : 0;
    int64_t mc = M, depth = K, i0, k0;
    /* each chunk after the first reads and writes C again, each block streams B again */
    if (blocks > 1 && chunks > 1 && (chunks - 1) * 2 * M <= (blocks - 1) * K) {
        depth = (kblocks + chunks - 1) / chunks * MR_SGEMM_KC;
    } else if (blocks > 1) {
        mc = (rows + MR_SGEMM_MR - 1) / MR_SGEMM_MR * MR_SGEMM_MR;
    }
    for (i0 = 0; i0 < M; i0 += mc) {
        mr_asrc block = *a;
        mr_epi_at sub, *subp = NULL;
        block.off += i0 * a->rs;
        if (at) {
            sub = *at;
            sub.i += i0;
            subp = &sub;
        }
        for (k0 = 0; k0 < K; k0 += depth) {
            const int64_t k1 = mr_min_i64(k0 + depth, K);
            mr_sgemm_block(mr_min_i64(mc, M - i0), N, k0, k1, alpha, &block, src, beta, C + i0 * c_rs, c_rs, c_cs,
                           k1 == K ? subp : NULL);
        }
    }
}

/*
 * mr_sgemm: C[i*c_rs + j*c_cs] = alpha * sum_k A[i*a_rs + k*a_cs] * B[k*b_rs + j*b_cs]
 *           + beta * C[i*c_rs + j*c_cs] for i < M, j < N (C not read when beta == 0;
 *           C = beta*C, or 0 when beta == 0, if K == 0). Blocked and packed; see the
 *           header for the full contract.
 */
#ifndef MR_SGEMV_MAX_M
#define MR_SGEMV_MAX_M 4
#endif
/* The same for narrow panels, which the blocked driver must widen into its packing
 * buffer where f32 panels are read in place: the GEMV, which widens in registers, stays
 * ahead up to 8 rows (gpt_block's 768 x 2304 matrix at M = 8, 1 thread, avx512: f16
 * 382 us blocked, 261 as GEMV; f32 panels 291-305; avx2: 620 and 419, f32 719-733). */
#ifndef MR_SGEMV_Q_MAX_M
#define MR_SGEMV_Q_MAX_M 8
#endif
#if MR_SGEMV_MAX_M > MR_SGEMV_Q_MAX_M
#error "MR_SGEMV_MAX_M > MR_SGEMV_Q_MAX_M: the GEMV's sums are sized by MR_SGEMV_Q_MAX_M"
#endif

/*
 * mr_sgemm_dots: C[i,j] = alpha * dot(A[i,:], B[:,j]) + beta * C[i,j] for rows A[i,:]
 * and columns B[:,j] that are contiguous (a_cs == 1, b_rs == 1). Sixteen partial sums
 * per dot product let the compiler vectorize the loop over k; they are added pairwise
 * at the end.
 */
static void mr_sgemm_dots(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs,
                          const float *B, int64_t b_cs, float beta, float *C, int64_t c_rs, int64_t c_cs)
{
    int64_t i, j, k, l;
    for (i = 0; i < M; ++i) {
        const float *a = A + i * a_rs;
        for (j = 0; j < N; ++j) {
            const float *b = B + j * b_cs;
            float part[16] = { 0 };
            float sum = 0.0f;
            float *c = C + i * c_rs + j * c_cs;
            for (k = 0; k + 16 <= K; k += 16) {
                for (l = 0; l < 16; ++l) {
                    part[l] += a[k + l] * b[k + l];
                }
            }
            for (; k < K; ++k) {
                part[k & 15] += a[k] * b[k];
            }
            for (l = 8; l > 0; l >>= 1) {
                for (k = 0; k < l; ++k) {
                    part[k] += part[k + l];
                }
            }
            sum = alpha * part[0];
            *c = beta == 0.0f ? sum : sum + beta * *c;
        }
    }
}

/*
 * mr_sgemm_axpy: C[i,:] = alpha * sum_k A[i,k] * B[k,:] + beta * C[i,:] for a row-major
 * B (b_cs == 1) and C (c_cs == 1): for each k, every row i adds A[i,k] times row k of B,
 * a contiguous loop the compiler vectorizes. C's rows stay in cache while B streams.
 */
static void mr_sgemm_axpy(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs,
                          int64_t a_cs, const float *B, int64_t b_rs, float beta, float *C, int64_t c_rs)
{
    int64_t i, j, k;
    for (i = 0; i < M; ++i) {
        float *restrict c = C + i * c_rs;
        for (j = 0; j < N; ++j) {
            c[j] = beta == 0.0f ? 0.0f : beta * c[j];
        }
    }
    for (k = 0; k < K; ++k) {
        const float *restrict b = B + k * b_rs;
        for (i = 0; i < M; ++i) {
            float *restrict c = C + i * c_rs;
            const float a = alpha * A[i * a_rs + k * a_cs];
            for (j = 0; j < N; ++j) {
                c[j] += a * b[j];
            }
        }
    }
}

/* mr_sgemm with an epilogue at `at` (NULL: none). */
void mr_sgemm_at(int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t a_rs, int64_t a_cs,
                 const float *B, int64_t b_rs, int64_t b_cs,
                 float beta, float *C, int64_t c_rs, int64_t c_cs, const mr_epi_at *at)
{
    mr_bsrc src;
    mr_asrc a;
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        int64_t i, j;
        for (i = 0; i < M; ++i) {
            for (j = 0; j < N; ++j) {
                float *c = C + i * c_rs + j * c_cs;
                *c = beta == 0.0f ? 0.0f : beta * *c;
            }
        }
        mr_epi_call(at, 0, M, 0, N);
        return;
    }
    /* A few rows against a B whose columns are contiguous (B = W^T, a Linear layer's
     * weight [N, K]): dot products read both operands in order and pack nothing, where
     * packing B would cost more than the product itself. */
    if (M <= MR_SGEMV_MAX_M && b_rs == 1 && a_cs == 1) {
        mr_sgemm_dots(M, N, K, alpha, A, a_rs, B, b_cs, beta, C, c_rs, c_cs);
        mr_epi_call(at, 0, M, 0, N);
        return;
    }
    /* A few rows against a row-major B (a weight stored transposed): rows of C as sums
     * of rows of B, reading B once and in order, again without packing. */
    if (M <= MR_SGEMV_MAX_M && b_cs == 1 && c_cs == 1) {
        mr_sgemm_axpy(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, beta, C, c_rs);
        mr_epi_call(at, 0, M, 0, N);
        return;
    }
    memset(&src, 0, sizeof src);
    src.kind = MR_BSRC_STRIDED;
    src.p = B;
    src.rs = b_rs;
    src.cs = b_cs;
    a = mr_asrc_f32(A, a_rs, a_cs);
    mr_sgemm_driver(M, N, K, alpha, &a, &src, beta, C, c_rs, c_cs, at);
}

void mr_sgemm(int64_t M, int64_t N, int64_t K, float alpha,
              const float *A, int64_t a_rs, int64_t a_cs,
              const float *B, int64_t b_rs, int64_t b_cs,
              float beta, float *C, int64_t c_rs, int64_t c_cs)
{
    mr_sgemm_at(M, N, K, alpha, A, a_rs, a_cs, B, b_rs, b_cs, beta, C, c_rs, c_cs, NULL);
}

#if defined(MR_VN)
/* Rows of A a vector kernel takes at once: their sums and B's row fill the registers
 * (AVX-512: 8 + 2 of 32; AVX2: 8 + 4 of 16; NEON: 16 + 8 of 32). */
#if defined(MR_AVX512)
#define MR_GEMV_Q_ROWS 4
#else
#define MR_GEMV_Q_ROWS 2
#endif
#define MR_QW (MR_PANEL / MR_VN) /* vectors per panel row */
#if defined(__GNUC__)
#define MR_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define MR_ALWAYS_INLINE inline
#endif

/*
 * mr_gemv_q_rows: mr_gemv_panel_q for R <= MR_GEMV_Q_ROWS rows and one type, both
 * constants where it is inlined (mr_gemv_panel_q instantiates each), so the R x
 * MR_PANEL sums stay in registers and the loop over k has no branch on the type.
 */
static MR_ALWAYS_INLINE void mr_gemv_q_rows(const int R, const int btype, int64_t K, const float *a, int64_t a_rs,
                                            int64_t a_cs, const mr_bsrc *src, int64_t e0, float *acc)
{
    const float *f = btype == MR_F32 ? src->p + e0 : NULL;
    const uint16_t *h = btype == MR_F16 || btype == MR_BF16 ? (const uint16_t *)src->q + e0 : NULL;
    const int8_t *q = btype == MR_Q8_0 ? (const int8_t *)((const unsigned char *)src->q + 4 * src->nb) + e0 : NULL;
    mr_vf c[MR_GEMV_Q_ROWS][MR_QW], b[MR_QW];
    int64_t k;
    int i, v;
    for (i = 0; i < R; ++i) {
        for (v = 0; v < MR_QW; ++v) c[i][v] = mr_vf_load(acc + i * MR_PANEL + v * MR_VN);
    }
    for (k = 0; k < K; ++k) {
        float s = 1.0f;
        if (btype == MR_F32) {
            for (v = 0; v < MR_QW; ++v) b[v] = mr_vf_load(f + k * MR_PANEL + v * MR_VN);
        } else if (btype == MR_F16) {
            for (v = 0; v < MR_QW; ++v) b[v] = mr_vf_f16(h + k * MR_PANEL + v * MR_VN);
        } else if (btype == MR_BF16) {
            for (v = 0; v < MR_QW; ++v) b[v] = mr_vf_bf16(h + k * MR_PANEL + v * MR_VN);
        } else {
            s = mr_q8_scale(src->q, e0 / MR_PANEL + k);
            for (v = 0; v < MR_QW; ++v) b[v] = mr_vf_q8(q + k * MR_PANEL + v * MR_VN);
        }
        for (i = 0; i < R; ++i) {
            const mr_vf x = mr_vf_set1(s * a[i * a_rs + k * a_cs]);
            for (v = 0; v < MR_QW; ++v) c[i][v] = mr_vf_fma(x, b[v], c[i][v]);
        }
    }
    for (i = 0; i < R; ++i) {
        for (v = 0; v < MR_QW; ++v) mr_vf_store(acc + i * MR_PANEL + v * MR_VN, c[i][v]);
    }
}
#endif

/*
 * mr_gemv_panel_q: acc[i][t] += sum_k A(i, k) * B(k, t) for i < M and the MR_PANEL
 * columns of the panel whose first stored element is element e0 of src's sequence
 * (whole panels: K rows of MR_PANEL), f32 or narrow. Each k-row is loaded (widened)
 * once for all M rows of A (a vector kernel's rows at a time); there a q8_0 row's scale
 * goes into A's element ((a * scale) * q), so the row itself only converts integers
 * (the portable loop reads f32 rows in place and widens eight narrow rows into a
 * buffer, scales included).
 */
static void mr_gemv_panel_q(int64_t M, int64_t K, const float *A, int64_t a_rs, int64_t a_cs, const mr_bsrc *src,
                            int64_t e0, float acc[MR_SGEMV_Q_MAX_M][MR_PANEL])
{
#if defined(MR_VN)
    int64_t i0;
    for (i0 = 0; i0 < M; i0 += MR_GEMV_Q_ROWS) {
        const int64_t r = mr_min_i64(MR_GEMV_Q_ROWS, M - i0);
        const float *a = A + i0 * a_rs;
        float *c = acc[i0];
#define MR_GEMV_Q_TYPE(R)                                                                          \
    if (src->btype == MR_F32) {                                                                    \
        mr_gemv_q_rows(R, MR_F32, K, a, a_rs, a_cs, src, e0, c);                                   \
    } else if (src->btype == MR_F16) {                                                             \
        mr_gemv_q_rows(R, MR_F16, K, a, a_rs, a_cs, src, e0, c);                                   \
    } else if (src->btype == MR_BF16) {                                                            \
        mr_gemv_q_rows(R, MR_BF16, K, a, a_rs, a_cs, src, e0, c);                                  \
    } else {                                                                                       \
        mr_gemv_q_rows(R, MR_Q8_0, K, a, a_rs, a_cs, src, e0, c);                                  \
    }
        if (r == 1) {
            MR_GEMV_Q_TYPE(1)
        } else if (r == 2) {
            MR_GEMV_Q_TYPE(2)
#if MR_GEMV_Q_ROWS > 2
        } else if (r == 3) {
            MR_GEMV_Q_TYPE(3)
        } else {
            MR_GEMV_Q_TYPE(4)
#endif
        }
#undef MR_GEMV_Q_TYPE
    }
#else
    /* portable: 8 k-rows at a time widened into a small buffer (1 KiB), then the
     * multiply-adds, loops the compiler vectorizes; q8_0's scale is in the rows */
    float buf[8][MR_PANEL];
    int64_t i, k0, k, t;
    for (k0 = 0; k0 < K; k0 += 8) {
        const int64_t kb = mr_min_i64(8, K - k0);
        const float(*rows)[MR_PANEL] = (const float(*)[MR_PANEL])buf;
        if (src->btype == MR_F32) {
            rows = (const float(*)[MR_PANEL])(src->p + e0 + k0 * MR_PANEL); /* read in place */
        } else {
            mr_dequant_rows(src->btype, src->q, src->nb, e0 + k0 * MR_PANEL, kb, MR_PANEL, buf[0]);
        }
        for (i = 0; i < M; ++i) {
            for (k = 0; k < kb; ++k) {
                const float ak = A[i * a_rs + (k0 + k) * a_cs];
                for (t = 0; t < MR_PANEL; ++t) acc[i][t] = MR_MADD(ak, rows[k][t], acc[i][t]);
            }
        }
    }
#endif
}

/*
 * mr_sgemm_panels_gemv: a few rows of A against B in panels, f32 or narrow (M at most
 * MR_SGEMV_MAX_M or MR_SGEMV_Q_MAX_M, src->j0 a multiple of MR_PANEL): every row's
 * MR_PANEL sums at once, in registers, so each panel streams past once (and is widened
 * once). The f32 panels go through the same vector kernel: left to the compiler, their
 * loop kept its sums in memory once mr_sgemm_panels_at grew (lenet b1 14.4 -> 16.7 us).
 */
static void mr_sgemm_panels_gemv(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs,
                                 int64_t a_cs, const mr_bsrc *src, float beta, float *C, int64_t c_rs,
                                 int64_t c_cs)
{
    int64_t j0, i, t;
    for (j0 = 0; j0 < N; j0 += MR_PANEL) {
        const int64_t nv = mr_min_i64(MR_PANEL, N - j0);
        float acc[MR_SGEMV_Q_MAX_M][MR_PANEL];
        for (i = 0; i < M; ++i) {
            for (t = 0; t < MR_PANEL; ++t) acc[i][t] = 0.0f;
        }
        mr_gemv_panel_q(M, K, A, a_rs, a_cs, src, MR_PANEL_INDEX(0, src->j0 + j0, K), acc);
        for (i = 0; i < M; ++i) {
            float *c = C + i * c_rs + j0 * c_cs;
            for (t = 0; t < nv; ++t) {
                c[t * c_cs] = beta == 0.0f ? alpha * acc[i][t] : MR_MADD(alpha, acc[i][t], beta * c[t * c_cs]);
            }
        }
    }
}

/* mr_sgemm_panels_q with an epilogue at `at` and A given by a; B's column j is column
 * j0 + j of the panels, of which there are `panels` in all (where a q8_0 B's int8
 * elements start). A narrow A goes through the blocked driver, which packs it. */
void mr_sgemm_panels_at(int64_t M, int64_t N, int64_t K, float alpha, const mr_asrc *a, const void *Bp, int btype,
                        int64_t panels, int64_t j0, float beta, float *C, int64_t c_rs, int64_t c_cs,
                        const mr_epi_at *at)
{
    const float *A = (const float *)a->q + a->off; /* (an f32 A) */
    mr_bsrc src;
    if (M <= 0 || N <= 0) return;
    memset(&src, 0, sizeof src);
    /* f32 panels are read in place; narrow ones are widened as they are read */
    src.kind = btype == MR_F32 ? MR_BSRC_PANELS : MR_BSRC_PANELS_Q;
    src.p = btype == MR_F32 ? (const float *)Bp : NULL;
    src.q = Bp;
    src.btype = btype;
    src.nb = panels * K;
    src.j0 = j0;
    src.depth = K;
    if (K <= 0) {
        mr_sgemm_at(M, N, 0, alpha, NULL, 0, 0, NULL, 0, 0, beta, C, c_rs, c_cs, at);
        return;
    }
    if (a->type == MR_F32 && M <= (btype == MR_F32 ? MR_SGEMV_MAX_M : MR_SGEMV_Q_MAX_M) && j0 % MR_PANEL == 0) {
        mr_sgemm_panels_gemv(M, N, K, alpha, A, a->rs, a->cs, &src, beta, C, c_rs, c_cs);
        mr_epi_call(at, 0, M, 0, N);
        return;
    }
    mr_sgemm_driver(M, N, K, alpha, a, &src, beta, C, c_rs, c_cs, at);
}

void mr_sgemm_panels_q(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t a_rs, int64_t a_cs,
                       const void *Bp, int btype, float beta, float *C, int64_t c_rs, int64_t c_cs)
{
    const mr_asrc a = mr_asrc_f32(A, a_rs, a_cs);
    mr_sgemm_panels_at(M, N, K, alpha, &a, Bp, btype, (N + MR_PANEL - 1) / MR_PANEL, 0, beta, C, c_rs, c_cs, NULL);
}

void mr_sgemm_panels(int64_t M, int64_t N, int64_t K, float alpha,
                     const float *A, int64_t a_rs, int64_t a_cs, const float *Bp,
                     float beta, float *C, int64_t c_rs, int64_t c_cs)
{
    mr_sgemm_panels_q(M, N, K, alpha, A, a_rs, a_cs, Bp, MR_F32, beta, C, c_rs, c_cs);
}
