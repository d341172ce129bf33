/*
 * Reference SDPA forward: the executable specification of the tiled forward
 * (FlashAttention online softmax, lse). Scalar C11, no threads, no intrinsics.
 * Every other backend must reproduce these bits for the same block_k; the
 * arithmetic below is the contract, written out in docs/reference.md.
 *
 * For each (batch b, query head h, Q tile qt) of plan->fwd:
 *   1. load the Q tile (widened to f32); m = -inf, l = 0, acc = 0 per row
 *   2. for each K tile kt in [0, ta_tile_k_end) ascending:
 *        s_ij = scale * dot(q_i, k_j)           (visible entries only)
 *        online softmax update of m, l, acc     (rescale at this tile boundary)
 *   3. o_i = acc_i / l_i, lse_i = m_i + log(l_i); rows that saw no key: 0, -inf
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "ta_internal.h"
#include "ta_math.h"
#include "ta_ref.h"

/*
 * Forward workspace: the tiles of one (b, h, Q tile) step, all f32.
 *
 *   +---------+---------+-----------+----------+-----------+-------+-------+
 *   | q       | k       | v         | s        | acc       | m     | l     |
 *   | B_q x D | B_k x D | B_k x D_v | B_q x B_k| B_q x D_v | B_q   | B_q   |
 *   +---------+---------+-----------+----------+-----------+-------+-------+
 *   each region starts on a 64-byte boundary (ta_ws_take)
 *
 *   bytes = sum over regions of round_up(4 * elements, 64): O(tile), never O(S).
 */
typedef struct ta_ref_fwd_ws {
    float *q;       /* [B_q, D]    Q tile, widened */
    float *k;       /* [B_k, D]    K tile, widened */
    float *v;       /* [B_k, D_v]  V tile, widened */
    float *s;       /* [B_q, B_k]  scores, overwritten by p = exp(s - m) (visible only) */
    float *acc;     /* [B_q, D_v]  unnormalised output sum_j p_j v_j */
    float *row_max; /* [B_q]       running max m; -inf until a visible key is seen */
    float *row_sum; /* [B_q]       running sum l */
} ta_ref_fwd_ws;

/* The one layout routine: sizes (base NULL) and carves (base set) the workspace. */
static ta_status ta_ref_fwd_layout(const ta_plan *plan, void *base, ta_ref_fwd_ws *ws,
                                   size_t *bytes) {
    const size_t bq = (size_t)plan->fwd.block_q, bk = (size_t)plan->fwd.block_k;
    const size_t d = (size_t)plan->p.head_dim, dv = (size_t)plan->p.head_dim_v;
    ta_ws_cursor c;
    ta_ws_begin(&c, base);
    ws->q = TA_WS_TAKE(&c, float, (bq * d));
    ws->k = TA_WS_TAKE(&c, float, (bk * d));
    ws->v = TA_WS_TAKE(&c, float, (bk * dv));
    ws->s = TA_WS_TAKE(&c, float, (bq * bk));
    ws->acc = TA_WS_TAKE(&c, float, (bq * dv));
    ws->row_max = TA_WS_TAKE(&c, float, bq);
    ws->row_sum = TA_WS_TAKE(&c, float, bq);
    if (c.overflow) return TA_ERR_OVERFLOW;
    *bytes = c.used;
    return TA_OK;
}

ta_status ta_ref_fwd_workspace_size(const ta_plan *plan, size_t *bytes) {
    ta_ref_fwd_ws ws;
    return ta_ref_fwd_layout(plan, NULL, &ws, bytes);
}

/*
 * Online softmax over one K tile, for every row of the Q tile. Per row i,
 * with J = the visible columns of this tile (rows with J empty are skipped):
 *   m_new = max(m, max_{j in J} s_ij)
 *   alpha = exp(m - m_new)                  (m = -inf gives exp(-inf) = 0)
 *   l     = l * alpha;  then l = l + p_j,   p_j = exp(s_ij - m_new), j in J ascending
 *   acc_d = acc_d * alpha; then acc_d = fmaf(p_j, v_jd, acc_d), j in J ascending
 * exp is ta_exp. The row's s_ij are overwritten by p_j.
 */
