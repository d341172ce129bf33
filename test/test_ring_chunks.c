/*
 * The host side of ring attention (docs/api.md, "Split-K and merge", "Ring
 * attention"; examples/context_parallel runs it over NCCL): the sequence cut
 * into 2N chunks of C rows, each visible (q chunk a, k chunk b) pair one
 * ta_fwd on chunk-sized tensors (b < a: no mask; b = a: causal; b > a:
 * skipped; without the causal mask every pair), then per q chunk ta_merge of
 * its parts in key order. REF and CPU, f32 exact mode:
 *
 *   - the chunked result equals one ta_fwd over the whole sequence with
 *     num_splits = 2N, bit for bit (o and lse): the same key cut, the same
 *     per-part arithmetic and merge (C a multiple of the key tile);
 *   - CPU equals REF bit for bit;
 *   - the pairs' order does not matter: the parts are merged in key order
 *     whatever order they were computed in (shuffled here).
 * Random problems (fresh seed, printed; TA_SEED replays): N in 2..4, C in
 * {64, 128}, H 1..3 (GQA sometimes), D in {16, 32, 64}, causal or not;
 * outputs poisoned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tileattn.h"

typedef struct ring_case {
    size_t n, c, h, hkv, d, s; /* ranks N, chunk rows C, heads, head dim, S = 2 N C */
    int causal;
    float *q, *k, *v; /* [H, S, D], [Hkv, S, D] */
} ring_case;

static ta_problem chunk_problem(const ring_case *rc, size_t seq, int causal) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = (int32_t)rc->h;
    p.heads_kv = (int32_t)rc->hkv;
    p.seq_q = p.seq_k = (int32_t)seq;
    p.head_dim = p.head_dim_v = (int32_t)rc->d;
    p.dtype = TA_F32;
    p.block_k = 64;
    p.flags = causal ? TA_CAUSAL : 0;
    return p;
}

static void *ws_for(const ta_problem *p, ta_backend be, size_t *bytes) {
    TA_CHECK(ta_fwd_workspace_size(p, be, bytes) == TA_OK, "size query");
    return ta_test_alloc(*bytes ? *bytes : 64);
}

