/*
 * Reference backward: the executable specification of the tiled backward,
 * plain SDPA and the MTA key-query conv (FlashAttention-2 recomputation from
 * lse; no stored probabilities). Scalar C11, no threads, no intrinsics. The
 * arithmetic is the contract (docs/reference.md, docs/mta.md); it mirrors the
 * forward step by step:
 *
 *   forward                                 backward
 *   S_ij = scale * <q_i, k_j> (masked: 0)   S recomputed by the same ta_ref_scores
 *   C = conv_w(S)  (MTA; SDPA: C = S)       C recomputed by the same ta_ref_conv_scores
 *   p_ij = exp(C_ij - m_i) / l_i            P_ij = exp(C_ij - lse_i)  (one ta_exp, no division)
 *   o_i  = sum_j p_ij v_j                   dV_j = sum_(h, i) P_ij dO_i
 *                                           dP_ij = <dO_i, v_j>,  D_i = <dO_i, o_i>
 *                                           dC_ij = P_ij (dP_ij - D_i)
 *   C = conv_w(S)                           dS = conv_w^T(dC)        (SDPA: dS = dC)
 *                                           dw[a][b] = sum_ij dC_ij S[i-(c_q-1-a)][j+b-P]
 *   S_ij = scale <q_i, k_j>                 dK_j = scale * sum_(h, i) dS_ij q_i
 *                                           dQ_i = scale * sum_j dS_ij k_j
 *
 * Two passes over plan->bwd, each sum ascending:
 *   pass 1 (dk/dv):    K tiles outer; for each, query heads of the kv group
 *                      ascending, then the Q tiles [q_begin, q_end) that see the
 *                      K tile (ta_tile_k_rows) ascending.
 *   pass 2 (dq, dw):   Q tiles outer; the context's K tiles [k_begin, k_end) ascending.
 * dq, dk and dv are long sums (S_k terms; group x S_q terms), so no f32 sum
 * runs over more than one chunk of them: each chunk's partial starts from +0
 * and enters a (hi, lo) pair by ta_sum2_add with alpha = 1 (src/ta_sum2.h);
 * the store reads hi (docs/exactness.md section 11). The chunks are absolute
 * (TA_SUM2_CHUNK): dq's the keys [64c, 64c + 64), dk's and dv's the rows
 * [64c, 64c + 64) of one query head; a chunk may span tiles, so the partials
 * persist across them and the backward's bits still depend on no tile size.
 * dconv_w[h] sums every (b, row, key) of head h in three levels: each tile
 * pair's partial (from +0), R(b, qt) over the Q tile's K tiles, and the head's
 * sum over (b, qt); the two upper levels are pairs too (ta_sum2_add, alpha =
 * 1): R in (dw_qtile, dw_qtile_lo), read as hi; the head's in (dconv_w, dw_lo).
 * Both passes recompute P, dC and dS with the same function, so they agree bitwise.
 *
 * Latent attention (docs/exactness.md section 13): the reciprocal band adds
 * its transposed term to dk (pass 1, after each head's Q tiles: the blocks
 * whose rows are the K tile's positions) and to dq (pass 2, after the K
 * tiles: the blocks whose columns are the Q tile's positions), and pass 2
 * sums d_alpha; the fused projections turn each loaded dO row into dctx~
 * (W_vup), dq~ back into dq (W_qlat) at the store, and pass 2 sums dW_qlat
 * and dW_vup (ctx~ recomputed) per 64-row chunk.
 *
 * Regions of one (Q tile, K tile) pair (absolute rows x columns); P_q = c_q-1,
 * P = (c_k-1)/2 (all 0 without a conv, where the three regions coincide):
 *   loaded   [eff_row_begin - P_q, eff_row_end + P_q) x [eff_col_begin - 2P, eff_col_end + 2P)
 *            S lives here
 *   gradient [eff_row_begin, eff_row_end + P_q) x [eff_col_begin - P, eff_col_end + P)
 *            C, P, dC live here: what dS of the effective region reads
 *   effective [eff_row_begin, eff_row_end) x [eff_col_begin, eff_col_end)
 *            dS, and the dq/dk/dv/dw sums run here
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ta_internal.h"
#include "ta_math.h"
#include "ta_ref.h"
#include "ta_rope_load.h"
#include "ta_sum2.h"

/*
 * Backward workspace, all f32, every region 64-byte aligned. B_q, B_k: the
 * loaded tile (plan->bwd); B_r = B_q - 2 P_q, B_c = B_k - 4P: the effective
 * tile; G_r = B_q - P_q, G_c = B_k - 2P: the gradient region.
 *
 *   +---------+-----------+---------+-----------+-----------+-----------+-----+-------+
 *   | q       | d_o       | k       | v         | s         | ds        | lse | delta |
 *   | B_q x D | B_q x D_v | B_k x D | B_k x D_v | B_q x B_k | B_r x B_c | B_q | B_q   |
 *   +---------+-----------+---------+-----------+-----------+-----------+-----+-------+
 *   | dk_acc  | dv_acc    | dq_acc  | p (conv)  | dc (conv) | dw_tile   | dw_qtile  |
 *   | B_c x D | B_c x D_v | B_r x D | G_r x G_c | G_r x G_c | c_q x c_k | c_q x c_k |
 *   +---------+-----------+---------+-----------+-----------+-----------+-----------+
 *   | dk_lo   | dv_lo     | dq_lo   | dk_part | dv_part   | dq_part | dw_qtile_lo | dw_lo         |
 *   | B_c x D | B_c x D_v | B_r x D | B_c x D | B_c x D_v | B_r x D | c_q x c_k   | H x c_q x c_k |
 *   +---------+-----------+---------+---------+-----------+---------+-------------+---------------+
 *   p, dc, dw_tile, dw_qtile, dw_qtile_lo, dw_lo only with a conv (without: p is s, dc is ds)
 *   The band's and the projections' tile buffers come first (ta_ref_bwd_ws,
 *   ref/ta_ref.h); everything up to dw_qtile_lo is one step's
 *   (ta_ref_bwd_carve_tiles), the rest the call's sums (ta_ref_bwd_carve_shared:
 *   dw_lo, then the band's d_alpha pair, the projections' dW partials and lo
 *   words). The CPU backend carves the first part once per thread.
 *
 *   bytes = sum over regions of round_up(4 * elements, 64): O(tile + H), never O(S).
 */

/* The buffers of one backward step (every region but the call's sums): the
 * tiles above, and the band's and the projections' tile buffers. */
