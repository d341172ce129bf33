/* Shared parts of test_oracle_sdpa and test_oracle_mta (oracle_check.h). */
#include "oracle_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const ta_oc_tensor_name[TA_OC_TENSORS] = {"o", "lse", "dq", "dk", "dv", "dconv_w"};
const char *const ta_oc_dtype_name[3] = {"f32", "f16", "bf16"};

/* One rounding to the storage type: u_dt (f16 2^-11, bf16 2^-8), plus for f16
 * one subnormal step 2^-24 (below 2^-14 f16 rounds in absolute steps). */
static const double u_dtype[3] = {0.0, 4.8828125e-04 /* 2^-11 */, 3.90625e-03 /* 2^-8 */};
static const double floor_dtype[3] = {0.0, 5.9604644775390625e-08 /* 2^-24 */, 0.0};

/* ---------------------------------------------------------------------- */
/* Random problems                                                         */
/* ---------------------------------------------------------------------- */

int32_t ta_oc_pick_dim(ta_rng *r, const int32_t cuts[3]) {
    static const int32_t common[] = {32, 64, 96, 128};
    const int32_t c = ta_rng_int(r, 0, 99);
    if (c < cuts[0]) return ta_rng_int(r, 1, 16);
    if (c < cuts[1]) return common[ta_rng_int(r, 0, 3)];
    if (c < cuts[2]) return ta_rng_int(r, 1, 256);
    return ta_rng_int(r, 0, 1) ? 256 : 255;
}

void ta_oc_random_heads(ta_rng *r, ta_problem *p, const int32_t dim_cuts[3]) {
    p->batch = ta_rng_int(r, 0, 9) == 0 ? 3 : ta_rng_int(r, 1, 2);
    p->heads_kv = ta_rng_int(r, 1, 2);
    p->heads_q = p->heads_kv * ta_rng_int(r, 1, 3);
    p->head_dim = ta_oc_pick_dim(r, dim_cuts);
    p->head_dim_v = ta_rng_int(r, 0, 2) == 0 ? p->head_dim : ta_oc_pick_dim(r, dim_cuts);
    p->dtype = (ta_dtype)ta_rng_int(r, 0, 2);
}

void ta_oc_random_scale(ta_rng *r, ta_problem *p) {
    if (ta_rng_int(r, 0, 9) < 3) /* explicit scale, sometimes negative */
        p->scale = ta_rng_uniform(r, ta_rng_int(r, 0, 9) == 0 ? -2.0f : 0.25f, 2.0f) /
                   sqrtf((float)p->head_dim);
}

int ta_oc_make_tiling(const ta_problem *p, int32_t block_q, int32_t block_k, int pass,
                      ta_tiling *t) {
    const int st = ta_tiling_make(t, p->seq_q, p->seq_k, block_q, block_k, p->conv_q, p->conv_k,
                                  (p->flags & TA_CAUSAL) != 0, pass, 1);
    if (st == TA_OK && (p->flags & TA_WINDOW))
        ta_tiling_set_window(t, p->window_left, p->window_right);
    return st;
}

void ta_oc_random_seqlens(ta_rng *r, tcase *tc) {
    const ta_problem *p = &tc->p;
    int32_t b;
    if (ta_rng_int(r, 0, 9) < 4) {
        tc->seqlens = (int32_t *)malloc((size_t)p->batch * sizeof(int32_t));
        for (b = 0; b < p->batch; ++b) {
            const int32_t c = ta_rng_int(r, 0, 99);
            tc->seqlens[b] = c < 15 ? 0 : c < 40 ? p->seq_k : ta_rng_int(r, 1, p->seq_k);
        }
    }
}

