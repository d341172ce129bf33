/*
 * CUDA backend: the interface between the entry-point tables and the launch
 * code. In the core archive (plain C, always compiled): the layout routines and
 * size queries (cuda/ta_cuda_layout.c) and the "not linked" table
 * (cuda/ta_cuda_absent.c). In the CUDA component (libtileattn_cuda.a, built
 * with TILEATTN_CUDA): the real table (cuda/ta_cuda_ops.c) and the launch code
 * (cuda/ta_cuda_*.cu). Not installed. docs/cuda.md describes the kernels and,
 * under "Packaging", how a program gets one table or the other.
 */
#ifndef TA_CUDA_H
#define TA_CUDA_H

#include <stddef.h>

#include "ta_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Device workspace of a forward call. The forward keeps every tile in shared
 * memory and takes seqlens_k by value in the kernel parameters (see
 * ta_cuda_sdpa_fwd.cu); split-K (n = plan->fwd.num_splits > 1) has the parts
 * the forward kernels write and the merge kernel reads, the fast path's
 * rotary stage its turned q and k (ta_cuda_fwd_layout), the fast MTA forward
 * its filtered keys and the convolved scores next to the diagonal:
 *
 *   +--------------------------------------+
 *   | rot_q, rot_k (fast, rotary stage)     |
 *   | [rot_qh] [rot_v] (fast MTA, the stage: |
 *   |  history rows; v of a paged cache)    |
 *   +--------------------------------------+
 *   | part_o   [n, B, H, S_q, D_v] f32      |  part s's normalised o_s
 *   +--------------------------------------+
 *   | part_lse [n, B, H, S_q] f32           |  part s's lse_s (-inf: no key)
 *   +--------------------------------------+
 *   | mta_kf   [B, H, S_k, c_q, D] dtype    |  fast MTA only
 *   +--------------------------------------+
 *   | mta_diag [B, H, S_q, E] f32           |  fast MTA only, E > 0
 *   +--------------------------------------+
 *   | mta_edge [B, H, S_q, P] f32           |  fast MTA, window_left >= 0, P > 0
 *   +--------------------------------------+
 *
 *   split-K: bytes = round_up(4 n B H S_q D_v, 64) + round_up(4 n B H S_q, 64);
 *   fast MTA: round_up(elem c_q B H S_k D, 64) + round_up(4 B H S_q E, 64)
 *             [+ round_up(4 B H S_q P, 64)]
 */
typedef struct ta_cuda_fwd_ws {
    float *part_o;   /* [n, B, H, S_q, D_v]; NULL with one split */
    float *part_lse; /* [n, B, H, S_q]; NULL with one split */
    void *rot_q;     /* fast path with the rotary stage: q and k turned once, */
    void *rot_k;     /* contiguous [B, H, S_q, D] / [B, H_kv, S_k, D]; else NULL */
    void *rot_qh;    /* fast MTA with the stage and q_history = n > 0: the history
                        rows turned, [B, H, n, D]; else NULL */
    void *rot_v;     /* fast MTA with the stage and a paged cache: v gathered,
                        [B, H_kv, S_k, D_v] (k's gathered rows are rot_k); else NULL */
    void *mta_kf;    /* fast MTA (ta_cuda_fast_mta_path): [B, H, S_k, c_q, D] storage
                        type, the filtered keys; else NULL */
    float *mta_diag; /* fast MTA: [B, H, S_q, E] f32, E = ta_cuda_fast_mta_band (NULL
                        when E = 0): the convolved scores of the E keys left of
                        each row's diagonal, computed directly */
    float *mta_edge; /* fast MTA with a left window bound: [B, H, S_q, P] f32, the
                        convolved scores of the P keys from each row's window
                        start on, computed directly; else NULL */
    /* latent attention (the band or the fused projections; ta_cuda_latent_plan;
     * cuda/ta_cuda_latent.cu), f32, contiguous; else NULL:
     * lat_q [B, H, n + S_q, L] the latent queries (n = q_history rows first),
     * lat_k, lat_v [B, H_kv, S_k, L] k and v widened (f16 / bf16 only),
     * lat_t [B, H, S_q, W1] the band's T (W1 = ta_cuda_rband_w1),
     * lat_o [B, H, S_q, L] the latent output (projections, or f16 / bf16),
     * lat_lse [B, H, S_q] (projections: the lse the up-projection reads
     * when the call passes none) */
    float *lat_q, *lat_k, *lat_v, *lat_t, *lat_o, *lat_lse;
    /* latent attention in fast mode (ta_cuda_fast_lat_path), after the exact
     * regions above (its fallback); else NULL: fl_q [B, H, n + S_q, L] and
     * fl_o [B, H, S_q, L] (the keys below the band) the storage type, fl_lse
     * [B, H, S_q] f32, fl_ctx [B, H, S_q, L] f32 (band and projections) */
    void *fl_q, *fl_o;
    float *fl_lse, *fl_ctx;
} ta_cuda_fwd_ws;

