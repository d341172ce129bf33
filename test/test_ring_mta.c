/*
 * Chunk pairs over key ranges (docs/api.md, "Key ranges and the query
 * offset"): the sequence cut into 2N chunks of C rows; each (q chunk a,
 * k chunk b) pair is one ta_fwd on chunk-sized tensors that carry the conv's
 * halos, the way a device of a ring holds them:
 *
 *   keys   [k0 - E, k1 + R)  E = one effective K tile (0 for chunk 0): the
 *                            conv's left keys, on a tile boundary; R = P_k
 *                            keys past the chunk (fewer at the end)
 *   output key_begin = E, key_end = E + C (the chunk's own keys)
 *   rows   the q chunk, and q_history = min(c_q - 1, q0) rows above it
 *   place  q_offset = q0 - k0 - R: row r at the key position of q0 + r
 *
 * then per q chunk ta_merge of its parts in key order. REF and CPU, f32
 * exact mode, MTA (random c_q x c_k, causal, sometimes a sliding window)
 * and SDPA (causal or not, sometimes a window on both sides; on REF and CPU
 * sometimes the rotary stage, each pair passing its absolute positions):
 *
 *   - the chunked result equals one ta_fwd over the whole sequence with
 *     num_splits = 2N, bit for bit (o and lse): the same K tiles per part,
 *     the same raw scores in every conv window, the same merge;
 *   - CPU equals REF bit for bit; pairs run in a random order;
 *   - the refusals: a range off the tile boundaries, bounds, the backward,
 *     latent attention; nothing written.
 * Built again as test_cuda_ring_mta (TA_RING_MTA_CUDA, label cuda): the same
 * pair calls and merges on CUDA (device copies of every buffer) against REF's,
 * bit for bit; exits 77 (skipped) without a device.
 * Fresh seed, printed (TA_SEED replays); outputs poisoned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tileattn.h"
#ifdef TA_RING_MTA_CUDA
#include "test_cuda_util.h"
#endif

#define BLOCK_K 64
#ifdef TA_RING_MTA_CUDA
#define OTHER TA_BACKEND_CUDA
#define OTHER_NAME "CUDA"
#define TEST_NAME "test_cuda_ring_mta"
#else
#define OTHER TA_BACKEND_CPU
#define OTHER_NAME "CPU"
#define TEST_NAME "test_ring_mta"
#endif

typedef struct mcase {
    size_t n, m, c, h, hkv, d, s; /* ranks, tiles per chunk, C, heads, D, S = 2 N C */
    int32_t cq, ck, pk, ce;       /* conv (0,0 = SDPA), P_k, effective K tile width */
    int causal, window;
    int32_t wl, wr;
    int rope;             /* the rotary stage (REF, CPU only): pairs rope_pairs, tables of S rows */
    int32_t rope_pairs;
    float *q, *k, *v, *w; /* [H, S, D], [Hkv, S, D] x 2, [H, cq, ck] */
    float *cs, *sn;       /* rope tables [S, rope_pairs] */
    int32_t *pos;         /* 0 .. S - 1: absolute positions */
} mcase;

static ta_problem base_problem(const mcase *mc, size_t sq, size_t sk) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = (int32_t)mc->h;
    p.heads_kv = (int32_t)mc->hkv;
    p.seq_q = (int32_t)sq;
    p.seq_k = (int32_t)sk;
    p.head_dim = p.head_dim_v = (int32_t)mc->d;
    p.dtype = TA_F32;
    p.block_k = BLOCK_K;
    p.conv_q = mc->cq;
    p.conv_k = mc->ck;
    p.flags = (mc->causal ? TA_CAUSAL : 0u) | (mc->window ? TA_WINDOW : 0u);
    p.window_left = mc->window ? mc->wl : 0;
    p.window_right = mc->window ? mc->wr : 0;
    if (mc->rope) {
        p.rope = mc->rope;
        p.rope_pairs = mc->rope_pairs;
        p.rope_rows = (int32_t)mc->s;
    }
    return p;
}

static void *ws_for(const ta_problem *p, ta_backend be, size_t *bytes) {
    TA_CHECK(ta_fwd_workspace_size(p, be, bytes) == TA_OK, "size query");
    return ta_test_alloc(*bytes ? *bytes : 64);
}

/* The pair (q chunk a, k chunk b) as the ring runs it: its problem and the
 * halo'd key rows [*k_lo, *k_hi) of the full sequence. */
