/*
 * TA_SEQLENS_DEVICE (docs/api.md, "Memory, streams, threads"), label cuda:
 * key lengths in device memory, read by the kernels when they run, so that one
 * captured CUDA graph replays every decode step as the cache grows (issue 12
 * item 5).
 *
 *  1. refusals, without a GPU: the flag with seqlens_k on TA_BACKEND_REF and
 *     TA_BACKEND_CPU -> TA_ERR_BAD_ARG with o untouched (canaries); the flag
 *     without seqlens_k on REF gives the bytes of the call without it; an
 *     unknown flag bit (1 << 4) -> TA_ERR_BAD_ARG.
 *  2. on a device, per random problem (SDPA exact, f32/f16/bf16; SDPA fast
 *     bf16, D = 64 or 128; MTA exact f32; causal or not, GQA, S_q != S_k):
 *     ta_fwd then ta_bwd with the flag captured once into a graph; then
 *     TA_SEQLENS_STEPS replays, each after writing fresh lengths into the same
 *     device buffer (0, S_k, anything between, and on the last step values
 *     outside [0, S_k], which the kernels clamp) and poisoning every output;
 *     each replay's o, lse, dq, dk, dv (and dconv_w) must equal, bit for bit,
 *     direct calls with the same (clamped) lengths in host memory.
 *  3. on a device: the flag with seqlens_k in pageable host memory ->
 *     TA_ERR_BAD_ARG, o untouched.
 *  4. paged KV on CUDA's fast forward (docs/api.md, "Paged KV cache"): random
 *     pools, page sizes and page orders (f16/bf16, D = 64 or 128, GQA, 1 or 3
 *     new rows, split-K or not): the paged call (block table in device
 *     memory) equals, bit for bit, the same candidate on K and V gathered
 *     into contiguous tensors; then the paged call with TA_SEQLENS_DEVICE
 *     captured once and replayed with new lengths and a new block table
 *     written into the same device buffers, each replay equal to the direct
 *     contiguous call on the re-gathered K, V.
 *  5. paged KV on CUDA's exact forward kernels (issue 12 item 4): random
 *     problems (f32/f16/bf16; SDPA, and MTA with random c_q, c_k and query
 *     history rows; GQA; D, D_v up to 256; windows; split-K 1..4; the rotary
 *     stage; seqlens_k none, host or TA_SEQLENS_DEVICE; page sizes 1 to 100,
 *     powers of two or not; a shuffled block table over a pool with spare
 *     pages, every pool byte outside keys [0, S_k) poisoned): REF on the
 *     gathered contiguous K, V is the reference; REF paged, CUDA paged and
 *     CUDA contiguous must equal it bit for bit (o and lse; outputs and
 *     workspace poisoned first). Without a device: the size queries (paged
 *     exact sizes, the backward and fast SDPA with the rotary stage refused)
 *     and a few problems' host side (REF paged == REF contiguous).
 *
 *   test_cuda_seqlens [--paged-exact] [--count N]
 *
 * --paged-exact: parts 1 and 5 only; --count N: part 5's problems (40).
 * Seed: TA_SEED (printed; part 5 draws from its own stream of it). Without a
 * CUDA device: part 1 and part 5's host side, then "no CUDA device: skipped"
 * and exit 77.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "test_cuda_util.h"
#include "test_util.h"
#include "tileattn.h"

#define TA_SEQLENS_PROBLEMS 12
#define TA_SEQLENS_STEPS 4
#define TA_POISON_BYTE 0xFF /* f32 / f16 / bf16 NaN in every element */

static size_t zs(int32_t x) { return (size_t)x; }

/* A problem and the element counts of its tensors. */
typedef struct spec {
    ta_problem p;
    size_t nq, nk, nv, no, nlse, nw; /* elements */
    size_t eb;                       /* bytes per element of q, k, v, o */
} spec;

static void spec_counts(spec *s) {
    const ta_problem *p = &s->p;
    s->nq = zs(p->batch) * zs(p->heads_q) * zs(p->seq_q) * zs(p->head_dim);
    s->nk = zs(p->batch) * zs(p->heads_kv) * zs(p->seq_k) * zs(p->head_dim);
    s->nv = zs(p->batch) * zs(p->heads_kv) * zs(p->seq_k) * zs(p->head_dim_v);
    s->no = zs(p->batch) * zs(p->heads_q) * zs(p->seq_q) * zs(p->head_dim_v);
    s->nlse = zs(p->batch) * zs(p->heads_q) * zs(p->seq_q);
    s->nw = p->conv_q ? zs(p->heads_q) * zs(p->conv_q) * zs(p->conv_k) : 0;
    s->eb = ta_dtype_size(p->dtype);
}

/* Problem idx: kind 0 = SDPA exact, 1 = SDPA fast (bf16), 2 = MTA exact. */
static void random_spec(ta_rng *r, int idx, spec *s) {
    ta_problem *p = &s->p;
    const int kind = idx % 3;
    memset(s, 0, sizeof *s);
    p->batch = ta_rng_int(r, 1, 5);
    p->heads_kv = ta_rng_int(r, 1, 3);
    p->heads_q = p->heads_kv * ta_rng_int(r, 1, 3);
    p->seq_k = ta_rng_int(r, 1, 300);
    p->seq_q = ta_rng_int(r, 0, 3) == 0 ? ta_rng_int(r, 1, 8) : ta_rng_int(r, 1, p->seq_k);
    p->flags = (kind == 2 || ta_rng_int(r, 0, 1)) ? TA_CAUSAL : 0;
    if (kind == 0) {
        p->dtype = (ta_dtype)ta_rng_int(r, 0, 2);
        p->head_dim = ta_rng_int(r, 1, 80);
        p->head_dim_v = ta_rng_int(r, 0, 1) ? p->head_dim : ta_rng_int(r, 1, 80);
    } else if (kind == 1) {
        p->dtype = TA_BF16;
        p->precision = TA_PRECISION_FAST;
        p->head_dim = p->head_dim_v = ta_rng_int(r, 0, 1) ? 64 : 128;
    } else {
        p->dtype = TA_F32;
        p->head_dim = p->head_dim_v = ta_rng_int(r, 1, 48);
        p->conv_q = ta_rng_int(r, 1, 4);
        p->conv_k = 2 * ta_rng_int(r, 0, 3) + 1;
        p->seq_q = p->seq_k; /* MTA: square, causal */
    }
    spec_counts(s);
}

static void describe(const spec *s, int idx) {
    const ta_problem *p = &s->p;
    printf("problem %d: %s %s B=%d H=%d/%d S=%d/%d D=%d/%d%s conv=%dx%d\n", idx,
           p->precision == TA_PRECISION_FAST ? "fast" : "exact",
           p->dtype == TA_F32 ? "f32" : p->dtype == TA_F16 ? "f16" : "bf16", p->batch, p->heads_q,
           p->heads_kv, p->seq_q, p->seq_k, p->head_dim, p->head_dim_v,
           p->flags & TA_CAUSAL ? " causal" : "", p->conv_q, p->conv_k);
}

/* Device tensors of one problem (outputs of one pass set: o, lse, dq, dk, dv,
 * dconv_w), the workspaces and the lengths buffer. */
typedef struct dev {
    void *q, *k, *v, *d_o, *o, *dq, *dk, *dv;
    float *lse, *conv_w, *dconv_w;
    void *ws_f, *ws_b;
    size_t ws_f_bytes, ws_b_bytes;
    int32_t *lens;
} dev;

