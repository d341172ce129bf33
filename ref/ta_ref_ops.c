/* The reference backend's entry-point table (see ta_backend_ops). */
#include "ta_ref.h"

static int ta_ref_available(void) { return 1; }

/* Plain SDPA, the MTA key-query conv (causal only: a non-causal conv
 * problem is refused earlier, by ta_plan_make, with TA_ERR_UNSUPPORTED) and
 * the reciprocal band and latent attention's fused projections. */
static int ta_ref_supports(const ta_plan *plan) {
    (void)plan;
    return 1;
}

const ta_backend_ops ta_ref_ops = {
    ta_ref_available,
    ta_ref_supports,
    ta_ref_fwd_workspace_size,
    ta_ref_bwd_workspace_size,
    ta_ref_fwd,
    ta_ref_bwd,
    1,
    NULL, /* no tile configurations to tune */
    ta_ref_merge,
    ta_ref_bwd_finish,
};
