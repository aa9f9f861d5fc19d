/* mr_cuda_plan.h -- how mithril_cuda.h launches a matrix product or a convolution: which
 * kernel, which tile, how many K slices, how many blocks.
 *
 * Plain C99 (and C++): the kernel library includes it to plan each call at run time from
 * the device's SM count, and mithrilc compiles the same functions in (build.rs,
 * src/codegen/cuda/plan.rs) to choose at compile time which tile kernels a model
 * instantiates and to print `compile --target cuda --report`'s launches for a named GPU.
 * One decision, one place: what the report says is what runs.
 *
 * The cost model. A tile kernel's blocks run on the SMs in waves; a wave's time is one
 * block's K loop, bm * bn * kslice multiply-adds at the tile's rate (a larger tile
 * reuses each loaded element more: the rates are relative estimates, 128 x 128 = 100).
 * Blocks of fewer than 256 threads share an SM: a wave holds 256 / threads of them an
 * SM, each at that fraction of the SM's rate.
 * So a launch of fewer blocks than SMs leaves SMs idle, and more blocks than a whole
 * number of waves pays a wave for the remainder. Split-K cuts K into slices that run
 * as separate blocks, writing partial sums to scratch that a second kernel adds in
 * slice order (deterministic: the same bits on every run of the same plan); it costs
 * that kernel's launch and memory traffic. The plan is the tile and split of least
 * estimated cost among those the mask allows, ties going to the larger tile and the
 * fewer slices.
 */
#ifndef MR_CUDA_PLAN_H
#define MR_CUDA_PLAN_H

#include <stdint.h>

/* The tile kernels: X(index, rows, columns, a thread's rows, a thread's columns, rate).
 * A block has (rows / thread rows) x (columns / thread columns) threads. */
#define MR_TILE_LIST(X)            \
    X(0, 128, 128, 8, 8, 100)      \
    X(1, 128, 64, 8, 4, 90)        \
    X(2, 64, 64, 4, 4, 75)         \
    X(3, 64, 32, 4, 4, 60)         \
    X(4, 32, 32, 4, 4, 45)
#define MR_TILE_COUNT 5
#define MR_GEMM_BK 16 /* K a step of every tile kernel */

/* A mask of what a call may launch: bit t allows tile t, MR_PLAN_SPLIT allows split-K. A
 * model passes the kernels it instantiated; hand-written callers MR_PLAN_ALL. */
#define MR_PLAN_SPLIT 0x100u
#define MR_PLAN_TILES ((1u << MR_TILE_COUNT) - 1u)
#define MR_PLAN_ALL (MR_PLAN_TILES | MR_PLAN_SPLIT)
/* MR_PLAN_LAYOUT: the operands' layouts are known (a model's are: its strides are
 * constants), A's chunks along K if MR_PLAN_A_ALONG_K, B's if MR_PLAN_B_ALONG_K
 * (mr_plan_along_k), so one layout's kernels are instantiated rather than four. */
#define MR_PLAN_LAYOUT 0x200u
#define MR_PLAN_A_ALONG_K 0x400u
#define MR_PLAN_B_ALONG_K 0x800u

#define MR_THREADS 256 /* block size of the generated loop kernels */
#define MR_MAX_GRID 2048
#define MR_GEMV_MAX_M 4        /* rows up to which a product is a GEMV */
#define MR_GEMV_WARP_THREADS 64 /* the GEMV's warp-a-column kernel: small blocks spread a few columns over many SMs */
#define MR_CONV_DIRECT_MAX_M 4 /* output channels a group up to which a convolution is direct */
#define MR_SPLIT_MAX 32        /* the most K slices */
#define MR_SPLIT_MIN_K 64      /* the shortest K slice */
#define MR_PLAN_FMA_PER_BYTE 10 /* an SM's multiply-adds per byte of its share of DRAM bandwidth (H100: about 10) */
#define MR_PLAN_LAUNCH_FMAS 500000 /* a kernel launch's cost in one SM's multiply-adds (about 2 us) */

