/*
 * mr_conv.c -- mr_conv2d_f32: direct loops for few output channels, channels in vector
 * lanes for a few more on narrow images (mr_conv2d_lanes), else per image and group a
 * GEMM whose B is the input itself (pointwise), read in place (unpadded stride 1,
 * mr_conv2d_taps_gemm) or gathered while packing (implicit im2col).
 */
#include "mr_internal.h"

/* ------------------------------------------------------------------------------------ */
/* Convolution                                                                          */
/* ------------------------------------------------------------------------------------ */

/*
 * mr_conv2d_direct: the convolution of mr_conv2d_f32 for the output channels of one
 * image n, computed with direct loops: for each output channel o, y[n,o] is zeroed, then
 * for each (c, kh, kw) in row-major order the weight w[o,c,kh,kw] times the matching
 * input row segment is added to each output row (the inner loop runs over ow, contiguous
 * in y, and contiguous in x when stride_w == 1). Taps in the padding are skipped.
 * xn = x + n*C*H*W, yn = y + n*O*OH*OW. w is stored as wtype (nb q8_0 scales); a
 * narrow channel's weights are widened MR_SGEMM_KC at a time into a stack buffer (less
 * than the GEMM path's packing buffers, so the stack bound holds).
 */
static void mr_conv2d_direct(const float *xn, const void *w, int wtype, int64_t nb, float *yn, int64_t C,
                             int64_t H, int64_t W, int64_t O, int64_t KH, int64_t KW,
                             int64_t OH, int64_t OW, int64_t sh, int64_t sw, int64_t pt,
                             int64_t pl, int64_t dh, int64_t dw, int64_t groups)
{
    const int64_t Cg = C / groups, Og = O / groups, P = OH * OW, Kd = Cg * KH * KW;
    float wbuf[MR_SGEMM_KC];
    int64_t o, k0, k, oh;
    for (o = 0; o < O; ++o) {
        const int64_t g = o / Og;
        float *yo = yn + o * P;
        memset(yo, 0, sizeof(float) * (size_t)P);
        for (k0 = 0; k0 < Kd; k0 += MR_SGEMM_KC) {
            const int64_t kn = mr_min_i64(MR_SGEMM_KC, Kd - k0);
            /* depth row k0 + k is tap (kh, kw) of channel c, stepped along with k */
            int64_t c = k0 / (KH * KW), kh = k0 / KW % KH, kw = k0 % KW;
            const float *wk = (const float *)w + o * Kd + k0;
            if (wtype != MR_F32) {
                mr_dequant_run(wtype, w, nb, o * Kd + k0, kn, wbuf);
                wk = wbuf;
            }
            for (k = 0; k < kn; ++k) {
                const float *xc = xn + (g * Cg + c) * H * W;
                const float wv = wk[k];
                const int64_t woff = kw * dw - pl;
                int64_t lo, hi;
                mr_out_range(OW, sw, woff, W, &lo, &hi);
                for (oh = 0; lo < hi && oh < OH; ++oh) {
                    const int64_t ih = oh * sh + kh * dh - pt;
                    float *restrict yr;
                    const float *restrict xr;
                    int64_t t, cnt = hi - lo;
                    if (ih < 0 || ih >= H) continue;
                    /* xr[t*sw] is x[ih, (lo+t)*sw + woff], inside the row for t < cnt */
                    xr = xc + ih * W + lo * sw + woff;
                    yr = yo + oh * OW + lo;
                    if (sw == 1) {
                        for (t = 0; t < cnt; ++t) yr[t] = MR_MADD(wv, xr[t], yr[t]);
                    } else {
                        for (t = 0; t < cnt; ++t) yr[t] = MR_MADD(wv, xr[t * sw], yr[t]);
                    }
                }
                if (++kw == KW) {
                    kw = 0;
                    if (++kh == KH) {
                        kh = 0;
                        ++c;
                    }
                }
            }
        }
    }
}

/*
 * mr_conv2d_f32: y[n,o,oh,ow] = sum_{c<C/groups, kh, kw} w[o,c,kh,kw] *
 *   x[n, (o/(O/groups))*(C/groups) + c, oh*stride_h + kh*dil_h - pad_top,
 *     ow*stride_w + kw*dil_w - pad_left], zero outside the input; NCHW, contiguous.
 * Per (image, group): a GEMM y_g[Og, OH*OW] = w_g[Og, Cg*KH*KW] * im2col(x_g) whose B
 * panels are gathered from x while packing (no scratch), a plain strided GEMM for
 * unpadded stride-1 1x1 convolutions, or direct loops when Og < MR_CONV_DIRECT_OG.
 */
