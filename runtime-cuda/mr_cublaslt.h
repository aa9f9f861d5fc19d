/* mr_cublaslt.h -- the optional cuBLASLt path of mithril_cuda.h's f32 GEMM.
 *
 * mr_cuda_sgemm_lt runs a product on cuBLASLt when the library can be loaded and the
 * product's layout is one cuBLASLt describes, with the epilogue (alpha, bias, residual,
 * ReLU or tanh-GELU) fused into cublasLtMatmul; otherwise it runs mr_cuda_sgemm_tc with the
 * caller's equivalent functor. cuBLASLt is loaded with dlopen ($MR_CUBLASLT, else
 * "libcublasLt.so.13"), so a model neither links against it nor needs it installed.
 *
 * It builds on mithril_cuda.h (mr_batch, mr_scratch, mr_precision, mr_cuda_sgemm_tc), but
 * only a model compiled with --gemm cublaslt includes it: it compiles against cuBLASLt's
 * header, which nvcc alone does not have. Every symbol is static or inline, as in
 * mithril_cuda.h, so two models link into one program; each translation unit loads its
 * own handle.
 *
 * Under MR_CUDA_EMULATE every call runs the built-in kernels (the emulation has no
 * cuBLASLt); the layout mapping, mr_lt_map, is plain host code compiled in both modes, so
 * the CPU tests check it against BLAS's definition of the mapped problem.
 */
#ifndef MR_CUBLASLT_H
#define MR_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>
#include <atomic>
#include "mithril_cuda.h"
#if !defined(MR_CUDA_EMULATE)
#include <cublasLt.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <mutex>
#endif

/* What cuBLASLt's epilogue does after the product:
 * C[i,j] = act(alpha * sum_k A[i,k] B[k,j] + bias[j] + R[i,j]). */
enum mr_lt_act { MR_LT_ACT_NONE = 0, MR_LT_ACT_RELU = 1, MR_LT_ACT_GELU_TANH = 2 };
struct mr_lt_epilogue {
    int act;           /* enum mr_lt_act */
    float alpha;       /* scales the product (1 for none) */
    const float *bias; /* NULL, or bias[j] for column j of C: n floats, unit stride, the same for every batch index */
    const float *res;  /* NULL, or the residual R[i*res_rs + j*res_cs], added before act (cuBLASLt's C, beta = 1) */
    int64_t res_rs, res_cs;
    int64_t res_b[MR_MAX_BATCH]; /* R's batch strides, per dimension of the call's mr_batch (0 when batch is NULL) */
};

/* lt as the built-in kernels' epilogue functor (their contract: called once C[i,j] holds
 * the product, it writes the final value): what the emulation runs in cuBLASLt's place,
 * so that the emulated tests check what a call site describes to cuBLASLt, not only its
 * own functor. ReLU and GELU as the model's (mithril_ops.h; ReLU keeps NaN). */
struct mr_lt_functor {
    float *c;
    int64_t c_rs, c_cs;
    mr_batch bt;
    mr_lt_epilogue lt;
    __device__ void operator()(int64_t nb, int64_t i, int64_t j) const
    {
        int64_t oc = 0, orr = 0;
        /* the library's unrolled walk: indexed by a variable, the arrays would go to the stack */
        mr_batch_walk(bt.rank, bt.ext, nb, [&](int d, int64_t x) { oc += x * bt.c[d], orr += x * lt.res_b[d]; });
        float *p = c + oc + i * c_rs + j * c_cs;
        float v = lt.alpha * *p;
        if (lt.bias) v += lt.bias[j];
        if (lt.res) v += lt.res[orr + i * lt.res_rs + j * lt.res_cs];
        *p = lt.act == MR_LT_ACT_RELU ? mr_reluf(v) : lt.act == MR_LT_ACT_GELU_TANH ? mr_gelu_tanhf(v) : v;
    }
};

/* Device memory cuBLASLt may use (from the model's arena; 256-byte aligned). */
struct mr_lt_workspace {
    void *p;
    size_t bytes;
};

