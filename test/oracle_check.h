/*
 * Pieces shared by test_oracle_sdpa and test_oracle_mta: one random problem and
 * its buffers, running the reference (poisoned outputs, garbage workspace), the
 * float64 oracle, the error measures against it, the structural checks both
 * tests make, finite differences on the oracle, and the tables of maxima.
 * An SDPA problem is an MTA one without a kernel (conv_q = 0, n_w = 0): no
 * conv_w, dconv_w or dw buffers, and the dconv_w column is left out.
 */
#ifndef TA_ORACLE_CHECK_H
#define TA_ORACLE_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "oracle.h"
#include "test_util.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

enum { T_O, T_LSE, T_DQ, T_DK, T_DV, T_DW, TA_OC_TENSORS };
extern const char *const ta_oc_tensor_name[TA_OC_TENSORS];
extern const char *const ta_oc_dtype_name[3];

/* Largest errors seen, per tensor (see ta_oc_compare). */
typedef struct err_max {
    double rel[TA_OC_TENSORS], cond[TA_OC_TENSORS];
} err_max;

/* One problem and its buffers. */
typedef struct tcase {
    ta_problem p;
    int32_t *seqlens; /* [B] or NULL */
    float *conv_w;    /* [H, c_q, c_k]; NULL without a conv */
    size_t n_q, n_k, n_v, n_o, n_lse, n_w, eb;
    void *q, *k, *v, *d_o;                           /* inputs, storage dtype */
    double *oq, *ok, *ov, *odo, *ow;                 /* widened for the oracle */
    double *orc[TA_OC_TENSORS], *mag[TA_OC_TENSORS]; /* oracle results, magnitudes */
} tcase;

/* Outputs of one reference run (dw only with a conv). */
typedef struct run_out {
    void *o, *dq, *dk, *dv;
    float *lse, *dw;
} run_out;

/* ---- random problems ---- */
/* batch, heads, head dims (pick_dim with the cumulative percentages cuts[3]
 * for 1..16, 32/64/96/128, 1..256; the rest 255 or 256) and dtype. */
int32_t ta_oc_pick_dim(ta_rng *r, const int32_t cuts[3]);
void ta_oc_random_heads(ta_rng *r, ta_problem *p, const int32_t dim_cuts[3]);
/* 3 in 10: an explicit scale, sometimes negative. */
void ta_oc_random_scale(ta_rng *r, ta_problem *p);
/* 4 in 10: seqlens_k, each 0, full or partial. */
void ta_oc_random_seqlens(ta_rng *r, tcase *tc);
/* The tiling the library builds for p with these blocks (window included). */
int ta_oc_make_tiling(const ta_problem *p, int32_t block_q, int32_t block_k, int pass,
                      ta_tiling *t);
/* Sizes, inputs (q, k range from one draw; v, dO in [-1, 1)), their widenings,
 * the oracle's result and magnitude buffers; conv_w allocated (not filled,
 * not widened) when the problem has a conv. */
void ta_oc_make_buffers(ta_rng *r, tcase *tc);
void ta_oc_free_case(tcase *tc);
void ta_oc_describe(const tcase *tc, char *buf, size_t n);

/* ---- running the reference ---- */
void ta_oc_alloc_out(const tcase *tc, run_out *out);
void ta_oc_free_out(run_out *out);
/* Workspace of `bytes` (at least 64), 64-aligned, filled with garbage of the
 * given kind: 0 = 0xFF poison (NaN in every dtype), 1 = random bytes. */
void *ta_oc_workspace(ta_rng *r, size_t bytes, int kind);
/* Forward of p (tiles and conv may differ from tc->p) into out->o, out->lse
 * (lse may be NULL), poisoned first. */
ta_status ta_oc_run_fwd(ta_rng *r, const tcase *tc, const ta_problem *p, run_out *out, int ws_kind,
                        ta_trace *tr);
/* Backward of p from o, lse into out->dq, dk, dv (and dw), poisoned first. */
ta_status ta_oc_run_bwd(ta_rng *r, const tcase *tc, const ta_problem *p, const void *o,
                        const float *lse, run_out *out, int ws_kind, ta_trace *tr);
