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
 *   - the refusals: a range off the tile boundaries, bounds, the backward's
 *     own tiles, latent attention; nothing written.
 * Then q_offset in both passes (check_offset), and the backward over ring
 * pairs with row and key ranges (check_bwd_ring: its comment says what is
 * bit for bit and what is not).
 * Built again as test_cuda_ring_mta (TA_RING_MTA_CUDA, label cuda): the same
 * forward pair calls and merges, the q_offset problems and the backward's
 * ring pairs (ranges, accumulating, MTA and SDPA, dconv_w's pair included) on
 * CUDA (device copies of every buffer) against REF's, bit for bit, and the
 * range checks CUDA shares with REF; exits 77 (skipped) without a device.
 * Fresh seed, printed (TA_SEED replays); outputs poisoned.
 *
 *   test_ring_mta [--count N]      N backward ring problems (default 12)
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

/* ---- The backward over ring pairs: row and key ranges (docs/mta.md 2b) ----
 * A random problem of S = nch C rows and keys (S_q = S_k; MTA causal, SDPA
 * causal or not, windows, GQA, B = 1 or 2), its o and lse from one ta_fwd, a
 * random dO. Each visible pair (q chunk a, k chunk b) is one accumulating
 * ta_bwd on views into the whole tensors that carry the halos a device of a
 * ring holds:
 *
 *   rows  [q0 - Ht, q1 + Hb)   Ht: a whole backward Q tile above (MTA: the
 *                              conv's c_q - 1 rows, on a tile boundary; 0 for
 *                              chunk 0), Hb = c_q - 1 rows below (fewer at
 *                              the end) with their dO, o, lse
 *   keys  [k0 - E, k1 + R)     E: a whole backward K tile left (2 P_k keys
 *                              needed), R = 2 P_k keys right
 *   row_begin = Ht, row_end = Ht + C; key_begin = E, key_end = E + C;
 *   q_offset places row r at the position of q0 - Ht + r
 *
 * (SDPA needs no halos; its pairs take random ones anyway, to exercise the
 * ranges.) The pairs run q chunks ascending, each one's k chunks ascending
 * (the documented order: each range's partners ascending), into f32 (hi, lo)
 * pairs of dq, dk, dv and (dconv_w, dconv_w_lo); ta_bwd_finish of the whole
 * problem rounds dq, dk, dv once. Expected:
 *   - OTHER == REF, every word of every pair, bit for bit (both run the same
 *     calls in the same order; the CPU build also through caller-run tasks;
 *     the CUDA build on device copies of every buffer, the general SDPA
 *     kernels and the MTA ones, which cut their own tiles to the ranges);
 *   - with the backward's tiles 64 rows x 64 keys (block_q = 64 + 2 P_q,
 *     block_k = 64 + 4 P_k, C a multiple of 64: "aligned"), dq == one
 *     ta_bwd over the whole sequence bit for bit, and dk, dv too when H =
 *     H_kv (every 64-index chunk partial is the same, added in the same
 *     order; docs/api.md, "Backward over key and query ranges");
 *   - otherwise (other tiles, GQA for dk, dv), and dconv_w always, within
 *     TOL_REL of the largest entry of one ta_bwd: dconv_w's Q tile sums
 *     R(b, qt) are cut at the k chunks, each part rounded once more, and
 *     added in pair order; measured and printed;
 *   - a plain (non-accumulating) pair call writes dq only in its row range,
 *     dk, dv only in its key range (the rest stays poisoned), and the same
 *     words on OTHER as on REF;
 *   - one accumulating call over everything + ta_bwd_finish == ta_bwd,
 *     dconv_w included, bit for bit. */
#define TOL_REL 1e-5

typedef struct bcase {
    int32_t B, H, HKV, D, S, C, nch;
    int32_t cq, ck, pq, pk, re, ce, bq, bk; /* conv, halves, bwd tile widths, blocks */
    int causal, window, aligned;
    int32_t wl, wr;
    int32_t ht[8], hb[8], e[8], rr[8]; /* each chunk's halos: rows above, below; keys left, right */
    float *q, *k, *v, *w, *d_o, *o, *lse;
} bcase;

static ta_problem bcase_problem(const bcase *bc, int32_t sq, int32_t sk) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = bc->B;
    p.heads_q = bc->H;
    p.heads_kv = bc->HKV;
    p.seq_q = sq;
    p.seq_k = sk;
    p.head_dim = p.head_dim_v = bc->D;
    p.dtype = TA_F32;
    p.block_q = bc->bq;
    p.block_k = bc->bk;
    p.conv_q = bc->cq;
    p.conv_k = bc->ck;
    p.flags = (bc->causal ? TA_CAUSAL : 0u) | (bc->window ? TA_WINDOW : 0u);
    p.window_left = bc->window ? bc->wl : 0;
    p.window_right = bc->window ? bc->wr : 0;
    return p;
}

