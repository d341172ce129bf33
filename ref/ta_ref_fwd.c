/*
 * Reference forward: the executable specification of the tiled forward,
 * plain SDPA (FlashAttention online softmax, lse) and the MTA key-query conv
 * (pre-softmax) by the overlapping-tiles algorithm. Scalar C11, no threads, no
 * intrinsics. Every other backend must reproduce these bits for the same
 * block_k; the arithmetic is the contract, written out in docs/reference.md
 * (SDPA) and docs/mta.md (the conv).
 *
 * For each (batch b, query head h, Q tile qt) of plan->fwd:
 *   1. load the Q tile's loaded rows (widened; rows above row 0 are the
 *      q_history rows of args.q_hist, zeros above them; with the rotary
 *      stage, rows and history rows turned by their table rows; with the
 *      score ring read, the history rows are 0 and their scores come from
 *      the ring in step 2);
 *      m = -inf, l = 0, acc = 0 per effective row
 *   2. for each K tile kt in the context's [k_begin, k_end) ascending:
 *        S = scores on the loaded region (masked entries 0); with a score
 *            ring, the history rows' entries read from it and the call's
 *            last c_q - 1 rows' entries written to it (ta_ref_ring_scores)
 *        C = conv(S) on the effective region   (MTA; without a conv C is S)
 *        online softmax update of m, l, acc over the visible C of the
 *        effective columns (rescale at this tile boundary): the tile's
 *        partial sums from +0, added to the running (hi, lo) pairs of l and
 *        acc by src/ta_sum2.h (no f32 sum runs over more than one tile)
 *   3. o_i = acc_i / l_i, lse_i = m_i + log(l_i) (the pairs' hi words); rows
 *      that saw no key: 0, -inf
 *
 * Split-K (plan->fwd.num_splits = n > 1): steps 1-3 run once per part s
 * ascending, over the K tiles ta_tile_split_visit gives, and step 3 writes the
 * part's (o_s, lse_s) in f32 into the workspace; then each row's parts are
 * merged (src/ta_merge.h, docs/exactness.md section 10) and stored.
 *
 * Without a conv every halo is 0: the loaded region is the effective region,
 * step 2's conv is skipped and C is the score buffer itself.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "ta_internal.h"
#include "ta_math.h"
#include "ta_merge.h"
#include "ta_ref.h"
#include "ta_sum2.h"
#include "ta_rope_load.h"

/*
 * Forward workspace: the tiles of one (b, h, Q tile) step, all f32. B_q, B_k
 * are the loaded tile (plan->fwd.block_q, block_k); B_r = B_q - (c_q-1) and
 * B_c = B_k - 2P the effective tile (B_r = B_q, B_c = B_k without a conv).
 *
 *   +---------+---------+-----------+-----------+-----------+-----------+-----------+
 *   | q       | k       | v         | s         | c (conv)  | acc       | acc_lo    |
 *   | B_q x D | B_k x D | B_k x D_v | B_q x B_k | B_r x B_c | B_r x D_v | B_r x D_v |
 *   +---------+---------+-----------+-----------+-----------+-----------+-----------+
 *   | m   | l   | l_lo | part |
 *   | B_r | B_r | B_r  | D_v  |
 *   +-----+-----+------+------+
 *   each region starts on a 64-byte boundary (ta_ws_take); c only with a conv
 *   then, with n = plan->fwd.num_splits > 1 (split-K), the parts of one Q tile:
 *   +-----------------+-------------+
 *   | part_o          | part_lse    |
 *   | n x B_r x D_v   | n x B_r     |
 *   +-----------------+-------------+
 *
 *   bytes = sum over regions of round_up(4 * elements, 64): O(n tile), never O(S).
 */
