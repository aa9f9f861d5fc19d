/* mithril_cuda.h -- the CUDA target's kernel library, compiled into each generated model.
 *
 * Header-only CUDA C++17: every function is `static` (or a template of static functions),
 * so two models' copies link into one program without clashing. Under MR_CUDA_EMULATE the
 * same source compiles as host C++ against cuda_emu.h, which runs the kernels on CPU
 * fibers (the emulated tests in test_kernels.cu use that).
 *
 * Contents:
 *   mr_cuda_sgemm   f32 (batched, strided) matrix product with a fused epilogue: a
 *                   128x64x16 shared-memory tiled kernel, double-buffered, 8x4 outputs a
 *                   thread; a GEMV-like kernel for m <= 4.
 *   mr_cuda_conv2d  NCHW convolution as an implicit GEMM on the same tiles (im2col done
 *                   while loading B tiles); a direct kernel for depthwise-like cases.
 *   mr_cuda_pool2d  max / average pooling, runtime-c's semantics.
 *   mr_cuda_softmax softmax along the middle axis, runtime-c's semantics.
 *   mr_cuda_attention
 *                   fused softmax(score(q k)) v, flash style (online softmax over tiles of
 *                   32 keys, the scores never stored), head dimensions up to 128.
 *   mr_cuda_sgd_*   the SGD (with momentum) update.
 *   mr_cuda_sgemm_tc, mr_cuda_conv2d_tc, mr_cuda_attention_tc
 *                   the same with operands rounded to TF32, BF16 or F16 on tensor cores
 *                   (PTX mma.sync, sm_80+), f32 accumulation; exact fallbacks.
 *   mr_cuda_sgemm_lt (in mr_cublaslt.h, which a caller includes after this header: it
 *                   compiles against cuBLASLt's header)
 *                   the GEMM on cuBLASLt (dlopen'ed, fused epilogue) where it loads and
 *                   takes the layout, else mr_cuda_sgemm_tc; always the latter emulated.
 * Every host function launches on the given stream and returns cudaGetLastError()
 * (mr_cuda_attention: cudaErrorInvalidValue for dimensions outside its limits).
 */
#ifndef MITHRIL_CUDA_H
#define MITHRIL_CUDA_H

#if defined(MR_CUDA_EMULATE)
#include "cuda_emu.h"
#else
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif
#include <stdint.h>
#include <type_traits>
#include "mithril_ops.h"
#include "mr_cuda_plan.h"
#include "mr_ptx.h"

/* cp.async and mma.sync's tf32 / bf16 forms exist for sm_80 and newer; compiled for an older
 * architecture the tensor-core kernels trap (the host functions check the device first). */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define MR_TC_ARCH_OK 1
#else
#define MR_TC_ARCH_OK 0
#endif

#if defined(MR_CUDA_EMULATE)
#define MR_LAUNCH(kernel, grid, block, stream, ...) mr_emu_launch(#kernel, kernel, grid, block, stream, __VA_ARGS__)
#define MR_LAUNCH_BOUNDS(threads, min_blocks)
#else
#define MR_LAUNCH(kernel, grid, block, stream, ...) kernel<<<grid, block, 0, stream>>>(__VA_ARGS__)
#define MR_LAUNCH_BOUNDS(threads, min_blocks) __launch_bounds__(threads, min_blocks)
#endif

/* Full unrolling of the small fixed loops (register tiles must stay in registers); gcc,
 * compiling the emulation, has no `#pragma unroll` and does not need it. */
#if defined(__CUDACC__) || defined(__clang__)
#define MR_UNROLL _Pragma("unroll")
#define MR_NO_UNROLL _Pragma("unroll 1")
#else
#define MR_UNROLL
#define MR_NO_UNROLL
#endif

/* Blocks for a grid-stride loop over n items, MR_THREADS threads a block. */
static inline unsigned mr_blocks(int64_t n) { return (unsigned)mr_plan_stride_blocks(n, MR_THREADS); }

/* Blocks for n warp-sized work items (MR_THREADS / 32 warps a block). */
static inline unsigned mr_warp_blocks(int64_t n) { return (unsigned)mr_plan_stride_blocks(n, MR_THREADS / 32); }

struct mr_no_epilogue {
    __device__ void operator()(int64_t, int64_t, int64_t) const {}
};

/* Batch dimensions of a batched matrix product (up to 4), row-major over ext; a, b, c
 * are each operand's element stride per batch dimension (0 = broadcast). */
#define MR_MAX_BATCH 4
struct mr_batch {
    int rank;
    int64_t ext[MR_MAX_BATCH];
    int64_t a[MR_MAX_BATCH], b[MR_MAX_BATCH], c[MR_MAX_BATCH];
};

/* ------------------------------------------------------------------------------------ */
/* Small device helpers                                                                 */
/* ------------------------------------------------------------------------------------ */

#define MR_FULL_MASK 0xffffffffu

/* runtime-c's running max: v wins if larger or NaN, so NaN propagates. */
static __device__ __forceinline__ float mr_cu_max_nan(float m, float v) { return (v > m || v != v) ? v : m; }

/* Products and sums rounded on their own, never contracted into a fused multiply-add:
 * the SGD update then rounds exactly as runtime-c's (gcc contracts nothing there). */
#if defined(__CUDA_ARCH__)
static __device__ __forceinline__ float mr_cu_mul(float a, float b) { return __fmul_rn(a, b); }
static __device__ __forceinline__ float mr_cu_add(float a, float b) { return __fadd_rn(a, b); }
static __device__ __forceinline__ float mr_cu_sub(float a, float b) { return __fsub_rn(a, b); }
static __device__ __forceinline__ double mr_cu_mul(double a, double b) { return __dmul_rn(a, b); }
static __device__ __forceinline__ double mr_cu_add(double a, double b) { return __dadd_rn(a, b); }
static __device__ __forceinline__ double mr_cu_sub(double a, double b) { return __dsub_rn(a, b); }
#else
template <class T> static __device__ __forceinline__ T mr_cu_mul(T a, T b) { return a * b; }
template <class T> static __device__ __forceinline__ T mr_cu_add(T a, T b) { return a + b; }
template <class T> static __device__ __forceinline__ T mr_cu_sub(T a, T b) { return a - b; }
#endif

static __device__ __forceinline__ float4 mr_cu_ld4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
static __device__ __forceinline__ void mr_cu_st4(float *p, float a, float b, float c, float d)
{
    float4 v;
    v.x = a;
    v.y = b;
    v.z = c;
    v.w = d;
    *reinterpret_cast<float4 *>(p) = v;
}

/* Whether 16-byte vector accesses may start at p. Under emulation MR_EMU_SCALAR=1 makes
 * it false everywhere, so tests run the paths taken for unaligned buffers too. */
static inline bool mr_aligned16(const void *p)
{
#if defined(MR_CUDA_EMULATE)
    if (mr_emu::detail::env_unsigned("MR_EMU_SCALAR", 0) != 0) return false;
#endif
    return ((uintptr_t)p & 15u) == 0;
}

/* Whether p is 16-byte aligned, in a kernel (the host decides mr_aligned16's answers). */
static __device__ __forceinline__ bool mr_aligned16_dev(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* ------------------------------------------------------------------------------------ */
/* Tiled matrix product core (GEMM and implicit-GEMM convolution)                       */
/* ------------------------------------------------------------------------------------ */

/*
 * Tiling. mr_cuda_plan.h's MR_TILE_LIST names the tile kernels (128 x 128 down to 32 x 32)
 * and its planner picks one per call. A block computes a BM x BN tile of C, stepping
 * through K 16 at a time; each thread owns a TM x TN register tile made of 4 x 4 squares:
 * its rows are ty*4.. in each of the TM/4 bands of BM/(TM/4) rows, its columns tx*4.. in
 * each of the TN/4 bands of BN/(TN/4) columns (tx = tid % (BN/TN), ty = tid / (BN/TN)).
 * Per K step a thread reads (TM + TN) / 4 float4s of shared memory for TM*TN FMAs. A
 * warp's A reads are a few broadcast addresses and its B reads consecutive float4s, so
 * neither conflicts. Larger tiles reuse each loaded element more; smaller ones give a
 * small product enough blocks to fill the GPU.
 *
 * Shared memory holds both tiles K-major (sm.a[k][m], sm.b[k][n]), so the inner loop's
 * reads are contiguous whatever the operands' layouts; the loaders transpose on the way
 * in. Two buffers of each: while the block computes on one, each thread has already
 * issued the global loads of the next K tile into registers (loader.load), and writes them
 * to the other buffer afterwards (loader.store); one __syncthreads a K step.
 *
 * Split-K (the plan's split > 1): blocks along x are (K slice, column tile); each runs its slice's
 * K range and writes the raw sums to the scratch partials [slice][batch][m][n]; a second
 * kernel adds the slices in slice order, stores and runs the epilogue. The same plan
 * gives the same bits on every run.
 *
 * Edges: loaders zero-fill rows, columns and K beyond the matrix (or the slice), so the
 * FMAs need no guards, and the stores are guarded: any m, n, k >= 0 works.
 */
template <int T> struct mr_tile;
#define MR_TILE_TRAITS(i, bm, bn, tm, tn, rate)                                                                   \
    template <> struct mr_tile<i> {                                                                               \
        static constexpr int BM = bm, BN = bn, TM = tm, TN = tn, THREADS = (bm / tm) * (bn / tn);                 \
        /* one block an SM at least: ptxas takes the registers it needs (no spills; the    \
         * 128 that two 256-thread blocks an SM would allow spill with split-K's state) */ \
        static constexpr int MIN_BLOCKS = 1;                                                 \
    };
MR_TILE_LIST(MR_TILE_TRAITS)
#undef MR_TILE_TRAITS

/* The row (column) of a block's tile that a thread's register row i (column j) holds. */
template <class Tl> static __device__ __forceinline__ int mr_tile_row(int i, int ty)
{
    return (i / 4) * (Tl::BM / (Tl::TM / 4)) + ty * 4 + i % 4;
}
template <class Tl> static __device__ __forceinline__ int mr_tile_col(int j, int tx)
{
    return (j / 4) * (Tl::BN / (Tl::TN / 4)) + tx * 4 + j % 4;
}

template <int BM, int BN> struct alignas(16) mr_gemm_smem {
    float a[2][MR_GEMM_BK][BM];
    float b[2][MR_GEMM_BK][BN];
};

/*
 * Loads one operand tile (BX rows of the operand's "outer" axis -- m for A, n for B --
 * by MR_GEMM_BK along K) from a strided matrix: element (x, kk) is p[x*sx + kk*sk], K
 * ending at k (the matrix's, or a split-K slice's). Each of THREADS threads moves
 * BX*BK/THREADS elements as chunks of 4 consecutive elements, either along K (ALONG_K: A
 * row-major, or B stored transposed) or along x (A transposed, B row-major), chosen by
 * the host so the chunks follow the smaller stride. When that stride is 1 and the
 * addresses are 16-byte aligned (vec), a whole chunk inside the matrix is one float4
 * load; chunks on an edge, and other layouts, load scalars. Along K, consecutive threads
 * take consecutive rows (x), so the transposing stores into sm[k][x] hit consecutive
 * banks.
 */
template <int BX, bool ALONG_K, int THREADS = MR_THREADS> struct mr_ld_strided {
    static constexpr int CHUNKS = BX * MR_GEMM_BK / 4 / THREADS;
    static_assert(CHUNKS >= 1 && CHUNKS * THREADS * 4 == BX * MR_GEMM_BK, "a tile's chunks split evenly over the threads");
    const float *row[CHUNKS]; /* chunk c's first element at K = 0 (x fixed for the whole K loop) */
    int64_t sx, sk, k;
    int nx[CHUNKS]; /* how many of chunk c's x positions lie inside the matrix (along K: 0 or 1) */
    bool vec;
    float r[CHUNKS][4];

    /* chunk c's first element: (x, kk) */
    __device__ __forceinline__ static void chunk(int c, int &x, int &kk)
    {
        const int q = (int)threadIdx.x + c * THREADS;
        if (ALONG_K) {
            x = q % BX;
            kk = (q / BX) * 4;
        } else {
            x = (q % (BX / 4)) * 4;
            kk = q / (BX / 4);
        }
    }

    __device__ __forceinline__ mr_ld_strided(const float *p, int64_t sx_, int64_t sk_, int64_t rem_x, int64_t k_,
                                             bool vec_)
        : sx(sx_), sk(sk_), k(k_), vec(vec_)
    {
MR_UNROLL
        for (int c = 0; c < CHUNKS; ++c) {
            int x, kk;
            chunk(c, x, kk);
            const int64_t left = rem_x - x;
            nx[c] = left <= 0 ? 0 : (ALONG_K ? 1 : (left < 4 ? (int)left : 4));
            row[c] = p + x * sx + kk * sk;
        }
    }

    /* The K tile starting at k0, chunk by chunk: vec4(c, q) for a chunk inside the matrix
     * that one 16-byte access moves (q its first element), else elem(c, e, q) for each of
     * its 4 elements (q null past the matrix's edge or K's end). */
    template <class V, class E> __device__ __forceinline__ void each(int64_t k0, V vec4, E elem) const
    {
MR_UNROLL
        for (int c = 0; c < CHUNKS; ++c) {
            int x, kk;
            chunk(c, x, kk);
            const int64_t kg = k0 + kk;
            const float *q = row[c] + k0 * sk;
            if (ALONG_K ? (vec && nx[c] && kg + 3 < k) : (vec && nx[c] == 4 && kg < k)) {
                vec4(c, q);
            } else {
MR_UNROLL
                for (int e = 0; e < 4; ++e) {
                    const bool in = ALONG_K ? (nx[c] && kg + e < k) : (e < nx[c] && kg < k);
                    elem(c, e, in ? q + e * (ALONG_K ? sk : sx) : nullptr);
                }
            }
        }
    }

    /* Global -> registers for the K tile starting at k0. */
    __device__ __forceinline__ void load(int64_t k0)
    {
        each(
            k0,
            [&](int c, const float *q) {
                const float4 v = mr_cu_ld4(q);
                r[c][0] = v.x, r[c][1] = v.y, r[c][2] = v.z, r[c][3] = v.w;
            },
            [&](int c, int e, const float *q) { r[c][e] = q ? *q : 0.0f; });
    }

    /* Registers -> shared tile s[BK][BX]. */
    __device__ __forceinline__ void store(float (*s)[BX]) const
    {
MR_UNROLL
        for (int c = 0; c < CHUNKS; ++c) {
            int x, kk;
            chunk(c, x, kk);
            if (ALONG_K) {
MR_UNROLL
                for (int e = 0; e < 4; ++e) s[kk + e][x] = r[c][e];
            } else {
                mr_cu_st4(&s[kk][x], r[c][0], r[c][1], r[c][2], r[c][3]);
            }
        }
    }

#if MR_TC_ARCH_OK
    /* Global -> the tensor-core kernels' shared tile s (layout Tl: x-major along K, so that a
     * chunk is 16 contiguous bytes there too) for the K tile starting at k0, by cp.async,
     * in the thread's open group; zeros past the edges are stored at once. */
    template <class Tl> __device__ __forceinline__ void copy(int64_t k0, float *s) const
    {
        static_assert(Tl::X_MAJOR == ALONG_K && Tl::BX == BX, "a chunk is contiguous in the shared tile");
        each(
            k0,
            [&](int c, const float *q) {
                int x, kk;
                chunk(c, x, kk);
                mr_cp_async<16>(s + Tl::idx(x, kk), q);
            },
            [&](int c, int e, const float *q) {
                int x, kk;
                chunk(c, x, kk);
                float *d = s + (ALONG_K ? Tl::idx(x, kk + e) : Tl::idx(x + e, kk));
                if (q)
                    mr_cp_async<4>(d, q);
                else
                    *d = 0.0f;
            });
    }
#endif
};

/*
 * The K loop of a Tl tile: acc = A tile (rows m0..) x B tile (columns n0..) over K from
 * k0 to k1 (the loaders zero-fill from k1 on), with the loaders' next-tile loads in
 * flight during each tile's FMAs (see "Tiling" above). An empty range leaves acc zero.
 * All threads of the block must call it (it synchronises).
 */
template <class Tl, class LA, class LB>
static __device__ __forceinline__ void mr_mm_mainloop(LA &la, LB &lb, int64_t k0, int64_t k1,
                                                      mr_gemm_smem<Tl::BM, Tl::BN> &sm, float (&acc)[Tl::TM][Tl::TN])
{
    constexpr int TM = Tl::TM, TN = Tl::TN, RB = Tl::BM / (TM / 4), CB = Tl::BN / (TN / 4);
    const int tx = (int)threadIdx.x % (Tl::BN / TN), ty = (int)threadIdx.x / (Tl::BN / TN);
MR_UNROLL
    for (int i = 0; i < TM; ++i)
MR_UNROLL
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    if (k1 <= k0) return;
    la.load(k0);
    lb.load(k0);
    la.store(sm.a[0]);
    lb.store(sm.b[0]);
    __syncthreads();
    int cur = 0;
    for (int64_t kt = k0; kt < k1; kt += MR_GEMM_BK, cur ^= 1) {
        const bool more = kt + MR_GEMM_BK < k1;
        /* issue the next tile's global loads now; they land while we compute */
        if (more) {
            la.load(kt + MR_GEMM_BK);
            lb.load(kt + MR_GEMM_BK);
        }
MR_UNROLL
        for (int kk = 0; kk < MR_GEMM_BK; ++kk) {
            float av[TM], bw[TN];
MR_UNROLL
            for (int g = 0; g < TM / 4; ++g) {
                const float4 v = mr_cu_ld4(&sm.a[cur][kk][g * RB + ty * 4]);
                av[g * 4] = v.x, av[g * 4 + 1] = v.y, av[g * 4 + 2] = v.z, av[g * 4 + 3] = v.w;
            }
MR_UNROLL
            for (int g = 0; g < TN / 4; ++g) {
                const float4 v = mr_cu_ld4(&sm.b[cur][kk][g * CB + tx * 4]);
                bw[g * 4] = v.x, bw[g * 4 + 1] = v.y, bw[g * 4 + 2] = v.z, bw[g * 4 + 3] = v.w;
            }
MR_UNROLL
            for (int i = 0; i < TM; ++i)
MR_UNROLL
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bw[j], acc[i][j]);
        }
        /* the other buffer was last read in the previous step, before its barrier */
        if (more) {
            la.store(sm.a[cur ^ 1]);
            lb.store(sm.b[cur ^ 1]);
        }
        __syncthreads();
    }
}