static void bcase_draw(bcase *bc, ta_rng *r) {
    const int mta = ta_rng_int(r, 0, 3) != 0;
    int32_t i;
    bc->B = ta_rng_int(r, 1, 2);
    bc->HKV = ta_rng_int(r, 1, 2);
    bc->H = bc->HKV * ta_rng_int(r, 1, 2);
    bc->D = 16 * ta_rng_int(r, 1, 2);
    bc->cq = mta ? ta_rng_int(r, 1, 6) : 0;
    bc->ck = mta ? 2 * ta_rng_int(r, 0, 5) + 1 : 0;
    bc->pq = mta ? bc->cq - 1 : 0;
    bc->pk = mta ? (bc->ck - 1) / 2 : 0;
    bc->aligned = ta_rng_int(r, 0, 1);
    bc->re = bc->ce = bc->aligned ? 64 : ta_rng_int(r, 10, 40); /* >= P_q, >= 2 P_k */
    bc->bq = bc->re + 2 * bc->pq;
    bc->bk = bc->ce + 4 * bc->pk;
    bc->C = bc->re * ta_rng_int(r, 1, bc->aligned ? 2 : 3);
    bc->nch = ta_rng_int(r, 2, 4);
    bc->S = bc->nch * bc->C;
    bc->causal = mta || ta_rng_int(r, 0, 2) != 0;
    bc->window = ta_rng_int(r, 0, 2) == 0;
    bc->wl = ta_rng_int(r, 0, 1) ? ta_rng_int(r, 1, 2 * bc->C) : -1;
    bc->wr = bc->causal ? -1 : ta_rng_int(r, 0, bc->C);
    for (i = 0; i < bc->nch; ++i) {
        const int32_t c0 = i * bc->C, c1 = c0 + bc->C;
        if (mta) { /* what the conv reads: a whole tile above / left, P_q below, 2 P_k right */
            bc->ht[i] = c0 > 0 && bc->pq > 0 ? bc->re : 0;
            bc->e[i] = c0 > 0 && bc->pk > 0 ? bc->ce : 0;
            bc->hb[i] = bc->pq < bc->S - c1 ? bc->pq : bc->S - c1;
            bc->rr[i] = 2 * bc->pk < bc->S - c1 ? 2 * bc->pk : bc->S - c1;
        } else { /* SDPA reads none: random halos */
            bc->ht[i] = c0 > 0 && ta_rng_int(r, 0, 1) ? bc->re : 0;
            bc->e[i] = c0 > 0 && ta_rng_int(r, 0, 1) ? bc->ce : 0;
            bc->hb[i] = ta_rng_int(r, 0, 3);
            bc->rr[i] = ta_rng_int(r, 0, 3);
            if (bc->hb[i] > bc->S - c1) bc->hb[i] = bc->S - c1;
            if (bc->rr[i] > bc->S - c1) bc->rr[i] = bc->S - c1;
        }
    }
}

/* Pair (a, b): its problem (ranges, q_offset) and the first row and key of
 * its views; 0 if the causal mask hides it (keys after every row). */
static int bpair(const bcase *bc, int32_t a, int32_t b, ta_problem *p, int32_t *q_lo,
                 int32_t *k_lo) {
    const int32_t q0 = a * bc->C, q1 = q0 + bc->C, k0 = b * bc->C, k1 = k0 + bc->C;
    const int32_t sq = bc->ht[a] + bc->C + bc->hb[a], sk = bc->e[b] + bc->C + bc->rr[b];
    if (bc->causal && k0 >= q1) return 0;
    *q_lo = q0 - bc->ht[a];
    *k_lo = k0 - bc->e[b];
    (void)k1;
    *p = bcase_problem(bc, sq, sk);
    p->row_begin = bc->ht[a];
    p->row_end = bc->ht[a] + bc->C;
    p->key_begin = bc->e[b];
    p->key_end = bc->e[b] + bc->C;
    p->q_offset = *q_lo - *k_lo - sk + sq; /* row r at key position q_lo + r - k_lo */
    return 1;
}

/* The buffers of a ring backward: (hi, lo) pairs of dq [B, H, S, D], dk, dv
 * [B, H_kv, S, D] and dconv_w [H, c_q, c_k]. */
typedef struct bsums {
    float *dq, *dq_lo, *dk, *dk_lo, *dv, *dv_lo, *dw, *dw_lo;
} bsums;

static void bsums_alloc(const bcase *bc, bsums *s) {
    const size_t nq = (size_t)bc->B * (size_t)bc->H * (size_t)bc->S * (size_t)bc->D;
    const size_t nk = (size_t)bc->B * (size_t)bc->HKV * (size_t)bc->S * (size_t)bc->D;
    const size_t nw = (size_t)bc->H * (bc->cq > 0 ? (size_t)bc->cq * (size_t)bc->ck : 1);
    s->dq = calloc(nq, 4);
    s->dq_lo = calloc(nq, 4);
    s->dk = calloc(nk, 4);
    s->dk_lo = calloc(nk, 4);
    s->dv = calloc(nk, 4);
    s->dv_lo = calloc(nk, 4);
    s->dw = calloc(nw, 4);
    s->dw_lo = calloc(nw, 4);
    if (!s->dq || !s->dq_lo || !s->dk || !s->dk_lo || !s->dv || !s->dv_lo || !s->dw || !s->dw_lo)
        exit(1);
}

static void bsums_free(bsums *s) {
    free(s->dq);
    free(s->dq_lo);
    free(s->dk);
    free(s->dk_lo);
    free(s->dv);
    free(s->dv_lo);
    free(s->dw);
    free(s->dw_lo);
}

/* The backward args of pair views from rows q_lo, keys k_lo (lse: the pair's
 * rows, contiguous, in lse_buf), into sums s (NULL: the caller sets dq, dk,
 * dv, dconv_w). */
static ta_bwd_args bpair_args(const bcase *bc, const ta_problem *p, int32_t q_lo, int32_t k_lo,
                              float *lse_buf, const bsums *s) {
    const ta_strides sq = ta_test_strides_bhsd(bc->H, bc->S, bc->D);
    const ta_strides sk = ta_test_strides_bhsd(bc->HKV, bc->S, bc->D);
    const size_t oq = (size_t)q_lo * (size_t)bc->D, ok = (size_t)k_lo * (size_t)bc->D;
    ta_bwd_args a;
    int32_t b, h;
    memset(&a, 0, sizeof a);
    a.q = bc->q + oq;
    a.o = bc->o + oq;
    a.d_o = bc->d_o + oq;
    a.k = bc->k + ok;
    a.v = bc->v + ok;
    a.q_strides = a.o_strides = a.d_o_strides = a.dq_strides = sq;
    a.k_strides = a.v_strides = a.dk_strides = a.dv_strides = sk;
    a.conv_w = bc->cq > 0 ? bc->w : NULL;
    for (b = 0; b < bc->B; ++b)
        for (h = 0; h < bc->H; ++h)
            memcpy(lse_buf + ((size_t)b * (size_t)bc->H + (size_t)h) * (size_t)p->seq_q,
                   bc->lse + ((size_t)b * (size_t)bc->H + (size_t)h) * (size_t)bc->S + (size_t)q_lo, (size_t)p->seq_q * 4);
    a.lse = lse_buf;
    if (!s) return a;
    a.accumulate = TA_BWD_ACCUMULATE;
    a.dq = s->dq + oq;
    a.dq_lo = s->dq_lo + oq;
    a.dk = s->dk + ok;
    a.dk_lo = s->dk_lo + ok;
    a.dv = s->dv + ok;
    a.dv_lo = s->dv_lo + ok;
    a.dconv_w = bc->cq > 0 ? s->dw : NULL;
    a.dconv_w_lo = bc->cq > 0 ? s->dw_lo : NULL;
    return a;
}