/*
 * Device workspace of a backward call:
 *
 *   +--------------------------------------+
 *   | delta   [B, H, S_q] f32               |  D_i = <dO_i, o_i>, written by the delta
 *   +--------------------------------------+  kernel, read by the dk/dv and dq kernels
 *   | dw_rows [B, H, n_q, c_q, c_k] f32     |  MTA only (NULL otherwise): R(b, qt) of
 *   +--------------------------------------+  docs/mta.md backward step 5, one per
 *   | dw_lo   [H, c_q, c_k] f32             |  (batch, head, bwd Q tile), n_q =
 *   +--------------------------------------+  plan->bwd.num_q_tiles; written by the
 *                                              dq kernel, merged into dconv_w in
 *                                              (batch, Q tile) ascending order as
 *                                              pairs (dconv_w, dw_lo) (src/ta_sum2.h;
 *                                              dw_lo: MTA only, carried across the
 *                                              merge's batch chunks)
 */
typedef struct ta_cuda_bwd_ws {
    float *delta;   /* [B, H, S_q] */
    float *dw_rows; /* [B, H, plan->bwd.num_q_tiles, c_q, c_k]; MTA only, else NULL */
    float *dw_lo;   /* [H, c_q, c_k]: lo words of dconv_w's pairs; MTA only, else NULL */
    void *rot_q;    /* as in ta_cuda_fwd_ws: the rotary stage's turned q and k */
    void *rot_k;
    float *rot_dq;  /* fast MTA with the stage: the gradients of the turned q and k, */
    float *rot_dk;  /* f32 [B, H, S_q, D] / [B, H_kv, S_k, D], before the turn back; else NULL */
    /* the fast MTA backward (ta_cuda_fast_mta_bwd_path; else NULL), after the
     * exact regions above (its fallback): kf, diag (and edge, below) as the
     * forward's, then
     * g [B, H, S_q, E], dsb [B, H, S_q, 2E], dq_band [B, H, S_q, D],
     * dkf [B, H, S_k, c_q, D], dw_fold [B, H, ceil(S_k / 32), c_q c_k],
     * dw_band [B, H, ceil(S_q / 32), c_q c_k] (f32; diag, g, dsb, dq_band
     * and dw_band NULL when E = 0); cuda/ta_cuda_fast_mta_bwd.cu says what each holds */
    void *mta_kf;
    float *mta_diag, *mta_g, *mta_dsb, *mta_dq_band, *mta_dkf, *mta_dw_fold, *mta_dw_band;
    /* with a binding window start (P = ta_cuda_fast_mta_edge > 0; else NULL):
     * edge as the forward's [B, H, S_q, P], g_edge [B, H, S_q, P], dsb2
     * [B, H, S_q, 3P + c_q - 1] f32 */
    float *mta_edge, *mta_g_edge, *mta_dsb2;
    /* latent attention (ta_cuda_latent_plan), f32, contiguous; else NULL:
     * lat_q, lat_k, lat_v, lat_t as the forward's (no history rows);
     * lat_dl [B, H, S_q, W1] the band entries' dl; lat_da [B, H, S_q] each
     * row's d_alpha; lat_do [B, H, S_q, L] dctx~ (projections) or dO widened;
     * lat_dq [B, H, S_q, L] dq~ (projections) or dq before its rounding;
     * lat_dk, lat_dv [B, H_kv, S_k, L] before their rounding (f16 / bf16);
     * lat_ctx [B, H, S_q, L] the recomputed ctx~ (projections) */
    float *lat_q, *lat_k, *lat_v, *lat_t, *lat_dl, *lat_da, *lat_do, *lat_dq, *lat_dk, *lat_dv,
        *lat_ctx;
    /* latent attention in fast mode (ta_cuda_fast_lat_path), after the exact
     * regions; else NULL. Storage type: fl_q [B, H, S, L]; fl_dq [B, H, S, L]
     * (the keys below the band's dq~; band or projections); with the band
     * fl_dk, fl_dv [B, H_kv, S, L]; with the projections fl_do (dctx~),
     * fl_ctxs (ctx~ recomputed) [B, H, S, L], with both fl_o [B, H, S, L].
     * f32: fl_lse [B, H, S] (projections); with both fl_ctx, fl_dqf
     * [B, H, S, L]; with the band the partial slots fl_pdq, fl_pdk, fl_pdv
     * (ta_cuda_fast_band_part_count) and fl_da [B, H, S]; with the
     * projections fl_dw [H, n_chunks, max(D L, L D_v)]
     * (ta_cuda_lat_dw_chunks) */
    void *fl_q, *fl_dq, *fl_dk, *fl_dv, *fl_do, *fl_ctxs, *fl_o;
    float *fl_lse, *fl_ctx, *fl_dqf, *fl_pdq, *fl_pdk, *fl_pdv, *fl_da, *fl_dw;
    /* fast SDPA backward with one kv head (ta_cuda_fast_mqa; else NULL):
     * each query head's dk, dv [B, H, S_k, D] / [B, H, S_k, D_v] in f32,
     * summed over the heads into dk, dv; the fast latent backward's keys
     * below the band (one kv head) likewise, with D = D_v = L */
    void *mqa_dk, *mqa_dv;
} ta_cuda_bwd_ws;

