/*
 * Reference SDPA backward: the executable specification of the tiled backward
 * (FlashAttention-2 recomputation from lse; no stored probabilities). Scalar
 * C11, no threads, no intrinsics. The arithmetic is the contract
 * (docs/reference.md); it mirrors the forward step by step:
 *
 *   forward                               backward
 *   s_ij = scale * <q_i, k_j>             s_ij recomputed by the same ta_ref_scores
 *   p_ij = exp(s_ij - m_i) / l_i          P_ij = exp(s_ij - lse_i)  (one ta_exp, no division)
 *   o_i  = sum_j p_ij v_j                 dV_j = sum_(h, i) P_ij dO_i
 *                                         dP_ij = <dO_i, v_j>,  D_i = <dO_i, o_i>
 *                                         dS_ij = P_ij (dP_ij - D_i)
 *   (s_ij = scale <q_i, k_j>)             dK_j = scale * sum_(h, i) dS_ij q_i
 *                                         dQ_i = scale * sum_j dS_ij k_j
 *
 * Two passes over plan->bwd, each sum in one accumulator, ascending:
 *   pass 1 (dk/dv): K tiles outer; for each, query heads of the kv group
 *                   ascending, then Q tiles from ta_tile_q_begin ascending.
 *   pass 2 (dq):    Q tiles outer; K tiles [0, ta_tile_k_end) ascending.
 * Both passes recompute P and dS with the same function, so they agree bitwise.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "ta_internal.h"
#include "ta_math.h"
#include "ta_ref.h"

/*
 * Backward workspace, all f32, every region 64-byte aligned:
 *
 *   +---------+-----------+---------+-----------+-----------+-----------+-----+-------+
 *   | q       | d_o       | k       | v         | p         | ds        | lse | delta |
 *   | B_q x D | B_q x D_v | B_k x D | B_k x D_v | B_q x B_k | B_q x B_k | B_q | B_q   |
 *   +---------+-----------+---------+-----------+-----------+-----------+-----+-------+
 *   | dk_acc  | dv_acc    | dq_acc  |
 *   | B_k x D | B_k x D_v | B_q x D |
 *   +---------+-----------+---------+
 *
 *   bytes = sum over regions of round_up(4 * elements, 64): O(tile), never O(S).
 */
typedef struct ta_ref_bwd_ws {
    float *q;      /* [B_q, D]    Q tile, widened */
    float *d_o;    /* [B_q, D_v]  dO tile, widened */
    float *k;      /* [B_k, D]    K tile */
    float *v;      /* [B_k, D_v]  V tile */
    float *p;      /* [B_q, B_k]  scores, overwritten by P (live entries only) */
    float *ds;     /* [B_q, B_k]  dS (live entries only) */
    float *lse;    /* [B_q]       lse of the tile's rows (from the forward) */
    float *delta;  /* [B_q]       D_i = <dO_i, o_i> */
    float *dk_acc; /* [B_k, D]    pass 1: sum_(h, i) dS_ij q_i */
    float *dv_acc; /* [B_k, D_v]  pass 1: sum_(h, i) P_ij dO_i */
    float *dq_acc; /* [B_q, D]    pass 2: sum_j dS_ij k_j */
} ta_ref_bwd_ws;

/* The one layout routine: sizes (base NULL) and carves (base set) the workspace. */
static ta_status ta_ref_bwd_layout(const ta_plan *plan, void *base, ta_ref_bwd_ws *ws,
                                   size_t *bytes) {
    const size_t bq = (size_t)plan->bwd.block_q, bk = (size_t)plan->bwd.block_k;
    const size_t d = (size_t)plan->p.head_dim, dv = (size_t)plan->p.head_dim_v;
    ta_ws_cursor c;
    ta_ws_begin(&c, base);
    ws->q = TA_WS_TAKE(&c, float, (bq * d));
    ws->d_o = TA_WS_TAKE(&c, float, (bq * dv));
    ws->k = TA_WS_TAKE(&c, float, (bk * d));
    ws->v = TA_WS_TAKE(&c, float, (bk * dv));
    ws->p = TA_WS_TAKE(&c, float, (bq * bk));
    ws->ds = TA_WS_TAKE(&c, float, (bq * bk));
    ws->lse = TA_WS_TAKE(&c, float, bq);
    ws->delta = TA_WS_TAKE(&c, float, bq);
    ws->dk_acc = TA_WS_TAKE(&c, float, (bk * d));
    ws->dv_acc = TA_WS_TAKE(&c, float, (bk * dv));
    ws->dq_acc = TA_WS_TAKE(&c, float, (bq * d));
    if (c.overflow) return TA_ERR_OVERFLOW;
    *bytes = c.used;
    return TA_OK;
}