/* Whether mr_conv2d_at computes a convolution with direct loops (see mr_conv2d_f32). */
int mr_conv_direct(int64_t O, int64_t groups)
{
    return O / groups < MR_CONV_DIRECT_OG;
}

/*
 * Stride-1 convolutions with no padding (the compiler pads the input first) as a GEMM
 * that reads B in place: output position (oh, ow) reads x[c, oh + kh*dh, ow + kw*dw],
 * which is x + q + off(k) for the "wide" column q = oh*W + ow and the depth row
 * k = (c*KH + kh)*KW + kw at off(k) = c*H*W + kh*dh*W + kw*dw. So each depth row of a
 * 32-column panel is 32 consecutive floats of x: no im2col copy. Wide columns with
 * ow >= OW are computed and dropped at the store (KW - 1 of every W columns).
 */
static int mr_conv_taps(int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t sh,
                        int64_t sw, int64_t pt, int64_t pl, int64_t dh, int64_t dw)
{
    /* pt == pl == 0 with these sizes also means no bottom or right padding */
    return sh == 1 && sw == 1 && pt == 0 && pl == 0 && OH + (KH - 1) * dh <= H && OW + (KW - 1) * dw <= W;
}

/* The wide column of output position p, and the first output position at or after wide column q. */
static int64_t mr_wide(int64_t p, int64_t W, int64_t OW) { return p / OW * W + p % OW; }
static int64_t mr_compact(int64_t q, int64_t W, int64_t OW) { return q / W * OW + mr_min_i64(q % W, OW); }

/* bp[r*NR + t] = base[off[r] + t] for r < kc, t < nr; zero for t in [nr, NR). */
static void mr_gather_rows(const float *base, const int64_t *off, int64_t kc, int64_t nr, float *bp)
{
    int64_t r, t;
    for (r = 0; r < kc; ++r) {
        for (t = 0; t < MR_SGEMM_NR; ++t) bp[r * MR_SGEMM_NR + t] = t < nr ? base[off[r] + t] : 0.0f;
    }
}

/* Rows [0, mr) of the tile (wide columns [q, q + nr)) into y's output positions, row i
 * at y + i*P, dropping the columns with ow >= OW; added to y when `add`. */
static void mr_store_wide(const float *tile, int64_t mr, int64_t q, int64_t nr, int64_t W, int64_t OW,
                          float *y, int64_t P, int add)
{
    int64_t j = 0, i, t;
    while (j < nr) {
        const int64_t ow = (q + j) % W, run = mr_min_i64(nr - j, W - ow);
        if (ow < OW) {
            const int64_t n = mr_min_i64(run, OW - ow), p = (q + j) / W * OW + ow;
            for (i = 0; i < mr; ++i) {
                const float *restrict src = tile + i * MR_SGEMM_NR + j;
                float *restrict dst = y + i * P + p;
#ifdef MR_AVX512
                /* runs of a few floats (an output row of a small image): masked, where
                 * memcpy's call took 5% of lenet b32 */
                for (t = 0; t < n; t += 16) {
                    const __mmask16 m = (__mmask16)mr_lanes(0, n - t);
                    __m512 v = _mm512_maskz_loadu_ps(m, src + t);
                    if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, dst + t));
                    _mm512_mask_storeu_ps(dst + t, m, v);
                }
#else
                if (add) {
                    for (t = 0; t < n; ++t) dst[t] += src[t];
                } else {
                    memcpy(dst, src, sizeof(float) * (size_t)n);
                }
#endif
            }
        }
        j += run;
    }
}

/* off[r] for r < kc: where depth row pc + r (channel c, tap (kh, kw)) reads x, relative
 * to the output position's wide column. */
static void mr_taps_offsets(int64_t pc, int64_t kc, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t dh,
                            int64_t dw, int64_t *off)
{
    int64_t c = pc / (KH * KW), kh = pc / KW % KH, kw = pc % KW, r;
    for (r = 0; r < kc; ++r) {
        off[r] = c * H * W + kh * dh * W + kw * dw;
        if (++kw == KW) {
            kw = 0;
            if (++kh == KH) {
                kh = 0;
                ++c;
            }
        }
    }
}