/* Where a tile kernel's block lies along grid x (K slice x column tiles + column tile, for
 * a matrix of n columns and K = k cut into slices of kslice): its slice, its first
 * column, and its K range [k0, k1). */
template <class Tl> struct mr_block_x {
    int64_t slice, n0, k0, k1;
    __device__ __forceinline__ mr_block_x(int64_t n, int64_t kslice, int64_t k)
    {
        const unsigned ntiles = (unsigned)((n + Tl::BN - 1) / Tl::BN), s = blockIdx.x / ntiles;
        slice = s;
        n0 = (int64_t)(blockIdx.x - s * ntiles) * Tl::BN;
        k0 = slice * kslice;
        k1 = k0 + kslice < k ? k0 + kslice : k;
    }
};

/* Split-K's sum of element idx over the `split` slices of partials `total` elements
 * apart, in slice order (the same bits on every run). */
static __device__ __forceinline__ float mr_sum_slices(const float *part, int64_t split, int64_t total, int64_t idx)
{
    float s = part[idx];
    for (int64_t sl = 1; sl < split; ++sl) s += part[sl * total + idx];
    return s;
}

/* A split-K block's raw sums into its slice of the partials (rows m and columns n of
 * the implicit matrix, the tile at (m0, n0)), for the reduction kernel to add. */
template <class Tl>
static __device__ __forceinline__ void mr_store_partial(float *part, int64_t m, int64_t n, int64_t m0, int64_t n0,
                                                        const float (&acc)[Tl::TM][Tl::TN])
{
    const int tx = (int)threadIdx.x % (Tl::BN / Tl::TN), ty = (int)threadIdx.x / (Tl::BN / Tl::TN);
MR_UNROLL
    for (int i = 0; i < Tl::TM; ++i) {
        const int64_t row = m0 + mr_tile_row<Tl>(i, ty);
        if (row >= m) continue;
MR_UNROLL
        for (int j = 0; j < Tl::TN; ++j) {
            const int64_t col = n0 + mr_tile_col<Tl>(j, tx);
            if (col < n) part[row * n + col] = acc[i][j];
        }
    }
}

/* Calls at(d, i) with the index i along each batch dimension d of flat batch index nb
 * (row-major over ext[0..rank)). Unrolled, so d is a constant and the batch struct's
 * arrays stay in the parameter bank rather than a local copy. */
template <class At>
static __device__ __forceinline__ void mr_batch_walk(int rank, const int64_t (&ext)[MR_MAX_BATCH], int64_t nb, At at)
{
MR_UNROLL
    for (int d = MR_MAX_BATCH - 1; d >= 0; --d) {
        if (d < rank) {
            const int64_t i = nb % ext[d];
            nb /= ext[d];
            at(d, i);
        }
    }
}

/* Element offsets of flat batch index nb in A, B and C. */
static __device__ __forceinline__ void mr_batch_offsets(const mr_batch &bt, int64_t nb, int64_t &oa, int64_t &ob,
                                                        int64_t &oc)
{
    oa = ob = oc = 0;
    mr_batch_walk(bt.rank, bt.ext, nb, [&](int d, int64_t i) {
        oa += i * bt.a[d];
        ob += i * bt.b[d];
        oc += i * bt.c[d];
    });
}

/* ------------------------------------------------------------------------------------ */
/* GEMM                                                                                 */
/* ------------------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------------------ */
/* GEMM                                                                                 */
/* ------------------------------------------------------------------------------------ */

struct mr_gemm_args {
    int64_t m, n, k;
    const float *a;
    int64_t a_rs, a_cs;
    const float *b;
    int64_t b_rs, b_cs;
    float *c;
    int64_t c_rs, c_cs;
    int64_t nbatch;
    int a_vec, b_vec, c_vec; /* float4 paths allowed (stride 1 along the chunk, 16-byte aligned) */
    int64_t split, kslice;   /* K slices and the K of each (split 1: kslice = k) */
    float *part;             /* split-K's partial sums: [split][nbatch][m][n] */
};

/* Tiled GEMM with tile T: block (x, y, z) = (K slice x column tiles + column tile, row
 * tile, batch index), y and z grid-striding past the grid limit of 65535. */
template <class Ep, int T, bool A_ALONG_K, bool B_ALONG_K>
static __global__ void MR_LAUNCH_BOUNDS(mr_tile<T>::THREADS, mr_tile<T>::MIN_BLOCKS)
mr_k_sgemm(const mr_gemm_args p, const mr_batch bt, const Ep ep)
{
    typedef mr_tile<T> Tl;
    __shared__ mr_gemm_smem<Tl::BM, Tl::BN> sm;
    const int tx = (int)threadIdx.x % (Tl::BN / Tl::TN), ty = (int)threadIdx.x / (Tl::BN / Tl::TN);
    const mr_block_x<Tl> bx(p.n, p.kslice, p.k);
    const int64_t slice = bx.slice, n0 = bx.n0, k0 = bx.k0, k1 = bx.k1;
    const int64_t mtiles = (p.m + Tl::BM - 1) / Tl::BM;
    for (int64_t nb = blockIdx.z; nb < p.nbatch; nb += gridDim.z) {
        int64_t oa, ob, oc;
        mr_batch_offsets(bt, nb, oa, ob, oc);
        for (int64_t mt = blockIdx.y; mt < mtiles; mt += gridDim.y) {
            const int64_t m0 = mt * Tl::BM;
            mr_ld_strided<Tl::BM, A_ALONG_K, Tl::THREADS> la(p.a + oa + m0 * p.a_rs, p.a_rs, p.a_cs, p.m - m0, k1, p.a_vec);
            mr_ld_strided<Tl::BN, B_ALONG_K, Tl::THREADS> lb(p.b + ob + n0 * p.b_cs, p.b_cs, p.b_rs, p.n - n0, k1, p.b_vec);
            float acc[Tl::TM][Tl::TN];
            mr_mm_mainloop<Tl>(la, lb, k0, k1, sm, acc);
            /* a slice's raw sums go to its partials ([m][n], row-major), C's to C */
            const bool part = p.split > 1;
            float *const c = part ? p.part + (slice * p.nbatch + nb) * p.m * p.n : p.c + oc;
            const int64_t c_rs = part ? p.n : p.c_rs, c_cs = part ? 1 : p.c_cs;
            const bool vec = part ? (p.n % 4 == 0 && mr_aligned16_dev(p.part)) : p.c_vec;
MR_UNROLL
            for (int i = 0; i < Tl::TM; ++i) {
                const int64_t row = m0 + mr_tile_row<Tl>(i, ty);
                if (row >= p.m) continue;
                float *cr = c + row * c_rs;
MR_UNROLL
                for (int g = 0; g < Tl::TN / 4; ++g) {
                    const int64_t col0 = n0 + mr_tile_col<Tl>(g * 4, tx);
                    if (vec && col0 + 3 < p.n) {
                        mr_cu_st4(cr + col0, acc[i][g * 4], acc[i][g * 4 + 1], acc[i][g * 4 + 2], acc[i][g * 4 + 3]);
                    } else {
MR_UNROLL
                        for (int e = 0; e < 4; ++e)
                            if (col0 + e < p.n) cr[(col0 + e) * c_cs] = acc[i][g * 4 + e];
                    }
                }
            }
            /* then the epilogue, on what this thread stored, in a loop of its own: the
             * accumulators are dead by then (unrolled into the stores, a large tile's
             * epilogues spilled) */
            if (!std::is_same<Ep, mr_no_epilogue>::value && !part) {
MR_NO_UNROLL
                for (int i = 0; i < Tl::TM; ++i) {
                    const int64_t row = m0 + mr_tile_row<Tl>(i, ty);
                    if (row >= p.m) continue;
MR_NO_UNROLL
                    for (int j = 0; j < Tl::TN; ++j) {
                        const int64_t col = n0 + mr_tile_col<Tl>(j, tx);
                        if (col < p.n) ep(nb, row, col);
                    }
                }
            }
        }
    }
}

/* Split-K's second kernel: a thread an element of C adds its partial sums in slice order,
 * stores the sum and runs the epilogue. */
template <class Ep>
static __global__ void MR_LAUNCH_BOUNDS(MR_THREADS, 1) mr_k_sgemm_splitk(const mr_gemm_args p, const mr_batch bt, const Ep ep)
{
    const int64_t mn = p.m * p.n, total = p.nbatch * mn;
    const int64_t stride = (int64_t)gridDim.x * MR_THREADS;
    for (int64_t idx = (int64_t)blockIdx.x * MR_THREADS + threadIdx.x; idx < total; idx += stride) {
        const int64_t nb = idx / mn, r = idx - nb * mn, i = r / p.n, j = r - i * p.n;
        const float s = mr_sum_slices(p.part, p.split, total, idx);
        int64_t oa, ob, oc;
        mr_batch_offsets(bt, nb, oa, ob, oc);
        p.c[oc + i * p.c_rs + j * p.c_cs] = s;
        ep(nb, i, j);
    }
}

/*
 * m <= MR_GEMV_MAX_M (batch-1 inference: a GEMV): a tile of 32 or more rows would waste
 * most of its FMAs, so each output column j gets its own warp (lanes split K, then a
 * shuffle reduction) for B stored K-contiguous or few columns, or its own thread
 * (consecutive threads read consecutive columns of a row-major B, coalesced) otherwise.
 * Items are (batch, j) pairs.
 */
template <class Ep>
static __global__ void MR_LAUNCH_BOUNDS(MR_GEMV_WARP_THREADS, 1)
mr_k_gemv_warp(const mr_gemm_args p, const mr_batch bt, const Ep ep)
{
    const int lane = (int)threadIdx.x % 32;
    const int64_t warps = (int64_t)gridDim.x * (MR_GEMV_WARP_THREADS / 32);
    for (int64_t item = (int64_t)blockIdx.x * (MR_GEMV_WARP_THREADS / 32) + threadIdx.x / 32; item < p.nbatch * p.n;
         item += warps) {
        const int64_t nb = item / p.n, j = item - nb * p.n;
        int64_t oa, ob, oc;
        mr_batch_offsets(bt, nb, oa, ob, oc);
        const float *a = p.a + oa, *b = p.b + ob + j * p.b_cs;
        float acc[MR_GEMV_MAX_M] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t kk = lane; kk < p.k; kk += 32) {
            const float bv = b[kk * p.b_rs];
MR_UNROLL
            for (int i = 0; i < MR_GEMV_MAX_M; ++i)
                if (i < p.m) acc[i] = fmaf(a[i * p.a_rs + kk * p.a_cs], bv, acc[i]);
        }
MR_UNROLL
        for (int i = 0; i < MR_GEMV_MAX_M; ++i)
MR_UNROLL
            for (int off = 16; off >= 1; off /= 2) acc[i] += __shfl_xor_sync(MR_FULL_MASK, acc[i], off);
        if (lane == 0) {
MR_UNROLL
            for (int i = 0; i < MR_GEMV_MAX_M; ++i) {
                if (i < p.m) {
                    p.c[oc + i * p.c_rs + j * p.c_cs] = acc[i];
                    ep(nb, (int64_t)i, j);
                }
            }
        }
    }
}

