/*
 * Float64 naive oracle, straight from docs/design.md section 2: for each
 * (batch, query head) it materialises the whole score matrix and runs
 *
 *     scores S  ->  transform C = T(S)  ->  masked softmax P  ->  o = P V
 *
 * The transform is the identity for plain SDPA and the MTA key-query conv
 * (docs/design.md section 2) when p->conv_q, p->conv_k are set:
 *
 *   S[r,j] = scale <q_r, k_j> if vis(r, j), else 0         (mask before the conv:
 *                                                            each shifted score's own pair)
 *   C[i,j] = sum_{a<c_q, b<c_k} w[a,b] S[i-(c_q-1-a), j+b-P] if vis(i, j), else -inf
 *
 * with vis(r, j): 0 <= j < key_len and, causal, j <= r + S_k - S_q (bottom-right),
 * out-of-range indices reading 0, P = (c_k-1)/2, w = conv_w[h]. The backward
 * runs the same pipeline in reverse; the conv adds
 *   dS[r,j] = sum_{a,b} w[a,b] dC[r+(c_q-1-a), j-(b-P)]     (for vis(r, j), else 0)
 *   dw[h][a,b] += sum_{i,j} dC[i,j] S[i-(c_q-1-a), j+b-P]   (summed over batch).
 * Tests only: allocates freely.
 */
#ifndef TA_ORACLE_H
#define TA_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "tileattn.h"

/* Inputs, widened to double. Layouts as in tileattn.h. */
typedef struct ta_oracle_in {
    const double *q;          /* [B, H, S_q, D] */
    const double *k;          /* [B, H_kv, S_k, D] */
    const double *v;          /* [B, H_kv, S_k, D_v] */
    const int32_t *seqlens_k; /* [B] or NULL */
    const double *conv_w;     /* [H, c_q, c_k]: the MTA conv kernel (ignored without a conv) */
    const double *d_o;        /* [B, H, S_q, D_v]: backward only */
    const double *o;          /* [B, H, S_q, D_v]: backward only, optional. NULL: the exact
                                 D_i = sum_j P_ij dP_ij; else D_i = <dO_i, o_i> from this
                                 (stored, possibly rounded) output, as the library does */
} ta_oracle_in;

/* Scale the library uses: p->scale, or 1/sqrt(D) computed in f32 as it is there. */
double ta_oracle_scale(const ta_problem *p);

/* Forward: o [B, H, S_q, D_v]; lse [B, H, S_q] (may be NULL). A row that sees
 * no key gives o = 0, lse = -inf. Returns 0, or -1 if a conv problem has no
 * conv_w or memory runs out. */
int ta_oracle_fwd(const ta_problem *p, const ta_oracle_in *in, double *o, double *lse);

/* Gradients of L = sum <dO, o>. dconv_w may be NULL (not wanted; it is only
 * written with a conv). */
typedef struct ta_oracle_grads {
    double *dq;      /* [B, H, S_q, D] */
    double *dk;      /* [B, H_kv, S_k, D] */
    double *dv;      /* [B, H_kv, S_k, D_v] */
    double *dconv_w; /* [H, c_q, c_k], summed over batch; NULL = not wanted */
} ta_oracle_grads;
int ta_oracle_bwd_grads(const ta_problem *p, const ta_oracle_in *in, const ta_oracle_grads *g);

/* Backward of L = sum <dO, o>: dq [B,H,S_q,D], dk [B,H_kv,S_k,D], dv [B,H_kv,S_k,D_v]
 * (ta_oracle_bwd_grads without dconv_w). Returns 0 or -1 as ta_oracle_fwd. */
int ta_oracle_bwd(const ta_problem *p, const ta_oracle_in *in, double *dq, double *dk, double *dv);

/*
 * Magnitudes (a first-order error scale of each output): the same pipeline
 * with every term of every sum replaced by its absolute value, and each
 * probability weighted by the size of its exponent, since exp(x) computed from
 * an x that errs by u |x| errs relatively by u |x|:
 *
 *   |S|_ij  = |scale| sum_d |q_id k_jd|
 *   |C|_ij  = |S|_ij, or with the conv sum_{a,b} |w_ab| |S|_(i-(c_q-1-a), j+b-P)
 *   lse_mag = max_j |C|_ij + log sum_j P~_ij
 *   o_mag   = sum_j P_ij (|v_j| + |C|_ij (|v_j| + |o_i|))
 *   W_ij    = P_ij (1 + |C|_ij + lse_mag_i)             (backward: P = exp(C - lse))
 *   dv_mag  = sum_i W_ij |dO_i|
 *   dC_mag  = W_ij (sum_d |dO_id v_jd| + |D|_i)         |D|_i = sum_d |dO_id o_id|
 *                                                        (or sum_j P_ij |dP|_ij)
 *   dS_mag  = dC_mag, or with the conv sum_{a,b} |w_ab| dC_mag_(i+(c_q-1-a), j-(b-P))
 *   dq_mag  = |scale| sum_j dS_mag_ij |k_j|             dk_mag = |scale| sum_i dS_mag_ij |q_i|
 *   dw_mag  = sum_(b, i, j) dC_mag_ij |S|_(i-(c_q-1-a), j+b-P)
 *
 * A sum whose terms cancel has a small result but a large magnitude, and the
 * error of a fixed-order f32 evaluation is bounded by a modest multiple of
 * u * magnitude, so the test normalises its elementwise errors by these.
 * Masked outputs have magnitude 0. Returns as ta_oracle_fwd / ta_oracle_bwd.
 */
int ta_oracle_fwd_mag(const ta_problem *p, const ta_oracle_in *in, double *o_mag, double *lse_mag);
int ta_oracle_bwd_mag(const ta_problem *p, const ta_oracle_in *in, double *dq_mag, double *dk_mag,
                      double *dv_mag);
int ta_oracle_bwd_grads_mag(const ta_problem *p, const ta_oracle_in *in, const ta_oracle_grads *g);

/* Widen n elements of a dtype buffer into a new double array (free()). */
double *ta_oracle_widen(const void *buf, ta_dtype dt, size_t n);

/* The mask of docs/design.md section 2 (causal, key_len, window), written
 * from the spec and not from the tiling header: 1 if query row r sees key j. */
int ta_oracle_sees(const ta_problem *p, int32_t key_len, int32_t r, int32_t j);

#endif /* TA_ORACLE_H */