void ta_ref_bwd_carve_tiles(const ta_plan *plan, ta_ws_cursor *c, ta_ref_bwd_ws *ws) {
    const ta_tiling *t = &plan->bwd;
    const int band = plan->stages.score == TA_SCORE_RBAND; /* no conv: no halos */
    const size_t bm = (size_t)ta_tiling_max_i32(t->block_q, t->block_k);
    const size_t bq = band ? bm : (size_t)t->block_q, bk = band ? bm : (size_t)t->block_k;
    const size_t br = band ? bm : (size_t)t->rows_eff, bc = band ? bm : (size_t)t->cols_eff;
    const size_t gr = bq - (size_t)t->halo_q_bottom, gc = bk - (size_t)t->halo_k;
    const size_t d = (size_t)plan->dim_k, dv = (size_t)plan->dim_v;
    const size_t n_w = (size_t)plan->p.conv_q * (size_t)plan->p.conv_k;
    ws->ld_s = (int32_t)bk;
    ws->ld_ds = (int32_t)bc;
    ws->kt = ws->qt = ws->tt = ws->da_hi = ws->da_lo = ws->da_part = NULL;
    ws->qraw = ws->doraw = ws->ctx_hi = ws->ctx_lo = ws->ctx_part = NULL;
    if (plan->p.latent_dim > 0) {
        const size_t bx = bq > bk ? bq : bk, dq_w = (size_t)plan->p.head_dim;
        const size_t do_w = (size_t)plan->p.head_dim_v;
        ws->qraw = TA_WS_TAKE(c, float, (bx * dq_w));
        ws->doraw = TA_WS_TAKE(c, float, (bx * do_w));
        ws->ctx_hi = TA_WS_TAKE(c, float, (br * dv));
        ws->ctx_lo = TA_WS_TAKE(c, float, (br * dv));
        ws->ctx_part = TA_WS_TAKE(c, float, (br * dv));
    }
    if (band) {
        ws->kt = TA_WS_TAKE(c, float, (bm * d));
        ws->qt = TA_WS_TAKE(c, float, (bm * d));
        ws->tt = TA_WS_TAKE(c, float, (bm * bm));
        ws->da_hi = TA_WS_TAKE(c, float, bm);
        ws->da_lo = TA_WS_TAKE(c, float, bm);
        ws->da_part = TA_WS_TAKE(c, float, bm);
    }
    ws->q = TA_WS_TAKE(c, float, (bq * d));
    ws->d_o = TA_WS_TAKE(c, float, (bq * dv));
    ws->k = TA_WS_TAKE(c, float, (bk * d));
    ws->v = TA_WS_TAKE(c, float, (bk * dv));
    ws->s = TA_WS_TAKE(c, float, (bq * bk));
    ws->ds = TA_WS_TAKE(c, float, (br * bc));
    ws->lse = TA_WS_TAKE(c, float, bq);
    ws->delta = TA_WS_TAKE(c, float, bq);
    ws->dk_acc = TA_WS_TAKE(c, float, (bc * d));
    ws->dv_acc = TA_WS_TAKE(c, float, (bc * dv));
    ws->dq_acc = TA_WS_TAKE(c, float, (br * d));
    ws->p = plan->has_conv ? TA_WS_TAKE(c, float, (gr * gc)) : ws->s;
    ws->dc = plan->has_conv ? TA_WS_TAKE(c, float, (gr * gc)) : ws->ds;
    ws->dw_tile = plan->has_conv ? TA_WS_TAKE(c, float, n_w) : NULL;
    ws->dw_qtile = plan->has_conv ? TA_WS_TAKE(c, float, n_w) : NULL;
    ws->dk_lo = TA_WS_TAKE(c, float, (bc * d));
    ws->dv_lo = TA_WS_TAKE(c, float, (bc * dv));
    ws->dq_lo = TA_WS_TAKE(c, float, (br * d));
    ws->dk_part = TA_WS_TAKE(c, float, (bc * d));
    ws->dv_part = TA_WS_TAKE(c, float, (bc * dv));
    ws->dq_part = TA_WS_TAKE(c, float, (br * d));
    ws->dw_qtile_lo = plan->has_conv ? TA_WS_TAKE(c, float, n_w) : NULL;
}

/* The call's sums, which the steps of pass 2 add to in (b, h, Q tile) order
 * (ta_ref_bwd_q_tile_merge): dconv_w's lo words (conv), the d_alpha pair
 * (band), the weight gradients' lo words and row-chunk partials (projections). */
void ta_ref_bwd_carve_shared(const ta_plan *plan, ta_ws_cursor *c, ta_ref_bwd_ws *ws) {
    const int lat = plan->p.latent_dim > 0;
    const size_t d = (size_t)plan->dim_k, dv = (size_t)plan->dim_v;
    ws->dw_lo = plan->has_conv ? TA_WS_TAKE(c, float, plan->n_conv) : NULL;
    ws->da_g = plan->stages.score == TA_SCORE_RBAND ? TA_WS_TAKE(c, float, 2) : NULL;
    ws->dwq_part = lat ? TA_WS_TAKE(c, float, ((size_t)plan->p.head_dim * d)) : NULL;
    ws->dwv_part = lat ? TA_WS_TAKE(c, float, (dv * (size_t)plan->p.head_dim_v)) : NULL;
    ws->dwq_lo = lat ? TA_WS_TAKE(c, float, plan->n_wq) : NULL;
    ws->dwv_lo = lat ? TA_WS_TAKE(c, float, plan->n_wv) : NULL;
}

/* The one layout routine: sizes (base NULL) and carves (base set) the workspace. */
static ta_status ta_ref_bwd_layout(const ta_plan *plan, void *base, ta_ref_bwd_ws *ws,
                                   size_t *bytes) {
    ta_ws_cursor c;
    ta_ws_begin(&c, base);
    ta_ref_bwd_carve_tiles(plan, &c, ws);
    ta_ref_bwd_carve_shared(plan, &c, ws);
    if (c.overflow) return TA_ERR_OVERFLOW;
    *bytes = c.used;
    return TA_OK;
}

ta_status ta_ref_bwd_workspace_size(const ta_plan *plan, size_t *bytes) {
    ta_ref_bwd_ws ws;
    return ta_ref_bwd_layout(plan, NULL, &ws, bytes);
}

/* The tiles of one (Q tile, K tile) pair, as views addressed by absolute
 * (row, column), and its gradient and effective regions (see the top). */
typedef struct ta_ref_bwd_pair {
    ta_ref_tile s, p, dc, ds;
    ta_ref_tile tt; /* the band's T (ld B_m), addressed as s */
    ta_ref_region grad, eff;
} ta_ref_bwd_pair;

static void ta_ref_bwd_pair_make(const ta_plan *plan, const ta_ref_bwd_ws *ws,
                                 const ta_ref_step *st, ta_ref_bwd_pair *pr) {
    const int32_t pq = plan->fwd.halo_q_top, pk = plan->fwd.halo_k; /* one conv's reach */
    pr->eff = ta_ref_effective(st);
    pr->grad.row_begin = pr->eff.row_begin;
    pr->grad.row_end = pr->eff.row_end + pq;
    pr->grad.col_begin = pr->eff.col_begin - pk;
    pr->grad.col_end = pr->eff.col_end + pk;
    pr->s.data = ws->s, pr->s.row0 = st->row_load_begin, pr->s.col0 = st->col_load_begin;
    pr->s.ld = ws->ld_s;
    pr->ds.data = ws->ds, pr->ds.row0 = pr->eff.row_begin, pr->ds.col0 = pr->eff.col_begin;
    pr->ds.ld = ws->ld_ds;
    pr->tt = pr->s;
    pr->tt.data = ws->tt; /* NULL without the band */
    if (plan->has_conv) {
        pr->p.data = ws->p, pr->p.row0 = pr->grad.row_begin, pr->p.col0 = pr->grad.col_begin;
        pr->p.ld = plan->bwd.cols_eff + 2 * pk;
        pr->dc = pr->p;
        pr->dc.data = ws->dc;
    } else { /* no halos: gradient = effective = loaded; P overwrites S, dC is dS */
        pr->p = pr->s;
        pr->dc = pr->ds;
    }
}

/* An entry takes part in the backward iff it is visible and its row saw a key
 * in the forward (lse > -inf). A row with lse = -inf contributes nothing, so
 * it can never turn into exp(s + inf) = inf and then NaN. */