static ta_problem pair_problem(const mcase *mc, size_t a, size_t b, size_t *k_lo, size_t *k_hi,
                               size_t *qh) {
    const size_t q0 = a * mc->c, k0 = b * mc->c, k1 = k0 + mc->c;
    const size_t e = b > 0 && mc->pk > 0 ? (size_t)mc->ce : 0;
    const size_t r = k1 + (size_t)mc->pk <= mc->s ? (size_t)mc->pk : mc->s - k1;
    ta_problem p;
    *k_lo = k0 - e;
    *k_hi = k1 + r;
    *qh = mc->cq > 0 ? (q0 < (size_t)mc->cq - 1 ? q0 : (size_t)mc->cq - 1) : 0;
    p = base_problem(mc, mc->c, *k_hi - *k_lo);
    p.q_history = (int32_t)*qh;
    p.key_begin = (int32_t)e;
    p.key_end = (int32_t)(e + mc->c);
    p.q_offset = (int32_t)((int64_t)q0 - (int64_t)k0 - (int64_t)r);
    return p;
}

#ifdef TA_RING_MTA_CUDA
/* A device copy of n host bytes (NULL stays NULL). */
static void *dev_of(const void *h, size_t n) {
    void *d = NULL;
    if (!h) return NULL;
    CUDA_OK(cudaMalloc(&d, n ? n : 4));
    CUDA_OK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}
#endif

/* ta_fwd of the pair on backend be, host buffers in and out (CUDA: through
 * device copies, the outputs poisoned there first). */
static ta_status run_fwd(const ta_problem *p, ta_backend be, const ta_fwd_args *fa) {
    size_t wb;
    ta_status st;
    void *ws;
#ifdef TA_RING_MTA_CUDA
    if (be == TA_BACKEND_CUDA) {
        const size_t h = (size_t)p->heads_q, hkv = (size_t)p->heads_kv, d = (size_t)p->head_dim;
        const size_t nq = h * (size_t)p->seq_q * d, nk = hkv * (size_t)p->seq_k * d;
        const size_t nl = h * (size_t)p->seq_q, nh = h * (size_t)p->q_history * d;
        const size_t nw = p->conv_q > 0 ? h * (size_t)(p->conv_q * p->conv_k) : 0;
        ta_fwd_args da = *fa;
        void *in[5];
        int x;
        TA_CHECK(ta_fwd_workspace_size(p, be, &wb) == TA_OK, "size query (CUDA)");
        da.q = in[0] = dev_of(fa->q, nq * 4);
        da.k = in[1] = dev_of(fa->k, nk * 4);
        da.v = in[2] = dev_of(fa->v, nk * 4);
        da.conv_w = (const float *)(in[3] = dev_of(fa->conv_w, nw * 4));
        da.q_hist = in[4] = dev_of(fa->q_hist, nh * 4);
        CUDA_OK(cudaMalloc(&da.o, nq * 4));
        CUDA_OK(cudaMalloc((void **)&da.lse, nl * 4));
        CUDA_OK(cudaMemset(da.o, 0xFF, nq * 4));
        CUDA_OK(cudaMemset(da.lse, 0xFF, nl * 4));
        CUDA_OK(cudaMalloc(&ws, wb ? wb : 64));
        st = ta_fwd(p, be, &da, ws, wb, NULL);
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaMemcpy(fa->o, da.o, nq * 4, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(fa->lse, da.lse, nl * 4, cudaMemcpyDeviceToHost));
        for (x = 0; x < 5; ++x) cudaFree(in[x]);
        cudaFree(da.o);
        cudaFree(da.lse);
        cudaFree(ws);
        return st;
    }
#endif
    ws = ws_for(p, be, &wb);
    st = ta_fwd(p, be, fa, ws, wb, NULL);
    ta_test_free(ws);
    return st;
}

/* ta_merge on backend be, host buffers (CUDA: device copies). */
static ta_status run_merge(const ta_problem *p, ta_backend be, const ta_merge_args *m) {
#ifdef TA_RING_MTA_CUDA
    if (be == TA_BACKEND_CUDA) {
        const size_t nl = (size_t)p->heads_q * (size_t)p->seq_q;
        const size_t no = nl * (size_t)p->head_dim_v, k = (size_t)m->num_parts;
        ta_merge_args dm = *m;
        ta_status st;
        void *parts = dev_of(m->o_parts, k * no * 4), *lparts = dev_of(m->lse_parts, k * nl * 4);
        dm.o_parts = parts;
        dm.lse_parts = (const float *)lparts;
        CUDA_OK(cudaMalloc(&dm.o, no * 4));
        CUDA_OK(cudaMalloc((void **)&dm.lse, nl * 4));
        st = ta_merge(p, be, &dm, NULL);
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaMemcpy(m->o, dm.o, no * 4, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(m->lse, dm.lse, nl * 4, cudaMemcpyDeviceToHost));
        cudaFree(parts);
        cudaFree(lparts);
        cudaFree(dm.o);
        cudaFree(dm.lse);
        return st;
    }
#endif
    return ta_merge(p, be, m, NULL);
}