enum mr_plan_kind {
    MR_PLAN_NONE = 0,        /* nothing to compute (an empty product) */
    MR_PLAN_GEMV_WARP = 1,   /* m <= MR_GEMV_MAX_M: a warp a column */
    MR_PLAN_GEMV_THREAD = 2, /* m <= MR_GEMV_MAX_M: a thread a column (row-major B, many columns) */
    MR_PLAN_TILED = 3,       /* the tiled GEMM (or implicit-GEMM convolution), maybe split along K */
    MR_PLAN_TENSOR = 4,      /* the tensor-core GEMM or convolution (128 x 64 tiles, --precision) */
    MR_PLAN_CONV_DIRECT = 5, /* a convolution's taps summed per output element */
    MR_PLAN_POOL = 6,        /* pooling: a thread an output */
    MR_PLAN_SOFTMAX_COLS = 7,  /* softmax along a strided axis: a thread a row */
    MR_PLAN_SOFTMAX_WARP = 8,  /* a warp a row, `tile` values a lane */
    MR_PLAN_SOFTMAX_BLOCK = 9, /* a block a row (rows over 1024) */
    MR_PLAN_ATTENTION = 10     /* attention: a block a tile of query rows, `tile` the head dimensions it holds */
};

typedef struct mr_plan {
    int kind;       /* enum mr_plan_kind */
    int tile;       /* MR_PLAN_TILED: the tile's index in MR_TILE_LIST */
    int threads;    /* a block's threads */
    int rows;       /* MR_PLAN_ATTENTION: the query rows a block takes */
    int64_t split;  /* K slices (1: no split) */
    int64_t kslice; /* K of each slice but the last */
    int64_t grid[3]; /* the main kernel's grid (x: K slices x column tiles, y: row tiles, z: batch),
                        after the limits of 65535 on y and z */
    int64_t blocks; /* grid[0] * grid[1] * grid[2] */
    int64_t m, n, k, nbatch; /* the product it runs (a convolution's implicit GEMM: channels a group,
                                images x positions, taps, groups) */
} mr_plan;

typedef struct mr_tile_shape {
    int bm, bn, tm, tn, rate;
} mr_tile_shape;

static inline mr_tile_shape mr_tile_shape_of(int t)
{
#define MR_TILE_CASE(i, bm, bn, tm, tn, rate) \
    case i: { mr_tile_shape s = {bm, bn, tm, tn, rate}; return s; }
    switch (t) {
        MR_TILE_LIST(MR_TILE_CASE)
    default: break;
    }
#undef MR_TILE_CASE
    {
        mr_tile_shape none = {0, 0, 0, 0, 0};
        return none;
    }
}

static inline int64_t mr_plan_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t mr_plan_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t mr_plan_abs(int64_t v) { return v < 0 ? -v : v; }

/* Whether a tile loader reads an operand (element (x, k) at x*sx + k*sk) in chunks along
 * K: along the unit stride if there is one, else along the smaller stride. */
static inline int mr_plan_along_k(int64_t sx, int64_t sk)
{
    if (sk == 1) return 1;
    if (sx == 1) return 0;
    return mr_plan_abs(sk) <= mr_plan_abs(sx);
}

/* The mask bits that fix the layouts of a GEMM of A (a_rs, a_cs) and B (b_rs, b_cs). */
static inline unsigned mr_plan_layout(int64_t a_rs, int64_t a_cs, int64_t b_rs, int64_t b_cs)
{
    return MR_PLAN_LAYOUT | (mr_plan_along_k(a_rs, a_cs) ? MR_PLAN_A_ALONG_K : 0u) |
           (mr_plan_along_k(b_cs, b_rs) ? MR_PLAN_B_ALONG_K : 0u);
}

/* Blocks for a grid-stride loop over n items, `per` items a block. */
static inline int64_t mr_plan_stride_blocks(int64_t n, int64_t per)
{
    const int64_t b = mr_plan_cdiv(n, per);
    return b < 1 ? 1 : mr_plan_min(b, MR_MAX_GRID);
}

static inline void mr_plan_grid(mr_plan *p, int64_t x, int64_t y, int64_t z)
{
    p->grid[0] = x, p->grid[1] = mr_plan_min(y, 65535), p->grid[2] = mr_plan_min(z, 65535);
    p->blocks = p->grid[0] * p->grid[1] * p->grid[2];
}

static inline mr_plan mr_plan_empty(int64_t m, int64_t n, int64_t k, int64_t nbatch)
{
    mr_plan p;
    p.kind = MR_PLAN_NONE, p.tile = 0, p.threads = 0, p.rows = 0, p.split = 1, p.kslice = k < 0 ? 0 : k;
    p.grid[0] = p.grid[1] = p.grid[2] = 0, p.blocks = 0;
    p.m = m, p.n = n, p.k = k < 0 ? 0 : k, p.nbatch = nbatch;
    return p;
}