void ta_oc_make_buffers(ta_rng *r, tcase *tc) {
    const ta_problem *p = &tc->p;
    const float a = ta_rng_uniform(r, 0.5f, 2.5f); /* q, k range: score spread */
    int t;
    tc->eb = ta_dtype_size(p->dtype);
    tc->n_lse = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    tc->n_q = tc->n_lse * (size_t)p->head_dim;
    tc->n_o = tc->n_lse * (size_t)p->head_dim_v;
    tc->n_k = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k * (size_t)p->head_dim;
    tc->n_v = tc->n_k / (size_t)p->head_dim * (size_t)p->head_dim_v;
    tc->n_w = (size_t)p->heads_q * (size_t)p->conv_q * (size_t)p->conv_k;
    tc->q = ta_test_alloc(tc->n_q * tc->eb);
    tc->k = ta_test_alloc(tc->n_k * tc->eb);
    tc->v = ta_test_alloc(tc->n_v * tc->eb);
    tc->d_o = ta_test_alloc(tc->n_o * tc->eb);
    if (tc->n_w) tc->conv_w = (float *)ta_test_alloc(tc->n_w * sizeof(float));
    ta_fill_uniform(r, tc->q, p->dtype, tc->n_q, -a, a);
    ta_fill_uniform(r, tc->k, p->dtype, tc->n_k, -a, a);
    ta_fill_uniform(r, tc->v, p->dtype, tc->n_v, -1.0f, 1.0f);
    ta_fill_uniform(r, tc->d_o, p->dtype, tc->n_o, -1.0f, 1.0f);
    tc->oq = ta_oracle_widen(tc->q, p->dtype, tc->n_q);
    tc->ok = ta_oracle_widen(tc->k, p->dtype, tc->n_k);
    tc->ov = ta_oracle_widen(tc->v, p->dtype, tc->n_v);
    tc->odo = ta_oracle_widen(tc->d_o, p->dtype, tc->n_o);
    {
        const size_t n[TA_OC_TENSORS] = {tc->n_o, tc->n_lse, tc->n_q, tc->n_k, tc->n_v, tc->n_w};
        for (t = 0; t < TA_OC_TENSORS; ++t) {
            tc->orc[t] = (double *)malloc((n[t] ? n[t] : 1) * sizeof(double));
            tc->mag[t] = (double *)malloc((n[t] ? n[t] : 1) * sizeof(double));
        }
    }
}

void ta_oc_free_case(tcase *tc) {
    void *const tf[] = {tc->q, tc->k, tc->v, tc->d_o, tc->conv_w};
    double *const df[] = {tc->oq, tc->ok, tc->ov, tc->odo, tc->ow};
    size_t i;
    for (i = 0; i < sizeof tf / sizeof tf[0]; ++i)
        ta_test_free(tf[i]);
    for (i = 0; i < sizeof df / sizeof df[0]; ++i)
        free(df[i]);
    for (i = 0; i < TA_OC_TENSORS; ++i) {
        free(tc->orc[i]);
        free(tc->mag[i]);
    }
    free(tc->seqlens);
}

void ta_oc_describe(const tcase *tc, char *buf, size_t n) {
    const ta_problem *p = &tc->p;
    char mid[64];
    if (p->conv_q)
        snprintf(mid, sizeof mid, "conv=%dx%d", p->conv_q, p->conv_k);
    else
        snprintf(mid, sizeof mid, "%s", (p->flags & TA_CAUSAL) ? "causal" : "full");
    if (p->flags & TA_WINDOW) {
        const size_t used = strlen(mid);
        snprintf(mid + used, sizeof mid - used, " win(%d,%d)", p->window_left, p->window_right);
    }
    snprintf(buf, n, "B=%d H=%d Hkv=%d Sq=%d Sk=%d D=%d Dv=%d %s %s bq=%d bk=%d scale=%g%s",
             p->batch, p->heads_q, p->heads_kv, p->seq_q, p->seq_k, p->head_dim, p->head_dim_v,
             ta_oc_dtype_name[p->dtype], mid, p->block_q, p->block_k, (double)p->scale,
             tc->seqlens ? " seqlens" : "");
}

/* ---------------------------------------------------------------------- */
/* Running the reference                                                   */
/* ---------------------------------------------------------------------- */

