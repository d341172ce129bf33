/*
 * Public entry points: validate everything, size the workspace, dispatch to a
 * backend. The order of checks is fixed so a caller sees a stable status:
 *   1. problem (shape, enums, sizes, overflow, tiling)   -> ta_plan_make
 *   2. backend: enum, implemented, supports the operation, available (calls)
 *   3. stream
 *   4. strides (ta_plan_set_*_layout), then the backend again: does it run this
 *      layout
 *   5. argument pointers (NULL, alignment, overlap of the strided extents), trace,
 *      then the workspace (NULL, size, alignment)
 *   6. values read from host memory (seqlens_k, host memory on every backend)
 * Only then is anything written.
 */
#include <stddef.h>

#include "ta_internal.h"
#include "ta_validate.h"

/* The entry-point table of a backend; NULL for a value outside the enum. */
static const ta_backend_ops *ta_ops(ta_backend be) {
    switch (be) {
    case TA_BACKEND_REF: return &ta_ref_ops;
    case TA_BACKEND_CPU: return &ta_cpu_ops;
    case TA_BACKEND_CUDA: return &ta_cuda_ops;
    }
    return NULL;
}

int ta_backend_available(ta_backend be) {
    const ta_backend_ops *ops = ta_ops(be);
    return ops && ops->fwd_size && ops->available();
}

/* Steps 1-2 of the check order: the problem, then the backend. A query needs
 * the backend's layout (not its hardware); a call also needs it available. */
static ta_status ta_plan_for(const ta_problem *p, ta_backend be, int for_call, ta_plan *pl,
                             const ta_backend_ops **ops_out) {
    const ta_backend_ops *ops = ta_ops(be);
    const ta_status st = ta_plan_make(p, be, pl);
    if (st != TA_OK) return st;
    if (!ops) return TA_ERR_BAD_ARG;
    if (!ops->fwd_size) return TA_ERR_BACKEND_UNAVAILABLE; /* not implemented in this build */
    if (!ops->supports(pl)) return TA_ERR_UNSUPPORTED;
    if (for_call && !ops->available()) return TA_ERR_BACKEND_UNAVAILABLE;
    *ops_out = ops;
    return TA_OK;
}

ta_status ta_fwd_workspace_size(const ta_problem *p, ta_backend be, size_t *bytes) {
    const ta_backend_ops *ops = NULL;
    ta_plan pl;
    size_t n = 0;
    ta_status st;
    if (!p || !bytes) return TA_ERR_NULL_ARG;
    if ((st = ta_plan_for(p, be, 0, &pl, &ops)) != TA_OK) return st;
    if ((st = ops->fwd_size(&pl, &n)) != TA_OK) return st;
    *bytes = n;
    return TA_OK;
}

ta_status ta_bwd_workspace_size(const ta_problem *p, ta_backend be, size_t *bytes) {
    const ta_backend_ops *ops = NULL;
    ta_plan pl;
    size_t n = 0;
    ta_status st;
    if (!p || !bytes) return TA_ERR_NULL_ARG;
    if ((st = ta_plan_for(p, be, 0, &pl, &ops)) != TA_OK) return st;
    if ((st = ops->bwd_size(&pl, &n)) != TA_OK) return st;
    *bytes = n;
    return TA_OK;
}

static ta_status ta_check_stream(const ta_backend_ops *ops, const void *stream) {
    return (ops->host_memory && stream != NULL) ? TA_ERR_BAD_ARG : TA_OK;
}

/* Byte extents of the tensors, for the alignment and overlap checks. The
 * workspace counts as an output: nothing may overlap it. */
#define TA_BUF(ptr, n, eb) {(ptr), (n) * (eb), (eb)}

static ta_status ta_fwd_check_ptrs(const ta_plan *pl, const ta_extents *ex, ta_backend be,
                                   const ta_fwd_args *a, const void *ws, size_t ws_bytes,
                                   size_t ws_needed) {
    const size_t eb = pl->elem_bytes;
    const size_t n_seql = (size_t)pl->p.batch;
    ta_status st;
    if (!a->q || !a->k || !a->v || !a->o) return TA_ERR_NULL_ARG;
    if (pl->has_conv && !a->conv_w) return TA_ERR_NULL_ARG;
    {
        const ta_buf in[] = {{a->q, ex->q, eb}, {a->k, ex->k, eb}, {a->v, ex->v, eb},
                             TA_BUF(pl->has_conv ? a->conv_w : NULL, pl->n_conv, sizeof(float)),
                             TA_BUF(a->seqlens_k, n_seql, sizeof(int32_t))};
        const ta_buf out[] = {{a->o, ex->o, eb}, TA_BUF(a->lse, pl->n_lse, sizeof(float)),
                              {ws, ws_needed, 1}};
        if ((st = ta_check_buffers(in, 5, out, 3)) != TA_OK) return st;
    }
    if ((st = ta_check_trace(be, a->trace)) != TA_OK) return st;
    return ta_check_workspace(ws, ws_bytes, ws_needed);
}