/*
 * mr_conv2d_taps_gemm: output positions [p0, p1) of one image and group (see
 * mr_conv_taps): y[o*P + p] = sum_k w(o, k) * x[off(k) + wide(p)] for o < Og (w: the
 * group's [Og, Kd] weights; f32 read in place by full slivers, else packed),
 * summed in blocks of MR_SGEMM_KC as mr_sgemm does, with the epilogue on each block of
 * positions once final.
 *
 * A panel is up to 32 wide columns from a position's. When a row's valid columns fill
 * its panels no worse than the wide grid does (32 * ceil(OW / 32) <= W, e.g. OW = 32,
 * W = 34), panels start at row starts and so never span two rows ("row mode": each
 * tile is stored straight from registers); otherwise they run on across rows, and a
 * tile that spans two rows is stored through mr_store_wide.
 */
static void mr_conv2d_taps_gemm(const float *x, const mr_asrc *w, float *y, int64_t Cg, int64_t H, int64_t W,
                                int64_t Og, int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t dh,
                                int64_t dw, int64_t p0, int64_t p1, mr_epi_at *at)
{
    const int64_t NR = MR_SGEMM_NR, Kd = Cg * KH * KW, P = OH * OW, span = (OW + NR - 1) / NR * NR;
    const int row_mode = span <= W;
    float bp[MR_SGEMM_KC * MR_SGEMM_NR];
    float ap[MR_SGEMM_MR * MR_SGEMM_KC];
    float tile[MR_SGEMM_MR * MR_SGEMM_NR];
    int64_t off[MR_SGEMM_KC];
    int64_t b0, b1, pc, sliver, p, pn, off_pc = -1; /* off holds depth block off_pc's offsets */
#ifdef MR_MICRO_TAPS
    /* the end of the image's wide columns: a panel that ends by it reads inside x */
    const int64_t qmax = mr_wide(P - 1, W, OW) + 1;
#endif
    at->j = 0;
    /* blocks of positions (whole rows in row mode) of about MR_SGEMM_NC columns */
    for (b0 = p0; b0 < p1; b0 = b1) {
        const int64_t rows = mr_max_i64(1, MR_SGEMM_NC / span);
        int64_t qend; /* the block's end */
        b1 = mr_min_i64(p1, row_mode ? (b0 / OW + rows) * OW : mr_compact(mr_wide(b0, W, OW) + MR_SGEMM_NC, W, OW));
        qend = mr_wide(b1 - 1, W, OW) + 1;
        for (pc = 0; pc < Kd; pc += MR_SGEMM_KC) {
            const int64_t kc = mr_min_i64(MR_SGEMM_KC, Kd - pc);
            if (pc != off_pc) {
                /* once per call when the depth is one block (lenet b32: 8% of its time when
                 * every block of positions recomputed it) */
                mr_taps_offsets(pc, kc, H, W, KH, KW, dh, dw, off);
                off_pc = pc;
            }
            for (sliver = 0; sliver < mr_slivers(Og); ++sliver) {
                int64_t mr;
                const int64_t ic = mr_sliver_at(Og, sliver, &mr);
                const float *pa = (const float *)w->q + w->off + ic * Kd + pc;
                int64_t ars = Kd, acs = 1;
                if ((!MR_MICRO_ROWS && mr < MR_SGEMM_MR) || w->type != MR_F32) {
                    mr_sgemm_pack_a(w, ic, pc, mr, kc, ap, &ars, &acs);
                    pa = ap;
                }
                for (p = b0; p < b1; p = pn) {
                    const int64_t q = mr_wide(p, W, OW), ow = p % OW;
                    int64_t nq = mr_min_i64(NR, qend - q); /* wide columns stored */
                    if (row_mode) nq = mr_min_i64(nq, OW - ow);
                    pn = mr_compact(q + nq, W, OW);
#ifdef MR_MICRO_TAPS
                    if (q + NR <= qmax && ow + nq <= OW) {
                        /* one run of y: stored from registers */
                        mr_sgemm_micro_taps(kc, pa, ars, acs, x + q, off, y + ic * P + p, P, mr, nq, pc > 0);
                        continue;
                    }
                    if (qmax >= NR) {
                        /* A panel past qmax is moved back to end there; its first
                         * columns (stored by the previous panel, or not ours) are dropped. */
                        const int64_t qs = mr_min_i64(q, qmax - NR);
                        mr_sgemm_micro_taps(kc, pa, ars, acs, x + qs, off, tile, NR, mr, NR, 0);
                        mr_store_wide(tile + (q - qs), mr, q, nq, W, OW, y + ic * P, P, pc > 0);
                        continue;
                    }
#endif
                    mr_gather_rows(x + q, off, kc, nq, bp);
                    mr_sgemm_micro(mr, NR, kc, pa, ars, acs, bp, NR, tile, NR, 0, NULL, 0);
                    mr_store_wide(tile, mr, q, nq, W, OW, y + ic * P, P, pc > 0);
                }
            }
        }
        mr_epi_call(at, 0, Og, b0, b1);
    }
}