void ta_oc_alloc_out(const tcase *tc, run_out *out) {
    out->o = ta_test_alloc(tc->n_o * tc->eb);
    out->dq = ta_test_alloc(tc->n_q * tc->eb);
    out->dk = ta_test_alloc(tc->n_k * tc->eb);
    out->dv = ta_test_alloc(tc->n_v * tc->eb);
    out->lse = (float *)ta_test_alloc(tc->n_lse * sizeof(float));
    out->dw = tc->n_w ? (float *)ta_test_alloc(tc->n_w * sizeof(float)) : NULL;
}

void ta_oc_free_out(run_out *out) {
    ta_test_free(out->o);
    ta_test_free(out->dq);
    ta_test_free(out->dk);
    ta_test_free(out->dv);
    ta_test_free(out->lse);
    ta_test_free(out->dw);
}

void *ta_oc_workspace(ta_rng *r, size_t bytes, int kind) {
    unsigned char *ws = (unsigned char *)ta_test_alloc(bytes ? bytes : 64);
    size_t i;
    if (kind == 0)
        ta_poison(ws, bytes);
    else
        for (i = 0; i < bytes; ++i)
            ws[i] = (unsigned char)ta_rng_u64(r);
    return ws;
}

ta_status ta_oc_run_fwd_on(ta_backend be, ta_rng *r, const tcase *tc, const ta_problem *p,
                           run_out *out, int ws_kind, ta_trace *tr) {
    size_t bytes = 0;
    void *ws;
    ta_fwd_args fa;
    ta_status st;
    memset(&fa, 0, sizeof fa);
    ta_poison(out->o, tc->n_o * tc->eb);
    if (out->lse) ta_poison(out->lse, tc->n_lse * sizeof(float));
    st = ta_fwd_workspace_size(p, be, &bytes);
    if (st != TA_OK) return st;
    fa.q = tc->q, fa.k = tc->k, fa.v = tc->v, fa.seqlens_k = tc->seqlens;
    fa.conv_w = p->conv_q ? tc->conv_w : NULL;
    fa.o = out->o, fa.lse = out->lse, fa.trace = tr;
    ws = ta_oc_workspace(r, bytes, ws_kind);
    st = ta_fwd(p, be, &fa, ws, bytes, NULL);
    ta_test_free(ws);
    return st;
}

ta_status ta_oc_run_bwd_on(ta_backend be, ta_rng *r, const tcase *tc, const ta_problem *p,
                           const void *o, const float *lse, run_out *out, int ws_kind,
                           ta_trace *tr) {
    size_t bytes = 0;
    void *ws;
    ta_bwd_args ba;
    ta_status st;
    memset(&ba, 0, sizeof ba);
    ta_poison(out->dq, tc->n_q * tc->eb);
    ta_poison(out->dk, tc->n_k * tc->eb);
    ta_poison(out->dv, tc->n_v * tc->eb);
    if (out->dw) ta_poison(out->dw, tc->n_w * sizeof(float));
    st = ta_bwd_workspace_size(p, be, &bytes);
    if (st != TA_OK) return st;
    ba.q = tc->q, ba.k = tc->k, ba.v = tc->v, ba.o = o, ba.d_o = tc->d_o;
    ba.lse = lse, ba.seqlens_k = tc->seqlens, ba.trace = tr;
    ba.conv_w = p->conv_q ? tc->conv_w : NULL;
    ba.dq = out->dq, ba.dk = out->dk, ba.dv = out->dv;
    ba.dconv_w = p->conv_q ? out->dw : NULL;
    ws = ta_oc_workspace(r, bytes, ws_kind);
    st = ta_bwd(p, be, &ba, ws, bytes, NULL);
    ta_test_free(ws);
    return st;
}

ta_status ta_oc_run_fwd(ta_rng *r, const tcase *tc, const ta_problem *p, run_out *out, int ws_kind,
                        ta_trace *tr) {
    return ta_oc_run_fwd_on(TA_BACKEND_REF, r, tc, p, out, ws_kind, tr);
}

ta_status ta_oc_run_bwd(ta_rng *r, const tcase *tc, const ta_problem *p, const void *o,
                        const float *lse, run_out *out, int ws_kind, ta_trace *tr) {
    return ta_oc_run_bwd_on(TA_BACKEND_REF, r, tc, p, o, lse, out, ws_kind, tr);
}

