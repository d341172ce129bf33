/* CUDA backend entry-point table. Plain C, always compiled: the workspace size
 * query must work on a machine without a GPU or without CUDA compiled in.
 * The kernels are not implemented yet: the backend reports unavailable. */
#include "ta_internal.h"

static int ta_cuda_available(void) { return 0; /* kernels land with the CUDA backend issue */ }
static int ta_cuda_supports(const ta_plan *plan) {
    (void)plan;
    return 0;
}

const ta_backend_ops ta_cuda_ops = {ta_cuda_available, ta_cuda_supports, NULL, NULL, NULL, NULL,
                                    0};