#if defined(MR_AVX512) || defined(MR_AVX2) || defined(MR_NEON)
/*
 * Few output channels on a narrow image, with B read in place as in mr_conv2d_taps_gemm
 * (stride 1, no padding), but with a position's output channels in vector lanes: a tile
 * is up to MR_LANES_R positions of one output row by MR_LANES channels (zero past Og),
 * and step k adds w(., k) (one vector, or two with AVX2, four with NEON) times x[off(k)
 * + q + i] (a broadcast) to position i's. The taps GEMM's tiles are 32 (AVX2: 16) wide
 * columns, which on a narrow image are mostly the wide grid's gaps and a part tile:
 * lenet's second convolution (16 channels, 10 x 10 positions, rows 14 wide) fills 100
 * of its 160 columns a channel, where here every lane is an output. lenet b32, one
 * thread on a Zen 4: 410 -> 337 us with the avx512 kernels, 448 -> 375 with avx2.
 */
#define MR_LANES 16
#define MR_LANES_V (MR_LANES / MR_VN)
#if defined(MR_AVX512)
#define MR_LANES_R 14 /* 14 accumulators, the weights' vector and a broadcast */
#else
#define MR_LANES_R 6 /* AVX2: 12 of 16 registers, 2 for the weights; NEON: 24 of 32, 4 */
#endif

/* Whether the convolution goes to mr_conv2d_lanes: Og whole vectors of at most
 * MR_LANES, a depth that one pass of wt holds, and taps tiles that would be under three
 * quarters full (of their ceil(qmax / NR) tiles a channel, P of the columns used). */
static int mr_conv_lanes(int64_t Og, int64_t Kd, int64_t W, int64_t OH, int64_t OW, int64_t groups)
{
    const int64_t qmax = (OH - 1) * W + OW, tiles = (qmax + MR_SGEMM_NR - 1) / MR_SGEMM_NR;
    return groups == 1 && Og <= MR_LANES && Og % MR_VN == 0 && Kd > 0 && Kd <= MR_SGEMM_KC &&
           4 * OH * OW < 3 * tiles * MR_SGEMM_NR;
}

/* t[i*MR_LANES + o] = sum_k wt[k*MR_LANES + o] * xq[off[k] + i] for i < n, in k's
 * order (one fused multiply-add a step); n a constant where it is inlined. */
MR_BODY void mr_lanes_body(const int n, int64_t kd, const float *restrict wt, const float *restrict xq,
                           const int64_t *restrict off, float *restrict t)
{
    mr_vf acc[MR_LANES_R][MR_LANES_V];
    int i, v;
    int64_t k;
    for (i = 0; i < n; ++i)
        for (v = 0; v < MR_LANES_V; ++v) acc[i][v] = mr_vf_set1(0.0f);
    for (k = 0; k < kd; ++k) {
        const float *restrict xr = xq + off[k];
        mr_vf b[MR_LANES_V];
        for (v = 0; v < MR_LANES_V; ++v) b[v] = mr_vf_load(wt + k * MR_LANES + v * MR_VN);
        for (i = 0; i < n; ++i) {
            const mr_vf a = mr_vf_set1(xr[i]);
            for (v = 0; v < MR_LANES_V; ++v) acc[i][v] = mr_vf_fma(a, b[v], acc[i][v]);
        }
    }
    for (i = 0; i < n; ++i)
        for (v = 0; v < MR_LANES_V; ++v) mr_vf_store(t + i * MR_LANES + v * MR_VN, acc[i][v]);
}

/* mr_lanes_body for n positions, 1 <= n <= MR_LANES_R, each count a body of its own
 * (the accumulators stay in registers only for a constant n) */
