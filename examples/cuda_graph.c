/*
 * TA_BACKEND_CUDA on a caller stream, captured once into a CUDA graph and
 * replayed: the forward and backward of an MTA problem, checked bit for bit
 * against TA_BACKEND_REF (exact mode, docs/design.md 3).
 *
 *   1. plan: size queries (no GPU needed), then every device buffer allocated once
 *   2. one eager call of each pass on the stream (the library never synchronises)
 *   3. capture ta_fwd + ta_bwd on the stream into a graph, instantiate it, replay it
 *      REPLAYS times; the results equal the eager ones and REF's
 *
 * Exit status: 0 ok; 1 a failure; 77 no usable CUDA device (CTest reports the test
 * as skipped, never as passed). Build: link tileattn::cuda (docs/api.md, Packaging).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include <tileattn.h>

#define SKIP 77
enum { B = 1, H = 4, S = 256, D = 64, CQ = 6, CK = 11, REPLAYS = 3 };
#define N_T ((size_t)B * H * S * D)
#define N_LSE ((size_t)B * H * S)
#define N_W ((size_t)H * CQ * CK)

/* Device copies of every tensor; one workspace serves both passes. */
typedef struct dev_bufs {
    float *q, *k, *v, *w, *o, *lse, *d_o, *dq, *dk, *dv, *dw;
    void *ws;
} dev_bufs;

#define CUDA_OK(call, what)                                                                    \
    do {                                                                                       \
        const cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "cuda_graph: %s: %s\n", what, cudaGetErrorString(e_));             \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

static int dev_alloc(dev_bufs *d, size_t ws_bytes) {
    float **t[] = {&d->q, &d->k, &d->v, &d->o, &d->d_o, &d->dq, &d->dk, &d->dv};
    size_t i;
    for (i = 0; i < sizeof t / sizeof t[0]; ++i)
        CUDA_OK(cudaMalloc((void **)t[i], N_T * sizeof(float)), "cudaMalloc tensor");
    CUDA_OK(cudaMalloc((void **)&d->lse, N_LSE * sizeof(float)), "cudaMalloc lse");
    CUDA_OK(cudaMalloc((void **)&d->w, N_W * sizeof(float)), "cudaMalloc conv_w");
    CUDA_OK(cudaMalloc((void **)&d->dw, N_W * sizeof(float)), "cudaMalloc dconv_w");
    CUDA_OK(cudaMalloc(&d->ws, ws_bytes ? ws_bytes : 1), "cudaMalloc workspace"); /* 256-aligned */
    return 0;
}

static void dev_free(dev_bufs *d) {
    void *p[] = {d->q, d->k, d->v, d->w, d->o, d->lse, d->d_o, d->dq, d->dk, d->dv, d->dw, d->ws};
    size_t i;
    for (i = 0; i < sizeof p / sizeof p[0]; ++i)
        if (p[i]) (void)cudaFree(p[i]);
}

/* The host problem: inputs, and REF's outputs to compare with. */
typedef struct host_bufs {
    float q[N_T], k[N_T], v[N_T], d_o[N_T], w[N_W];
    float o[N_T], lse[N_LSE], dq[N_T], dk[N_T], dv[N_T], dw[N_W]; /* REF's */
    float got[N_T];
} host_bufs;