#ifdef TA_RING_MTA_CUDA
/* The device mirror of a problem's host buffers: each registered host buffer
 * has a device twin of its size; a call's host pointers (views into them) map
 * to the same offsets of the twins. Before a call every twin gets its host
 * buffer's bytes, after it the outputs' twins go back. */
typedef struct dreg {
    const void *h;
    void *d;
    size_t bytes;
    int out;
} dreg;
static dreg g_regs[32];
static int g_nregs;

static void dreg_add(const void *h, size_t bytes, int out) {
    TA_CHECK(g_nregs < 32, "too many device twins");
    if (g_nregs >= 32) exit(1);
    g_regs[g_nregs].h = h;
    g_regs[g_nregs].bytes = bytes;
    g_regs[g_nregs].out = out;
    CUDA_OK(cudaMalloc(&g_regs[g_nregs].d, bytes ? bytes : 4));
    ++g_nregs;
}

/* The last n twins (of buffers about to be freed), or all. */
static void dreg_pop(int n) {
    while (n-- > 0 && g_nregs > 0) cudaFree(g_regs[--g_nregs].d);
}
static void dreg_free_all(void) { dreg_pop(g_nregs); }

/* The twins of sums s (outputs). */
static void dreg_sums(const bcase *bc, const bsums *s) {
    const size_t nq = (size_t)bc->B * (size_t)bc->H * (size_t)bc->S * (size_t)bc->D * 4;
    const size_t nk = (size_t)bc->B * (size_t)bc->HKV * (size_t)bc->S * (size_t)bc->D * 4;
    const size_t nw = (size_t)bc->H * (bc->cq > 0 ? (size_t)bc->cq * (size_t)bc->ck : 1) * 4;
    dreg_add(s->dq, nq, 1);
    dreg_add(s->dq_lo, nq, 1);
    dreg_add(s->dk, nk, 1);
    dreg_add(s->dk_lo, nk, 1);
    dreg_add(s->dv, nk, 1);
    dreg_add(s->dv_lo, nk, 1);
    dreg_add(s->dw, nw, 1);
    dreg_add(s->dw_lo, nw, 1);
}

/* The twin of host pointer x (NULL stays NULL); exits if x is in no buffer. */
static void *dmap(const void *x) {
    const unsigned char *c = (const unsigned char *)x;
    int i;
    if (!x) return NULL;
    for (i = 0; i < g_nregs; ++i) {
        const unsigned char *b = (const unsigned char *)g_regs[i].h;
        if (c >= b && c < b + g_regs[i].bytes) return (unsigned char *)g_regs[i].d + (c - b);
    }
    fprintf(stderr, "test_cuda_ring_mta: a pointer in no registered buffer\n");
    exit(1);
}

/* ta_bwd of p on CUDA with a's host pointers mapped to their twins. */
static ta_status cuda_bcall(const ta_problem *p, const ta_bwd_args *a) {
    ta_bwd_args d = *a;
    size_t wb;
    void *ws;
    ta_status st;
    int i;
    st = ta_bwd_workspace_size(p, TA_BACKEND_CUDA, &wb);
    if (st != TA_OK) return st;
    for (i = 0; i < g_nregs; ++i)
        CUDA_OK(cudaMemcpy(g_regs[i].d, g_regs[i].h, g_regs[i].bytes, cudaMemcpyHostToDevice));
    d.q = dmap(a->q);
    d.k = dmap(a->k);
    d.v = dmap(a->v);
    d.o = dmap(a->o);
    d.d_o = dmap(a->d_o);
    d.lse = (const float *)dmap(a->lse);
    d.conv_w = (const float *)dmap(a->conv_w);
    d.dq = dmap(a->dq);
    d.dk = dmap(a->dk);
    d.dv = dmap(a->dv);
    d.dconv_w = (float *)dmap(a->dconv_w);
    d.dq_lo = (float *)dmap(a->dq_lo);
    d.dk_lo = (float *)dmap(a->dk_lo);
    d.dv_lo = (float *)dmap(a->dv_lo);
    d.dconv_w_lo = (float *)dmap(a->dconv_w_lo);
    CUDA_OK(cudaMalloc(&ws, wb ? wb : 64));
    st = ta_bwd(p, TA_BACKEND_CUDA, &d, ws, wb, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaFree(ws));
    for (i = 0; i < g_nregs; ++i)
        if (g_regs[i].out)
            CUDA_OK(
                cudaMemcpy((void *)(uintptr_t)g_regs[i].h, g_regs[i].d, g_regs[i].bytes,
                           cudaMemcpyDeviceToHost));
    return st;
}
#endif

/* ta_bwd of p on be (tasks: the CPU's caller-run tasks), host memory (CUDA:
 * through the device twins). */