ta_status ta_ref_bwd_workspace_size(const ta_plan *plan, size_t *bytes) {
    ta_ref_bwd_ws ws;
    return ta_ref_bwd_layout(plan, NULL, &ws, bytes);
}

/* An entry takes part in the backward iff it is visible and its row saw a key
 * in the forward (lse > -inf). A row with lse = -inf contributes nothing, so
 * it can never turn into exp(s + inf) = inf and then NaN. */
static int ta_ref_bwd_live(const ta_plan *plan, const ta_ref_bwd_ws *ws, const ta_ref_step *st,
                           int32_t i, int32_t j) {
    return ws->lse[i] != -INFINITY && ta_ref_visible(&plan->bwd, st, i, j);
}

/* Q-side tiles of step st: q [rows, D], d_o [rows, D_v] widened, lse [rows],
 * and D_i = sum_d fmaf(dO_id, o_id, acc) from +0, d ascending, o read from the
 * stored (rounded) forward output and widened. */
static void ta_ref_bwd_load_q(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws,
                              const ta_ref_step *st) {
    const ta_problem *p = &plan->p;
    const int32_t d_qk = p->head_dim, dv = p->head_dim_v;
    const size_t row0 = ta_ref_q_row(plan, st->batch, st->head, st->row_begin);
    int32_t i, d;
    ta_ref_widen(ws->q, a->q, p->dtype, row0 * (size_t)d_qk, (size_t)st->rows * (size_t)d_qk);
    ta_ref_widen(ws->d_o, a->d_o, p->dtype, row0 * (size_t)dv, (size_t)st->rows * (size_t)dv);
    for (i = 0; i < st->rows; ++i) {
        const float *do_row = ws->d_o + (size_t)i * (size_t)dv; /* [D_v] */
        const size_t o_first = (row0 + (size_t)i) * (size_t)dv;
        float acc = 0.0f;
        for (d = 0; d < dv; ++d)
            acc = TA_FMAF(do_row[d], ta_load(a->o, p->dtype, o_first + (size_t)d), acc);
        ws->delta[i] = acc;
        ws->lse[i] = a->lse[row0 + (size_t)i];
    }
}

/*
 * The recomputation shared by both passes, for every live entry of the tile:
 *   s_ij  = scale * <q_i, k_j>        (ta_ref_scores, as in the forward)
 *   P_ij  = ta_exp(s_ij - lse_i)
 *   dP_ij = <dO_i, v_j>               (fmaf, d ascending, from +0)
 *   dS_ij = P_ij * (dP_ij - D_i)
 */
static void ta_ref_bwd_probs(const ta_plan *plan, const ta_ref_bwd_ws *ws, const ta_ref_step *st) {
    const int32_t dv = plan->p.head_dim_v, ld = plan->bwd.block_k;
    int32_t i, j;
    ta_ref_scores(ws->p, ld, ws->q, ws->k, plan->p.head_dim, plan->p.scale, &plan->bwd, st);
    for (i = 0; i < st->rows; ++i) {
        float *p_row = ws->p + (size_t)i * (size_t)ld;          /* [cols] */
        float *ds_row = ws->ds + (size_t)i * (size_t)ld;        /* [cols] */
        const float *do_row = ws->d_o + (size_t)i * (size_t)dv; /* [D_v] */
        for (j = 0; j < st->cols; ++j) {
            float dp;
            if (!ta_ref_bwd_live(plan, ws, st, i, j)) continue;
            p_row[j] = ta_exp(p_row[j] - ws->lse[i]);
            dp = ta_ref_dot(do_row, ws->v + (size_t)j * (size_t)dv, dv);
            ds_row[j] = p_row[j] * (dp - ws->delta[i]);
        }
    }
}

/* Pass 1 accumulation for one (h, Q tile): for each key j of the tile, rows
 * i ascending: dv_acc_j = fmaf(P_ij, dO_i, dv_acc_j), dk_acc_j = fmaf(dS_ij, q_i, dk_acc_j). */