static void ta_ref_fwd_softmax_tile(const ta_plan *plan, const ta_ref_fwd_ws *ws,
                                    const ta_ref_step *st) {
    const ta_tiling *t = &plan->fwd;
    const int32_t dv = plan->p.head_dim_v, ld_s = t->block_k;
    int32_t i, j, d;
    for (i = 0; i < st->rows; ++i) {
        float *s_row = ws->s + (size_t)i * (size_t)ld_s;   /* [cols] */
        float *acc_row = ws->acc + (size_t)i * (size_t)dv; /* [D_v] */
        float m_tile = -INFINITY, m_new, alpha, l;
        int any = 0;
        /* step a: the tile's max over visible entries */
        for (j = 0; j < st->cols; ++j) {
            if (!ta_ref_visible(t, st, i, j)) continue;
            if (!any || s_row[j] > m_tile) m_tile = s_row[j];
            any = 1;
        }
        if (!any) continue; /* nothing visible in this tile for this row */
        /* step b: new max and the rescale factor of the old sums */
        m_new = ws->row_max[i] > m_tile ? ws->row_max[i] : m_tile;
        alpha = ta_exp(ws->row_max[i] - m_new);
        /* step c: l = l*alpha + sum_j p_j, ascending j */
        l = ws->row_sum[i] * alpha;
        for (j = 0; j < st->cols; ++j) {
            if (!ta_ref_visible(t, st, i, j)) continue;
            s_row[j] = ta_exp(s_row[j] - m_new);
            l = l + s_row[j];
        }
        ws->row_max[i] = m_new;
        ws->row_sum[i] = l;
        /* step d: acc = acc*alpha, then acc += p_j v_j by fmaf, ascending j */
        for (d = 0; d < dv; ++d)
            acc_row[d] = acc_row[d] * alpha;
        for (j = 0; j < st->cols; ++j) {
            const float *v_row = ws->v + (size_t)j * (size_t)dv; /* [D_v] */
            if (!ta_ref_visible(t, st, i, j)) continue;
            for (d = 0; d < dv; ++d)
                acc_row[d] = TA_FMAF(s_row[j], v_row[d], acc_row[d]);
        }
    }
}

/* Step 3: o_i = acc_i / l_i (a true division), lse_i = m_i + ta_log(l_i), each
 * rounded once to the storage type by ta_store. A row that saw no key
 * (m still -inf) stores o = 0 and lse = -inf. */
static void ta_ref_fwd_store(const ta_plan *plan, const ta_fwd_args *a, const ta_ref_fwd_ws *ws,
                             const ta_ref_step *st) {
    const ta_problem *p = &plan->p;
    const int32_t dv = p->head_dim_v;
    int32_t i, d;
    for (i = 0; i < st->rows; ++i) {
        const size_t row = ta_ref_q_row(plan, st->batch, st->head, st->row_begin + i);
        const float *acc_row = ws->acc + (size_t)i * (size_t)dv; /* [D_v] */
        const float m = ws->row_max[i], l = ws->row_sum[i];
        const int seen = m != -INFINITY;
        for (d = 0; d < dv; ++d)
            ta_store(a->o, p->dtype, row * (size_t)dv + (size_t)d, seen ? acc_row[d] / l : 0.0f);
        if (a->lse) a->lse[row] = seen ? m + ta_log(l) : -INFINITY;
    }
}

/* Steps 1-3 for one (b, h, Q tile). */
static void ta_ref_fwd_q_tile(const ta_plan *plan, const ta_fwd_args *a, const ta_ref_fwd_ws *ws,
                              ta_ref_step *st) {
    const ta_problem *p = &plan->p;
    const int32_t d_qk = p->head_dim, dv = p->head_dim_v;
    int32_t i, d, kt, k_end;
    /* step 1: Q tile [rows, D] widened; m = -inf, l = 0, acc = 0 */
    ta_ref_widen(ws->q, a->q, p->dtype,
                 ta_ref_q_row(plan, st->batch, st->head, st->row_begin) * (size_t)d_qk,
                 (size_t)st->rows * (size_t)d_qk);
    for (i = 0; i < st->rows; ++i) {
        ws->row_max[i] = -INFINITY;
        ws->row_sum[i] = 0.0f;
        for (d = 0; d < dv; ++d)
            ws->acc[(size_t)i * (size_t)dv + (size_t)d] = 0.0f;
    }
    /* step 2: K tiles [0, k_end) ascending; tiles past k_end are fully masked */
    k_end = ta_tile_k_end(&plan->fwd, st->q_tile, st->key_len);
    for (kt = 0; kt < k_end; ++kt) {
        ta_ref_step_cols(&plan->fwd, st, kt);
        ta_trace_add(a->trace, TA_PASS_FWD, st->batch, st->head, st->q_tile, kt);
        ta_ref_load_kv(plan, a->k, a->v, ws->k, ws->v, st);
        ta_ref_scores(ws->s, plan->fwd.block_k, ws->q, ws->k, d_qk, p->scale, &plan->fwd, st);
        ta_ref_fwd_softmax_tile(plan, ws, st);
    }
    /* step 3: normalise and store */
    ta_ref_fwd_store(plan, a, ws, st);
}

ta_status ta_ref_fwd(const ta_plan *plan, const ta_fwd_args *a, void *workspace,
                     void *stream) {
    const ta_problem *p = &plan->p;
    ta_ref_fwd_ws ws;
    ta_ref_step st;
    size_t bytes;
    int32_t b, h, qt;
    const ta_status status = ta_ref_fwd_layout(plan, workspace, &ws, &bytes);
    (void)stream; /* host backend: NULL (validated) */
    if (status != TA_OK) return status;
    if (a->trace) a->trace->count = 0;
    for (b = 0; b < p->batch; ++b) {
        st.batch = b;
        st.key_len = ta_ref_key_len(plan, a->seqlens_k, b);
        for (h = 0; h < p->heads_q; ++h) {
            st.head = h;
            st.head_kv = h / plan->group; /* GQA: query head h reads kv head h / group */
            for (qt = 0; qt < plan->fwd.num_q_tiles; ++qt) {
                ta_ref_step_rows(&plan->fwd, &st, qt);
                ta_ref_fwd_q_tile(plan, a, &ws, &st);
            }
        }
    }
    return TA_OK;
}
