/*
 * The rotary load stage (TA_LOAD_ROPE, docs/rope.md "The load stage"): the one
 * definition of the rotation every backend applies to q and k rows after they
 * are widened to f32, and of its transpose, applied to the f32 dq and dk
 * accumulators before the final scale and store.
 *
 * Pair i of a row x (i in [0, n_pairs), table entry c = cos[i], s = sin[i]):
 *
 *   forward   y_a = x_a c - x_b s        backward (transpose)  g'_a = g_a c + g_b s
 *             y_b = x_b c + x_a s                              g'_b = g_b c - g_a s
 *
 * two f32 products and one add or subtract each, left to right, never fused
 * (the build passes -ffp-contract=off and, for CUDA, -fmad=false). The forward
 * equals PyTorch's f32 x * cos + rotate_half(x) * sin bit for bit (its
 * rotate_half negates x_b exactly; x_b c + x_a s adds in that order too).
 * Pairs: interleaved a = 2i, b = 2i + 1; half-split a = i, b = i + n_pairs.
 * Dims past 2 n_pairs pass through. Non-finite inputs may give NaN (inf * 0);
 * which NaN is the hardware's (docs/exactness.md section 8 covers what the
 * softmax then does with it).
 *
 * Tables: cos/sin [tables][rows][row_stride]; token t of batch entry b of the
 * q side (k side) uses row pos_q[b S_q + t] (pos_k[b S_k + t]), or row t when
 * the position array is NULL; the MTA forward's query history rows t in
 * [-q_history, 0) (docs/mta.md section 2a) use row 0's row + t, the positions
 * just before it (ta_rope_token_row); table of kv head g at g head_stride (0:
 * one table), used by q head h through g = h / group, so q and k of one score
 * turn by the same frequencies and the score depends on the positions' offset
 * only (the relative-position property of RoPE).
 */
#ifndef TA_ROPE_LOAD_H
#define TA_ROPE_LOAD_H

#include <stddef.h>
#include <stdint.h>

#ifndef TA_ROPE_FN
#if defined(__CUDACC__)
#define TA_ROPE_FN static inline __host__ __device__
#else
#define TA_ROPE_FN static inline
#endif
#endif

/* One pair, forward: (x_a, x_b) -> (x_a c - x_b s, x_b c + x_a s). */
TA_ROPE_FN void ta_rope_pair(float *xa, float *xb, float c, float s) {
    const float a = *xa, b = *xb;
    const float ac = a * c, bs = b * s, bc = b * c, as = a * s;
    *xa = ac - bs;
    *xb = bc + as;
}

/* One pair, transpose (the backward): (g_a, g_b) -> (g_a c + g_b s, g_b c - g_a s). */
TA_ROPE_FN void ta_rope_pair_t(float *ga, float *gb, float c, float s) {
    const float a = *ga, b = *gb;
    const float ac = a * c, bs = b * s, bc = b * c, as = a * s;
    *ga = ac + bs;
    *gb = bc - as;
}

/* The table row of token t of a side, given row_t0, the table row of token
 * max(t, 0) (its position, or max(t, 0) without positions): row_t0 itself
 * for t >= 0; for a query history row t < 0, row 0's table row + t (row -i
 * sits i positions before row 0: docs/rope.md, "Positions"). Validation
 * keeps it in [0, rope_rows) on REF and CPU (ta_check_rope_pos); CUDA clamps. */
TA_ROPE_FN int32_t ta_rope_token_row(int32_t row_t0, int32_t t) {
    return t < 0 ? row_t0 + t : row_t0;
}

/* Rotate one f32 row by table row (c, s) [n_pairs], forward or (transpose
 * != 0) backward; half != 0: half-split pairs. Feature d of the row is
 * x[d * stride] (1: a row; a tile's leading dimension: a column of a
 * transposed tile), d < 2 n_pairs. */
TA_ROPE_FN void ta_rope_row(float *x, size_t stride, const float *c, const float *s,
                            int32_t n_pairs, int half, int transpose) {
    int32_t i;
    for (i = 0; i < n_pairs; ++i) {
        const size_t a = half ? (size_t)i : 2 * (size_t)i;
        const size_t b = half ? (size_t)(i + n_pairs) : 2 * (size_t)i + 1;
        float *xa = x + a * stride;
        float *xb = x + b * stride;
        if (transpose)
            ta_rope_pair_t(xa, xb, c[i], s[i]);
        else
            ta_rope_pair(xa, xb, c[i], s[i]);
    }
}

#if !defined(__CUDACC__)
#include "ta_internal.h"

/* Which side of the attention a row belongs to: its positions. */
#define TA_ROPE_SIDE_Q 0
#define TA_ROPE_SIDE_K 1

/* Rotate row x (feature d at x[d * stride]) of token t (in [0, S) of its
 * side; the q side's history rows: in [-q_history, 0)) of batch entry b, kv
 * head h_kv, by the plan's tables (plan->stages.load == TA_LOAD_ROPE). */
static inline void ta_rope_plan_row(const ta_plan *plan, float *x, size_t stride, int side,
                                    int32_t b, int32_t h_kv, int32_t t, int transpose) {
    const ta_problem *p = &plan->p;
    const ta_rope_args *r = &plan->rope;
    const int32_t *pos = side == TA_ROPE_SIDE_Q ? r->pos_q : r->pos_k;
    const int32_t seq = side == TA_ROPE_SIDE_Q ? p->seq_q : p->seq_k;
    const int32_t t0 = t < 0 ? 0 : t;
    const int32_t row = ta_rope_token_row(pos ? pos[(size_t)b * (size_t)seq + (size_t)t0] : t0, t);
    const size_t at =
        (size_t)h_kv * (size_t)p->rope_head_stride + (size_t)row * (size_t)p->rope_row_stride;
    ta_rope_row(x, stride, r->cos + at, r->sin + at, p->rope_pairs, p->rope == TA_ROPE_HALF,
                transpose);
}
#endif

#endif /* TA_ROPE_LOAD_H */
