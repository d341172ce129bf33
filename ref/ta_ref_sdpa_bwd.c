/* PLACEHOLDER: replaced by the reference SDPA backward. */
#include "ta_internal.h"
ta_status ta_ref_bwd_workspace_size(const ta_plan *plan, size_t *bytes) { (void)plan; *bytes = 64; return TA_OK; }
ta_status ta_ref_bwd(const ta_plan *plan, const ta_bwd_args *a, void *workspace) { (void)plan; (void)a; (void)workspace; return TA_ERR_UNSUPPORTED; }