static MR_KERNEL void mr_lanes_tile(int64_t n, int64_t kd, const float *wt, const float *xq, const int64_t *off,
                                    float *t)
{
    switch (n) {
#define MR_LANES_CASE(c) \
    case c: mr_lanes_body(c, kd, wt, xq, off, t); break;
        MR_LANES_CASE(1) MR_LANES_CASE(2) MR_LANES_CASE(3) MR_LANES_CASE(4) MR_LANES_CASE(5)
#if MR_LANES_R > 6
        MR_LANES_CASE(6) MR_LANES_CASE(7) MR_LANES_CASE(8) MR_LANES_CASE(9) MR_LANES_CASE(10)
        MR_LANES_CASE(11) MR_LANES_CASE(12) MR_LANES_CASE(13)
#endif
#undef MR_LANES_CASE
    default: mr_lanes_body(MR_LANES_R, kd, wt, xq, off, t); break;
    }
}

/* wt[k*MR_LANES + o] = w(o, k) for k < Kd, o < Og (widened), zero for o in [Og, MR_LANES) */
static void mr_lanes_weights(const mr_asrc *w, int64_t Og, int64_t Kd, float *wt)
{
    float row[MR_SGEMM_KC];
    int64_t o, k;
    memset(wt, 0, sizeof(float) * (size_t)(Kd * MR_LANES));
    for (o = 0; o < Og; ++o) {
        const float *wo = (const float *)w->q + w->off + o * Kd;
        if (w->type != MR_F32) {
            mr_dequant_run(w->type, w->q, w->nb, w->off + o * Kd, Kd, row);
            wo = row;
        }
        for (k = 0; k < Kd; ++k) wt[k * MR_LANES + o] = wo[k];
    }
}

/* mr_conv2d_at for mr_conv_lanes's convolutions (groups == 1, w stored as wtype): its
 * weights laid out once (mr_lanes_weights, in this frame, so the GEMM paths' stack bound
 * holds), then each image's output positions [p0, p1) by rows, the epilogue on every
 * block of about MR_SGEMM_NC positions. */
static void mr_conv2d_lanes(const float *x, const void *w, int wtype, int64_t nb, float *y, int64_t N,
                            int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH, int64_t KW, int64_t OH,
                            int64_t OW, int64_t dh, int64_t dw, const mr_epilogue *ep, int64_t n0, int64_t p0,
                            int64_t p1)
{
    const int64_t P = OH * OW, Kd = C * KH * KW;
    float wt[MR_SGEMM_KC * MR_LANES];
    float t[MR_LANES_R * MR_LANES];
    int64_t off[MR_SGEMM_KC];
    mr_asrc wa;
    int64_t n;
    wa.q = w;
    wa.type = wtype;
    wa.nb = nb;
    wa.off = 0;
    mr_lanes_weights(&wa, O, Kd, wt);
    mr_taps_offsets(0, Kd, H, W, KH, KW, dh, dw, off);
    for (n = 0; n < N; ++n) {
        const float *xn = x + n * C * H * W;
        float *yn = y + n * O * P;
        int64_t p = p0, e0 = p0;
        mr_epi_at at;
        at.ep = ep;
        at.n = (ep ? ep->n : 0) + n0 + n;
        at.i = 0;
        at.j = 0;
        while (p < p1) {
            /* the rest of p's output row, in tiles of about equal width */
            const int64_t end = mr_min_i64(p1, (p / OW + 1) * OW), tiles = (end - p + MR_LANES_R - 1) / MR_LANES_R;
            int64_t tile;
            for (tile = 0; tile < tiles; ++tile) {
                const int64_t cnt = (end - p + tiles - tile - 1) / (tiles - tile);
                int64_t o, i;
                mr_lanes_tile(cnt, Kd, wt, xn + mr_wide(p, W, OW), off, t);
                for (o = 0; o < O; ++o) {
                    float *restrict yo = yn + o * P + p;
                    for (i = 0; i < cnt; ++i) yo[i] = t[i * MR_LANES + o];
                }
                p += cnt;
            }
            if (p - e0 >= MR_SGEMM_NC || p == p1) {
                mr_epi_call(&at, 0, O, e0, p);
                e0 = p;
            }
        }
    }
}
#endif

/* mr_conv2d_f32 with w stored as wtype and an epilogue, for output positions [p0, p1)
 * only (all of them on the direct path); image n of y is the epilogue's image n0 + n. */
