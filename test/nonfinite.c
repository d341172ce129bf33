/* Non-finite score cases and checks (test/nonfinite.h). */
#include "nonfinite.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle_check.h"
#include "ta_internal.h"
#include "ta_math.h"

/* Expected row class in the fixed cases (nf_case carries none: kept here). */
enum { NF_FINITE = 0, NF_NAN = 1, NF_EMPTY = 2 };

static void nf_sizes(nf_case *c) {
    const ta_problem *p = &c->p;
    const size_t bh = (size_t)p->batch * (size_t)p->heads_q;
    const size_t bhkv = (size_t)p->batch * (size_t)p->heads_kv;
    c->n_lse = bh * (size_t)p->seq_q;
    c->n_q = c->n_lse * (size_t)p->head_dim;
    c->n_o = c->n_lse * (size_t)p->head_dim_v;
    c->n_k = bhkv * (size_t)p->seq_k * (size_t)p->head_dim;
    c->n_v = bhkv * (size_t)p->seq_k * (size_t)p->head_dim_v;
    c->n_w = p->conv_q ? (size_t)p->heads_q * (size_t)p->conv_q * (size_t)p->conv_k : 0;
    c->eb = ta_dtype_size(p->dtype);
}

/* Buffers for c->p, q and k uniform in [-1, 1), v and d_o in [-2, 2), conv
 * weights in [-1, 1) with a few exact zeros. */
static void nf_alloc_case(ta_rng *r, nf_case *c) {
    size_t i;
    nf_sizes(c);
    c->q = ta_test_alloc(c->n_q * c->eb);
    c->k = ta_test_alloc(c->n_k * c->eb);
    c->v = ta_test_alloc(c->n_v * c->eb);
    c->d_o = ta_test_alloc(c->n_o * c->eb);
    ta_fill_uniform(r, c->q, c->p.dtype, c->n_q, -1.0f, 1.0f);
    ta_fill_uniform(r, c->k, c->p.dtype, c->n_k, -1.0f, 1.0f);
    ta_fill_uniform(r, c->v, c->p.dtype, c->n_v, -2.0f, 2.0f);
    ta_fill_uniform(r, c->d_o, c->p.dtype, c->n_o, -2.0f, 2.0f);
    c->w = NULL;
    if (c->n_w) {
        c->w = (float *)ta_test_alloc(c->n_w * sizeof(float));
        for (i = 0; i < c->n_w; ++i)
            c->w[i] = ta_rng_int(r, 0, 5) == 0 ? 0.0f : ta_rng_uniform(r, -1.0f, 1.0f);
    }
    c->seqlens = NULL;
}

static ta_problem nf_shape(int32_t s_q, int32_t s_k, int32_t d, int32_t dv) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = p.heads_q = p.heads_kv = 1;
    p.seq_q = s_q, p.seq_k = s_k, p.head_dim = d, p.head_dim_v = dv;
    p.num_threads = 3;
    return p;
}

static void set_f32(void *buf, size_t i, float x) { ((float *)buf)[i] = x; }