/* The same on backend be (REF or CPU; no trace): test_stress. */
ta_status ta_oc_run_fwd_on(ta_backend be, ta_rng *r, const tcase *tc, const ta_problem *p,
                           run_out *out, int ws_kind, ta_trace *tr);
ta_status ta_oc_run_bwd_on(ta_backend be, ta_rng *r, const tcase *tc, const ta_problem *p,
                           const void *o, const float *lse, run_out *out, int ws_kind,
                           ta_trace *tr);
ta_status ta_oc_run_step_on(ta_backend be, ta_rng *r, const tcase *tc, const ta_problem *p,
                            run_out *out, int ws_kind);
/* Forward, then backward from its o and lse: a training step. */
ta_status ta_oc_run_step(ta_rng *r, const tcase *tc, const ta_problem *p, run_out *out, int ws_kind,
                         ta_trace *tr_fwd, ta_trace *tr_bwd);
/* Oracle forward on the (rounded) inputs, then backward with D_i from the
 * stored o for f16/bf16 (exact D_i for f32), dconv_w with a conv. */
void ta_oc_run_oracle(tcase *tc, const void *o_stored_buf);

/* ---- comparison ----
 *   rel  = max_i |ref_i - oracle_i| / max(max_i |oracle_i|, tiny)   (reported)
 *   cond = max_i (|ref_i - oracle_i| - rounding_i) / mag_i           (gated)
 * gate per element: |ref_i - oracle_i| <= u_dt |oracle_i| + floor_dt + tol * mag_i,
 * and elements with mag_i = 0 (masked) must be exactly equal. */
void ta_oc_compare(const tcase *tc, int tensor, const void *ref, ta_dtype dt, size_t n, double tol,
                   int desc_masked, double *rel, double *cond);
void ta_oc_fold(err_max *acc, const err_max *e);
/* Compare a run with the oracle (fwd: o, lse; bwd: dq, dk, dv and dconv_w
 * with a conv); fold the errors into acc. tol[tensor]; desc_masked: describe
 * the problem in a masked element's failure too. */
void ta_oc_compare_all(const tcase *tc, const run_out *out, int fwd, int bwd, const double *tol,
                       int desc_masked, err_max *acc);

/* ---- structural checks ---- */
/* Rows that see no key: o = 0, lse = -inf, dq = 0 exactly; keys no row sees:
 * dk = dv = 0 exactly. */
void ta_oc_check_masked(const tcase *tc, const run_out *out);
int ta_oc_same_fwd(const tcase *tc, const run_out *a, const run_out *b);
int ta_oc_same_dqkv(const tcase *tc, const run_out *a, const run_out *b);
int ta_oc_same_outputs(const tcase *tc, const run_out *a, const run_out *b);
/* The forward trace is exactly (b, h, qt, kt < k_end(qt)) of t, in loop order;
 * returns the expected count. */
size_t ta_oc_check_fwd_trace(const tcase *tc, const ta_tiling *t, const ta_trace *tf);
/* Index of the cell (b, h, qt, kt) of a [B, H, q tiles, k tiles] grid. */
size_t ta_oc_cell(const ta_problem *p, const ta_tiling *t, int32_t b, int32_t h, int32_t qt,
                  int32_t kt);

/* ---- finite differences on the oracle ---- */
/* Problem from a row {B, H, H_kv, S_q, S_k, D, D_v[, c_q, c_k]}. */
void ta_oc_shape_problem(ta_problem *p, const int32_t *row, int conv);
/* Random q, k, v (and w with a conv), dO; central differences of L = <dO, o>
 * against the oracle's gradients: max error / max|gradient| per input
 * (e[0..2]: q, k, v; e[3]: w with a conv). */
void ta_oc_fd_check(ta_rng *r, const ta_problem *p, const int32_t *seqlens, double e[4]);

/* ---- report ---- */
/* One row per dtype: cases (when counts is given), then n_tensors tensors. */
void ta_oc_print_table(const char *title, const err_max *e, int n_tensors, int cond,
                       const long *counts);

#endif /* TA_ORACLE_CHECK_H */
