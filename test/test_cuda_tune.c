/*
 * ta_tune_fwd (docs/api.md, "Tuning"), label cuda. The problem: bf16, fast
 * mode, B = 1, H = 2, S_q = S_k = 200, D = D_v = 128 (4 candidates).
 *
 *  1. refusals, without a GPU (host buffers): TA_BACKEND_REF and
 *     TA_BACKEND_CPU -> TA_ERR_UNSUPPORTED; out = NULL -> TA_ERR_NULL_ARG;
 *     reps 0 and TA_TUNE_REPS_MAX + 1 -> TA_ERR_BAD_ARG; ta_fwd's validation
 *     first (heads_kv = 0 with out = NULL -> TA_ERR_BAD_SHAPE, on every
 *     backend); without a usable device, TA_BACKEND_CUDA gives ta_fwd's
 *     status. *out and o keep their canaries in every case.
 *  2. on a device: ta_fwd of every candidate k first (bytes kept; candidate 1
 *     may be refused: the wgmma one off sm_90); then the tune: a candidate of
 *     the table, num_candidates = 8, ms >= 0 exactly for the candidates that
 *     ran, the pick's median the smallest, -1 past the table; then ta_fwd with
 *     tile_config = the pick gives the bytes of the explicit call before the
 *     tune (the tune keeps nothing that changes bits).
 *  3. refusals on a device: exact mode and f32 fast mode (no table) ->
 *     TA_ERR_UNSUPPORTED; q 8 bytes off 16 (the fast path's rows) ->
 *     TA_ERR_UNSUPPORTED with o untouched; a stream under capture ->
 *     TA_ERR_BAD_ARG with the capture still valid. *out untouched in each.
 *
 * Without a CUDA device: part 1, then prints "no CUDA device: skipped" and exits 77.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "test_cuda_util.h"
#include "test_util.h"
#include "tileattn.h"


#define N_CAND 10 /* ta_test_fast_candidates(128) (array sizes need the constant) */

/* q, k, v, o [1, 2, 200, 128] and lse [1, 2, 200]; sized for f32 so that the
 * f32 refusal can reuse them. */
#define ELEMS (2 * 200 * 128)
#define ROWS  (2 * 200)

static void tune_problem(ta_problem *p) {
    memset(p, 0, sizeof *p);
    p->batch = 1;
    p->heads_q = p->heads_kv = 2;
    p->seq_q = p->seq_k = 200;
    p->head_dim = p->head_dim_v = 128;
    p->dtype = TA_BF16;
    p->precision = TA_PRECISION_FAST;
    p->flags = TA_CAUSAL;
}

/* One refused tune: status want, *out's canary intact. */
static void expect_refused(const char *what, const ta_problem *p, ta_backend be,
                           const ta_fwd_args *a, void *ws, size_t ws_bytes, void *stream,
                           int32_t reps, int null_out, ta_status want) {
    ta_tune_result res;
    ta_status st;
    ta_canary_fill(&res, sizeof res);
    st = ta_tune_fwd(p, be, a, ws, ws_bytes, stream, reps, null_out ? NULL : &res);
    TA_CHECK(st == want, "%s: %s, want %s", what, ta_status_string(st), ta_status_string(want));
    TA_CHECK(ta_canary_intact(&res, sizeof res), "%s: out written", what);
}

/* Part 1: host buffers, no device needed. */
static void check_host_refusals(void) {
    ta_problem p;
    ta_fwd_args a;
    void *q = ta_test_alloc(ELEMS * 2), *o = ta_test_alloc(ELEMS * 2), *ws = NULL;
    float *lse = (float *)ta_test_alloc(ROWS * sizeof(float));
    size_t bytes = 0;
    ta_rng r;
    if (!q || !o || !lse) exit(1);
    ta_rng_seed(&r, 10);
    ta_fill_uniform(&r, q, TA_BF16, ELEMS, -1.0f, 1.0f);
    tune_problem(&p);
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_OK, "REF size query");
    ws = ta_test_alloc(bytes ? bytes : 64);
    if (!ws) exit(1);
    memset(&a, 0, sizeof a);
    a.q = a.k = a.v = q; /* inputs may alias each other */
    a.o = o;
    a.lse = lse;
    ta_canary_fill(o, ELEMS * 2);
    expect_refused("REF", &p, TA_BACKEND_REF, &a, ws, bytes, NULL, 3, 0, TA_ERR_UNSUPPORTED);
    expect_refused("REF, out NULL", &p, TA_BACKEND_REF, &a, ws, bytes, NULL, 3, 1, TA_ERR_NULL_ARG);
    expect_refused("REF, reps 0", &p, TA_BACKEND_REF, &a, ws, bytes, NULL, 0, 0, TA_ERR_BAD_ARG);
    expect_refused("REF, reps past the maximum", &p, TA_BACKEND_REF, &a, ws, bytes, NULL,
                   TA_TUNE_REPS_MAX + 1, 0, TA_ERR_BAD_ARG);
    if (ta_fwd_workspace_size(&p, TA_BACKEND_CPU, &bytes) == TA_OK) {
        ta_test_free(ws);
        ws = ta_test_alloc(bytes ? bytes : 64);
        if (!ws) exit(1);
        expect_refused("CPU", &p, TA_BACKEND_CPU, &a, ws, bytes, NULL, 3, 0, TA_ERR_UNSUPPORTED);
    }
    /* ta_fwd's validation comes first: a bad problem wins over a NULL out */
    p.heads_kv = 0;
    expect_refused("REF, heads_kv 0, out NULL", &p, TA_BACKEND_REF, &a, ws, bytes, NULL, 3, 1,
                   TA_ERR_BAD_SHAPE);
    expect_refused("CUDA, heads_kv 0", &p, TA_BACKEND_CUDA, &a, NULL, 0, NULL, 3, 0,
                   TA_ERR_BAD_SHAPE);
    p.heads_kv = 2;
    if (!ta_backend_available(TA_BACKEND_CUDA)) /* not linked, or no device */
        expect_refused("CUDA, unavailable", &p, TA_BACKEND_CUDA, &a, NULL, 0, NULL, 3, 0,
                       ta_fwd(&p, TA_BACKEND_CUDA, &a, NULL, 0, NULL));
    TA_CHECK(ta_canary_intact(o, ELEMS * 2), "a refused tune wrote o");
    ta_test_free(q);
    ta_test_free(o);
    ta_test_free(lse);
    ta_test_free(ws);
}

