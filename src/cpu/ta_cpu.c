/* CPU backend (AVX2/AVX-512 + OpenMP): not implemented yet. Its entry-point
 * table reports it unavailable, so every call returns
 * TA_ERR_BACKEND_UNAVAILABLE. */
#include "ta_internal.h"

static int ta_cpu_available(void) { return 0; }
static int ta_cpu_supports(const ta_plan *plan) {
    (void)plan;
    return 0;
}

const ta_backend_ops ta_cpu_ops = {ta_cpu_available, ta_cpu_supports, NULL, NULL, NULL, NULL, 1};