/* The fast path's rotary stage (cuda/ta_cuda_fast_rope.cu; docs/rope.md):
 * ta_cuda_fast_rope_plan: *sub = the plan the un-rotated kernels run on the
 * turned copies (q and k contiguous, no load stage; the rotary fields and
 * tables kept for the backward's epilogue); ta_cuda_fast_rope_turn: q and k
 * turned once into rot_q, rot_k (the storage type, contiguous) on stream, by
 * ta_rope_pair in f32 as every backend turns them. */
void ta_cuda_fast_rope_plan(const ta_plan *plan, ta_plan *sub);
ta_status ta_cuda_fast_rope_turn(const ta_plan *plan, const void *q, const void *k, void *rot_q,
                                 void *rot_k, void *stream);

/* The same for the fast MTA kernels (cuda/ta_cuda_fast_rope.cu; docs/rope.md,
 * "On CUDA (fast path)"): ta_cuda_fast_mta_rope_plan: *sub = the plan the
 * un-rotated fast MTA kernels run on the copies (ta_cuda_fast_rope_plan's;
 * the forward's (bwd 0) history rows contiguous too and, with a paged cache,
 * v contiguous and no block table (kv_page_size kept: the path and split
 * rules give the plan's answers); the backward's (bwd 1) dq and dk the f32
 * copies' contiguous strides). ta_cuda_fast_mta_rope_turn: q, k (through the
 * block table with pages) and the history rows (rot_qh non-NULL: row -i by
 * row 0's table row - i) turned into the copies, v gathered into rot_v
 * (rot_v non-NULL: pages) on stream. ta_cuda_fast_mta_rope_back: the
 * backward's f32 dq32, dk32 (contiguous) turned back by ta_rope_pair_t and
 * rounded once into the caller's dq, dk (plan->layout's strides). */
void ta_cuda_fast_mta_rope_plan(const ta_plan *plan, int bwd, ta_plan *sub);
ta_status ta_cuda_fast_mta_rope_turn(const ta_plan *plan, const void *q, const void *k,
                                     const void *q_hist, const void *v, const int32_t *block_table,
                                     void *rot_q, void *rot_k, void *rot_qh, void *rot_v,
                                     void *stream);
ta_status ta_cuda_fast_mta_rope_back(const ta_plan *plan, const float *dq32, const float *dk32,
                                     void *dq, void *dk, void *stream);

/* Shared by both tables (cuda/ta_cuda_layout.c, core): the operations the
 * backend runs, and the one layout routine per pass that sizes (base NULL) and
 * carves (base set) the device workspace. */
int ta_cuda_supports(const ta_plan *plan);
/* 1 if the plan takes the fast-mode path: TA_PRECISION_FAST, f16 / bf16
 * storage, plain SDPA (ta_cuda_fast_fwd, ta_cuda_fast_bwd; the head dims of
 * the fast table only). */