static void fill(float *x, size_t n, uint32_t *state) {
    size_t i;
    for (i = 0; i < n; ++i) {
        *state = *state * 1664525u + 1013904223u;
        x[i] = (float)(*state >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
}

/* REF forward and backward on the host: the bits CUDA must reproduce. */
static ta_status run_ref(const ta_problem *p, host_bufs *h) {
    const ta_fwd_args fa = {.q = h->q, .k = h->k, .v = h->v, .conv_w = h->w, .o = h->o,
                            .lse = h->lse};
    const ta_bwd_args ba = {.q = h->q, .k = h->k, .v = h->v, .o = h->o, .d_o = h->d_o,
                            .lse = h->lse, .conv_w = h->w, .dq = h->dq, .dk = h->dk,
                            .dv = h->dv, .dconv_w = h->dw};
    size_t fb = 0, bb = 0;
    void *ws;
    ta_status st;
    if ((st = ta_fwd_workspace_size(p, TA_BACKEND_REF, &fb)) != TA_OK ||
        (st = ta_bwd_workspace_size(p, TA_BACKEND_REF, &bb)) != TA_OK)
        return st;
    if (bb > fb) fb = bb;
    ws = aligned_alloc(TA_WORKSPACE_ALIGN, (fb / TA_WORKSPACE_ALIGN + 1) * TA_WORKSPACE_ALIGN);
    if (!ws) return TA_ERR_NULL_ARG;
    st = ta_fwd(p, TA_BACKEND_REF, &fa, ws, fb, NULL);
    if (st == TA_OK) st = ta_bwd(p, TA_BACKEND_REF, &ba, ws, fb, NULL);
    free(ws);
    return st;
}

/* ta_fwd then ta_bwd on the stream, enqueued only (captured or eager). */
static ta_status enqueue(const ta_problem *p, const dev_bufs *d, size_t ws_bytes,
                         cudaStream_t stream) {
    const ta_fwd_args fa = {.q = d->q, .k = d->k, .v = d->v, .conv_w = d->w, .o = d->o,
                            .lse = d->lse};
    const ta_bwd_args ba = {.q = d->q, .k = d->k, .v = d->v, .o = d->o, .d_o = d->d_o,
                            .lse = d->lse, .conv_w = d->w, .dq = d->dq, .dk = d->dk,
                            .dv = d->dv, .dconv_w = d->dw};
    const ta_status st = ta_fwd(p, TA_BACKEND_CUDA, &fa, d->ws, ws_bytes, (void *)stream);
    if (st != TA_OK) return st;
    return ta_bwd(p, TA_BACKEND_CUDA, &ba, d->ws, ws_bytes, (void *)stream);
}

/* Download each output and compare it bit for bit with REF's. 0 equal. */
static int compare(const dev_bufs *d, host_bufs *h, const char *when) {
    const float *dev[] = {d->o, d->dq, d->dk, d->dv, d->lse, d->dw};
    const float *ref[] = {h->o, h->dq, h->dk, h->dv, h->lse, h->dw};
    const size_t n[] = {N_T, N_T, N_T, N_T, N_LSE, N_W};
    const char *name[] = {"o", "dq", "dk", "dv", "lse", "dconv_w"};
    size_t i;
    for (i = 0; i < 6; ++i) {
        CUDA_OK(cudaMemcpy(h->got, dev[i], n[i] * sizeof(float), cudaMemcpyDeviceToHost),
                "cudaMemcpy result");
        if (memcmp(h->got, ref[i], n[i] * sizeof(float)) != 0) {
            fprintf(stderr, "cuda_graph: %s: %s differs from REF\n", when, name[i]);
            return 1;
        }
    }
    return 0;
}

static int upload(const dev_bufs *d, const host_bufs *h) {
    CUDA_OK(cudaMemcpy(d->q, h->q, sizeof h->q, cudaMemcpyHostToDevice), "upload q");
    CUDA_OK(cudaMemcpy(d->k, h->k, sizeof h->k, cudaMemcpyHostToDevice), "upload k");
    CUDA_OK(cudaMemcpy(d->v, h->v, sizeof h->v, cudaMemcpyHostToDevice), "upload v");
    CUDA_OK(cudaMemcpy(d->d_o, h->d_o, sizeof h->d_o, cudaMemcpyHostToDevice), "upload d_o");
    CUDA_OK(cudaMemcpy(d->w, h->w, sizeof h->w, cudaMemcpyHostToDevice), "upload conv_w");
    return 0;
}

/* Steps 2 and 3 on an allocated, uploaded problem. */
static int run_graph(const ta_problem *p, const dev_bufs *d, host_bufs *h, size_t ws_bytes) {
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ta_status st;
    int r;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    st = enqueue(p, d, ws_bytes, stream); /* 2. eager */
    if (st != TA_OK) {
        fprintf(stderr, "cuda_graph: eager call: %s\n", ta_status_string(st));
        return 1;
    }
    CUDA_OK(cudaStreamSynchronize(stream), "eager run");
    if (compare(d, h, "eager") != 0) return 1;
    /* 3. capture: the library only enqueues, so the calls record into the graph */
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
    st = enqueue(p, d, ws_bytes, stream);
    CUDA_OK(cudaStreamEndCapture(stream, &graph), "end capture");
    if (st != TA_OK) {
        fprintf(stderr, "cuda_graph: captured call: %s\n", ta_status_string(st));
        return 1;
    }
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    for (r = 0; r < REPLAYS; ++r) {
        CUDA_OK(cudaMemsetAsync(d->o, 0xFF, N_T * sizeof(float), stream), "poison o");
        CUDA_OK(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    }
    CUDA_OK(cudaStreamSynchronize(stream), "graph replays");
    if (compare(d, h, "graph replay") != 0) return 1;
    (void)cudaGraphExecDestroy(exec);
    (void)cudaGraphDestroy(graph);
    (void)cudaStreamDestroy(stream);
    return 0;
}

int main(void) {
    static host_bufs h;
    dev_bufs d;
    ta_problem p;
    size_t fb = 0, bb = 0;
    uint32_t state = 3u;
    int count = 0, rc;
    ta_status st;
    size_t i;
    memset(&p, 0, sizeof p);
    p.batch = B;
    p.heads_q = p.heads_kv = H;
    p.seq_q = p.seq_k = S;
    p.head_dim = p.head_dim_v = D;
    p.flags = TA_CAUSAL;
    p.conv_q = CQ;
    p.conv_k = CK;
    /* 1. plan: the queries need no GPU */
    if ((st = ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &fb)) != TA_OK ||
        (st = ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &bb)) != TA_OK) {
        fprintf(stderr, "cuda_graph: size query: %s\n", ta_status_string(st));
        return 1;
    }
    if (bb > fb) fb = bb;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        printf("cuda_graph: skipped: no CUDA device (the size queries passed: %zu bytes)\n", fb);
        return SKIP;
    }
    if (!ta_backend_available(TA_BACKEND_CUDA)) {
        fprintf(stderr, "cuda_graph: a device is present but TA_BACKEND_CUDA is unavailable "
                        "(is tileattn::cuda linked?)\n");
        return 1;
    }
    fill(h.q, N_T, &state);
    fill(h.k, N_T, &state);
    fill(h.v, N_T, &state);
    fill(h.d_o, N_T, &state);
    fill(h.w, N_W, &state);
    for (i = 0; i < N_W; ++i)
        h.w[i] *= 0.25f;
    for (i = 0; i < H; ++i)
        h.w[(i * CQ + CQ - 1) * CK + CK / 2] += 1.0f; /* identity tap: near causal SDPA */
    if ((st = run_ref(&p, &h)) != TA_OK) {
        fprintf(stderr, "cuda_graph: REF: %s\n", ta_status_string(st));
        return 1;
    }
    memset(&d, 0, sizeof d);
    rc = dev_alloc(&d, fb);
    if (rc == 0) rc = upload(&d, &h);
    if (rc == 0) rc = run_graph(&p, &d, &h, fb);
    dev_free(&d);
    if (rc == 0)
        printf("cuda_graph: eager and %d graph replays bit-identical to REF: ok\n", REPLAYS);
    return rc;
}