ta_status ta_oc_run_step_on(ta_backend be, ta_rng *r, const tcase *tc, const ta_problem *p,
                            run_out *out, int ws_kind) {
    const ta_status st = ta_oc_run_fwd_on(be, r, tc, p, out, ws_kind, NULL);
    if (st != TA_OK) return st;
    return ta_oc_run_bwd_on(be, r, tc, p, out->o, out->lse, out, ws_kind, NULL);
}

ta_status ta_oc_run_step(ta_rng *r, const tcase *tc, const ta_problem *p, run_out *out, int ws_kind,
                         ta_trace *tr_fwd, ta_trace *tr_bwd) {
    const ta_status st = ta_oc_run_fwd(r, tc, p, out, ws_kind, tr_fwd);
    if (st != TA_OK) return st;
    return ta_oc_run_bwd(r, tc, p, out->o, out->lse, out, ws_kind, tr_bwd);
}

void ta_oc_run_oracle(tcase *tc, const void *o_stored_buf) {
    ta_oracle_in in;
    ta_oracle_grads g, gm;
    double *o_stored = NULL;
    double *const dw = tc->p.conv_q ? tc->orc[T_DW] : NULL;
    double *const dw_mag = tc->p.conv_q ? tc->mag[T_DW] : NULL;
    memset(&in, 0, sizeof in);
    in.q = tc->oq, in.k = tc->ok, in.v = tc->ov, in.seqlens_k = tc->seqlens, in.d_o = tc->odo;
    in.conv_w = tc->ow;
    TA_CHECK(ta_oracle_fwd(&tc->p, &in, tc->orc[T_O], tc->orc[T_LSE]) == 0, "oracle fwd");
    TA_CHECK(ta_oracle_fwd_mag(&tc->p, &in, tc->mag[T_O], tc->mag[T_LSE]) == 0, "oracle fwd mag");
    if (tc->p.dtype != TA_F32) o_stored = ta_oracle_widen(o_stored_buf, tc->p.dtype, tc->n_o);
    in.o = o_stored;
    g = (ta_oracle_grads){tc->orc[T_DQ], tc->orc[T_DK], tc->orc[T_DV], dw};
    gm = (ta_oracle_grads){tc->mag[T_DQ], tc->mag[T_DK], tc->mag[T_DV], dw_mag};
    TA_CHECK(ta_oracle_bwd_grads(&tc->p, &in, &g) == 0, "oracle bwd");
    TA_CHECK(ta_oracle_bwd_grads_mag(&tc->p, &in, &gm) == 0, "oracle bwd mag");
    free(o_stored);
}

/* ---------------------------------------------------------------------- */
/* Comparison                                                              */
/* ---------------------------------------------------------------------- */

void ta_oc_compare(const tcase *tc, int tensor, const void *ref, ta_dtype dt, size_t n, double tol,
                   int desc_masked, double *rel, double *cond) {
    const double *orc = tc->orc[tensor], *mag = tc->mag[tensor];
    const double t = tol, u = u_dtype[dt], fl = floor_dtype[dt];
    const char *const name = ta_oc_tensor_name[tensor];
    double max_or = 0.0, max_diff = 0.0, max_cond = 0.0;
    size_t i;
    int misses = 0;
    char desc[256];
    for (i = 0; i < n; ++i)
        if (isfinite(orc[i]) && fabs(orc[i]) > max_or) max_or = fabs(orc[i]);
    for (i = 0; i < n; ++i) {
        const double x = ta_get(ref, dt, i), diff = fabs(x - orc[i]);
        const double arith = (diff - u * fabs(orc[i]) - fl) / mag[i];
        if (isinf(orc[i]) || mag[i] == 0.0) { /* masked: exact */
            if (!(x == orc[i]) && misses++ < 3) {
                if (desc_masked) {
                    ta_oc_describe(tc, desc, sizeof desc);
                    TA_CHECK(0, "%s[%zu] = %g, oracle %g (masked) [%s]", name, i, x, orc[i], desc);
                } else {
                    TA_CHECK(0, "%s[%zu] = %g, oracle %g (masked)", name, i, x, orc[i]);
                }
            }
            continue;
        }
        if (!(arith <= t) && misses++ < 3) {
            ta_oc_describe(tc, desc, sizeof desc);
            TA_CHECK(0, "%s[%zu]: ref %.9g oracle %.9g magnitude %.3g: error %.3g > %.3g [%s]",
                     name, i, x, orc[i], mag[i], arith, t, desc);
        }
        if (!(diff <= max_diff) && !isnan(max_diff)) max_diff = diff; /* NaN sticks */
        if (!(arith <= max_cond) && !isnan(max_cond)) max_cond = arith;
    }
    *rel = max_diff / (max_or > 1e-30 ? max_or : 1e-30);
    *cond = max_cond;
}