/* Fixed case `which`; its expected row classes, if any, into exp[] (up to 8 rows). */
static int nf_fixed(int which, ta_rng *r, nf_case *c, int exp[8]) {
    const float nan = ta_f32_from_bits(0x7fc00000u);
    int32_t j;
    memset(c, 0, sizeof *c);
    switch (which) {
    case 0: /* issue 15 item 2: MTA 1x3, w = 1, scale 3e38, q = [1, 1], k = [2, -2].
             * Row 0: C = 0 + inf + 0 = +inf; row 1: inf + -inf = NaN. */
        snprintf(c->name, sizeof c->name, "mta_repro (issue 15 item 2)");
        c->p = nf_shape(2, 2, 1, 1);
        c->p.flags = TA_CAUSAL, c->p.conv_q = 1, c->p.conv_k = 3, c->p.scale = 3e38f;
        nf_alloc_case(r, c);
        for (j = 0; j < 3; ++j)
            c->w[j] = 1.0f;
        set_f32(c->q, 0, 1.0f), set_f32(c->q, 1, 1.0f);
        set_f32(c->k, 0, 2.0f), set_f32(c->k, 1, -2.0f);
        exp[0] = NF_NAN, exp[1] = NF_NAN;
        return 2;
    case 1: /* one +inf score among a finite and a -inf one */
        snprintf(c->name, sizeof c->name, "sdpa_plus_inf");
        c->p = nf_shape(1, 3, 1, 2);
        c->p.scale = 1e10f;
        nf_alloc_case(r, c);
        set_f32(c->q, 0, 1e30f);
        set_f32(c->k, 0, 1e30f), set_f32(c->k, 1, 0.5f), set_f32(c->k, 2, -1e30f);
        exp[0] = NF_NAN;
        return 1;
    case 2: /* a NaN in the middle of the second of three K tiles */
        snprintf(c->name, sizeof c->name, "sdpa_nan_late");
        c->p = nf_shape(2, 24, 2, 3);
        c->p.block_k = 8;
        nf_alloc_case(r, c);
        set_f32(c->k, 2 * 13 + 1, nan);
        exp[0] = exp[1] = NF_NAN;
        return 2;
    case 3: /* a K tile of -inf scores, then a tile of NaN ones (REF gave NaN, the
             * CPU's vector max skipped the NaNs: o = 0, lse = -inf) */
        snprintf(c->name, sizeof c->name, "sdpa_neg_inf_then_nan");
        c->p = nf_shape(1, 16, 1, 2);
        c->p.scale = 3e38f, c->p.block_k = 8;
        nf_alloc_case(r, c);
        set_f32(c->q, 0, 1.0f);
        for (j = 0; j < 16; ++j)
            set_f32(c->k, (size_t)j, j < 8 ? -2.0f : nan);
        exp[0] = NF_NAN;
        return 1;
    case 4: /* every score -inf: a row that sees nothing */
        snprintf(c->name, sizeof c->name, "sdpa_neg_inf_only");
        c->p = nf_shape(1, 16, 1, 2);
        c->p.scale = 3e38f, c->p.block_k = 8;
        nf_alloc_case(r, c);
        set_f32(c->q, 0, 1.0f);
        for (j = 0; j < 16; ++j)
            set_f32(c->k, (size_t)j, -2.0f);
        exp[0] = NF_EMPTY;
        return 1;
    case 5: /* rows are independent: a NaN row between two finite ones */
        snprintf(c->name, sizeof c->name, "sdpa_mixed_rows");
        c->p = nf_shape(3, 8, 1, 2);
        c->p.flags = TA_CAUSAL;
        nf_alloc_case(r, c);
        set_f32(c->q, 1, nan);
        exp[0] = NF_FINITE, exp[1] = NF_NAN, exp[2] = NF_FINITE;
        return 3;
    case 6: /* the first visible score NaN, the rest finite, over two tiles */
        snprintf(c->name, sizeof c->name, "sdpa_nan_first");
        c->p = nf_shape(1, 16, 1, 2);
        c->p.block_k = 8;
        nf_alloc_case(r, c);
        set_f32(c->k, 0, nan);
        exp[0] = NF_NAN;
        return 1;
    default: /* MTA, 3x3: a NaN conv in a later row only */
        snprintf(c->name, sizeof c->name, "mta_3x3_overflow_row");
        c->p = nf_shape(8, 8, 1, 2);
        c->p.flags = TA_CAUSAL, c->p.conv_q = 3, c->p.conv_k = 3, c->p.scale = 1.0f;
        nf_alloc_case(r, c);
        set_f32(c->q, 6, 1e30f); /* row 6: scores of +-1e30 k: +-inf where |k| > ~3.4e8 */
        set_f32(c->k, 2, 1e30f), set_f32(c->k, 3, -1e30f);
        /* rows 0-5 see only finite raw scores (row 6 is not in their window) */
        for (j = 0; j < 6; ++j)
            exp[j] = NF_FINITE;
        return 6;
    }
}

int nf_fixed_count(void) { return 8; }

void nf_make_fixed(int which, ta_rng *r, nf_case *c) {
    int exp[8];
    (void)nf_fixed(which, r, c, exp);
}

/* One q/k value: ordinary, huge (either sign) or NaN, at the case's rates. */
static float nf_value(ta_rng *r, int huge_pct10, int nan_pct10) {
    const int x = ta_rng_int(r, 0, 999);
    if (x < nan_pct10) return ta_f32_from_bits(0x7fc00000u);
    if (x < nan_pct10 + huge_pct10) return ta_rng_int(r, 0, 1) ? 1e20f : -1e20f;
    return ta_rng_uniform(r, -1.0f, 1.0f);
}

