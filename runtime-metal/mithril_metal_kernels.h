/* mithril_metal_kernels.h -- the Metal target's kernel library (Metal Shading Language).
 *
 * Included by each generated <name>.metal after <metal_stdlib> and mithril_ops.h. These
 * are not kernels but functions that a generated `kernel` calls with EVERY thread of its
 * threadgroup, in a 1-D dispatch of `groups` threadgroups of MR_METAL_THREADS threads
 * (mithril_metal_shapes.h has the host's launch macros). Each function grid-strides over
 * its work units, so any number of threadgroups >= 1 is correct.
 *
 *   mr_sgemm    f32 (batched, strided) matrix product with a fused epilogue: a 64x64x16
 *               threadgroup-memory tile, 4x4 outputs a thread; GEMV paths for m <= 4.
 *               MR_BF16 / MR_F16 round the operands when staging them and multiply on
 *               simdgroup_matrix.
 *   mr_conv2d   NCHW convolution as an implicit GEMM on the same tile (im2col while
 *               loading), the 1x1 case as a batched mr_sgemm, a direct loop for <= 4
 *               output channels a group (depthwise).
 *   mr_pool2d   max / average pooling, runtime-c's semantics.
 *   mr_softmax  softmax along the middle axis of [outer, n, inner], runtime-c's semantics.
 *   mr_sgd      the SGD (momentum) update.
 *
 * The code stays inside what the CPU emulation (metal_emu.h: MSL compiled as C++17)
 * models: no threadgroup arrays in functions (all threadgroup memory comes from the
 * kernel's `tg` argument), no vector or packed types, textures, atomics or function
 * constants; C++14 only (no `if constexpr`, lambdas, inheritance).
 *
 * NaN semantics (max propagation, softmax rows) test x != x, so the library must be
 * compiled without fast math (MTLCompileOptions.mathMode = safe / -fno-fast-math), as
 * mithril_ops.h also needs.
 */
#ifndef MITHRIL_METAL_KERNELS_H
#define MITHRIL_METAL_KERNELS_H

#include "mithril_metal_shapes.h"
#include "mithril_ops.h"

/* The precision of a product's operands (the values of mithril_cuda.h's mr_precision). */
enum { MR_F32 = 0, MR_BF16 = 2, MR_F16 = 3 };

/* The epilogue that does nothing. */
struct mr_no_epilogue {
    void operator()(long, long, long) const {}
};

/* Batch dimensions of a batched matrix product (up to 4), row-major over ext; a, b, c
 * are each operand's element stride per batch dimension (0 = broadcast). rank 0: one
 * product. */
struct mr_batch {
    int rank;
    long ext[MR_METAL_MAX_BATCH];
    long a[MR_METAL_MAX_BATCH], b[MR_METAL_MAX_BATCH], c[MR_METAL_MAX_BATCH];
};

#define MR_MTL_FN static inline

/* 1: MR_BF16 / MR_F16 tiles multiply on simdgroup_matrix (Apple7 / M1 and later); 0: on the
 * scalar FMA loop with the same rounded operands (GPUs without simdgroup_matrix). */
#ifndef MR_METAL_SIMDGROUP_MATRIX
#define MR_METAL_SIMDGROUP_MATRIX 1
#endif
#define MR_MTL_TG_BARRIER() metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup)

/* ------------------------------------------------------------------------------------ */
/* Helpers                                                                              */
/* ------------------------------------------------------------------------------------ */

/* runtime-c's running max: v wins if larger or NaN, so NaN propagates. */
MR_MTL_FN float mr_mtl_max_nan(float m, float v) { return (v > m || v != v) ? v : m; }


/* x rounded to the operand format p, kept in a float (exactly representable there):
 * MR_BF16 1+8+7 bits, MR_F16 1+5+10 bits (above 65504 rounding to inf, subnormal below
 * 2^-14, 0 below 2^-25), both round to nearest even; NaN stays NaN; MR_F32 unchanged.
 * Done on the bits, not through half/bfloat, so that the rounding is the same on every
 * GPU and under the CPU emulation. A product of two such values is exact in f32. */