template <class Ep>
static __global__ void MR_LAUNCH_BOUNDS(MR_THREADS, 1)
mr_k_gemv_thread(const mr_gemm_args p, const mr_batch bt, const Ep ep)
{
    const int64_t stride = (int64_t)gridDim.x * MR_THREADS;
    for (int64_t item = (int64_t)blockIdx.x * MR_THREADS + threadIdx.x; item < p.nbatch * p.n; item += stride) {
        const int64_t nb = item / p.n, j = item - nb * p.n;
        int64_t oa, ob, oc;
        mr_batch_offsets(bt, nb, oa, ob, oc);
        const float *a = p.a + oa, *b = p.b + ob + j * p.b_cs;
        float acc[MR_GEMV_MAX_M] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t kk = 0; kk < p.k; ++kk) {
            const float bv = b[kk * p.b_rs];
MR_UNROLL
            for (int i = 0; i < MR_GEMV_MAX_M; ++i)
                if (i < p.m) acc[i] = fmaf(a[i * p.a_rs + kk * p.a_cs], bv, acc[i]);
        }
MR_UNROLL
        for (int i = 0; i < MR_GEMV_MAX_M; ++i) {
            if (i < p.m) {
                p.c[oc + i * p.c_rs + j * p.c_cs] = acc[i];
                ep(nb, (int64_t)i, j);
            }
        }
    }
}


/* Whether float4 loads are allowed for an operand whose chunks run along the unit
 * stride: every chunk start (base + batch offsets + the other stride's multiples) must
 * be 16-byte aligned. */
static inline bool mr_vec_ok(const float *base, bool along_k, int64_t sx, int64_t sk, const mr_batch *bt,
                             const int64_t *bstr)
{
    if (!mr_aligned16(base)) return false;
    if (along_k ? (sk != 1 || sx % 4 != 0) : (sx != 1 || sk % 4 != 0)) return false;
    for (int d = 0; bt && d < bt->rank; ++d)
        if (bstr[d] % 4 != 0) return false;
    return true;
}

/* The kernels' arguments for a GEMM call (shared by mr_cuda_sgemm and mr_cuda_sgemm_tc):
 * false when the product is empty (nothing to launch). ak / bk: the loaders' chunk
 * directions. */
static inline bool mr_gemm_setup(mr_gemm_args &p, mr_batch &bt, bool &ak, bool &bk, int64_t m, int64_t n, int64_t k,
                                 const float *a, int64_t a_rs, int64_t a_cs, const float *b, int64_t b_rs,
                                 int64_t b_cs, float *c, int64_t c_rs, int64_t c_cs, const mr_batch *batch)
{
    bt.rank = 0;
    for (int d = 0; d < MR_MAX_BATCH; ++d) bt.ext[d] = 1, bt.a[d] = bt.b[d] = bt.c[d] = 0;
    if (batch) bt = *batch;
    p.nbatch = 1;
    for (int d = 0; d < bt.rank; ++d) p.nbatch *= bt.ext[d];
    ak = mr_plan_along_k(a_rs, a_cs), bk = mr_plan_along_k(b_cs, b_rs);
    if (m <= 0 || n <= 0 || p.nbatch <= 0) return false;
    p.m = m, p.n = n, p.k = k < 0 ? 0 : k;
    p.a = a, p.a_rs = a_rs, p.a_cs = a_cs;
    p.b = b, p.b_rs = b_rs, p.b_cs = b_cs;
    p.c = c, p.c_rs = c_rs, p.c_cs = c_cs;
    p.a_vec = mr_vec_ok(a, ak, a_rs, a_cs, &bt, bt.a);
    p.b_vec = mr_vec_ok(b, bk, b_cs, b_rs, &bt, bt.b);
    p.c_vec = mr_vec_ok(c, false, c_cs, c_rs, &bt, bt.c);
    p.split = 1, p.kslice = p.k, p.part = NULL;
    return true;
}


/* Where split-K's partial sums go: `floats` floats of device memory (a model's lie past
 * its arena). Empty ({NULL, 0}): no split. */
struct mr_scratch {
    float *p;
    int64_t floats;
};

/* The current device's SM count, which the plans fill (1 if it cannot be read). */
static inline int mr_device_sms()
{
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return 1;
    return sms < 1 ? 1 : sms;
}

/* The flat batch count of a product (1 without a batch). */
static inline int64_t mr_batch_count(const mr_batch *batch)
{
    int64_t nb = 1;
    for (int d = 0; batch && d < batch->rank; ++d) nb *= batch->ext[d];
    return nb;
}

/* f(std::integral_constant<int, t>()) for the tile kernel t, if MASK lets the caller
 * instantiate it (a model instantiates the tiles its plans may choose); otherwise
 * cudaErrorInvalidValue. */
template <unsigned MASK, class F> static cudaError_t mr_with_tile(int t, F f)
{
#define MR_TILE_DISPATCH(i, bm, bn, tm, tn, rate)                                      \
    case i:                                                                            \
        if constexpr ((MASK & (1u << i)) != 0) return f(std::integral_constant<int, i>()); \
        break;
    switch (t) {
        MR_TILE_LIST(MR_TILE_DISPATCH)
    default: break;
    }
#undef MR_TILE_DISPATCH
    return cudaErrorInvalidValue;
}

/* f(std::integral_constant<bool, A along K>(), ...<bool, B along K>()) for the operands'
 * layouts ak, bk (mr_plan_along_k): the one MASK fixes (MR_PLAN_LAYOUT; another is
 * cudaErrorInvalidValue), else each of the four. */
template <unsigned MASK, class F> static cudaError_t mr_with_layout(bool ak, bool bk, F f)
{
    typedef std::integral_constant<bool, true> T;
    typedef std::integral_constant<bool, false> N;
    if constexpr ((MASK & MR_PLAN_LAYOUT) != 0) {
        constexpr bool AK = (MASK & MR_PLAN_A_ALONG_K) != 0, BK = (MASK & MR_PLAN_B_ALONG_K) != 0;
        if (ak != AK || bk != BK) return cudaErrorInvalidValue;
        return f(std::integral_constant<bool, AK>(), std::integral_constant<bool, BK>());
    } else {
        return ak ? (bk ? f(T(), T()) : f(T(), N())) : (bk ? f(N(), T()) : f(N(), N()));
    }
}

/*
 * C[i*c_rs + j*c_cs] = sum_k A[i*a_rs + k*a_cs] * B[k*b_rs + j*b_cs], f32 with fused
 * multiply-adds (no TF32), for each batch index (batch NULL: one product), as plan `pl`
 * (mr_plan_gemm of this product) says; then ep(nb, i, j) by the thread that stored
 * element (i, j). part: the partial sums' scratch when pl splits K.
 */
template <unsigned MASK = MR_PLAN_ALL, class Ep>
static cudaError_t mr_cuda_sgemm_planned(cudaStream_t s, const mr_plan &pl, int64_t m, int64_t n, int64_t k,
                                         const float *a, int64_t a_rs, int64_t a_cs, const float *b, int64_t b_rs,
                                         int64_t b_cs, float *c, int64_t c_rs, int64_t c_cs, const mr_batch *batch,
                                         float *part, Ep ep)
{
    typedef void (*kernel_t)(const mr_gemm_args, const mr_batch, const Ep);
    mr_batch bt;
    mr_gemm_args p;
    bool ak, bk;
    if (!mr_gemm_setup(p, bt, ak, bk, m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, batch))
        return cudaGetLastError();
    const dim3 grid((unsigned)pl.grid[0], (unsigned)pl.grid[1], (unsigned)pl.grid[2]);
    kernel_t kern = NULL;
    switch (pl.kind) {
    case MR_PLAN_GEMV_WARP: kern = mr_k_gemv_warp<Ep>; break;
    case MR_PLAN_GEMV_THREAD: kern = mr_k_gemv_thread<Ep>; break;
    case MR_PLAN_TILED: break;
    default: return cudaErrorInvalidValue;
    }
    if (kern) {
        MR_LAUNCH(kern, grid, dim3((unsigned)pl.threads), s, p, bt, ep);
        return cudaGetLastError();
    }
    if (pl.split > 1) {
        if (!part) return cudaErrorInvalidValue;
        p.split = pl.split, p.kslice = pl.kslice, p.part = part;
    }
    const cudaError_t e = mr_with_tile<MASK>(pl.tile, [&](auto tile) {
        return mr_with_layout<MASK>(ak, bk, [&](auto a_along_k, auto b_along_k) {
            constexpr int T = decltype(tile)::value;
            kernel_t kt = mr_k_sgemm<Ep, T, decltype(a_along_k)::value, decltype(b_along_k)::value>;
            MR_LAUNCH(kt, grid, dim3(mr_tile<T>::THREADS), s, p, bt, ep);
            return cudaGetLastError();
        });
    });
    if (e != cudaSuccess || p.split == 1) return e;
    kernel_t reduce = mr_k_sgemm_splitk<Ep>;
    MR_LAUNCH(reduce, dim3(mr_blocks(p.nbatch * m * n)), dim3(MR_THREADS), s, p, bt, ep);
    return cudaGetLastError();
}

/* mr_cuda_sgemm_planned as planned for the current device, among the kernels MASK
 * allows, partial sums in `scratch`. */
template <unsigned MASK = MR_PLAN_ALL, class Ep>
static cudaError_t mr_cuda_sgemm(cudaStream_t s, int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs,
                                 int64_t a_cs, const float *b, int64_t b_rs, int64_t b_cs, float *c, int64_t c_rs,
                                 int64_t c_cs, const mr_batch *batch, mr_scratch scratch, Ep ep)
{
    const mr_plan pl = mr_plan_gemm(m, n, k, mr_batch_count(batch), b_rs, b_cs, 0, mr_device_sms(), MASK,
                                    scratch.p ? scratch.floats : 0);
    return mr_cuda_sgemm_planned<MASK>(s, pl, m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, batch, scratch.p, ep);
}

/* ------------------------------------------------------------------------------------ */
/* Convolution                                                                          */
/* ------------------------------------------------------------------------------------ */

struct mr_conv_args {
    const float *x, *w;
    float *out;
    int64_t n, c, h, wd, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups;
    int64_t cg;    /* input channels a group */
    int64_t M;     /* output channels a group: the implicit GEMM's rows */
    int64_t K;     /* cg * kh * kw */
    int64_t ncols; /* n * oh * ow: the implicit GEMM's columns */
    int w_vec;     /* float4 weight loads allowed (K % 4 == 0, aligned) */
    int64_t split, kslice; /* K slices and the K of each (split 1: kslice = K) */
    float *part;           /* split-K's partial sums: [split][groups][M][ncols] */
};

/*
 * The implicit GEMM's B tile (MR_GEMM_BK x BN, THREADS threads): row kk = (ic*kh + ky)*kw
 * + kx of the group's im2col matrix, column = (b*oh + y)*ow + x. Each thread owns one
 * column (tid % BN) and R consecutive rows (tid / BN * R..): the column's image,
 * y*sh - ph and x*sw - pw are worked out once, and each tile decodes its first row once
 * and steps (ic, ky, kx) on, so the per-element work is one bounds test. A warp reads 32
 * consecutive output positions of one tap: coalesced for stride 1. K ends at kend (the
 * matrix's, or a split-K slice's).
 */
template <int BN, int THREADS> struct mr_ld_im2col {
    static constexpr int R = BN * MR_GEMM_BK / THREADS;
    static_assert(R >= 1 && R * THREADS == BN * MR_GEMM_BK, "the tile's rows split evenly over the threads");
    const float *xb; /* the column's image, at the group's first channel */
    int iy0, ix0;
    bool valid;
    int kr0;
    int64_t kend;
    float r[R];

    __device__ __forceinline__ mr_ld_im2col(const mr_conv_args &p, int64_t g, int64_t n0, int64_t kend_) : kend(kend_)
    {
        const int64_t col = n0 + (int)threadIdx.x % BN;
        const int64_t ohw = p.oh * p.ow;
        kr0 = ((int)threadIdx.x / BN) * R;
        valid = col < p.ncols;
        const int64_t b = valid ? col / ohw : 0, pos = col - b * ohw;
        const int64_t y = pos / p.ow, x = pos - y * p.ow;
        xb = p.x + (b * p.c + g * p.cg) * p.h * p.wd;
        iy0 = (int)(y * p.sh - p.ph);
        ix0 = (int)(x * p.sw - p.pw);
    }

    /* The K tile starting at k0: elem(e, q) for each of the thread's rows e, q the image
     * element (null in the padding, past the columns or past K's end). */
    template <class E> __device__ __forceinline__ void each(const mr_conv_args &p, int64_t k0, E elem) const
    {
        const int khw = (int)(p.kh * p.kw), kw = (int)p.kw;
        const int64_t kidx = k0 + kr0;
        int ic = (int)(kidx / khw);
        const int rem = (int)(kidx - (int64_t)ic * khw);
        int ky = rem / kw, kx = rem - ky * kw;
MR_UNROLL
        for (int e = 0; e < R; ++e) {
            const float *q = nullptr;
            if (valid && kidx + e < kend) {
                const int iy = iy0 + ky * (int)p.dh, ix = ix0 + kx * (int)p.dw;
                if ((unsigned)iy < (unsigned)p.h && (unsigned)ix < (unsigned)p.wd) q = xb + (ic * p.h + iy) * p.wd + ix;
            }
            elem(e, q);
            if (++kx == kw) {
                kx = 0;
                if (++ky == (int)p.kh) ky = 0, ++ic;
            }
        }
    }

    __device__ __forceinline__ void load(const mr_conv_args &p, int64_t k0)
    {
        each(p, k0, [&](int e, const float *q) { r[e] = q ? *q : 0.0f; });
    }

    __device__ __forceinline__ void store(float (*s)[BN]) const
    {
        const int col = (int)threadIdx.x % BN;
MR_UNROLL
        for (int e = 0; e < R; ++e) s[kr0 + e][col] = r[e];
    }

#if MR_TC_ARCH_OK
    /* Global -> the tensor-core kernels' K-major shared tile s (layout Tl) by 4-byte cp.async;
     * zeros stored at once. */
    template <class Tl> __device__ __forceinline__ void copy(const mr_conv_args &p, int64_t k0, float *s) const
    {
        static_assert(!Tl::X_MAJOR && Tl::BX == BN, "the im2col tile is K-major");
        const int col = (int)threadIdx.x % BN;
        each(p, k0, [&](int e, const float *q) {
            float *d = s + Tl::idx(col, kr0 + e);
            if (q)
                mr_cp_async<4>(d, q);
            else
                *d = 0.0f;
        });
    }
#endif
};