void nf_make_random(ta_rng *r, nf_case *c, int mta) {
    static const float scales[4] = {1.0f, 0.35f, 1e10f, -1.0f};
    static const ta_dtype dts[3] = {TA_F32, TA_F16, TA_BF16};
    const int huge = ta_rng_int(r, 0, 2) * 25, nans = ta_rng_int(r, 0, 2) * 5;
    int32_t g;
    size_t i;
    memset(c, 0, sizeof *c);
    c->p = nf_shape(ta_rng_int(r, 1, 40), ta_rng_int(r, 1, 40), ta_rng_int(r, 1, 8),
                    ta_rng_int(r, 1, 8));
    c->p.dtype = dts[ta_rng_int(r, 0, 2)];
    c->p.batch = ta_rng_int(r, 1, 2);
    c->p.heads_kv = ta_rng_int(r, 1, 2);
    g = ta_rng_int(r, 1, 2);
    c->p.heads_q = c->p.heads_kv * g;
    c->p.scale = scales[ta_rng_int(r, 0, 3)];
    c->p.num_threads = ta_rng_int(r, 1, 4);
    if (mta) {
        c->p.flags = TA_CAUSAL;
        c->p.conv_q = ta_rng_int(r, 1, 4);
        c->p.conv_k = 2 * ta_rng_int(r, 0, 3) + 1;
        if (ta_rng_int(r, 0, 1)) c->p.block_q = c->p.block_k = ta_rng_int(r, 16, 32);
    } else {
        c->p.flags = ta_rng_int(r, 0, 1) ? TA_CAUSAL : 0u;
        if (ta_rng_int(r, 0, 1)) c->p.block_k = ta_rng_int(r, 8, 24);
        if (ta_rng_int(r, 0, 1)) c->p.block_q = ta_rng_int(r, 8, 24);
    }
    nf_alloc_case(r, c);
    for (i = 0; i < c->n_q; ++i)
        ta_store(c->q, c->p.dtype, i, nf_value(r, huge, nans));
    for (i = 0; i < c->n_k; ++i)
        ta_store(c->k, c->p.dtype, i, nf_value(r, huge, nans));
    if (ta_rng_int(r, 0, 2) == 0) {
        c->seqlens = (int32_t *)ta_test_alloc((size_t)c->p.batch * sizeof(int32_t));
        for (g = 0; g < c->p.batch; ++g)
            c->seqlens[g] = ta_rng_int(r, 0, c->p.seq_k);
    }
    snprintf(c->name, sizeof c->name,
             "%s B=%d H=%d/%d S=%d/%d D=%d/%d dt=%d %s conv=%dx%d scale=%g huge=%d/1000 "
             "nan=%d/1000 seqlens=%d",
             mta ? "mta" : "sdpa", (int)c->p.batch, (int)c->p.heads_q, (int)c->p.heads_kv,
             (int)c->p.seq_q, (int)c->p.seq_k, (int)c->p.head_dim, (int)c->p.head_dim_v,
             (int)c->p.dtype, (c->p.flags & TA_CAUSAL) ? "causal" : "full", (int)c->p.conv_q,
             (int)c->p.conv_k, (double)c->p.scale, huge, nans, c->seqlens != NULL);
}

void nf_free_case(nf_case *c) {
    ta_test_free(c->q), ta_test_free(c->k), ta_test_free(c->v), ta_test_free(c->d_o);
    ta_test_free(c->w), ta_test_free(c->seqlens);
    memset(c, 0, sizeof *c);
}

void nf_alloc_out(const nf_case *c, nf_out *o) {
    o->o = ta_test_alloc(c->n_o * c->eb);
    o->dq = ta_test_alloc(c->n_q * c->eb);
    o->dk = ta_test_alloc(c->n_k * c->eb);
    o->dv = ta_test_alloc(c->n_v * c->eb);
    o->lse = (float *)ta_test_alloc(c->n_lse * sizeof(float));
    o->dw = c->n_w ? (float *)ta_test_alloc(c->n_w * sizeof(float)) : NULL;
    ta_poison(o->o, c->n_o * c->eb), ta_poison(o->dq, c->n_q * c->eb);
    ta_poison(o->dk, c->n_k * c->eb), ta_poison(o->dv, c->n_v * c->eb);
    ta_poison(o->lse, c->n_lse * sizeof(float));
    if (o->dw) ta_poison(o->dw, c->n_w * sizeof(float));
}