MR_MTL_FN float mr_mtl_round(int p, float x)
{
    if (p != MR_BF16 && p != MR_F16) return x;
    if (x != x) return x;
    if (p == MR_BF16) {
        uint u = metal::as_type<uint>(x);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        return metal::as_type<float>(u);
    }
    const float ax = metal::fabs(x);
    if (ax >= 65520.0f) return x > 0.0f ? INFINITY : -INFINITY;
    /* half's subnormal range: multiples of 2^-24, rint rounds to nearest even */
    if (ax < 6.103515625e-05f) return metal::rint(x * 16777216.0f) * 5.9604644775390625e-08f;
    uint u = metal::as_type<uint>(x);
    u = (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u;
    return metal::as_type<float>(u);
}

/* The number of products of a batch (1 for rank 0). */
MR_MTL_FN long mr_mtl_batch_count(thread const mr_batch &bt)
{
    long nb = 1;
    for (int d = 0; d < MR_METAL_MAX_BATCH; ++d)
        if (d < bt.rank) nb *= bt.ext[d];
    return nb;
}

/* Element offsets of flat batch index nb in A, B and C. */
MR_MTL_FN void mr_mtl_batch_offsets(thread const mr_batch &bt, long nb, thread long &oa, thread long &ob,
                                    thread long &oc)
{
    oa = ob = oc = 0;
    for (int d = MR_METAL_MAX_BATCH - 1; d >= 0; --d) {
        if (d < bt.rank) {
            const long i = nb % bt.ext[d];
            nb /= bt.ext[d];
            oa += i * bt.a[d];
            ob += i * bt.b[d];
            oc += i * bt.c[d];
        }
    }
}

MR_MTL_FN long mr_mtl_abs(long v) { return v < 0 ? -v : v; }

/* Whether an operand's tile loads run along K (consecutive threads on consecutive k):
 * along its unit stride if it has one, else along the smaller stride, so that a
 * simdgroup's loads hit as few cache lines as possible. */
MR_MTL_FN bool mr_mtl_along_k(long sx, long sk)
{
    if (sk == 1) return true;
    if (sx == 1) return false;
    return mr_mtl_abs(sk) <= mr_mtl_abs(sx);
}

/* ------------------------------------------------------------------------------------ */
/* The tiled main loop (GEMM and implicit-GEMM convolution)                             */
/* ------------------------------------------------------------------------------------ */

/* A thread's accumulators: rows ty + 16 i, columns tx + 16 j of the tile (tx = lid % 16,
 * ty = lid / 16). Strided rather than 4 consecutive, so that a simdgroup's reads of the
 * B tile are 16 consecutive floats (no bank conflicts) and its stores of C 16
 * consecutive columns. */
struct mr_mtl_acc {
    float v[MR_METAL_GEMM_TM][MR_METAL_GEMM_TN];
};

/* Where element e (0..3) of thread lid goes in a K-major tile, kk * LD + x: the tile's
 * element idx = lid + 256 e, taken along k (kk = idx % 16) when along_k, else along x,
 * so that consecutive threads read consecutive addresses of the unit-stride direction. */
MR_MTL_FN uint mr_mtl_ld_slot(uint lid, int e, bool along_k)
{
    const uint idx = lid + MR_METAL_THREADS * (uint)e;
    const uint kk = along_k ? idx % MR_METAL_GEMM_BK : idx / MR_METAL_GEMM_BM;
    const uint x = along_k ? idx / MR_METAL_GEMM_BK : idx % MR_METAL_GEMM_BM;
    return kk * MR_METAL_GEMM_LD + x;
}

/* Loads a BK x 64 tile of a strided operand, element (x, k) at p[x*sx + k*sk], x < nx,
 * k < nk, zero outside: 1024 elements, 4 a thread (mr_mtl_ld_slot), staged in registers
 * so that the global loads of the next K tile are in flight while the current one is
 * multiplied; stored K-major, rounded to the precision P. A thread's (x, kk) are the same
 * in every K tile, so its offsets are worked out once (mr_mtl_ld_strided_make) and a tile
 * costs one 64-bit multiply. */
struct mr_mtl_ld_strided {
    device const float *p;
    long sk, nk;
    bool along_k;
    long off[4]; /* x*sx + kk*sk, or -1 for x >= nx */
    long kk[4];
    float r[4];

    void load(long k0, uint)
    {
        const long base = k0 * sk;
        for (int e = 0; e < 4; ++e) r[e] = (off[e] >= 0 && k0 + kk[e] < nk) ? p[base + off[e]] : 0.0f;
    }

    void store(int prec, threadgroup float *s, uint lid) const
    {
        for (int e = 0; e < 4; ++e) s[mr_mtl_ld_slot(lid, e, along_k)] = mr_mtl_round(prec, r[e]);
    }
};

MR_MTL_FN mr_mtl_ld_strided mr_mtl_ld_strided_make(device const float *p, long sx, long sk, long nx, long nk,
                                                   uint lid)
{
    mr_mtl_ld_strided l;
    l.p = p;
    l.sk = sk;
    l.nk = nk;
    l.along_k = mr_mtl_along_k(sx, sk);
    for (int e = 0; e < 4; ++e) {
        const uint idx = lid + MR_METAL_THREADS * (uint)e;
        const long kk = l.along_k ? (long)(idx % MR_METAL_GEMM_BK) : (long)(idx / MR_METAL_GEMM_BM);
        const long x = l.along_k ? (long)(idx / MR_METAL_GEMM_BK) : (long)(idx % MR_METAL_GEMM_BM);
        l.kk[e] = kk;
        l.off[e] = x < nx ? x * sx + kk * sk : -1;
        l.r[e] = 0.0f;
    }
    return l;
}

/* The implicit GEMM's B tile: row kk = (ic*kh + ky)*kw + kx of the group's im2col matrix,
 * column (b*oh + y)*ow + x. Each thread owns one column (lid % 64) and 4 consecutive rows
 * (lid / 64 * 4 ..): the column's image, y*sh - ph and x*sw - pw are worked out once a
 * tile position, and each K tile decodes the first row once (two 32-bit divisions) and
 * steps (ic, ky, kx) on, so an element costs one bounds test. A simdgroup reads 32
 * consecutive output positions of one tap: coalesced for stride 1. */
struct mr_mtl_ld_im2col {
    device const float *xb; /* the column's image, at the group's first channel */
    int iy0, ix0, h, wd, kh, kw, dh, dw;
    long nk;
    bool valid;
    float r[4];

    void load(long k0, uint lid)
    {
        const int khw = kh * kw;
        const long kidx = k0 + (long)(lid / MR_METAL_GEMM_BN) * 4;
        int ic = (int)(kidx / khw);
        const int rem = (int)(kidx - (long)ic * khw);
        int ky = rem / kw, kx = rem - ky * kw;
        for (int e = 0; e < 4; ++e) {
            float v = 0.0f;
            if (valid && kidx + e < nk) {
                const int iy = iy0 + ky * dh, ix = ix0 + kx * dw;
                if (iy >= 0 && iy < h && ix >= 0 && ix < wd) v = xb[((long)ic * h + iy) * wd + ix];
            }
            r[e] = v;
            if (++kx == kw) {
                kx = 0;
                if (++ky == kh) {
                    ky = 0;
                    ++ic;
                }
            }
        }
    }

    void store(int prec, threadgroup float *s, uint lid) const
    {
        const uint col = lid % MR_METAL_GEMM_BN, row = (lid / MR_METAL_GEMM_BN) * 4;
        for (int e = 0; e < 4; ++e) s[(row + (uint)e) * MR_METAL_GEMM_LD + col] = mr_mtl_round(prec, r[e]);
    }
};

/* K tile k0 of A and B into threadgroup memory (A at tg, B after it), rounded to prec,
 * from the registers that hold it (loaded here first when k0 = 0); then the global loads
 * of the next tile, which stay in flight while the caller multiplies this one. One
 * buffer, two barriers a K step: before overwriting it (every thread done reading the
 * previous tile, or the previous unit's staging) and after filling it. */
template <class LA, class LB>
MR_MTL_FN void mr_mtl_stage(thread LA &la, thread LB &lb, int prec, long k0, long k, threadgroup float *tg, uint lid)
{
    if (k0 == 0) {
        la.load(0, lid);
        lb.load(0, lid);
    }
    MR_MTL_TG_BARRIER();
    la.store(prec, tg, lid);
    lb.store(prec, tg + MR_METAL_GEMM_BK * MR_METAL_GEMM_LD, lid);
    MR_MTL_TG_BARRIER();
    if (k0 + MR_METAL_GEMM_BK < k) {
        la.load(k0 + MR_METAL_GEMM_BK, lid);
        lb.load(k0 + MR_METAL_GEMM_BK, lid);
    }
}

/* acc = A tile x B tile over all of K: registers -> threadgroup memory (rounded to P,
 * mr_mtl_stage) -> FMAs in order of k. Zero-filled edges: the FMA loop has no guards. */
template <int P, class LA, class LB>
MR_MTL_FN void mr_mtl_mainloop(thread LA &la, thread LB &lb, long k, threadgroup float *tg, uint lid,
                               thread mr_mtl_acc &acc)
{
    threadgroup float *sa = tg;
    threadgroup float *sb = tg + MR_METAL_GEMM_BK * MR_METAL_GEMM_LD;
    const uint tx = lid % 16, ty = lid / 16;
    for (int i = 0; i < MR_METAL_GEMM_TM; ++i)
        for (int j = 0; j < MR_METAL_GEMM_TN; ++j) acc.v[i][j] = 0.0f;
    for (long k0 = 0; k0 < k; k0 += MR_METAL_GEMM_BK) {
        mr_mtl_stage(la, lb, P, k0, k, tg, lid);
        for (int kk = 0; kk < MR_METAL_GEMM_BK; ++kk) {
            float av[MR_METAL_GEMM_TM], bv[MR_METAL_GEMM_TN];
            for (int i = 0; i < MR_METAL_GEMM_TM; ++i) av[i] = sa[kk * MR_METAL_GEMM_LD + ty + 16 * i];
            for (int j = 0; j < MR_METAL_GEMM_TN; ++j) bv[j] = sb[kk * MR_METAL_GEMM_LD + tx + 16 * j];
            for (int i = 0; i < MR_METAL_GEMM_TM; ++i)
                for (int j = 0; j < MR_METAL_GEMM_TN; ++j) acc.v[i][j] = metal::fma(av[i], bv[j], acc.v[i][j]);
        }
    }
}

/* The reduced-precision (MR_BF16 / MR_F16) tile on simdgroup_matrix, 8x8 f32 fragments:
 * the 8 simdgroups form a 4 x 2 grid of 16 x 32 blocks of the 64 x 64 tile (2 x 4
 * accumulator fragments each). The operands are the rounded values kept as floats (exact:
 * 8 or 11 significant bits), so the fragments and products are f32, which every Apple GPU
 * with simdgroup_matrix (Apple7 / M1 on) multiplies; a product of two rounded operands is
 * exact in f32, the sums are f32. Per K tile, 2 steps of 8: 2 A fragments (loaded
 * transposed from the K-major tile), 4 B fragments, 8 multiply-accumulates. The same
 * loaders and double role of the registers as mr_mtl_mainloop. The results leave through
 * a simdgroup's own 8x8 staging area in threadgroup memory (after a barrier: the tiles
 * are free then), from which each lane stores 2 elements and calls the epilogue on them:
 * nothing depends on how the hardware spreads a fragment over the lanes. */
template <int P, class LA, class LB, class Out>
MR_MTL_FN void mr_mtl_tile_mma(thread LA &la, thread LB &lb, long k, thread const Out &out, long m0, long n0,
                               threadgroup float *tg, uint lid, uint lane, uint simd)
{
    threadgroup float *sa = tg;
    threadgroup float *sb = tg + MR_METAL_GEMM_BK * MR_METAL_GEMM_LD;
    const uint wr = (simd / 2) * 16, wc = (simd % 2) * 32;
    metal::simdgroup_float8x8 acc[2][4];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (long k0 = 0; k0 < k; k0 += MR_METAL_GEMM_BK) {
        mr_mtl_stage(la, lb, P, k0, k, tg, lid);
        for (int kk = 0; kk < MR_METAL_GEMM_BK; kk += 8) {
            metal::simdgroup_float8x8 fa[2], fb[4];
            /* A fragment (r, c) = A[wr + 8i + r][kk + c] = sa[(kk + c) * LD + wr + 8i + r] */
            for (int i = 0; i < 2; ++i)
                metal::simdgroup_load(fa[i], sa + kk * MR_METAL_GEMM_LD + wr + 8 * i, MR_METAL_GEMM_LD, ulong2(0), true);
            for (int j = 0; j < 4; ++j)
                metal::simdgroup_load(fb[j], sb + kk * MR_METAL_GEMM_LD + wc + 8 * j, MR_METAL_GEMM_LD);
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 4; ++j) metal::simdgroup_multiply_accumulate(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
    }
    MR_MTL_TG_BARRIER(); /* every simdgroup is done with the tiles: they become staging */
    threadgroup float *st = tg + simd * 64;
    for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 4; ++j) {
            metal::simdgroup_store(acc[i][j], st, 8);
            metal::simdgroup_barrier(metal::mem_flags::mem_threadgroup);
            for (uint e = lane; e < 64; e += MR_METAL_SIMD_WIDTH)
                out.put(m0 + wr + 8 * i + e / 8, n0 + wc + 8 * j + e % 8, st[e]);
            metal::simdgroup_barrier(metal::mem_flags::mem_threadgroup);
        }
    }
}