/* Device buffers of the problem. */
typedef struct dbufs {
    void *q, *k, *v, *o, *ws;
    float *lse;
} dbufs;

/* o and lse of one ta_fwd with tile_config cfg into host o_h, lse_h. */
static ta_status run_fwd(ta_problem p, int32_t cfg, const ta_fwd_args *a, const dbufs *d, void *o_h,
                         float *lse_h) {
    ta_status st;
    p.tile_config = cfg;
    CUDA_OK(cudaMemset(d->o, 0xFF, ELEMS * 2));
    CUDA_OK(cudaMemset(d->lse, 0xFF, ROWS * sizeof(float)));
    st = ta_fwd(&p, TA_BACKEND_CUDA, a, d->ws, 0, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(o_h, d->o, ELEMS * 2, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(lse_h, d->lse, ROWS * sizeof(float), cudaMemcpyDeviceToHost));
    return st;
}

/* Part 2. */
static void check_tune(const ta_fwd_args *a, const dbufs *d) {
    static unsigned char o_ref[N_CAND][ELEMS * 2], o_h[ELEMS * 2];
    static float lse_ref[N_CAND][ROWS], lse_h[ROWS];
    int ran[N_CAND], k, best = 0;
    ta_problem p;
    ta_tune_result res;
    ta_status st;
    tune_problem(&p);
    TA_CHECK(ta_test_fast_candidates(128) == N_CAND, "N_CAND %d, the table %d", N_CAND,
             (int)ta_test_fast_candidates(128));
    for (k = 1; k <= N_CAND; ++k) {
        st = run_fwd(p, k, a, d, o_ref[k - 1], lse_ref[k - 1]);
        ran[k - 1] = st == TA_OK;
        /* the wgmma candidates (1, and the warp-specialised 5 and 6) run on sm_90 only */
        TA_CHECK(st == TA_OK || ((k == 1 || k == 5 || k == 6) && st == TA_ERR_UNSUPPORTED),
                 "ta_fwd tile_config %d: %s",
                 k, ta_status_string(st));
    }
    memset(&res, 0, sizeof res);
    st = ta_tune_fwd(&p, TA_BACKEND_CUDA, a, d->ws, 0, NULL, 5, &res);
    TA_CHECK(st == TA_OK, "ta_tune_fwd: %s", ta_status_string(st));
    if (st != TA_OK) return;
    printf("tune: pick %d of %d; medians (ms):", res.tile_config, res.num_candidates);
    for (k = 0; k < N_CAND; ++k)
        printf(" %.4f", (double)res.ms[k]);
    printf("\n");
    TA_CHECK(res.num_candidates == N_CAND, "num_candidates %d, want %d", res.num_candidates,
             N_CAND);
    TA_CHECK(res.tile_config >= 1 && res.tile_config <= N_CAND, "pick %d", res.tile_config);
    if (res.tile_config < 1 || res.tile_config > N_CAND) return;
    for (k = 0; k < N_CAND; ++k) {
        TA_CHECK((res.ms[k] >= 0.0f) == ran[k], "candidate %d: ms %g, ran %d", k + 1,
                 (double)res.ms[k], ran[k]);
        if (res.ms[k] >= 0.0f && (res.ms[best] < 0.0f || res.ms[k] < res.ms[best])) best = k;
    }
    for (k = N_CAND; k < TA_TUNE_MAX_CANDIDATES; ++k)
        TA_CHECK(res.ms[k] < 0.0f, "ms[%d] = %g past the table", k, (double)res.ms[k]);
    TA_CHECK(res.ms[res.tile_config - 1] == res.ms[best], "pick %d is not the fastest (%d)",
             res.tile_config, best + 1);
    /* the pick, as a caller stores it: the bytes of the explicit call */
    st = run_fwd(p, res.tile_config, a, d, o_h, lse_h);
    TA_CHECK(st == TA_OK, "ta_fwd with the pick: %s", ta_status_string(st));
    TA_CHECK(memcmp(o_h, o_ref[res.tile_config - 1], sizeof o_h) == 0 &&
                 memcmp(lse_h, lse_ref[res.tile_config - 1], sizeof lse_h) == 0,
             "ta_fwd with the pick %d differs from the explicit call before the tune",
             res.tile_config);
}

/* Part 3. */
static void check_device_refusals(const ta_fwd_args *a, const dbufs *d) {
    static unsigned char o_h[ELEMS * 2];
    ta_problem p;
    ta_fwd_args bad = *a;
    cudaStream_t s;
    cudaGraph_t graph;
    size_t i, touched = 0;
    tune_problem(&p);
    p.precision = TA_PRECISION_EXACT;
    expect_refused("exact mode", &p, TA_BACKEND_CUDA, a, d->ws, 0, NULL, 3, 0, TA_ERR_UNSUPPORTED);
    p.precision = TA_PRECISION_FAST;
    p.dtype = TA_F32;
    expect_refused("f32 fast mode", &p, TA_BACKEND_CUDA, a, d->ws, 0, NULL, 3, 0,
                   TA_ERR_UNSUPPORTED);
    p.dtype = TA_BF16;
    p.seq_q = 100; /* q starts 8 bytes in: stays inside the buffer */
    bad.q = (const char *)a->q + 8;
    CUDA_OK(cudaMemset(d->o, TA_CANARY_BYTE, ELEMS * 2));
    expect_refused("q 8 bytes off 16", &p, TA_BACKEND_CUDA, &bad, d->ws, 0, NULL, 3, 0,
                   TA_ERR_UNSUPPORTED);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(o_h, d->o, sizeof o_h, cudaMemcpyDeviceToHost));
    for (i = 0; i < sizeof o_h; ++i)
        touched += o_h[i] != TA_CANARY_BYTE;
    TA_CHECK(touched == 0, "q 8 bytes off 16: %zu bytes of o written", touched);
    p.seq_q = 200;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    expect_refused("stream under capture", &p, TA_BACKEND_CUDA, a, d->ws, 0, s, 3, 0,
                   TA_ERR_BAD_ARG);
    CUDA_OK(cudaStreamEndCapture(s, &graph)); /* still a valid (empty) capture */
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(s));
}