typedef struct ta_ref_fwd_ws {
    float *q;       /* [B_q, D]    Q tile: loaded rows, widened, zero outside [0, S_q) */
    float *k;       /* [B_k, D]    K tile: loaded columns, zero outside [0, S_k) */
    float *v;       /* [B_k, D_v]  V tile: loaded columns */
    float *s;       /* [B_q, B_k]  raw scores S on the loaded region (ld B_k) */
    float *c;       /* [B_r, B_c]  conv: C on the effective region (ld B_c); else = s */
    float *acc;     /* [B_r, D_v]  unnormalised output sum_j p_j v_j: the pair's hi word */
    float *acc_lo;  /* [B_r, D_v]  its lo word (src/ta_sum2.h) */
    float *row_max; /* [B_r]       running max m; -inf until a visible key is seen */
    float *row_sum; /* [B_r]       running sum l: the pair's hi word */
    float *row_sum_lo; /* [B_r]    its lo word */
    float *part;    /* [D_v]       one row's K-tile partial of acc (step d) */
    float *part_o;  /* [n, B_r, D_v] split-K: part s's o_s (f32, normalised); else NULL */
    float *part_lse; /* [n, B_r]     split-K: part s's lse_s; else NULL */
    float *kt;      /* [B_q, D]    band: k rows at the Q tile's positions; else NULL */
    float *qt;      /* [B_k, D]    band: q rows at the K tile's positions; else NULL */
    float *qraw;    /* [max(B_q, B_k), D_q] fused projections: the raw q rows before
                       the projection; else NULL. With them D above is L and D_v
                       is L (the attention core's widths, plan->dim_k, dim_v). */
} ta_ref_fwd_ws;

/* The one layout routine: sizes (base NULL) and carves (base set) the workspace. */
static ta_status ta_ref_fwd_layout(const ta_plan *plan, void *base, ta_ref_fwd_ws *ws,
                                   size_t *bytes) {
    const ta_tiling *t = &plan->fwd;
    const size_t bq = (size_t)t->block_q, bk = (size_t)t->block_k;
    const size_t br = (size_t)t->rows_eff, bc = (size_t)t->cols_eff;
    const size_t d = (size_t)plan->dim_k, dv = (size_t)plan->dim_v;
    ta_ws_cursor c;
    ta_ws_begin(&c, base);
    ws->qraw = plan->p.latent_dim > 0
                   ? TA_WS_TAKE(&c, float, ((bq > bk ? bq : bk) * (size_t)plan->p.head_dim))
                   : NULL;
    ws->q = TA_WS_TAKE(&c, float, (bq * d));
    ws->k = TA_WS_TAKE(&c, float, (bk * d));
    ws->v = TA_WS_TAKE(&c, float, (bk * dv));
    ws->s = TA_WS_TAKE(&c, float, (bq * bk));
    ws->c = plan->has_conv ? TA_WS_TAKE(&c, float, (br * bc)) : ws->s;
    ws->acc = TA_WS_TAKE(&c, float, (br * dv));
    ws->acc_lo = TA_WS_TAKE(&c, float, (br * dv));
    ws->row_max = TA_WS_TAKE(&c, float, br);
    ws->row_sum = TA_WS_TAKE(&c, float, br);
    ws->row_sum_lo = TA_WS_TAKE(&c, float, br);
    ws->part = TA_WS_TAKE(&c, float, dv);
    ws->part_o = ws->part_lse = ws->kt = ws->qt = NULL;
    if (plan->stages.score == TA_SCORE_RBAND) {
        ws->kt = TA_WS_TAKE(&c, float, (bq * d));
        ws->qt = TA_WS_TAKE(&c, float, (bk * d));
    }
    if (t->num_splits > 1) {
        const size_t n = (size_t)t->num_splits;
        size_t n_rows = 0, n_o = 0;
        if (!ta_mul_size(n, br, &n_rows) || !ta_mul_size(n_rows, dv, &n_o)) return TA_ERR_OVERFLOW;
        ws->part_o = TA_WS_TAKE(&c, float, n_o);
        ws->part_lse = TA_WS_TAKE(&c, float, n_rows);
    }
    if (c.overflow) return TA_ERR_OVERFLOW;
    *bytes = c.used;
    return TA_OK;
}

ta_status ta_ref_fwd_workspace_size(const ta_plan *plan, size_t *bytes) {
    ta_ref_fwd_ws ws;
    return ta_ref_fwd_layout(plan, NULL, &ws, bytes);
}

