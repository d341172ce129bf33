/*
 * The range cuts of the backward over key and query ranges (docs/api.md,
 * "Backward over key and query ranges"), shared by test_ring_bwd (REF, CPU)
 * and test_cuda_ring_bwd (CUDA): a sequence of s rows (S_q = S_k) cut into
 * query ranges [qcut[a], qcut[a + 1]) and key ranges [kcut[b], kcut[b + 1]),
 * the problem of each (query range, key range) pair (the bottom-right
 * alignment under a causal mask), and random admissible orders of the pairs.
 */
#ifndef TA_TEST_RING_CUTS_H
#define TA_TEST_RING_CUTS_H

#include <stdint.h>
#include <string.h>

#include "test_util.h"
#include "tileattn.h"

#define TA_RING_MAX_CUTS 6

/* n + 1 sorted, distinct cut points of [0, s) (n in [2, TA_RING_MAX_CUTS],
 * fewer where s / 64 is smaller and aligned): aligned ones on multiples of
 * 64. Returns n. */
static inline int32_t ta_ring_make_cut(ta_rng *r, int32_t s, int aligned, int32_t *cut) {
    const int32_t most = aligned && s / 64 < TA_RING_MAX_CUTS ? s / 64 : TA_RING_MAX_CUTS;
    const int32_t n = ta_rng_int(r, 2, most);
    int32_t i, j;
    cut[0] = 0;
    cut[n] = s;
    for (i = 1; i < n; ++i) {
        int32_t c, dup;
        do { /* distinct points */
            c = aligned ? 64 * ta_rng_int(r, 1, s / 64 - 1) : ta_rng_int(r, 1, s - 1);
            for (dup = 0, j = 1; j < i; ++j)
                dup |= cut[j] == c;
        } while (dup);
        cut[i] = c;
    }
    for (i = 1; i < n; ++i) /* sort */
        for (j = i + 1; j < n; ++j)
            if (cut[j] < cut[i]) {
                const int32_t t = cut[i];
                cut[i] = cut[j];
                cut[j] = t;
            }
    return n;
}

/* The call of pair (query range a, key range b) on p (the full problem on
 * entry): 0 if no entry is visible; else p's seq_q, seq_k, q_offset and
 * flags for the pair and *seqlen its seqlens_k value (-1: none). Causal: a
 * pair after the rows sees nothing, one before them every key (no
 * TA_CAUSAL); else TA_CAUSAL with row r at key position r + q0 - k0, by one
 * of docs/api.md's two recipes: seq_k = q1 - k0 and seqlens_k = k1 - k0 when
 * k1 < q1 (offset 0), or seq_k = k1 - k0 and q_offset = q1 - k1 (offset 1:
 * the views span only the range's keys). */
static inline int ta_ring_pair(const int32_t *qcut, const int32_t *kcut, int causal, int offset,
                               int32_t a, int32_t b, ta_problem *p, int32_t *seqlen) {
    const int32_t q0 = qcut[a], q1 = qcut[a + 1], k0 = kcut[b], k1 = kcut[b + 1];
    p->seq_q = q1 - q0;
    p->seq_k = k1 - k0;
    *seqlen = -1;
    if (!causal) return 1;
    if (k0 >= q1) return 0; /* every key after every row */
    if (k1 - 1 <= q0) {     /* every row sees every key */
        p->flags &= ~(uint32_t)TA_CAUSAL;
        return 1;
    }
    if (offset) {
        p->q_offset = q1 - k1;
        return 1;
    }
    p->seq_k = q1 - k0;
    if (k1 < q1) *seqlen = k1 - k0;
    return 1;
}

/* A random order of the visible pairs (codes a * TA_RING_MAX_CUTS + b) in
 * which each query range's key ranges and each key range's query ranges come
 * in ascending order; returns their count (0 ... on a broken grid: the caller
 * compares it with the visible pairs). */
static inline int32_t ta_ring_order(const int32_t *qcut, int32_t nq, const int32_t *kcut,
                                    int32_t nk, int causal, ta_rng *r, int32_t *order) {
    int32_t next_b[TA_RING_MAX_CUTS], next_a[TA_RING_MAX_CUTS]; /* per query / key range */
    int32_t n = 0, a, b, total = 0, sl;
    ta_problem p;
    memset(&p, 0, sizeof p);
    for (a = 0; a < nq; ++a)
        for (b = 0; b < nk; ++b)
            total += ta_ring_pair(qcut, kcut, causal, 0, a, b, &p, &sl);
    memset(next_b, 0, sizeof next_b);
    memset(next_a, 0, sizeof next_a);
    while (n < total) {
        int32_t ready[TA_RING_MAX_CUTS * TA_RING_MAX_CUTS], nr = 0, pick;
        for (a = 0; a < nq; ++a) /* skip the invisible pairs */
            while (next_b[a] < nk && !ta_ring_pair(qcut, kcut, causal, 0, a, next_b[a], &p, &sl))
                ++next_b[a];
        for (b = 0; b < nk; ++b)
            while (next_a[b] < nq && !ta_ring_pair(qcut, kcut, causal, 0, next_a[b], b, &p, &sl))
                ++next_a[b];
        for (a = 0; a < nq; ++a)
            if (next_b[a] < nk && next_a[next_b[a]] == a)
                ready[nr++] = a * TA_RING_MAX_CUTS + next_b[a];
        if (nr == 0) break; /* cannot happen: the grid's orders are compatible */
        pick = ready[ta_rng_int(r, 0, nr - 1)];
        order[n++] = pick;
        ++next_b[pick / TA_RING_MAX_CUTS];
        ++next_a[pick % TA_RING_MAX_CUTS];
    }
    TA_CHECK(n == total, "pair order: %d of %d pairs", (int)n, (int)total);
    return n;
}

#endif /* TA_TEST_RING_CUTS_H */
