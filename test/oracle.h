/*
 * Float64 naive oracle, straight from DESIGN.md section 2: for each
 * (batch, query head) it materialises the whole score matrix and runs
 *
 *     scores S  ->  transform C = T(S)  ->  masked softmax P  ->  o = P V
 *
 * The transform is the identity for plain SDPA; the MTA key-query conv plugs
 * in there (its own issue: ta_oracle_transform_fwd/_bwd in oracle.c), with a
 * mask on the raw scores (before T) and one on the transformed scores (after).
 * The backward runs the same pipeline in reverse. Tests only: allocates freely.
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
    const double *conv_w;     /* [H, c_q, c_k]: reserved for the MTA conv (NULL for SDPA) */
    const double *d_o;        /* [B, H, S_q, D_v]: backward only */
    const double *o;          /* [B, H, S_q, D_v]: backward only, optional. NULL: the exact
                                 D_i = sum_j P_ij dP_ij; else D_i = <dO_i, o_i> from this
                                 (stored, possibly rounded) output, as the library does */
} ta_oracle_in;

/* Scale the library uses: p->scale, or 1/sqrt(D) computed in f32 as it is there. */
double ta_oracle_scale(const ta_problem *p);

/* Forward: o [B, H, S_q, D_v]; lse [B, H, S_q] (may be NULL). A row that sees
 * no key gives o = 0, lse = -inf. Returns 0, or -1 if the problem asks for
 * something the oracle does not implement yet (the MTA conv). */
int ta_oracle_fwd(const ta_problem *p, const ta_oracle_in *in, double *o, double *lse);

/* Backward of L = sum <dO, o>: dq [B,H,S_q,D], dk [B,H_kv,S_k,D], dv [B,H_kv,S_k,D_v].
 * Returns 0 or -1 as ta_oracle_fwd. */
int ta_oracle_bwd(const ta_problem *p, const ta_oracle_in *in, double *dq, double *dk, double *dv);

/*
 * Magnitudes (a first-order error scale of each output): the same pipeline
 * with every term of every sum replaced by its absolute value, and each
 * probability weighted by the size of its exponent, since exp(x) computed from
 * an x that errs by u |x| errs relatively by u |x|:
 *   |S|_ij  = |scale| sum_d |q_id k_jd|                  lse_mag = max_j |S|_ij + log sum_j P~_ij
 *   o_mag   = sum_j P_ij (|v_j| + |S|_ij (|v_j| + |o_i|))
 *   W_ij    = P_ij (1 + |S|_ij + lse_mag_i)              (backward: P = exp(s - lse))
 *   dv_mag  = sum_i W_ij |dO_i|
 *   dS_mag  = W_ij (sum_d |dO_id v_jd| + |D|_i)          |D|_i = sum_d |dO_id o_id| (or sum_j P_ij
 * |dP|_ij) dq_mag  = |scale| sum_j dS_mag_ij |k_j|              dk_mag = |scale| sum_i dS_mag_ij
 * |q_i| A sum whose terms cancel has a small result but a large magnitude, and the error of a
 * fixed-order f32 evaluation is bounded by a modest multiple of u * magnitude, so the test
 * normalises its elementwise errors by these. Masked outputs have magnitude 0. Returns as
 * ta_oracle_fwd / ta_oracle_bwd.
 */
int ta_oracle_fwd_mag(const ta_problem *p, const ta_oracle_in *in, double *o_mag, double *lse_mag);
int ta_oracle_bwd_mag(const ta_problem *p, const ta_oracle_in *in, double *dq_mag, double *dk_mag,
                      double *dv_mag);

/* Widen n elements of a dtype buffer into a new double array (free()). */
double *ta_oracle_widen(const void *buf, ta_dtype dt, size_t n);

#endif /* TA_ORACLE_H */