/* The chunked forward on backend be: o [H, S, D], lse [H, S]. */
static void chunked(const ring_case *rc, ta_backend be, ta_rng *r, float *o, float *lse) {
    const size_t nch = 2 * rc->n, C = rc->c, S = rc->s, D = rc->d;
    const size_t qn = rc->h * C * D, kn = rc->hkv * C * D, ln = rc->h * C;
    float *qc = malloc(qn * sizeof(float)), *kc = malloc(kn * sizeof(float));
    float *vc = malloc(kn * sizeof(float));
    float *mo = malloc(qn * sizeof(float)), *ml = malloc(ln * sizeof(float));
    size_t *order = malloc(nch * nch * sizeof(size_t));
    size_t a, b, i, np = 0, h;
    if (!qc || !kc || !vc || !mo || !ml || !order) exit(1);
    for (a = 0; a < nch; ++a) /* the pairs, in a random order */
        for (b = 0; b < nch; ++b)
            if (!rc->causal || b <= a) order[np++] = a * nch + b;
    for (i = np - 1; i > 0; --i) {
        const size_t j = (size_t)ta_rng_int(r, 0, (int32_t)i), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    /* the parts of q chunk a in slots [a][0 .. 2N), poisoned first */
    {
        float *all_o = malloc(nch * nch * qn * sizeof(float));
        float *all_l = malloc(nch * nch * ln * sizeof(float));
        if (!all_o || !all_l) exit(1);
        ta_poison(all_o, nch * nch * qn * sizeof(float));
        ta_poison(all_l, nch * nch * ln * sizeof(float));
        for (i = 0; i < np; ++i) {
            const size_t qa = order[i] / nch, kb = order[i] % nch;
            const ta_problem p = chunk_problem(rc, C, rc->causal && qa == kb);
            ta_fwd_args fa;
            size_t wb;
            void *ws = ws_for(&p, be, &wb);
            ta_test_rows_of(qc, rc->q, rc->h, S, D, qa * C, C);
            ta_test_rows_of(kc, rc->k, rc->hkv, S, D, kb * C, C);
            ta_test_rows_of(vc, rc->v, rc->hkv, S, D, kb * C, C);
            memset(&fa, 0, sizeof fa);
            fa.q = qc;
            fa.k = kc;
            fa.v = vc;
            fa.o = all_o + (qa * nch + kb) * qn;
            fa.lse = all_l + (qa * nch + kb) * ln;
            TA_CHECK(ta_fwd(&p, be, &fa, ws, wb, NULL) == TA_OK, "pair (%zu, %zu)", qa, kb);
            ta_test_free(ws);
        }
        for (a = 0; a < nch; ++a) {
            const size_t nparts = rc->causal ? a + 1 : nch;
            const ta_problem p = chunk_problem(rc, C, 0);
            ta_merge_args m;
            memset(&m, 0, sizeof m);
            m.num_parts = (int32_t)nparts;
            m.o_parts = all_o + a * nch * qn;
            m.lse_parts = all_l + a * nch * ln;
            m.o = mo;
            m.lse = ml;
            TA_CHECK(ta_merge(&p, be, &m, NULL) == TA_OK, "merge of q chunk %zu", a);
            for (h = 0; h < rc->h; ++h) {
                memcpy(o + (h * S + a * C) * D, mo + h * C * D, C * D * sizeof(float));
                memcpy(lse + h * S + a * C, ml + h * C, C * sizeof(float));
            }
        }
        free(all_o);
        free(all_l);
    }
    free(qc);
    free(kc);
    free(vc);
    free(mo);
    free(ml);
    free(order);
}

static int check_one(uint64_t seed, int idx) {
    static const int32_t dims[3] = {16, 32, 64};
    ring_case rc;
    ta_rng r;
    size_t nq, nk, nl, wb;
    float *o_ref, *l_ref, *o_chr, *l_chr, *o_chc, *l_chc;
    ta_problem p;
    ta_fwd_args fa;
    void *ws;
    int ok;
    ta_rng_seed(&r, seed + 7919u * (uint64_t)(idx + 1));
    rc.n = (size_t)ta_rng_int(&r, 2, 4);
    rc.c = ta_rng_int(&r, 0, 1) ? 128 : 64;
    rc.hkv = (size_t)ta_rng_int(&r, 1, 2);
    rc.h = rc.hkv * (size_t)ta_rng_int(&r, 1, 2);
    rc.d = (size_t)dims[ta_rng_int(&r, 0, 2)];
    rc.causal = ta_rng_int(&r, 0, 3) != 0;
    rc.s = 2 * rc.n * rc.c;
    nq = rc.h * rc.s * rc.d;
    nk = rc.hkv * rc.s * rc.d;
    nl = rc.h * rc.s;
    rc.q = malloc(nq * sizeof(float));
    rc.k = malloc(nk * sizeof(float));
    rc.v = malloc(nk * sizeof(float));
    o_ref = malloc(nq * sizeof(float));
    l_ref = malloc(nl * sizeof(float));
    o_chr = malloc(nq * sizeof(float));
    l_chr = malloc(nl * sizeof(float));
    o_chc = malloc(nq * sizeof(float));
    l_chc = malloc(nl * sizeof(float));
    if (!rc.q || !rc.k || !rc.v || !o_ref || !l_ref || !o_chr || !l_chr || !o_chc || !l_chc)
        exit(1);
    ta_fill_uniform(&r, rc.q, TA_F32, nq, -2.0f, 2.0f);
    ta_fill_uniform(&r, rc.k, TA_F32, nk, -2.0f, 2.0f);
    ta_fill_uniform(&r, rc.v, TA_F32, nk, -1.0f, 1.0f);
    ta_poison(o_ref, nq * sizeof(float));
    ta_poison(o_chr, nq * sizeof(float));
    ta_poison(o_chc, nq * sizeof(float));
    /* one call over the whole sequence, num_splits = 2N */
    p = chunk_problem(&rc, rc.s, rc.causal);
    p.num_splits = (int32_t)(2 * rc.n);
    ws = ws_for(&p, TA_BACKEND_REF, &wb);
    memset(&fa, 0, sizeof fa);
    fa.q = rc.q;
    fa.k = rc.k;
    fa.v = rc.v;
    fa.o = o_ref;
    fa.lse = l_ref;
    TA_CHECK(ta_fwd(&p, TA_BACKEND_REF, &fa, ws, wb, NULL) == TA_OK, "one call");
    ta_test_free(ws);
    chunked(&rc, TA_BACKEND_REF, &r, o_chr, l_chr);
    chunked(&rc, TA_BACKEND_CPU, &r, o_chc, l_chc);
    ok = memcmp(o_ref, o_chr, nq * sizeof(float)) == 0 &&
         memcmp(l_ref, l_chr, nl * sizeof(float)) == 0;
    TA_CHECK(ok,
             "problem %d (N=%zu C=%zu H=%zu/%zu D=%zu %s): REF chunks != one call with %zu splits",
             idx, rc.n, rc.c, rc.h, rc.hkv, rc.d, rc.causal ? "causal" : "full", 2 * rc.n);
    TA_CHECK(memcmp(o_chr, o_chc, nq * sizeof(float)) == 0 &&
                 memcmp(l_chr, l_chc, nl * sizeof(float)) == 0,
             "problem %d: CPU chunks != REF chunks", idx);
    free(rc.q);
    free(rc.k);
    free(rc.v);
    free(o_ref);
    free(l_ref);
    free(o_chr);
    free(l_chr);
    free(o_chc);
    free(l_chc);
    return ok;
}

int main(void) {
    const uint64_t seed = ta_test_seed("test_ring_chunks");
    int i, ok = 0;
    for (i = 0; i < 12; ++i)
        ok += check_one(seed, i);
    printf("test_ring_chunks: %d of 12 problems: chunk pairs + ta_merge == one ta_fwd with "
           "num_splits = 2N (REF, CPU == REF), bit for bit\n",
           ok);
    return ta_test_finish("test_ring_chunks");
}
