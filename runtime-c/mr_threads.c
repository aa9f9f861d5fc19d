/*
 * mr_threads.c -- the _mt variants of the kernels and mr_run: work split into tasks
 * for the caller's parallel-for hook (mr_threads), each task a serial call on its part.
 */
#include "mr_internal.h"

/* ------------------------------------------------------------------------------------ */
/* Work split through the caller's parallel-for hook                                    */
/* ------------------------------------------------------------------------------------ */

/* Columns of C per task: the packed block width keeps each task's packing identical
 * to the serial call's, and gives enough tasks to split evenly: with 4 blocks per task,
 * N = 768 made 3 tasks, so one of 2 threads did twice the other's work (gpt_block b1 2t
 * 8.9 -> 7.6 ms). */
#define MR_MT_COLS MR_SGEMM_NC
/* For B in panels, whole panels too (the least common multiple of the two): a piece
 * that starts inside a panel cannot take the GEMV the serial call takes, and would
 * differ from it in rounding (with the default NC of 64 this is 64). */
#define MR_MT_PANEL_COLS (MR_MT_COLS * (MR_PANEL / mr_gcd_panel(MR_MT_COLS)))
#define mr_gcd_panel(n) ((n) % 32 == 0 ? 32 : (n) % 16 == 0 ? 16 : (n) % 8 == 0 ? 8 : (n) % 4 == 0 ? 4 : (n) % 2 == 0 ? 2 : 1)
#if MR_PANEL != 32
#error "mr_gcd_panel assumes MR_PANEL == 32"
#endif
#ifndef MR_MT_MIN_MACS
#define MR_MT_MIN_MACS 262144.0
#endif

typedef struct {
    int64_t M, N, K;
    float alpha, beta;
    const float *A, *B;
    float *C;
    int64_t a_rs, a_cs, b_rs, b_cs, c_rs, c_cs;
    const mr_epilogue *ep;
    int panels; /* B is in panels (mr_sgemm_panels_q_mt) stored as btype at Bq; B, b_rs, b_cs unused */
    const void *Bq;
    int btype;
} mr_sgemm_job;

/* mr_sgemm_task: columns [begin, end) * cols of a mr_sgemm_job. */
static void mr_sgemm_task(void *ctx, int64_t begin, int64_t end)
{
    const mr_sgemm_job *j = (const mr_sgemm_job *)ctx;
    const int64_t cols = j->panels ? MR_MT_PANEL_COLS : MR_MT_COLS;
    int64_t j0 = begin * cols;
    int64_t j1 = end * cols < j->N ? end * cols : j->N;
    if (j1 > j0) {
        mr_epi_at at;
        at.ep = j->ep;
        at.n = j->ep ? j->ep->n : 0;
        at.i = 0;
        at.j = j0;
        if (j->panels) {
            const mr_asrc a = mr_asrc_f32(j->A, j->a_rs, j->a_cs);
            mr_sgemm_panels_at(j->M, j1 - j0, j->K, j->alpha, &a, j->Bq, j->btype,
                               (j->N + MR_PANEL - 1) / MR_PANEL, j0, j->beta, j->C + j0 * j->c_cs, j->c_rs, j->c_cs,
                               &at);
        } else {
            mr_sgemm_at(j->M, j1 - j0, j->K, j->alpha, j->A, j->a_rs, j->a_cs, j->B + j0 * j->b_cs, j->b_rs,
                        j->b_cs, j->beta, j->C + j0 * j->c_cs, j->c_rs, j->c_cs, &at);
        }
    }
}

static void mr_sgemm_run(const mr_threads *threads, mr_sgemm_job *job)
{
    const int64_t cols = job->panels ? MR_MT_PANEL_COLS : MR_MT_COLS;
    int64_t tasks = (job->N + cols - 1) / cols;
    /* Below MR_MT_MIN_MACS multiply-adds splitting costs more than it saves. */
    if (!threads || !threads->parallel_for || tasks < 2 ||
        (double)job->M * (double)job->N * (double)job->K < MR_MT_MIN_MACS) {
        mr_sgemm_task(job, 0, tasks > 0 ? tasks : 1);
        return;
    }
    threads->parallel_for(threads->user, mr_sgemm_task, job, tasks);
}