/* K in slices for `split` blocks: each a multiple of MR_GEMM_BK (K itself when split is 1
 * or K is 0). */
static inline int64_t mr_plan_kslice(int64_t k, int64_t split)
{
    return split > 1 && k > 0 ? mr_plan_cdiv(mr_plan_cdiv(k, split), MR_GEMM_BK) * MR_GEMM_BK : k;
}

/* p as the tiled kernel with tile t, K cut into `split` slices (fewer when K is short:
 * the non-empty ones). */
static inline void mr_plan_set_tile(mr_plan *p, int t, int64_t split)
{
    const mr_tile_shape ts = mr_tile_shape_of(t);
    p->kind = MR_PLAN_TILED, p->tile = t, p->threads = (ts.bm / ts.tm) * (ts.bn / ts.tn);
    p->kslice = mr_plan_kslice(p->k, split);
    p->split = p->kslice > 0 ? mr_plan_cdiv(p->k, p->kslice) : 1;
    mr_plan_grid(p, mr_plan_cdiv(p->n, ts.bn) * p->split, mr_plan_cdiv(p->m, ts.bm), p->nbatch);
}

/* The tiled kernel's plan for p's product on `sms` SMs: the tile and split of least
 * estimated cost (see the top of this file) among those `mask` allows, partial sums
 * (split * m * n * nbatch floats) within `scratch` floats. */
static inline void mr_plan_tiled(mr_plan *p, int sms, unsigned mask, int64_t scratch)
{
    double best = -1.0;
    const int64_t outputs = p->m * p->n * p->nbatch;
    int t, best_t = 1;
    int64_t best_s = 1;
    if ((mask & MR_PLAN_TILES) == 0) mask |= 1u << 1; /* no tile allowed: the 128 x 64 one */
    if (sms < 1) sms = 1;
    for (t = 0; t < MR_TILE_COUNT; ++t) {
        const mr_tile_shape ts = mr_tile_shape_of(t);
        const int64_t tiles = mr_plan_cdiv(p->m, ts.bm) * mr_plan_cdiv(p->n, ts.bn) * p->nbatch;
        const int slots = MR_THREADS / ((ts.bm / ts.tm) * (ts.bn / ts.tn)); /* blocks an SM runs as one of 256 threads */
        int64_t s;
        if (!(mask & (1u << t))) continue;
        for (s = 1; s <= MR_SPLIT_MAX; ++s) {
            const int64_t kslice = mr_plan_kslice(p->k, s);
            double cost;
            if (s > 1) {
                if (!(mask & MR_PLAN_SPLIT) || kslice < MR_SPLIT_MIN_K || s * outputs > scratch) break;
                if (mr_plan_cdiv(p->k, kslice) != s) continue; /* the same slices as a smaller split */
            }
            cost = (double)mr_plan_cdiv(tiles * s, (int64_t)sms * slots) * slots * ts.bm * ts.bn * (double)(kslice > 0 ? kslice : 1) *
                   100.0 / ts.rate;
            if (s > 1) cost += (double)(s + 1) * (double)outputs * 4.0 * MR_PLAN_FMA_PER_BYTE / sms + MR_PLAN_LAUNCH_FMAS;
            if (best < 0 || cost < best) best = cost, best_t = t, best_s = s;
        }
    }
    mr_plan_set_tile(p, best_t, best_s);
}

/* C = A B, m x k times k x n, for nbatch batch indices; B's strides decide the GEMV kind;
 * tensor: --precision's tensor-core kernels on a device that has them. */
static inline mr_plan mr_plan_gemm(int64_t m, int64_t n, int64_t k, int64_t nbatch, int64_t b_rs, int64_t b_cs,
                                   int tensor, int sms, unsigned mask, int64_t scratch)
{
    mr_plan p = mr_plan_empty(m, n, k, nbatch);
    if (m <= 0 || n <= 0 || nbatch <= 0) return p;
    if (m <= MR_GEMV_MAX_M) {
        const int64_t items = nbatch * n;
        if (mr_plan_abs(b_rs) <= mr_plan_abs(b_cs) || items < 4096) {
            p.kind = MR_PLAN_GEMV_WARP, p.threads = MR_GEMV_WARP_THREADS;
            mr_plan_grid(&p, mr_plan_stride_blocks(items, MR_GEMV_WARP_THREADS / 32), 1, 1);
        } else {
            p.kind = MR_PLAN_GEMV_THREAD, p.threads = MR_THREADS;
            mr_plan_grid(&p, mr_plan_stride_blocks(items, MR_THREADS), 1, 1);
        }
        return p;
    }
    if (tensor) {
        p.kind = MR_PLAN_TENSOR, p.tile = 1, p.threads = MR_THREADS;
        mr_plan_grid(&p, mr_plan_cdiv(n, 64), mr_plan_cdiv(m, 128), nbatch);
        return p;
    }
    mr_plan_tiled(&p, sms, mask, scratch);
    return p;
}