/* mr_ld_im2col with the conv's parameters bound, in the loader shape the main loop wants. */
template <int BN, int THREADS> struct mr_ld_im2col_bound {
    mr_ld_im2col<BN, THREADS> ld;
    const mr_conv_args &p;
    __device__ __forceinline__ mr_ld_im2col_bound(const mr_conv_args &p_, int64_t g, int64_t n0, int64_t kend)
        : ld(p_, g, n0, kend), p(p_)
    {
    }
    __device__ __forceinline__ void load(int64_t k0) { ld.load(p, k0); }
    __device__ __forceinline__ void store(float (*s)[BN]) const { ld.store(s); }
#if MR_TC_ARCH_OK
    template <class Tl> __device__ __forceinline__ void copy(int64_t k0, float *s) const { ld.template copy<Tl>(p, k0, s); }
#endif
};

/* Implicit-GEMM convolution with tile T: block (x, y, z) = (K slice x position tiles +
 * position tile, output-channel tile, group); rows are the group's output channels (A = its weights,
 * [M, K] row-major), columns all n*oh*ow output positions, so small images still fill
 * the tiles. */
template <class Ep, int T>
static __global__ void MR_LAUNCH_BOUNDS(mr_tile<T>::THREADS, mr_tile<T>::MIN_BLOCKS)
mr_k_conv2d(const mr_conv_args p, const Ep ep)
{
    typedef mr_tile<T> Tl;
    __shared__ mr_gemm_smem<Tl::BM, Tl::BN> sm;
    const int tx = (int)threadIdx.x % (Tl::BN / Tl::TN), ty = (int)threadIdx.x / (Tl::BN / Tl::TN);
    const mr_block_x<Tl> bx(p.ncols, p.kslice, p.K);
    const int64_t slice = bx.slice, n0 = bx.n0, k0 = bx.k0, k1 = bx.k1;
    const int64_t mtiles = (p.M + Tl::BM - 1) / Tl::BM;
    const int64_t ohw = p.oh * p.ow;
    for (int64_t g = blockIdx.z; g < p.groups; g += gridDim.z) {
        for (int64_t mt = blockIdx.y; mt < mtiles; mt += gridDim.y) {
            const int64_t m0 = mt * Tl::BM;
            mr_ld_strided<Tl::BM, true, Tl::THREADS> la(p.w + (g * p.M + m0) * p.K, p.K, 1, p.M - m0, k1, p.w_vec);
            mr_ld_im2col_bound<Tl::BN, Tl::THREADS> lb(p, g, n0, k1);
            float acc[Tl::TM][Tl::TN];
            mr_mm_mainloop<Tl>(la, lb, k0, k1, sm, acc);
            if (p.split > 1) {
                mr_store_partial<Tl>(p.part + (slice * p.groups + g) * p.M * p.ncols, p.M, p.ncols, m0, n0, acc);
                continue;
            }
            /* the thread's columns as (image, position) */
            int64_t cb[Tl::TN], cpos[Tl::TN];
MR_UNROLL
            for (int j = 0; j < Tl::TN; ++j) {
                const int64_t col = n0 + mr_tile_col<Tl>(j, tx);
                cb[j] = col / ohw;
                cpos[j] = col - cb[j] * ohw;
            }
MR_UNROLL
            for (int i = 0; i < Tl::TM; ++i) {
                const int64_t row = m0 + mr_tile_row<Tl>(i, ty);
                if (row >= p.M) continue;
                const int64_t oc = g * p.M + row;
MR_UNROLL
                for (int j = 0; j < Tl::TN; ++j)
                    if (cb[j] < p.n) p.out[(cb[j] * p.o + oc) * ohw + cpos[j]] = acc[i][j];
            }
            /* the epilogue in a loop of its own, as the GEMM's */
            if (!std::is_same<Ep, mr_no_epilogue>::value) {
MR_NO_UNROLL
                for (int i = 0; i < Tl::TM; ++i) {
                    const int64_t row = m0 + mr_tile_row<Tl>(i, ty);
                    if (row >= p.M) continue;
MR_NO_UNROLL
                    for (int j = 0; j < Tl::TN; ++j)
                        if (cb[j] < p.n) ep(cb[j], g * p.M + row, cpos[j]);
                }
            }
        }
    }
}

/* Split-K's second kernel for a convolution: a thread an output element (element idx of
 * the partials' [groups][M][ncols], whose group and row are its output channel). */
template <class Ep>
static __global__ void MR_LAUNCH_BOUNDS(MR_THREADS, 1) mr_k_conv2d_splitk(const mr_conv_args p, const Ep ep)
{
    const int64_t ohw = p.oh * p.ow, total = p.groups * p.M * p.ncols;
    const int64_t stride = (int64_t)gridDim.x * MR_THREADS;
    for (int64_t idx = (int64_t)blockIdx.x * MR_THREADS + threadIdx.x; idx < total; idx += stride) {
        const int64_t oc = idx / p.ncols, col = idx - oc * p.ncols, b = col / ohw, pos = col - b * ohw;
        const float s = mr_sum_slices(p.part, p.split, total, idx);
        p.out[(b * p.o + oc) * ohw + pos] = s;
        ep(b, oc, pos);
    }
}
/* Few output channels a group (depthwise convolution: one): the GEMM tile would be
 * mostly idle rows, so one thread per output element sums its taps directly. */
template <class Ep>
static __global__ void MR_LAUNCH_BOUNDS(MR_THREADS, 1)
mr_k_conv2d_direct(const mr_conv_args p, const Ep ep)
{
    const int64_t ohw = p.oh * p.ow, total = p.n * p.o * ohw;
    const int64_t stride = (int64_t)gridDim.x * MR_THREADS;
    for (int64_t idx = (int64_t)blockIdx.x * MR_THREADS + threadIdx.x; idx < total; idx += stride) {
        const int64_t pos = idx % ohw, boc = idx / ohw;
        const int64_t oc = boc % p.o, b = boc / p.o;
        const int64_t g = oc / p.M;
        const int64_t y = pos / p.ow, x = pos - y * p.ow;
        const float *xb = p.x + (b * p.c + g * p.cg) * p.h * p.wd;
        const float *wr = p.w + oc * p.K;
        float acc = 0.0f;
        for (int64_t ic = 0; ic < p.cg; ++ic) {
            for (int64_t ky = 0; ky < p.kh; ++ky) {
                const int64_t iy = y * p.sh + ky * p.dh - p.ph;
                if (iy < 0 || iy >= p.h) continue;
                const float *xr = xb + (ic * p.h + iy) * p.wd;
                const float *wk = wr + (ic * p.kh + ky) * p.kw;
                for (int64_t kx = 0; kx < p.kw; ++kx) {
                    const int64_t ix = x * p.sw + kx * p.dw - p.pw;
                    if (ix >= 0 && ix < p.wd) acc = fmaf(xr[ix], wk[kx], acc);
                }
            }
        }
        p.out[idx] = acc;
        ep(b, oc, pos);
    }
}


/*
 * What mr_cuda_conv2d and mr_cuda_conv2d_tc run. A 1x1, stride 1, unpadded convolution of
 * one group is, per image, out[b] = W [o, c] x X[b] [c, h*w]: a GEMM batched over the
 * images, B row-major (the float4 loads) and W broadcast; then this returns true with its
 * batch in bt. Otherwise it returns false with the implicit GEMM's arguments in p.
 */
static inline bool mr_conv_setup(mr_conv_args &p, mr_batch &bt, const float *x, const float *w, float *out, int64_t n,
                                 int64_t c, int64_t h, int64_t wd, int64_t o, int64_t kh, int64_t kw, int64_t oh,
                                 int64_t ow, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                                 int64_t groups)
{
    const int64_t ohw = oh * ow;
    if (mr_conv_is_gemm(h, wd, kh, kw, oh, ow, sh, sw, ph, pw, groups)) {
        bt.rank = 1;
        bt.ext[0] = n;
        bt.a[0] = 0;
        bt.b[0] = c * h * wd;
        bt.c[0] = o * ohw;
        for (int d = 1; d < MR_MAX_BATCH; ++d) bt.ext[d] = 1, bt.a[d] = bt.b[d] = bt.c[d] = 0;
        return true;
    }
    p.x = x, p.w = w, p.out = out;
    p.n = n, p.c = c, p.h = h, p.wd = wd, p.o = o, p.kh = kh, p.kw = kw, p.oh = oh, p.ow = ow;
    p.sh = sh, p.sw = sw, p.ph = ph, p.pw = pw, p.dh = dh, p.dw = dw, p.groups = groups;
    p.cg = c / groups;
    p.M = o / groups;
    p.K = p.cg * kh * kw;
    p.ncols = n * ohw;
    p.w_vec = mr_aligned16(w) && p.K % 4 == 0;
    p.split = 1, p.kslice = p.K, p.part = NULL;
    return false;
}


/*
 * out[b, oc, y, x] = sum over ic of oc's group, ky, kx of
 * x[b, ic, y*sh + ky*dh - ph, x*sw + kx*dw - pw] * w[oc, ic - group start, ky, kx],
 * then ep(b, oc, y*ow + x). NCHW contiguous. As plan `pl` (mr_plan_conv of this
 * convolution) says; part: the partial sums' scratch when pl splits K.
 */
template <unsigned MASK = MR_PLAN_ALL, class Ep>
static cudaError_t mr_cuda_conv2d_planned(cudaStream_t s, const mr_plan &pl, const float *x, const float *w, float *out,
                                          int64_t n, int64_t c, int64_t h, int64_t wd, int64_t o, int64_t kh,
                                          int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t ph,
                                          int64_t pw, int64_t dh, int64_t dw, int64_t groups, float *part, Ep ep)
{
    typedef void (*kernel_t)(const mr_conv_args, const Ep);
    if (n <= 0 || o <= 0 || oh <= 0 || ow <= 0 || groups <= 0) return cudaGetLastError();
    const int64_t ohw = oh * ow;
    mr_conv_args p;
    mr_batch bt;
    if (mr_conv_setup(p, bt, x, w, out, n, c, h, wd, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups))
        return mr_cuda_sgemm_planned<MASK>(s, pl, o, ohw, c, w, c, 1, x, ohw, 1, out, ohw, 1, &bt, part, ep);
    const dim3 grid((unsigned)pl.grid[0], (unsigned)pl.grid[1], (unsigned)pl.grid[2]);
    if (pl.kind == MR_PLAN_CONV_DIRECT) {
        kernel_t kern = mr_k_conv2d_direct<Ep>;
        MR_LAUNCH(kern, grid, dim3(MR_THREADS), s, p, ep);
        return cudaGetLastError();
    }
    if (pl.kind != MR_PLAN_TILED) return cudaErrorInvalidValue;
    if (pl.split > 1) {
        if (!part) return cudaErrorInvalidValue;
        p.split = pl.split, p.kslice = pl.kslice, p.part = part;
    }
    const cudaError_t e = mr_with_tile<MASK>(pl.tile, [&](auto tile) {
        constexpr int T = decltype(tile)::value;
        kernel_t kt = mr_k_conv2d<Ep, T>;
        MR_LAUNCH(kt, grid, dim3(mr_tile<T>::THREADS), s, p, ep);
        return cudaGetLastError();
    });
    if (e != cudaSuccess || p.split == 1) return e;
    kernel_t reduce = mr_k_conv2d_splitk<Ep>;
    MR_LAUNCH(reduce, dim3(mr_blocks(p.groups * p.M * p.ncols)), dim3(MR_THREADS), s, p, ep);
    return cudaGetLastError();
}

/* mr_cuda_conv2d_planned as planned for the current device, among the kernels MASK
 * allows, partial sums in `scratch`. */
template <unsigned MASK = MR_PLAN_ALL, class Ep>
static cudaError_t mr_cuda_conv2d(cudaStream_t s, const float *x, const float *w, float *out, int64_t n, int64_t c,
                                  int64_t h, int64_t wd, int64_t o, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                                  int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                                  int64_t groups, mr_scratch scratch, Ep ep)
{
    const mr_plan pl = mr_plan_conv(n, c, h, wd, o, kh, kw, oh, ow, sh, sw, ph, pw, groups, 0, mr_device_sms(), MASK,
                                    scratch.p ? scratch.floats : 0);
    return mr_cuda_conv2d_planned<MASK>(s, pl, x, w, out, n, c, h, wd, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw,
                                        groups, scratch.p, ep);
}
/* Tensor-core GEMM and convolution (reduced precision, sm_80+)                        */
/* ------------------------------------------------------------------------------------ */

/*
 * The precisions a product may use (the compiler's --precision): MR_F32 is exact f32 (the
 * kernels above); the others round both operands of every product to TF32 (10 mantissa
 * bits, round to nearest, ties away: cvt.rna.tf32.f32), BF16 or F16 (round to nearest
 * even) and multiply on tensor cores, accumulating in f32.
 *
 * Same tiling as the exact kernels: a block of 256 threads computes a 128 x 64 tile of C, K
 * 16 at a time, through the same loaders (mr_ld_strided, mr_ld_im2col). But the tiles are
 * not staged in registers: a MR_TC_STAGES-deep ring of shared tiles is filled by cp.async,
 * the copies of tile t + 2 in flight while tile t is multiplied. Shared memory holds the
 * operands as f32, and each element is rounded to the format (cvt) as a fragment is read
 * from it, so one f32 layout serves every precision and cp.async copies the matrices as they
 * are. An operand contiguous along K (row-major A, a transposed B, the convolution's weights)
 * is stored x-major, [x][k], so that its 16-byte chunks stay whole; the others K-major,
 * [k][x], as the exact kernels store them (mr_tc_tile says how either avoids bank
 * conflicts). The 8 warps form a 4 x 2 grid of 32 x 32 warp tiles; each warp multiplies by
 * PTX `mma.sync` (m16n8k8 for tf32, two steps per K tile; m16n8k16 for bf16/f16, one) on 2 x
 * 4 tiles of 16 x 8, reading its operands' fragments by the PTX ISA's fragment layouts, and
 * holds 2 x 4 x 4 f32 accumulators a lane. Edges: elements past the matrix are stored as
 * zeros, so fragments there multiply zeros, and the stores are guarded.
 *
 * The epilogue: each lane knows the tile's rows and columns its accumulators are (the
 * layout of mma's C), so it stores them and calls the epilogue on each, with no staging.
 */
enum mr_precision { MR_F32 = 0, MR_TF32 = 1, MR_BF16 = 2, MR_F16 = 3 };