/* Which tile a precision runs on, as a type, so that only the chosen one is instantiated:
 * an MR_F32 model never contains simdgroup_matrix code (GPUs without it can run it). */
struct mr_mtl_scalar_tile {};
struct mr_mtl_mma_tile {};
template <bool MMA>
struct mr_mtl_tile_kind {
    typedef mr_mtl_scalar_tile type;
};
template <>
struct mr_mtl_tile_kind<true> {
    typedef mr_mtl_mma_tile type;
};

template <int P, class LA, class LB, class Out>
MR_MTL_FN void mr_mtl_tile_run(mr_mtl_scalar_tile, thread LA &la, thread LB &lb, long k, thread const Out &out,
                               long m0, long n0, threadgroup float *tg, uint lid, uint, uint)
{
    mr_mtl_acc acc;
    mr_mtl_mainloop<P>(la, lb, k, tg, lid, acc);
    const uint tx = lid % 16, ty = lid / 16;
    for (int i = 0; i < MR_METAL_GEMM_TM; ++i)
        for (int j = 0; j < MR_METAL_GEMM_TN; ++j) out.put(m0 + ty + 16 * i, n0 + tx + 16 * j, acc.v[i][j]);
}

template <int P, class LA, class LB, class Out>
MR_MTL_FN void mr_mtl_tile_run(mr_mtl_mma_tile, thread LA &la, thread LB &lb, long k, thread const Out &out,
                               long m0, long n0, threadgroup float *tg, uint lid, uint lane, uint simd)
{
    mr_mtl_tile_mma<P>(la, lb, k, out, m0, n0, tg, lid, lane, simd);
}