/* ------------------------------------------------------------------------------------ */
/* The layout mapping (host only, also under emulation)                                 */
/* ------------------------------------------------------------------------------------ */

/* One operand of cuBLASLt's problem as stored: rows x cols, column-major, element (r, c)
 * of batch item nb at r + c*ld + nb*stride; trans: op(X) is X^T (A and B only). */
struct mr_lt_operand {
    int trans;
    uint64_t rows, cols;
    int64_t ld, stride;
};

/* cuBLASLt's problem, column-major: D = act(alpha op(A) op(B) + beta C + bias), op(A) is
 * m x k, op(B) k x n, C and D m x n, `batch` items. Our row-major-ish C = A B is the
 * column-major C^T = B^T A^T, so cuBLASLt's m, n are our n, m; its A is our B, its B our
 * A, its D our C (and its C our residual); its bias, one value a row of D, is ours a column. */
struct mr_lt_problem {
    uint64_t m, n, k;
    struct mr_lt_operand a, b, c, d;
    int32_t batch;
};

/* A rows x cols matrix with (r, c) at r*sr + c*sc as a column-major operand: 1 and *ld
 * when r has the unit stride and ld = sc leaves the columns apart (ld >= rows, cuBLASLt's
 * rule). A dimension of size 1 takes any stride: one column gets ld = rows. */
static inline int mr_lt_colmajor(int64_t rows, int64_t cols, int64_t sr, int64_t sc, int64_t *ld)
{
    if (rows != 1 && sr != 1) return 0;
    const int64_t l = cols == 1 ? rows : sc;
    if (l < rows || l < 1) return 0;
    *ld = l;
    return 1;
}

/* op(X) = rows x cols with (r, c) at r*sr + c*sc as cuBLASLt's operand X: stored as is
 * (trans 0) when r has the unit stride, else transposed (trans 1, X stored cols x rows). */
static inline int mr_lt_op(struct mr_lt_operand *o, int64_t rows, int64_t cols, int64_t sr, int64_t sc)
{
    o->stride = 0;
    if (mr_lt_colmajor(rows, cols, sr, sc, &o->ld)) {
        o->trans = 0, o->rows = (uint64_t)rows, o->cols = (uint64_t)cols;
        return 1;
    }
    if (mr_lt_colmajor(cols, rows, sc, sr, &o->ld)) {
        o->trans = 1, o->rows = (uint64_t)cols, o->cols = (uint64_t)rows;
        return 1;
    }
    return 0;
}

/*
 * Our product (mr_cuda_sgemm's m, n, k, strides and batch; has_res, res_* as in
 * mr_lt_epilogue) as cuBLASLt's problem: 1 and *pr, or 0 when cuBLASLt cannot take it:
 * - m, n or k < 1 (an empty product launches nothing; k = 0 writes act(bias + R), which
 *   the built-in kernels do without asking cuBLASLt about an empty sum);
 * - an operand with no unit stride (C and R need it along n), or whose other stride
 *   overlaps its rows or columns (ld < rows), or any negative stride;
 * - batch dimensions (extent 1 ignored) that do not collapse into one count with one
 *   stride an operand: outer stride == inner stride * inner extent, for A, B, C and R;
 *   A and B may be broadcast (stride 0), C and R not; the count must fit an int32.
 */