static int ta_ref_bwd_live(const ta_plan *plan, const ta_ref_bwd_ws *ws, const ta_ref_step *st,
                           int32_t r, int32_t j) {
    return ws->lse[r - st->row_load_begin] != -INFINITY && ta_ref_visible(&plan->bwd, st, r, j);
}

/* The fused projections' load stage of dO: the latent output's gradient
 *   dctx~_l = sum_e fmaf(dO_e, W_vup[h][l][e], acc) from +0, e ascending
 * of every loaded row (raw rows in ws->doraw) into ws->d_o [rows_load, L]. */
static void ta_ref_bwd_dctx(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws,
                            const ta_ref_step *st) {
    const int32_t lat = plan->p.latent_dim, dv = plan->p.head_dim_v;
    const float *w = a->w_vup + (size_t)st->ctx.head * (size_t)lat * (size_t)dv; /* [L, D_v] */
    int32_t i, l, e;
    for (i = 0; i < st->rows_load; ++i) {
        const float *x = ws->doraw + (size_t)i * (size_t)dv; /* [D_v] */
        for (l = 0; l < lat; ++l) {
            float acc = 0.0f;
            for (e = 0; e < dv; ++e)
                acc = TA_FMAF(x[e], w[(size_t)l * (size_t)dv + (size_t)e], acc);
            ws->d_o[(size_t)i * (size_t)lat + (size_t)l] = acc;
        }
    }
}

/* Q-side tiles of step st, loaded rows [row_load_begin, + rows_load): q [., D],
 * d_o [., D_v] widened, lse, and D_i = sum_d fmaf(dO_id, o_id, acc) from +0,
 * d ascending, o read from the stored (rounded) forward output and widened.
 * Rows outside [0, S_q): zeros, lse = -inf (not live), D = 0. */
static void ta_ref_bwd_load_q(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws,
                              const ta_ref_step *st) {
    const ta_problem *p = &plan->p;
    const ta_layout *lay = &plan->layout;
    const int32_t dv = p->head_dim_v; /* dO's and o's width in memory */
    float *d_o = ws->doraw ? ws->doraw : ws->d_o; /* projections: raw rows, then dctx~ */
    int32_t i, d;
    ta_ref_load_q_lat(plan, a->q, NULL, a->w_qlat, &plan->bwd, ws->q, ws->qraw, st);
    ta_ref_rope_rows(plan, ws->q, TA_ROPE_SIDE_Q, st, st->row_load_begin, st->rows_load);
    if (ws->kt) ta_ref_rband_load_kt(plan, a->k, st, ws->kt); /* band: k at the rows' positions */
    ta_ref_load_rows(d_o, a->d_o, p->dtype, st->ctx.d_o, lay->d_o.seq, p->seq_q,
                     st->row_load_begin, st->rows_load, dv);
    if (ws->doraw) ta_ref_bwd_dctx(plan, a, ws, st);
    for (i = 0; i < st->rows_load; ++i) {
        const float *do_row = d_o + (size_t)i * (size_t)dv; /* [D_v] */
        const int32_t r = st->row_load_begin + i;               /* absolute row */
        size_t o_first;
        float acc = 0.0f;
        if (r < 0 || r >= p->seq_q) { /* zero padding: not live */
            ws->delta[i] = 0.0f;
            ws->lse[i] = -INFINITY;
            continue;
        }
        o_first = ta_ref_row(st->ctx.o, lay->o.seq, r);
        for (d = 0; d < dv; ++d)
            acc = TA_FMAF(do_row[d], ta_load(a->o, p->dtype, o_first + (size_t)d), acc);
        ws->delta[i] = acc;
        ws->lse[i] = a->lse[ta_ref_row(st->ctx.lse, 1, r)];
    }
}

/* P and dC on the gradient region: for live (r, j)
 *   P_rj  = ta_exp(C_rj - lse_r)      (C in pr->p, overwritten by P)
 *   dP_rj = <dO_r, v_j>               (fmaf, d ascending, from +0)
 *   dC_rj = P_rj * (dP_rj - D_r)
 * and dC = 0 elsewhere (masked, dead row, or outside the sequence). */
static void ta_ref_bwd_probs(const ta_plan *plan, const ta_ref_bwd_ws *ws, const ta_ref_step *st,
                             const ta_ref_bwd_pair *pr) {
    const int32_t dv = plan->dim_v;
    int32_t r, j;
    for (r = pr->grad.row_begin; r < pr->grad.row_end; ++r) {
        const int32_t rl = r - st->row_load_begin;               /* loaded row */
        const float *do_row = ws->d_o + (size_t)rl * (size_t)dv; /* [D_v] */
        for (j = pr->grad.col_begin; j < pr->grad.col_end; ++j) {
            const float *v_row = ws->v + ta_ref_off(st->col_load_begin, j, dv); /* [D_v] */
            float *p_rj = ta_ref_at(&pr->p, r, j), *dc_rj = ta_ref_at(&pr->dc, r, j);
            if (!ta_ref_bwd_live(plan, ws, st, r, j)) {
                *dc_rj = 0.0f;
                continue;
            }
            *p_rj = ta_exp(*p_rj - ws->lse[rl]);
            *dc_rj = *p_rj * (ta_ref_dot(do_row, v_row, dv) - ws->delta[rl]);
        }
    }
}

/*
 * The recomputation shared by both passes (docs/mta.md, backward steps 2-3):
 *   1. S on the loaded region         (ta_ref_scores, as in the forward; with the
 *                                      band its stage too, T kept in pr->tt)
 *   2. C on the gradient region       (conv only; ta_ref_conv_scores, as in the forward)
 *   3. P, dC on the gradient region   (ta_ref_bwd_probs)
 *   4. dS on the effective region     (conv only: the transposed conv; else dS is dC)
 */
static void ta_ref_bwd_recompute(const ta_plan *plan, const ta_bwd_args *a,
                                 const ta_ref_bwd_ws *ws, const ta_ref_conv *cv,
                                 const ta_ref_step *st, const ta_ref_bwd_pair *pr) {
    const ta_tiling *t = &plan->bwd;
    ta_ref_scores(&pr->s, ws->q, ws->k, plan->dim_k, plan->p.scale, t, st);
    if (ws->kt && ta_ref_rband_meets(plan, st))
        ta_ref_rband_scores(plan, a->q, NULL, a->w_qlat, ws->qraw, t, st, ws->kt, ws->qt, &pr->s,
                            &pr->tt);
    if (plan->has_conv) ta_ref_conv_scores(&pr->p, &pr->s, cv, t, st, &pr->grad);
    ta_ref_bwd_probs(plan, ws, st, pr);
    if (plan->has_conv) ta_ref_conv_grad(&pr->ds, &pr->dc, cv, t, st, &pr->eff);
}

/* n chunk partials into their pairs, (hi, lo) += part (ta_sum2_add, alpha =
 * 1, element by element), and the partials back to +0. */
static void ta_ref_bwd_flush(float *hi, float *lo, float *part, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) {
        ta_sum2_add(hi + i, lo + i, 1.0f, part[i]);
        part[i] = 0.0f;
    }
}

/* Pass 1: key j's (column jl of the K tile) partials of the current row
 * chunk into its pairs, (dk_acc, dk_lo) += dk_part, (dv_acc, dv_lo) +=
 * dv_part (ta_sum2_add, alpha = 1), and the partials back to +0. A partial
 * of +0 leaves hi unchanged, so flushing a chunk with no live entry is free. */