int ta_cuda_fast_path(const ta_plan *plan);
/* 1 if the fast SDPA backward of plan runs its dk/dv kernel once per query
 * head into workspace copies (ta_cuda_bwd_ws.mqa_dk): one kv head, several
 * query heads (docs/cuda.md section 7, "Multi-query backward"). */
int ta_cuda_fast_mqa(const ta_plan *plan);
ta_status ta_cuda_fwd_layout(const ta_plan *plan, void *base, ta_cuda_fwd_ws *ws, size_t *bytes);
ta_status ta_cuda_bwd_layout(const ta_plan *plan, void *base, ta_cuda_bwd_ws *ws, size_t *bytes);
ta_status ta_cuda_fwd_size(const ta_plan *plan, size_t *bytes);
ta_status ta_cuda_bwd_size(const ta_plan *plan, size_t *bytes);

/* The CUDA component's link anchor (cuda/ta_cuda_ops.c): undefined on the link
 * line (-Wl,-u,ta_cuda_backend_linked) so the real table is taken. */
extern const char ta_cuda_backend_linked;

/* Launch code (CUDA component: cuda/ta_cuda_sdpa_fwd.cu, cuda/ta_cuda_sdpa_bwd.cu,
 * cuda/ta_cuda_mta_fwd.cu, cuda/ta_cuda_mta_bwd.cu; the MTA pair takes problems
 * with plan->has_conv, the SDPA pair the others). Inputs are
 * validated by src/ta_api.c; these check the device pointers, then enqueue the
 * kernels on stream (a cudaStream_t; NULL = the legacy default stream) and return
 * without waiting. TA_ERR_BAD_ARG: a tensor or the workspace is not memory the
 * current device can read (checked before any launch); TA_ERR_DEVICE: a CUDA call
 * failed. */
ta_status ta_cuda_sdpa_fwd(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                           void *stream);
ta_status ta_cuda_sdpa_bwd(const ta_plan *plan, const ta_bwd_args *a, const ta_cuda_bwd_ws *ws,
                           void *stream);
ta_status ta_cuda_mta_fwd(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                          void *stream);
ta_status ta_cuda_mta_bwd(const ta_plan *plan, const ta_bwd_args *a, const ta_cuda_bwd_ws *ws,
                          void *stream);

/* Latent attention on CUDA (cuda/ta_cuda_latent.cu; docs/cuda.md section 2,
 * "Latent attention"): ta_cuda_latent_plan (cuda/ta_cuda_layout.c) is 1 for
 * the reciprocal band (TA_RBAND) or the fused projections (latent_dim > 0),
 * which run the exact kernels in either precision; ta_cuda_rband_w1 is the
 * band's row width W1 = min(W, S_k - 1) + 1 in the workspace (1 without the
 * band). ta_cuda_latent_fwd / _bwd: as ta_cuda_sdpa_fwd / _bwd, bit-identical
 * to REF. ta_cuda_sdpa_bwd_kernels: the SDPA backward's dk/dv and dq kernels
 * on a delta already in ws->delta; with ctx_out, the dq kernel alone,
 * recomputing ctx~ = sum_j P v_j (f32 [B, H, S_q, D_v]) instead of dq. */
int ta_cuda_latent_plan(const ta_plan *plan);
int32_t ta_cuda_rband_w1(const ta_plan *plan);
ta_status ta_cuda_latent_fwd(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                             void *stream);
ta_status ta_cuda_latent_bwd(const ta_plan *plan, const ta_bwd_args *a, const ta_cuda_bwd_ws *ws,
                             void *stream);
ta_status ta_cuda_sdpa_bwd_kernels(const ta_plan *plan, const ta_bwd_args *a,
                                   const ta_cuda_bwd_ws *ws, float *ctx_out, void *stream);

/* Latent attention in fast mode (docs/cuda.md, "Latent attention in fast
 * mode"). ta_cuda_fast_lat_path (cuda/ta_cuda_layout.c): 1 for a latent plan
 * (the band or the projections) in TA_PRECISION_FAST with f16 / bf16 storage
 * and a latent width L of 64, 96 or 128 (the band kernels' instantiations):
 * ta_cuda_fast_latent_fwd / _bwd (cuda/ta_cuda_latent.cu) run it (the
 * fast SDPA kernels on the keys below the band, the band kernels of
 * cuda/ta_cuda_fast_latent.cu, the projections around them) and fall back to
 * the exact kernels (whose regions the workspace also holds) where a row of
 * k, v (or dO) is not on 16 bytes. */