/*
 * Online softmax over one K tile, for every effective row of the Q tile. Per
 * row i, with J = the visible effective columns of this tile (rows with J
 * empty are skipped), s_ij = C[i][j]:
 *   m_new = max(m, max_{j in J} s_ij)      (ta_max_nan: NaN if m or any s_ij is)
 *   e     = m_new, or 0 while m_new = -inf (every visible score so far is -inf:
 *           their weights are exp(-inf) = 0, never exp(-inf - -inf) = NaN)
 *   alpha = exp(m - e)                      (m = -inf gives exp(-inf) = 0)
 *   the tile's partials, each from +0, j in J ascending:
 *     t_l   = t_l + p_j,                    p_j = exp(s_ij - e)
 *     t_d   = fmaf(p_j, v_jd, t_d)          for every d
 *   then into the running pairs (src/ta_sum2.h):
 *     (l, l_lo)       = (l, l_lo) * alpha + t_l
 *     (acc_d, acc_lo_d) = (acc_d, acc_lo_d) * alpha + t_d
 * exp is ta_exp. The row's s_ij are overwritten by p_j.
 *   c: view of C (at least the effective region)
 */
static void ta_ref_fwd_softmax_tile(const ta_plan *plan, const ta_ref_fwd_ws *ws,
                                    const ta_ref_tile *c, const ta_ref_step *st) {
    const ta_tiling *t = &plan->fwd;
    const int32_t dv = plan->dim_v;
    /* i, j: effective row and column of the tile (absolute row_begin + i, col_begin + j) */
    int32_t i, j, d;
    for (i = 0; i < st->rows; ++i) {
        const int32_t r = st->row_begin + i;               /* absolute row */
        float *c_row = ta_ref_at(c, r, st->col_begin);     /* [cols] C[r][col_begin + j] */
        float *acc_row = ws->acc + (size_t)i * (size_t)dv;       /* [D_v] */
        float *acc_lo_row = ws->acc_lo + (size_t)i * (size_t)dv; /* [D_v] */
        float m_tile = -INFINITY, m_new, base, alpha, l;
        int any = 0;
        /* step a: the tile's max over visible entries; a NaN score wins
         * (ta_max_nan; docs/exactness.md section 8) */
        for (j = 0; j < st->cols; ++j) {
            if (!ta_ref_visible(t, st, r, st->col_begin + j)) continue;
            m_tile = ta_max_nan(c_row[j], m_tile);
            any = 1;
        }
        if (!any) continue; /* nothing visible in this tile for this row */
        /* step b: new max (a NaN m stays NaN) and the rescale factor of the old sums */
        m_new = ta_max_nan(ws->row_max[i], m_tile);
        base = m_new == -INFINITY ? 0.0f : m_new;
        alpha = ta_exp(ws->row_max[i] - base);
        /* step c: the tile's partial sum_j p_j from +0, ascending j, into (l, l_lo) */
        l = 0.0f;
        for (j = 0; j < st->cols; ++j) {
            if (!ta_ref_visible(t, st, r, st->col_begin + j)) continue;
            c_row[j] = ta_exp(c_row[j] - base);
            l = l + c_row[j];
        }
        ws->row_max[i] = m_new;
        ta_sum2_add(ws->row_sum + i, ws->row_sum_lo + i, alpha, l);
        /* step d: the tile's partial sum_j p_j v_j from +0 by fmaf, ascending j,
         * into (acc, acc_lo) */
        for (d = 0; d < dv; ++d)
            ws->part[d] = 0.0f;
        for (j = 0; j < st->cols; ++j) {
            const float *v_row =
                ws->v + ta_ref_off(st->col_load_begin, st->col_begin + j, dv); /* [D_v] */
            if (!ta_ref_visible(t, st, r, st->col_begin + j)) continue;
            for (d = 0; d < dv; ++d)
                ws->part[d] = TA_FMAF(c_row[j], v_row[d], ws->part[d]);
        }
        for (d = 0; d < dv; ++d)
            ta_sum2_add(acc_row + d, acc_lo_row + d, alpha, ws->part[d]);
    }
}

/* Step 3 with the fused projections: per row the latent output ctx~_l =
 * acc_l / l (a true division, into ws->part), then
 *   o_e = sum_l fmaf(ctx~_l, W_vup[h][l][e], acc) from +0, l ascending
 * rounded once by ta_store; lse as without them. A row that saw no key stores
 * o = 0 and lse = -inf. */