ta_status ta_fwd(const ta_problem *p, ta_backend be, const ta_fwd_args *a, void *workspace,
                 size_t workspace_bytes, void *stream) {
    const ta_backend_ops *ops = NULL;
    ta_plan pl;
    ta_extents ex;
    size_t need = 0;
    ta_status st;
    if (!p || !a) return TA_ERR_NULL_ARG;
    if ((st = ta_plan_for(p, be, 1, &pl, &ops)) != TA_OK) return st;
    if ((st = ta_check_stream(ops, stream)) != TA_OK) return st;
    if ((st = ta_plan_set_fwd_layout(&pl, a, &ex)) != TA_OK) return st;
    if (!ops->supports(&pl)) return TA_ERR_UNSUPPORTED;
    if ((st = ops->fwd_size(&pl, &need)) != TA_OK) return st;
    if ((st = ta_fwd_check_ptrs(&pl, &ex, be, a, workspace, workspace_bytes, need)) != TA_OK)
        return st;
    if ((st = ta_check_seqlens_host(&pl, a->seqlens_k)) != TA_OK) return st;
    return ops->fwd(&pl, a, workspace, stream);
}

static ta_status ta_bwd_check_ptrs(const ta_plan *pl, const ta_extents *ex, ta_backend be,
                                   const ta_bwd_args *a, const void *ws, size_t ws_bytes,
                                   size_t ws_needed) {
    const size_t eb = pl->elem_bytes;
    ta_status st;
    if (!a->q || !a->k || !a->v || !a->o || !a->d_o || !a->lse) return TA_ERR_NULL_ARG;
    if (!a->dq || !a->dk || !a->dv) return TA_ERR_NULL_ARG;
    if (pl->has_conv && (!a->conv_w || !a->dconv_w)) return TA_ERR_NULL_ARG;
    {
        const ta_buf in[] = {{a->q, ex->q, eb},
                             {a->k, ex->k, eb},
                             {a->v, ex->v, eb},
                             {a->o, ex->o, eb},
                             {a->d_o, ex->d_o, eb},
                             TA_BUF(a->lse, pl->n_lse, sizeof(float)),
                             TA_BUF(pl->has_conv ? a->conv_w : NULL, pl->n_conv, sizeof(float)),
                             TA_BUF(a->seqlens_k, (size_t)pl->p.batch, sizeof(int32_t))};
        const ta_buf out[] = {
            {a->dq, ex->dq, eb}, {a->dk, ex->dk, eb}, {a->dv, ex->dv, eb},
            TA_BUF(pl->has_conv ? a->dconv_w : NULL, pl->n_conv, sizeof(float)),
            {ws, ws_needed, 1}};
        if ((st = ta_check_buffers(in, 8, out, 5)) != TA_OK) return st;
    }
    if ((st = ta_check_trace(be, a->trace)) != TA_OK) return st;
    return ta_check_workspace(ws, ws_bytes, ws_needed);
}

ta_status ta_bwd(const ta_problem *p, ta_backend be, const ta_bwd_args *a, void *workspace,
                 size_t workspace_bytes, void *stream) {
    const ta_backend_ops *ops = NULL;
    ta_plan pl;
    ta_extents ex;
    size_t need = 0;
    ta_status st;
    if (!p || !a) return TA_ERR_NULL_ARG;
    if ((st = ta_plan_for(p, be, 1, &pl, &ops)) != TA_OK) return st;
    if ((st = ta_check_stream(ops, stream)) != TA_OK) return st;
    if ((st = ta_plan_set_bwd_layout(&pl, a, &ex)) != TA_OK) return st;
    if (!ops->supports(&pl)) return TA_ERR_UNSUPPORTED;
    if ((st = ops->bwd_size(&pl, &need)) != TA_OK) return st;
    if ((st = ta_bwd_check_ptrs(&pl, &ex, be, a, workspace, workspace_bytes, need)) != TA_OK)
        return st;
    if ((st = ta_check_seqlens_host(&pl, a->seqlens_k)) != TA_OK) return st;
    return ops->bwd(&pl, a, workspace, stream);
}