static void ta_ref_bwd_flush_dkdv(const ta_plan *plan, const ta_ref_bwd_ws *ws, int32_t jl) {
    const int32_t d_qk = plan->dim_k, dv = plan->dim_v;
    const size_t k_off = (size_t)jl * (size_t)d_qk, v_off = (size_t)jl * (size_t)dv;
    ta_ref_bwd_flush(ws->dk_acc + k_off, ws->dk_lo + k_off, ws->dk_part + k_off, (size_t)d_qk);
    ta_ref_bwd_flush(ws->dv_acc + v_off, ws->dv_lo + v_off, ws->dv_part + v_off, (size_t)dv);
}

/* Pass 1 accumulation for one (h, Q tile): for each effective key j of the
 * tile, the effective rows r ascending, live entries only:
 * dv_part_j = fmaf(P_rj, dO_r, dv_part_j), dk_part_j = fmaf(dS_rj, q_r,
 * dk_part_j); a row r that starts a row chunk (r % TA_SUM2_CHUNK = 0)
 * first flushes the previous chunk's partials into the pairs. */
static void ta_ref_bwd_accum_dkdv(const ta_plan *plan, const ta_ref_bwd_ws *ws,
                                  const ta_ref_step *st, const ta_ref_bwd_pair *pr) {
    const int32_t d_qk = plan->dim_k, dv = plan->dim_v;
    int32_t r, j, d;
    for (j = pr->eff.col_begin; j < pr->eff.col_end; ++j) {
        float *dk_part = ws->dk_part + ta_ref_off(st->col_begin, j, d_qk); /* [D] */
        float *dv_part = ws->dv_part + ta_ref_off(st->col_begin, j, dv);   /* [D_v] */
        for (r = pr->eff.row_begin; r < pr->eff.row_end; ++r) {
            const float *do_row = ws->d_o + ta_ref_off(st->row_load_begin, r, dv); /* [D_v] */
            const float *q_row = ws->q + ta_ref_off(st->row_load_begin, r, d_qk);  /* [D] */
            float p_rj, ds_rj;
            if (r % TA_SUM2_CHUNK == 0) ta_ref_bwd_flush_dkdv(plan, ws, j - st->col_begin);
            if (!ta_ref_bwd_live(plan, ws, st, r, j)) continue;
            p_rj = *ta_ref_at(&pr->p, r, j);
            ds_rj = *ta_ref_at(&pr->ds, r, j);
            for (d = 0; d < dv; ++d)
                dv_part[d] = TA_FMAF(p_rj, do_row[d], dv_part[d]);
            for (d = 0; d < d_qk; ++d)
                dk_part[d] = TA_FMAF(ds_rj, q_row[d], dk_part[d]);
        }
    }
}

/* Pass 1 store for K tile st: dk_j = scale * dk_acc_j, dv_j = dv_acc_j (the
 * pairs' hi words), each rounded once to the storage type. Keys nobody sees store 0. */
static void ta_ref_bwd_store_dkdv(const ta_plan *plan, const ta_bwd_args *a,
                                  const ta_ref_bwd_ws *ws, const ta_ref_step *st) {
    const ta_problem *p = &plan->p;
    const ta_layout *lay = &plan->layout;
    const int32_t d_qk = plan->dim_k, dv = plan->dim_v;
    int32_t j, d;
    for (j = st->col_begin; j < st->col_begin + st->cols; ++j) {
        float *dk_row = ws->dk_acc + ta_ref_off(st->col_begin, j, d_qk); /* [D] */
        const float *dv_row = ws->dv_acc + ta_ref_off(st->col_begin, j, dv);   /* [D_v] */
        const size_t dk_first = ta_ref_row(st->ctx.dk, lay->dk.seq, j);
        const size_t dv_first = ta_ref_row(st->ctx.dv, lay->dv.seq, j);
        ta_ref_rope_grad(plan, dk_row, TA_ROPE_SIDE_K, st, j); /* w.r.t. the stored k */
        for (d = 0; d < d_qk; ++d)
            ta_store(a->dk, p->dtype, dk_first + (size_t)d, p->scale * dk_row[d]);
        for (d = 0; d < dv; ++d)
            ta_store(a->dv, p->dtype, dv_first + (size_t)d, dv_row[d]);
    }
}

/* Accumulate mode (ta_bwd_args.accumulate): K tile st's keys' pairs
 * (dk_acc, dk_lo), (dv_acc, dv_lo) from the caller's pair buffers (get) or
 * back into them (put), unscaled. */
static void ta_ref_bwd_pairs_dkdv(const ta_plan *plan, const ta_bwd_args *a,
                                  const ta_ref_bwd_ws *ws, const ta_ref_step *st, int put) {
    const ta_layout *lay = &plan->layout;
    const int32_t d_qk = plan->dim_k, dv = plan->dim_v;
    if (put) {
        ta_pairs_put((float *)a->dk, a->dk_lo, st->ctx.dk, lay->dk.seq, st->col_begin, st->cols,
                     d_qk, ws->dk_acc, ws->dk_lo, (size_t)d_qk);
        ta_pairs_put((float *)a->dv, a->dv_lo, st->ctx.dv, lay->dv.seq, st->col_begin, st->cols, dv,
                     ws->dv_acc, ws->dv_lo, (size_t)dv);
        return;
    }
    ta_pairs_get((const float *)a->dk, a->dk_lo, st->ctx.dk, lay->dk.seq, st->col_begin, st->cols,
                 d_qk, ws->dk_acc, ws->dk_lo, (size_t)d_qk);
    ta_pairs_get((const float *)a->dv, a->dv_lo, st->ctx.dv, lay->dv.seq, st->col_begin, st->cols,
                 dv, ws->dv_acc, ws->dv_lo, (size_t)dv);
}

/* 1 if (r, j) is a live entry of the band (S_q = S_k in the backward: p_r = r). */
static int ta_ref_bwd_in_band(const ta_plan *plan, const ta_ref_bwd_ws *ws, const ta_ref_step *st,
                              int32_t r, int32_t j) {
    return r - j <= plan->p.rband_width && ta_ref_bwd_live(plan, ws, st, r, j);
}

/*
 * Pass 1, the band's term of dk for query head h (after the head's Q tiles):
 * key n of K tile st is the key at the position of query row n, so
 *   dk_n += sum_(j in [n - W, n] ascending) (alpha * dl_nj) q~_j
 * over the transposed blocks whose rows are the K tile's positions [c0, c1)
 * and whose columns are the K tiles from the one holding max(0, c0 - W) to
 * st's own, ascending; a key j that starts a key chunk (j % TA_SUM2_CHUNK = 0)
 * first flushes n's partial. The caller flushes after. ws->k, ws->v are
 * reloaded with st's K tile at the end (the next head's blocks read them).
 */