static void ta_ref_fwd_store_vup(const ta_plan *plan, const ta_fwd_args *a,
                                 const ta_ref_fwd_ws *ws, const ta_ref_step *st) {
    const ta_problem *p = &plan->p;
    const int32_t lat = p->latent_dim, dv = p->head_dim_v;
    const float *w = a->w_vup + (size_t)st->ctx.head * (size_t)lat * (size_t)dv; /* [L, D_v] */
    int32_t i, l, e;
    for (i = 0; i < st->rows; ++i) {
        const int32_t r = st->row_begin + i; /* absolute row */
        const float *acc_row = ws->acc + (size_t)i * (size_t)lat; /* [L] */
        const float m = ws->row_max[i], sum = ws->row_sum[i];
        const int seen = m != -INFINITY;
        const size_t o_first = ta_ref_row(st->ctx.o, plan->layout.o.seq, r);
        for (l = 0; l < lat; ++l)
            ws->part[l] = seen ? acc_row[l] / sum : 0.0f;
        for (e = 0; e < dv; ++e) {
            float acc = 0.0f;
            for (l = 0; l < lat && seen; ++l)
                acc = TA_FMAF(ws->part[l], w[(size_t)l * (size_t)dv + (size_t)e], acc);
            ta_store(a->o, p->dtype, o_first + (size_t)e, acc);
        }
        if (a->lse) a->lse[ta_ref_row(st->ctx.lse, 1, r)] = seen ? m + ta_log(sum) : -INFINITY;
    }
}

/* Step 3: o_i = acc_i / l_i (a true division), lse_i = m_i + ta_log(l_i), each
 * rounded once to the storage type by ta_store. A row that saw no key
 * (m still -inf) stores o = 0 and lse = -inf. With split = -1 into the call's
 * o and lse; else into part `split` of the workspace (f32, row i of the tile
 * at part_o + (split B_r + i) D_v, part_lse + split B_r + i). */
static void ta_ref_fwd_store(const ta_plan *plan, const ta_fwd_args *a, const ta_ref_fwd_ws *ws,
                             const ta_ref_step *st, int32_t split) {
    const ta_problem *p = &plan->p;
    const int32_t dv = plan->dim_v;
    const size_t br = (size_t)plan->fwd.rows_eff;
    int32_t i, d;
    if (p->latent_dim > 0) { /* the fused up-projection (never split: validated) */
        ta_ref_fwd_store_vup(plan, a, ws, st);
        return;
    }
    for (i = 0; i < st->rows; ++i) {
        const int32_t r = st->row_begin + i; /* absolute row */
        const float *acc_row = ws->acc + (size_t)i * (size_t)dv; /* [D_v] */
        const float m = ws->row_max[i], l = ws->row_sum[i];
        const int seen = m != -INFINITY;
        const float lse = seen ? m + ta_log(l) : -INFINITY;
        if (split >= 0) {
            const size_t part_row = (size_t)split * br + (size_t)i;
            for (d = 0; d < dv; ++d)
                ws->part_o[part_row * (size_t)dv + (size_t)d] = seen ? acc_row[d] / l : 0.0f;
            ws->part_lse[part_row] = lse;
            continue;
        }
        for (d = 0; d < dv; ++d)
            ta_store(a->o, p->dtype, ta_ref_row(st->ctx.o, plan->layout.o.seq, r) + (size_t)d,
                     seen ? acc_row[d] / l : 0.0f);
        if (a->lse) a->lse[ta_ref_row(st->ctx.lse, 1, r)] = lse;
    }
}

/* Split-K's last step: each row's parts merged (src/ta_merge.h), stored once.
 * ws->acc row 0 holds the merged row (f32) before the store. */
static void ta_ref_fwd_merge_store(const ta_plan *plan, const ta_fwd_args *a,
                                   const ta_ref_fwd_ws *ws, const ta_ref_step *st) {
    const ta_problem *p = &plan->p;
    const int32_t dv = p->head_dim_v;
    const size_t br = (size_t)plan->fwd.rows_eff;
    int32_t i, d;
    for (i = 0; i < st->rows; ++i) {
        const int32_t r = st->row_begin + i;
        const float lse = ta_merge_row(ws->part_o, TA_F32, (size_t)i * (size_t)dv, br * (size_t)dv,
                                       ws->part_lse + i, br, plan->fwd.num_splits, dv, ws->acc);
        for (d = 0; d < dv; ++d)
            ta_store(a->o, p->dtype, ta_ref_row(st->ctx.o, plan->layout.o.seq, r) + (size_t)d,
                     ws->acc[d]);
        if (a->lse) a->lse[ta_ref_row(st->ctx.lse, 1, r)] = lse;
    }
}

