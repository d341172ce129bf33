/* The reference backend's entry-point table (see ta_backend_ops). */
#include "ta_ref.h"

static int ta_ref_available(void) { return 1; }

/* Plain SDPA only until the MTA conv lands in the reference. */
static int ta_ref_supports(const ta_plan *plan) { return !plan->has_conv; }

const ta_backend_ops ta_ref_ops = {
    ta_ref_available,          ta_ref_supports, ta_ref_fwd_workspace_size,
    ta_ref_bwd_workspace_size, ta_ref_fwd,      ta_ref_bwd,
    1,
};
