/* The rotary stage in the fast MTA tests (test_cuda_fast_mta.c,
 * test_cuda_fast_mta_bwd.c): random tables and positions for a problem, q / k
 * rows turned on the host as the fast path turns them (widen, ta_rope_row in
 * f32, round to the storage type: the copies the kernels read), and turned
 * in double as the float64 oracle wants them, then rounded to the storage
 * type as the copies are (and the gradients turned back, with their
 * magnitudes). Tensors are contiguous [B, heads, rows, D]; row r
 * of a tensor is token r + tok0 of its side (tok0 = -n: n query history rows
 * first, whose token -i uses pos_q[b][0] - i, docs/rope.md "Positions"). */
#ifndef TA_TEST_CUDA_ROPE_UTIL_H
#define TA_TEST_CUDA_ROPE_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ta_math.h"
#include "ta_rope_load.h"
#include "test_util.h"
#include "tileattn.h"

typedef struct ta_trope {
    float *cos, *sin;       /* host [tables][rows][row_stride] */
    int32_t *pos_q, *pos_k; /* host [B][S] or NULL */
    size_t n_tab;
} ta_trope;

/* Sets p's rotary fields and fills t: a pair convention, rope_pairs a
 * multiple of 8 (half-split) or 4 (interleaved) up to D / 2 (the fast
 * path's chunks), a row stride with a gap sometimes, one table or one per kv
 * head; positions for q (required with history rows: consecutive from an
 * offset >= q_history) and k half the time; random angles, or identity rows
 * (cos 1, sin 0) everywhere with identity != 0. */
static inline void ta_trope_make(ta_rng *r, ta_problem *p, int identity, ta_trope *t) {
    const int32_t half = ta_rng_int(r, 0, 1), unit = half ? 8 : 4;
    const int32_t max_pairs = p->head_dim / 2 / unit;
    const int32_t seq_max = p->seq_q + p->q_history > p->seq_k ? p->seq_q + p->q_history : p->seq_k;
    int32_t tables, b, i;
    size_t e;
    memset(t, 0, sizeof *t);
    p->rope = half ? TA_ROPE_HALF : TA_ROPE_INTERLEAVED;
    p->rope_pairs = unit * ta_rng_int(r, 1, max_pairs);
    p->rope_rows = seq_max + ta_rng_int(r, 0, 40);
    p->rope_row_stride = p->rope_pairs + (ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, 5) : 0);
    tables = ta_rng_int(r, 0, 2) == 0 ? p->heads_kv : 1;
    p->rope_head_stride = tables > 1 ? p->rope_rows * p->rope_row_stride : 0;
    t->n_tab = (size_t)tables * (size_t)p->rope_rows * (size_t)p->rope_row_stride;
    t->cos = (float *)malloc(t->n_tab * sizeof(float));
    t->sin = (float *)malloc(t->n_tab * sizeof(float));
    if (!t->cos || !t->sin) exit(1);
    for (e = 0; e < t->n_tab; ++e) {
        const double a = (double)ta_rng_uniform(r, -3.14159f, 3.14159f);
        t->cos[e] = identity ? 1.0f : (float)cos(a);
        t->sin[e] = identity ? 0.0f : (float)sin(a);
    }
    if (p->q_history > 0 || ta_rng_int(r, 0, 1)) {
        t->pos_q = (int32_t *)malloc((size_t)p->batch * (size_t)p->seq_q * sizeof(int32_t));
        if (!t->pos_q) exit(1);
        for (b = 0; b < p->batch; ++b) {
            const int32_t off = ta_rng_int(r, p->q_history, p->rope_rows - p->seq_q);
            for (i = 0; i < p->seq_q; ++i)
                t->pos_q[b * p->seq_q + i] = p->q_history > 0 || ta_rng_int(r, 0, 1)
                                                 ? off + i
                                                 : ta_rng_int(r, 0, p->rope_rows - 1);
        }
    }
    if (ta_rng_int(r, 0, 1)) {
        t->pos_k = (int32_t *)malloc((size_t)p->batch * (size_t)p->seq_k * sizeof(int32_t));
        if (!t->pos_k) exit(1);
        for (i = 0; i < p->batch * p->seq_k; ++i)
            t->pos_k[i] = ta_rng_int(r, 0, p->rope_rows - 1);
    }
}

static inline void ta_trope_free(ta_trope *t) {
    free(t->cos);
    free(t->sin);
    free(t->pos_q);
    free(t->pos_k);
    memset(t, 0, sizeof *t);
}

/* The table entry (floats from cos / sin) of token tok of head h (kv 0: a
 * query head, whose table is kv head h / group's) of batch entry b. */