static void *dalloc(size_t bytes) {
    void *ptr = NULL;
    CUDA_OK(cudaMalloc(&ptr, bytes ? bytes : 1));
    return ptr;
}

/* Host random data h (bytes) -> a new device buffer. */
static void *dupload(ta_rng *r, ta_dtype dt, size_t n, float lo, float hi) {
    const size_t eb = ta_dtype_size(dt);
    void *h = malloc(n * eb + 1), *d = dalloc(n * eb);
    if (!h) exit(1);
    ta_fill_uniform(r, h, dt, n, lo, hi);
    CUDA_OK(cudaMemcpy(d, h, n * eb, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static void dev_make(ta_rng *r, const spec *s, dev *d) {
    const ta_problem *p = &s->p;
    ta_problem pf = *p;
    ta_status st;
    memset(d, 0, sizeof *d);
    d->q = dupload(r, p->dtype, s->nq, -1.0f, 1.0f);
    d->k = dupload(r, p->dtype, s->nk, -1.0f, 1.0f);
    d->v = dupload(r, p->dtype, s->nv, -1.0f, 1.0f);
    d->d_o = dupload(r, p->dtype, s->no, -1.0f, 1.0f);
    if (s->nw) {
        d->conv_w = (float *)dupload(r, TA_F32, s->nw, -0.5f, 0.5f);
        d->dconv_w = (float *)dalloc(s->nw * sizeof(float));
    }
    d->o = dalloc(s->no * s->eb);
    d->dq = dalloc(s->nq * s->eb);
    d->dk = dalloc(s->nk * s->eb);
    d->dv = dalloc(s->nv * s->eb);
    d->lse = (float *)dalloc(s->nlse * sizeof(float));
    d->lens = (int32_t *)dalloc(zs(p->batch) * sizeof(int32_t));
    pf.flags |= TA_SEQLENS_DEVICE;
    st = ta_fwd_workspace_size(&pf, TA_BACKEND_CUDA, &d->ws_f_bytes);
    TA_CHECK(st == TA_OK, "ta_fwd_workspace_size: %s", ta_status_string(st));
    st = ta_bwd_workspace_size(&pf, TA_BACKEND_CUDA, &d->ws_b_bytes);
    TA_CHECK(st == TA_OK, "ta_bwd_workspace_size: %s", ta_status_string(st));
    d->ws_f = dalloc(d->ws_f_bytes);
    d->ws_b = dalloc(d->ws_b_bytes);
}

static void dev_free(dev *d) {
    void *all[14] = {d->q,   d->k,      d->v,       d->d_o,  d->o,    d->dq,  d->dk,
                     d->dv,  d->lse,    d->conv_w,  d->dconv_w, d->ws_f, d->ws_b, d->lens};
    int i;
    for (i = 0; i < 14; ++i)
        if (all[i]) CUDA_OK(cudaFree(all[i]));
}

/* The outputs of one fwd + bwd, copied to the host. */
typedef struct hout {
    unsigned char *o, *dq, *dk, *dv;
    float *lse, *dconv_w;
} hout;

static void hout_make(const spec *s, hout *h) {
    h->o = (unsigned char *)malloc(s->no * s->eb + 1);
    h->dq = (unsigned char *)malloc(s->nq * s->eb + 1);
    h->dk = (unsigned char *)malloc(s->nk * s->eb + 1);
    h->dv = (unsigned char *)malloc(s->nv * s->eb + 1);
    h->lse = (float *)malloc(s->nlse * sizeof(float) + 1);
    h->dconv_w = (float *)malloc(s->nw * sizeof(float) + 1);
    if (!h->o || !h->dq || !h->dk || !h->dv || !h->lse || !h->dconv_w) exit(1);
}

static void hout_free(hout *h) {
    free(h->o);
    free(h->dq);
    free(h->dk);
    free(h->dv);
    free(h->lse);
    free(h->dconv_w);
}

static void poison_outputs(const spec *s, const dev *d) {
    CUDA_OK(cudaMemset(d->o, TA_POISON_BYTE, s->no * s->eb));
    CUDA_OK(cudaMemset(d->dq, TA_POISON_BYTE, s->nq * s->eb));
    CUDA_OK(cudaMemset(d->dk, TA_POISON_BYTE, s->nk * s->eb));
    CUDA_OK(cudaMemset(d->dv, TA_POISON_BYTE, s->nv * s->eb));
    CUDA_OK(cudaMemset(d->lse, TA_POISON_BYTE, s->nlse * sizeof(float)));
    if (s->nw) CUDA_OK(cudaMemset(d->dconv_w, TA_POISON_BYTE, s->nw * sizeof(float)));
}

static void fetch(const spec *s, const dev *d, hout *h) {
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(h->o, d->o, s->no * s->eb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h->dq, d->dq, s->nq * s->eb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h->dk, d->dk, s->nk * s->eb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h->dv, d->dv, s->nv * s->eb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h->lse, d->lse, s->nlse * sizeof(float), cudaMemcpyDeviceToHost));
    if (s->nw)
        CUDA_OK(cudaMemcpy(h->dconv_w, d->dconv_w, s->nw * sizeof(float),
                           cudaMemcpyDeviceToHost));
}

/* ta_fwd then ta_bwd of s on stream with lengths lens (device memory with the
 * flag, else host memory). */
static ta_status run_pair(const spec *s, const dev *d, const int32_t *lens, int device_lens,
                          cudaStream_t stream) {
    ta_problem p = s->p;
    ta_fwd_args fa;
    ta_bwd_args ba;
    ta_status st;
    memset(&fa, 0, sizeof fa);
    memset(&ba, 0, sizeof ba);
    if (device_lens) p.flags |= TA_SEQLENS_DEVICE;
    fa.q = ba.q = d->q;
    fa.k = ba.k = d->k;
    fa.v = ba.v = d->v;
    fa.conv_w = ba.conv_w = d->conv_w;
    fa.seqlens_k = ba.seqlens_k = lens;
    fa.o = d->o;
    fa.lse = d->lse;
    ba.o = d->o;
    ba.lse = d->lse;
    ba.d_o = d->d_o;
    ba.dq = d->dq;
    ba.dk = d->dk;
    ba.dv = d->dv;
    ba.dconv_w = d->dconv_w;
    st = ta_fwd(&p, TA_BACKEND_CUDA, &fa, d->ws_f, d->ws_f_bytes, stream);
    if (st != TA_OK) return st;
    return ta_bwd(&p, TA_BACKEND_CUDA, &ba, d->ws_b, d->ws_b_bytes, stream);
}

static int same(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

/* The lengths of step `step` (the last one with out-of-range values) into
 * raw; clamped into [0, S_k] in clamped. */
static void step_lengths(ta_rng *r, const spec *s, int step, int32_t *raw, int32_t *clamped) {
    int32_t b;
    for (b = 0; b < s->p.batch; ++b) {
        const int k = ta_rng_int(r, 0, 5);
        raw[b] = k == 0 ? 0 : k == 1 ? s->p.seq_k : ta_rng_int(r, 1, s->p.seq_k);
        if (step == TA_SEQLENS_STEPS - 1)
            raw[b] = b % 2 ? -ta_rng_int(r, 1, 9) : s->p.seq_k + ta_rng_int(r, 1, 9);
        clamped[b] = raw[b] < 0 ? 0 : raw[b] > s->p.seq_k ? s->p.seq_k : raw[b];
    }
}

/* Part 2 for one problem: 1 if every replay matched. */
static int check_problem(ta_rng *r, int idx) {
    spec s;
    dev d;
    hout g, w;
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    int32_t raw[8], clamped[8];
    int step, ok = 1;
    ta_status st;
    random_spec(r, idx, &s);
    describe(&s, idx);
    dev_make(r, &s, &d);
    hout_make(&s, &g);
    hout_make(&s, &w);
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_OK(cudaMemset(d.lens, 0, zs(s.p.batch) * sizeof(int32_t)));
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    st = run_pair(&s, &d, d.lens, 1, stream);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    TA_CHECK(st == TA_OK, "problem %d: capture: %s", idx, ta_status_string(st));
    if (st != TA_OK) {
        CUDA_OK(cudaGraphDestroy(graph));
        ok = 0;
        goto done;
    }
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (step = 0; step < TA_SEQLENS_STEPS; ++step) {
        step_lengths(r, &s, step, raw, clamped);
        /* the replay: new lengths in the captured buffer, poisoned outputs */
        CUDA_OK(cudaMemcpy(d.lens, raw, zs(s.p.batch) * sizeof(int32_t), cudaMemcpyHostToDevice));
        poison_outputs(&s, &d);
        /* the copies above run on the legacy stream, which a non-blocking
         * stream does not wait for (a pageable copy may return before its
         * DMA lands): finish them before the replay reads the buffers */
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaGraphLaunch(exec, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        fetch(&s, &d, &g);
        /* the direct calls with the clamped lengths in host memory */
        poison_outputs(&s, &d);
        st = run_pair(&s, &d, clamped, 0, stream);
        TA_CHECK(st == TA_OK, "problem %d step %d: direct call: %s", idx, step,
                 ta_status_string(st));
        fetch(&s, &d, &w);
        if (st != TA_OK || !same(g.o, w.o, s.no * s.eb) ||
            !same(g.lse, w.lse, s.nlse * sizeof(float)) || !same(g.dq, w.dq, s.nq * s.eb) ||
            !same(g.dk, w.dk, s.nk * s.eb) || !same(g.dv, w.dv, s.nv * s.eb) ||
            !same(g.dconv_w, w.dconv_w, s.nw * sizeof(float))) {
            TA_CHECK(0,
                     "problem %d step %d (lengths %d%s): replay differs from the direct call "
                     "(o %d lse %d dq %d dk %d dv %d dconv_w %d equal)",
                     idx, step, (int)raw[0], s.p.batch > 1 ? ", ..." : "",
                     same(g.o, w.o, s.no * s.eb), same(g.lse, w.lse, s.nlse * sizeof(float)),
                     same(g.dq, w.dq, s.nq * s.eb), same(g.dk, w.dk, s.nk * s.eb),
                     same(g.dv, w.dv, s.nv * s.eb),
                     same(g.dconv_w, w.dconv_w, s.nw * sizeof(float)));
            ok = 0;
        }
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
done:
    CUDA_OK(cudaStreamDestroy(stream));
    hout_free(&g);
    hout_free(&w);
    dev_free(&d);
    return ok;
}

/* A small f32 SDPA problem for the refusals. */
static void small_problem(ta_problem *p) {
    memset(p, 0, sizeof *p);
    p->batch = 2;
    p->heads_q = p->heads_kv = 1;
    p->seq_q = p->seq_k = 16;
    p->head_dim = p->head_dim_v = 8;
    p->dtype = TA_F32;
    p->flags = TA_CAUSAL;
}

/* Part 1. */
static void check_host_refusals(ta_rng *r) {
    static float q[2 * 16 * 8], k[2 * 16 * 8], v[2 * 16 * 8], o[2 * 16 * 8], o2[2 * 16 * 8];
    static float lse[2 * 16];
    static const int32_t lens[2] = {5, 16};
    static const ta_backend host_be[2] = {TA_BACKEND_REF, TA_BACKEND_CPU};
    ta_problem p;
    ta_fwd_args a;
    size_t need = 0, ws_bytes = 0;
    void *ws;
    int i;
    ta_status st;
    small_problem(&p);
    ta_fill_uniform(r, q, TA_F32, 2 * 16 * 8, -1.0f, 1.0f);
    ta_fill_uniform(r, k, TA_F32, 2 * 16 * 8, -1.0f, 1.0f);
    ta_fill_uniform(r, v, TA_F32, 2 * 16 * 8, -1.0f, 1.0f);
    memset(&a, 0, sizeof a);
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.lse = lse;
    a.seqlens_k = lens;
    for (i = 0; i < 2; ++i) /* one workspace for both host backends */
        if (ta_backend_available(host_be[i]) &&
            ta_fwd_workspace_size(&p, host_be[i], &need) == TA_OK && need > ws_bytes)
            ws_bytes = need;
    ws = ta_test_alloc(ws_bytes ? ws_bytes : 64);
    p.flags |= TA_SEQLENS_DEVICE;
    for (i = 0; i < 2; ++i)
        if (ta_backend_available(host_be[i]))
            ta_test_expect_fwd(&p, host_be[i], &a, ws, ws_bytes, TA_ERR_BAD_ARG, "flags",
                               i == 0 ? "TA_SEQLENS_DEVICE on REF" : "TA_SEQLENS_DEVICE on CPU");
    /* without seqlens_k the flag changes nothing */
    a.seqlens_k = NULL;
    ta_poison(o, sizeof o);
    st = ta_fwd(&p, TA_BACKEND_REF, &a, ws, ws_bytes, NULL);
    TA_CHECK(st == TA_OK, "flag without seqlens_k: %s", ta_status_string(st));
    memcpy(o2, o, sizeof o);
    p.flags &= ~(uint32_t)TA_SEQLENS_DEVICE;
    ta_poison(o, sizeof o);
    st = ta_fwd(&p, TA_BACKEND_REF, &a, ws, ws_bytes, NULL);
    TA_CHECK(st == TA_OK && memcmp(o, o2, sizeof o) == 0,
             "flag without seqlens_k: bytes differ from the call without the flag");
    p.flags |= 1u << 4;
    ta_test_expect_fwd(&p, TA_BACKEND_REF, &a, ws, ws_bytes, TA_ERR_BAD_ARG, "flags",
                       "unknown flag bit 1 << 4");
    ta_test_free(ws);
}

/* Part 3: lengths in pageable host memory with the flag. */
static void check_pageable(ta_rng *r) {
    spec s;
    dev d;
    static int32_t lens[8];
    ta_fwd_args a;
    unsigned char *o_h;
    size_t i, touched = 0;
    ta_status st;
    memset(&s, 0, sizeof s);
    small_problem(&s.p);
    spec_counts(&s);
    dev_make(r, &s, &d);
    o_h = (unsigned char *)malloc(s.no * s.eb);
    if (!o_h) exit(1);
    lens[0] = 3;
    lens[1] = 9;
    memset(&a, 0, sizeof a);
    a.q = d.q;
    a.k = d.k;
    a.v = d.v;
    a.o = d.o;
    a.lse = d.lse;
    a.seqlens_k = lens;
    s.p.flags |= TA_SEQLENS_DEVICE;
    CUDA_OK(cudaMemset(d.o, TA_CANARY_BYTE, s.no * s.eb));
    st = ta_fwd(&s.p, TA_BACKEND_CUDA, &a, d.ws_f, d.ws_f_bytes, NULL);
    TA_CHECK(st == TA_ERR_BAD_ARG, "pageable seqlens_k with TA_SEQLENS_DEVICE: %s",
             ta_status_string(st));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(o_h, d.o, s.no * s.eb, cudaMemcpyDeviceToHost));
    for (i = 0; i < s.no * s.eb; ++i)
        touched += o_h[i] != TA_CANARY_BYTE;
    TA_CHECK(touched == 0, "pageable seqlens_k: %zu bytes of o written", touched);
    free(o_h);
    dev_free(&d);
}

/* Part 4: one paged problem. */
typedef struct paged {
    ta_problem p;          /* the paged problem (kv_page_size > 0) */
    int32_t *table;        /* [B, max_blocks] host copy */
    unsigned char *k_pool, *v_pool, *k_cont, *v_cont; /* host */
    size_t pool_elems, cont_elems, eb;                /* of k (and of v with D_v = D) */
    size_t pool_elems_v, cont_elems_v;                /* of v */
} paged;

/* A fresh block table: every sequence's blocks on distinct random pages;
 * the entries past ceil(S_k / page_size) are -1 (never read). */
static void paged_table(ta_rng *r, paged *g) {
    const ta_problem *p = &g->p;
    const int32_t need = (p->seq_k - 1) / p->kv_page_size + 1;
    int32_t *perm = (int32_t *)malloc(zs(p->kv_num_pages) * sizeof(int32_t));
    int32_t i, b;
    if (!perm) exit(1);
    for (i = 0; i < p->kv_num_pages; ++i) perm[i] = i;
    for (i = p->kv_num_pages - 1; i > 0; --i) { /* Fisher-Yates */
        const int32_t j = ta_rng_int(r, 0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (b = 0; b < p->batch; ++b)
        for (i = 0; i < p->kv_max_blocks; ++i)
            g->table[zs(b) * zs(p->kv_max_blocks) + zs(i)] =
                i < need ? perm[zs(b) * zs(need) + zs(i)] : -1;
    free(perm);
}

/* Row (b, h, j) of k (dim D) or v (dim D_v): its element in the pool
 * [num_pages, page_size, H_kv, dim] (the page the table names) and in the
 * contiguous [B, H_kv, S_k, dim]. */
static size_t paged_pool_at(const paged *g, int32_t b, int32_t h, int32_t j, int32_t dim) {
    const ta_problem *p = &g->p;
    const int32_t page = g->table[zs(b) * zs(p->kv_max_blocks) + zs(j / p->kv_page_size)];
    return ((zs(page) * zs(p->kv_page_size) + zs(j % p->kv_page_size)) * zs(p->heads_kv) + zs(h)) *
           zs(dim);
}

static size_t paged_cont_at(const paged *g, int32_t b, int32_t h, int32_t j, int32_t dim) {
    const ta_problem *p = &g->p;
    return ((zs(b) * zs(p->heads_kv) + zs(h)) * zs(p->seq_k) + zs(j)) * zs(dim);
}

/* k_cont [B, H_kv, S_k, D], v_cont [B, H_kv, S_k, D_v] = the pools' rows the
 * table names. */
static void paged_gather(paged *g) {
    const ta_problem *p = &g->p;
    const int32_t d = p->head_dim, dv = p->head_dim_v;
    int32_t b, h, j;
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads_kv; ++h)
            for (j = 0; j < p->seq_k; ++j) {
                memcpy(g->k_cont + paged_cont_at(g, b, h, j, d) * g->eb,
                       g->k_pool + paged_pool_at(g, b, h, j, d) * g->eb, zs(d) * g->eb);
                memcpy(g->v_cont + paged_cont_at(g, b, h, j, dv) * g->eb,
                       g->v_pool + paged_pool_at(g, b, h, j, dv) * g->eb, zs(dv) * g->eb);
            }
}

/* 1 on a compute capability 9.0 device (part 4's default candidate). */
static int g_cc90;
/* The pools, table and contiguous copies of g->p (its page fields set):
 * malloc'd, uninitialised. */
static void paged_alloc(paged *g) {
    const ta_problem *p = &g->p;
    const size_t rows = zs(p->kv_num_pages) * zs(p->kv_page_size) * zs(p->heads_kv);
    const size_t cont = zs(p->batch) * zs(p->heads_kv) * zs(p->seq_k);
    g->eb = ta_dtype_size(p->dtype);
    g->pool_elems = rows * zs(p->head_dim);
    g->pool_elems_v = rows * zs(p->head_dim_v);
    g->cont_elems = cont * zs(p->head_dim);
    g->cont_elems_v = cont * zs(p->head_dim_v);
    g->table = (int32_t *)malloc(zs(p->batch) * zs(p->kv_max_blocks) * sizeof(int32_t));
    g->k_pool = (unsigned char *)malloc(g->pool_elems * g->eb + 1);
    g->v_pool = (unsigned char *)malloc(g->pool_elems_v * g->eb + 1);
    g->k_cont = (unsigned char *)malloc(g->cont_elems * g->eb + 1);
    g->v_cont = (unsigned char *)malloc(g->cont_elems_v * g->eb + 1);
    if (!g->table || !g->k_pool || !g->v_pool || !g->k_cont || !g->v_cont) exit(1);
}

static void paged_make(ta_rng *r, paged *g) {
    static const int32_t page_sizes[4] = {8, 16, 64, 100};
    ta_problem *p = &g->p;
    const int32_t group = 1 << ta_rng_int(r, 0, 2);
    memset(g, 0, sizeof *g);
    p->dtype = ta_rng_int(r, 0, 1) ? TA_BF16 : TA_F16;
    p->precision = TA_PRECISION_FAST;
    p->batch = ta_rng_int(r, 1, 3);
    p->heads_kv = ta_rng_int(r, 1, 2);
    p->heads_q = p->heads_kv * group;
    p->seq_q = ta_rng_int(r, 0, 1) ? 1 : 3;
    p->seq_k = ta_rng_int(r, p->seq_q, 1500);
    p->flags = ta_rng_int(r, 0, 1) ? TA_CAUSAL : 0u;
    p->head_dim = p->head_dim_v = ta_rng_int(r, 0, 1) ? 64 : 128;
    p->num_splits = ta_rng_int(r, 0, 2) == 0 ? 0 : ta_rng_int(r, 0, 1) ? TA_SPLITS_AUTO : 3;
    p->kv_page_size = page_sizes[ta_rng_int(r, 0, 3)];
    p->kv_max_blocks = (p->seq_k - 1) / p->kv_page_size + 1 + ta_rng_int(r, 0, 2);
    p->kv_num_pages = p->batch * p->kv_max_blocks + ta_rng_int(r, 0, 5);
    paged_alloc(g);
    ta_fill_uniform(r, g->k_pool, p->dtype, g->pool_elems, -2.0f, 2.0f);
    ta_fill_uniform(r, g->v_pool, p->dtype, g->pool_elems, -1.0f, 1.0f);
    paged_table(r, g);
    paged_gather(g);
}

static void paged_free(paged *g) {
    free(g->table);
    free(g->k_pool);
    free(g->v_pool);
    free(g->k_cont);
    free(g->v_cont);
}

/* ta_fwd of p (paged or not) on device buffers; o and lse poisoned first,
 * then copied to o_h, lse_h. */
static ta_status paged_run(const ta_problem *p, const ta_fwd_args *a, size_t no, size_t nlse,
                           size_t eb, void *o_h, float *lse_h) {
    size_t bytes = 0;
    void *ws = NULL;
    ta_status st = ta_fwd_workspace_size(p, TA_BACKEND_CUDA, &bytes);
    if (st != TA_OK) return st;
    ws = dalloc(bytes);
    CUDA_OK(cudaMemset(a->o, TA_POISON_BYTE, no * eb));
    CUDA_OK(cudaMemset(a->lse, TA_POISON_BYTE, nlse * sizeof(float)));
    st = ta_fwd(p, TA_BACKEND_CUDA, a, ws, bytes, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(o_h, a->o, no * eb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(lse_h, a->lse, nlse * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(ws));
    return st;
}

/* Part 4 for one problem: 1 if the direct check and every replay matched. */
static int check_paged(ta_rng *r, int idx) {
    paged g;
    ta_problem pc;
    ta_fwd_args ap, ac;
    size_t nq, no, nlse, ws_bytes = 0;
    void *q_d, *o_d, *kp_d, *vp_d, *kc_d, *vc_d, *ws_g;
    float *lse_d;
    int32_t *table_d, *lens_d, lens[3];
    unsigned char *o1, *o2;
    float *l1, *l2;
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    int ok = 1, step, b;
    ta_status st;
    paged_make(r, &g);
    pc = g.p; /* the contiguous twin: same candidate (the paged default) */
    pc.kv_page_size = pc.kv_num_pages = pc.kv_max_blocks = 0;
    /* every problem here has at most 4 x 3 (packed) query rows: the paged
     * default is the decode-shaped kernel (cuda/ta_cuda_fast_decode.cu),
     * tile_config 8 / 9 (D = 64 / 128) on a compute capability 9.0 device
     * (in a build with sm_90a code, as every build of this test on one),
     * else 9 / 10; there a third of the problems name the smaller one */
    pc.tile_config = (g.p.head_dim == 64 ? 8 : 9) + !g_cc90;
    if (ta_rng_int(r, 0, 2) == 0 && g_cc90) g.p.tile_config = pc.tile_config += 1;
    nq = zs(g.p.batch) * zs(g.p.heads_q) * zs(g.p.seq_q) * zs(g.p.head_dim);
    no = nq;
    nlse = zs(g.p.batch) * zs(g.p.heads_q) * zs(g.p.seq_q);
    printf("paged %d: %s B=%d H=%d/%d S=%d/%d D=%d%s page %d x %d (max %d blocks) splits %d\n",
           idx, g.p.dtype == TA_BF16 ? "bf16" : "f16", g.p.batch, g.p.heads_q, g.p.heads_kv,
           g.p.seq_q, g.p.seq_k, g.p.head_dim, g.p.flags & TA_CAUSAL ? " causal" : "",
           g.p.kv_num_pages, g.p.kv_page_size, g.p.kv_max_blocks, g.p.num_splits);
    q_d = dupload(r, g.p.dtype, nq, -2.0f, 2.0f);
    o_d = dalloc(no * g.eb);
    lse_d = (float *)dalloc(nlse * sizeof(float));
    kp_d = dalloc(g.pool_elems * g.eb);
    vp_d = dalloc(g.pool_elems * g.eb);
    kc_d = dalloc(g.cont_elems * g.eb);
    vc_d = dalloc(g.cont_elems * g.eb);
    table_d = (int32_t *)dalloc(zs(g.p.batch) * zs(g.p.kv_max_blocks) * sizeof(int32_t));
    lens_d = (int32_t *)dalloc(3 * sizeof(int32_t));
    o1 = (unsigned char *)malloc(no * g.eb);
    o2 = (unsigned char *)malloc(no * g.eb);
    l1 = (float *)malloc(nlse * sizeof(float));
    l2 = (float *)malloc(nlse * sizeof(float));
    if (!o1 || !o2 || !l1 || !l2) exit(1);
    CUDA_OK(cudaMemcpy(kp_d, g.k_pool, g.pool_elems * g.eb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(vp_d, g.v_pool, g.pool_elems * g.eb, cudaMemcpyHostToDevice));
    memset(&ap, 0, sizeof ap);
    ap.q = q_d;
    ap.k = kp_d;
    ap.v = vp_d;
    ap.o = o_d;
    ap.lse = lse_d;
    ap.block_table = table_d;
    ac = ap;
    ac.k = kc_d;
    ac.v = vc_d;
    ac.block_table = NULL;
    /* 1. the direct paged call against the gathered contiguous one */
    CUDA_OK(cudaMemcpy(table_d, g.table, zs(g.p.batch) * zs(g.p.kv_max_blocks) * sizeof(int32_t),
                       cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(kc_d, g.k_cont, g.cont_elems * g.eb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(vc_d, g.v_cont, g.cont_elems * g.eb, cudaMemcpyHostToDevice));
    st = paged_run(&g.p, &ap, no, nlse, g.eb, o1, l1);
    TA_CHECK(st == TA_OK, "paged %d: %s", idx, ta_status_string(st));
    ok &= st == TA_OK;
    st = paged_run(&pc, &ac, no, nlse, g.eb, o2, l2);
    TA_CHECK(st == TA_OK, "paged %d: contiguous twin: %s", idx, ta_status_string(st));
    ok &= st == TA_OK && same(o1, o2, no * g.eb) && same(l1, l2, nlse * sizeof(float));
    TA_CHECK(ok, "paged %d: o/lse differ from the contiguous call on gathered K, V", idx);
    /* 2. captured once with device lengths, replayed with new tables and lengths */
    g.p.flags |= TA_SEQLENS_DEVICE;
    ap.seqlens_k = lens_d;
    ac.seqlens_k = lens;
    TA_CHECK(ta_fwd_workspace_size(&g.p, TA_BACKEND_CUDA, &ws_bytes) == TA_OK, "paged %d size",
             idx);
    ws_g = dalloc(ws_bytes);
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    st = ta_fwd(&g.p, TA_BACKEND_CUDA, &ap, ws_g, ws_bytes, stream);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    TA_CHECK(st == TA_OK, "paged %d: capture: %s", idx, ta_status_string(st));
    if (st == TA_OK) {
        CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
        for (step = 0; step < 3; ++step) {
            int match;
            paged_table(r, &g);
            paged_gather(&g);
            for (b = 0; b < g.p.batch; ++b) lens[b] = ta_rng_int(r, 0, g.p.seq_k);
            CUDA_OK(cudaMemcpy(table_d, g.table,
                               zs(g.p.batch) * zs(g.p.kv_max_blocks) * sizeof(int32_t),
                               cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(lens_d, lens, zs(g.p.batch) * sizeof(int32_t),
                               cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(kc_d, g.k_cont, g.cont_elems * g.eb, cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(vc_d, g.v_cont, g.cont_elems * g.eb, cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemset(o_d, TA_POISON_BYTE, no * g.eb));
            CUDA_OK(cudaMemset(lse_d, TA_POISON_BYTE, nlse * sizeof(float)));
            CUDA_OK(cudaDeviceSynchronize()); /* as in part 2: the copies have landed */
            CUDA_OK(cudaGraphLaunch(exec, stream));
            CUDA_OK(cudaStreamSynchronize(stream));
            CUDA_OK(cudaMemcpy(o1, o_d, no * g.eb, cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(l1, lse_d, nlse * sizeof(float), cudaMemcpyDeviceToHost));
            pc.num_splits = g.p.num_splits;
            st = paged_run(&pc, &ac, no, nlse, g.eb, o2, l2);
            match = st == TA_OK && same(o1, o2, no * g.eb) && same(l1, l2, nlse * sizeof(float));
            TA_CHECK(match, "paged %d replay %d: differs from the direct contiguous call (%s)",
                     idx, step, ta_status_string(st));
            ok &= match;
        }
        CUDA_OK(cudaGraphExecDestroy(exec));
    }
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(stream));
    CUDA_OK(cudaFree(ws_g));
    CUDA_OK(cudaFree(q_d));
    CUDA_OK(cudaFree(o_d));
    CUDA_OK(cudaFree(lse_d));
    CUDA_OK(cudaFree(kp_d));
    CUDA_OK(cudaFree(vp_d));
    CUDA_OK(cudaFree(kc_d));
    CUDA_OK(cudaFree(vc_d));
    CUDA_OK(cudaFree(table_d));
    CUDA_OK(cudaFree(lens_d));
    free(o1);
    free(o2);
    free(l1);
    free(l2);
    paged_free(&g);
    return ok;
}

/* ---- Part 5: paged KV on the exact kernels (CUDA == REF bit for bit) ---- */

#define TA_PAGED_EXACT_PROBLEMS 40 /* on a device */
#define TA_PAGED_EXACT_HOST     6  /* without one: the host side only */
#define TA_PAGED_EXACT_SALT     UINT64_C(0x9a6ed)

/* One exact paged problem: the pools (unused pages and the slots past S_k
 * poisoned), the gathered K and V, the other inputs (host), the lengths. */
typedef struct pexact {
    paged g;
    int mta, lens_mode; /* lens_mode: 0 none, 1 host, 2 TA_SEQLENS_DEVICE */
    int32_t *lens;      /* [B] or NULL */
    void *q, *q_hist;
    float *conv_w, *rope_cos, *rope_sin;
    size_t nq, nh, no, nlse, nw, nrope;
} pexact;

static const int32_t k_page_sizes[] = {1, 1, 2, 3, 5, 7, 13, 16, 16, 24, 32, 64, 100};

static void pexact_make(ta_rng *r, pexact *x) {
    ta_problem *p = &x->g.p;
    int32_t need, b, h, j;
    memset(x, 0, sizeof *x);
    x->mta = ta_rng_int(r, 0, 1);
    p->dtype = (ta_dtype)ta_rng_int(r, 0, 2);
    p->precision = TA_PRECISION_EXACT;
    p->batch = ta_rng_int(r, 1, 4);
    p->heads_kv = ta_rng_int(r, 1, 3);
    p->heads_q = p->heads_kv * ta_rng_int(r, 1, 3);
    p->head_dim = ta_rng_int(r, 0, 4) == 0 ? ta_rng_int(r, 129, 256) : ta_rng_int(r, 1, 128);
    p->head_dim_v = ta_rng_int(r, 0, 1)        ? p->head_dim
                    : ta_rng_int(r, 0, 4) == 0 ? ta_rng_int(r, 129, 256)
                                               : ta_rng_int(r, 1, 128);
    p->seq_k = ta_rng_int(r, 1, 320);
    p->seq_q = ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, 4) : ta_rng_int(r, 1, p->seq_k);
    p->flags = x->mta || ta_rng_int(r, 0, 1) ? TA_CAUSAL : 0u;
    if (x->mta) {
        p->conv_q = ta_rng_int(r, 0, 2) == 0 ? 6 : ta_rng_int(r, 1, 8);
        p->conv_k = p->conv_q == 6 ? 11 : 2 * ta_rng_int(r, 0, 7) + 1;
        /* a decode step that continues a sequence: query history rows */
        if (p->conv_q > 1 && ta_rng_int(r, 0, 1)) p->q_history = ta_rng_int(r, 1, p->conv_q - 1);
    }
    p->block_k = ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 16, 128) : 0;
    if (x->mta && p->block_k && p->block_k < 4 * ((p->conv_k - 1) / 2) + 1) p->block_k = 0;
    p->num_splits = ta_rng_int(r, 1, 4); /* 1: one split */
    ta_test_random_window(r, p, 25);
    if (p->q_history == 0 && p->head_dim >= 2 && ta_rng_int(r, 0, 4) == 0) {
        p->rope = ta_rng_int(r, 0, 1) ? TA_ROPE_HALF : TA_ROPE_INTERLEAVED;
        p->rope_pairs = ta_rng_int(r, 1, p->head_dim / 2);
        p->rope_rows = p->seq_q > p->seq_k ? p->seq_q : p->seq_k;
    }
    x->lens_mode = ta_rng_int(r, 0, 2);
    p->kv_page_size =
        k_page_sizes[ta_rng_int(r, 0, (int32_t)(sizeof k_page_sizes / sizeof k_page_sizes[0]) - 1)];
    need = (p->seq_k - 1) / p->kv_page_size + 1;
    p->kv_max_blocks = need + ta_rng_int(r, 0, 2);
    p->kv_num_pages = p->batch * need + ta_rng_int(r, 0, 5);
    paged_alloc(&x->g);
    paged_table(r, &x->g); /* a random page order; entries past the needed ones -1 */
    /* every pool byte poisoned (NaN), then the rows of keys [0, S_k) filled */
    memset(x->g.k_pool, TA_POISON_BYTE, x->g.pool_elems * x->g.eb);
    memset(x->g.v_pool, TA_POISON_BYTE, x->g.pool_elems_v * x->g.eb);
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads_kv; ++h)
            for (j = 0; j < p->seq_k; ++j) {
                ta_fill_uniform(r,
                                x->g.k_pool + paged_pool_at(&x->g, b, h, j, p->head_dim) * x->g.eb,
                                p->dtype, zs(p->head_dim), -2.0f, 2.0f);
                ta_fill_uniform(
                    r, x->g.v_pool + paged_pool_at(&x->g, b, h, j, p->head_dim_v) * x->g.eb,
                    p->dtype, zs(p->head_dim_v), -1.0f, 1.0f);
            }
    paged_gather(&x->g);
    x->nlse = zs(p->batch) * zs(p->heads_q) * zs(p->seq_q);
    x->nq = x->nlse * zs(p->head_dim);
    x->no = x->nlse * zs(p->head_dim_v);
    x->nh = zs(p->batch) * zs(p->heads_q) * zs(p->q_history) * zs(p->head_dim);
    x->nw = x->mta ? zs(p->heads_q) * zs(p->conv_q) * zs(p->conv_k) : 0;
    x->nrope = zs(p->rope_rows) * zs(p->rope_pairs);
    x->q = malloc(x->nq * x->g.eb + 1);
    x->q_hist = malloc(x->nh * x->g.eb + 1);
    x->conv_w = (float *)malloc(x->nw * sizeof(float) + 1);
    x->rope_cos = (float *)malloc(x->nrope * sizeof(float) + 1);
    x->rope_sin = (float *)malloc(x->nrope * sizeof(float) + 1);
    x->lens = (int32_t *)malloc(zs(p->batch) * sizeof(int32_t));
    if (!x->q || !x->q_hist || !x->conv_w || !x->rope_cos || !x->rope_sin || !x->lens) exit(1);
    ta_fill_uniform(r, x->q, p->dtype, x->nq, -1.5f, 1.5f);
    ta_fill_uniform(r, x->q_hist, p->dtype, x->nh, -1.5f, 1.5f);
    ta_fill_uniform(r, x->conv_w, TA_F32, x->nw, -0.3f, 0.3f);
    for (b = 0; b < p->batch; ++b) /* 0, S_k or anything between */
        x->lens[b] = ta_rng_int(r, 0, 3) == 0 ? p->seq_k : ta_rng_int(r, 0, p->seq_k);
    if (p->rope) {
        ta_rope_1d cfg;
        ta_status st;
        memset(&cfg, 0, sizeof cfg);
        cfg.n_pairs = p->rope_pairs;
        cfg.rows = p->rope_rows;
        st = ta_rope_table_1d(&cfg, x->rope_cos, x->rope_sin);
        TA_CHECK(st == TA_OK, "rope table: %s", ta_status_string(st));
    }
}

static void pexact_free(pexact *x) {
    paged_free(&x->g);
    free(x->lens);
    free(x->q);
    free(x->q_hist);
    free(x->conv_w);
    free(x->rope_cos);
    free(x->rope_sin);
}

static void pexact_describe(const pexact *x, int idx, char *buf, size_t n) {
    const ta_problem *p = &x->g.p;
    snprintf(buf, n,
             "paged exact %d: %s %s conv=%dx%d hist=%d B=%d H=%d/%d S=%d/%d D=%d/%d%s win=%d,%d "
             "bk=%d splits=%d rope=%d/%d lens=%s page %d x %d (max %d blocks)",
             idx,
             p->dtype == TA_F32   ? "f32"
             : p->dtype == TA_F16 ? "f16"
                                  : "bf16",
             x->mta ? "MTA" : "SDPA", p->conv_q, p->conv_k, p->q_history, p->batch, p->heads_q,
             p->heads_kv, p->seq_q, p->seq_k, p->head_dim, p->head_dim_v,
             p->flags & TA_CAUSAL ? " causal" : "", p->flags & TA_WINDOW ? p->window_left : -1,
             p->flags & TA_WINDOW ? p->window_right : -1, p->block_k, p->num_splits, p->rope,
             p->rope_pairs,
             x->lens_mode == 0   ? "none"
             : x->lens_mode == 1 ? "host"
                                 : "device",
             p->kv_num_pages, p->kv_page_size, p->kv_max_blocks);
}

/* The arguments of x's call on host (or device) tensors q, k, v, ...; paged:
 * k and v are the pools with the table. */
static ta_fwd_args pexact_args(const pexact *x, const void *q, const void *k, const void *v,
                               const void *q_hist, const float *conv_w, const float *cos,
                               const float *sin, const int32_t *lens, const int32_t *table) {
    ta_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = q;
    a.k = k;
    a.v = v;
    a.q_hist = x->g.p.q_history > 0 ? q_hist : NULL;
    a.conv_w = x->mta ? conv_w : NULL;
    a.rope.cos = x->g.p.rope ? cos : NULL;
    a.rope.sin = x->g.p.rope ? sin : NULL;
    a.seqlens_k = x->lens_mode ? lens : NULL;
    a.block_table = table;
    return a;
}

/* A REF forward of p into o, lse (poisoned first). */
static ta_status pexact_ref(const ta_problem *p, ta_fwd_args a, void *o, float *lse, size_t o_bytes,
                            size_t lse_bytes) {
    size_t bytes = 0;
    void *ws;
    ta_status st = ta_fwd_workspace_size(p, TA_BACKEND_REF, &bytes);
    if (st != TA_OK) return st;
    ws = ta_test_alloc(bytes ? bytes : 1);
    ta_poison(ws, bytes);
    ta_poison(o, o_bytes);
    ta_poison(lse, lse_bytes);
    a.o = o;
    a.lse = lse;
    st = ta_fwd(p, TA_BACKEND_REF, &a, ws, bytes, NULL);
    ta_test_free(ws);
    return st;
}

/* A host buffer -> a new device buffer (NULL for an empty one). */
static void *dcopy(const void *h, size_t bytes) {
    void *d;
    if (bytes == 0) return NULL;
    d = dalloc(bytes);
    CUDA_OK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* A CUDA forward of p into device o, lse (poisoned first, workspace too),
 * copied back into o_h, lse_h. */
static ta_status pexact_cuda(const ta_problem *p, ta_fwd_args a, void *o, float *lse,
                             size_t o_bytes, size_t lse_bytes, void *o_h, float *lse_h) {
    size_t bytes = 0;
    void *ws;
    ta_status st = ta_fwd_workspace_size(p, TA_BACKEND_CUDA, &bytes);
    if (st != TA_OK) return st;
    ws = dalloc(bytes);
    CUDA_OK(cudaMemset(ws, TA_POISON_BYTE, bytes ? bytes : 1));
    CUDA_OK(cudaMemset(o, TA_POISON_BYTE, o_bytes));
    CUDA_OK(cudaMemset(lse, TA_POISON_BYTE, lse_bytes));
    a.o = o;
    a.lse = lse;
    st = ta_fwd(p, TA_BACKEND_CUDA, &a, ws, bytes, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(o_h, o, o_bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(lse_h, lse, lse_bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(ws));
    return st;
}

/* 1 if the call returned TA_OK and its o and lse equal REF's bytes. */
static int pexact_same(const char *desc, const char *what, ta_status st, const void *o_ref,
                       const void *o_got, size_t ob, const float *lse_ref, const float *lse_got,
                       size_t lb) {
    const int same_o = same(o_ref, o_got, ob), same_l = same(lse_ref, lse_got, lb);
    TA_CHECK(st == TA_OK && same_o && same_l,
             "%s: %s (%s) differs from REF contiguous (o equal %d, lse equal %d)", desc, what,
             ta_status_string(st), same_o, same_l);
    return st == TA_OK && same_o && same_l;
}

/* Part 5 for one problem: REF on the gathered contiguous K, V is the
 * reference; REF paged must equal it (host); on a device the CUDA paged call
 * (pools and table in device memory, lengths in host or device memory) and
 * the CUDA contiguous call must equal it too. 1 if all did. */
static int check_paged_exact(ta_rng *r, int idx, int on_device) {
    pexact x;
    ta_problem pc;
    char desc[320];
    unsigned char *o_ref, *o_got;
    float *lse_ref, *lse_got;
    size_t ob, lb;
    int ok = 1;
    ta_status st;
    pexact_make(r, &x);
    pexact_describe(&x, idx, desc, sizeof desc);
    printf("%s\n", desc);
    pc = x.g.p; /* the contiguous twin */
    pc.kv_page_size = pc.kv_num_pages = pc.kv_max_blocks = 0;
    ob = x.no * x.g.eb;
    lb = x.nlse * sizeof(float);
    o_ref = (unsigned char *)malloc(ob + 1);
    o_got = (unsigned char *)malloc(ob + 1);
    lse_ref = (float *)malloc(lb + 1);
    lse_got = (float *)malloc(lb + 1);
    if (!o_ref || !o_got || !lse_ref || !lse_got) exit(1);
    st = pexact_ref(&pc,
                    pexact_args(&x, x.q, x.g.k_cont, x.g.v_cont, x.q_hist, x.conv_w, x.rope_cos,
                                x.rope_sin, x.lens, NULL),
                    o_ref, lse_ref, ob, lb);
    TA_CHECK(st == TA_OK, "%s: REF contiguous: %s", desc, ta_status_string(st));
    ok &= st == TA_OK;
    if (ok) { /* the host side: REF paged == REF contiguous */
        st = pexact_ref(&x.g.p,
                        pexact_args(&x, x.q, x.g.k_pool, x.g.v_pool, x.q_hist, x.conv_w, x.rope_cos,
                                    x.rope_sin, x.lens, x.g.table),
                        o_got, lse_got, ob, lb);
        ok &= pexact_same(desc, "REF paged", st, o_ref, o_got, ob, lse_ref, lse_got, lb);
    }
    if (ok && on_device) {
        const int32_t nb = x.g.p.batch, nt = nb * x.g.p.kv_max_blocks;
        void *q_d = dcopy(x.q, x.nq * x.g.eb), *h_d = dcopy(x.q_hist, x.nh * x.g.eb);
        void *kp_d = dcopy(x.g.k_pool, x.g.pool_elems * x.g.eb);
        void *vp_d = dcopy(x.g.v_pool, x.g.pool_elems_v * x.g.eb);
        void *kc_d = dcopy(x.g.k_cont, x.g.cont_elems * x.g.eb);
        void *vc_d = dcopy(x.g.v_cont, x.g.cont_elems_v * x.g.eb);
        float *w_d = (float *)dcopy(x.conv_w, x.nw * sizeof(float));
        float *cos_d = (float *)dcopy(x.rope_cos, x.nrope * sizeof(float));
        float *sin_d = (float *)dcopy(x.rope_sin, x.nrope * sizeof(float));
        int32_t *table_d = (int32_t *)dcopy(x.g.table, zs(nt) * sizeof(int32_t));
        int32_t *lens_d = (int32_t *)dcopy(x.lens, zs(nb) * sizeof(int32_t));
        void *o_d = dalloc(ob);
        float *lse_d = (float *)dalloc(lb);
        void *const all[] = {q_d,   h_d,   kp_d,    vp_d,   kc_d, vc_d, w_d,
                             cos_d, sin_d, table_d, lens_d, o_d,  lse_d};
        ta_problem pp = x.g.p;
        size_t i;
        if (x.lens_mode == 2) pp.flags |= TA_SEQLENS_DEVICE;
        st = pexact_cuda(&pp,
                         pexact_args(&x, q_d, kp_d, vp_d, h_d, w_d, cos_d, sin_d,
                                     x.lens_mode == 2 ? lens_d : x.lens, table_d),
                         o_d, lse_d, ob, lb, o_got, lse_got);
        ok &= pexact_same(desc, "CUDA paged", st, o_ref, o_got, ob, lse_ref, lse_got, lb);
        st =
            pexact_cuda(&pc, pexact_args(&x, q_d, kc_d, vc_d, h_d, w_d, cos_d, sin_d, x.lens, NULL),
                        o_d, lse_d, ob, lb, o_got, lse_got);
        ok &= pexact_same(desc, "CUDA contiguous", st, o_ref, o_got, ob, lse_ref, lse_got, lb);
        for (i = 0; i < sizeof all / sizeof all[0]; ++i)
            if (all[i]) CUDA_OK(cudaFree(all[i]));
    }
    free(o_ref);
    free(o_got);
    free(lse_ref);
    free(lse_got);
    pexact_free(&x);
    return ok;
}

/* Part 5's checks that need no device: CUDA sizes a paged exact forward
 * (SDPA, MTA with history rows, split-K) and a paged fast MTA one (the exact
 * kernels run it); the backward and the fast SDPA forward with the rotary
 * stage still refuse pages. */
static void check_paged_exact_host(void) {
    ta_problem p;
    size_t bytes = 0;
    ta_status st;
    memset(&p, 0, sizeof p);
    p.batch = 2;
    p.heads_q = 4;
    p.heads_kv = 2;
    p.seq_q = 3;
    p.seq_k = 300; /* 5 K tiles of 64: three parts, a workspace */
    p.head_dim = p.head_dim_v = 64;
    p.dtype = TA_F16;
    p.flags = TA_CAUSAL;
    p.block_k = 64;
    p.kv_page_size = 7;
    p.kv_max_blocks = 43;
    p.kv_num_pages = 90;
    p.num_splits = 3;
    st = ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes);
    TA_CHECK(st == TA_OK && bytes > 0, "paged exact SDPA split-K: fwd size %s (%zu bytes)",
             ta_status_string(st), bytes);
    st = ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes);
    TA_CHECK(st == TA_ERR_UNSUPPORTED, "paged exact SDPA: bwd size %s, want unsupported",
             ta_status_string(st));
    p.conv_q = 6;
    p.conv_k = 11;
    p.q_history = 5;
    st = ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes);
    TA_CHECK(st == TA_OK, "paged exact MTA with history: fwd size %s", ta_status_string(st));
    p.precision = TA_PRECISION_FAST;
    st = ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes);
    TA_CHECK(st == TA_OK, "paged fast MTA (exact kernels): fwd size %s", ta_status_string(st));
    p.conv_q = p.conv_k = p.q_history = 0;
    p.num_splits = 1;
    p.rope = TA_ROPE_HALF;
    p.rope_pairs = 32;
    p.rope_rows = 300;
    st = ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes);
    TA_CHECK(st == TA_ERR_UNSUPPORTED, "paged fast SDPA with rope: fwd size %s, want unsupported",
             ta_status_string(st));
    p.precision = TA_PRECISION_EXACT;
    st = ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes);
    TA_CHECK(st == TA_OK, "paged exact SDPA with rope: fwd size %s", ta_status_string(st));
}

/* Part 5: n problems (host side only without a device); its own stream of
 * the run's seed (the other parts' draws are unchanged). */
static void check_paged_exact_all(uint64_t seed, int n, int on_device) {
    ta_rng r;
    int i, passed = 0;
    ta_rng_seed(&r, seed ^ TA_PAGED_EXACT_SALT);
    for (i = 0; i < n; ++i)
        passed += check_paged_exact(&r, i, on_device);
    printf("paged KV, exact: %d of %d problems: %s\n", passed, n,
           on_device ? "CUDA paged and contiguous bit-identical to REF on the gathered K, V"
                     : "REF paged == REF contiguous (host side; no device)");
}

int main(int argc, char **argv) {
    const uint64_t seed = ta_test_seed("test_cuda_seqlens");
    int dev_count = 0, i, passed = 0, only_paged = 0, n_paged = TA_PAGED_EXACT_PROBLEMS;
    int major = 0, minor = 0;
    ta_rng r;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--paged-exact") == 0)
            only_paged = 1;
        else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc && atoi(argv[i + 1]) >= 0)
            n_paged = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: test_cuda_seqlens [--paged-exact] [--count N]\n");
            return 2;
        }
    }
    ta_rng_seed(&r, seed);
    check_host_refusals(&r);
    check_paged_exact_host();
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0 ||
        !ta_backend_available(TA_BACKEND_CUDA)) {
        (void)cudaGetLastError();
        check_paged_exact_all(seed, TA_PAGED_EXACT_HOST, 0);
        printf("no CUDA device: skipped\n");
        return ta_test_failures ? ta_test_finish("test_cuda_seqlens") : TA_TEST_SKIP;
    }
    CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    g_cc90 = major == 9 && minor == 0;
    if (!only_paged) {
        for (i = 0; i < TA_SEQLENS_PROBLEMS; ++i)
            passed += check_problem(&r, i);
        printf("%d of %d problems: %d graph replays with new device lengths bit-identical to "
               "direct calls with host lengths\n",
               passed, TA_SEQLENS_PROBLEMS, passed * TA_SEQLENS_STEPS);
        check_pageable(&r);
        for (i = 0, passed = 0; i < TA_SEQLENS_PROBLEMS; ++i)
            passed += check_paged(&r, i);
        printf("paged KV: %d of %d problems bit-identical to the contiguous call, direct and in "
               "graph replays with new tables and lengths\n",
               passed, TA_SEQLENS_PROBLEMS);
    }
    check_paged_exact_all(seed, n_paged, 1);
    return ta_test_finish("test_cuda_seqlens");
}