/* The chunked forward on backend be: o [H, S, D], lse [H, S]. */
static void chunked(const mcase *mc, ta_backend be, ta_rng *r, float *o, float *lse) {
    const size_t nch = 2 * mc->n, C = mc->c, S = mc->s, D = mc->d;
    const size_t qn = mc->h * C * D, ln = mc->h * C, kmax = C + 2 * (size_t)BLOCK_K;
    float *qc = malloc(qn * sizeof(float)), *qhc = malloc(mc->h * 16 * D * sizeof(float));
    float *kc = malloc(mc->hkv * kmax * D * sizeof(float));
    float *vc = malloc(mc->hkv * kmax * D * sizeof(float));
    float *mo = malloc(qn * sizeof(float)), *ml = malloc(ln * sizeof(float));
    float *all_o = malloc(nch * nch * qn * sizeof(float));
    float *all_l = malloc(nch * nch * ln * sizeof(float));
    size_t *order = malloc(nch * nch * sizeof(size_t));
    size_t a, b, i, np = 0, h;
    if (!qc || !qhc || !kc || !vc || !mo || !ml || !all_o || !all_l || !order) exit(1);
    for (a = 0; a < nch; ++a) /* the pairs the mask can leave visible, in a random order */
        for (b = 0; b < nch; ++b)
            if (!mc->causal || b <= a) order[np++] = a * nch + b;
    for (i = np - 1; i > 0; --i) {
        const size_t j = (size_t)ta_rng_int(r, 0, (int32_t)i), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    ta_poison(all_o, nch * nch * qn * sizeof(float));
    ta_poison(all_l, nch * nch * ln * sizeof(float));
    for (i = 0; i < np; ++i) {
        const size_t qa = order[i] / nch, kb = order[i] % nch;
        size_t k_lo, k_hi, qh;
        const ta_problem p = pair_problem(mc, qa, kb, &k_lo, &k_hi, &qh);
        ta_fwd_args fa;
        ta_test_rows_of(qc, mc->q, mc->h, S, D, qa * C, C);
        if (qh > 0) ta_test_rows_of(qhc, mc->q, mc->h, S, D, qa * C - qh, qh);
        ta_test_rows_of(kc, mc->k, mc->hkv, S, D, k_lo, k_hi - k_lo);
        ta_test_rows_of(vc, mc->v, mc->hkv, S, D, k_lo, k_hi - k_lo);
        memset(&fa, 0, sizeof fa);
        fa.q = qc;
        fa.k = kc;
        fa.v = vc;
        fa.conv_w = mc->cq > 0 ? mc->w : NULL;
        fa.q_hist = qh > 0 ? qhc : NULL;
        if (mc->rope) { /* the rows' and the halo'd keys' absolute positions */
            fa.rope.cos = mc->cs;
            fa.rope.sin = mc->sn;
            fa.rope.pos_q = mc->pos + qa * C;
            fa.rope.pos_k = mc->pos + k_lo;
        }
        fa.o = all_o + (qa * nch + kb) * qn;
        fa.lse = all_l + (qa * nch + kb) * ln;
        TA_CHECK(run_fwd(&p, be, &fa) == TA_OK, "pair (%zu, %zu) on backend %d", qa, kb, (int)be);
    }
    for (a = 0; a < nch; ++a) {
        const size_t nparts = mc->causal ? a + 1 : nch;
        const ta_problem p = base_problem(mc, C, C);
        ta_merge_args mg;
        memset(&mg, 0, sizeof mg);
        mg.num_parts = (int32_t)nparts;
        mg.o_parts = all_o + a * nch * qn;
        mg.lse_parts = all_l + a * nch * ln;
        mg.o = mo;
        mg.lse = ml;
        TA_CHECK(run_merge(&p, be, &mg) == TA_OK, "merge of q chunk %zu", a);
        for (h = 0; h < mc->h; ++h) {
            memcpy(o + (h * S + a * C) * D, mo + h * C * D, C * D * sizeof(float));
            memcpy(lse + h * S + a * C, ml + h * C, C * sizeof(float));
        }
    }
    free(qc);
    free(qhc);
    free(kc);
    free(vc);
    free(mo);
    free(ml);
    free(all_o);
    free(all_l);
    free(order);
}

static void draw(mcase *mc, ta_rng *r) {
    static const int32_t dims[3] = {16, 32, 48};
    const int mta = ta_rng_int(r, 0, 3) != 0;
    mc->n = (size_t)ta_rng_int(r, 2, 3);
    mc->m = (size_t)ta_rng_int(r, 1, 2);
    mc->hkv = (size_t)ta_rng_int(r, 1, 2);
    mc->h = mc->hkv * (size_t)ta_rng_int(r, 1, 2);
    mc->d = (size_t)dims[ta_rng_int(r, 0, 2)];
    mc->cq = mta ? ta_rng_int(r, 1, 6) : 0;
    mc->ck = mta ? 2 * ta_rng_int(r, 0, 5) + 1 : 0;
    mc->pk = mta ? (mc->ck - 1) / 2 : 0;
    mc->ce = BLOCK_K - 2 * mc->pk;
    mc->c = mc->m * (size_t)mc->ce;
    mc->s = 2 * mc->n * mc->c;
    mc->causal = mta || ta_rng_int(r, 0, 2) != 0;
    mc->window = ta_rng_int(r, 0, 2) == 0;
    mc->wl = ta_rng_int(r, 0, 1) ? ta_rng_int(r, 1, (int32_t)(2 * mc->c)) : -1;
    mc->wr = mc->causal ? -1 : ta_rng_int(r, 0, (int32_t)mc->c);
#ifdef TA_RING_MTA_CUDA
    mc->rope = 0; /* the device copies here carry no tables */
#else
    mc->rope = ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, TA_ROPE_INTERLEAVED, TA_ROPE_HALF) : 0;
#endif
    mc->rope_pairs = (int32_t)mc->d / (ta_rng_int(r, 0, 1) ? 2 : 4);
}