/* One 64 x 64 output tile at (m0, n0) over all of K: out.put(row, col, value) for each
 * element (put skips those past the matrix, stores, and calls the epilogue). MR_F32, and
 * every precision when MR_METAL_SIMDGROUP_MATRIX is 0: the scalar FMA loop, operands
 * rounded to P in threadgroup memory. MR_BF16 / MR_F16: simdgroup_matrix. */
template <int P, class LA, class LB, class Out>
MR_MTL_FN void mr_mtl_tile(thread LA &la, thread LB &lb, long k, thread const Out &out, long m0, long n0,
                           threadgroup float *tg, uint lid, uint lane, uint simd)
{
    typedef typename mr_mtl_tile_kind<MR_METAL_SIMDGROUP_MATRIX != 0 && (P == MR_BF16 || P == MR_F16)>::type kind;
    mr_mtl_tile_run<P>(kind(), la, lb, k, out, m0, n0, tg, lid, lane, simd);
}

/* The GEMM's output: element (row, col) of batch item nb at c[row*c_rs + col*c_cs] (c at
 * the item's offset), then ep(nb, row, col). */
template <class Ep>
struct mr_mtl_out_gemm {
    device float *c;
    long c_rs, c_cs, m, n, nb;
    Ep ep;
    void put(long row, long col, float v) const
    {
        if (row < m && col < n) {
            c[row * c_rs + col * c_cs] = v;
            ep(nb, row, col);
        }
    }
};