void nf_free_out(nf_out *o) {
    ta_test_free(o->o), ta_test_free(o->dq), ta_test_free(o->dk), ta_test_free(o->dv);
    ta_test_free(o->lse), ta_test_free(o->dw);
    memset(o, 0, sizeof *o);
}

ta_status nf_run_host(ta_backend be, ta_rng *r, const nf_case *c, nf_out *out, const void *o_in,
                      const float *lse_in) {
    ta_fwd_args fa;
    ta_bwd_args ba;
    size_t bytes = 0;
    void *ws;
    ta_status st;
    memset(&fa, 0, sizeof fa);
    fa.q = c->q, fa.k = c->k, fa.v = c->v, fa.conv_w = c->w, fa.seqlens_k = c->seqlens;
    fa.o = out->o, fa.lse = out->lse;
    if ((st = ta_fwd_workspace_size(&c->p, be, &bytes)) != TA_OK) return st;
    ws = ta_oc_workspace(r, bytes, 1);
    st = ta_fwd(&c->p, be, &fa, ws, bytes, NULL);
    ta_test_free(ws);
    if (st != TA_OK) return st;
    memset(&ba, 0, sizeof ba);
    ba.q = c->q, ba.k = c->k, ba.v = c->v, ba.conv_w = c->w, ba.seqlens_k = c->seqlens;
    ba.o = o_in ? o_in : out->o, ba.lse = lse_in ? lse_in : out->lse, ba.d_o = c->d_o;
    ba.dq = out->dq, ba.dk = out->dk, ba.dv = out->dv, ba.dconv_w = out->dw;
    if ((st = ta_bwd_workspace_size(&c->p, be, &bytes)) != TA_OK) return st;
    ws = ta_oc_workspace(r, bytes, 1);
    st = ta_bwd(&c->p, be, &ba, ws, bytes, NULL);
    ta_test_free(ws);
    return st;
}

static int nf_isnan(ta_dtype dt, const void *buf, size_t i) {
    return isnan(ta_get(buf, dt, i)) != 0;
}

int nf_same(ta_dtype dt, const void *a, const void *b, size_t n, size_t *payload) {
    const size_t eb = ta_dtype_size(dt);
    size_t i;
    for (i = 0; i < n; ++i) {
        const int na = nf_isnan(dt, a, i), nb = nf_isnan(dt, b, i);
        const int bits = memcmp((const char *)a + i * eb, (const char *)b + i * eb, eb) == 0;
        if (na && nb) {
            *payload += !bits;
            continue;
        }
        if (na != nb || !bits) return 0;
    }
    return 1;
}

int nf_same_all(const char *what, const nf_case *c, const nf_out *a, const nf_out *b,
                size_t *payload) {
    const ta_dtype dt = c->p.dtype;
    int ok = 1;
#define NF_SAME(label, da, db, t, n)                                                             \
    if (!nf_same((t), (da), (db), (n), payload)) {                                               \
        ok = 0;                                                                                  \
        TA_CHECK(0, "%s: %s: %s differs (NaN positions or bits)", c->name, what, label);         \
    }
    NF_SAME("o", a->o, b->o, dt, c->n_o)
    NF_SAME("lse", a->lse, b->lse, TA_F32, c->n_lse)
    NF_SAME("dq", a->dq, b->dq, dt, c->n_q)
    NF_SAME("dk", a->dk, b->dk, dt, c->n_k)
    NF_SAME("dv", a->dv, b->dv, dt, c->n_v)
    if (c->n_w) NF_SAME("dconv_w", a->dw, b->dw, TA_F32, c->n_w)
#undef NF_SAME
    return ok;
}

/* Row class of (b, h, r) recomputed from the f32 scores, SDPA without a window:
 * the visible keys' s = scale * fmaf chain of the widened q, k rows. */
