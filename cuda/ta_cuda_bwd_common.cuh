/*
 * Pieces of the CUDA backward shared by the SDPA and the MTA launch code
 * (cuda/ta_cuda_sdpa_bwd.cu defines them, cuda/ta_cuda_mta_bwd.cu uses them).
 * Not installed.
 */
#ifndef TA_CUDA_BWD_COMMON_CUH
#define TA_CUDA_BWD_COMMON_CUH

extern "C" {
#include "ta_internal.h"
}

/*
 * Enqueue the delta kernel on stream: delta[row] = dot(dO_row, o_row, D_v)
 * (o and d_o addressed by the plan's layout, delta contiguous [B, H, S_q])
 * (+0, fmaf, d ascending, o read from the stored forward output) for every row
 * of [B, H, S_q], the reference's D_i (ta_ref_bwd_load_q). TA_ERR_DEVICE if the
 * launch fails.
 */
ta_status ta_cuda_bwd_delta(const ta_plan *plan, const ta_bwd_args *a, float *delta, void *stream);

#endif /* TA_CUDA_BWD_COMMON_CUH */