void mr_sgemm_mt(const mr_threads *threads, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t a_rs, int64_t a_cs,
                 const float *B, int64_t b_rs, int64_t b_cs,
                 float beta, float *C, int64_t c_rs, int64_t c_cs, const mr_epilogue *ep)
{
    mr_sgemm_job job;
    job.M = M; job.N = N; job.K = K; job.alpha = alpha; job.beta = beta;
    job.A = A; job.B = B; job.C = C;
    job.a_rs = a_rs; job.a_cs = a_cs; job.b_rs = b_rs; job.b_cs = b_cs; job.c_rs = c_rs; job.c_cs = c_cs;
    job.ep = ep;
    job.panels = 0;
    job.Bq = NULL;
    job.btype = MR_F32;
    mr_sgemm_run(threads, &job);
}

void mr_sgemm_panels_q_mt(const mr_threads *threads, int64_t M, int64_t N, int64_t K, float alpha,
                          const float *A, int64_t a_rs, int64_t a_cs, const void *Bp, int btype,
                          float beta, float *C, int64_t c_rs, int64_t c_cs, const mr_epilogue *ep)
{
    mr_sgemm_job job;
    job.M = M; job.N = N; job.K = K; job.alpha = alpha; job.beta = beta;
    job.A = A; job.B = NULL; job.C = C;
    job.a_rs = a_rs; job.a_cs = a_cs; job.b_rs = 0; job.b_cs = 0; job.c_rs = c_rs; job.c_cs = c_cs;
    job.ep = ep;
    job.panels = 1;
    job.Bq = Bp;
    job.btype = btype;
    mr_sgemm_run(threads, &job);
}

void mr_sgemm_panels_mt(const mr_threads *threads, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, int64_t a_rs, int64_t a_cs, const float *Bp,
                        float beta, float *C, int64_t c_rs, int64_t c_cs, const mr_epilogue *ep)
{
    mr_sgemm_panels_q_mt(threads, M, N, K, alpha, A, a_rs, a_cs, Bp, MR_F32, beta, C, c_rs, c_cs, ep);
}

/* mr_gemm_i8_mt's job: A's batch * M rows quantized into the scratch (tasks of
 * MR_MT_I8_ROWS rows), then C's columns (tasks of MR_MT_PANEL_COLS, as
 * mr_sgemm_panels_q_mt's), every row of the batch in each. */
#define MR_MT_I8_ROWS 16
typedef struct {
    int64_t rows, M, N, K;
    float alpha, beta;
    const float *A;
    const void *Bq;
    float *C;
    int64_t a_bs, a_rs, a_cs, c_bs, c_rs, c_cs;
    void *scratch;
    const mr_epilogue *ep;
} mr_i8_job;

static void mr_i8_rows_task(void *ctx, int64_t begin, int64_t end)
{
    const mr_i8_job *j = (const mr_i8_job *)ctx;
    mr_i8_quantize_rows(j->rows, j->M, j->K, j->A, j->a_bs, j->a_rs, j->a_cs, begin * MR_MT_I8_ROWS,
                        mr_min_i64(j->rows, end * MR_MT_I8_ROWS), j->scratch);
}

static void mr_i8_cols_task(void *ctx, int64_t begin, int64_t end)
{
    const mr_i8_job *j = (const mr_i8_job *)ctx;
    const int64_t j0 = begin * MR_MT_PANEL_COLS, j1 = mr_min_i64(j->N, end * MR_MT_PANEL_COLS);
    mr_epi_at at;
    at.ep = j->ep;
    at.n = j->ep ? j->ep->n : 0;
    at.i = 0;
    at.j = j0;
    if (j1 > j0) {
        mr_gemm_i8_cols(j->rows, j->M, j->N, j->K, j->alpha, j->Bq, j0, j1 - j0, j->beta, j->C + j0 * j->c_cs, j->c_bs,
                        j->c_rs, j->c_cs, j->scratch, &at);
    }
}