static ta_status bcall(const ta_problem *p, ta_backend be, int tasks, const ta_bwd_args *a) {
    size_t wb;
    void *ws;
    ta_status st;
#ifdef TA_RING_MTA_CUDA
    if (be == TA_BACKEND_CUDA) return cuda_bcall(p, a);
#endif
    if (tasks) return ta_test_bwd_tasks(p, a);
    st = ta_bwd_workspace_size(p, be, &wb);
    if (st != TA_OK) return st;
    ws = ta_test_alloc(wb ? wb : 64);
    st = ta_bwd(p, be, a, ws, wb, NULL);
    ta_test_free(ws);
    return st;
}

/* Every visible pair, q chunks ascending, each one's k chunks ascending, on be
 * into s (zeroed first); lse_buf: B H S floats (CUDA: a registered twin). */
static void bring(const bcase *bc, ta_backend be, int tasks, bsums *s, float *lse_buf) {
    int32_t a, b, q_lo, k_lo;
    for (a = 0; a < bc->nch; ++a)
        for (b = 0; b < bc->nch; ++b) {
            ta_problem p;
            ta_bwd_args ba;
            if (!bpair(bc, a, b, &p, &q_lo, &k_lo)) continue;
            ba = bpair_args(bc, &p, q_lo, k_lo, lse_buf, s);
            TA_CHECK(bcall(&p, be, tasks, &ba) == TA_OK, "ring pair (%d, %d) on backend %d%s",
                     (int)a, (int)b, (int)be, tasks ? " (tasks)" : "");
        }
}

/* max |x - y| / max |y| over n floats (0 when y is all zero and x == y). */
static double rel_diff(const float *x, const float *y, size_t n) {
    double m = 0.0, d = 0.0;
    size_t i;
    for (i = 0; i < n; ++i) {
        const double e = (double)x[i] - (double)y[i], ay = y[i] < 0 ? -(double)y[i] : (double)y[i];
        if (ay > m) m = ay;
        if ((e < 0 ? -e : e) > d) d = e < 0 ? -e : e;
    }
    return m > 0.0 ? d / m : d;
}

/* 1 if each of the n floats is poison (0xFF bytes), 0 if none, -1 if mixed. */
static int poisoned(const float *x, size_t n) {
    size_t i, c = 0;
    const unsigned char *b = (const unsigned char *)x;
    for (i = 0; i < n; ++i)
        c += b[4 * i] == 0xFF && b[4 * i + 1] == 0xFF && b[4 * i + 2] == 0xFF &&
             b[4 * i + 3] == 0xFF;
    return c == n ? 1 : c == 0 ? 0 : -1;
}

static int n_b_mta, n_b_aligned, n_b_gqa, n_b_window, n_b_exact;
static double worst_dw, worst_grad;