static void ta_ref_bwd_rband_dk(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws,
                                const ta_ref_step *st, int32_t h, const ta_ref_conv *cv) {
    const ta_tiling *t = &plan->bwd;
    const int32_t d_qk = plan->dim_k, c0 = st->col_begin, c1 = st->col_begin + st->cols;
    const int32_t first = ta_tiling_max_i32(0, c0 - plan->p.rband_width);
    ta_ref_step bs = *st; /* rows: the K tile's positions; columns: the band's K tiles */
    ta_ref_bwd_pair pr;
    int32_t kt, n, j, d;
    ta_plan_context(plan, t, a->seqlens_k, st->ctx.batch, h, 0, &bs.ctx);
    bs.row_begin = bs.row_load_begin = c0;
    bs.rows = bs.rows_load = st->cols;
    bs.q_tile = -1;
    ta_ref_bwd_load_q(plan, a, ws, &bs);
    for (kt = first / t->block_k; kt <= st->k_tile; ++kt) {
        ta_ref_step_cols(t, &bs, kt);
        ta_ref_load_kv(plan, a->k, a->v, ws->k, ws->v, &bs);
        ta_ref_bwd_pair_make(plan, ws, &bs, &pr);
        ta_ref_bwd_recompute(plan, a, ws, cv, &bs, &pr);
        if (!ta_ref_rband_meets(plan, &bs)) continue; /* qt not loaded: no band entry */
        for (n = c0; n < c1; ++n) {
            float *dk_part = ws->dk_part + ta_ref_off(c0, n, d_qk); /* [D] */
            for (j = bs.col_begin; j < bs.col_begin + bs.cols; ++j) {
                const float *q_row = ws->qt + ta_ref_off(bs.col_begin, j, d_qk); /* [D] q~_j */
                float a_dl;
                if (j % TA_SUM2_CHUNK == 0) ta_ref_bwd_flush_dkdv(plan, ws, n - c0);
                if (!ta_ref_bwd_in_band(plan, ws, &bs, n, j)) continue;
                a_dl = plan->p.rband_alpha * *ta_ref_at(&pr.ds, n, j);
                for (d = 0; d < d_qk; ++d)
                    dk_part[d] = TA_FMAF(a_dl, q_row[d], dk_part[d]);
            }
        }
    }
    ta_ref_load_kv(plan, a->k, a->v, ws->k, ws->v, st);
}

/* Pass 1 for one (b, kv head, K tile): the kv group's query heads ascending,
 * then the Q tiles that see this K tile, ascending. */
void ta_ref_bwd_k_tile(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws,
                       ta_ref_step *st) {
    const ta_tiling *t = &plan->bwd;
    const size_t n_dk = (size_t)st->cols * (size_t)plan->dim_k;
    const size_t n_dv = (size_t)st->cols * (size_t)plan->dim_v;
    ta_ref_bwd_pair pr;
    int32_t g, qt, j, q_begin, q_end;
    size_t n;
    ta_tile_k_rows(t, st->k_tile, st->ctx.key_len, &q_begin, &q_end);
    /* step 1: K, V tiles (loaded columns); zero the dk, dv pairs (both words)
     * and partials */
    ta_ref_load_kv(plan, a->k, a->v, ws->k, ws->v, st);
    for (n = 0; n < n_dk; ++n)
        ws->dk_acc[n] = ws->dk_lo[n] = ws->dk_part[n] = 0.0f;
    for (n = 0; n < n_dv; ++n)
        ws->dv_acc[n] = ws->dv_lo[n] = ws->dv_part[n] = 0.0f;
    if (a->accumulate) ta_ref_bwd_pairs_dkdv(plan, a, ws, st, 0); /* the caller's pairs */
    /* step 2: heads of the group ascending (each with its own kernel), then Q tiles */
    for (g = 0; g < plan->group; ++g) {
        const int32_t h = st->ctx.head_kv * plan->group + g;
        const ta_ref_conv cv = ta_ref_conv_of(plan, a->conv_w, h);
        for (qt = q_begin; qt < q_end; ++qt) {
            /* the query side of (h, qt); the K tile and its slices stay */
            ta_plan_context(plan, t, a->seqlens_k, st->ctx.batch, h, qt, &st->ctx);
            ta_ref_step_rows(t, st, qt);
            ta_trace_add(a->trace, TA_PASS_BWD_DKDV, st->ctx.batch, h, qt, st->k_tile);
            ta_ref_bwd_load_q(plan, a, ws, st);
            ta_ref_bwd_pair_make(plan, ws, st, &pr);
            ta_ref_bwd_recompute(plan, a, ws, &cv, st, &pr);
            ta_ref_bwd_accum_dkdv(plan, ws, st, &pr);
        }
        /* the head's last row chunk (a chunk never spans two heads) */
        for (j = 0; j < st->cols; ++j)
            ta_ref_bwd_flush_dkdv(plan, ws, j);
        if (!ws->kt) continue;
        /* band: the head's transposed term, then its last key chunk */
        ta_ref_bwd_rband_dk(plan, a, ws, st, h, &cv);
        for (j = 0; j < st->cols; ++j)
            ta_ref_bwd_flush_dkdv(plan, ws, j);
    }
    /* step 3: scale dk, round both once (accumulate: the pairs back, unscaled) */
    if (a->accumulate)
        ta_ref_bwd_pairs_dkdv(plan, a, ws, st, 1);
    else
        ta_ref_bwd_store_dkdv(plan, a, ws, st);
}

/* Pass 2: row r's (row rl of the Q tile) partial of the current key chunk
 * into its pair, (dq_acc, dq_lo) += dq_part (ta_sum2_add, alpha = 1), and
 * the partial back to +0. */
static void ta_ref_bwd_flush_dq(const ta_plan *plan, const ta_ref_bwd_ws *ws, int32_t rl) {
    const size_t d_qk = (size_t)plan->dim_k, off = (size_t)rl * d_qk;
    ta_ref_bwd_flush(ws->dq_acc + off, ws->dq_lo + off, ws->dq_part + off, d_qk);
}

/* Pass 2's sums over keys for one tile pair: for each effective row r (row
 * rl of the Q tile), keys j ascending, live entries only:
 *   part_r = fmaf(x_rj, y_j, part_r)     (y_j: row j of the K-side tile y, width w)
 * a key j that starts a key chunk (j % TA_SUM2_CHUNK = 0) first flushes r's
 * partial into its pair (hi, lo). dq: x = dS, y = K; ctx~: x = P, y = V. */
static void ta_ref_bwd_accum_keys(const ta_plan *plan, const ta_ref_bwd_ws *ws,
                                  const ta_ref_step *st, const ta_ref_bwd_pair *pr,
                                  const ta_ref_tile *x, const float *y, int32_t w, float *hi,
                                  float *lo, float *part) {
    int32_t r, j, d;
    for (r = pr->eff.row_begin; r < pr->eff.row_end; ++r) {
        const size_t off = ta_ref_off(st->row_begin, r, w);
        float *part_r = part + off; /* [w] */
        for (j = pr->eff.col_begin; j < pr->eff.col_end; ++j) {
            const float *y_row = y + ta_ref_off(st->col_load_begin, j, w); /* [w] */
            float x_rj;
            if (j % TA_SUM2_CHUNK == 0) ta_ref_bwd_flush(hi + off, lo + off, part_r, (size_t)w);
            if (!ta_ref_bwd_live(plan, ws, st, r, j)) continue;
            x_rj = *ta_ref_at(x, r, j);
            for (d = 0; d < w; ++d)
                part_r[d] = TA_FMAF(x_rj, y_row[d], part_r[d]);
        }
    }
}

/* Pass 2 accumulation of dq for one tile pair: dq_part_r = fmaf(dS_rj, k_j, .). */
static void ta_ref_bwd_accum_dq(const ta_plan *plan, const ta_ref_bwd_ws *ws, const ta_ref_step *st,
                                const ta_ref_bwd_pair *pr) {
    ta_ref_bwd_accum_keys(plan, ws, st, pr, &pr->ds, ws->k, plan->dim_k, ws->dq_acc, ws->dq_lo,
                          ws->dq_part);
}