void mr_gemm_i8_mt(const mr_threads *threads, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                   const float *A, int64_t a_bs, int64_t a_rs, int64_t a_cs, const void *Bq, float beta, float *C,
                   int64_t c_bs, int64_t c_rs, int64_t c_cs, void *scratch, const mr_epilogue *ep)
{
    const int64_t rows = batch * M;
    const int split = threads && threads->parallel_for && (double)rows * (double)N * (double)K >= MR_MT_MIN_MACS;
    const int64_t row_tasks = (rows + MR_MT_I8_ROWS - 1) / MR_MT_I8_ROWS;
    const int64_t col_tasks = (N + MR_MT_PANEL_COLS - 1) / MR_MT_PANEL_COLS;
    mr_i8_job job;
    int64_t b, i, t;
    if (batch <= 0 || M <= 0 || N <= 0) return;
    if (K <= 0) {
        /* no products: beta * C (B holds nothing to read) */
        for (b = 0; b < batch; ++b) {
            for (i = 0; i < M; ++i) {
                float *c = C + b * c_bs + i * c_rs;
                for (t = 0; t < N; ++t) c[t * c_cs] = beta == 0.0f ? 0.0f : beta * c[t * c_cs];
            }
            if (ep && ep->fn) ep->fn(ep->ctx, ep->n + b, 0, M, 0, N);
        }
        return;
    }
    job.rows = rows; job.M = M; job.N = N; job.K = K; job.alpha = alpha; job.beta = beta;
    job.A = A; job.Bq = Bq; job.C = C;
    job.a_bs = a_bs; job.a_rs = a_rs; job.a_cs = a_cs; job.c_bs = c_bs; job.c_rs = c_rs; job.c_cs = c_cs;
    job.scratch = scratch;
    job.ep = ep;
    if (split && row_tasks > 1) {
        threads->parallel_for(threads->user, mr_i8_rows_task, &job, row_tasks);
    } else {
        mr_i8_rows_task(&job, 0, row_tasks);
    }
    if (split && col_tasks > 1) {
        threads->parallel_for(threads->user, mr_i8_cols_task, &job, col_tasks);
    } else {
        mr_i8_cols_task(&job, 0, col_tasks);
    }
}

/* mr_conv2d_i8_mt's tasks: images' scales (one an item), their padded rows of codes
 * (item = image * Hp + row), and chunks of positions (task t takes items [t * items /
 * tasks, (t + 1) * items / tasks), item = image * chunks + chunk, with slot t). */
static void mr_i8_conv_image_task(void *ctx, int64_t begin, int64_t end)
{
    for (; begin < end; ++begin) mr_i8_conv_image((const mr_i8_conv *)ctx, begin);
}

static void mr_i8_conv_codes_task(void *ctx, int64_t begin, int64_t end)
{
    const mr_i8_conv *cv = (const mr_i8_conv *)ctx;
    int64_t item, next;
    for (item = begin; item < end; item = next) {
        const int64_t n = item / cv->Hp;
        next = mr_min_i64(end, (n + 1) * cv->Hp);
        mr_i8_conv_codes(cv, n, item - n * cv->Hp, next - n * cv->Hp);
    }
}

static void mr_i8_conv_chunks_task(void *ctx, int64_t begin, int64_t end)
{
    const mr_i8_conv *cv = (const mr_i8_conv *)ctx;
    const int64_t items = cv->N * cv->chunks, P = cv->OH * cv->OW;
    int64_t t, item;
    for (t = begin; t < end; ++t) {
        for (item = t * items / cv->tasks; item < (t + 1) * items / cv->tasks; ++item) {
            const int64_t n = item / cv->chunks, p0 = item % cv->chunks * cv->rows;
            mr_i8_conv_chunk(cv, n, p0, mr_min_i64(P, p0 + cv->rows), cv->slots + t * cv->slot_bytes);
        }
    }
}

void mr_conv2d_i8_mt(const mr_threads *threads, const float *x, const void *wq, float *y,
                     int64_t N, int64_t C, int64_t H, int64_t W,
                     int64_t O, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                     int64_t stride_h, int64_t stride_w,
                     int64_t pad_top, int64_t pad_left,
                     int64_t dil_h, int64_t dil_w, void *scratch, const mr_epilogue *ep)
{
    const int64_t P = OH * OW, K = C * KH * KW;
    const int split = threads && threads->parallel_for && (double)N * (double)P * (double)O * (double)K >= MR_MT_MIN_MACS;
    mr_i8_conv cv;
    int64_t n, o;
    if (N <= 0 || O <= 0 || P <= 0) return;
    if (K <= 0) {
        for (n = 0; n < N; ++n) {
            for (o = 0; o < O; ++o) memset(y + (n * O + o) * P, 0, sizeof(float) * (size_t)P);
            if (ep && ep->fn) ep->fn(ep->ctx, ep->n + n, 0, O, 0, P);
        }
        return;
    }
    cv.x = x; cv.wq = wq; cv.y = y; cv.N = N; cv.C = C; cv.H = H; cv.W = W; cv.O = O; cv.KH = KH; cv.KW = KW;
    cv.OH = OH; cv.OW = OW; cv.sh = stride_h; cv.sw = stride_w; cv.pt = pad_top; cv.pl = pad_left; cv.dh = dil_h;
    cv.dw = dil_w; cv.ep = ep;
    cv.Hp = MR_I8_CONV_SPAN(OH, stride_h, KH, dil_h);
    cv.Wp = MR_I8_CONV_SPAN(OW, stride_w, KW, dil_w);
    cv.rows = MR_I8_CONV_ROWS(P);
    cv.chunks = (P + cv.rows - 1) / cv.rows;
    cv.tasks = MR_I8_CONV_TASKS(N, P);
    cv.slot_bytes = MR_I8_SCRATCH_BYTES(cv.rows, K);
    cv.slots = (uint8_t *)scratch;
    cv.scales = (float *)(void *)(cv.slots + cv.tasks * cv.slot_bytes);
    cv.zeros = (int32_t *)(void *)(cv.scales + N);
    cv.codes = (uint8_t *)(void *)(cv.zeros + N);
    if (split && N > 1) {
        threads->parallel_for(threads->user, mr_i8_conv_image_task, &cv, N);
    } else {
        mr_i8_conv_image_task(&cv, 0, N);
    }
    if (split) {
        threads->parallel_for(threads->user, mr_i8_conv_codes_task, &cv, N * cv.Hp);
        threads->parallel_for(threads->user, mr_i8_conv_chunks_task, &cv, cv.tasks);
    } else {
        mr_i8_conv_codes_task(&cv, 0, N * cv.Hp);
        mr_i8_conv_chunks_task(&cv, 0, cv.tasks);
    }
}