static int check_bwd_ring(uint64_t seed, int idx) {
    bcase bc;
    ta_rng r;
    ta_problem p;
    ta_fwd_args fa;
    ta_bwd_args ba;
    ta_bwd_finish_args fin;
    bsums sr, so, one;
#ifndef TA_RING_MTA_CUDA
    bsums st;
#endif
    size_t nq, nk, nl, nw, wb, i;
    float *dq1, *dk1, *dv1, *dw1, *dq2, *dk2, *dv2, *dqp, *dkp, *dvp, *dwp, *lse_buf;
    void *ws;
    int ok = 1, exact_dq, exact_kv;
    double e_dq, e_dk, e_dv, e_dw;
    const int failures0 = ta_test_failures;
    ta_rng_seed(&r, seed ^ (UINT64_C(0xd1b54a32d192ed03) * (uint64_t)(idx + 3)));
    bcase_draw(&bc, &r);
    nq = (size_t)bc.B * (size_t)bc.H * (size_t)bc.S * (size_t)bc.D;
    nk = (size_t)bc.B * (size_t)bc.HKV * (size_t)bc.S * (size_t)bc.D;
    nl = (size_t)bc.B * (size_t)bc.H * (size_t)bc.S;
    nw = (size_t)bc.H * (bc.cq > 0 ? (size_t)bc.cq * (size_t)bc.ck : 1);
    bc.q = malloc(nq * 4);
    bc.d_o = malloc(nq * 4);
    bc.o = malloc(nq * 4);
    bc.lse = malloc(nl * 4);
    bc.k = malloc(nk * 4);
    bc.v = malloc(nk * 4);
    bc.w = malloc(nw * 4);
    dq1 = malloc(nq * 4);
    dk1 = malloc(nk * 4);
    dv1 = malloc(nk * 4);
    dw1 = malloc(nw * 4);
    dq2 = malloc(nq * 4);
    dk2 = malloc(nk * 4);
    dv2 = malloc(nk * 4);
    dqp = malloc(nq * 4);
    dkp = malloc(nk * 4);
    dvp = malloc(nk * 4);
    dwp = malloc(nw * 4);
    lse_buf = malloc(nl * 4);
    if (!bc.q || !bc.d_o || !bc.o || !bc.lse || !bc.k || !bc.v || !bc.w || !dq1 || !dk1 || !dv1 ||
        !dw1 || !dq2 || !dk2 || !dv2 || !dqp || !dkp || !dvp || !dwp || !lse_buf)
        exit(1);
    ta_fill_uniform(&r, bc.q, TA_F32, nq, -2.0f, 2.0f);
    ta_fill_uniform(&r, bc.k, TA_F32, nk, -2.0f, 2.0f);
    ta_fill_uniform(&r, bc.v, TA_F32, nk, -1.0f, 1.0f);
    ta_fill_uniform(&r, bc.d_o, TA_F32, nq, -1.0f, 1.0f);
    ta_fill_uniform(&r, bc.w, TA_F32, nw, -0.5f, 0.5f);
#ifdef TA_RING_MTA_CUDA
    dreg_add(bc.q, nq * 4, 0);
    dreg_add(bc.d_o, nq * 4, 0);
    dreg_add(bc.o, nq * 4, 0);
    dreg_add(bc.lse, nl * 4, 0);
    dreg_add(bc.k, nk * 4, 0);
    dreg_add(bc.v, nk * 4, 0);
    dreg_add(bc.w, nw * 4, 0);
    dreg_add(lse_buf, nl * 4, 0);
    dreg_add(dqp, nq * 4, 1);
    dreg_add(dkp, nk * 4, 1);
    dreg_add(dvp, nk * 4, 1);
    dreg_add(dwp, nw * 4, 1);
#endif
    n_b_mta += bc.cq > 0;
    n_b_aligned += bc.aligned;
    n_b_gqa += bc.H != bc.HKV;
    n_b_window += bc.window;
    /* the whole sequence: one forward (o, lse), one backward */
    p = bcase_problem(&bc, bc.S, bc.S);
    memset(&fa, 0, sizeof fa);
    fa.q = bc.q;
    fa.k = bc.k;
    fa.v = bc.v;
    fa.conv_w = bc.cq > 0 ? bc.w : NULL;
    fa.o = bc.o;
    fa.lse = bc.lse;
    ta_poison(bc.o, nq * 4);
    ta_poison(bc.lse, nl * 4);
    ws = ws_for(&p, TA_BACKEND_REF, &wb);
    TA_CHECK(ta_fwd(&p, TA_BACKEND_REF, &fa, ws, wb, NULL) == TA_OK, "bwd ring %d: forward", idx);
    ta_test_free(ws);
    memset(&ba, 0, sizeof ba);
    ba.q = bc.q;
    ba.k = bc.k;
    ba.v = bc.v;
    ba.o = bc.o;
    ba.d_o = bc.d_o;
    ba.lse = bc.lse;
    ba.conv_w = fa.conv_w;
    ba.dq = dq1;
    ba.dk = dk1;
    ba.dv = dv1;
    ba.dconv_w = bc.cq > 0 ? dw1 : NULL;
    ta_poison(dq1, nq * 4);
    ta_poison(dk1, nk * 4);
    ta_poison(dv1, nk * 4);
    ta_poison(dw1, nw * 4);
    TA_CHECK(bcall(&p, TA_BACKEND_REF, 0, &ba) == TA_OK, "bwd ring %d: one ta_bwd", idx);
    /* one accumulating call over everything, finished == ta_bwd (both backends) */
    for (i = 0; i < 2; ++i) {
        const ta_backend be = i == 0 ? TA_BACKEND_REF : OTHER;
        bsums_alloc(&bc, &one);
#ifdef TA_RING_MTA_CUDA
        if (be == TA_BACKEND_CUDA) dreg_sums(&bc, &one);
#endif
        ba.accumulate = TA_BWD_ACCUMULATE;
        ba.dq = one.dq, ba.dq_lo = one.dq_lo, ba.dk = one.dk, ba.dk_lo = one.dk_lo;
        ba.dv = one.dv, ba.dv_lo = one.dv_lo;
        ba.dconv_w = bc.cq > 0 ? one.dw : NULL;
        ba.dconv_w_lo = bc.cq > 0 ? one.dw_lo : NULL;
        TA_CHECK(bcall(&p, be, 0, &ba) == TA_OK, "bwd ring %d: one accumulating call", idx);
        memset(&fin, 0, sizeof fin);
        fin.dq_hi = one.dq, fin.dk_hi = one.dk, fin.dv_hi = one.dv;
        fin.dq = dq2, fin.dk = dk2, fin.dv = dv2;
        ta_poison(dq2, nq * 4);
        ta_poison(dk2, nk * 4);
        ta_poison(dv2, nk * 4);
        TA_CHECK(ta_bwd_finish(&p, TA_BACKEND_REF, &fin, NULL) == TA_OK, "finish");
        TA_CHECK(memcmp(dq1, dq2, nq * 4) == 0 && memcmp(dk1, dk2, nk * 4) == 0 &&
                     memcmp(dv1, dv2, nk * 4) == 0 &&
                     (bc.cq == 0 || memcmp(dw1, one.dw, nw * 4) == 0),
                 "bwd ring %d on backend %d: one accumulating call + finish != ta_bwd", idx,
                 (int)be);
#ifdef TA_RING_MTA_CUDA
        if (be == TA_BACKEND_CUDA) dreg_pop(8);
#endif
        bsums_free(&one);
    }
    /* the ring: REF, OTHER (and the CPU's caller-run tasks) */
    bsums_alloc(&bc, &sr);
    bsums_alloc(&bc, &so);
#ifdef TA_RING_MTA_CUDA
    dreg_sums(&bc, &so);
#endif
    bring(&bc, TA_BACKEND_REF, 0, &sr, lse_buf);
    bring(&bc, OTHER, 0, &so, lse_buf);
    ok = memcmp(sr.dq, so.dq, nq * 4) == 0 && memcmp(sr.dq_lo, so.dq_lo, nq * 4) == 0 &&
         memcmp(sr.dk, so.dk, nk * 4) == 0 && memcmp(sr.dk_lo, so.dk_lo, nk * 4) == 0 &&
         memcmp(sr.dv, so.dv, nk * 4) == 0 && memcmp(sr.dv_lo, so.dv_lo, nk * 4) == 0 &&
         memcmp(sr.dw, so.dw, nw * 4) == 0 && memcmp(sr.dw_lo, so.dw_lo, nw * 4) == 0;
    TA_CHECK(ok, "bwd ring %d: %s pairs != REF pairs (a word of dq, dk, dv or dconv_w)", idx,
             OTHER_NAME);
#ifndef TA_RING_MTA_CUDA
    bsums_alloc(&bc, &st); /* the CPU's caller-run tasks */
    bring(&bc, TA_BACKEND_CPU, 1, &st, lse_buf);
    TA_CHECK(memcmp(sr.dq, st.dq, nq * 4) == 0 && memcmp(sr.dk, st.dk, nk * 4) == 0 &&
                 memcmp(sr.dv, st.dv, nk * 4) == 0 && memcmp(sr.dw, st.dw, nw * 4) == 0 &&
                 memcmp(sr.dw_lo, st.dw_lo, nw * 4) == 0 &&
                 memcmp(sr.dq_lo, st.dq_lo, nq * 4) == 0 &&
                 memcmp(sr.dk_lo, st.dk_lo, nk * 4) == 0 &&
                 memcmp(sr.dv_lo, st.dv_lo, nk * 4) == 0,
             "bwd ring %d: CPU caller-run tasks != REF pairs", idx);
    bsums_free(&st);
#endif
    /* against one ta_bwd */
    memset(&fin, 0, sizeof fin);
    fin.dq_hi = sr.dq, fin.dk_hi = sr.dk, fin.dv_hi = sr.dv;
    fin.dq = dq2, fin.dk = dk2, fin.dv = dv2;
    ta_poison(dq2, nq * 4);
    ta_poison(dk2, nk * 4);
    ta_poison(dv2, nk * 4);
    TA_CHECK(ta_bwd_finish(&p, TA_BACKEND_REF, &fin, NULL) == TA_OK, "finish of the ring");
    exact_dq = bc.aligned;
    exact_kv = bc.aligned && bc.H == bc.HKV;
    n_b_exact += exact_dq + exact_kv;
    e_dq = rel_diff(dq2, dq1, nq);
    e_dk = rel_diff(dk2, dk1, nk);
    e_dv = rel_diff(dv2, dv1, nk);
    e_dw = bc.cq > 0 ? rel_diff(sr.dw, dw1, nw) : 0.0;
    if (e_dw > worst_dw) worst_dw = e_dw;
    if (!exact_dq && e_dq > worst_grad) worst_grad = e_dq;
    if (!exact_kv && e_dk > worst_grad) worst_grad = e_dk;
    if (!exact_kv && e_dv > worst_grad) worst_grad = e_dv;
    TA_CHECK(!exact_dq || memcmp(dq2, dq1, nq * 4) == 0,
             "bwd ring %d (aligned): dq != one ta_bwd bit for bit (rel %.3g)", idx, e_dq);
    TA_CHECK(!exact_kv || (memcmp(dk2, dk1, nk * 4) == 0 && memcmp(dv2, dv1, nk * 4) == 0),
             "bwd ring %d (aligned, H = H_kv): dk, dv != one ta_bwd bit for bit (rel %.3g, %.3g)",
             idx, e_dk, e_dv);
    TA_CHECK(e_dq <= TOL_REL && e_dk <= TOL_REL && e_dv <= TOL_REL && e_dw <= TOL_REL,
             "bwd ring %d: against one ta_bwd: dq %.3g dk %.3g dv %.3g dconv_w %.3g of the "
             "largest (tolerance %g)",
             idx, e_dq, e_dk, e_dv, e_dw, TOL_REL);
    /* a plain pair call (the last q chunk, k chunk 1 or 0): only its ranges written */
    {
        const int32_t a = bc.nch - 1, b = bc.causal ? 0 : 1;
        int32_t q_lo, k_lo, bb, h, j;
        ta_problem pp;
        ta_bwd_args pa;
        TA_CHECK(bpair(&bc, a, b, &pp, &q_lo, &k_lo), "pair (%d, %d) hidden", (int)a, (int)b);
        for (i = 0; i < 2; ++i) {
            const ta_backend be = i == 0 ? TA_BACKEND_REF : OTHER;
            pa = bpair_args(&bc, &pp, q_lo, k_lo, lse_buf, NULL);
            ta_poison(dqp, nq * 4);
            ta_poison(dkp, nk * 4);
            ta_poison(dvp, nk * 4);
            ta_poison(dwp, nw * 4);
            pa.dq = dqp + (size_t)q_lo * (size_t)bc.D;
            pa.dk = dkp + (size_t)k_lo * (size_t)bc.D;
            pa.dv = dvp + (size_t)k_lo * (size_t)bc.D;
            pa.dconv_w = bc.cq > 0 ? dwp : NULL;
            TA_CHECK(bcall(&pp, be, 0, &pa) == TA_OK, "plain pair call on backend %d", (int)be);
            for (bb = 0; bb < bc.B; ++bb)
                for (h = 0; h < bc.H; ++h)
                    for (j = 0; j < bc.S; ++j) {
                        const int in = j >= a * bc.C && j < (a + 1) * bc.C;
                        const float *row = dqp + (((size_t)bb * (size_t)bc.H + (size_t)h) * (size_t)bc.S + (size_t)j) * (size_t)bc.D;
                        TA_CHECK(poisoned(row, (size_t)bc.D) == !in,
                                 "plain pair (%d, %d) on backend %d: dq row %d %s", (int)a,
                                 (int)b, (int)be, (int)j, in ? "not written" : "written");
                    }
            for (bb = 0; bb < bc.B; ++bb)
                for (h = 0; h < bc.HKV; ++h)
                    for (j = 0; j < bc.S; ++j) {
                        const int in = j >= b * bc.C && j < (b + 1) * bc.C;
                        const size_t at = (((size_t)bb * (size_t)bc.HKV + (size_t)h) * (size_t)bc.S + (size_t)j) * (size_t)bc.D;
                        TA_CHECK(poisoned(dkp + at, (size_t)bc.D) == !in &&
                                     poisoned(dvp + at, (size_t)bc.D) == !in,
                                 "plain pair (%d, %d) on backend %d: dk/dv key %d %s", (int)a,
                                 (int)b, (int)be, (int)j, in ? "not written" : "written");
                    }
            TA_CHECK(bc.cq == 0 || poisoned(dwp, nw) == 0, "plain pair: dconv_w not written");
            if (i == 0) { /* REF's, kept in dq2 / dk2 / dv2 / dw1 for OTHER's */
                memcpy(dq2, dqp, nq * 4);
                memcpy(dk2, dkp, nk * 4);
                memcpy(dv2, dvp, nk * 4);
                memcpy(dw1, dwp, nw * 4);
            } else {
                TA_CHECK(memcmp(dq2, dqp, nq * 4) == 0 && memcmp(dk2, dkp, nk * 4) == 0 &&
                             memcmp(dv2, dvp, nk * 4) == 0 &&
                             (bc.cq == 0 || memcmp(dw1, dwp, nw * 4) == 0),
                         "plain pair: %s != REF", OTHER_NAME);
            }
        }
    }
    TA_CHECK(ta_test_failures == failures0,
             "bwd ring %d: B %d H %d/%d D %d conv %dx%d S %d C %d (%d chunks) tiles %d x %d "
             "(blocks %d, %d) %s window %d [%d, %d]",
             idx, (int)bc.B, (int)bc.H, (int)bc.HKV, (int)bc.D, (int)bc.cq, (int)bc.ck, (int)bc.S,
             (int)bc.C, (int)bc.nch, (int)bc.re, (int)bc.ce, (int)bc.bq, (int)bc.bk,
             bc.causal ? "causal" : "full", bc.window, (int)bc.wl, (int)bc.wr);
    ok = ok && ta_test_failures == failures0;
#ifdef TA_RING_MTA_CUDA
    dreg_free_all();
#endif
    bsums_free(&sr);
    bsums_free(&so);
    free(bc.q);
    free(bc.d_o);
    free(bc.o);
    free(bc.lse);
    free(bc.k);
    free(bc.v);
    free(bc.w);
    free(dq1);
    free(dk1);
    free(dv1);
    free(dw1);
    free(dq2);
    free(dk2);
    free(dv2);
    free(dqp);
    free(dkp);
    free(dvp);
    free(dwp);
    free(lse_buf);
    return ok;
}