/* Whether a convolution is the batched GEMM W [o, c] x X[b] [c, h*w]: 1x1, stride 1,
 * unpadded, one group. */
static inline int mr_conv_is_gemm(int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh,
                                  int64_t sw, int64_t ph, int64_t pw, int64_t groups)
{
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && groups == 1 && oh == h && ow == w;
}

/* An NCHW convolution of n images, c channels, h x w, into o channels of oh x ow, kh x kw
 * taps, in `groups` groups (the rest of its geometry does not change the plan). */
static inline mr_plan mr_plan_conv(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kh, int64_t kw,
                                   int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                                   int64_t groups, int tensor, int sms, unsigned mask, int64_t scratch)
{
    mr_plan p;
    if (n <= 0 || o <= 0 || oh <= 0 || ow <= 0 || groups <= 0) return mr_plan_empty(0, 0, 0, 0);
    if (mr_conv_is_gemm(h, w, kh, kw, oh, ow, sh, sw, ph, pw, groups))
        return mr_plan_gemm(o, oh * ow, c, n, oh * ow, 1, tensor, sms, mask, scratch);
    p = mr_plan_empty(o / groups, n * oh * ow, c / groups * kh * kw, groups);
    if (p.m <= MR_CONV_DIRECT_MAX_M) {
        p.kind = MR_PLAN_CONV_DIRECT, p.threads = MR_THREADS;
        mr_plan_grid(&p, mr_plan_stride_blocks(n * o * oh * ow, MR_THREADS), 1, 1);
    } else if (tensor) {
        p.kind = MR_PLAN_TENSOR, p.tile = 1, p.threads = MR_THREADS;
        mr_plan_grid(&p, mr_plan_cdiv(p.n, 64), mr_plan_cdiv(p.m, 128), groups);
    } else {
        mr_plan_tiled(&p, sms, mask, scratch);
    }
    return p;
}

/* Pooling of `planes` planes into oh x ow outputs. */
static inline mr_plan mr_plan_pool(int64_t planes, int64_t oh, int64_t ow)
{
    mr_plan p = mr_plan_empty(planes, oh * ow, 0, 1);
    if (planes <= 0 || oh <= 0 || ow <= 0) return p;
    p.kind = MR_PLAN_POOL, p.threads = MR_THREADS;
    mr_plan_grid(&p, mr_plan_stride_blocks(planes * oh * ow, MR_THREADS), 1, 1);
    return p;
}

/* Softmax over n elements of stride inner, outer x inner rows: along a strided axis of
 * many rows or short ones, a thread a row (coalesced across rows); rows up to 1024, a
 * warp a row holding up to 32 values a lane; longer ones a block a row. */
static inline mr_plan mr_plan_softmax(int64_t outer, int64_t n, int64_t inner)
{
    const int64_t rows = outer * inner;
    mr_plan p = mr_plan_empty(rows, n, 0, 1);
    if (outer <= 0 || n <= 0 || inner <= 0) return p;
    p.threads = MR_THREADS;
    if (inner > 1 && (rows >= 4096 || n <= 8)) {
        p.kind = MR_PLAN_SOFTMAX_COLS;
        mr_plan_grid(&p, mr_plan_stride_blocks(rows, MR_THREADS), 1, 1);
    } else if (n <= 1024) {
        int vpl = 1;
        while (vpl * 32 < n) vpl *= 2;
        p.kind = MR_PLAN_SOFTMAX_WARP, p.tile = vpl;
        mr_plan_grid(&p, mr_plan_stride_blocks(rows, MR_THREADS / 32), 1, 1);
    } else {
        p.kind = MR_PLAN_SOFTMAX_BLOCK;
        mr_plan_grid(&p, mr_plan_min(rows, 65535), 1, 1);
    }
    return p;
}