static inline int mr_lt_map(struct mr_lt_problem *pr, int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs,
                            int64_t b_rs, int64_t b_cs, int64_t c_rs, int64_t c_cs, const mr_batch *batch, int has_res,
                            int64_t res_rs, int64_t res_cs, const int64_t *res_b)
{
    if (m < 1 || n < 1 || k < 1) return 0;
    if (a_rs < 0 || a_cs < 0 || b_rs < 0 || b_cs < 0 || c_rs < 0 || c_cs < 0) return 0;
    if (has_res && (res_rs < 0 || res_cs < 0)) return 0;
    pr->m = (uint64_t)n, pr->n = (uint64_t)m, pr->k = (uint64_t)k;
    /* its A: op(A) = our B^T (n x k, (j, kk) at j*b_cs + kk*b_rs); its B: our A^T (k x m) */
    if (!mr_lt_op(&pr->a, n, k, b_cs, b_rs) || !mr_lt_op(&pr->b, k, m, a_cs, a_rs)) return 0;
    /* its D: our C^T, n x m, not transposed (cuBLASLt has no op on C and D) */
    pr->d.trans = 0, pr->d.rows = (uint64_t)n, pr->d.cols = (uint64_t)m, pr->d.stride = 0;
    if (!mr_lt_colmajor(n, m, c_cs, c_rs, &pr->d.ld)) return 0;
    pr->c = pr->d;
    if (has_res && !mr_lt_colmajor(n, m, res_cs, res_rs, &pr->c.ld)) return 0;

    int64_t count = 1, st[4] = {0, 0, 0, 0}; /* collapsed so far (innermost first): our A, B, C, R */
    const int rank = batch ? batch->rank : 0;
    if (rank < 0 || rank > MR_MAX_BATCH) return 0;
    for (int d = rank - 1; d >= 0; --d) {
        const int64_t e = batch->ext[d];
        const int64_t s[4] = {batch->a[d], batch->b[d], batch->c[d], has_res ? res_b[d] : 0};
        if (e < 1) return 0;
        if (e == 1) continue;
        for (int x = 0; x < 4; ++x)
            if (s[x] < 0) return 0;
        if (count == 1) {
            for (int x = 0; x < 4; ++x) st[x] = s[x];
        } else {
            for (int x = 0; x < 4; ++x)
                if ((st[x] != 0 && st[x] > INT64_MAX / count) || s[x] != st[x] * count) return 0;
        }
        if (e > INT32_MAX / count) return 0;
        count *= e;
    }
    if (count > 1 && (st[2] == 0 || (has_res && st[3] == 0))) return 0;
    pr->batch = (int32_t)count;
    pr->b.stride = st[0], pr->a.stride = st[1], pr->d.stride = st[2];
    pr->c.stride = has_res ? st[3] : st[2];
    return 1;
}

/* ------------------------------------------------------------------------------------ */
/* Call sites                                                                           */
/* ------------------------------------------------------------------------------------ */

#define MR_LT_CACHE 8

#if !defined(MR_CUDA_EMULATE)
/* What one shape's first call found out: the shape (as mapped), everything else the
 * heuristic depends on, and its answer. */
struct mr_lt_key {
    struct mr_lt_problem pr;
    int prec, act, bias, res, device;
    uint32_t align[5]; /* bytes: our B, our A, residual (or C), C, bias */
    uint64_t ws;
};
struct mr_lt_entry {
    int state; /* 0: empty; 1: algo; 2: refused (heuristic found none, or cublasLtMatmul declined) */
    struct mr_lt_key key;
    cublasLtMatmulAlgo_t algo;
};
#endif

/* One per call site, `static mr_lt_site name;` at namespace scope: every member has a
 * constant initialiser, so it is constant-initialised (usable from any static
 * constructor). runs / fallbacks count the calls that ran on cuBLASLt / on the built-in
 * kernels (mr_lt_site_runs, mr_lt_site_fallbacks). */
struct mr_lt_site {
    std::atomic<long long> runs{0}, fallbacks{0};
#if !defined(MR_CUDA_EMULATE)
    std::mutex mu;
    int next = 0; /* the entry the next new shape replaces (round robin) */
    mr_lt_entry cache[MR_LT_CACHE] = {};
#endif
};

static inline long long mr_lt_site_runs(const mr_lt_site *site) { return site->runs.load(); }
static inline long long mr_lt_site_fallbacks(const mr_lt_site *site) { return site->fallbacks.load(); }

#if !defined(MR_CUDA_EMULATE)

/* ------------------------------------------------------------------------------------ */
/* Loading cuBLASLt                                                                     */
/* ------------------------------------------------------------------------------------ */

/* The functions used, typed from cublasLt.h's prototypes. The descriptors are the
 * semi-opaque stack kind (the *Init_internal entry points behind cublasLt.h's inline
 * *Init), so nothing is allocated per call and nothing needs destroying. */