#ifndef TA_RING_MTA_CUDA
/* One refused backward problem: the size query returns want and its
 * explanation starts with field. */
static void bwd_refused(const ta_problem *p, ta_status want, const char *field, const char *what) {
    char buf[512];
    size_t bytes;
    const ta_status st = ta_bwd_workspace_size(p, TA_BACKEND_REF, &bytes);
    const ta_status se = ta_explain_bwd_workspace_size(p, TA_BACKEND_REF, buf, sizeof buf);
    TA_CHECK(st == want && se == want && strncmp(buf, field, strlen(field)) == 0,
             "%s: status %d (want %d), explanation '%s'", what, (int)st, (int)want, buf);
}

/* The backward's ranges: bounds (TA_ERR_BAD_ARG), the backward's own tiles
 * (TA_ERR_UNSUPPORTED), the forward's refusal of a row range, and the
 * accumulating conv call's dconv_w_lo (TA_ERR_NULL_ARG; nothing written). */
static void check_bwd_refusals(void) {
    enum { N = 64 * 16 * 2 };
    static float q[N], k[N], v[N], o[N], d_o[N], lse[128], w[2 * 15];
    static float dq[N], dk[N], dv[N], dqlo[N], dklo[N], dvlo[N], dw[2 * 15];
    static unsigned char ws[1 << 20];
    ta_problem p;
    ta_bwd_args a;
    size_t bytes, i;
    char buf[512];
    ta_status st;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = p.heads_kv = 2;
    p.seq_q = p.seq_k = 64;
    p.head_dim = p.head_dim_v = 16;
    p.block_q = p.block_k = 32;
    p.flags = TA_CAUSAL;
    p.conv_q = 3; /* backward tiles: 32 - 4 = 28 rows, 32 - 8 = 24 keys */
    p.conv_k = 5;
    p.row_begin = 14;
    bwd_refused(&p, TA_ERR_UNSUPPORTED, "row_begin", "row_begin off the backward's Q tiles");
    p.row_begin = 28;
    bwd_refused(&p, TA_OK, "ok", "row_begin on the backward's Q tiles");
    p.row_end = 40;
    bwd_refused(&p, TA_ERR_UNSUPPORTED, "row_end", "row_end off the backward's Q tiles");
    p.row_end = 56;
    bwd_refused(&p, TA_OK, "ok", "row_end on the backward's Q tiles");
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_ERR_UNSUPPORTED,
             "the forward with a row range: not TA_ERR_UNSUPPORTED");
    p.row_begin = 0;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_ERR_UNSUPPORTED,
             "the forward with row_end: not TA_ERR_UNSUPPORTED");
    p.row_end = 64;
    bwd_refused(&p, TA_OK, "ok", "row_end = seq_q");
    p.row_end = 65;
    bwd_refused(&p, TA_ERR_BAD_ARG, "row_end", "row_end past seq_q");
    p.row_begin = 56;
    p.row_end = 56;
    bwd_refused(&p, TA_ERR_BAD_ARG, "row_begin", "an empty row range");
    p.row_begin = -28;
    p.row_end = 0;
    bwd_refused(&p, TA_ERR_BAD_ARG, "row_begin", "a negative row_begin");
    p.row_begin = 0;
    p.key_begin = 28; /* the forward's K tiles (28 keys), not the backward's (24) */
    bwd_refused(&p, TA_ERR_UNSUPPORTED, "key_begin", "key_begin off the backward's K tiles");
    p.key_begin = 24;
    bwd_refused(&p, TA_OK, "ok", "key_begin on the backward's K tiles");
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_ERR_UNSUPPORTED,
             "the forward with key_begin off its own K tiles: not TA_ERR_UNSUPPORTED");
    p.key_end = 50;
    bwd_refused(&p, TA_ERR_UNSUPPORTED, "key_end", "key_end off the backward's K tiles");
    p.key_end = 48;
    bwd_refused(&p, TA_OK, "ok", "key_end on the backward's K tiles");
    p.key_end = 24;
    bwd_refused(&p, TA_ERR_BAD_ARG, "key_begin", "an empty key range");
    p.key_end = 0;
    /* SDPA: the tiles are the blocks */
    p.conv_q = p.conv_k = 0;
    p.key_begin = 0;
    p.row_begin = 28;
    bwd_refused(&p, TA_ERR_UNSUPPORTED, "row_begin", "SDPA row_begin off block_q");
    p.row_begin = 32;
    p.key_begin = 32;
    bwd_refused(&p, TA_OK, "ok", "SDPA ranges on the blocks");
    /* accumulating with the conv: dconv_w_lo required; nothing written */
    p.conv_q = 3;
    p.conv_k = 5;
    p.row_begin = 28;
    p.key_begin = 24;
    for (i = 0; i < N; ++i) q[i] = k[i] = v[i] = o[i] = d_o[i] = 0.25f;
    for (i = 0; i < 128; ++i) lse[i] = 1.0f;
    for (i = 0; i < 30; ++i) w[i] = 0.1f;
    memset(&a, 0, sizeof a);
    a.q = q, a.k = k, a.v = v, a.o = o, a.d_o = d_o, a.lse = lse, a.conv_w = w;
    a.dq = dq, a.dk = dk, a.dv = dv, a.dconv_w = dw;
    a.accumulate = TA_BWD_ACCUMULATE;
    a.dq_lo = dqlo, a.dk_lo = dklo, a.dv_lo = dvlo;
    ta_canary_fill(dq, sizeof dq);
    ta_canary_fill(dw, sizeof dw);
    TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_OK && bytes <= sizeof ws,
             "accumulating conv problem: size query");
    st = ta_bwd(&p, TA_BACKEND_REF, &a, ws, bytes, NULL);
    (void)ta_explain_bwd(&p, TA_BACKEND_REF, &a, ws, bytes, NULL, buf, sizeof buf);
    TA_CHECK(st == TA_ERR_NULL_ARG && strncmp(buf, "args.dconv_w_lo", 15) == 0 &&
                 ta_canary_intact(dq, sizeof dq) && ta_canary_intact(dw, sizeof dw),
             "accumulate with the conv, no dconv_w_lo: status %d, '%s'", (int)st, buf);
    a.dconv_w_lo = dw; /* overlapping dconv_w */
    st = ta_bwd(&p, TA_BACKEND_REF, &a, ws, bytes, NULL);
    TA_CHECK(st == TA_ERR_BAD_ARG, "dconv_w_lo overlapping dconv_w: status %d", (int)st);
}

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
    /* the backward: its own tiles (block_k - 2 (c_k - 1) = 24 keys), latent attention */
    TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_ERR_UNSUPPORTED,
             "ta_bwd with a key range on the forward's tiles only: not TA_ERR_UNSUPPORTED");
    p.key_begin = 0;
    p.q_offset = 5;
    TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_OK,
             "ta_bwd with q_offset (no key range): refused");
    p.conv_q = p.conv_k = 0;
    p.heads_kv = 1;
    p.latent_dim = 8;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_ERR_UNSUPPORTED,
             "latent attention with q_offset: not TA_ERR_UNSUPPORTED");
    p.q_offset = 0;
    p.row_begin = 32;
    bwd_refused(&p, TA_ERR_UNSUPPORTED, "row_begin", "latent attention with a row range");
    check_bwd_refusals();
}
#endif