#define MR_ATTN_MAX_DIM 128 /* the largest head dimension (d and e) attention takes */
#define MR_ATTN_THREADS 128 /* 4 warps */
/* The MASK of an attention call: the head widths (the kernel's D: 32, 64, 128) and
 * query-row tiles (8, 16, 32; 32 only for heads up to 64 wide, as the static shared
 * memory stays under 48 KiB) whose kernels it instantiates; MR_ATTN_TC, the tensor-core
 * kernel (64 rows, heads up to 64 wide), which only the reduced precisions run. */
#define MR_ATTN_D32 0x1u
#define MR_ATTN_D64 0x2u
#define MR_ATTN_D128 0x4u
#define MR_ATTN_ROWS8 0x10u
#define MR_ATTN_ROWS16 0x20u
#define MR_ATTN_ROWS32 0x40u
#define MR_ATTN_TC 0x80u
#define MR_ATTN_ALL 0xf7u
#define MR_ATTN_TC_ROWS 64 /* the tensor-core kernel's row tile: 16 a warp */

/* Attention of m queries and n keys, head dimensions d and e, nbatch heads on `sms` SMs:
 * a block a tile of query rows; `tile` = the head width the kernel holds, `rows` the
 * largest row tile `mask` allows whose blocks fill the SMs (else the smallest it allows:
 * smaller tiles reload each key tile for fewer rows). With `tensor` (a reduced precision
 * on an sm_80+ device), the tensor-core kernel's 64 rows where `mask` allows it, the head
 * is at most 64 wide and its blocks fill the SMs: where they would not, the exact
 * kernel's smaller tiles spread the work wider. NONE for dimensions it does not take. */
static inline mr_plan mr_plan_attention(int64_t m, int64_t n, int64_t d, int64_t e, int64_t nbatch, int tensor, int sms,
                                        unsigned mask)
{
    const int64_t dim = d > e ? d : e;
    mr_plan p = mr_plan_empty(m, n, d, nbatch);
    int rows;
    if (m < 1 || n < 1 || d < 1 || e < 1 || nbatch < 1 || dim > MR_ATTN_MAX_DIM) return p;
    p.kind = MR_PLAN_ATTENTION, p.tile = dim <= 32 ? 32 : dim <= 64 ? 64 : 128, p.threads = MR_ATTN_THREADS;
    if (tensor && (mask & MR_ATTN_TC) && p.tile <= 64 && mr_plan_cdiv(m, MR_ATTN_TC_ROWS) * nbatch >= sms) {
        p.rows = MR_ATTN_TC_ROWS;
        mr_plan_grid(&p, mr_plan_min(mr_plan_cdiv(m, p.rows) * nbatch, 65535), 1, 1);
        return p;
    }
    if (p.tile == 128) mask &= ~MR_ATTN_ROWS32;
    if (!(mask & (MR_ATTN_ROWS8 | MR_ATTN_ROWS16 | MR_ATTN_ROWS32))) mask |= MR_ATTN_ROWS16;
    p.rows = 0;
    for (rows = 32; rows >= 8; rows /= 2) {
        if (!(mask & (MR_ATTN_ROWS8 << (rows / 16)))) continue;
        p.rows = rows; /* descending: the smallest allowed so far */
        if (mr_plan_cdiv(m, rows) * nbatch >= sms) break;
    }
    mr_plan_grid(&p, mr_plan_min(mr_plan_cdiv(m, p.rows) * nbatch, 65535), 1, 1);
    return p;
}

/* The MASK bits the kernels of plan p need instantiated: a tile kernel's tile (and
 * MR_PLAN_SPLIT when it splits K), an attention's head width and row tile; none for the
 * rest. mithrilc gathers a model's from its plans. */
static inline unsigned mr_plan_bits(const mr_plan *p)
{
    if (p->kind == MR_PLAN_TILED) return (1u << p->tile) | (p->split > 1 ? MR_PLAN_SPLIT : 0u);
    if (p->kind == MR_PLAN_ATTENTION)
        return (p->tile == 32 ? MR_ATTN_D32 : p->tile == 64 ? MR_ATTN_D64 : MR_ATTN_D128) |
               (p->rows == MR_ATTN_TC_ROWS ? MR_ATTN_TC
                : p->rows == 32         ? MR_ATTN_ROWS32
                : p->rows == 16         ? MR_ATTN_ROWS16
                                        : MR_ATTN_ROWS8);
    return 0;
}

#endif