static int n_mta, n_window, n_rope;

static int check_one(uint64_t seed, int idx) {
    mcase mc;
    ta_rng r;
    size_t nq, nk, nl, nw, wb, t;
    float *o_ref, *l_ref, *o_chr, *l_chr, *o_chc, *l_chc;
    ta_problem p;
    ta_fwd_args fa;
    void *ws;
    int ok;
    ta_rng_seed(&r, seed + 7919u * (uint64_t)(idx + 1));
    draw(&mc, &r);
    n_mta += mc.cq > 0;
    n_window += mc.window;
    n_rope += mc.rope != 0;
    nq = mc.h * mc.s * mc.d;
    nk = mc.hkv * mc.s * mc.d;
    nl = mc.h * mc.s;
    nw = mc.h * (size_t)(mc.cq > 0 ? mc.cq * mc.ck : 1);
    mc.q = malloc(nq * sizeof(float));
    mc.k = malloc(nk * sizeof(float));
    mc.v = malloc(nk * sizeof(float));
    mc.w = malloc(nw * sizeof(float));
    mc.cs = malloc(mc.s * (size_t)mc.rope_pairs * sizeof(float));
    mc.sn = malloc(mc.s * (size_t)mc.rope_pairs * sizeof(float));
    mc.pos = malloc(mc.s * sizeof(int32_t));
    if (!mc.cs || !mc.sn || !mc.pos) exit(1);
    ta_fill_uniform(&r, mc.cs, TA_F32, mc.s * (size_t)mc.rope_pairs, -1.0f, 1.0f);
    ta_fill_uniform(&r, mc.sn, TA_F32, mc.s * (size_t)mc.rope_pairs, -1.0f, 1.0f);
    for (t = 0; t < mc.s; ++t) mc.pos[t] = (int32_t)t;
    o_ref = malloc(nq * sizeof(float));
    l_ref = malloc(nl * sizeof(float));
    o_chr = malloc(nq * sizeof(float));
    l_chr = malloc(nl * sizeof(float));
    o_chc = malloc(nq * sizeof(float));
    l_chc = malloc(nl * sizeof(float));
    if (!mc.q || !mc.k || !mc.v || !mc.w || !o_ref || !l_ref || !o_chr || !l_chr || !o_chc ||
        !l_chc)
        exit(1);
    ta_fill_uniform(&r, mc.q, TA_F32, nq, -2.0f, 2.0f);
    ta_fill_uniform(&r, mc.k, TA_F32, nk, -2.0f, 2.0f);
    ta_fill_uniform(&r, mc.v, TA_F32, nk, -1.0f, 1.0f);
    ta_fill_uniform(&r, mc.w, TA_F32, nw, -0.5f, 0.5f);
    ta_poison(o_ref, nq * sizeof(float));
    ta_poison(l_ref, nl * sizeof(float));
    ta_poison(o_chr, nq * sizeof(float));
    ta_poison(o_chc, nq * sizeof(float));
    /* one call over the whole sequence, num_splits = 2N: part s = chunk s */
    p = base_problem(&mc, mc.s, mc.s);
    p.num_splits = (int32_t)(2 * mc.n);
    ws = ws_for(&p, TA_BACKEND_REF, &wb);
    memset(&fa, 0, sizeof fa);
    fa.q = mc.q;
    fa.k = mc.k;
    fa.v = mc.v;
    fa.conv_w = mc.cq > 0 ? mc.w : NULL;
    if (mc.rope) { /* positions NULL: token t at row t */
        fa.rope.cos = mc.cs;
        fa.rope.sin = mc.sn;
    }
    fa.o = o_ref;
    fa.lse = l_ref;
    TA_CHECK(ta_fwd(&p, TA_BACKEND_REF, &fa, ws, wb, NULL) == TA_OK, "one call");
    ta_test_free(ws);
    chunked(&mc, TA_BACKEND_REF, &r, o_chr, l_chr);
    chunked(&mc, OTHER, &r, o_chc, l_chc);
    ok = memcmp(o_ref, o_chr, nq * sizeof(float)) == 0 &&
         memcmp(l_ref, l_chr, nl * sizeof(float)) == 0;
    TA_CHECK(ok,
             "problem %d (N=%zu C=%zu H=%zu/%zu D=%zu conv %dx%d %s window %d [%d, %d] rope %d "
             "pairs %d): REF chunks != one call with %zu splits",
             idx, mc.n, mc.c, mc.h, mc.hkv, mc.d, (int)mc.cq, (int)mc.ck,
             mc.causal ? "causal" : "full", mc.window, (int)mc.wl, (int)mc.wr, mc.rope,
             (int)mc.rope_pairs, 2 * mc.n);
    TA_CHECK(memcmp(o_chr, o_chc, nq * sizeof(float)) == 0 &&
                 memcmp(l_chr, l_chc, nl * sizeof(float)) == 0,
             "problem %d: %s chunks != REF chunks", idx, OTHER_NAME);
    free(mc.q);
    free(mc.k);
    free(mc.v);
    free(mc.w);
    free(mc.cs);
    free(mc.sn);
    free(mc.pos);
    free(o_ref);
    free(l_ref);
    free(o_chr);
    free(l_chr);
    free(o_chc);
    free(l_chc);
    return ok;
}