/* Pass 2, the band: row r's (row rl of the Q tile) d_alpha partial of the
 * current key chunk into its pair, and the partial back to +0. */
static void ta_ref_bwd_flush_da(const ta_ref_bwd_ws *ws, int32_t rl) {
    ta_ref_bwd_flush(ws->da_hi + rl, ws->da_lo + rl, ws->da_part + rl, 1);
}

/* Pass 2, the band's d_alpha terms of one tile pair: for each effective row r,
 * keys j ascending, the live band entries: da_part_r = fmaf(dl_rj, T_rj,
 * da_part_r); a key j that starts a key chunk first flushes r's partial. */
static void ta_ref_bwd_accum_da(const ta_plan *plan, const ta_ref_bwd_ws *ws,
                                const ta_ref_step *st, const ta_ref_bwd_pair *pr) {
    int32_t r, j;
    if (!ta_ref_rband_meets(plan, st)) return; /* no band entry (T not computed) */
    for (r = pr->eff.row_begin; r < pr->eff.row_end; ++r) {
        const int32_t rl = r - st->row_begin;
        for (j = pr->eff.col_begin; j < pr->eff.col_end; ++j) {
            if (j % TA_SUM2_CHUNK == 0) ta_ref_bwd_flush_da(ws, rl);
            if (!ta_ref_bwd_in_band(plan, ws, st, r, j)) continue;
            ws->da_part[rl] = TA_FMAF(*ta_ref_at(&pr->ds, r, j), *ta_ref_at(&pr->tt, r, j),
                                      ws->da_part[rl]);
        }
    }
}

/*
 * Pass 2, the band's term of dq (after the K tiles): row m of Q tile st is
 * the query at the position of key m, so
 *   dq_m += sum_(i in [m, m + W] ascending) (alpha * dl_im) k_i
 * over the transposed blocks whose columns are the Q tile's positions [r0, r1)
 * and whose rows are the Q tiles from st's own to the one holding
 * min(r1 - 1 + W, S_q - 1), ascending; a row i that starts a row chunk
 * (i % TA_SUM2_CHUNK = 0) first flushes m's partial. The caller flushes after.
 */
static void ta_ref_bwd_rband_dq(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws,
                                const ta_ref_step *st, const ta_ref_conv *cv) {
    const ta_tiling *t = &plan->bwd;
    const int32_t d_qk = plan->dim_k, r0 = st->row_begin, r1 = st->row_begin + st->rows;
    const int64_t last = ta_tiling_min_i32(plan->p.seq_q - 1, r1 - 1) + (int64_t)plan->p.rband_width;
    ta_ref_step bs = *st; /* columns: the Q tile's positions; rows: the band's Q tiles */
    ta_ref_bwd_pair pr;
    int32_t qt, m, i, d;
    bs.col_begin = bs.col_load_begin = r0;
    bs.cols = bs.cols_load = st->rows;
    bs.k_tile = -1;
    for (qt = st->q_tile; qt < t->num_q_tiles && ta_tile_row_eff_begin(t, qt) <= last; ++qt) {
        ta_ref_step_rows(t, &bs, qt);
        ta_ref_bwd_load_q(plan, a, ws, &bs); /* q, dO, lse, D and kt of the rows */
        ta_ref_load_kv(plan, a->k, a->v, ws->k, ws->v, &bs);
        ta_ref_bwd_pair_make(plan, ws, &bs, &pr);
        ta_ref_bwd_recompute(plan, a, ws, cv, &bs, &pr);
        for (m = r0; m < r1; ++m) {
            float *part = ws->dq_part + ta_ref_off(r0, m, d_qk); /* [D] */
            for (i = bs.row_begin; i < bs.row_begin + bs.rows; ++i) {
                const float *k_row = ws->kt + ta_ref_off(bs.row_begin, i, d_qk); /* [D] k_i */
                float a_dl;
                if (i % TA_SUM2_CHUNK == 0) ta_ref_bwd_flush_dq(plan, ws, m - r0);
                if (i < m || !ta_ref_bwd_in_band(plan, ws, &bs, i, m)) continue;
                a_dl = plan->p.rband_alpha * *ta_ref_at(&pr.ds, i, m);
                for (d = 0; d < d_qk; ++d)
                    part[d] = TA_FMAF(a_dl, k_row[d], part[d]);
            }
        }
    }
}

/* Pass 2, the projections: row rl's ctx~ partial of the current key chunk
 * into its pair, and the partial back to +0. */
static void ta_ref_bwd_flush_ctx(const ta_plan *plan, const ta_ref_bwd_ws *ws, int32_t rl) {
    const size_t lat = (size_t)plan->dim_v, off = (size_t)rl * lat;
    ta_ref_bwd_flush(ws->ctx_hi + off, ws->ctx_lo + off, ws->ctx_part + off, lat);
}

/* Pass 2, the projections: the latent output ctx~_r = sum_j P_rj v_j
 * recomputed for dW_vup, as dq's sum (keys ascending, live entries, 64-key
 * chunks into the row's pairs). */
static void ta_ref_bwd_accum_ctx(const ta_plan *plan, const ta_ref_bwd_ws *ws,
                                 const ta_ref_step *st, const ta_ref_bwd_pair *pr) {
    ta_ref_bwd_accum_keys(plan, ws, st, pr, &pr->p, ws->v, plan->dim_v, ws->ctx_hi, ws->ctx_lo,
                          ws->ctx_part);
}

/* Pass 2, the projections: the current row chunk's weight-gradient partials
 * into head h's pairs (hi in args.dw_qlat / dw_vup, lo in the workspace), and
 * the partials back to +0. */
static void ta_ref_bwd_flush_dw(const ta_plan *plan, const ta_bwd_args *a,
                                const ta_ref_bwd_ws *ws, int32_t h) {
    const size_t n_q = plan->n_wq / (size_t)plan->p.heads_q;
    const size_t n_v = plan->n_wv / (size_t)plan->p.heads_q;
    const size_t oq = (size_t)h * n_q, ov = (size_t)h * n_v;
    ta_ref_bwd_flush(a->dw_qlat + oq, ws->dwq_lo + oq, ws->dwq_part, n_q);
    ta_ref_bwd_flush(a->dw_vup + ov, ws->dwv_lo + ov, ws->dwv_part, n_v);
}

/*
 * Pass 2's end of one Q tile with the projections: the rows' dq~ (scale *
 * the dq pair's hi word, f32, left in ws->dq_acc) is projected back,
 *   dq_d = sum_l fmaf(W_qlat[h][d][l], dq~_l, acc) from +0, l ascending,
 * and stored once (ta_ref_bwd_dw_lat then reads dq~).
 */