/* The implicit GEMM's output: row = output channel within group g (oc = oc0 + row),
 * col = b*oh*ow + position; then ep(b, oc, position). */
template <class Ep>
struct mr_mtl_out_conv {
    device float *out;
    long o, ohw, rows, cols, oc0;
    Ep ep;
    void put(long row, long col, float v) const
    {
        if (row < rows && col < cols) {
            const long b = col / ohw, pos = col - b * ohw, oc = oc0 + row;
            out[(b * o + oc) * ohw + pos] = v;
            ep(b, oc, pos);
        }
    }
};

/* ------------------------------------------------------------------------------------ */
/* GEMM                                                                                 */
/* ------------------------------------------------------------------------------------ */

/*
 * C[i*c_rs + j*c_cs] = sum_k A[i*a_rs + k*a_cs] * B[k*b_rs + j*b_cs] for each batch item
 * (offsets from bt), any strides; then ep(nb, i, j) by the thread that stored element
 * (i, j), nb the flat batch index. P = MR_F32: exact f32 FMAs in order of k. MR_BF16 /
 * MR_F16 (m > 4): both operands rounded to the format as they are staged in threadgroup
 * memory (mr_mtl_round), products exact in f32, summed in f32 on simdgroup_matrix
 * (mr_mtl_tile_mma; the scalar FMA loop if MR_METAL_SIMDGROUP_MATRIX is 0). m <= 4
 * takes a GEMV path, exact f32 whatever P, as the CUDA target's fallback: a lane a column
 * for a row-major B (b_cs == 1), else a simdgroup a column (lanes splitting K, simd_sum). k = 0 gives C = 0, then the epilogue.
 */