/* Step 2's score ring (ta_fwd_args.score_ring, docs/mta.md 2a "The score
 * ring"), on S of the loaded region:
 *   a. plan->ring_read: each loaded history row r in [-q_history, 0) takes
 *      its visible entries from the ring, S[r][j] = ring[slot(r)][j] (its
 *      q row was loaded as 0; its masked entries stay 0)
 *   b. each effective row r among the call's last min(S_q, c_q - 1) rows
 *      gives the ring its visible entries of the effective columns,
 *      ring[slot(r)][j] = S[r][j]: the effective rows and columns of the
 *      steps partition the rows and keys, so each entry is written once. */
static void ta_ref_ring_scores(const ta_plan *plan, const ta_ref_tile *s, const ta_ref_step *st) {
    const ta_tiling *t = &plan->fwd;
    const int32_t b = st->ctx.batch, h = st->ctx.head;
    const int32_t j_end = st->col_load_begin + st->cols_load;
    int32_t r, j;
    for (r = ta_tiling_max_i32(st->row_load_begin, -t->q_history);
         plan->ring_read && r < 0 && r < st->row_load_begin + st->rows_load; ++r) {
        const float *ring_row = plan->ring + ta_plan_ring_row(plan, b, h, r); /* [>= S_k] */
        for (j = st->col_load_begin; j < j_end; ++j)
            if (ta_ref_visible(t, st, r, j)) *ta_ref_at(s, r, j) = ring_row[j];
    }
    for (r = st->row_begin; r < st->row_begin + st->rows; ++r) {
        float *ring_row;
        if (!ta_plan_ring_writes(plan, r)) continue;
        ring_row = plan->ring + ta_plan_ring_row(plan, b, h, r);
        for (j = st->col_begin; j < st->col_begin + st->cols; ++j)
            if (ta_ref_visible(t, st, r, j)) ring_row[j] = *ta_ref_at(s, r, j);
    }
}

/* Steps 1-3 for one (b, h, Q tile) and part `split` of its K tiles (-1: all
 * of them, stored into the call's o and lse). */
static void ta_ref_fwd_q_tile(const ta_plan *plan, const ta_fwd_args *a, const ta_ref_fwd_ws *ws,
                              ta_ref_step *st, int32_t split) {
    const ta_problem *p = &plan->p;
    const ta_tiling *t = &plan->fwd;
    const int32_t d_qk = plan->dim_k, dv = plan->dim_v;
    const ta_ref_conv cv = ta_ref_conv_of(plan, a->conv_w, st->ctx.head);
    ta_ref_tile s, c;
    ta_ref_region eff;
    size_t n;
    int32_t i, kt, k_begin, k_end;
    ta_tile_split_visit(t, st->ctx.key_len, split < 0 ? 0 : split, st->ctx.k_begin, st->ctx.k_end,
                        &k_begin, &k_end);
    /* step 1: Q tile [rows_load, D] widened; m = -inf, l = 0, acc = 0 */
    ta_ref_load_q_lat(plan, a->q, a->q_hist, a->w_qlat, t, ws->q, ws->qraw, st); /* history too */
    ta_ref_rope_rows(plan, ws->q, TA_ROPE_SIDE_Q, st, st->row_load_begin, st->rows_load);
    if (ws->kt) ta_ref_rband_load_kt(plan, a->k, st, ws->kt); /* band: k at the rows' positions */
    for (i = 0; i < st->rows; ++i) {
        ws->row_max[i] = -INFINITY;
        ws->row_sum[i] = ws->row_sum_lo[i] = 0.0f;
    }
    for (n = 0; n < (size_t)st->rows * (size_t)dv; ++n)
        ws->acc[n] = ws->acc_lo[n] = 0.0f;
    /* step 2: K tiles [k_begin, k_end) ascending (of the part); the others are
     * fully masked (or another part's) */
    for (kt = k_begin; kt < k_end; ++kt) {
        ta_ref_step_cols(t, st, kt);
        ta_trace_add(a->trace, TA_PASS_FWD, st->ctx.batch, st->ctx.head, st->q_tile, kt);
        ta_ref_load_kv(plan, a->k, a->v, ws->k, ws->v, st);
        /* S [rows_load, cols_load] on the loaded region */
        s.data = ws->s, s.row0 = st->row_load_begin, s.col0 = st->col_load_begin;
        s.ld = t->block_k;
        ta_ref_scores(&s, ws->q, ws->k, d_qk, p->scale, t, st);
        if (plan->ring) ta_ref_ring_scores(plan, &s, st); /* MTA decode's score ring */
        /* band: fmaf(alpha, T, S) where the pair meets it (else S as it is) */
        if (ws->kt && ta_ref_rband_meets(plan, st))
            ta_ref_rband_scores(plan, a->q, a->q_hist, a->w_qlat, ws->qraw, t, st, ws->kt, ws->qt,
                                &s, NULL);
        /* C [rows, cols] on the effective region: conv(S), or S itself */
        c = s;
        if (plan->has_conv) {
            c.data = ws->c, c.row0 = st->row_begin, c.col0 = st->col_begin, c.ld = t->cols_eff;
            eff = ta_ref_effective(st);
            ta_ref_conv_scores(&c, &s, &cv, t, st, &eff);
        }
        ta_ref_fwd_softmax_tile(plan, ws, &c, st);
    }
    /* step 3: normalise and store */
    ta_ref_fwd_store(plan, a, ws, st, split);
}