int ta_cuda_fast_lat_path(const ta_plan *plan);
/* The fast weight gradients' row chunks (cuda/ta_cuda_layout.c): n_chunks
 * (returned, <= 32) of *rows_per rows of the flattened (b, r), rows_per a
 * multiple of 16, at least 256. */
int32_t ta_cuda_lat_dw_chunks(const ta_plan *plan, int32_t *rows_per);
ta_status ta_cuda_fast_latent_fwd(const ta_plan *plan, const ta_fwd_args *a,
                                  const ta_cuda_fwd_ws *ws, void *stream);
ta_status ta_cuda_fast_latent_bwd(const ta_plan *plan, const ta_bwd_args *a,
                                  const ta_cuda_bwd_ws *ws, void *stream);
/* The plan of the keys below the band (or, without the band, of every key):
 * plan's problem as SDPA of width L over S_k - W - 1 keys (S_k without the
 * band), no projections, no history rows, q and o contiguous [B, H, S_q, L],
 * k, v under the call's strides, dq, dk, dv contiguous with S_q, S_k rows.
 * TA_ERR_UNSUPPORTED when no key lies below the band (nothing to run). */
ta_status ta_cuda_fast_lat_main_plan(const ta_plan *plan, ta_plan *sub);

/* The band kernels (cuda/ta_cuda_fast_latent.cu). Forward: the band keys of
 * every row merged with the keys below the band (o_main, lse_main; o_main
 * NULL: none) into o (storage type, strides o_st; NULL: none) and / or ctx
 * (f32 [B, H, S_q, L] contiguous; NULL: none), and lse (may be lse_main). */
typedef struct ta_cuda_fast_band_fwd_args {
    const void *q;      /* q~ [B, H, n + S_q, L] storage type, strides q_st: n = hist rows
                           (the plan's q_history, or 0 when q is the call's) first */
    ta_strides q_st;
    int32_t hist;
    const void *k, *v;  /* the call's (plan->layout.k, .v) */
    const void *o_main; /* [B, H, S_q, L] storage type, contiguous */
    const float *lse_main;
    void *o;
    ta_strides o_st;
    float *ctx, *lse;
} ta_cuda_fast_band_fwd_args;
/* Backward (S_q == S_k): the band's shares of dq~, dk, dv into the partial
 * slots (ta_cuda_fast_band_part_count floats each), each row's
 * d_alpha share into da_rows [B, H, S_q], then d_alpha (one f32). */
typedef struct ta_cuda_fast_band_bwd_args {
    const void *q, *k, *v; /* q~ [B, H, S, L] (strides q_st); the call's k, v */
    ta_strides q_st;
    const void *d_o;       /* dctx~ (or dO), strides d_o_st */
    ta_strides d_o_st;
    const float *lse, *delta;
    float *part_dq, *part_dk, *part_dv, *da_rows, *d_alpha;
} ta_cuda_fast_band_bwd_args;
/* One gradient (which: 0 dq~ [B, H, S, L], 1 dk, 2 dv [B, H_kv, S, L]) =
 * main (storage type, contiguous, rows below main_rows; NULL: none) + the
 * band's partials, into out (f32 contiguous if out_f32, else the storage
 * type under out_st). */
typedef struct ta_cuda_fast_band_sum_args {
    const void *main;
    int32_t main_rows;
    const float *part;
    void *out;
    ta_strides out_st;
    int which, out_f32;
} ta_cuda_fast_band_sum_args;
/* Floats of one partial array (cuda/ta_cuda_layout.c; dq~, dk and dv have
 * one each, of this size): B H ceil(S_q / 64) blocks of ceil(W' / 64) + 1
 * [64][L] slots, W' = min(W, S_k - 1); SIZE_MAX on overflow. */
size_t ta_cuda_fast_band_part_count(const ta_plan *plan);
/* The projections in fast mode (cuda/ta_cuda_fast_latent.cu): per head h of
 * each batch entry, c[r][n] = sum_k a[r][k] w[h][k][n] (bt: w[h][n][k]) over
 * r < rows, in f32, rounded once to c_dt (f16 / bf16); a of a_dt (f16, bf16
 * or f32) under a_st, c at c + c_off under c_st (elements). */
