/*
 * ta_tune_fwd on the CUDA fast path: every candidate of the fast forward's
 * configuration table (cuda/ta_cuda_fast_fwd.cu, ta_cuda_fast_table: the one
 * table the launcher reads), timed on the caller's buffers and stream.
 * docs/api.md ("Tuning"), docs/cuda.md section 7.
 *
 * Per candidate k that runs on this device:
 *   1. one untimed forward (the shared-memory opt-in, cold caches, clocks);
 *   2. reps forwards back to back, an event recorded before the first and
 *      after each: ev[0] k ev[1] k ev[2] ... k ev[reps]; the stream is not
 *      waited on in between, so the device goes from one forward to the next
 *      and the interval ev[r] .. ev[r + 1] is one forward (and its batch
 *      chunks), not the host's launch latency;
 *   3. one wait on ev[reps], then ms[k - 1] = the median interval (the lower
 *      middle one for an even reps: always a measured time).
 * The pick is the smallest median, the smaller k on a tie. Nothing is kept:
 * the events are created at the start and destroyed before returning, and
 * the result is the caller's.
 */
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "ta_cuda_fast.cuh"
#include "ta_cuda_host.cuh"

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
}

static_assert(TA_CUDA_FAST_CFG_MAX <= TA_TUNE_MAX_CANDIDATES,
              "ta_tune_result.ms has an entry for every candidate of the table");

namespace {

/* A failed CUDA call: clear the runtime's last-error slot, TA_ERR_DEVICE. */
ta_status ta_tune_fail() {
    (void)cudaGetLastError();
    return TA_ERR_DEVICE;
}

/* TA_ERR_BAD_ARG if stream is capturing (this call waits on it), or if it is
 * the legacy default stream while another stream captures in global mode. */
ta_status ta_tune_check_stream(void *stream) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    const cudaError_t e = cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &cs);
    if (e == cudaErrorStreamCaptureImplicit) {
        (void)cudaGetLastError();
        return TA_ERR_BAD_ARG;
    }
    if (e != cudaSuccess) return ta_tune_fail();
    return cs == cudaStreamCaptureStatusNone ? TA_OK : TA_ERR_BAD_ARG;
}

/* The median of t[0 .. n), n >= 1 (sorts t; the lower middle for even n). */
float ta_tune_median(float *t, int32_t n) {
    int32_t i, j;
    for (i = 1; i < n; ++i) { /* insertion sort: n <= TA_TUNE_REPS_MAX */
        const float x = t[i];
        for (j = i; j > 0 && t[j - 1] > x; --j)
            t[j] = t[j - 1];
        t[j] = x;
    }
    return t[(n - 1) / 2];
}

/* Steps 1-3 for configuration fl with events ev[0 .. reps]. */
ta_status ta_tune_time(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                       const ta_fast_launch *fl, cudaEvent_t *ev, int32_t reps, void *stream,
                       float *ms) {
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    float t[TA_TUNE_REPS_MAX];
    int32_t r;
    ta_status st;
    if ((st = ta_cuda_fast_run(plan, a, ws, fl, stream)) != TA_OK) return st; /* 1. warm-up */
    if (cudaEventRecord(ev[0], s) != cudaSuccess) return ta_tune_fail();
    for (r = 0; r < reps; ++r) { /* 2. */
        if ((st = ta_cuda_fast_run(plan, a, ws, fl, stream)) != TA_OK) return st;
        if (cudaEventRecord(ev[r + 1], s) != cudaSuccess) return ta_tune_fail();
    }
    if (cudaEventSynchronize(ev[reps]) != cudaSuccess) return ta_tune_fail(); /* 3. */
    for (r = 0; r < reps; ++r)
        if (cudaEventElapsedTime(&t[r], ev[r], ev[r + 1]) != cudaSuccess) return ta_tune_fail();
    *ms = ta_tune_median(t, reps);
    return TA_OK;
}

/* Every candidate of tb into out (events ev[0 .. reps] created). A candidate
 * this device cannot run (the wgmma one off sm_90, shared memory beyond the
 * device's limit) gets ms < 0; TA_ERR_UNSUPPORTED if none ran. */
ta_status ta_tune_table(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                        const ta_fast_table *tb, cudaEvent_t *ev, int32_t reps, void *stream,
                        ta_tune_result *out) {
    int i;
    out->tile_config = 0;
    out->num_candidates = tb->n;
    for (i = 0; i < TA_TUNE_MAX_CANDIDATES; ++i)
        out->ms[i] = -1.0f;
    for (i = 0; i < tb->n; ++i) {
        ta_status st;
        if (!ta_fast_table_runs(tb, i)) continue;
        st = ta_tune_time(plan, a, ws, &tb->cand[i], ev, reps, stream, &out->ms[i]);
        /* the warm-up's opt-in or a wgmma kernel with split-K refused: none ran */
        if (st == TA_ERR_UNSUPPORTED) continue;
        if (st != TA_OK) return st;
        if (out->tile_config == 0 || out->ms[i] < out->ms[out->tile_config - 1])
            out->tile_config = i + 1;
    }
    return out->tile_config > 0 ? TA_OK : TA_ERR_UNSUPPORTED;
}

} /* namespace */

extern "C" ta_status ta_cuda_fast_tune(const ta_plan *plan, const ta_fwd_args *a,
                                       const ta_cuda_fwd_ws *ws, void *stream, int32_t reps,
                                       ta_tune_result *out) {
    cudaEvent_t ev[TA_TUNE_REPS_MAX + 1];
    const ta_plan *pl;
    const ta_fwd_args *aa;
    ta_plan sub;
    ta_fwd_args a2;
    ta_fast_table tb;
    int32_t n_ev, i;
    ta_status st;
    /* the launcher's refusals, then the stream, all before any launch; the
     * rotary stage: q and k turned once, the candidates timed on the copies */
    if ((st = ta_cuda_fast_view(plan, a, ws, &sub, &a2, &pl, &aa)) != TA_OK) return st;
    if ((st = ta_cuda_fast_table(pl, aa, &tb)) != TA_OK) return st;
    if ((st = ta_tune_check_stream(stream)) != TA_OK) return st;
    if ((st = ta_cuda_fast_turn(plan, a, ws, stream)) != TA_OK) return st;
    for (n_ev = 0; n_ev <= reps; ++n_ev)
        if (cudaEventCreate(&ev[n_ev]) != cudaSuccess) break;
    st = n_ev <= reps ? ta_tune_fail() : ta_tune_table(pl, aa, ws, &tb, ev, reps, stream, out);
    for (i = 0; i < n_ev; ++i)
        if (cudaEventDestroy(ev[i]) != cudaSuccess && st == TA_OK) st = ta_tune_fail();
    return st;
}