static int nf_sdpa_class(const nf_case *c, int32_t b, int32_t h, int32_t r) {
    const ta_problem *p = &c->p;
    const int32_t hk = h / (p->heads_q / p->heads_kv);
    const int32_t key_len = c->seqlens ? c->seqlens[b] : p->seq_k;
    const size_t q0 = (((size_t)b * (size_t)p->heads_q + (size_t)h) * (size_t)p->seq_q + (size_t)r) *
                      (size_t)p->head_dim;
    int32_t j, d, seen = 0;
    for (j = 0; j < key_len; ++j) {
        const size_t k0 =
            (((size_t)b * (size_t)p->heads_kv + (size_t)hk) * (size_t)p->seq_k + (size_t)j) *
            (size_t)p->head_dim;
        float acc = 0.0f, s;
        if ((p->flags & TA_CAUSAL) && j > r + p->seq_k - p->seq_q) break;
        for (d = 0; d < p->head_dim; ++d)
            acc = fmaf((float)ta_get(c->q, p->dtype, q0 + (size_t)d),
                       (float)ta_get(c->k, p->dtype, k0 + (size_t)d), acc);
        s = p->scale * acc;
        if (isnan(s) || s == INFINITY) return NF_NAN;
        seen |= s != -INFINITY;
    }
    return seen ? NF_FINITE : NF_EMPTY;
}

int nf_check_rules(const nf_case *c, const nf_out *out, size_t *nan_rows, size_t *empty_rows) {
    const ta_problem *p = &c->p;
    const ta_dtype dt = p->dtype;
    int exp[8], n_exp = 0, which, fails = 0;
    int32_t b, h, r, x;
    for (which = 0; which < nf_fixed_count() && !n_exp; ++which) { /* a fixed case's rows */
        nf_case tmp;
        ta_rng rr;
        int n;
        ta_rng_seed(&rr, 1);
        n = nf_fixed(which, &rr, &tmp, exp);
        if (strcmp(tmp.name, c->name) == 0) n_exp = n;
        nf_free_case(&tmp);
    }
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads_q; ++h)
            for (r = 0; r < p->seq_q; ++r) {
                const size_t row = ((size_t)b * (size_t)p->heads_q + (size_t)h) * (size_t)p->seq_q +
                                   (size_t)r;
                const float lse = out->lse[row];
                int o_nan = 0, o_zero = 0, dq_nan = 0, dq_zero = 0, cls;
                for (x = 0; x < p->head_dim_v; ++x) {
                    const double v = ta_get(out->o, dt, row * (size_t)p->head_dim_v + (size_t)x);
                    o_nan += isnan(v) != 0, o_zero += v == 0.0;
                }
                for (x = 0; x < p->head_dim; ++x) {
                    const double v = ta_get(out->dq, dt, row * (size_t)p->head_dim + (size_t)x);
                    dq_nan += isnan(v) != 0, dq_zero += v == 0.0;
                }
                cls = isnan(lse) ? NF_NAN : lse == -INFINITY ? NF_EMPTY : NF_FINITE;
                *nan_rows += cls == NF_NAN, *empty_rows += cls == NF_EMPTY;
                if (p->conv_q) /* MTA: dq of row i also sums the dC of rows below it */
                    dq_nan = p->head_dim, dq_zero = p->head_dim;
                if (cls == NF_NAN) {
                    fails += o_nan != p->head_dim_v || dq_nan != p->head_dim;
                    TA_CHECK(o_nan == p->head_dim_v && dq_nan == p->head_dim,
                             "%s: row %zu: lse NaN but %d of %d o, %d of %d dq elements NaN",
                             c->name, row, o_nan, (int)p->head_dim_v, dq_nan, (int)p->head_dim);
                } else if (cls == NF_EMPTY) {
                    fails += o_zero != p->head_dim_v || dq_zero != p->head_dim;
                    TA_CHECK(o_zero == p->head_dim_v && dq_zero == p->head_dim,
                             "%s: row %zu: lse -inf but o or dq not 0", c->name, row);
                } else {
                    fails += o_nan != 0 || !isfinite(lse);
                    TA_CHECK(o_nan == 0 && isfinite(lse), "%s: row %zu: lse %g with %d NaN in o",
                             c->name, row, (double)lse, o_nan);
                }
                if (row < (size_t)n_exp) {
                    fails += cls != exp[row];
                    TA_CHECK(cls == exp[row], "%s: row %zu: class %d, documented %d", c->name, row,
                             cls, exp[row]);
                } else if (!p->conv_q && !(p->flags & TA_WINDOW)) {
                    const int want = nf_sdpa_class(c, b, h, r);
                    fails += cls != want;
                    TA_CHECK(cls == want, "%s: row %zu: class %d, the recomputed scores give %d",
                             c->name, row, cls, want);
                }
            }
    return fails;
}