#ifndef MR_TC_MIN_BLOCKS
#define MR_TC_MIN_BLOCKS 2
#endif
#define MR_TC_BM 128 /* the tensor-core kernels' tile: 128 x 64 */
#define MR_TC_BN 64
#define MR_TC_WARP_M 32 /* a warp's tile: 2 x 4 mma tiles of 16 x 8 */
#define MR_TC_WARP_N 32
/* K tiles in shared memory: two in flight while one is multiplied. At most 13 KiB a stage,
 * so three stay within the 48 KiB of static shared memory, and two blocks fit an SM. */
#define MR_TC_STAGES 3

/* A padded tile of LD floats a row: element (x, k) at [x][k] (X_MAJOR) or [k][x]. */
template <int LD, bool X_MAJOR_> struct mr_tc_padded {
    static constexpr bool X_MAJOR = X_MAJOR_;
    static __host__ __device__ __forceinline__ int idx(int x, int k) { return X_MAJOR ? x * LD + k : k * LD + x; }
};

/*
 * One operand's K tile in shared memory (BX rows of its outer axis by MR_GEMM_BK along K), as
 * f32, for fragments of mma's K = KS (8: tf32, one element a register; 16: two). Element
 * (x, k) is at idx(x, k):
 * - X_MAJOR: [x][k], 16 floats a row. Row x keeps its four 16-byte chunks permuted, chunk c
 *   at c ^ swz(x), so that a warp's fragment read meets no bank conflict: lanes 4g + t read
 *   rows g (banks 16 (g & 1) + 4 chunk + ...), tf32 one float at k = t, the 16-bit formats
 *   the pair at 2t and 2t + 1 as one 8-byte read (conflict-free per half warp).
 * - else [k][x], rows padded to LD floats: LD = 8 mod 32 for tf32 (lane 4g + t at 8t + g) and
 *   4 mod 32 for the 16-bit formats (rows 2t and 2t + 1: 8t + g, 8t + 4 + g).
 * Rows stay 16-byte aligned, as cp.async's 16-byte copies need.
 */
template <int BX_, bool X_MAJOR_, int KS> struct mr_tc_tile {
    static_assert(MR_GEMM_BK == 16, "an x-major row is four 16-byte chunks");
    static constexpr int BX = BX_;
    static constexpr bool X_MAJOR = X_MAJOR_;
    static constexpr int LD = BX + (KS == 8 ? 8 : 4);
    static constexpr int SIZE = X_MAJOR ? BX * MR_GEMM_BK : MR_GEMM_BK * LD;
    static __host__ __device__ __forceinline__ int idx(int x, int k)
    {
        if (X_MAJOR) {
            const int swz = KS == 8 ? (x >> 1) & 3 : x & 2;
            return x * MR_GEMM_BK + (((k >> 2) ^ swz) << 2 | (k & 3));
        }
        return mr_tc_padded<LD, false>::idx(x, k);
    }
};

/* Elements (x, k) and (x, k + 1) of a tile of layout Tl (k even): one 8-byte read where
 * the tile is x-major, two otherwise. */
template <class Tl> static __device__ __forceinline__ float2 mr_tc_pair(const float *s, int x, int k)
{
    if (Tl::X_MAJOR) return *reinterpret_cast<const float2 *>(s + Tl::idx(x, k));
    return make_float2(s[Tl::idx(x, k)], s[Tl::idx(x, k + 1)]);
}

/* The shared ring of the A and B tiles. */
template <class TA, class TB> struct alignas(128) mr_tc_smem {
    float a[MR_TC_STAGES][TA::SIZE];
    float b[MR_TC_STAGES][TB::SIZE];
};

/* A warp's accumulators: [16-row tile][8-column tile][mma's c registers]. */
typedef float mr_tc_acc[2][4][4];

#if MR_TC_ARCH_OK
/* d += a b on a 16 x 8 tile in precision P (mr_ptx.h's instructions). */
template <int P>
static __device__ __forceinline__ void mr_mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    if (P == MR_TF32)
        mr_mma_tf32(d, a, b);
    else if (P == MR_BF16)
        mr_mma_bf16(d, a, b);
    else
        mr_mma_f16(d, a, b);
}

/* The formats: KS, mma's K; reg<Tl>(s, x, k), the mma register holding element (x, k) of the
 * shared tile s (layout Tl) rounded to the format -- with (x, k + 1) in its high half for the
 * 16-bit formats. Each element is rounded the same way wherever it is read. */