ta_status ta_ref_fwd(const ta_plan *plan, const ta_fwd_args *a, void *workspace, void *stream) {
    const ta_problem *p = &plan->p;
    ta_ref_fwd_ws ws;
    ta_ref_step st;
    size_t bytes;
    int32_t b, h, qt, s;
    const ta_status status = ta_ref_fwd_layout(plan, workspace, &ws, &bytes);
    (void)stream; /* host backend: NULL (validated) */
    if (status != TA_OK) return status;
    if (a->trace) a->trace->count = 0;
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads_q; ++h)
            for (qt = 0; qt < plan->fwd.num_q_tiles; ++qt) {
                ta_ref_step_q(plan, &plan->fwd, a->seqlens_k, b, h, qt, &st);
                if (plan->fwd.num_splits == 1) {
                    ta_ref_fwd_q_tile(plan, a, &ws, &st, -1);
                    continue;
                }
                for (s = 0; s < plan->fwd.num_splits; ++s) /* parts ascending, then merge */
                    ta_ref_fwd_q_tile(plan, a, &ws, &st, s);
                ta_ref_fwd_merge_store(plan, a, &ws, &st);
            }
    return TA_OK;
}

/* ta_merge on host memory (REF, and the CPU backend's table): every row of
 * (b, h) ascending, merged by src/ta_merge.h from the parts in the storage
 * dtype, stored once to o (the call's strides) and lse. */
ta_status ta_ref_merge(const ta_plan *plan, const ta_merge_args *a, void *stream) {
    const ta_problem *p = &plan->p;
    const int32_t dv = p->head_dim_v;
    const size_t n_rows = plan->n_lse;
    float out[TA_HEAD_DIM_MAX];
    size_t row;
    int32_t d;
    (void)stream;
    for (row = 0; row < n_rows; ++row) {
        const int32_t r = (int32_t)(row % (size_t)p->seq_q);
        const int32_t h = (int32_t)(row / (size_t)p->seq_q % (size_t)p->heads_q);
        const int32_t b = (int32_t)(row / (size_t)p->seq_q / (size_t)p->heads_q);
        const size_t o_first =
            ta_ref_row(ta_strides_slice(&plan->layout.o, b, h), plan->layout.o.seq, r);
        const float lse = ta_merge_row(a->o_parts, p->dtype, row * (size_t)dv, plan->n_o,
                                       a->lse_parts + row, n_rows, a->num_parts, dv, out);
        for (d = 0; d < dv; ++d)
            ta_store(a->o, p->dtype, o_first + (size_t)d, out[d]);
        if (a->lse) a->lse[row] = lse;
    }
    return TA_OK;
}