void ta_oc_fold(err_max *acc, const err_max *e) {
    int i;
    for (i = 0; i < TA_OC_TENSORS; ++i) {
        if (!(e->rel[i] <= acc->rel[i]) && !isnan(acc->rel[i])) acc->rel[i] = e->rel[i];
        if (!(e->cond[i] <= acc->cond[i]) && !isnan(acc->cond[i])) acc->cond[i] = e->cond[i];
    }
}

void ta_oc_compare_all(const tcase *tc, const run_out *out, int fwd, int bwd, const double *tol,
                       int desc_masked, err_max *acc) {
    const ta_dtype dt = tc->p.dtype;
    const void *const ref[TA_OC_TENSORS] = {out->o, out->lse, out->dq, out->dk, out->dv, out->dw};
    const size_t n[TA_OC_TENSORS] = {tc->n_o, tc->n_lse, tc->n_q, tc->n_k, tc->n_v, tc->n_w};
    const ta_dtype rdt[TA_OC_TENSORS] = {dt, TA_F32, dt, dt, dt, TA_F32};
    err_max e;
    int t;
    memset(&e, 0, sizeof e);
    for (t = 0; t < TA_OC_TENSORS; ++t)
        if ((t < T_DQ ? fwd : bwd) && (t != T_DW || tc->p.conv_q))
            ta_oc_compare(tc, t, ref[t], rdt[t], n[t], tol[t], desc_masked, &e.rel[t], &e.cond[t]);
    ta_oc_fold(acc, &e);
}

/* ---------------------------------------------------------------------- */
/* Structural checks                                                       */
/* ---------------------------------------------------------------------- */

void ta_oc_check_masked(const tcase *tc, const run_out *out) {
    const ta_problem *p = &tc->p;
    int32_t b, h, r, j;
    size_t x;
    for (b = 0; b < p->batch; ++b) {
        const int32_t key_len = tc->seqlens ? tc->seqlens[b] : p->seq_k;
        for (h = 0; h < p->heads_q; ++h)
            for (r = 0; r < p->seq_q; ++r) {
                const size_t row =
                    ((size_t)b * (size_t)p->heads_q + (size_t)h) * (size_t)p->seq_q + (size_t)r;
                int zero = 1, sees = 0;
                for (j = 0; j < key_len && !sees; ++j)
                    sees = ta_oracle_sees(p, key_len, r, j);
                if (sees) continue;
                for (x = 0; x < (size_t)p->head_dim_v; ++x)
                    zero &= ta_get(out->o, p->dtype, row * (size_t)p->head_dim_v + x) == 0.0;
                for (x = 0; x < (size_t)p->head_dim; ++x)
                    zero &= ta_get(out->dq, p->dtype, row * (size_t)p->head_dim + x) == 0.0;
                TA_CHECK(zero && out->lse[row] == -INFINITY, "masked row b=%d h=%d r=%d", b, h, r);
            }
        for (h = 0; h < p->heads_kv; ++h)
            for (j = 0; j < p->seq_k; ++j) {
                const size_t row =
                    ((size_t)b * (size_t)p->heads_kv + (size_t)h) * (size_t)p->seq_k + (size_t)j;
                int zero = 1, seen = 0;
                for (r = 0; r < p->seq_q && !seen; ++r)
                    seen = ta_oracle_sees(p, key_len, r, j);
                if (seen) continue;
                for (x = 0; x < (size_t)p->head_dim; ++x)
                    zero &= ta_get(out->dk, p->dtype, row * (size_t)p->head_dim + x) == 0.0;
                for (x = 0; x < (size_t)p->head_dim_v; ++x)
                    zero &= ta_get(out->dv, p->dtype, row * (size_t)p->head_dim_v + x) == 0.0;
                TA_CHECK(zero, "unseen key b=%d hkv=%d j=%d: dk/dv not 0", b, h, j);
            }
    }
}