static void ta_ref_bwd_accum_dkdv(const ta_plan *plan, const ta_ref_bwd_ws *ws,
                                  const ta_ref_step *st) {
    const int32_t d_qk = plan->p.head_dim, dv = plan->p.head_dim_v, ld = plan->bwd.block_k;
    int32_t i, j, d;
    for (j = 0; j < st->cols; ++j) {
        float *dk_row = ws->dk_acc + (size_t)j * (size_t)d_qk; /* [D] */
        float *dv_row = ws->dv_acc + (size_t)j * (size_t)dv;   /* [D_v] */
        for (i = 0; i < st->rows; ++i) {
            const float *do_row = ws->d_o + (size_t)i * (size_t)dv; /* [D_v] */
            const float *q_row = ws->q + (size_t)i * (size_t)d_qk;  /* [D] */
            float p_ij, ds_ij;
            if (!ta_ref_bwd_live(plan, ws, st, i, j)) continue;
            p_ij = ws->p[(size_t)i * (size_t)ld + (size_t)j];
            ds_ij = ws->ds[(size_t)i * (size_t)ld + (size_t)j];
            for (d = 0; d < dv; ++d)
                dv_row[d] = TA_FMAF(p_ij, do_row[d], dv_row[d]);
            for (d = 0; d < d_qk; ++d)
                dk_row[d] = TA_FMAF(ds_ij, q_row[d], dk_row[d]);
        }
    }
}

/* Pass 1 store for K tile st: dk_j = scale * dk_acc_j, dv_j = dv_acc_j, each
 * rounded once to the storage type. Keys nobody sees store 0. */
static void ta_ref_bwd_store_dkdv(const ta_plan *plan, const ta_bwd_args *a,
                                  const ta_ref_bwd_ws *ws, const ta_ref_step *st) {
    const ta_problem *p = &plan->p;
    const size_t d_qk = (size_t)p->head_dim, dv = (size_t)p->head_dim_v;
    const size_t row0 = ta_ref_k_row(plan, st->batch, st->head_kv, st->col_begin);
    const size_t cols = (size_t)st->cols;
    size_t n;
    for (n = 0; n < cols * d_qk; ++n)
        ta_store(a->dk, p->dtype, row0 * d_qk + n, p->scale * ws->dk_acc[n]);
    for (n = 0; n < cols * dv; ++n)
        ta_store(a->dv, p->dtype, row0 * dv + n, ws->dv_acc[n]);
}

/* Pass 1 for one (b, kv head, K tile): the kv group's query heads ascending,
 * then Q tiles from the first that sees this K tile, ascending. */
static void ta_ref_bwd_k_tile(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws,
                              ta_ref_step *st) {
    const ta_tiling *t = &plan->bwd;
    const size_t n_dk = (size_t)st->cols * (size_t)plan->p.head_dim;
    const size_t n_dv = (size_t)st->cols * (size_t)plan->p.head_dim_v;
    const int32_t q_begin = ta_tile_q_begin(t, st->k_tile, st->key_len);
    int32_t g, qt;
    size_t n;
    /* step 1: K, V tiles; zero the dk, dv accumulators */
    ta_ref_load_kv(plan, a->k, a->v, ws->k, ws->v, st);
    for (n = 0; n < n_dk; ++n)
        ws->dk_acc[n] = 0.0f;
    for (n = 0; n < n_dv; ++n)
        ws->dv_acc[n] = 0.0f;
    /* step 2: heads of the group ascending, then Q tiles ascending */
    for (g = 0; g < plan->group; ++g) {
        st->head = st->head_kv * plan->group + g;
        for (qt = q_begin; qt < t->num_q_tiles; ++qt) {
            ta_ref_step_rows(t, st, qt);
            ta_trace_add(a->trace, TA_PASS_BWD_DKDV, st->batch, st->head, qt, st->k_tile);
            ta_ref_bwd_load_q(plan, a, ws, st);
            ta_ref_bwd_probs(plan, ws, st);
            ta_ref_bwd_accum_dkdv(plan, ws, st);
        }
    }
    /* step 3: scale dk, round both once */
    ta_ref_bwd_store_dkdv(plan, a, ws, st);
}