template <int P, class Ep>
MR_MTL_FN void mr_sgemm(long m, long n, long k, device const float *a, long a_rs, long a_cs, device const float *b,
                        long b_rs, long b_cs, device float *c, long c_rs, long c_cs, thread const mr_batch &bt,
                        thread const Ep &ep, threadgroup float *tg, uint group, uint groups, uint lid, uint lane,
                        uint simd)
{
    const long nbatch = mr_mtl_batch_count(bt);
    if (m <= 0 || n <= 0 || nbatch <= 0) return;
    if (m <= MR_METAL_GEMV_MAX_M && b_cs == 1 && b_rs != 1) {
        /* B's columns contiguous (row-major B): a lane a column, 32 consecutive columns a
         * simdgroup item, so each k reads one contiguous run of B (and a broadcast A);
         * FMAs in order of k. */
        const long blocks = (n + MR_METAL_SIMD_WIDTH - 1) / MR_METAL_SIMD_WIDTH, items = nbatch * blocks;
        for (long item = (long)group * MR_METAL_SIMDS + simd; item < items; item += (long)groups * MR_METAL_SIMDS) {
            const long nb = item / blocks, j = (item - nb * blocks) * MR_METAL_SIMD_WIDTH + lane;
            if (j >= n) continue;
            long oa, ob, oc;
            mr_mtl_batch_offsets(bt, nb, oa, ob, oc);
            device const float *ap = a + oa;
            device const float *bp = b + ob + j;
            float acc[MR_METAL_GEMV_MAX_M] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (long kk = 0; kk < k; ++kk) {
                const float bv = bp[kk * b_rs];
                for (int i = 0; i < MR_METAL_GEMV_MAX_M; ++i)
                    if (i < m) acc[i] = metal::fma(ap[i * a_rs + kk * a_cs], bv, acc[i]);
            }
            for (int i = 0; i < MR_METAL_GEMV_MAX_M; ++i) {
                if (i < m) {
                    c[oc + i * c_rs + j * c_cs] = acc[i];
                    ep(nb, (long)i, j);
                }
            }
        }
        return;
    }
    if (m <= MR_METAL_GEMV_MAX_M) {
        /* a simdgroup a column: lanes split K (consecutive k for a K-contiguous B, the
         * transposed weights of a linear layer), then simd_sum */
        const long items = nbatch * n;
        for (long item = (long)group * MR_METAL_SIMDS + simd; item < items; item += (long)groups * MR_METAL_SIMDS) {
            const long nb = item / n, j = item - nb * n;
            long oa, ob, oc;
            mr_mtl_batch_offsets(bt, nb, oa, ob, oc);
            device const float *ap = a + oa;
            device const float *bp = b + ob + j * b_cs;
            float acc[MR_METAL_GEMV_MAX_M] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (long kk = lane; kk < k; kk += MR_METAL_SIMD_WIDTH) {
                const float bv = bp[kk * b_rs];
                for (int i = 0; i < MR_METAL_GEMV_MAX_M; ++i)
                    if (i < m) acc[i] = metal::fma(ap[i * a_rs + kk * a_cs], bv, acc[i]);
            }
            for (int i = 0; i < MR_METAL_GEMV_MAX_M; ++i) acc[i] = metal::simd_sum(acc[i]);
            if (lane == 0) {
                for (int i = 0; i < MR_METAL_GEMV_MAX_M; ++i) {
                    if (i < m) {
                        c[oc + i * c_rs + j * c_cs] = acc[i];
                        ep(nb, (long)i, j);
                    }
                }
            }
        }
        return;
    }
    const long mt = (m + MR_METAL_GEMM_BM - 1) / MR_METAL_GEMM_BM, nt = (n + MR_METAL_GEMM_BN - 1) / MR_METAL_GEMM_BN;
    const long units = nbatch * mt * nt;
    for (long u = group; u < units; u += groups) {
        const long nb = u / (mt * nt), rem = u - nb * (mt * nt);
        const long m0 = (rem / nt) * MR_METAL_GEMM_BM, n0 = (rem % nt) * MR_METAL_GEMM_BN;
        long oa, ob, oc;
        mr_mtl_batch_offsets(bt, nb, oa, ob, oc);
        mr_mtl_ld_strided la = mr_mtl_ld_strided_make(a + oa + m0 * a_rs, a_rs, a_cs, m - m0, k, lid);
        mr_mtl_ld_strided lb = mr_mtl_ld_strided_make(b + ob + n0 * b_cs, b_cs, b_rs, n - n0, k, lid);
        const mr_mtl_out_gemm<Ep> out = {c + oc, c_rs, c_cs, m, n, nb, ep};
        mr_mtl_tile<P>(la, lb, k, out, m0, n0, tg, lid, lane, simd);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Convolution                                                                          */
/* ------------------------------------------------------------------------------------ */

/*
 * out[b, oc, y, x] = sum over ic of oc's group, ky, kx of
 * x[b, ic, y*sh + ky*dh - ph, x*sw + kx*dw - pw] * w[oc, ic - group start, ky, kx] (taps
 * outside the image are 0), then ep(b, oc, y*ow + x) by the thread that stored it. NCHW
 * contiguous, w [o, c/cgroups, kh, kw]. Three paths, all of them grid-striding:
 *  - 1x1, stride 1, unpadded, one group: mr_sgemm of W [o, c] by X[b] [c, h*w], a rank-1
 *    batch over images with W broadcast (the epilogue's (nb, i, j) are (image, channel,
 *    position)).
 *  - <= 4 output channels a group (depthwise): one thread an output, exact f32 whatever P.
 *  - else the implicit GEMM: rows the group's output channels (A = its weights, [M, K]
 *    row-major), columns all n*oh*ow positions (small late feature maps still fill the
 *    64-wide tile), K = c/cgroups*kh*kw, B = im2col while loading; P rounds as mr_sgemm.
 */
template <int P, class Ep>
MR_MTL_FN void mr_conv2d(device const float *x, device const float *w, device float *out, long n, long c, long h,
                         long wd, long o, long kh, long kw, long oh, long ow, long sh, long sw, long ph, long pw,
                         long dh, long dw, long cgroups, thread const Ep &ep, threadgroup float *tg, uint group,
                         uint groups, uint lid, uint lane, uint simd)
{
    if (n <= 0 || o <= 0 || oh <= 0 || ow <= 0 || cgroups <= 0) return;
    const long ohw = oh * ow;
    if (kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && cgroups == 1 && oh == h && ow == wd) {
        const mr_batch bt = {1, {n, 1, 1, 1}, {0, 0, 0, 0}, {c * h * wd, 0, 0, 0}, {o * ohw, 0, 0, 0}};
        mr_sgemm<P>(o, ohw, c, w, c, 1, x, ohw, 1, out, ohw, 1, bt, ep, tg, group, groups, lid, lane, simd);
        return;
    }
    const long cg = c / cgroups, M = o / cgroups, K = cg * kh * kw, ncols = n * ohw;
    if (M <= MR_METAL_CONV_DIRECT_MAX_M) {
        const long total = n * o * ohw;
        for (long idx = (long)group * MR_METAL_THREADS + lid; idx < total; idx += (long)groups * MR_METAL_THREADS) {
            const long pos = idx % ohw, boc = idx / ohw;
            const long oc = boc % o, bi = boc / o;
            const long g = oc / M;
            const long y = pos / ow, xx = pos - y * ow;
            device const float *xb = x + (bi * c + g * cg) * h * wd;
            device const float *wr = w + oc * K;
            float acc = 0.0f;
            for (long ic = 0; ic < cg; ++ic) {
                for (long ky = 0; ky < kh; ++ky) {
                    const long iy = y * sh + ky * dh - ph;
                    if (iy < 0 || iy >= h) continue;
                    device const float *xr = xb + (ic * h + iy) * wd;
                    device const float *wk = wr + (ic * kh + ky) * kw;
                    for (long kx = 0; kx < kw; ++kx) {
                        const long ix = xx * sw + kx * dw - pw;
                        if (ix >= 0 && ix < wd) acc = metal::fma(xr[ix], wk[kx], acc);
                    }
                }
            }
            out[idx] = acc;
            ep(bi, oc, pos);
        }
        return;
    }
    const long mt = (M + MR_METAL_GEMM_BM - 1) / MR_METAL_GEMM_BM, nt = (ncols + MR_METAL_GEMM_BN - 1) / MR_METAL_GEMM_BN;
    const long units = cgroups * mt * nt;
    for (long u = group; u < units; u += groups) {
        const long g = u / (mt * nt), rem = u - g * (mt * nt);
        const long m0 = (rem / nt) * MR_METAL_GEMM_BM, n0 = (rem % nt) * MR_METAL_GEMM_BN;
        mr_mtl_ld_strided la = mr_mtl_ld_strided_make(w + (g * M + m0) * K, K, 1, M - m0, K, lid);
        /* this thread's im2col column */
        const long col = n0 + (long)(lid % MR_METAL_GEMM_BN);
        const bool valid = col < ncols;
        const long bi = valid ? col / ohw : 0, pos = col - bi * ohw;
        const long y = pos / ow, xx = pos - y * ow;
        mr_mtl_ld_im2col lb = {x + (bi * c + g * cg) * h * wd, (int)(y * sh - ph), (int)(xx * sw - pw), (int)h, (int)wd,
                               (int)kh, (int)kw, (int)dh, (int)dw, K, valid, {0.0f, 0.0f, 0.0f, 0.0f}};
        const mr_mtl_out_conv<Ep> res = {out, o, ohw, M, ncols, g * M, ep};
        mr_mtl_tile<P>(la, lb, K, res, m0, n0, tg, lid, lane, simd);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Pooling                                                                              */
/* ------------------------------------------------------------------------------------ */

/* x [lead, h, wd] -> out [lead, oh, ow], one thread an output (consecutive threads on
 * consecutive x, coalesced). Taps in runtime-c's (ky, kx) order: max starts at -inf and
 * takes a tap if larger or NaN, skipping padding (an all-padding window gives -inf);
 * average adds the in-range taps to 0 and divides by kh*kw (padding counts in the
 * divisor), the same float operations as runtime-c's mr_pool2d_f32. */
MR_MTL_FN void mr_pool2d(device const float *x, device float *out, long lead, long h, long wd, long kh, long kw,
                         long oh, long ow, long sh, long sw, long ph, long pw, long dh, long dw, int is_max,
                         uint group, uint groups, uint lid)
{
    const long ohw = oh * ow, total = lead * ohw;
    const float div = (float)(kh * kw);
    for (long idx = (long)group * MR_METAL_THREADS + lid; idx < total; idx += (long)groups * MR_METAL_THREADS) {
        const long pl = idx / ohw, pos = idx - pl * ohw;
        const long y = pos / ow, xx = pos - y * ow;
        device const float *xp = x + pl * h * wd;
        float acc = is_max ? -INFINITY : 0.0f;
        for (long ky = 0; ky < kh; ++ky) {
            const long iy = y * sh + ky * dh - ph;
            if (iy < 0 || iy >= h) continue;
            for (long kx = 0; kx < kw; ++kx) {
                const long ix = xx * sw + kx * dw - pw;
                if (ix < 0 || ix >= wd) continue;
                const float v = xp[iy * wd + ix];
                acc = is_max ? mr_mtl_max_nan(acc, v) : acc + v;
            }
        }
        out[idx] = is_max ? acc : acc / div;
    }
}

/* ------------------------------------------------------------------------------------ */
/* Softmax                                                                              */
/* ------------------------------------------------------------------------------------ */

/* runtime-c's mr_softmax_exp: exp(d) for d = x - max <= 0 or NaN, exactly 0 below
 * -87.34 (so a masked -inf gives 0), NaN stays NaN. */
MR_MTL_FN float mr_mtl_softmax_exp(float d)
{
    const float cl = d < -87.33654f ? -87.33654f : (d != d ? 0.0f : d);
    const float nn = mr_expf_n(cl);
    const float y = mr_expf_scaled(cl, nn, nn);
    return d >= -87.33654f ? y : (d != d ? d : 0.0f);
}

/* The max or sum of every thread's v: simdgroup reductions, then the
 * MR_METAL_SIMDS partials through tg[0..SIMDS), the result through tg[SIMDS]. Every
 * thread gets it; tg is free again on return. */
MR_MTL_FN float mr_mtl_tg_reduce(float v, bool is_max, threadgroup float *tg, uint lane, uint simd)
{
    v = is_max ? metal::simd_max(v) : metal::simd_sum(v);
    if (lane == 0) tg[simd] = v;
    MR_MTL_TG_BARRIER();
    if (simd == 0) {
        float t = lane < MR_METAL_SIMDS ? tg[lane] : (is_max ? -INFINITY : 0.0f);
        t = is_max ? metal::simd_max(t) : metal::simd_sum(t);
        if (lane == 0) tg[MR_METAL_SIMDS] = t;
    }
    MR_MTL_TG_BARRIER();
    const float r = tg[MR_METAL_SIMDS];
    MR_MTL_TG_BARRIER();
    return r;
}

/*
 * Softmax along the middle axis of contiguous [outer, n, inner]: out[o,k,i] =
 * exp(x[o,k,i] - m) / sum_k' exp(x[o,k',i] - m), m = max_k x[o,k,i] (NaN propagating);
 * runtime-c's exp (mr_mtl_softmax_exp), so an -inf entry gives exactly 0 and a row of
 * -inf NaN. out may equal x: every element is read and rewritten by one thread. A row
 * (o, i) goes to
 *  - one thread, when inner > 1 and there are many rows (>= 4096) or n <= 8: consecutive
 *    threads take consecutive i, so every pass reads contiguous memory;
 *  - one simdgroup, when n <= 1024 (lanes stride the row, simd_max / simd_sum);
 *  - one threadgroup otherwise (threads stride the row, mr_mtl_tg_reduce).
 * Sums run in another order than runtime-c's: results agree to rounding. A row with a NaN
 * gives NaN everywhere whether or not the max sees the NaN (simd_max may drop it, as
 * fmax does): its exponential makes the sum, and so every quotient, NaN. Each thread's
 * own running max still propagates NaN as runtime-c's (mr_mtl_max_nan).
 */
MR_MTL_FN void mr_softmax(device const float *x, device float *out, long outer, long n, long inner,
                          threadgroup float *tg, uint group, uint groups, uint lid, uint lane, uint simd)
{
    if (outer <= 0 || n <= 0 || inner <= 0) return;
    const long rows = outer * inner;
    if (inner > 1 && (rows >= 4096 || n <= 8)) {
        for (long row = (long)group * MR_METAL_THREADS + lid; row < rows; row += (long)groups * MR_METAL_THREADS) {
            const long o = row / inner, i = row - o * inner;
            device const float *xr = x + o * n * inner + i;
            device float *yr = out + o * n * inner + i;
            float m = -INFINITY, sum = 0.0f;
            for (long k = 0; k < n; ++k) m = mr_mtl_max_nan(m, xr[k * inner]);
            for (long k = 0; k < n; ++k) {
                const float e = mr_mtl_softmax_exp(xr[k * inner] - m);
                yr[k * inner] = e;
                sum += e;
            }
            for (long k = 0; k < n; ++k) yr[k * inner] = yr[k * inner] / sum;
        }
        return;
    }
    if (n <= MR_METAL_SOFTMAX_SIMD_MAX_N) {
        for (long row = (long)group * MR_METAL_SIMDS + simd; row < rows; row += (long)groups * MR_METAL_SIMDS) {
            const long o = row / inner, i = row - o * inner;
            device const float *xr = x + o * n * inner + i;
            device float *yr = out + o * n * inner + i;
            float m = -INFINITY, sum = 0.0f;
            for (long k = lane; k < n; k += MR_METAL_SIMD_WIDTH) m = mr_mtl_max_nan(m, xr[k * inner]);
            m = metal::simd_max(m);
            for (long k = lane; k < n; k += MR_METAL_SIMD_WIDTH) {
                const float e = mr_mtl_softmax_exp(xr[k * inner] - m);
                yr[k * inner] = e;
                sum += e;
            }
            sum = metal::simd_sum(sum);
            for (long k = lane; k < n; k += MR_METAL_SIMD_WIDTH) yr[k * inner] = yr[k * inner] / sum;
        }
        return;
    }
    for (long row = group; row < rows; row += groups) {
        const long o = row / inner, i = row - o * inner;
        device const float *xr = x + o * n * inner + i;
        device float *yr = out + o * n * inner + i;
        float m = -INFINITY, sum = 0.0f;
        for (long k = lid; k < n; k += MR_METAL_THREADS) m = mr_mtl_max_nan(m, xr[k * inner]);
        m = mr_mtl_tg_reduce(m, true, tg, lane, simd);
        for (long k = lid; k < n; k += MR_METAL_THREADS) {
            const float e = mr_mtl_softmax_exp(xr[k * inner] - m);
            yr[k * inner] = e;
            sum += e;
        }
        sum = mr_mtl_tg_reduce(sum, false, tg, lane, simd);
        /* each thread divides the elements it wrote itself: no barrier needed */
        for (long k = lid; k < n; k += MR_METAL_THREADS) yr[k * inner] = yr[k * inner] / sum;
    }
}

/* ------------------------------------------------------------------------------------ */
/* SGD                                                                                  */
/* ------------------------------------------------------------------------------------ */

/* runtime-c's mr_sgd_f32: with use_v, v = momentum*v + g then w -= lr*v; without, w -=
 * lr*g and v is not read (the host passes use_v = momentum != 0 && v exists). Bit-equal to
 * runtime-c where the compiler does not contract a product and a sum into an FMA. */
MR_MTL_FN void mr_sgd(device float *w, device const float *g, device float *v, long n, float lr, float momentum,
                      int use_v, uint group, uint groups, uint lid)
{
    for (long i = (long)group * MR_METAL_THREADS + lid; i < n; i += (long)groups * MR_METAL_THREADS) {
        if (use_v) {
            const float pv = momentum * v[i];
            const float vi = pv + g[i];
            v[i] = vi;
            const float step = lr * vi;
            w[i] = w[i] - step;
        } else {
            const float step = lr * g[i];
            w[i] = w[i] - step;
        }
    }
}

#endif /* MITHRIL_METAL_KERNELS_H */
