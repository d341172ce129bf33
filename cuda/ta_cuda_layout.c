/*
 * CUDA backend: what the core knows of it without CUDA. Plain C, in the core
 * archive (libtileattn.a): which plans the backend runs and the one layout
 * routine per pass of its device workspace. The size query works on a machine
 * without a GPU and in a program that does not link the CUDA component (a
 * planner may size device memory anywhere); the entry-point tables that use
 * these are cuda/ta_cuda_ops.c (libtileattn_cuda.a) and cuda/ta_cuda_absent.c
 * (the core). docs/cuda.md, "Packaging", says how one of the two is chosen.
 *
 * Supported: SDPA and the MTA conv (causal only, as everywhere), forward and
 * backward, every dtype, causal or not (SDPA), seqlens_k, sliding windows,
 * strided tensors, GQA, S_q != S_k, D and D_v in [1, 256], every conv size and
 * block size the library accepts.
 *
 * TA_PRECISION_FAST: the SDPA forward and backward of f16 / bf16 problems run
 * on tensor cores (cuda/ta_cuda_fast_fwd.cu, cuda/ta_cuda_fast_bwd_sm90.cu;
 * D = D_v in {64, 96, 128, 256}, other head dims TA_ERR_UNSUPPORTED in fast
 * mode; the backward on sm_90 only, elsewhere the exact kernels); f32
 * problems and the MTA conv run the exact kernels (bit-identical results
 * satisfy any FAST bound) until their fast kernels land.
 */
#include <stddef.h>

#include "ta_cuda.h"
#include "ta_internal.h"

/* A split-K forward (num_splits > 1) in fast mode runs the exact kernels
 * (ta_cuda_ops.c); the fast backward ignores num_splits, as every backward. */
int ta_cuda_fast_path(const ta_plan *plan) {
    return plan->p.precision == TA_PRECISION_FAST && plan->p.dtype != TA_F32 && !plan->has_conv;
}

/* The head dims of the fast configuration table and their candidate counts
 * (cuda/ta_cuda_fast_fwd.cu: the wgmma candidate, the mma.sync ones and the
 * warp-specialised TMA ones (cuda/ta_cuda_fast_fwd_ws.cu); it
 * returns TA_ERR_UNSUPPORTED for any other, and for the wgmma candidate on a
 * device that is not sm_90):
 * here in plain C so the workspace query answers the same without CUDA. */
static int ta_cuda_fast_table_has(const ta_plan *plan) {
    const int32_t d = plan->p.head_dim;
    return d == plan->p.head_dim_v && (d == 64 || d == 96 || d == 128 || d == 256) &&
           plan->p.tile_config <= (d == 64 ? 5 : d == 96 ? 4 : d == 128 ? 6 : 5);
}

/* The rotary load stage on the fast path (docs/rope.md): pairs in whole
 * 16-byte chunks, rope_pairs a multiple of 4 (interleaved) or 8 (half-split),
 * and one split. */
static int ta_cuda_fast_rope_ok(const ta_plan *plan) {
    /* a split-K forward runs the exact kernels (ta_cuda_ops.c): not with the
     * stage, in either pass (the plan is one) */
    return plan->p.rope_pairs % (plan->p.rope == TA_ROPE_HALF ? 8 : 4) == 0 &&
           plan->fwd.num_splits == 1;
}

/* Every operation of the plan: SDPA and the MTA conv, any mask (causal,
 * seqlens_k, sliding window) and any validated layout (ta_strides); on the
 * fast path, the head dims and tile_config of the fast table. The rotary load
 * stage only on the fast path (SDPA, f16/bf16) with ta_cuda_fast_rope_ok (the
 * forward on every device, the backward on sm_90: its launcher refuses
 * elsewhere); the exact kernels do not have it yet: TA_ERR_UNSUPPORTED. */
int ta_cuda_supports(const ta_plan *plan) {
    if (plan->stages.load != TA_LOAD_NONE && !(ta_cuda_fast_path(plan) && ta_cuda_fast_rope_ok(plan)))
        return 0;
    if (plan->p.kv_page_size > 0) return 0; /* paged KV: REF and CPU for now */
    /* latent attention's band and fused projections: REF only for now */
    if (plan->stages.score == TA_SCORE_RBAND || plan->p.latent_dim > 0) return 0;
    if (ta_cuda_fast_path(plan)) return ta_cuda_fast_table_has(plan);
    return 1;
}