/* Pass 2 for one (b, h, Q tile): dq_acc_i = fmaf(dS_ij, k_j, dq_acc_i) over
 * K tiles [0, k_end) and columns j ascending; dq_i = scale * dq_acc_i rounded
 * once. Rows that saw no key store 0 (times scale). */
static void ta_ref_bwd_q_tile(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws,
                              ta_ref_step *st) {
    const ta_problem *p = &plan->p;
    const int32_t d_qk = p->head_dim, ld = plan->bwd.block_k;
    const size_t n_dq = (size_t)st->rows * (size_t)d_qk;
    const int32_t k_end = ta_tile_k_end(&plan->bwd, st->q_tile, st->key_len);
    int32_t kt, i, j, d;
    size_t n;
    /* step 1: Q, dO, lse, D tiles; zero the dq accumulator */
    ta_ref_bwd_load_q(plan, a, ws, st);
    for (n = 0; n < n_dq; ++n)
        ws->dq_acc[n] = 0.0f;
    /* step 2: K tiles ascending, recompute P and dS, accumulate dS k */
    for (kt = 0; kt < k_end; ++kt) {
        ta_ref_step_cols(&plan->bwd, st, kt);
        ta_trace_add(a->trace, TA_PASS_BWD_DQ, st->batch, st->head, st->q_tile, kt);
        ta_ref_load_kv(plan, a->k, a->v, ws->k, ws->v, st);
        ta_ref_bwd_probs(plan, ws, st);
        for (i = 0; i < st->rows; ++i) {
            float *dq_row = ws->dq_acc + (size_t)i * (size_t)d_qk; /* [D] */
            for (j = 0; j < st->cols; ++j) {
                const float *k_row = ws->k + (size_t)j * (size_t)d_qk; /* [D] */
                float ds_ij;
                if (!ta_ref_bwd_live(plan, ws, st, i, j)) continue;
                ds_ij = ws->ds[(size_t)i * (size_t)ld + (size_t)j];
                for (d = 0; d < d_qk; ++d)
                    dq_row[d] = TA_FMAF(ds_ij, k_row[d], dq_row[d]);
            }
        }
    }
    /* step 3: scale, round once */
    {
        const size_t first = ta_ref_q_row(plan, st->batch, st->head, st->row_begin) * (size_t)d_qk;
        for (n = 0; n < n_dq; ++n)
            ta_store(a->dq, p->dtype, first + n, p->scale * ws->dq_acc[n]);
    }
}

/* Pass 1 over every (b, kv head, K tile), then pass 2 over every (b, h, Q tile). */
ta_status ta_ref_bwd(const ta_plan *plan, const ta_bwd_args *a, void *workspace,
                     void *stream) {
    const ta_problem *p = &plan->p;
    const ta_tiling *t = &plan->bwd;
    ta_ref_bwd_ws ws;
    ta_ref_step st;
    size_t bytes;
    int32_t b, h, kt, qt;
    const ta_status status = ta_ref_bwd_layout(plan, workspace, &ws, &bytes);
    (void)stream; /* host backend: NULL (validated) */
    if (status != TA_OK) return status;
    if (a->trace) a->trace->count = 0;
    /* pass 1: dk, dv; K tiles outer */
    for (b = 0; b < p->batch; ++b) {
        st.batch = b;
        st.key_len = ta_ref_key_len(plan, a->seqlens_k, b);
        for (h = 0; h < p->heads_kv; ++h) {
            st.head_kv = h;
            for (kt = 0; kt < t->num_k_tiles; ++kt) {
                ta_ref_step_cols(t, &st, kt);
                ta_ref_bwd_k_tile(plan, a, &ws, &st);
            }
        }
    }
    /* pass 2: dq; Q tiles outer */
    for (b = 0; b < p->batch; ++b) {
        st.batch = b;
        st.key_len = ta_ref_key_len(plan, a->seqlens_k, b);
        for (h = 0; h < p->heads_q; ++h) {
            st.head = h;
            st.head_kv = h / plan->group; /* GQA: query head h reads kv head h / group */
            for (qt = 0; qt < t->num_q_tiles; ++qt) {
                ta_ref_step_rows(t, &st, qt);
                ta_ref_bwd_q_tile(plan, a, &ws, &st);
            }
        }
    }
    return TA_OK;
}
