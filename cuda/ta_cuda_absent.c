/* Built instead of the CUDA sources when TILEATTN_CUDA is off: the probes say
 * "no CUDA", so ta_cuda_ops.available() is 0 and the launch stubs below are
 * never reached (they exist so the always-compiled table links). */
#include "ta_cuda.h"
#include "ta_internal.h"

int ta_cuda_compiled(void) { return 0; }
int ta_cuda_device_present(void) { return 0; }

ta_status ta_cuda_sdpa_fwd(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                           void *stream) {
    (void)plan;
    (void)a;
    (void)ws;
    (void)stream;
    return TA_ERR_BACKEND_UNAVAILABLE;
}

ta_status ta_cuda_sdpa_bwd(const ta_plan *plan, const ta_bwd_args *a, const ta_cuda_bwd_ws *ws,
                           void *stream) {
    (void)plan;
    (void)a;
    (void)ws;
    (void)stream;
    return TA_ERR_BACKEND_UNAVAILABLE;
}

ta_status ta_cuda_mta_fwd(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                          void *stream) {
    (void)plan;
    (void)a;
    (void)ws;
    (void)stream;
    return TA_ERR_BACKEND_UNAVAILABLE;
}

ta_status ta_cuda_mta_bwd(const ta_plan *plan, const ta_bwd_args *a, const ta_cuda_bwd_ws *ws,
                          void *stream) {
    (void)plan;
    (void)a;
    (void)ws;
    (void)stream;
    return TA_ERR_BACKEND_UNAVAILABLE;
}

ta_status ta_cuda_fast_fwd(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                           void *stream) {
    (void)plan;
    (void)a;
    (void)ws;
    (void)stream;
    return TA_ERR_BACKEND_UNAVAILABLE;
}