int main(int argc, char **argv) {
    const uint64_t seed = ta_test_seed(TEST_NAME);
    int i, ok = 0, n_bwd = 12;
    for (i = 1; i < argc; ++i)
        if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) n_bwd = atoi(argv[++i]);
    if (n_bwd < 1) n_bwd = 1;
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
#ifdef TA_RING_MTA_CUDA
    { /* the backward's range checks are REF's (shared): on the tiles accepted, off refused */
        ta_problem p;
        size_t bytes;
        memset(&p, 0, sizeof p);
        p.batch = 1;
        p.heads_q = p.heads_kv = 1;
        p.seq_q = p.seq_k = 128;
        p.head_dim = p.head_dim_v = 16;
        p.flags = TA_CAUSAL;
        p.row_begin = 64;
        TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_OK,
                 "CUDA backward with a row range on the tiles: refused");
        p.row_begin = 0;
        p.key_begin = 64;
        TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_OK,
                 "CUDA backward with a key range on the tiles: refused");
        p.conv_q = 3; /* backward tiles: 64 - 4 = 60 rows, 64 - 8 = 56 keys */
        p.conv_k = 5;
        TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_ERR_UNSUPPORTED,
                 "CUDA MTA backward with a key range off its tiles: not TA_ERR_UNSUPPORTED");
        p.key_begin = 56;
        p.row_begin = 60;
        TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_OK,
                 "CUDA MTA backward with ranges on its tiles: refused");
        TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_ERR_UNSUPPORTED,
                 "CUDA forward with a row range: not TA_ERR_UNSUPPORTED");
    }
#endif
    ok = 0;
    for (i = 0; i < n_bwd; ++i)
        ok += check_bwd_ring(seed, i);
    printf("%s: backward over ring pairs (row and key ranges, halos, accumulating): %d of %d "
           "problems (%d MTA, %d aligned, %d GQA, %d with a window): %s == REF bit for bit "
           "(every pair word%s); %d of dq / dk+dv == one ta_bwd bit for bit where expected; "
           "worst dconv_w %.3g, worst other gradient %.3g of the largest (tolerance %g)\n",
           TEST_NAME, ok, n_bwd, n_b_mta, n_b_aligned, n_b_gqa, n_b_window, OTHER_NAME,
           OTHER == TA_BACKEND_CPU ? "; also the CPU's caller-run tasks" : "", n_b_exact,
           worst_dw, worst_grad, TOL_REL);
    return ta_test_finish(TEST_NAME);
}