typedef struct {
    const float *x;
    const void *w;
    int wtype;
    float *y;
    int64_t N, C, H, W, O, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw, groups, chunks, per_chunk;
    const mr_epilogue *ep;
} mr_conv_job;

/* mr_conv_task: items [begin, end) of a mr_conv_job, item = image * chunks + chunk; a
 * chunk is a range of per_chunk output positions (each packs only its own columns of
 * the implicit im2col matrix, so splitting repeats no work). Consecutive chunks of one
 * image are one call, and consecutive whole images one call too: a call lays out its
 * weights once (the lanes path's), so a call per image cost lenet b32's 16-channel
 * convolution, 2 threads, 16 layouts a thread where 1 thread makes one. */
static void mr_conv_task(void *ctx, int64_t begin, int64_t end)
{
    const mr_conv_job *j = (const mr_conv_job *)ctx;
    const int64_t P = j->OH * j->OW;
    int64_t item, next;
    for (item = begin; item < end; item = next) {
        const int64_t n = item / j->chunks, p0 = item % j->chunks * j->per_chunk;
        const int64_t whole = p0 == 0 ? (end - item) / j->chunks : 0;
        int64_t p1;
        next = whole > 0 ? item + whole * j->chunks : mr_min_i64(end, (n + 1) * j->chunks);
        p1 = whole > 0 ? P : mr_min_i64(P, (next - n * j->chunks) * j->per_chunk);
        mr_conv2d_at(j->x + n * j->C * j->H * j->W, j->w, j->wtype, j->y + n * j->O * P, whole > 0 ? whole : 1, j->C,
                     j->H, j->W, j->O, j->KH, j->KW, j->OH, j->OW, j->sh, j->sw, j->pt, j->pl, j->dh, j->dw, j->groups,
                     j->ep, n, p0, p1);
    }
}

void mr_conv2d_f32_mt(const mr_threads *threads, const float *x, const float *w, float *y,
                      int64_t N, int64_t C, int64_t H, int64_t W,
                      int64_t O, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                      int64_t stride_h, int64_t stride_w,
                      int64_t pad_top, int64_t pad_left,
                      int64_t dil_h, int64_t dil_w, int64_t groups, const mr_epilogue *ep)
{
    mr_conv2d_q_mt(threads, x, w, MR_F32, y, N, C, H, W, O, KH, KW, OH, OW, stride_h, stride_w, pad_top, pad_left,
                   dil_h, dil_w, groups, ep);
}

