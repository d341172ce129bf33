/*
 * CUDA MTA fwd, TA_PRECISION_EXACT (docs/mta.md). Not implemented yet: every
 * call returns TA_ERR_UNSUPPORTED before touching an output.
 */
#include <cuda_runtime.h>

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
}

extern "C" ta_status ta_cuda_mta_fwd(const ta_plan *plan, const ta_fwd_args *a,
                                    const ta_cuda_fwd_ws *ws, void *stream) {
    (void)plan;
    (void)a;
    (void)ws;
    (void)stream;
    return TA_ERR_UNSUPPORTED;
}