int ta_oc_same_fwd(const tcase *tc, const run_out *a, const run_out *b) {
    return memcmp(a->o, b->o, tc->n_o * tc->eb) == 0 &&
           memcmp(a->lse, b->lse, tc->n_lse * sizeof(float)) == 0;
}

int ta_oc_same_dqkv(const tcase *tc, const run_out *a, const run_out *b) {
    return memcmp(a->dq, b->dq, tc->n_q * tc->eb) == 0 &&
           memcmp(a->dk, b->dk, tc->n_k * tc->eb) == 0 &&
           memcmp(a->dv, b->dv, tc->n_v * tc->eb) == 0;
}

int ta_oc_same_outputs(const tcase *tc, const run_out *a, const run_out *b) {
    return ta_oc_same_fwd(tc, a, b) && ta_oc_same_dqkv(tc, a, b) &&
           (!tc->n_w || memcmp(a->dw, b->dw, tc->n_w * sizeof(float)) == 0);
}

size_t ta_oc_check_fwd_trace(const tcase *tc, const ta_tiling *t, const ta_trace *tf) {
    const ta_problem *p = &tc->p;
    int32_t b, h, qt, kt;
    size_t n = 0;
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads_q; ++h)
            for (qt = 0; qt < t->num_q_tiles; ++qt)
                for (kt = ta_tile_k_begin(t, qt, tc->seqlens ? tc->seqlens[b] : p->seq_k);
                     kt < ta_tile_k_end(t, qt, tc->seqlens ? tc->seqlens[b] : p->seq_k);
                     ++kt, ++n) {
                    const ta_trace_entry *e = n < tf->count ? &tf->entries[n] : NULL;
                    TA_CHECK(e && e->batch == b && e->head == h && e->q_tile == qt &&
                                 e->k_tile == kt && e->pass == TA_PASS_FWD,
                             "fwd trace entry %zu", n);
                }
    TA_CHECK(n == tf->count, "fwd trace count %zu, expected %zu", tf->count, n);
    return n;
}

size_t ta_oc_cell(const ta_problem *p, const ta_tiling *t, int32_t b, int32_t h, int32_t qt,
                  int32_t kt) {
    return (((size_t)b * (size_t)p->heads_q + (size_t)h) * (size_t)t->num_q_tiles + (size_t)qt) *
               (size_t)t->num_k_tiles +
           (size_t)kt;
}

/* ---------------------------------------------------------------------- */
/* Finite differences on the oracle                                        */
/* ---------------------------------------------------------------------- */

void ta_oc_shape_problem(ta_problem *p, const int32_t *row, int conv) {
    memset(p, 0, sizeof *p);
    p->batch = row[0], p->heads_q = row[1], p->heads_kv = row[2];
    p->seq_q = row[3], p->seq_k = row[4];
    p->head_dim = row[5], p->head_dim_v = row[6];
    if (conv) p->conv_q = row[7], p->conv_k = row[8];
}

typedef struct fd_prob {
    ta_problem p;
    ta_oracle_in in;
    double *x[4]; /* q, k, v, w: the inputs the loss is differentiated by */
    size_t n[4];
    double *o;
} fd_prob;

static double fd_loss(fd_prob *f) {
    const size_t n =
        (size_t)f->p.batch * (size_t)f->p.heads_q * (size_t)f->p.seq_q * (size_t)f->p.head_dim_v;
    double l = 0.0;
    size_t i;
    ta_oracle_fwd(&f->p, &f->in, f->o, NULL);
    for (i = 0; i < n; ++i)
        l += f->o[i] * f->in.d_o[i];
    return l;
}