/* ---- q_offset, forward and backward: an equivalent problem ----
 * A problem P with q_offset = d >= 0 puts row r at key position r + S_k - S_q
 * + d. So does P' with S_k + d keys, the last d masked by seqlens_k = S_k, and
 * q_offset = 0. Every backend must give P and P' the same o, lse, dq, dconv_w
 * and the same dk, dv rows [0, S_k), bit for bit (P' reads its d extra keys
 * nowhere: they are masked, raw and convolved). Random SDPA and MTA problems,
 * causal or not (MTA: causal), sometimes a window, GQA. */

/* ta_bwd on backend be, host buffers (CUDA: device copies, outputs poisoned
 * there first). n[0..3]: q, k, v, conv_w elements; n[4]: o; n[5]: lse. */
static ta_status run_bwd(const ta_problem *p, ta_backend be, const ta_bwd_args *ba,
                         const size_t *n) {
    size_t wb;
    ta_status st;
    void *ws;
    TA_CHECK(ta_bwd_workspace_size(p, be, &wb) == TA_OK, "bwd size query");
#ifdef TA_RING_MTA_CUDA
    if (be == TA_BACKEND_CUDA) {
        ta_bwd_args da = *ba;
        void *in[7];
        float *out[4];
        const size_t no[4] = {n[0], n[1], n[2], n[3]};
        int x;
        da.q = in[0] = dev_of(ba->q, n[0] * 4);
        da.k = in[1] = dev_of(ba->k, n[1] * 4);
        da.v = in[2] = dev_of(ba->v, n[2] * 4);
        da.conv_w = (const float *)(in[3] = dev_of(ba->conv_w, n[3] * 4));
        da.o = in[4] = dev_of(ba->o, n[4] * 4);
        da.d_o = in[5] = dev_of(ba->d_o, n[4] * 4);
        da.lse = (const float *)(in[6] = dev_of(ba->lse, n[5] * 4));
        for (x = 0; x < 4; ++x) {
            CUDA_OK(cudaMalloc((void **)&out[x], (no[x] ? no[x] : 1) * 4));
            CUDA_OK(cudaMemset(out[x], 0xFF, (no[x] ? no[x] : 1) * 4));
        }
        da.dq = out[0];
        da.dk = out[1];
        da.dv = out[2];
        da.dconv_w = p->conv_q > 0 ? out[3] : NULL;
        CUDA_OK(cudaMalloc(&ws, wb ? wb : 64));
        st = ta_bwd(p, be, &da, ws, wb, NULL);
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaMemcpy(ba->dq, out[0], n[0] * 4, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(ba->dk, out[1], n[1] * 4, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(ba->dv, out[2], n[2] * 4, cudaMemcpyDeviceToHost));
        if (p->conv_q > 0)
            CUDA_OK(cudaMemcpy(ba->dconv_w, out[3], n[3] * 4, cudaMemcpyDeviceToHost));
        for (x = 0; x < 7; ++x) cudaFree(in[x]);
        for (x = 0; x < 4; ++x) cudaFree(out[x]);
        cudaFree(ws);
        return st;
    }
#endif
    (void)n;
    ws = ta_test_alloc(wb ? wb : 64);
    st = ta_bwd(p, be, ba, ws, wb, NULL);
    ta_test_free(ws);
    return st;
}

/* Rows [0, rows) of every head of x ([heads, rows_x, D]) == of y ([heads,
 * rows_y, D]), bitwise. */
static int same_rows(const float *x, size_t rows_x, const float *y, size_t rows_y, size_t heads,
                     size_t rows, size_t D) {
    size_t h;
    for (h = 0; h < heads; ++h)
        if (memcmp(x + h * rows_x * D, y + h * rows_y * D, rows * D * sizeof(float)) != 0) return 0;
    return 1;
}

static int n_off_mta, n_off_window;

static int check_offset(uint64_t seed, int idx, ta_backend be) {
    ta_rng r;
    ta_problem p, pp;
    ta_fwd_args fa;
    ta_bwd_args ba;
    int32_t d, key_len;
    size_t H, HKV, D, SQ, SK, SKP, nq, nk, nkp, nl, nw, i, h;
    float *q, *k, *v, *kp, *vp, *w, *d_o, *o[2], *lse[2], *dq[2], *dk[2], *dv[2], *dw[2];
    int ok;
    ta_rng_seed(&r, seed ^ (UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(idx + 11)));
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_kv = ta_rng_int(&r, 1, 2);
    p.heads_q = p.heads_kv * ta_rng_int(&r, 1, 2);
    p.head_dim = p.head_dim_v = 8 * ta_rng_int(&r, 1, 4);
    p.seq_q = ta_rng_int(&r, 1, 150);
    p.seq_k = ta_rng_int(&r, 1, 150);
    p.dtype = TA_F32;
    if (ta_rng_int(&r, 0, 1)) { /* MTA: causal */
        p.conv_q = ta_rng_int(&r, 1, 6);
        p.conv_k = 2 * ta_rng_int(&r, 0, 5) + 1;
        p.flags = TA_CAUSAL;
        ++n_off_mta;
    } else {
        p.flags = ta_rng_int(&r, 0, 1) ? TA_CAUSAL : 0u;
    }
    if (ta_rng_int(&r, 0, 2) == 0) {
        p.flags |= TA_WINDOW;
        p.window_left = ta_rng_int(&r, -1, 80);
        p.window_right = (p.flags & TA_CAUSAL) ? -1 : ta_rng_int(&r, -1, 80);
        ++n_off_window;
    }
    d = ta_rng_int(&r, 0, 70);
    pp = p;
    p.q_offset = d;
    pp.seq_k = p.seq_k + d;
    key_len = p.seq_k;
    H = (size_t)p.heads_q;
    HKV = (size_t)p.heads_kv;
    D = (size_t)p.head_dim;
    SQ = (size_t)p.seq_q;
    SK = (size_t)p.seq_k;
    SKP = (size_t)pp.seq_k;
    nq = H * SQ * D;
    nk = HKV * SK * D;
    nkp = HKV * SKP * D;
    nl = H * SQ;
    nw = p.conv_q > 0 ? H * (size_t)(p.conv_q * p.conv_k) : 0;
    q = malloc(nq * 4);
    d_o = malloc(nq * 4);
    k = malloc(nk * 4);
    v = malloc(nk * 4);
    kp = malloc(nkp * 4);
    vp = malloc(nkp * 4);
    w = malloc((nw ? nw : 1) * 4);
    for (i = 0; i < 2; ++i) {
        o[i] = malloc(nq * 4);
        lse[i] = malloc(nl * 4);
        dq[i] = malloc(nq * 4);
        dk[i] = malloc(nkp * 4);
        dv[i] = malloc(nkp * 4);
        dw[i] = malloc((nw ? nw : 1) * 4);
        if (!o[i] || !lse[i] || !dq[i] || !dk[i] || !dv[i] || !dw[i]) exit(1);
        ta_poison(o[i], nq * 4);
        ta_poison(lse[i], nl * 4);
        ta_poison(dq[i], nq * 4);
        ta_poison(dk[i], nkp * 4);
        ta_poison(dv[i], nkp * 4);
        ta_poison(dw[i], (nw ? nw : 1) * 4);
    }
    if (!q || !d_o || !k || !v || !kp || !vp || !w) exit(1);
    ta_fill_uniform(&r, q, TA_F32, nq, -2.0f, 2.0f);
    ta_fill_uniform(&r, d_o, TA_F32, nq, -1.0f, 1.0f);
    ta_fill_uniform(&r, kp, TA_F32, nkp, -2.0f, 2.0f); /* P' keys; P's are the first S_k */
    ta_fill_uniform(&r, vp, TA_F32, nkp, -1.0f, 1.0f);
    ta_fill_uniform(&r, w, TA_F32, nw ? nw : 1, -0.5f, 0.5f);
    for (h = 0; h < HKV; ++h) {
        memcpy(k + h * SK * D, kp + h * SKP * D, SK * D * 4);
        memcpy(v + h * SK * D, vp + h * SKP * D, SK * D * 4);
    }
    for (i = 0; i < 2; ++i) { /* i = 0: P with q_offset; 1: P' with seqlens_k */
        const ta_problem *pr = i == 0 ? &p : &pp;
        const size_t n[6] = {nq, i == 0 ? nk : nkp, i == 0 ? nk : nkp, nw, nq, nl};
        memset(&fa, 0, sizeof fa);
        fa.q = q;
        fa.k = i == 0 ? k : kp;
        fa.v = i == 0 ? v : vp;
        fa.conv_w = nw ? w : NULL;
        fa.seqlens_k = i == 0 ? NULL : &key_len;
        fa.o = o[i];
        fa.lse = lse[i];
        TA_CHECK(run_fwd(pr, be, &fa) == TA_OK, "offset problem %d: forward %d", idx, (int)i);
        memset(&ba, 0, sizeof ba);
        ba.q = q;
        ba.k = fa.k;
        ba.v = fa.v;
        ba.conv_w = fa.conv_w;
        ba.seqlens_k = fa.seqlens_k;
        ba.o = o[0]; /* the same o and lse for both */
        ba.lse = lse[0];
        ba.d_o = d_o;
        ba.dq = dq[i];
        ba.dk = dk[i];
        ba.dv = dv[i];
        ba.dconv_w = nw ? dw[i] : NULL;
        TA_CHECK(run_bwd(pr, be, &ba, n) == TA_OK, "offset problem %d: backward %d", idx, (int)i);
    }
    ok = memcmp(o[0], o[1], nq * 4) == 0 && memcmp(lse[0], lse[1], nl * 4) == 0 &&
         memcmp(dq[0], dq[1], nq * 4) == 0 && same_rows(dk[0], SK, dk[1], SKP, HKV, SK, D) &&
         same_rows(dv[0], SK, dv[1], SKP, HKV, SK, D) && (!nw || memcmp(dw[0], dw[1], nw * 4) == 0);
    TA_CHECK(ok,
             "offset problem %d on backend %d (S_q %zu S_k %zu d %d conv %dx%d flags %u window "
             "[%d, %d]): q_offset != the padded keys with seqlens_k",
             idx, (int)be, SQ, SK, (int)d, (int)p.conv_q, (int)p.conv_k, p.flags,
             (int)p.window_left, (int)p.window_right);
    free(q);
    free(d_o);
    free(k);
    free(v);
    free(kp);
    free(vp);
    free(w);
    for (i = 0; i < 2; ++i) {
        free(o[i]);
        free(lse[i]);
        free(dq[i]);
        free(dk[i]);
        free(dv[i]);
        free(dw[i]);
    }
    return ok;
}

#ifndef TA_RING_MTA_CUDA
/* One refused forward: the status, ta_explain_fwd naming field, o untouched. */
static void refused(const ta_problem *p, ta_status want, const char *field, const char *what) {
    enum { N = 2 * 64 * 16 };
    static float q[N], k[N], v[N], o[N], lse[2 * 64], w[2 * 3 * 5];
    static unsigned char ws[1 << 16];
    ta_fwd_args fa;
    size_t i;
    for (i = 0; i < N; ++i) q[i] = k[i] = v[i] = 0.25f;
    for (i = 0; i < 30; ++i) w[i] = 0.1f;
    memset(&fa, 0, sizeof fa);
    fa.q = q;
    fa.k = k;
    fa.v = v;
    fa.conv_w = p->conv_q > 0 ? w : NULL;
    fa.o = o;
    fa.lse = lse;
    ta_test_expect_fwd(p, TA_BACKEND_REF, &fa, ws, sizeof ws, want, field, what);
}

static void check_refusals(void) {
    ta_problem p;
    size_t bytes;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = p.heads_kv = 2;
    p.seq_q = p.seq_k = 64;
    p.head_dim = p.head_dim_v = 16;
    p.block_k = 32;
    p.flags = TA_CAUSAL;
    p.key_begin = 16; /* not on the 32-key tiles */
    refused(&p, TA_ERR_UNSUPPORTED, "key_begin", "key_begin off the tiles");
    p.key_begin = 32;
    p.key_end = 48;
    refused(&p, TA_ERR_UNSUPPORTED, "key_end", "key_end off the tiles");
    p.key_end = 65;
    refused(&p, TA_ERR_BAD_ARG, "key_end", "key_end past seq_k");
    p.key_end = 32;
    refused(&p, TA_ERR_BAD_ARG, "key_begin", "empty key range");
    p.key_end = 0;
    p.key_begin = -32;
    refused(&p, TA_ERR_BAD_ARG, "key_begin", "negative key_begin");
    p.key_begin = 0;
    p.q_offset = TA_SEQ_MAX; /* seq_k - seq_q + q_offset = TA_SEQ_MAX: accepted */
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_OK, "q_offset at the bound");
    p.q_offset = TA_SEQ_MAX + 1;
    refused(&p, TA_ERR_BAD_ARG, "q_offset", "q_offset past TA_SEQ_MAX");
    /* with the conv: tiles of block_k - (c_k - 1) = 28 keys */
    p.q_offset = 0;
    p.conv_q = 3;
    p.conv_k = 5;
    p.key_begin = 32;
    refused(&p, TA_ERR_UNSUPPORTED, "key_begin",
            "key_begin on block_k, not on the conv's tiles");
    p.key_begin = 28;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_OK,
             "key_begin on the conv's tiles: refused");
    /* the backward, latent attention */
    TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_ERR_UNSUPPORTED,
             "ta_bwd with a key range: not TA_ERR_UNSUPPORTED");
    p.key_begin = 0;
    p.q_offset = 5;
    TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_OK,
             "ta_bwd with q_offset (no key range): refused");
    p.conv_q = p.conv_k = 0;
    p.heads_kv = 1;
    p.latent_dim = 8;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_ERR_UNSUPPORTED,
             "latent attention with q_offset: not TA_ERR_UNSUPPORTED");
}
#endif