void mr_conv2d_at(const float *x, const void *w, int wtype, float *y,
                  int64_t N, int64_t C, int64_t H, int64_t W,
                  int64_t O, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                  int64_t stride_h, int64_t stride_w,
                  int64_t pad_top, int64_t pad_left,
                  int64_t dil_h, int64_t dil_w, int64_t groups,
                  const mr_epilogue *ep, int64_t n0, int64_t p0, int64_t p1)
{
    const int64_t Cg = C / groups, Og = O / groups, P = OH * OW, Kd = Cg * KH * KW;
    const int64_t nb = (O * Kd + 31) / 32; /* the weights' q8_0 scales */
    int64_t n, g;
    if (N <= 0 || O <= 0 || P <= 0 || p1 <= p0) return;
#if defined(MR_AVX512) || defined(MR_AVX2) || defined(MR_NEON)
    if (mr_conv_taps(H, W, KH, KW, OH, OW, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w) &&
        mr_conv_lanes(Og, Kd, W, OH, OW, groups) && !mr_conv_direct(O, groups)) {
        mr_conv2d_lanes(x, w, wtype, nb, y, N, C, H, W, O, KH, KW, OH, OW, dil_h, dil_w, ep, n0, p0, p1);
        return;
    }
#endif
    for (n = 0; n < N; ++n) {
        const float *xn = x + n * C * H * W;
        float *yn = y + n * O * P;
        mr_epi_at at;
        at.ep = ep;
        at.n = (ep ? ep->n : 0) + n0 + n;
        at.i = 0;
        at.j = 0;
        if (Kd <= 0) {
            int64_t o;
            for (o = 0; o < O; ++o) memset(yn + o * P + p0, 0, sizeof(float) * (size_t)(p1 - p0));
            mr_epi_call(&at, 0, O, p0, p1);
            continue;
        }
        if (mr_conv_direct(O, groups)) {
            mr_conv2d_direct(xn, w, wtype, nb, yn, C, H, W, O, KH, KW, OH, OW, stride_h, stride_w,
                             pad_top, pad_left, dil_h, dil_w, groups);
            mr_epi_call(&at, 0, O, 0, P);
            continue;
        }
        for (g = 0; g < groups; ++g) {
            mr_bsrc src;
            const float *xg = xn + g * Cg * H * W;
            float *yg = yn + g * Og * P;
            mr_asrc wg;
            wg.q = w;
            wg.type = wtype;
            wg.nb = nb;
            wg.off = g * Og * Kd;
            wg.rs = Kd;
            wg.cs = 1;
            at.i = g * Og;
            at.j = p0;
            memset(&src, 0, sizeof src);
            if (KH == 1 && KW == 1 && pad_top == 0 && pad_left == 0 && stride_h == 1 &&
                stride_w == 1 && OW == W && OH <= H) {
                /* pointwise: im2col(x_g) is x_g itself viewed as [Cg, H*W] */
                src.kind = MR_BSRC_STRIDED;
                src.p = xg + p0;
                src.rs = H * W;
                src.cs = 1;
            } else if (mr_conv_taps(H, W, KH, KW, OH, OW, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w)) {
                mr_conv2d_taps_gemm(xg, &wg, yg, Cg, H, W, Og, KH, KW, OH, OW, dil_h, dil_w, p0, p1, &at);
                continue;
            } else {
                src.kind = MR_BSRC_IM2COL;
                src.p = xg;
                src.j0 = p0;
                src.H = H;
                src.W = W;
                src.KH = KH;
                src.KW = KW;
                src.OW = OW;
                src.sh = stride_h;
                src.sw = stride_w;
                src.pt = pad_top;
                src.pl = pad_left;
                src.dh = dil_h;
                src.dw = dil_w;
            }
            mr_sgemm_driver(Og, p1 - p0, Kd, 1.0f, &wg, &src, 0.0f, yg + p0, P, 1, &at);
        }
    }
}

void mr_conv2d_f32(const float *x, const float *w, float *y,
                   int64_t N, int64_t C, int64_t H, int64_t W,
                   int64_t O, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                   int64_t stride_h, int64_t stride_w,
                   int64_t pad_top, int64_t pad_left,
                   int64_t dil_h, int64_t dil_w, int64_t groups)
{
    mr_conv2d_at(x, w, MR_F32, y, N, C, H, W, O, KH, KW, OH, OW, stride_h, stride_w, pad_top, pad_left, dil_h,
                 dil_w, groups, NULL, 0, 0, OH * OW);
}