typedef struct ta_cuda_fast_proj_args {
    const void *a;
    ta_dtype a_dt;
    ta_strides a_st;
    const float *w;
    int bt;
    void *c;
    ta_dtype c_dt;
    ta_strides c_st;
    int64_t c_off;
    int32_t batch, heads, rows, k_dim, n_dim;
} ta_cuda_fast_proj_args;
ta_status ta_cuda_fast_proj(const ta_cuda_fast_proj_args *a, void *stream);
/* The band kernel of the pass (bwd 0 / 1) made ready to launch (its shared
 * memory opted in; ta_cuda_fast_band_fwd / _bwd launch without asking
 * again): TA_ERR_UNSUPPORTED if this device cannot give it (L = 128
 * backward on a 163 KB sm_80: the exact kernels run), TA_ERR_DEVICE if a
 * CUDA call fails. */
ta_status ta_cuda_fast_band_prepare(const ta_plan *plan, int bwd);
ta_status ta_cuda_fast_band_fwd(const ta_plan *plan, const ta_cuda_fast_band_fwd_args *a,
                                void *stream);
ta_status ta_cuda_fast_band_bwd(const ta_plan *plan, const ta_cuda_fast_band_bwd_args *a,
                                void *stream);
ta_status ta_cuda_fast_band_sum(const ta_plan *plan, const ta_cuda_fast_band_sum_args *a,
                                void *stream);

/* The merge kernel (cuda/ta_cuda_merge.cu, src/ta_merge.h's arithmetic): n
 * parts o_parts [n, B, H, S_q, D_v] in dtype parts_dt (contiguous) and
 * lse_parts [n, B, H, S_q] into o (plan->p.dtype, plan->layout.o) and lse
 * (contiguous, or NULL), on stream. Split-K's forward calls it on its f32
 * parts after its kernels; ta_merge (ta_cuda_merge) on the caller's. No
 * pointer checks here. */
ta_status ta_cuda_merge_parts(const ta_plan *plan, const void *o_parts, ta_dtype parts_dt,
                              const float *lse_parts, int32_t n, void *o, float *lse,
                              void *stream);
/* ta_merge on CUDA: checks the device pointers (TA_ERR_BAD_ARG), then
 * ta_cuda_merge_parts on the caller's parts (dtype plan->p.dtype). */
ta_status ta_cuda_merge(const ta_plan *plan, const ta_merge_args *a, void *stream);

/* ta_bwd_finish on CUDA (cuda/ta_cuda_sdpa_bwd.cu): checks the device
 * pointers (TA_ERR_BAD_ARG), then one launch per requested gradient on
 * stream: element for element ta_ref_bwd_finish's store (the shared
 * rounding), the hi words contiguous, the gradients by plan->layout. */
ta_status ta_cuda_bwd_finish(const ta_plan *plan, const ta_bwd_finish_args *a, void *stream);

/* The index arrays the kernels read: seqlens_k with TA_SEQLENS_DEVICE, the
 * paged KV block table (device memory on CUDA): TA_ERR_BAD_ARG unless the
 * device can read them (pageable host memory, another device's memory), as
 * every tensor pointer (cuda/ta_cuda.cu); else TA_OK. Nothing launched. */
ta_status ta_cuda_check_index_ptrs(const ta_plan *plan, const int32_t *seqlens_k,
                                   const int32_t *block_table);

/* Candidates of one head dim in the fast configuration table, at most
 * (<= TA_TUNE_MAX_CANDIDATES). */
#define TA_CUDA_FAST_CFG_MAX 12

/* The fast configuration table in numbers (cuda/ta_cuda_layout.c, plain C:
 * the size queries need no CUDA): how many candidates tile_config names for
 * head dim d (0: d is not in the table), and tile_config 0's pick (k >= 1)
 * for (d, causal, sm90: 1 on a compute capability 9.0 device with sm_90a
 * code, split: 1 with split-K or paged KV, which only the mma.sync kernels
 * run, 2 for such a problem with at most 16 query rows per (packed) head: the
 * decode-shaped kernel, cuda/ta_cuda_fast_decode.cu). The kernels behind
 * each k: cuda/ta_cuda_fast_fwd.cu. */
int32_t ta_cuda_fast_cfg_count(int32_t d);
int32_t ta_cuda_fast_cfg_default(int32_t d, int causal, int sm90, int split);