int main(void) {
    const uint64_t seed = ta_test_seed(TEST_NAME);
    int i, ok = 0;
#ifdef TA_RING_MTA_CUDA
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
        printf("%s: no CUDA device: skipped\n", TEST_NAME);
        return 77;
    }
#else
    check_refusals();
#endif
    for (i = 0; i < 16; ++i)
        ok += check_one(seed, i);
    printf("%s: %d of 16 problems (%d MTA, %d with a window, %d with the rotary stage): chunk "
           "pairs over key ranges (conv halos, q_history, q_offset) + ta_merge == one ta_fwd with "
           "num_splits = 2N on REF, %s == REF, bit for bit%s\n",
           TEST_NAME, ok, n_mta, n_window, n_rope, OTHER_NAME,
           OTHER == TA_BACKEND_CPU ? "; refusals checked" : "");
    ok = 0;
    for (i = 0; i < 24; ++i) {
        ok += check_offset(seed, i, TA_BACKEND_REF);
        ok += check_offset(seed, i, OTHER);
    }
    printf("%s: q_offset, forward and backward: %d of 48 (24 problems x REF, %s; %d MTA, %d "
           "with a window) equal to the padded keys under seqlens_k, bit for bit\n",
           TEST_NAME, ok, OTHER_NAME, n_off_mta / 2, n_off_window / 2);
    return ta_test_finish(TEST_NAME);
}