/* Central differences of L = <dO, o> w.r.t. every element of input t, against g. */
static double fd_tensor(fd_prob *f, int t, const double *g) {
    const double step = 1e-5;
    double max_g = 0.0, max_err = 0.0;
    size_t i;
    for (i = 0; i < f->n[t]; ++i) {
        const double x0 = f->x[t][i];
        double lp, lm, err;
        f->x[t][i] = x0 + step;
        lp = fd_loss(f);
        f->x[t][i] = x0 - step;
        lm = fd_loss(f);
        f->x[t][i] = x0;
        err = fabs((lp - lm) / (2.0 * step) - g[i]);
        if (err > max_err) max_err = err;
        if (fabs(g[i]) > max_g) max_g = fabs(g[i]);
    }
    return max_err / (max_g > 1e-30 ? max_g : 1e-30);
}

void ta_oc_fd_check(ta_rng *r, const ta_problem *p, const int32_t *seqlens, double e[4]) {
    const size_t n_lse = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    const size_t n_k = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k;
    const int inputs = p->conv_q ? 4 : 3;
    double *grad[4] = {NULL, NULL, NULL, NULL};
    double *d_o;
    fd_prob f;
    ta_oracle_grads g;
    size_t i, no;
    int t;
    memset(&f, 0, sizeof f);
    f.p = *p;
    f.n[0] = n_lse * (size_t)p->head_dim;
    f.n[1] = n_k * (size_t)p->head_dim;
    f.n[2] = n_k * (size_t)p->head_dim_v;
    f.n[3] = (size_t)p->heads_q * (size_t)p->conv_q * (size_t)p->conv_k;
    no = n_lse * (size_t)p->head_dim_v;
    for (t = 0; t < inputs; ++t) {
        const double a = t < 2 ? 1.5 : t == 2 ? 1.0 : 0.6;
        f.x[t] = (double *)malloc(f.n[t] * sizeof(double));
        grad[t] = (double *)malloc(f.n[t] * sizeof(double));
        for (i = 0; i < f.n[t]; ++i)
            f.x[t][i] = (double)ta_rng_uniform(r, (float)-a, (float)a);
    }
    d_o = (double *)malloc(no * sizeof(double));
    f.o = (double *)malloc(no * sizeof(double));
    for (i = 0; i < no; ++i)
        d_o[i] = (double)ta_rng_uniform(r, -1.0f, 1.0f);
    f.in.q = f.x[0], f.in.k = f.x[1], f.in.v = f.x[2], f.in.conv_w = f.x[3];
    f.in.d_o = d_o, f.in.seqlens_k = seqlens;
    g = (ta_oracle_grads){grad[0], grad[1], grad[2], grad[3]};
    TA_CHECK(ta_oracle_bwd_grads(p, &f.in, &g) == 0, "oracle bwd");
    for (t = 0; t < 4; ++t)
        e[t] = t < inputs ? fd_tensor(&f, t, grad[t]) : 0.0;
    for (t = 0; t < 4; ++t) {
        free(f.x[t]);
        free(grad[t]);
    }
    free(d_o);
    free(f.o);
}

/* ---------------------------------------------------------------------- */
/* Report                                                                  */
/* ---------------------------------------------------------------------- */

void ta_oc_print_table(const char *title, const err_max *e, int n_tensors, int cond,
                       const long *counts) {
    int dt, t;
    printf("  %s\n  %-5s %6s", title, "dtype", counts ? "cases" : "");
    for (t = 0; t < n_tensors; ++t)
        printf(" %10s", ta_oc_tensor_name[t]);
    printf("\n");
    for (dt = 0; dt < 3; ++dt) {
        if (counts)
            printf("  %-5s %6ld", ta_oc_dtype_name[dt], counts[dt]);
        else
            printf("  %-5s %6s", ta_oc_dtype_name[dt], "");
        for (t = 0; t < n_tensors; ++t)
            printf(" %10.3g", cond ? e[dt].cond[t] : e[dt].rel[t]);
        printf("\n");
    }
}
