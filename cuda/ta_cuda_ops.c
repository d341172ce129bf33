/*
 * CUDA backend entry-point table, the one of the CUDA component
 * (libtileattn_cuda.a, target tileattn::cuda). The core archive holds a table
 * of the same name that answers "not linked" (cuda/ta_cuda_absent.c); a program
 * gets this one by linking the CUDA component before the core with the symbol
 * ta_cuda_backend_linked undefined (`-Wl,-u,ta_cuda_backend_linked`: the CMake
 * target and tileattn-cuda.pc carry it). docs/cuda.md, "Packaging", says why.
 *
 * The layout routines and the size queries are shared with the core's table
 * (cuda/ta_cuda_layout.c); the launch code is in cuda/ta_cuda_*.cu.
 */
#include <stddef.h>

#include "ta_cuda.h"
#include "ta_internal.h"

/* The link anchor: its only job is to be undefined on the command line, so the
 * linker takes this object (and with it the table below) from the archive. */
const char ta_cuda_backend_linked = 1;

static int ta_cuda_available(void) { return ta_cuda_compiled() && ta_cuda_device_present(); }

static ta_status ta_cuda_fwd(const ta_plan *plan, const ta_fwd_args *a, void *workspace,
                             void *stream) {
    ta_cuda_fwd_ws ws;
    size_t bytes;
    ta_status st = ta_cuda_fwd_layout(plan, workspace, &ws, &bytes);
    if (st != TA_OK ||
        (st = ta_cuda_check_index_ptrs(plan, a->seqlens_k, a->block_table)) != TA_OK)
        return st;
    /* latent attention: in fast mode the tensor-core kernels (the exact ones
     * where those cannot read the rows), else the exact kernels on f32 copies */
    if (ta_cuda_fast_lat_path(plan)) return ta_cuda_fast_latent_fwd(plan, a, &ws, stream);
    if (ta_cuda_latent_plan(plan)) return ta_cuda_latent_fwd(plan, a, &ws, stream);
    /* fast mode, split-K included: the tensor-core kernels (docs/cuda.md) */
    if (ta_cuda_fast_path(plan)) return ta_cuda_fast_fwd(plan, a, &ws, stream);
    /* fast MTA: the conv folded into tensor-core products (forward only) */
    if (ta_cuda_fast_mta_path(plan)) return ta_cuda_fast_mta_fwd(plan, a, &ws, stream);
    /* fast MTA with a few rows, split-K or pages: the decode-shaped kernel */
    if (ta_cuda_fast_mta_dec_path(plan)) return ta_cuda_fast_mta_dec_fwd(plan, a, &ws, stream);
    return plan->has_conv ? ta_cuda_mta_fwd(plan, a, &ws, stream)
                          : ta_cuda_sdpa_fwd(plan, a, &ws, stream);
}

static ta_status ta_cuda_bwd(const ta_plan *plan, const ta_bwd_args *a, void *workspace,
                             void *stream) {
    ta_cuda_bwd_ws ws;
    size_t bytes;
    ta_status st = ta_cuda_bwd_layout(plan, workspace, &ws, &bytes);
    if (st != TA_OK || (st = ta_cuda_check_index_ptrs(plan, a->seqlens_k, NULL)) != TA_OK)
        return st;
    if (ta_cuda_fast_lat_path(plan)) return ta_cuda_fast_latent_bwd(plan, a, &ws, stream);
    if (ta_cuda_latent_plan(plan)) return ta_cuda_latent_bwd(plan, a, &ws, stream);
    /* accumulating, or a row or key range (ta_plan_keys_cut: not a fast
     * path): the exact kernels in either precision (the fast ones keep no
     * pairs and no ranges; exact bits satisfy the bound) */
    if (ta_cuda_fast_path(plan) && !a->accumulate) return ta_cuda_fast_bwd(plan, a, &ws, stream);
    /* fast MTA: the fold's gradients on tensor cores */
    if (ta_cuda_fast_mta_bwd_path(plan) && !a->accumulate)
        return ta_cuda_fast_mta_bwd(plan, a, &ws, stream);
    return plan->has_conv ? ta_cuda_mta_bwd(plan, a, &ws, stream)
                          : ta_cuda_sdpa_bwd(plan, a, &ws, stream);
}

/* ta_tune_fwd: only the fast-path forward has a configuration table. */
static ta_status ta_cuda_tune_fwd(const ta_plan *plan, const ta_fwd_args *a, void *workspace,
                                  void *stream, int32_t reps, ta_tune_result *out) {
    ta_cuda_fwd_ws ws;
    size_t bytes;
    ta_status st;
    if (!ta_cuda_fast_path(plan)) return TA_ERR_UNSUPPORTED;
    if ((st = ta_cuda_fwd_layout(plan, workspace, &ws, &bytes)) != TA_OK) return st;
    if ((st = ta_cuda_check_index_ptrs(plan, a->seqlens_k, a->block_table)) != TA_OK) return st;
    return ta_cuda_fast_tune(plan, a, &ws, stream, reps, out);
}

const ta_backend_ops ta_cuda_ops = {
    ta_cuda_available, ta_cuda_supports, ta_cuda_fwd_size, ta_cuda_bwd_size,
    ta_cuda_fwd,       ta_cuda_bwd,      0,
    ta_cuda_tune_fwd,  ta_cuda_merge,     ta_cuda_bwd_finish,
};