/* Fast-mode GQA decode packing (cuda/ta_cuda_layout.c; docs/cuda.md section
 * 7, "Split-K in fast mode"): G = H / H_kv if the forward runs a kv head's G
 * query heads as one head of G S_q rows (split-K asked for: num_splits > 1
 * or TA_SPLITS_AUTO; G > 1; no window; no load stage; S_q == 1 or no causal
 * mask, so that the mask does not tell a group's rows apart), else 1. Each
 * row's arithmetic is unchanged: for a given split count packing changes the
 * grid, never the bits.
 * ta_cuda_fast_splits: the fast forward's split count, the plan's except
 * TA_SPLITS_AUTO with packing: ta_tiling_splits_auto(B, H_kv, G S_q, S_k),
 * or with G S_q <= 16 (the decode-shaped kernel) the same rule with half its
 * block target (TA_SPLITS_AUTO_BLOCKS / 2 over B H_kv blocks), clamped to
 * the plan's K tiles (the workspace's parts follow it). */
int32_t ta_cuda_fast_pack(const ta_plan *plan);
int32_t ta_cuda_fast_splits(const ta_plan *plan);

/* Fast-mode MTA forward (cuda/ta_cuda_fast_mta.cu; docs/cuda.md section 7,
 * "Fast MTA"). ta_cuda_fast_mta_path (cuda/ta_cuda_layout.c): 1 if the plan's
 * forward runs it: TA_PRECISION_FAST, f16 / bf16, the MTA conv, D = D_v in
 * {64, 96, 128}, no load stage or the rotary stage with rope_pairs in whole
 * 16-byte chunks (then on turned copies: ta_cuda_fast_mta_rope_plan), more
 * than 16 query rows, one split, no paged KV (ta_cuda_fast_mta_dec_path
 * takes the others with those heads and stages; the rest of MTA in fast mode
 * runs the exact kernels). ta_cuda_fast_mta_edge: P = (c_k - 1)
 * / 2 with a left window bound below S_k (the keys from a row's window start
 * on whose convolved score has terms the window hides), else 0. ta_cuda_fast_mta_band: E =
 * (c_k - 1) / 2 + c_q - 1, the keys left of the diagonal whose convolved
 * score has terms the causal mask hides (computed directly, not folded). ta_cuda_fast_mta_fwd: as ta_cuda_mta_fwd (whose
 * kernels it runs instead when a row of q, k, v, o or q_hist is not on 16
 * bytes), and TA_ERR_UNSUPPORTED (nothing launched) for a tile_config past
 * TA_CUDA_FAST_MTA_CFGS. */
#define TA_CUDA_FAST_MTA_CFGS 5
int ta_cuda_fast_mta_path(const ta_plan *plan);
int32_t ta_cuda_fast_mta_band(const ta_plan *plan);
int32_t ta_cuda_fast_mta_edge(const ta_plan *plan);
ta_status ta_cuda_fast_mta_fwd(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                               void *stream);

/* Fast-mode MTA backward (cuda/ta_cuda_fast_mta_bwd.cu; docs/cuda.md section
 * 7, "Fast MTA: the backward"): ta_cuda_fast_mta_bwd_path is 1 for the
 * problems of the fast MTA kernels (TA_PRECISION_FAST, f16 / bf16, the conv,
 * D = D_v in {64, 96, 128}, no load stage or the rotary stage with pairs in
 * whole chunks: dq, dk then turned back from f32 copies); the rest of MTA's
 * backward in fast mode runs the exact kernels. ta_cuda_fast_mta_bwd: as ta_cuda_mta_bwd (whose
 * kernels it runs instead when a row of q, k, v, o, dO, dq, dk or dv is not
 * on 16 bytes or a kernel's shared memory exceeds the device's). */
int ta_cuda_fast_mta_bwd_path(const ta_plan *plan);
ta_status ta_cuda_fast_mta_bwd(const ta_plan *plan, const ta_bwd_args *a, const ta_cuda_bwd_ws *ws,
                               void *stream);

/* The decode-shaped kernels' limits (cuda/ta_cuda_fast_decode.cu), shared by
 * the kernels' tiles and the host rules that pick them: a Q tile of
 * TA_CUDA_DEC_ROWS rows (split-K / paged problems with at most that many
 * packed rows per head take the decode-shaped default), at most
 * TA_CUDA_DEC_RAW_ROWS raw score rows in the MTA kernel and
 * TA_CUDA_DEC_W_MAX conv weights in its shared memory (c_q c_k <= 16 x 31,
 * times the packed heads). */