void mr_conv2d_q_mt(const mr_threads *threads, const float *x, const void *w, int wtype, float *y,
                    int64_t N, int64_t C, int64_t H, int64_t W,
                    int64_t O, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                    int64_t stride_h, int64_t stride_w,
                    int64_t pad_top, int64_t pad_left,
                    int64_t dil_h, int64_t dil_w, int64_t groups, const mr_epilogue *ep)
{
    mr_conv_job job;
    const int64_t P = OH * OW;
    const double macs = (double)N * (double)O * (double)P * (double)(C / (groups > 0 ? groups : 1)) * (double)(KH * KW);
    if (!threads || !threads->parallel_for || macs < MR_MT_MIN_MACS || (N <= 1 && mr_conv_direct(O, groups))) {
        mr_conv2d_at(x, w, wtype, y, N, C, H, W, O, KH, KW, OH, OW, stride_h, stride_w, pad_top, pad_left, dil_h,
                     dil_w, groups, ep, 0, 0, P);
        return;
    }
    job.x = x; job.w = w; job.wtype = wtype; job.y = y; job.N = N; job.C = C; job.H = H; job.W = W; job.O = O;
    job.KH = KH; job.KW = KW; job.OH = OH; job.OW = OW; job.sh = stride_h; job.sw = stride_w;
    job.pt = pad_top; job.pl = pad_left; job.dh = dil_h; job.dw = dil_w; job.groups = groups;
    job.ep = ep;
    /* Split images, and for the implicit GEMM their output positions too (blocks of
     * MR_MT_COLS); the direct path takes whole images. */
    job.per_chunk = mr_conv_direct(O, groups) ? P : MR_MT_COLS;
    job.chunks = (P + job.per_chunk - 1) / job.per_chunk;
    threads->parallel_for(threads->user, mr_conv_task, &job, N * job.chunks);
}

typedef struct {
    const float *x;
    float *y;
    int64_t H, W, KH, KW, OH, OW, sh, sw, pt, pl, dh, dw;
    int is_max;
} mr_pool_job;

/* mr_pool_task: planes [begin, end) of a mr_pool_job. */
static void mr_pool_task(void *ctx, int64_t begin, int64_t end)
{
    const mr_pool_job *j = (const mr_pool_job *)ctx;
    mr_pool2d_f32(j->x + begin * j->H * j->W, j->y + begin * j->OH * j->OW, 1, end - begin, j->H, j->W, j->KH, j->KW,
                  j->OH, j->OW, j->sh, j->sw, j->pt, j->pl, j->dh, j->dw, j->is_max);
}

void mr_pool2d_f32_mt(const mr_threads *threads, const float *x, float *y,
                      int64_t N, int64_t C, int64_t H, int64_t W,
                      int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                      int64_t stride_h, int64_t stride_w,
                      int64_t pad_top, int64_t pad_left,
                      int64_t dil_h, int64_t dil_w, int is_max)
{
    mr_pool_job job;
    job.x = x; job.y = y; job.H = H; job.W = W; job.KH = KH; job.KW = KW; job.OH = OH; job.OW = OW;
    job.sh = stride_h; job.sw = stride_w; job.pt = pad_top; job.pl = pad_left; job.dh = dil_h; job.dw = dil_w;
    job.is_max = is_max;
    /* An output row costs at least a vector's worth of outputs (16): lenet b32's second
     * pool (rows of 5) took 5.6 ns a row on a Zen 4 (avx512), as its first (rows of 14)
     * did, and at 51k taps stayed on one thread for 14-22 us. */
    mr_run(threads, mr_pool_task, &job, N * C,
           (double)(N * C) * (double)OH * (double)mr_max_i64(OW, 16) * (double)(KH * KW));
}

typedef struct {
    const float *x;
    float *y;
    int64_t n, inner;
} mr_softmax_job;

/* mr_softmax_task: outer slices [begin, end) of a mr_softmax_job. */
static void mr_softmax_task(void *ctx, int64_t begin, int64_t end)
{
    const mr_softmax_job *j = (const mr_softmax_job *)ctx;
    const int64_t slice = j->n * j->inner;
    mr_softmax_f32(j->x + begin * slice, j->y + begin * slice, end - begin, j->n, j->inner);
}

void mr_softmax_f32_mt(const mr_threads *threads, const float *x, float *y, int64_t outer, int64_t n, int64_t inner)
{
    mr_softmax_job job;
    job.x = x;
    job.y = y;
    job.n = n;
    job.inner = inner;
    /* About ten operations per element (max, exp, sum, divide). */
    mr_run(threads, mr_softmax_task, &job, outer, 10.0 * (double)outer * (double)n * (double)inner);
}

#ifndef MR_ISA_UNITY /* once, in the generic build (mr_internal.h) */
void mr_run(const mr_threads *threads, mr_task task, void *ctx, int64_t n, double cost)
{
    /* About 64k operations (tens of microseconds) pay for waking the other threads. */
    if (threads && threads->parallel_for && n >= 2 && cost >= 65536.0) {
        threads->parallel_for(threads->user, task, ctx, n);
    } else {
        task(ctx, 0, n);
    }
}
#endif
