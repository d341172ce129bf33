/*
 * The core archive's CUDA entry-point table: the one a program gets when it
 * does not link the CUDA component (libtileattn_cuda.a defines a table of the
 * same name, cuda/ta_cuda_ops.c; docs/cuda.md, "Packaging"). The size queries
 * work (they need no device: cuda/ta_cuda_layout.c); available() is 0, so
 * ta_fwd, ta_bwd, ta_tune_fwd, ta_merge and ta_bwd_finish answer
 * TA_ERR_BACKEND_UNAVAILABLE before
 * reaching the calls below, which exist only to fill the table.
 */
#include "ta_cuda.h"
#include "ta_internal.h"

static int ta_cuda_not_linked(void) { return 0; }

/* The probe the core's diagnostics ask (src/ta_api.c): 0 here, 1 in the CUDA
 * component (cuda/ta_cuda.cu), whose object the link takes first when it is
 * linked, exactly as for the table below. */
int ta_cuda_compiled(void) { return 0; }

static ta_status ta_cuda_fwd_not_linked(const ta_plan *plan, const ta_fwd_args *a,
                                        void *workspace, void *stream) {
    (void)plan;
    (void)a;
    (void)workspace;
    (void)stream;
    return TA_ERR_BACKEND_UNAVAILABLE;
}

static ta_status ta_cuda_bwd_not_linked(const ta_plan *plan, const ta_bwd_args *a,
                                        void *workspace, void *stream) {
    (void)plan;
    (void)a;
    (void)workspace;
    (void)stream;
    return TA_ERR_BACKEND_UNAVAILABLE;
}

static ta_status ta_cuda_tune_fwd_not_linked(const ta_plan *plan, const ta_fwd_args *a,
                                             void *workspace, void *stream, int32_t reps,
                                             ta_tune_result *out) {
    (void)plan;
    (void)a;
    (void)workspace;
    (void)stream;
    (void)reps;
    (void)out;
    return TA_ERR_BACKEND_UNAVAILABLE;
}

static ta_status ta_cuda_finish_not_linked(const ta_plan *plan, const ta_bwd_finish_args *a,
                                           void *stream) {
    (void)plan;
    (void)a;
    (void)stream;
    return TA_ERR_BACKEND_UNAVAILABLE;
}

static ta_status ta_cuda_merge_not_linked(const ta_plan *plan, const ta_merge_args *a,
                                          void *stream) {
    (void)plan;
    (void)a;
    (void)stream;
    return TA_ERR_BACKEND_UNAVAILABLE;
}

const ta_backend_ops ta_cuda_ops = {
    ta_cuda_not_linked,     ta_cuda_supports,       ta_cuda_fwd_size, ta_cuda_bwd_size,
    ta_cuda_fwd_not_linked, ta_cuda_bwd_not_linked, 0,
    ta_cuda_tune_fwd_not_linked, ta_cuda_merge_not_linked, ta_cuda_finish_not_linked,
};