/* The fast path's rotary stage: q and k turned once, in the storage type
 * (ta_cuda_fast_rope_turn), at the front of either pass's workspace. */
static void ta_cuda_rope_take(const ta_plan *plan, ta_ws_cursor *c, void **rot_q, void **rot_k) {
    if (plan->stages.load != TA_LOAD_ROPE || !ta_cuda_fast_path(plan)) return;
    *rot_q = ta_ws_take(c, plan->n_q, plan->elem_bytes);
    *rot_k = ta_ws_take(c, plan->n_k, plan->elem_bytes);
}

/* The one forward layout routine: sizes (base NULL) and carves (base set);
 * split-K's parts only (ta_cuda.h draws them). */
ta_status ta_cuda_fwd_layout(const ta_plan *plan, void *base, ta_cuda_fwd_ws *ws, size_t *bytes) {
    ta_ws_cursor c;
    ta_ws_begin(&c, base);
    ws->part_o = ws->part_lse = NULL;
    ws->rot_q = ws->rot_k = NULL;
    ta_cuda_rope_take(plan, &c, &ws->rot_q, &ws->rot_k);
    if (plan->fwd.num_splits > 1) {
        size_t n_o = 0, n_lse = 0;
        if (!ta_mul_size(plan->n_o, (size_t)plan->fwd.num_splits, &n_o) ||
            !ta_mul_size(plan->n_lse, (size_t)plan->fwd.num_splits, &n_lse))
            return TA_ERR_OVERFLOW;
        ws->part_o = TA_WS_TAKE(&c, float, n_o);
        ws->part_lse = TA_WS_TAKE(&c, float, n_lse);
    }
    if (c.overflow) return TA_ERR_OVERFLOW;
    *bytes = c.used;
    return TA_OK;
}

/*
 * The one backward layout routine (device memory, 64-byte aligned regions):
 *
 *   base
 *   +------------------------------------+
 *   | delta   [B, H, S_q] f32            |
 *   +------------------------------------+
 *   | dw_rows [B, H, n_q, c_q, c_k] f32  |  MTA only (n_q = plan->bwd.num_q_tiles)
 *   +------------------------------------+
 *
 *   bytes = round_up(4 * B * H * S_q, 64) [+ round_up(4 * B * H * n_q * c_q * c_k, 64)]
 */
ta_status ta_cuda_bwd_layout(const ta_plan *plan, void *base, ta_cuda_bwd_ws *ws, size_t *bytes) {
    ta_ws_cursor c;
    ta_ws_begin(&c, base);
    ws->delta = TA_WS_TAKE(&c, float, plan->n_lse);
    ws->dw_rows = NULL;
    ws->rot_q = ws->rot_k = NULL;
    ta_cuda_rope_take(plan, &c, &ws->rot_q, &ws->rot_k);
    if (plan->has_conv) {
        size_t n = 0;
        if (!ta_mul_size(plan->n_lse / (size_t)plan->p.seq_q, (size_t)plan->bwd.num_q_tiles,
                         &n) ||
            !ta_mul_size(n, plan->n_conv / (size_t)plan->p.heads_q, &n))
            return TA_ERR_OVERFLOW;
        ws->dw_rows = TA_WS_TAKE(&c, float, n);
    }
    if (c.overflow) return TA_ERR_OVERFLOW;
    *bytes = c.used;
    return TA_OK;
}

ta_status ta_cuda_fwd_size(const ta_plan *plan, size_t *bytes) {
    ta_cuda_fwd_ws ws;
    return ta_cuda_fwd_layout(plan, NULL, &ws, bytes);
}

ta_status ta_cuda_bwd_size(const ta_plan *plan, size_t *bytes) {
    ta_cuda_bwd_ws ws;
    return ta_cuda_bwd_layout(plan, NULL, &ws, bytes);
}
