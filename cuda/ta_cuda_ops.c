/*
 * CUDA backend entry-point table. Plain C, always compiled: the workspace size
 * query works on a machine without a GPU and in a build without CUDA (a planner
 * may size device memory anywhere). The launch code is in cuda/ta_cuda_sdpa_*.cu
 * (or the stubs of cuda/ta_cuda_absent.c without CUDA, never reached because
 * available() is then 0).
 *
 * Supported: SDPA and the MTA conv (causal only, as everywhere), forward and
 * backward, every dtype, causal or not (SDPA), seqlens_k, sliding windows,
 * strided tensors, GQA, S_q != S_k, D and D_v in [1, 256], every conv size and
 * block size the library accepts.
 *
 * TA_PRECISION_FAST: the SDPA forward of f16 / bf16 problems runs on tensor
 * cores (cuda/ta_cuda_fast_fwd.cu; D = D_v in {64, 96, 128, 256}, other head
 * dims TA_ERR_UNSUPPORTED in fast mode); f32 problems, the MTA conv and every
 * backward run the exact kernels (bit-identical results satisfy any FAST
 * bound) until their fast kernels land.
 */
#include <stddef.h>

#include "ta_cuda.h"
#include "ta_internal.h"

static int ta_cuda_available(void) { return ta_cuda_compiled() && ta_cuda_device_present(); }

/* 1 if the plan takes the fast-mode path: TA_PRECISION_FAST, f16 / bf16
 * storage, plain SDPA. Its head dims are the fast configuration table's, for
 * both passes (the backward's fast kernels will share the table). */
static int ta_cuda_fast_path(const ta_plan *plan) {
    return plan->p.precision == TA_PRECISION_FAST && plan->p.dtype != TA_F32 && !plan->has_conv;
}

/* The head dims of the fast configuration table and their candidate counts
 * (cuda/ta_cuda_fast_fwd.cu, which returns TA_ERR_UNSUPPORTED for any other):
 * here in plain C so the workspace query answers the same without CUDA. */
static int ta_cuda_fast_head_dims(const ta_plan *plan) {
    const int32_t d = plan->p.head_dim;
    return d == plan->p.head_dim_v && (d == 64 || d == 96 || d == 128 || d == 256) &&
           plan->p.tile_config <= (d == 96 ? 2 : 3);
}

/* Every operation of the plan: SDPA and the MTA conv, any mask (causal,
 * seqlens_k, sliding window) and any validated layout (ta_strides). */
static int ta_cuda_supports(const ta_plan *plan) {
    if (ta_cuda_fast_path(plan)) return ta_cuda_fast_head_dims(plan);
    return 1;
}

/* The one forward layout routine: sizes (base NULL) and carves (base set). */
static ta_status ta_cuda_fwd_layout(const ta_plan *plan, void *base, ta_cuda_fwd_ws *ws,
                                    size_t *bytes) {
    ta_ws_cursor c;
    (void)plan;
    ta_ws_begin(&c, base);
    ws->unused = 0;
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
static ta_status ta_cuda_bwd_layout(const ta_plan *plan, void *base, ta_cuda_bwd_ws *ws,
                                    size_t *bytes) {
    ta_ws_cursor c;
    ta_ws_begin(&c, base);
    ws->delta = TA_WS_TAKE(&c, float, plan->n_lse);
    ws->dw_rows = NULL;
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

static ta_status ta_cuda_fwd_size(const ta_plan *plan, size_t *bytes) {
    ta_cuda_fwd_ws ws;
    return ta_cuda_fwd_layout(plan, NULL, &ws, bytes);
}

static ta_status ta_cuda_bwd_size(const ta_plan *plan, size_t *bytes) {
    ta_cuda_bwd_ws ws;
    return ta_cuda_bwd_layout(plan, NULL, &ws, bytes);
}

static ta_status ta_cuda_fwd(const ta_plan *plan, const ta_fwd_args *a, void *workspace,
                             void *stream) {
    ta_cuda_fwd_ws ws;
    size_t bytes;
    const ta_status st = ta_cuda_fwd_layout(plan, workspace, &ws, &bytes);
    if (st != TA_OK) return st;
    if (ta_cuda_fast_path(plan)) return ta_cuda_fast_fwd(plan, a, &ws, stream);
    return plan->has_conv ? ta_cuda_mta_fwd(plan, a, &ws, stream)
                          : ta_cuda_sdpa_fwd(plan, a, &ws, stream);
}

static ta_status ta_cuda_bwd(const ta_plan *plan, const ta_bwd_args *a, void *workspace,
                             void *stream) {
    ta_cuda_bwd_ws ws;
    size_t bytes;
    const ta_status st = ta_cuda_bwd_layout(plan, workspace, &ws, &bytes);
    if (st != TA_OK) return st;
    return plan->has_conv ? ta_cuda_mta_bwd(plan, a, &ws, stream)
                          : ta_cuda_sdpa_bwd(plan, a, &ws, stream);
}

const ta_backend_ops ta_cuda_ops = {
    ta_cuda_available, ta_cuda_supports, ta_cuda_fwd_size, ta_cuda_bwd_size,
    ta_cuda_fwd,       ta_cuda_bwd,      0,
};