static void ta_ref_bwd_store_dq_lat(const ta_plan *plan, const ta_bwd_args *a,
                                    const ta_ref_bwd_ws *ws, const ta_ref_step *st) {
    const ta_problem *p = &plan->p;
    const int32_t lat = p->latent_dim, dq_w = p->head_dim;
    const float *w = a->w_qlat + (size_t)st->ctx.head * (size_t)dq_w * (size_t)lat; /* [D, L] */
    int32_t r, d, l;
    for (r = st->row_begin; r < st->row_begin + st->rows; ++r) {
        float *g = ws->dq_acc + ta_ref_off(st->row_begin, r, lat); /* [L]: dq~ */
        const size_t first = ta_ref_row(st->ctx.dq, plan->layout.dq.seq, r);
        for (l = 0; l < lat; ++l)
            g[l] = p->scale * g[l];
        for (d = 0; d < dq_w; ++d) {
            float acc = 0.0f;
            for (l = 0; l < lat; ++l)
                acc = TA_FMAF(w[(size_t)d * (size_t)lat + (size_t)l], g[l], acc);
            ta_store(a->dq, p->dtype, first + (size_t)d, acc);
        }
    }
}

/*
 * The projections' weight gradients of one Q tile (the call's sums, in
 * (b, h, Q tile) order): the raw q and dO rows are loaded again and each row
 * r ascending adds (a row starting a row chunk first flushes the partials
 * into head h's pairs)
 *   dwq_part[d][l] = fmaf(q_rd, dq~_rl, .)     dwv_part[l][e] = fmaf(ctx~_rl, dO_re, .)
 * with dq~_r from ta_ref_bwd_store_dq_lat and ctx~_r the hi words of the
 * row's ctx pairs. The last Q tile of (b, h) flushes (b, h)'s last chunk.
 */
static void ta_ref_bwd_dw_lat(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws,
                              const ta_ref_step *st) {
    const ta_problem *p = &plan->p;
    const int32_t lat = p->latent_dim, dq_w = p->head_dim, do_w = p->head_dim_v;
    int32_t r, d, l, e;
    ta_ref_load_rows(ws->qraw, a->q, p->dtype, st->ctx.q, plan->layout.q.seq, p->seq_q,
                     st->row_begin, st->rows, dq_w);
    ta_ref_load_rows(ws->doraw, a->d_o, p->dtype, st->ctx.d_o, plan->layout.d_o.seq, p->seq_q,
                     st->row_begin, st->rows, do_w);
    for (r = st->row_begin; r < st->row_begin + st->rows; ++r) {
        const float *g = ws->dq_acc + ta_ref_off(st->row_begin, r, lat);   /* [L] */
        const float *x = ws->qraw + ta_ref_off(st->row_begin, r, dq_w);    /* [D] */
        const float *ctx = ws->ctx_hi + ta_ref_off(st->row_begin, r, lat); /* [L] */
        const float *dout = ws->doraw + ta_ref_off(st->row_begin, r, do_w); /* [D_v] */
        if (r % TA_SUM2_CHUNK == 0) ta_ref_bwd_flush_dw(plan, a, ws, st->ctx.head);
        for (d = 0; d < dq_w; ++d)
            for (l = 0; l < lat; ++l) {
                float *t = ws->dwq_part + (size_t)d * (size_t)lat + (size_t)l;
                *t = TA_FMAF(x[d], g[l], *t);
            }
        for (l = 0; l < lat; ++l)
            for (e = 0; e < do_w; ++e) {
                float *t = ws->dwv_part + (size_t)l * (size_t)do_w + (size_t)e;
                *t = TA_FMAF(ctx[l], dout[e], *t);
            }
    }
    if (st->q_tile == plan->bwd.num_q_tiles - 1) /* (b, h)'s last chunk */
        ta_ref_bwd_flush_dw(plan, a, ws, st->ctx.head);
}

/* Pass 2 for one (b, h, Q tile), steps 1-3 but the call's sums (ref/ta_ref.h). */
void ta_ref_bwd_q_tile_dq(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws,
                          ta_ref_step *st) {
    const ta_problem *p = &plan->p;
    const int32_t d_qk = plan->dim_k;
    const size_t n_dq = (size_t)st->rows * (size_t)d_qk;
    const size_t n_w = (size_t)p->conv_q * (size_t)p->conv_k;
    const ta_ref_conv cv = ta_ref_conv_of(plan, a->conv_w, st->ctx.head);
    ta_ref_bwd_pair pr;
    int32_t kt, r, d;
    size_t n;
    /* step 1: Q, dO, lse, D tiles; zero the dq pair and this Q tile's dw sum */
    ta_ref_bwd_load_q(plan, a, ws, st);
    for (n = 0; n < n_dq; ++n)
        ws->dq_acc[n] = ws->dq_lo[n] = ws->dq_part[n] = 0.0f;
    if (a->accumulate) /* the caller's pairs (ta_bwd_args.accumulate) */
        ta_pairs_get((const float *)a->dq, a->dq_lo, st->ctx.dq, plan->layout.dq.seq, st->row_begin,
                     st->rows, d_qk, ws->dq_acc, ws->dq_lo, (size_t)d_qk);
    for (n = 0; plan->has_conv && n < n_w; ++n)
        ws->dw_qtile[n] = ws->dw_qtile_lo[n] = 0.0f;
    for (r = 0; ws->da_hi && r < st->rows; ++r)
        ws->da_hi[r] = ws->da_lo[r] = ws->da_part[r] = 0.0f;
    for (n = 0; ws->ctx_hi && n < n_dq; ++n) /* projections: L = D here */
        ws->ctx_hi[n] = ws->ctx_lo[n] = ws->ctx_part[n] = 0.0f;
    /* step 2: K tiles ascending: recompute, accumulate dS k; dw partial of the pair */
    for (kt = st->ctx.k_begin; kt < st->ctx.k_end; ++kt) {
        ta_ref_step_cols(&plan->bwd, st, kt);
        ta_trace_add(a->trace, TA_PASS_BWD_DQ, st->ctx.batch, st->ctx.head, st->q_tile, kt);
        ta_ref_load_kv(plan, a->k, a->v, ws->k, ws->v, st);
        ta_ref_bwd_pair_make(plan, ws, st, &pr);
        ta_ref_bwd_recompute(plan, a, ws, &cv, st, &pr);
        ta_ref_bwd_accum_dq(plan, ws, st, &pr);
        if (ws->da_hi) ta_ref_bwd_accum_da(plan, ws, st, &pr);
        if (ws->ctx_hi) ta_ref_bwd_accum_ctx(plan, ws, st, &pr);
        if (!plan->has_conv) continue;
        ta_ref_conv_dw_tile(ws->dw_tile, &pr.dc, &pr.s, &cv, &pr.eff);
        for (n = 0; n < n_w; ++n) /* R(b, qt) = 0 + part(kt=0) + part(kt=1) + ..., a pair */
            ta_sum2_add(ws->dw_qtile + n, ws->dw_qtile_lo + n, 1.0f, ws->dw_tile[n]);
    }
    /* step 3: the last key chunk's partials into the pairs (band: then its
     * transposed term and its last row chunk; the rows' d_alpha pairs close);
     * dq = scale * dq_acc (the pair's hi word), rounded once */
    for (r = 0; r < st->rows; ++r)
        ta_ref_bwd_flush_dq(plan, ws, r);
    if (ws->da_hi) {
        for (r = 0; r < st->rows; ++r)
            ta_ref_bwd_flush_da(ws, r);
        ta_ref_bwd_rband_dq(plan, a, ws, st, &cv);
        for (r = 0; r < st->rows; ++r)
            ta_ref_bwd_flush_dq(plan, ws, r);
    }
    if (ws->ctx_hi) { /* the projections: ctx~'s last key chunk; dq (dW: the merge) */
        for (r = 0; r < st->rows; ++r)
            ta_ref_bwd_flush_ctx(plan, ws, r);
        ta_ref_bwd_store_dq_lat(plan, a, ws, st);
        return;
    }
    if (a->accumulate) { /* the pairs back, unscaled (no rope: validated) */
        ta_pairs_put((float *)a->dq, a->dq_lo, st->ctx.dq, plan->layout.dq.seq, st->row_begin,
                     st->rows, d_qk, ws->dq_acc, ws->dq_lo, (size_t)d_qk);
        return;
    }
    for (r = st->row_begin; r < st->row_begin + st->rows; ++r) {
        float *dq_row = ws->dq_acc + ta_ref_off(st->row_begin, r, d_qk); /* [D] */
        const size_t first = ta_ref_row(st->ctx.dq, plan->layout.dq.seq, r);
        ta_ref_rope_grad(plan, dq_row, TA_ROPE_SIDE_Q, st, r); /* w.r.t. the stored q */
        for (d = 0; d < d_qk; ++d)
            ta_store(a->dq, p->dtype, first + (size_t)d, p->scale * dq_row[d]);
    }
}