static inline size_t ta_trope_at(const ta_problem *p, const ta_trope *t, int kv, int32_t b,
                                 int32_t h, int32_t tok) {
    const int32_t seq = kv ? p->seq_k : p->seq_q;
    const int32_t *pos = kv ? t->pos_k : t->pos_q;
    const int32_t g = kv ? h : h / (p->heads_q / p->heads_kv);
    const int32_t t0 = tok < 0 ? 0 : tok;
    const int32_t row =
        ta_rope_token_row(pos ? pos[(size_t)b * (size_t)seq + (size_t)t0] : t0, tok);
    const int32_t rs = p->rope_row_stride ? p->rope_row_stride : p->rope_pairs;
    return (size_t)g * (size_t)p->rope_head_stride + (size_t)row * (size_t)rs;
}

/* x [B, heads, n_rows, D] in the storage type turned in place as the fast
 * path turns its copies. */
static inline void ta_trope_turn_store(const ta_problem *p, const ta_trope *t, int kv, void *x,
                                       int32_t n_rows, int32_t tok0) {
    const int32_t heads = kv ? p->heads_kv : p->heads_q, d = p->head_dim;
    float row[256];
    int32_t b, h, s, f;
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < heads; ++h)
            for (s = 0; s < n_rows; ++s) {
                uint16_t *xr =
                    (uint16_t *)x +
                    (((size_t)b * (size_t)heads + (size_t)h) * (size_t)n_rows + (size_t)s) *
                        (size_t)d;
                const size_t at = ta_trope_at(p, t, kv, b, h, s + tok0);
                for (f = 0; f < d; ++f)
                    row[f] = p->dtype == TA_BF16 ? ta_bf16_to_f32(xr[f]) : ta_f16_to_f32(xr[f]);
                ta_rope_row(row, 1, t->cos + at, t->sin + at, p->rope_pairs,
                            p->rope == TA_ROPE_HALF, 0);
                for (f = 0; f < d; ++f)
                    xr[f] = p->dtype == TA_BF16 ? ta_f32_to_bf16(row[f]) : ta_f32_to_f16(row[f]);
            }
}

/* x [B, heads, n_rows, D] in double turned in place: forward (back 0), its
 * transpose (back 1), or (back 2) a magnitude through the transpose:
 * |c| m_a + |s| m_b and |c| m_b + |s| m_a, a first-order bound of how the
 * errors of the turned-back pair's inputs reach it. */
static inline void ta_trope_turn_double(const ta_problem *p, const ta_trope *t, int kv, double *x,
                                        int32_t n_rows, int32_t tok0, int back) {
    const int32_t heads = kv ? p->heads_kv : p->heads_q, d = p->head_dim;
    int32_t b, h, s, i;
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < heads; ++h)
            for (s = 0; s < n_rows; ++s) {
                double *xr =
                    x + (((size_t)b * (size_t)heads + (size_t)h) * (size_t)n_rows + (size_t)s) *
                            (size_t)d;
                const size_t at = ta_trope_at(p, t, kv, b, h, s + tok0);
                for (i = 0; i < p->rope_pairs; ++i) {
                    const int32_t ia = p->rope == TA_ROPE_HALF ? i : 2 * i;
                    const int32_t ib = p->rope == TA_ROPE_HALF ? i + p->rope_pairs : 2 * i + 1;
                    const double c = (double)t->cos[at + (size_t)i];
                    const double sn = (double)t->sin[at + (size_t)i];
                    const double xa = xr[ia], xb = xr[ib];
                    if (back == 2) {
                        xr[ia] = fabs(c) * xa + fabs(sn) * xb;
                        xr[ib] = fabs(c) * xb + fabs(sn) * xa;
                    } else {
                        xr[ia] = back ? xa * c + xb * sn : xa * c - xb * sn;
                        xr[ib] = back ? xb * c - xa * sn : xb * c + xa * sn;
                    }
                }
            }
}

/* x [n] rounded to the storage type dt as the turned copies are (through
 * f32): the oracle's inputs after an exact turn are the copies' values up to
 * the f32 arithmetic of the turn (docs/exactness.md section 9, "The rotary
 * stage in fast MTA"). */
static inline void ta_trope_round(double *x, size_t n, ta_dtype dt) {
    size_t i;
    for (i = 0; i < n; ++i) {
        const float f = (float)x[i];
        x[i] = (double)(dt == TA_BF16 ? ta_bf16_to_f32(ta_f32_to_bf16(f))
                                      : ta_f16_to_f32(ta_f32_to_f16(f)));
    }
}

/* Two results equal bit for bit, except that +0 and -0 count as equal (an
 * identity row turns x = -0 into +0 where the partner's product is +0:
 * docs/rope.md, "Positions"); n elements of eb bytes (2: f16 / bf16, 4: f32). */
static inline int ta_trope_same(const void *a, const void *b, size_t n, size_t eb) {
    size_t i;
    for (i = 0; i < n; ++i) {
        uint32_t x = 0, y = 0, zero;
        memcpy(&x, (const char *)a + i * eb, eb);
        memcpy(&y, (const char *)b + i * eb, eb);
        zero = eb == 2 ? 0x7FFFu : 0x7FFFFFFFu;
        if (x != y && ((x & zero) != 0 || (y & zero) != 0)) return 0;
    }
    return 1;
}

#endif /* TA_TEST_CUDA_ROPE_UTIL_H */