struct mr_lt_lib {
    cublasLtHandle_t handle;
    int device; /* current when the handle was created; other devices fall back */
    decltype(&cublasLtMatmul) matmul;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
    decltype(&cublasLtMatmulDescInit_internal) desc_init;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set;
    decltype(&cublasLtMatrixLayoutInit_internal) layout_init;
    decltype(&cublasLtMatrixLayoutSetAttribute) layout_set;
    decltype(&cublasLtMatmulPreferenceInit_internal) pref_init;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
};

template <class F> static inline bool mr_lt_sym(void *dl, const char *name, F *f)
{
    void *p = dlsym(dl, name);
    memcpy(f, &p, sizeof p); /* object to function pointer without a cast (POSIX guarantees it works) */
    return p != NULL;
}

/* dlopen, every symbol, the version's major, a handle: NULL on any failure, silently
 * (the generated library never prints). The library stays loaded and the handle alive
 * until the process exits: cublasLtDestroy from a static destructor could run after the
 * CUDA runtime has been torn down. */
static inline const mr_lt_lib *mr_lt_load()
{
    static mr_lt_lib lib;
    const char *env = getenv("MR_CUBLASLT");
    if (env && strcmp(env, "off") == 0) return NULL;
    void *dl = dlopen(env && *env ? env : "libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!dl) return NULL;
    decltype(&cublasLtGetVersion) version;
    decltype(&cublasLtCreate) create;
    const bool ok =
        mr_lt_sym(dl, "cublasLtGetVersion", &version) && mr_lt_sym(dl, "cublasLtCreate", &create) &&
        mr_lt_sym(dl, "cublasLtMatmul", &lib.matmul) && mr_lt_sym(dl, "cublasLtMatmulAlgoGetHeuristic", &lib.heuristic) &&
        mr_lt_sym(dl, "cublasLtMatmulDescInit_internal", &lib.desc_init) &&
        mr_lt_sym(dl, "cublasLtMatmulDescSetAttribute", &lib.desc_set) &&
        mr_lt_sym(dl, "cublasLtMatrixLayoutInit_internal", &lib.layout_init) &&
        mr_lt_sym(dl, "cublasLtMatrixLayoutSetAttribute", &lib.layout_set) &&
        mr_lt_sym(dl, "cublasLtMatmulPreferenceInit_internal", &lib.pref_init) &&
        mr_lt_sym(dl, "cublasLtMatmulPreferenceSetAttribute", &lib.pref_set) &&
        /* cublasLtGetVersion: major * 10000 + minor * 100 + patch; the ABI is the major's */
        version() / 10000 == CUBLAS_VER_MAJOR && cudaGetDevice(&lib.device) == cudaSuccess &&
        create(&lib.handle) == CUBLAS_STATUS_SUCCESS;
    if (ok) return &lib;
    dlclose(dl);
    return NULL;
}

/* The loaded library, or NULL; loaded once per translation unit (a function-local
 * static: thread-safe initialisation). */
static inline const mr_lt_lib *mr_lt_lib_get()
{
    static const mr_lt_lib *const lib = mr_lt_load();
    return lib;
}

/* ------------------------------------------------------------------------------------ */
/* One call                                                                             */
/* ------------------------------------------------------------------------------------ */

/* The largest power of two dividing the address, at most 256 (NULL: 256). */
static inline uint32_t mr_lt_align(const void *p)
{
    const uintptr_t v = (uintptr_t)p;
    uint32_t al = 1;
    while (al < 256 && v % (2 * al) == 0) al *= 2;
    return al;
}

static inline bool mr_lt_operand_eq(const mr_lt_operand &x, const mr_lt_operand &y)
{
    return x.trans == y.trans && x.rows == y.rows && x.cols == y.cols && x.ld == y.ld && x.stride == y.stride;
}

/* Field by field: the structs' padding bytes are unspecified. */
static inline bool mr_lt_key_eq(const mr_lt_key &x, const mr_lt_key &y)
{
    bool eq = x.pr.m == y.pr.m && x.pr.n == y.pr.n && x.pr.k == y.pr.k && x.pr.batch == y.pr.batch &&
              mr_lt_operand_eq(x.pr.a, y.pr.a) && mr_lt_operand_eq(x.pr.b, y.pr.b) &&
              mr_lt_operand_eq(x.pr.c, y.pr.c) && mr_lt_operand_eq(x.pr.d, y.pr.d) && x.prec == y.prec &&
              x.act == y.act && x.bias == y.bias && x.res == y.res && x.device == y.device && x.ws == y.ws;
    for (int i = 0; i < 5; ++i) eq = eq && x.align[i] == y.align[i];
    return eq;
}

struct mr_lt_desc {
    cublasLtMatmulDescOpaque_t op;
    cublasLtMatrixLayoutOpaque_t a, b, c, d;
};

static inline cublasStatus_t mr_lt_layout(const mr_lt_lib &L, cublasLtMatrixLayoutOpaque_t *l, const mr_lt_operand &o,
                                          int32_t batch)
{
    cublasStatus_t st = L.layout_init(l, sizeof *l, CUDA_R_32F, o.rows, o.cols, o.ld);
    if (st == CUBLAS_STATUS_SUCCESS && batch > 1) {
        st = L.layout_set(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = L.layout_set(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &o.stride, sizeof o.stride);
    }
    return st;
}

/* The descriptors of key k's problem, with this call's bias pointer (the heuristic reads
 * its alignment from it, and cublasLtMatmul the vector). */
static inline cublasStatus_t mr_lt_describe(const mr_lt_lib &L, mr_lt_desc *d, const mr_lt_key &k, const float *bias)
{
    /* MR_F32 is exact: CUBLAS_COMPUTE_32F (no TF32); the others let cuBLASLt round the
     * operands to the format (or to TF32), as the tensor-core kernels do */
    const cublasComputeType_t ct = k.prec == MR_TF32   ? CUBLAS_COMPUTE_32F_FAST_TF32
                                   : k.prec == MR_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                   : k.prec == MR_F16  ? CUBLAS_COMPUTE_32F_FAST_16F
                                                       : CUBLAS_COMPUTE_32F;
    const int32_t ta = k.pr.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k.pr.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* cuBLASLt's GELU is the tanh approximation */
    uint32_t epi = k.act == MR_LT_ACT_RELU ? CUBLASLT_EPILOGUE_RELU
                   : k.act == MR_LT_ACT_GELU_TANH ? CUBLASLT_EPILOGUE_GELU
                                                  : CUBLASLT_EPILOGUE_DEFAULT;
    if (k.bias) epi |= CUBLASLT_EPILOGUE_BIAS;
    cublasStatus_t st = L.desc_init(&d->op, sizeof d->op, ct, CUDA_R_32F);
    if (st == CUBLAS_STATUS_SUCCESS) st = L.desc_set(&d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (st == CUBLAS_STATUS_SUCCESS) st = L.desc_set(&d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (st == CUBLAS_STATUS_SUCCESS) st = L.desc_set(&d->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (st == CUBLAS_STATUS_SUCCESS && bias)
        st = L.desc_set(&d->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (st == CUBLAS_STATUS_SUCCESS) st = mr_lt_layout(L, &d->a, k.pr.a, k.pr.batch);
    if (st == CUBLAS_STATUS_SUCCESS) st = mr_lt_layout(L, &d->b, k.pr.b, k.pr.batch);
    if (st == CUBLAS_STATUS_SUCCESS) st = mr_lt_layout(L, &d->c, k.pr.c, k.pr.batch);
    if (st == CUBLAS_STATUS_SUCCESS) st = mr_lt_layout(L, &d->d, k.pr.d, k.pr.batch);
    return st;
}

/* The heuristic's one algorithm for key k (host work only): state 1 and *algo, or 2. */
static inline int mr_lt_choose(const mr_lt_lib &L, const mr_lt_key &k, const float *bias, cublasLtMatmulAlgo_t *algo)
{
    mr_lt_desc d;
    cublasLtMatmulPreferenceOpaque_t pref;
    if (mr_lt_describe(L, &d, k, bias) != CUBLAS_STATUS_SUCCESS) return 2;
    const uint64_t ws = k.ws;
    if (L.pref_init(&pref, sizeof pref) != CUBLAS_STATUS_SUCCESS ||
        L.pref_set(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) != CUBLAS_STATUS_SUCCESS)
        return 2;
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i)
        if (L.pref_set(&pref, align_attr[i], &k.align[i], sizeof k.align[i]) != CUBLAS_STATUS_SUCCESS) return 2;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    memset(&res, 0, sizeof res);
    if (L.heuristic(L.handle, &d.op, &d.a, &d.b, &d.c, &d.d, &pref, 1, &res, &found) != CUBLAS_STATUS_SUCCESS ||
        found < 1 || res.state != CUBLAS_STATUS_SUCCESS)
        return 2;
    *algo = res.algo;
    return 1;
}

/* The site's entry for k, or NULL (the caller holds site->mu). */
static inline mr_lt_entry *mr_lt_find(mr_lt_site *site, const mr_lt_key &k)
{
    for (int i = 0; i < MR_LT_CACHE; ++i)
        if (site->cache[i].state != 0 && mr_lt_key_eq(site->cache[i].key, k)) return &site->cache[i];
    return NULL;
}

/*
 * The product on cuBLASLt, if it takes it: *ran, and cudaSuccess; *ran false (nothing
 * launched) when the library is absent or refuses the shape, which is remembered. A
 * failure other than a refusal is returned: cudaErrorMemoryAllocation (ALLOC_FAILED),
 * cudaErrorLaunchFailure (EXECUTION_FAILED), cudaErrorUnknown otherwise.
 */
static inline cudaError_t mr_lt_run(mr_lt_site *site, cudaStream_t s, int prec, const mr_lt_problem &pr,
                                     const float *a, const float *b, float *c, mr_lt_workspace ws,
                                     const mr_lt_epilogue &lt, bool *ran)
{
    *ran = false;
    const mr_lt_lib *L = mr_lt_lib_get();
    int device = -1;
    if (!L || cudaGetDevice(&device) != cudaSuccess || device != L->device) return cudaSuccess;
    /* an in-place residual (R == C) must be laid out as C is; cuBLASLt then reads and writes it */
    if (lt.res == c && (pr.c.ld != pr.d.ld || pr.c.stride != pr.d.stride)) return cudaSuccess;
    if (lt.act < MR_LT_ACT_NONE || lt.act > MR_LT_ACT_GELU_TANH) return cudaSuccess;
    mr_lt_key k;
    k.pr = pr, k.prec = prec, k.act = lt.act, k.bias = lt.bias != NULL, k.res = lt.res != NULL, k.device = device;
    const float *cin = lt.res ? lt.res : c;
    k.align[0] = mr_lt_align(b), k.align[1] = mr_lt_align(a), k.align[2] = mr_lt_align(cin);
    k.align[3] = mr_lt_align(c), k.align[4] = mr_lt_align(lt.bias);
    k.ws = ws.p ? ws.bytes : 0;
    cublasLtMatmulAlgo_t algo;
    {
        std::lock_guard<std::mutex> g(site->mu);
        mr_lt_entry *e = mr_lt_find(site, k);
        if (!e) {
            e = &site->cache[site->next];
            site->next = (site->next + 1) % MR_LT_CACHE;
            e->key = k;
            e->state = mr_lt_choose(*L, k, lt.bias, &e->algo);
        }
        if (e->state != 1) return cudaSuccess;
        algo = e->algo;
    }
    mr_lt_desc d;
    if (mr_lt_describe(*L, &d, k, lt.bias) != CUBLAS_STATUS_SUCCESS) return cudaSuccess;
    const float alpha = lt.alpha, beta = lt.res ? 1.0f : 0.0f;
    const cublasStatus_t st = L->matmul(L->handle, &d.op, &alpha, b, &d.a, a, &d.b, &beta, cin, &d.c, c, &d.d, &algo,
                                        ws.p, (size_t)k.ws, s);
    if (st == CUBLAS_STATUS_SUCCESS) {
        *ran = true;
        return cudaSuccess;
    }
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE || st == CUBLAS_STATUS_ARCH_MISMATCH) {
        std::lock_guard<std::mutex> g(site->mu);
        if (mr_lt_entry *e = mr_lt_find(site, k)) e->state = 2;
        return cudaSuccess;
    }
    return st == CUBLAS_STATUS_ALLOC_FAILED      ? cudaErrorMemoryAllocation
           : st == CUBLAS_STATUS_EXECUTION_FAILED ? cudaErrorLaunchFailure
                                                  : cudaErrorUnknown;
}

#endif /* !MR_CUDA_EMULATE */

/* Whether cuBLASLt is loaded (loading it on the first call): 0 under emulation, with
 * MR_CUBLASLT=off, or when it cannot be loaded. */
static inline int mr_lt_available(void)
{
#if defined(MR_CUDA_EMULATE)
    return 0;
#else
    return mr_lt_lib_get() != NULL;
#endif
}

/*
 * C = act(alpha * A B + bias + R) as mr_cuda_sgemm_tc<P, MASK> computes it with `ep` (the
 * compiler's functor for the same epilogue, which `lt` describes to cuBLASLt): on cuBLASLt
 * when it is loaded and takes the shape (mr_lt_map, then its heuristic, once per shape and
 * site; MR_F32 exact, the others its FAST_TF32 / FAST_16BF / FAST_16F compute types),
 * otherwise, and always under emulation, mr_cuda_sgemm_tc. Choosing the algorithm is host
 * work only, so a warm-up call before stream capture leaves capture just cublasLtMatmul.
 */
template <mr_precision P, unsigned MASK = MR_PLAN_ALL, class Ep>
static cudaError_t mr_cuda_sgemm_lt(mr_lt_site *site, cudaStream_t s, int64_t m, int64_t n, int64_t k, const float *a,
                                    int64_t a_rs, int64_t a_cs, const float *b, int64_t b_rs, int64_t b_cs, float *c,
                                    int64_t c_rs, int64_t c_cs, const mr_batch *batch, mr_scratch scratch,
                                    mr_lt_workspace ws, const mr_lt_epilogue &lt, Ep ep)
{
#if !defined(MR_CUDA_EMULATE)
    /* MR_CUBLASLT_REQUIRE=1: a product cuBLASLt does not run is an error, so that a test
     * or a benchmark on a GPU knows cuBLASLt ran (not the built-in kernels in its place). */
    static const bool require = getenv("MR_CUBLASLT_REQUIRE") && strcmp(getenv("MR_CUBLASLT_REQUIRE"), "1") == 0;
    mr_lt_problem pr;
    if (mr_lt_map(&pr, m, n, k, a_rs, a_cs, b_rs, b_cs, c_rs, c_cs, batch, lt.res != NULL, lt.res_rs, lt.res_cs,
                  lt.res_b)) {
        bool ran = false;
        const cudaError_t e = mr_lt_run(site, s, P, pr, a, b, c, ws, lt, &ran);
        if (e != cudaSuccess) return e;
        if (ran) {
            ++site->runs;
            return cudaSuccess;
        }
    }
    ++site->fallbacks;
    if (require) return cudaErrorNotSupported;
    return mr_cuda_sgemm_tc<P, MASK>(s, m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, batch, scratch, ep);
#else
    /* The emulation has no cuBLASLt: the built-in kernels with lt's functor in its place. */
    (void)ws, (void)ep;
    mr_lt_functor f = {c, c_rs, c_cs, {}, lt};
    f.bt.rank = 0;
    if (batch) f.bt = *batch;
    ++site->fallbacks;
    return mr_cuda_sgemm_tc<P, MASK>(s, m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, batch, scratch, f);
#endif
}

#endif /* MR_CUBLASLT_H */