/* Pass 2's sums for one (b, h, Q tile) after ta_ref_bwd_q_tile_dq, in (b, h,
 * Q tile) order: the pair (dconv_w[h], dw_lo[h]) += R(b, qt) (its hi word);
 * the band's d_alpha pair += each row's d_alpha (hi word), rows ascending; the
 * projections' weight gradients (ta_ref_bwd_dw_lat). */
void ta_ref_bwd_q_tile_merge(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws,
                             const ta_ref_step *st) {
    const size_t n_w = (size_t)plan->p.conv_q * (size_t)plan->p.conv_k;
    size_t n;
    int32_t r;
    if (plan->has_conv && st->ctx.k_begin < st->ctx.k_end) {
        float *dw = a->dconv_w + (size_t)st->ctx.head * n_w; /* [c_q, c_k] of head h */
        float *dw_lo = ws->dw_lo + (size_t)st->ctx.head * n_w;
        for (n = 0; n < n_w; ++n)
            ta_sum2_add(dw + n, dw_lo + n, 1.0f, ws->dw_qtile[n]);
    }
    for (r = 0; ws->da_g && r < st->rows; ++r)
        ta_sum2_add(ws->da_g, ws->da_g + 1, 1.0f, ws->da_hi[r]);
    if (ws->dwq_lo) ta_ref_bwd_dw_lat(plan, a, ws, st);
}

/* The call's sums to zero (their pairs, and the weight gradients' partials). */
void ta_ref_bwd_begin(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws) {
    const ta_problem *p = &plan->p;
    size_t n;
    for (n = 0; plan->has_conv && n < plan->n_conv; ++n) { /* accumulate: the caller's pair */
        if (!a->accumulate) a->dconv_w[n] = 0.0f;
        ws->dw_lo[n] = a->accumulate ? a->dconv_w_lo[n] : 0.0f;
    }
    if (ws->da_g) ws->da_g[0] = ws->da_g[1] = 0.0f;
    for (n = 0; ws->dwq_lo && n < plan->n_wq; ++n) /* the weight gradients' pairs */
        a->dw_qlat[n] = ws->dwq_lo[n] = 0.0f;
    for (n = 0; ws->dwv_lo && n < plan->n_wv; ++n)
        a->dw_vup[n] = ws->dwv_lo[n] = 0.0f;
    for (n = 0; ws->dwq_lo && n < plan->n_wq / (size_t)p->heads_q; ++n)
        ws->dwq_part[n] = 0.0f;
    for (n = 0; ws->dwv_lo && n < plan->n_wv / (size_t)p->heads_q; ++n)
        ws->dwv_part[n] = 0.0f;
}

/* The call's end: d_alpha = the pair's hi word (band); accumulate with the
 * conv: dconv_w's lo words back to the caller. */
void ta_ref_bwd_end(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws) {
    if (ws->da_g) *a->d_alpha = ws->da_g[0];
    if (plan->has_conv && a->accumulate)
        memcpy(a->dconv_w_lo, ws->dw_lo, plan->n_conv * sizeof(float));
}

/* Pass 1 over every (b, kv head, K tile), then pass 2 over every (b, h, Q tile),
 * of the output ranges (ta_tile_k_in_range, ta_tile_q_in_range: the tiles
 * outside are not visited and their gradients not written; docs/mta.md 2b).
 * dconv_w is overwritten: its pairs (dconv_w, dw_lo) zeroed here (accumulate:
 * the caller's pair, continued), then the Q tiles' sums added in ascending
 * (b, Q tile) order per head; dconv_w is the pairs' hi words. */
ta_status ta_ref_bwd(const ta_plan *plan, const ta_bwd_args *a, void *workspace, void *stream) {
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
    ta_ref_bwd_begin(plan, a, &ws);
    /* pass 1: dk, dv; K tiles outer */
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads_kv; ++h)
            for (kt = 0; kt < t->num_k_tiles; ++kt) {
                if (!ta_tile_k_in_range(t, kt)) continue;
                ta_ref_step_k(plan, t, a->seqlens_k, b, h, kt, &st);
                ta_ref_bwd_k_tile(plan, a, &ws, &st);
            }
    /* pass 2: dq (and dconv_w); Q tiles outer */
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads_q; ++h)
            for (qt = 0; qt < t->num_q_tiles; ++qt) {
                if (!ta_tile_q_in_range(t, qt)) continue;
                ta_ref_step_q(plan, t, a->seqlens_k, b, h, qt, &st);
                ta_ref_bwd_q_tile_dq(plan, a, &ws, &st);
                ta_ref_bwd_q_tile_merge(plan, a, &ws, &st);
            }
    ta_ref_bwd_end(plan, a, &ws);
    return TA_OK;
}

/* ta_bwd_finish (ta_internal.h): each requested gradient from its hi words, rounded once as ta_bwd
 * stores it (dq, dk: scale * hi; dv: hi). */
static void ta_ref_finish_one(const ta_plan *plan, const float *hi, void *out, int32_t heads,
                              int32_t seq, int32_t dim, const ta_strides *lay, float scale) {
    const ta_problem *p = &plan->p;
    int32_t b, h, r, d;
    size_t at = 0; /* hi is contiguous: element order */
    if (!hi) return;
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < heads; ++h)
            for (r = 0; r < seq; ++r) {
                const size_t first = (size_t)((int64_t)b * lay->batch + (int64_t)h * lay->head +
                                              (int64_t)r * lay->seq);
                for (d = 0; d < dim; ++d, ++at)
                    ta_store(out, p->dtype, first + (size_t)d, scale * hi[at]);
            }
}

ta_status ta_ref_bwd_finish(const ta_plan *plan, const ta_bwd_finish_args *a, void *stream) {
    const ta_problem *p = &plan->p;
    const ta_layout *lay = &plan->layout;
    (void)stream; /* host backends: NULL (validated) */
    ta_ref_finish_one(plan, a->dq_hi, a->dq, p->heads_q, p->seq_q, plan->dim_k, &lay->dq, p->scale);
    ta_ref_finish_one(plan, a->dk_hi, a->dk, p->heads_kv, p->seq_k, plan->dim_k, &lay->dk,
                      p->scale);
    ta_ref_finish_one(plan, a->dv_hi, a->dv, p->heads_kv, p->seq_k, plan->dim_v, &lay->dv, 1.0f);
    return TA_OK;
}
