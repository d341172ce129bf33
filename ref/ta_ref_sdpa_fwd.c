/* PLACEHOLDER: replaced by the reference SDPA forward. */
#include "ta_internal.h"
ta_status ta_ref_fwd_workspace_size(const ta_plan *plan, size_t *bytes) { (void)plan; *bytes = 64; return TA_OK; }
ta_status ta_ref_fwd(const ta_plan *plan, const ta_fwd_args *a, void *workspace) { (void)plan; (void)a; (void)workspace; return TA_ERR_UNSUPPORTED; }