int main(void) {
    int dev_count = 0;
    dbufs d;
    ta_fwd_args a;
    ta_rng r;
    void *stage;
    check_host_refusals();
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
        printf("no CUDA device: skipped\n");
        return ta_test_failures ? ta_test_finish("test_cuda_tune") : TA_TEST_SKIP;
    }
    if (!ta_backend_available(TA_BACKEND_CUDA)) {
        fprintf(stderr, "FAIL: a CUDA device is present but TA_BACKEND_CUDA is unavailable\n");
        return 1;
    }
    stage = malloc(ELEMS * 2);
    if (!stage) return 1;
    ta_rng_seed(&r, ta_test_seed("test_cuda_tune"));
    CUDA_OK(cudaMalloc(&d.q, ELEMS * 4));
    CUDA_OK(cudaMalloc(&d.k, ELEMS * 4));
    CUDA_OK(cudaMalloc(&d.v, ELEMS * 4));
    CUDA_OK(cudaMalloc(&d.o, ELEMS * 4));
    CUDA_OK(cudaMalloc((void **)&d.lse, ROWS * sizeof(float)));
    CUDA_OK(cudaMalloc(&d.ws, 64)); /* the forward's size query says 0 bytes */
    /* bf16 values (the f32 refusal reads none) */
    ta_fill_uniform(&r, stage, TA_BF16, ELEMS, -2.0f, 2.0f);
    CUDA_OK(cudaMemcpy(d.q, stage, ELEMS * 2, cudaMemcpyHostToDevice));
    ta_fill_uniform(&r, stage, TA_BF16, ELEMS, -2.0f, 2.0f);
    CUDA_OK(cudaMemcpy(d.k, stage, ELEMS * 2, cudaMemcpyHostToDevice));
    ta_fill_uniform(&r, stage, TA_BF16, ELEMS, -1.0f, 1.0f);
    CUDA_OK(cudaMemcpy(d.v, stage, ELEMS * 2, cudaMemcpyHostToDevice));
    free(stage);
    memset(&a, 0, sizeof a);
    a.q = d.q;
    a.k = d.k;
    a.v = d.v;
    a.o = d.o;
    a.lse = d.lse;
    check_tune(&a, &d);
    check_device_refusals(&a, &d);
    cudaFree(d.q);
    cudaFree(d.k);
    cudaFree(d.v);
    cudaFree(d.o);
    cudaFree(d.lse);
    cudaFree(d.ws);
    return ta_test_finish("test_cuda_tune");
}
