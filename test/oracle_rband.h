/*
 * Float64 oracle of latent attention with a reciprocal band (docs/api.md,
 * "Latent attention and the reciprocal band"), straight from the definition,
 * with the whole [S_q, S_k] logit matrix of each (batch, head) materialised:
 *
 *   p_i   = i + S_k - S_q,  row(j) = j - (S_k - S_q)   (rows < 0: the history rows)
 *   S_ij  = scale <q_i, k_j>
 *   T_ij  = scale <q_row(j), k_(p_i)>
 *   l_ij  = S_ij + alpha T_ij     0 <= p_i - j <= W
 *         = S_ij                  j < p_i - W
 *         = -inf                  j > p_i   (TA_CAUSAL; without it every key is seen,
 *                                           and the band needs TA_RBAND in flags)
 *   P     = softmax_j(l),  o_i = sum_j P_ij v_j,  lse_i = log sum_j exp(l_ij)
 *
 * Backward (S_q = S_k, no history rows) of L = sum <dO, o>:
 *   dP_ij = <dO_i, v_j>,  D_i = sum_j P_ij dP_ij (or <dO_i, o_i> with a stored o)
 *   dl_ij = P_ij (dP_ij - D_i)
 *   dv_j += P_ij dO_i
 *   dq_i += scale dl_ij k_j,             dk_j += scale dl_ij q_i
 *   band: dq_j += alpha scale dl_ij k_i,  dk_i += alpha scale dl_ij q_j
 *   d_alpha = sum over the band of dl_ij T_ij
 *
 * The magnitudes (every term of every sum by its absolute value, as
 * test/oracle.h describes for SDPA, with |l| = |S| + |alpha| |T|) give the
 * error scale a fixed-order f32 evaluation is bounded by. Tests only: allocates.
 */
#ifndef TA_ORACLE_RBAND_H
#define TA_ORACLE_RBAND_H

#include <stddef.h>
#include <stdint.h>

#include "tileattn.h"

typedef struct ta_rb_in {
    const ta_problem *p; /* sizes, heads, q_history, rband_width; scale and alpha below */
    double scale, alpha; /* doubles, so finite differences can move alpha */
    const double *q;     /* [B, H, S_q, L] */
    const double *q_hist; /* [B, H, q_history, L]; NULL when q_history = 0 */
    const double *k;     /* [B, H_kv, S_k, L] */
    const double *v;     /* [B, H_kv, S_k, D_v] */
    const double *d_o;   /* [B, H, S_q, D_v]: backward only */
    const double *o;     /* [B, H, S_q, D_v] or NULL: D_i from this stored output */
    const double *q_mag, *q_hist_mag; /* NULL, or |q|'s stand-in in the magnitudes (the
                                         projection's magnitude sum_d |q_d W_dl|) */
    const double *d_o_mag;            /* NULL, or |dO|'s stand-in (backward) */
    const double *delta, *delta_mag;  /* NULL, or D_i [B, H, S_q] given (and |D|_i) */
} ta_rb_in;

/* Outputs; any pointer may be NULL (not wanted). The backward ones need
 * S_q = S_k. *_mag: the magnitudes of the same outputs. */
typedef struct ta_rb_out {
    double *o, *lse, *dq, *dk, *dv, *d_alpha;
    double *o_mag, *lse_mag, *dq_mag, *dk_mag, *dv_mag, *d_alpha_mag;
    double *dw_qlat, *dw_vup, *dw_qlat_mag, *dw_vup_mag; /* ta_rb_oracle_lat only */
} ta_rb_out;

/* Returns 0, or -1 when memory runs out or a backward output is asked for
 * with S_q != S_k. */
int ta_rb_oracle(const ta_rb_in *in, const ta_rb_out *out);

/* With the fused projections (p->latent_dim = L > 0): q [B, H, S_q, D] and
 * q_hist [B, H, n, D] are projected, q~_i = W_qlat[h]^T q_i (w_qlat [H, D, L]),
 * the band attention runs on q~, k, v [B, H_kv, S_k, L], and o_i = W_vup[h]^T
 * ctx~_i (w_vup [H, L, D_v]); magnitudes carry the projections' |q| |W| sums.
 * The backward (S_q = S_k): dctx~_i = W_vup[h] dO_i, the band backward on q~
 * with dctx~ as dO (D_i = <dO_i, o_i> from in->o when given), then
 *   dq_i = W_qlat[h] dq~_i,  dW_qlat[h] = sum_(b, i) q_i dq~_i^T,
 *   dW_vup[h] = sum_(b, i) ctx~_i dO_i^T.  Returns as ta_rb_oracle. */
int ta_rb_oracle_lat(const ta_rb_in *in, const double *w_qlat, const double *w_vup,
                     const ta_rb_out *out);

/* The scale the library uses: p->scale, or 1/sqrt(head_dim) in f32. */
double ta_rb_scale(const ta_problem *p);
/* ... with the fused projections: 1/sqrt(latent_dim) in f32 for scale 0. */
double ta_rb_scale_lat(const ta_problem *p);

#endif /* TA_ORACLE_RBAND_H */