#define TA_CUDA_DEC_ROWS     16
#define TA_CUDA_DEC_RAW_ROWS 32
#define TA_CUDA_DEC_W_MAX    512

/* Fast-mode MTA decode (cuda/ta_cuda_fast_decode.cu; docs/cuda.md section 7,
 * "Decode"): the conv computed from raw scores in the decode-shaped kernel,
 * for the fast MTA problems the fold serves badly: ta_cuda_fast_mta_dec_path
 * (cuda/ta_cuda_layout.c) is 1 for TA_PRECISION_FAST, f16 / bf16, the conv,
 * D = D_v in {64, 96, 128}, the stages ta_cuda_fast_mta_path takes, and at
 * most 16 query rows, or split-K, or a paged cache (ta_cuda_fast_mta_path is
 * 0 for those).
 * ta_cuda_fast_mta_dec_fwd: as ta_cuda_fast_mta_fwd (the exact kernels for
 * rows off 16 bytes, pages included); tile_config 1 and 3 name candidates
 * with the conv on CUDA cores, 2 and 4 with the conv on tensor cores (tf32
 * mma), 3 and 4 with the raw scores shared by the block (twins of 1 and 2),
 * 0 the default (cuda/ta_cuda_fast_decode.cu, ta_fast_mdec_cand). */
int ta_cuda_fast_mta_dec_path(const ta_plan *plan);
/* Its GQA packing: G = H / H_kv query heads of a kv head per block when
 * G > 1, G S_q <= 16, G (S_q + c_q - 1) <= 32 and G c_q c_k <= 512, else 1;
 * and its split count: the plan's, except TA_SPLITS_AUTO with packing:
 * the TA_SPLITS_AUTO rule with half its block target over B H_kv blocks
 * (as ta_cuda_fast_splits for packed SDPA decode), clamped to the plan's K
 * tiles (the workspace's parts follow it). */
int32_t ta_cuda_fast_mta_dec_pack(const ta_plan *plan);
int32_t ta_cuda_fast_mta_dec_splits(const ta_plan *plan);
ta_status ta_cuda_fast_mta_dec_fwd(const ta_plan *plan, const ta_fwd_args *a,
                                   const ta_cuda_fwd_ws *ws, void *stream);

/* Fast mode (cuda/ta_cuda_fast_fwd.cu, with the wgmma kernel of
 * cuda/ta_cuda_fast_fwd_sm90.cu): the tensor-core SDPA forward for f16 / bf16
 * storage, D = D_v in {64, 96, 128, 256} (ta_cuda_ops.c calls it when
 * ta_cuda_fast_path; ta_cuda_supports in ta_cuda_layout.c admits only those
 * head dims). As ta_cuda_sdpa_fwd, and TA_ERR_UNSUPPORTED (nothing launched)
 * if a row of q, k, v or o does not start on 16 bytes (a base address, or a
 * stride of a dimension with more than one entry that is not a multiple of 8
 * elements), the head dim is not in the table, tile_config is past the head
 * dim's candidates, or it names the wgmma candidate on a device that is not
 * sm_90. */
ta_status ta_cuda_fast_fwd(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                           void *stream);
/* The fast-mode backward (cuda/ta_cuda_fast_bwd_sm90.cu), same problems: the
 * wgmma kernels on an sm_90 device in a build with sm_90a code, whatever
 * forward configuration tile_config names (the backward has one per head
 * dim), else ta_cuda_sdpa_bwd (the exact kernels). As ta_cuda_sdpa_bwd, and
 * TA_ERR_UNSUPPORTED (nothing launched) where ta_cuda_fast_fwd gives it for
 * the head dim or tile_config, or, on the wgmma path, if a row of q, k, v,
 * d_o, dq, dk or dv does not start on 16 bytes. */
ta_status ta_cuda_fast_bwd(const ta_plan *plan, const ta_bwd_args *a, const ta_cuda_bwd_ws *ws,
                           void *stream);

/* ta_tune_fwd on the fast path (cuda/ta_cuda_fast_tune.cu): every candidate of
 * ta_cuda_fast_fwd's table for the plan, timed on stream (synchronised), into
 * *out. Refuses as ta_cuda_fast_fwd, and a stream under capture with
 * TA_ERR_BAD_ARG, before any launch. */
ta_status ta_cuda_fast_tune(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                            void *stream, int32_t reps, ta_tune_result *out);

#ifdef __cplusplus
}
#endif

#endif /* TA_CUDA_H */