template <int P> struct mr_tc_fmt;
template <> struct mr_tc_fmt<MR_TF32> {
    static constexpr int KS = 8;
    template <class Tl> static __device__ __forceinline__ uint32_t reg(const float *s, int x, int k)
    {
        return mr_tf32_bits(s[Tl::idx(x, k)]);
    }
};
static __device__ __forceinline__ unsigned short mr_bits16(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
static __device__ __forceinline__ unsigned short mr_bits16(__half v) { return __half_as_ushort(v); }
template <class F> struct mr_tc_fmt16 {
    static constexpr int KS = 16;
    template <class Tl> static __device__ __forceinline__ uint32_t reg(const float *s, int x, int k)
    {
        const float2 v = mr_tc_pair<Tl>(s, x, k);
        return (uint32_t)mr_bits16(F::cvt(v.x)) | (uint32_t)mr_bits16(F::cvt(v.y)) << 16;
    }
};
struct mr_cvt_bf16 {
    static __device__ __forceinline__ __nv_bfloat16 cvt(float v) { return __float2bfloat16_rn(v); }
};
struct mr_cvt_f16 {
    static __device__ __forceinline__ __half cvt(float v) { return __float2half_rn(v); }
};
template <> struct mr_tc_fmt<MR_BF16> : mr_tc_fmt16<mr_cvt_bf16> {};
template <> struct mr_tc_fmt<MR_F16> : mr_tc_fmt16<mr_cvt_f16> {};

/* The shared layouts of precision P's A tile (x-major when A_ALONG_K) and B tile. */
template <int P, bool A_ALONG_K, bool B_ALONG_K> struct mr_tc_layout {
    typedef mr_tc_tile<MR_TC_BM, A_ALONG_K, mr_tc_fmt<P>::KS> A;
    typedef mr_tc_tile<MR_TC_BN, B_ALONG_K, mr_tc_fmt<P>::KS> B;
    typedef mr_tc_smem<A, B> smem;
};

/* The tensor-core K loop: acc = the warp's 32 x 32 part of A tile x B tile over all of K.
 * All threads of the block must call it, and it returns when they are done with sm.
 * Lane l reads the fragments' elements at g = l / 4 and t = l % 4 (the layouts in
 * cuda_emu.h): A's at rows g and g + 8 of each 16-row tile, B's at column g of each
 * 8-column tile.
 *
 * The pipeline: the prologue puts tiles 0 .. STAGES - 2 in flight, a commit group each.
 * Iteration t waits for all but the newest STAGES - 2 groups (its own thread's copies of
 * tile t have landed), then meets the block (everyone's have, and everyone is done with
 * tile t - 1), refills tile t - 1's stage with tile t + STAGES - 1, and multiplies tile t.
 * Every iteration commits a group, empty past the last tile, so the count stays exact. */
template <int P, class L, class LA, class LB>
static __device__ __forceinline__ void mr_tc_mainloop(const LA &la, const LB &lb, int64_t k, typename L::smem &sm,
                                                      mr_tc_acc &acc)
{
    typedef mr_tc_fmt<P> F;
    typedef typename L::A TA;
    typedef typename L::B TB;
    const int warp = (int)threadIdx.x / 32, wm = warp % 4, wn = warp / 4;
    const int lane = (int)threadIdx.x % 32, g = lane / 4, t = lane % 4;
MR_UNROLL
    for (int i = 0; i < 2; ++i)
MR_UNROLL
        for (int j = 0; j < 4; ++j)
MR_UNROLL
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
    const int64_t tiles = (k + MR_GEMM_BK - 1) / MR_GEMM_BK;
    if (tiles == 0) return;
MR_UNROLL
    for (int st = 0; st < MR_TC_STAGES - 1; ++st) {
        if (st < tiles) {
            la.template copy<TA>(st * MR_GEMM_BK, sm.a[st]);
            lb.template copy<TB>(st * MR_GEMM_BK, sm.b[st]);
        }
        mr_cp_async_commit();
    }
    for (int64_t tt = 0; tt < tiles; ++tt) {
        mr_cp_async_wait<MR_TC_STAGES - 2>();
        __syncthreads();
        const int64_t next = tt + MR_TC_STAGES - 1;
        if (next < tiles) {
            const int st = (int)(next % MR_TC_STAGES);
            la.template copy<TA>(next * MR_GEMM_BK, sm.a[st]);
            lb.template copy<TB>(next * MR_GEMM_BK, sm.b[st]);
        }
        mr_cp_async_commit();
        const float *sa = sm.a[tt % MR_TC_STAGES], *sb = sm.b[tt % MR_TC_STAGES];
        /* tf32's two k8 steps unrolled: rolled, the kernels spilled */
MR_UNROLL
        for (int ks = 0; ks < MR_GEMM_BK; ks += F::KS) {
            /* the element of register r: tf32 (x + 8 (r & 1), k + 4 (r >> 1)) for A and
             * (x, k + 4 r) for B; 16-bit (x + 8 (r & 1), k + 8 (r >> 1)) and (x, k + 8 r),
             * from k = t (tf32) or 2t (16-bit) */
            const int k0 = ks + (F::KS == 8 ? t : 2 * t), kstep = F::KS / 2;
            /* B's fragments for the step, then A's one 16-row tile at a time (fewer live
             * registers: the kernels run two blocks an SM, 128 registers a thread) */
            uint32_t fb[4][2];
MR_UNROLL
            for (int j = 0; j < 4; ++j) {
                const int x = wn * MR_TC_WARP_N + j * 8 + g;
MR_UNROLL
                for (int r = 0; r < 2; ++r) fb[j][r] = F::template reg<TB>(sb, x, k0 + kstep * r);
            }
MR_UNROLL
            for (int i = 0; i < 2; ++i) {
                const int x = wm * MR_TC_WARP_M + i * 16 + g;
                uint32_t fa[4];
MR_UNROLL
                for (int r = 0; r < 4; ++r) fa[r] = F::template reg<TA>(sa, x + 8 * (r & 1), k0 + kstep * (r >> 1));
MR_UNROLL
                for (int j = 0; j < 4; ++j) mr_mma<P>(acc[i][j], fa, fb[j]);
            }
        }
    }
    /* the last tile read before a later call refills the stages */
    __syncthreads();
}

/* Where the GEMM's and the convolution's tiles go: (r, c) of the block's tile, value v;
 * stored if inside the matrix, then the epilogue. Plain structs passed by value (a lambda
 * capturing the kernel's parameters by reference would copy them to local memory). */
template <class Ep> struct mr_tc_out_gemm {
    float *c;
    int64_t m, n, c_rs, c_cs, nb, m0, n0;
    Ep ep;
    __device__ __forceinline__ void operator()(int r, int cc, float v) const
    {
        const int64_t row = m0 + r, col = n0 + cc;
        if (row < m && col < n) {
            c[row * c_rs + col * c_cs] = v;
            ep(nb, row, col);
        }
    }
};
template <class Ep> struct mr_tc_out_conv {
    float *out;
    int64_t M, ncols, ohw, o, g, m0, n0;
    Ep ep;
    __device__ __forceinline__ void operator()(int r, int cc, float v) const
    {
        const int64_t row = m0 + r, col = n0 + cc;
        if (row < M && col < ncols) {
            const int64_t b = col / ohw, pos = col - b * ohw, oc = g * M + row;
            out[(b * o + oc) * ohw + pos] = v;
            ep(b, oc, pos);
        }
    }
};

/* The warp's accumulators out: st(r, c, v) for each, r and c relative to the block's tile,
 * by the lane that holds it (mma's C layout: register r at row g + 8 (r >> 1), column
 * 2t + (r & 1) of its 16 x 8 tile). */
template <class St>
static __device__ __forceinline__ void mr_tc_store(mr_tc_acc &acc, const St &st)
{
    const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32, wm = warp % 4, wn = warp / 4;
    const int g = lane / 4, t = lane % 4;
    /* A rolled loop over the 8 tiles (unrolled, nvcc computes all 32 stores' addresses
     * before the K loop and holds them through it), each storing tile [0][0] and then
     * moving the next one there: acc is only ever indexed by constants (an index that
     * varies would put it in local memory). Consumes acc. */
MR_NO_UNROLL
    for (int tile = 0; tile < 8; ++tile) {
        const int i = tile / 4, j = tile % 4;
MR_UNROLL
        for (int r = 0; r < 4; ++r)
            st(wm * MR_TC_WARP_M + i * 16 + g + 8 * (r >> 1), wn * MR_TC_WARP_N + j * 8 + 2 * t + (r & 1), acc[0][0][r]);
MR_UNROLL
        for (int f = 0; f < 7; ++f)
MR_UNROLL
            for (int r = 0; r < 4; ++r) acc[f / 4][f % 4][r] = acc[(f + 1) / 4][(f + 1) % 4][r];
    }
}
#endif /* MR_TC_ARCH_OK */

/* mr_k_sgemm on tensor cores, P = MR_TF32, MR_BF16 or MR_F16. */
template <class Ep, int P, bool A_ALONG_K, bool B_ALONG_K>
static __global__ void MR_LAUNCH_BOUNDS(MR_THREADS, MR_TC_MIN_BLOCKS)
mr_k_sgemm_tc(const mr_gemm_args p, const mr_batch bt, const Ep ep)
{
#if MR_TC_ARCH_OK
    typedef mr_tc_layout<P, A_ALONG_K, B_ALONG_K> L;
    __shared__ typename L::smem sm;
    const int64_t n0 = (int64_t)blockIdx.x * MR_TC_BN;
    const int64_t mtiles = (p.m + MR_TC_BM - 1) / MR_TC_BM;
    for (int64_t nb = blockIdx.z; nb < p.nbatch; nb += gridDim.z) {
        int64_t oa, ob, oc;
        mr_batch_offsets(bt, nb, oa, ob, oc);
        for (int64_t mt = blockIdx.y; mt < mtiles; mt += gridDim.y) {
            const int64_t m0 = mt * MR_TC_BM;
            mr_ld_strided<MR_TC_BM, A_ALONG_K> la(p.a + oa + m0 * p.a_rs, p.a_rs, p.a_cs, p.m - m0, p.k, p.a_vec);
            mr_ld_strided<MR_TC_BN, B_ALONG_K> lb(p.b + ob + n0 * p.b_cs, p.b_cs, p.b_rs, p.n - n0, p.k, p.b_vec);
            mr_tc_acc acc;
            mr_tc_mainloop<P, L>(la, lb, p.k, sm, acc);
            const mr_tc_out_gemm<Ep> out = {p.c + oc, p.m, p.n, p.c_rs, p.c_cs, nb, m0, n0, ep};
            mr_tc_store(acc, out);
        }
    }
#else
    (void)p, (void)bt, (void)ep;
    __trap();
#endif
}

/* mr_k_conv2d on tensor cores. */
template <class Ep, int P>
static __global__ void MR_LAUNCH_BOUNDS(MR_THREADS, MR_TC_MIN_BLOCKS)
mr_k_conv2d_tc(const mr_conv_args p, const Ep ep)
{
#if MR_TC_ARCH_OK
    typedef mr_tc_layout<P, true, false> L; /* weights along K; im2col K-major */
    __shared__ typename L::smem sm;
    const int64_t n0 = (int64_t)blockIdx.x * MR_TC_BN;
    const int64_t mtiles = (p.M + MR_TC_BM - 1) / MR_TC_BM;
    const int64_t ohw = p.oh * p.ow;
    for (int64_t g = blockIdx.z; g < p.groups; g += gridDim.z) {
        for (int64_t mt = blockIdx.y; mt < mtiles; mt += gridDim.y) {
            const int64_t m0 = mt * MR_TC_BM;
            mr_ld_strided<MR_TC_BM, true> la(p.w + (g * p.M + m0) * p.K, p.K, 1, p.M - m0, p.K, p.w_vec);
            mr_ld_im2col_bound<MR_TC_BN, MR_THREADS> lb(p, g, n0, p.K);
            mr_tc_acc acc;
            mr_tc_mainloop<P, L>(la, lb, p.K, sm, acc);
            const mr_tc_out_conv<Ep> out = {p.out, p.M, p.ncols, ohw, p.o, g, m0, n0, ep};
            mr_tc_store(acc, out);
        }
    }
#else
    (void)p, (void)ep;
    __trap();
#endif
}

/* Whether the current device has the tensor-core paths (compute capability 8.0+). */
static inline bool mr_tc_device_ok()
{
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major >= 8;
}

/*
 * mr_cuda_sgemm with the products' operands rounded to P (see mr_precision) and
 * multiplied on tensor cores, f32 accumulation (mr_plan_gemm's MR_PLAN_TENSOR: 128 x 64
 * tiles, no split). Falls back to the exact mr_cuda_sgemm (MASK, scratch) for MR_F32,
 * for m <= 4 (the GEMV kernels: tensor cores would idle) and on devices before sm_80;
 * everything else (any strides, batches, edges, k = 0) runs the tensor-core kernel. P is
 * a template argument, as a model's precision is fixed when it is compiled: a model then
 * instantiates the kernels of its one precision, not of all three.
 */
template <mr_precision P, unsigned MASK = MR_PLAN_ALL, class Ep>
static cudaError_t mr_cuda_sgemm_tc(cudaStream_t s, int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs,
                                    int64_t a_cs, const float *b, int64_t b_rs, int64_t b_cs, float *c, int64_t c_rs,
                                    int64_t c_cs, const mr_batch *batch, mr_scratch scratch, Ep ep)
{
    if constexpr (P == MR_F32) {
        return mr_cuda_sgemm<MASK>(s, m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, batch, scratch, ep);
    } else {
        if (m <= MR_GEMV_MAX_M || !mr_tc_device_ok())
            return mr_cuda_sgemm<MASK>(s, m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, batch, scratch, ep);
        mr_batch bt;
        mr_gemm_args p;
        bool ak, bk;
        if (!mr_gemm_setup(p, bt, ak, bk, m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, batch))
            return cudaGetLastError();
        const mr_plan pl = mr_plan_gemm(m, n, k, p.nbatch, b_rs, b_cs, 1, 1, MASK, 0);
        const dim3 grid((unsigned)pl.grid[0], (unsigned)pl.grid[1], (unsigned)pl.grid[2]);
        typedef void (*kernel_t)(const mr_gemm_args, const mr_batch, const Ep);
        return mr_with_layout<MASK>(ak, bk, [&](auto a_along_k, auto b_along_k) {
            kernel_t kern = mr_k_sgemm_tc<Ep, P, decltype(a_along_k)::value, decltype(b_along_k)::value>;
            MR_LAUNCH(kern, grid, dim3(MR_THREADS), s, p, bt, ep);
            return cudaGetLastError();
        });
    }
}

/*
 * mr_cuda_conv2d with reduced-precision products on tensor cores. Falls back to the exact
 * mr_cuda_conv2d for MR_F32, devices before sm_80 and <= 4 output channels a group (the
 * direct kernel: depthwise). A 1x1, stride 1, unpadded, ungrouped convolution is the batched
 * GEMM mr_cuda_sgemm_tc (tensor cores for > 4 output channels); every other convolution
 * runs the tensor-core implicit GEMM.
 */
template <mr_precision P, unsigned MASK = MR_PLAN_ALL, class Ep>
static cudaError_t mr_cuda_conv2d_tc(cudaStream_t s, const float *x, const float *w, float *out, int64_t n, int64_t c,
                                     int64_t h, int64_t wd, int64_t o, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                                     int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                                     int64_t groups, mr_scratch scratch, Ep ep)
{
    if (n <= 0 || o <= 0 || oh <= 0 || ow <= 0 || groups <= 0) return cudaGetLastError();
    if constexpr (P == MR_F32) {
        return mr_cuda_conv2d<MASK>(s, x, w, out, n, c, h, wd, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups, scratch, ep);
    } else {
        if (o / groups <= MR_CONV_DIRECT_MAX_M || !mr_tc_device_ok())
            return mr_cuda_conv2d<MASK>(s, x, w, out, n, c, h, wd, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups,
                                        scratch, ep);
        const int64_t ohw = oh * ow;
        mr_conv_args p;
        mr_batch bt;
        if (mr_conv_setup(p, bt, x, w, out, n, c, h, wd, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups))
            return mr_cuda_sgemm_tc<P, MASK>(s, o, ohw, c, w, c, 1, x, ohw, 1, out, ohw, 1, &bt, scratch, ep);
        const mr_plan pl = mr_plan_conv(n, c, h, wd, o, kh, kw, oh, ow, sh, sw, ph, pw, groups, 1, 1, MASK, 0);
        typedef void (*kernel_t)(const mr_conv_args, const Ep);
        const kernel_t kern = mr_k_conv2d_tc<Ep, P>;
        MR_LAUNCH(kern, dim3((unsigned)pl.grid[0], (unsigned)pl.grid[1], (unsigned)pl.grid[2]), dim3(MR_THREADS), s, p, ep);
        return cudaGetLastError();
    }
}

/* ------------------------------------------------------------------------------------ */
/* Pooling                                                                              */
/* ------------------------------------------------------------------------------------ */

struct mr_pool_args {
    const float *x;
    float *out;
    int64_t planes, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw;
    int is_max;
};

/* One thread per output element (consecutive threads: consecutive x, coalesced), taps in
 * runtime-c's (ky, kx) order: max starts at -inf and takes a tap if larger or NaN,
 * skipping padding; average adds the in-range taps to 0 and divides by kh*kw. */
static __global__ void MR_LAUNCH_BOUNDS(MR_THREADS, 1) mr_k_pool2d(const mr_pool_args p)
{
    const int64_t ohw = p.oh * p.ow, total = p.planes * ohw;
    const int64_t stride = (int64_t)gridDim.x * MR_THREADS;
    const float div = (float)(p.kh * p.kw);
    for (int64_t idx = (int64_t)blockIdx.x * MR_THREADS + threadIdx.x; idx < total; idx += stride) {
        const int64_t pl = idx / ohw, pos = idx - pl * ohw;
        const int64_t y = pos / p.ow, x = pos - y * p.ow;
        const float *xp = p.x + pl * p.h * p.w;
        float acc = p.is_max ? -INFINITY : 0.0f;
        for (int64_t ky = 0; ky < p.kh; ++ky) {
            const int64_t iy = y * p.sh + ky * p.dh - p.ph;
            if (iy < 0 || iy >= p.h) continue;
            for (int64_t kx = 0; kx < p.kw; ++kx) {
                const int64_t ix = x * p.sw + kx * p.dw - p.pw;
                if (ix < 0 || ix >= p.w) continue;
                const float v = xp[iy * p.w + ix];
                acc = p.is_max ? mr_cu_max_nan(acc, v) : acc + v;
            }
        }
        p.out[idx] = p.is_max ? acc : acc / div;
    }
}

/* x [planes, h, w] -> out [planes, oh, ow]; is_max: max pooling, else average. */
static inline cudaError_t mr_cuda_pool2d(cudaStream_t s, const float *x, float *out, int64_t planes, int64_t h,
                                         int64_t w, int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh,
                                         int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int is_max)
{
    mr_pool_args p;
    if (planes <= 0 || oh <= 0 || ow <= 0) return cudaGetLastError();
    p.x = x, p.out = out, p.planes = planes, p.h = h, p.w = w, p.kh = kh, p.kw = kw, p.oh = oh, p.ow = ow;
    p.sh = sh, p.sw = sw, p.ph = ph, p.pw = pw, p.dh = dh, p.dw = dw, p.is_max = is_max;
    const mr_plan pl = mr_plan_pool(planes, oh, ow);
    MR_LAUNCH(mr_k_pool2d, dim3((unsigned)pl.grid[0]), dim3((unsigned)pl.threads), s, p);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------------------------ */
/* Softmax                                                                              */
/* ------------------------------------------------------------------------------------ */

/* runtime-c's mr_softmax_exp: exp(d) for d = x - max <= 0 or NaN, exactly 0 below
 * -87.34 (so a masked -inf gives 0), NaN stays NaN. */
static __device__ __forceinline__ float mr_cu_softmax_exp(float d)
{
    const float c = d < -87.33654f ? -87.33654f : (d != d ? 0.0f : d);
    const float nn = mr_expf_n(c);
    const float y = mr_expf_scaled(c, nn, nn);
    return d >= -87.33654f ? y : (d != d ? d : 0.0f);
}

static __device__ __forceinline__ float mr_warp_max(float v)
{
MR_UNROLL
    for (int off = 16; off >= 1; off /= 2) v = mr_cu_max_nan(v, __shfl_xor_sync(MR_FULL_MASK, v, off));
    return v;
}

static __device__ __forceinline__ float mr_warp_sum(float v)
{
MR_UNROLL
    for (int off = 16; off >= 1; off /= 2) v += __shfl_xor_sync(MR_FULL_MASK, v, off);
    return v;
}

/* A block-wide max or sum of MR_THREADS threads' values: warps reduce by shuffles, then
 * warp 0 reduces the 8 partials; every thread gets the result. */
static __device__ __forceinline__ float mr_block_reduce(float v, bool is_max)
{
    __shared__ float part[MR_THREADS / 32];
    __shared__ float result;
    const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
    v = is_max ? mr_warp_max(v) : mr_warp_sum(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < MR_THREADS / 32 ? part[lane] : (is_max ? -INFINITY : 0.0f);
        t = is_max ? mr_warp_max(t) : mr_warp_sum(t);
        if (lane == 0) result = t;
    }
    __syncthreads();
    const float r = result;
    __syncthreads(); /* part and result are free for the next call */
    return r;
}

/* Rows of n <= 32 * VPL elements: one warp a row, each lane keeping its VPL elements in
 * registers between the max, the exponentials and the division (one read, one write). A
 * row is (o, i): elements x[o*n*inner + k*inner + i]. */
template <int VPL>
static __global__ void MR_LAUNCH_BOUNDS(MR_THREADS, 1)
mr_k_softmax_warp(const float *x, float *out, int64_t outer, int64_t n, int64_t inner)
{
    const int lane = (int)threadIdx.x % 32;
    const int64_t warps = (int64_t)gridDim.x * (MR_THREADS / 32);
    for (int64_t row = (int64_t)blockIdx.x * (MR_THREADS / 32) + threadIdx.x / 32; row < outer * inner;
         row += warps) {
        const int64_t o = row / inner, i = row - o * inner;
        const float *xr = x + o * n * inner + i;
        float *yr = out + o * n * inner + i;
        float v[VPL];
        float m = -INFINITY;
MR_UNROLL
        for (int e = 0; e < VPL; ++e) {
            const int64_t k = lane + 32 * e;
            v[e] = k < n ? xr[k * inner] : -INFINITY;
            m = mr_cu_max_nan(m, v[e]);
        }
        m = mr_warp_max(m);
        float sum = 0.0f;
MR_UNROLL
        for (int e = 0; e < VPL; ++e) {
            const int64_t k = lane + 32 * e;
            v[e] = k < n ? mr_cu_softmax_exp(v[e] - m) : 0.0f;
            sum += v[e];
        }
        sum = mr_warp_sum(sum);
MR_UNROLL
        for (int e = 0; e < VPL; ++e) {
            const int64_t k = lane + 32 * e;
            if (k < n) yr[k * inner] = v[e] / sum;
        }
    }
}

/* Long rows (n > 1024): one block a row, three passes (max; exponentials stored and
 * summed; division), each a block reduction. */
static __global__ void MR_LAUNCH_BOUNDS(MR_THREADS, 1)
mr_k_softmax_block(const float *x, float *out, int64_t outer, int64_t n, int64_t inner)
{
    for (int64_t row = blockIdx.x; row < outer * inner; row += gridDim.x) {
        const int64_t o = row / inner, i = row - o * inner;
        const float *xr = x + o * n * inner + i;
        float *yr = out + o * n * inner + i;
        float m = -INFINITY;
        for (int64_t k = threadIdx.x; k < n; k += MR_THREADS) m = mr_cu_max_nan(m, xr[k * inner]);
        m = mr_block_reduce(m, true);
        float sum = 0.0f;
        for (int64_t k = threadIdx.x; k < n; k += MR_THREADS) {
            const float e = mr_cu_softmax_exp(xr[k * inner] - m);
            yr[k * inner] = e;
            sum += e;
        }
        sum = mr_block_reduce(sum, false);
        /* each thread divides the elements it wrote itself: no barrier needed */
        for (int64_t k = threadIdx.x; k < n; k += MR_THREADS) yr[k * inner] = yr[k * inner] / sum;
    }
}

/* inner > 1 with many columns: one thread a column (o, i), consecutive threads on
 * consecutive i, so every pass over k reads contiguous memory. */
static __global__ void MR_LAUNCH_BOUNDS(MR_THREADS, 1)
mr_k_softmax_cols(const float *x, float *out, int64_t outer, int64_t n, int64_t inner)
{
    const int64_t stride = (int64_t)gridDim.x * MR_THREADS;
    for (int64_t col = (int64_t)blockIdx.x * MR_THREADS + threadIdx.x; col < outer * inner; col += stride) {
        const int64_t o = col / inner, i = col - o * inner;
        const float *xr = x + o * n * inner + i;
        float *yr = out + o * n * inner + i;
        float m = -INFINITY, sum = 0.0f;
        for (int64_t k = 0; k < n; ++k) m = mr_cu_max_nan(m, xr[k * inner]);
        for (int64_t k = 0; k < n; ++k) {
            const float e = mr_cu_softmax_exp(xr[k * inner] - m);
            yr[k * inner] = e;
            sum += e;
        }
        for (int64_t k = 0; k < n; ++k) yr[k * inner] = yr[k * inner] / sum;
    }
}

/* Softmax along the middle axis of contiguous [outer, n, inner]; out may equal x. */
static inline cudaError_t mr_cuda_softmax(cudaStream_t s, const float *x, float *out, int64_t outer, int64_t n,
                                          int64_t inner)
{
    typedef void (*kernel_t)(const float *, float *, int64_t, int64_t, int64_t);
    const mr_plan pl = mr_plan_softmax(outer, n, inner);
    kernel_t kern = NULL;
    switch (pl.kind) {
    case MR_PLAN_SOFTMAX_COLS: kern = mr_k_softmax_cols; break;
    case MR_PLAN_SOFTMAX_BLOCK: kern = mr_k_softmax_block; break;
    case MR_PLAN_SOFTMAX_WARP:
        kern = pl.tile == 1    ? mr_k_softmax_warp<1>
               : pl.tile == 2  ? mr_k_softmax_warp<2>
               : pl.tile == 4  ? mr_k_softmax_warp<4>
               : pl.tile == 8  ? mr_k_softmax_warp<8>
               : pl.tile == 16 ? mr_k_softmax_warp<16>
                               : mr_k_softmax_warp<32>;
        break;
    default: return cudaGetLastError(); /* nothing to compute */
    }
    MR_LAUNCH(kern, dim3((unsigned)pl.grid[0]), dim3((unsigned)pl.threads), s, x, out, outer, n, inner);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------------------------ */
/* Attention                                                                            */
/* ------------------------------------------------------------------------------------ */

/* Batch dimensions of an attention (up to MR_MAX_BATCH), row-major over ext; q, k, v, o are
 * each operand's element stride per batch dimension (0 = broadcast). */
struct mr_attn_batch {
    int rank;
    int64_t ext[MR_MAX_BATCH];
    int64_t q[MR_MAX_BATCH], k[MR_MAX_BATCH], v[MR_MAX_BATCH], o[MR_MAX_BATCH];
};

/* The score of a product element unchanged (attention without scaling or mask). */
struct mr_no_score {
    __device__ float operator()(int64_t, int64_t, int64_t, float s) const { return s; }
};

#define MR_ATTN_BN 32       /* keys a tile: one a lane */

/* A strided matrix operand: element (r, c) at p[r*rs + c*cs]. */
template <class T> struct mr_attn_mat {
    T *p;
    int64_t rs, cs;
};

struct mr_attn_args {
    int64_t m, n, d, e, nbatch;
    mr_attn_mat<const float> q, k, v;
    mr_attn_mat<float> o;
};

/* Element offsets of flat batch index nb in q, k, v and out. */
static __device__ __forceinline__ void mr_attn_batch_offsets(const mr_attn_batch &bt, int64_t nb, int64_t (&off)[4])
{
    off[0] = off[1] = off[2] = off[3] = 0;
    mr_batch_walk(bt.rank, bt.ext, nb, [&](int d, int64_t i) {
        off[0] += i * bt.q[d], off[1] += i * bt.k[d], off[2] += i * bt.v[d], off[3] += i * bt.o[d];
    });
}

/* Stages the R x C tile (r, c) -> p[r*rs + c*cs] into s[R][LD], zero outside rem_r x
 * rem_c. The block's consecutive threads walk the operand's smaller stride, so the
 * global reads coalesce whichever way the operand is laid out (K in particular comes
 * both ways); LD = C + 1 keeps the column-wise walk's stores off one bank. */
template <int R, int C, int LD>
static __device__ __forceinline__ void mr_attn_stage(float (*s)[LD], const float *p, int64_t rs, int64_t cs,
                                                     int64_t rem_r, int64_t rem_c)
{
    const bool along_c = (cs < 0 ? -cs : cs) <= (rs < 0 ? -rs : rs);
MR_NO_UNROLL
    for (int idx = (int)threadIdx.x; idx < R * C; idx += MR_ATTN_THREADS) {
        const int r = along_c ? idx / C : idx % R, c = along_c ? idx % C : idx / R;
        s[r][c] = (r < rem_r && c < rem_c) ? p[r * rs + c * cs] : 0.0f;
    }
}

/*
 * Fused attention, flash style: out = softmax_j(score(q k)) v, the m x n scores never
 * stored. A block of 4 warps takes BM query rows of one batch item (work item = row tile
 * x batch, block-strided) and walks the keys 32 at a time. Each warp owns BM/4 rows;
 * lane j computes key j's scores for all of them (one K read from shared memory per BM/4
 * FMAs, Q read as broadcast float4s), the warp reduces max and sum by shuffles, and the
 * row's output accumulators -- lane owns columns lane, lane + 32, ... -- are rescaled by
 * exp(old max - new max) before the tile's P V is added (P through shared memory, read
 * as broadcast float4s). Everything zero-padded to D, so the FMA loops have no guards.
 * Exact f32: FMA dot products in order of c, mr_cu_softmax_exp (the softmax's exp).
 */
template <class Sc, int D, int BM>
static __global__ void MR_LAUNCH_BOUNDS(MR_ATTN_THREADS, 4)
mr_k_attention(const mr_attn_args p, const mr_attn_batch bt, const Sc score)
{
    constexpr int RPW = BM / 4, CPL = D / 32; /* rows a warp, output columns a lane */
    __shared__ __align__(16) float qs[BM][D];
    __shared__ float ks[D][MR_ATTN_BN + 1];
    __shared__ float vs[MR_ATTN_BN][D];
    __shared__ __align__(16) float ps[BM][MR_ATTN_BN];
    const int lane = (int)threadIdx.x % 32, r0 = (int)threadIdx.x / 32 * RPW;
    const int64_t mt = (p.m + BM - 1) / BM;
    for (int64_t item = blockIdx.x; item < mt * p.nbatch; item += gridDim.x) {
        const int64_t nb = item / mt, i0 = (item - nb * mt) * BM;
        int64_t off[4];
        mr_attn_batch_offsets(bt, nb, off);
        mr_attn_stage<BM, D, D>(qs, p.q.p + off[0] + i0 * p.q.rs, p.q.rs, p.q.cs, p.m - i0, p.d);
        /* mx: running max of the row's scores; sum: of exp(score - mx) */
        float mx[RPW], sum[RPW], acc[RPW][CPL];
MR_UNROLL
        for (int r = 0; r < RPW; ++r) {
            mx[r] = -INFINITY, sum[r] = 0.0f;
MR_UNROLL
            for (int t = 0; t < CPL; ++t) acc[r][t] = 0.0f;
        }
        for (int64_t j0 = 0; j0 < p.n; j0 += MR_ATTN_BN) {
            mr_attn_stage<D, MR_ATTN_BN, MR_ATTN_BN + 1>(ks, p.k.p + off[1] + j0 * p.k.cs, p.k.rs, p.k.cs, p.d,
                                                         p.n - j0);
            mr_attn_stage<MR_ATTN_BN, D, D>(vs, p.v.p + off[2] + j0 * p.v.rs, p.v.rs, p.v.cs, p.n - j0, p.e);
            __syncthreads();
            float sc[RPW];
MR_UNROLL
            for (int r = 0; r < RPW; ++r) sc[r] = 0.0f;
MR_NO_UNROLL
            for (int c = 0; c < D; c += 4) {
                const float k0 = ks[c][lane], k1 = ks[c + 1][lane], k2 = ks[c + 2][lane], k3 = ks[c + 3][lane];
MR_UNROLL
                for (int r = 0; r < RPW; ++r) {
                    const float4 qv = mr_cu_ld4(&qs[r0 + r][c]);
                    sc[r] = fmaf(qv.w, k3, fmaf(qv.z, k2, fmaf(qv.y, k1, fmaf(qv.x, k0, sc[r]))));
                }
            }
            const int64_t j = j0 + lane;
MR_UNROLL
            for (int r = 0; r < RPW; ++r) {
                const int64_t i = i0 + r0 + r;
                /* rows past m get -inf everywhere (never stored); keys past n count 0 */
                const float s = (i < p.m && j < p.n) ? score(nb, i, j, sc[r]) : -INFINITY;
                const float nmx = mr_cu_max_nan(mx[r], mr_warp_max(s));
                /* while every score so far is -inf, subtract 0: exp(-inf - -inf) would be NaN */
                const float base = nmx == -INFINITY ? 0.0f : nmx;
                const float pj = mr_cu_softmax_exp(s - base), alpha = mr_cu_softmax_exp(mx[r] - base);
                mx[r] = nmx;
                sum[r] = sum[r] * alpha + mr_warp_sum(pj);
                ps[r0 + r][lane] = pj;
MR_UNROLL
                for (int t = 0; t < CPL; ++t) acc[r][t] *= alpha;
            }
            __syncwarp();
MR_NO_UNROLL
            for (int jj = 0; jj < MR_ATTN_BN; jj += 4) {
                float vv[4][CPL];
MR_UNROLL
                for (int u = 0; u < 4; ++u)
MR_UNROLL
                    for (int t = 0; t < CPL; ++t) vv[u][t] = vs[jj + u][lane + 32 * t];
MR_UNROLL
                for (int r = 0; r < RPW; ++r) {
                    const float4 pv = mr_cu_ld4(&ps[r0 + r][jj]);
MR_UNROLL
                    for (int t = 0; t < CPL; ++t)
                        acc[r][t] = fmaf(pv.w, vv[3][t],
                                         fmaf(pv.z, vv[2][t], fmaf(pv.y, vv[1][t], fmaf(pv.x, vv[0][t], acc[r][t]))));
                }
            }
            /* ks, vs (and the next item's qs) are rewritten after every warp is done */
            __syncthreads();
        }
        float *o = p.o.p + off[3];
MR_UNROLL
        for (int r = 0; r < RPW; ++r) {
            const int64_t i = i0 + r0 + r;
            if (i >= p.m) continue;
MR_UNROLL
            for (int t = 0; t < CPL; ++t) {
                const int64_t c = lane + 32 * t;
                /* an all -inf row: 0 / 0 = NaN, as the unfused softmax gives */
                if (c < p.e) o[i * p.o.rs + c * p.o.cs] = acc[r][t] / sum[r];
            }
        }
    }
}

/*
 * The fused attention on tensor cores, at precision P (TF32, BF16 or F16: Q, K, V and the
 * softmax's weights rounded to it, f32 accumulation), heads up to D = 32 or 64 wide. A
 * block of 4 warps takes MR_ATTN_TC_ROWS = 64 query rows (16 a warp, one mma row tile)
 * and walks the keys 32 at a time, as mr_k_attention does:
 * - S = Q K^T for the warp's 16 rows by 32 keys: mma.sync over D, Q's and K's fragments
 *   read from their shared tiles (both [row][c], rounded as read, mr_tc_fmt);
 * - the scores (score(), -inf outside m x n) and the online softmax on the accumulators:
 *   lane 4g + t holds rows g and g + 8, keys 2t, 2t + 1 of each 8-key tile, so a row's
 *   max and sum are the lane's, then its quad's (two xor shuffles); the output
 *   accumulators are rescaled by exp(old max - new max);
 * - O += P V: the weights P go through the warp's rows of a shared tile, then mma.sync
 *   over the 32 keys, V's fragments from its [key][col] tile.
 * Layouts: [row][c] tiles (Q, K, P) padded to LD = 4 mod 32 floats for tf32 (lane 4g + t
 * reads row g, column t) and 8 mod 32 for the 16-bit formats (the pair at 2t, one 8-byte
 * read); V's [key][col] to 8 mod 32 (tf32: key t, column g) and 4 mod 32 (16-bit: keys 2t,
 * 2t + 1). Under 48 KiB of static shared memory for D = 64.
 */
#if MR_TC_ARCH_OK
template <int D, int KS> struct mr_attn_tc_smem {
    static constexpr int LQ = D + (KS == 8 ? 4 : 8), LP = MR_ATTN_BN + (KS == 8 ? 4 : 8), LV = D + (KS == 8 ? 8 : 4);
    typedef mr_tc_padded<LQ, true> TQ; /* Q: (row, c); K: (key, c) */
    typedef mr_tc_padded<LP, true> TP; /* P: (row, key) */
    typedef mr_tc_padded<LV, false> TV; /* V as mma's B: (col, key) at [key][col] */
    alignas(16) float q[MR_ATTN_TC_ROWS][LQ];
    alignas(16) float k[MR_ATTN_BN][LQ];
    alignas(16) float v[MR_ATTN_BN][LV];
    alignas(16) float p[MR_ATTN_TC_ROWS][LP];
};

/* acc[nt] += A B for the calling warp: A's 16 rows from row a0 of the shared tile sa (layout
 * TA, element (row, k)), B's NT tiles of 8 columns of sb (layout TB, element (column, k)),
 * over k = 0 .. K, by mma.sync with the operands rounded to P as they are read. */
template <int P, class TA, class TB, int K, int NT>
static __device__ __forceinline__ void mr_tc_warp_rows(const float *sa, int a0, const float *sb, float (&acc)[NT][4])
{
    typedef mr_tc_fmt<P> F;
    const int lane = (int)threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int kofs = F::KS == 8 ? t : 2 * t, kstep = F::KS / 2; /* a fragment's k: kofs + kstep r */
MR_UNROLL
    for (int k0 = 0; k0 < K; k0 += F::KS) {
        uint32_t fa[4];
MR_UNROLL
        for (int r = 0; r < 4; ++r) fa[r] = F::template reg<TA>(sa, a0 + g + 8 * (r & 1), k0 + kofs + kstep * (r >> 1));
MR_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
            uint32_t fb[2];
MR_UNROLL
            for (int r = 0; r < 2; ++r) fb[r] = F::template reg<TB>(sb, nt * 8 + g, k0 + kofs + kstep * r);
            mr_mma<P>(acc[nt], fa, fb);
        }
    }
}

/* v reduced over the 4 lanes of a quad (the lanes holding one accumulator row). */
static __device__ __forceinline__ float mr_quad_max(float v)
{
    v = mr_cu_max_nan(v, __shfl_xor_sync(MR_FULL_MASK, v, 1));
    return mr_cu_max_nan(v, __shfl_xor_sync(MR_FULL_MASK, v, 2));
}
static __device__ __forceinline__ float mr_quad_sum(float v)
{
    v += __shfl_xor_sync(MR_FULL_MASK, v, 1);
    return v + __shfl_xor_sync(MR_FULL_MASK, v, 2);
}
#endif

template <class Sc, int P, int D>
static __global__ void MR_LAUNCH_BOUNDS(MR_ATTN_THREADS, 2)
mr_k_attention_tc(const mr_attn_args p, const mr_attn_batch bt, const Sc score)
{
#if MR_TC_ARCH_OK
    typedef mr_tc_fmt<P> F;
    typedef mr_attn_tc_smem<D, F::KS> S;
    typedef typename S::TQ TQ;
    typedef typename S::TP TP;
    typedef typename S::TV TV;
    constexpr int NT = D / 8; /* the output's 8-column mma tiles */
    __shared__ S sm;
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int w0 = warp * 16; /* the warp's first row in the tile */
    const int64_t mt = (p.m + MR_ATTN_TC_ROWS - 1) / MR_ATTN_TC_ROWS;
    for (int64_t item = blockIdx.x; item < mt * p.nbatch; item += gridDim.x) {
        const int64_t nb = item / mt, i0 = (item - nb * mt) * MR_ATTN_TC_ROWS;
        int64_t off[4];
        mr_attn_batch_offsets(bt, nb, off);
        mr_attn_stage<MR_ATTN_TC_ROWS, D, S::LQ>(sm.q, p.q.p + off[0] + i0 * p.q.rs, p.q.rs, p.q.cs, p.m - i0, p.d);
        /* [h]: row g + 8h of the warp's 16. mx: running max of its scores; sum: of exp(score - mx) */
        float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f}, o[NT][4];
MR_UNROLL
        for (int nt = 0; nt < NT; ++nt)
MR_UNROLL
            for (int r = 0; r < 4; ++r) o[nt][r] = 0.0f;
        for (int64_t j0 = 0; j0 < p.n; j0 += MR_ATTN_BN) {
            mr_attn_stage<MR_ATTN_BN, D, S::LQ>(sm.k, p.k.p + off[1] + j0 * p.k.cs, p.k.cs, p.k.rs, p.n - j0, p.d);
            mr_attn_stage<MR_ATTN_BN, D, S::LV>(sm.v, p.v.p + off[2] + j0 * p.v.rs, p.v.rs, p.v.cs, p.n - j0, p.e);
            __syncthreads();
            /* S: [8-key tile][mma's c registers]; register r is row g + 8 (r >> 1), key 2t + (r & 1) */
            float sc[4][4];
MR_UNROLL
            for (int jt = 0; jt < 4; ++jt)
MR_UNROLL
                for (int r = 0; r < 4; ++r) sc[jt][r] = 0.0f;
            mr_tc_warp_rows<P, TQ, TQ, D>(&sm.q[0][0], w0, &sm.k[0][0], sc);
MR_UNROLL
            for (int h = 0; h < 2; ++h) {
                const int64_t i = i0 + w0 + g + 8 * h;
                float tmax = -INFINITY;
MR_UNROLL
                for (int jt = 0; jt < 4; ++jt)
MR_UNROLL
                    for (int r = 2 * h; r < 2 * h + 2; ++r) {
                        const int64_t j = j0 + jt * 8 + 2 * t + (r & 1);
                        /* rows past m get -inf everywhere (never stored); keys past n count 0 */
                        sc[jt][r] = (i < p.m && j < p.n) ? score(nb, i, j, sc[jt][r]) : -INFINITY;
                        tmax = mr_cu_max_nan(tmax, sc[jt][r]);
                    }
                const float nmx = mr_cu_max_nan(mx[h], mr_quad_max(tmax));
                /* while every score so far is -inf, subtract 0: exp(-inf - -inf) would be NaN */
                const float base = nmx == -INFINITY ? 0.0f : nmx, alpha = mr_cu_softmax_exp(mx[h] - base);
                mx[h] = nmx;
                float tsum = 0.0f;
MR_UNROLL
                for (int jt = 0; jt < 4; ++jt)
MR_UNROLL
                    for (int r = 2 * h; r < 2 * h + 2; ++r) {
                        const float pj = mr_cu_softmax_exp(sc[jt][r] - base);
                        tsum += pj;
                        sm.p[w0 + g + 8 * h][jt * 8 + 2 * t + (r & 1)] = pj;
                    }
                sum[h] = sum[h] * alpha + mr_quad_sum(tsum);
MR_UNROLL
                for (int nt = 0; nt < NT; ++nt) o[nt][2 * h] *= alpha, o[nt][2 * h + 1] *= alpha;
            }
            __syncwarp();
            mr_tc_warp_rows<P, TP, TV, MR_ATTN_BN>(&sm.p[0][0], w0, &sm.v[0][0], o);
            /* k, v and p (and the next item's q) are rewritten after every warp is done */
            __syncthreads();
        }
        float *out = p.o.p + off[3];
MR_UNROLL
        for (int h = 0; h < 2; ++h) {
            const int64_t i = i0 + w0 + g + 8 * h;
            if (i >= p.m) continue;
MR_UNROLL
            for (int nt = 0; nt < NT; ++nt)
MR_UNROLL
                for (int u = 0; u < 2; ++u) {
                    const int64_t c = nt * 8 + 2 * t + u;
                    /* an all -inf row: 0 / 0 = NaN, as the unfused softmax gives */
                    if (c < p.e) out[i * p.o.rs + c * p.o.cs] = o[nt][2 * h + u] / sum[h];
                }
        }
    }
#else
    (void)p, (void)bt, (void)score;
    __trap();
#endif
}

/*
 * out[i][c] = sum_j softmax_j(score(nb, i, j, sum_c' q[i][c'] k[c'][j])) v[j][c] for each
 * batch item nb: q m x d at q[i*q_rs + c*q_cs], k d x n (the product's right operand; K^T
 * by strides for q K^T), v n x e, out m x e; any strides, 0 included. batch NULL: one item.
 * score(nb, i, j, p) gives the score of the raw product p (scaling, masks: -INFINITY); a
 * row of all -inf scores gives NaN, as the unfused softmax. cudaErrorInvalidValue (nothing
 * launched) unless m, n, d, e >= 1, d, e <= MR_ATTN_MAX_DIM and 0 <= batch->rank <=
 * MR_MAX_BATCH; nothing is launched for an empty batch (an extent 0).
 */
/* The attention kernel of head width D and row tile R (MR_ATTN_TC_ROWS: the tensor-core
 * kernel at precision P), if MASK instantiates it (NULL otherwise). */
template <unsigned MASK, class Sc, int P = MR_F32>
static void (*mr_attention_kernel(int D, int R))(const mr_attn_args, const mr_attn_batch, const Sc)
{
    if constexpr (P != MR_F32 && (MASK & MR_ATTN_TC) != 0) {
        if (R == MR_ATTN_TC_ROWS) {
            if constexpr ((MASK & MR_ATTN_D32) != 0)
                if (D == 32) return mr_k_attention_tc<Sc, P, 32>;
            if constexpr ((MASK & MR_ATTN_D64) != 0)
                if (D == 64) return mr_k_attention_tc<Sc, P, 64>;
        }
    }
#define MR_ATTN_KERNEL(dd, rr)                                                                  \
    if constexpr ((MASK & MR_ATTN_D##dd) != 0 && (MASK & MR_ATTN_ROWS##rr) != 0)                 \
        if (D == dd && R == rr) return mr_k_attention<Sc, dd, rr>;
    MR_ATTN_KERNEL(32, 32)
    MR_ATTN_KERNEL(32, 16)
    MR_ATTN_KERNEL(32, 8)
    MR_ATTN_KERNEL(64, 32)
    MR_ATTN_KERNEL(64, 16)
    MR_ATTN_KERNEL(64, 8)
    MR_ATTN_KERNEL(128, 16)
    MR_ATTN_KERNEL(128, 8)
#undef MR_ATTN_KERNEL
    return NULL;
}

/* mr_cuda_attention as plan `pl` (mr_plan_attention) says; P, the precision of a
 * tensor-core plan. */
template <unsigned MASK = MR_ATTN_ALL, int P = MR_F32, class Sc>
static cudaError_t mr_cuda_attention_planned(cudaStream_t s, const mr_plan &pl, int64_t m, int64_t n, int64_t d, int64_t e,
                                             const float *q, int64_t q_rs, int64_t q_cs,
                                             const float *k, int64_t k_rs, int64_t k_cs,
                                             const float *v, int64_t v_rs, int64_t v_cs,
                                             float *out, int64_t o_rs, int64_t o_cs,
                                             const mr_attn_batch *batch, Sc score)
{
    typedef void (*kernel_t)(const mr_attn_args, const mr_attn_batch, const Sc);
    if (m < 1 || n < 1 || d < 1 || e < 1 || d > MR_ATTN_MAX_DIM || e > MR_ATTN_MAX_DIM) return cudaErrorInvalidValue;
    mr_attn_batch bt;
    if (batch) {
        bt = *batch;
    } else {
        bt.rank = 0;
        for (int i = 0; i < MR_MAX_BATCH; ++i) bt.ext[i] = 1, bt.q[i] = bt.k[i] = bt.v[i] = bt.o[i] = 0;
    }
    if (bt.rank < 0 || bt.rank > MR_MAX_BATCH) return cudaErrorInvalidValue;
    mr_attn_args p;
    p.m = m, p.n = n, p.d = d, p.e = e;
    p.q.p = q, p.q.rs = q_rs, p.q.cs = q_cs, p.k.p = k, p.k.rs = k_rs, p.k.cs = k_cs;
    p.v.p = v, p.v.rs = v_rs, p.v.cs = v_cs, p.o.p = out, p.o.rs = o_rs, p.o.cs = o_cs;
    p.nbatch = 1;
    for (int i = 0; i < bt.rank; ++i) p.nbatch *= bt.ext[i];
    if (p.nbatch <= 0) return cudaGetLastError();
    kernel_t kern = mr_attention_kernel<MASK, Sc, P>(pl.tile, pl.rows);
    if (!kern || pl.kind != MR_PLAN_ATTENTION) return cudaErrorInvalidValue;
    MR_LAUNCH(kern, dim3((unsigned)pl.grid[0]), dim3((unsigned)pl.threads), s, p, bt, score);
    return cudaGetLastError();
}

/* mr_cuda_attention_planned as planned for the current device, among the kernels MASK
 * instantiates (MR_ATTN_ALL: every one; a model's: its head width and the row tiles its
 * plans choose), with Q, K, V and the softmax's weights rounded to P on tensor cores
 * (mr_k_attention_tc) where the plan takes it: sm_80+, heads up to 64 wide, enough rows
 * and heads to fill the SMs with 64-row tiles. Otherwise, and for MR_F32, the exact
 * kernel. */
template <mr_precision P, unsigned MASK = MR_ATTN_ALL, class Sc>
static cudaError_t mr_cuda_attention_tc(cudaStream_t s, int64_t m, int64_t n, int64_t d, int64_t e,
                                        const float *q, int64_t q_rs, int64_t q_cs,
                                        const float *k, int64_t k_rs, int64_t k_cs,
                                        const float *v, int64_t v_rs, int64_t v_cs,
                                        float *out, int64_t o_rs, int64_t o_cs,
                                        const mr_attn_batch *batch, Sc score)
{
    int64_t nbatch = 1;
    for (int i = 0; batch && i < batch->rank && i < MR_MAX_BATCH; ++i) nbatch *= batch->ext[i];
    const int tensor = P != MR_F32 && mr_tc_device_ok();
    const mr_plan pl = mr_plan_attention(m, n, d, e, nbatch, tensor, mr_device_sms(), MASK);
    return mr_cuda_attention_planned<MASK, P>(s, pl, m, n, d, e, q, q_rs, q_cs, k, k_rs, k_cs, v, v_rs, v_cs, out, o_rs,
                                              o_cs, batch, score);
}

/* The exact attention, planned for the current device. */
template <unsigned MASK = MR_ATTN_ALL, class Sc>
static cudaError_t mr_cuda_attention(cudaStream_t s, int64_t m, int64_t n, int64_t d, int64_t e,
                                     const float *q, int64_t q_rs, int64_t q_cs,
                                     const float *k, int64_t k_rs, int64_t k_cs,
                                     const float *v, int64_t v_rs, int64_t v_cs,
                                     float *out, int64_t o_rs, int64_t o_cs,
                                     const mr_attn_batch *batch, Sc score)
{
    return mr_cuda_attention_tc<MR_F32, MASK>(s, m, n, d, e, q, q_rs, q_cs, k, k_rs, k_cs, v, v_rs, v_cs, out, o_rs, o_cs,
                                              batch, score);
}

/* ------------------------------------------------------------------------------------ */
/* SGD                                                                                  */
/* ------------------------------------------------------------------------------------ */

/* runtime-c's mr_sgd: with momentum, v = momentum * v + g then w -= lr * v; without
 * (momentum 0 or no v), w -= lr * g. Each operation rounded on its own (mr_cu_mul). */
template <class T>
static __global__ void MR_LAUNCH_BOUNDS(MR_THREADS, 1)
mr_k_sgd(T *w, const T *g, T *v, int64_t n, T lr, T momentum, int use_v)
{
    const int64_t stride = (int64_t)gridDim.x * MR_THREADS;
    for (int64_t i = (int64_t)blockIdx.x * MR_THREADS + threadIdx.x; i < n; i += stride) {
        if (use_v) {
            const T vi = mr_cu_add(mr_cu_mul(momentum, v[i]), g[i]);
            v[i] = vi;
            w[i] = mr_cu_sub(w[i], mr_cu_mul(lr, vi));
        } else {
            w[i] = mr_cu_sub(w[i], mr_cu_mul(lr, g[i]));
        }
    }
}

static inline cudaError_t mr_cuda_sgd_f32(cudaStream_t s, float *w, const float *g, float *v, int64_t n, float lr,
                                          float momentum)
{
    const int use_v = momentum != 0.0f && v != NULL;
    if (n <= 0) return cudaGetLastError();
    MR_LAUNCH(mr_k_sgd<float>, dim3(mr_blocks(n)), dim3(MR_THREADS), s, w, g, v, n, lr, momentum, use_v);
    return cudaGetLastError();
}

static inline cudaError_t mr_cuda_sgd_f64(cudaStream_t s, double *w, const double *g, double *v, int64_t n,
                                          double lr, double momentum)
{
    const int use_v = momentum != 0.0 && v != NULL;
    if (n <= 0) return cudaGetLastError();
    MR_LAUNCH(mr_k_sgd<double>, dim3(mr_blocks(n)), dim3(MR_THREADS), s, w, g, v, n, lr, momentum, use_v);
    return cudaGetLastError();
}

#endif /* MITHRIL_CUDA_H */
