/*
 * Public entry points: validate everything, size the workspace, dispatch to a
 * backend. The order of checks is fixed so a caller sees a stable status:
 *   1. problem (shape, enums, sizes, overflow, tiling)   -> ta_plan_make
 *   2. backend: enum, implemented, supports the operation, available (calls)
 *   3. stream
 *   4. strides (ta_plan_set_*_layout), then the backend again: does it run this
 *      layout
 *   5. argument pointers: NULL (the tensors, then the rotary tables), then the
 *      trace (backend, entries, capacity), then alignment and overlap of the
 *      strided extents, the rotary buffers, the trace and the workspace
 *   6. the workspace (NULL, size, alignment)
 *   7. values read from host memory (seqlens_k, host memory on every backend;
 *      then the rotary positions, args.rope.pos_q / pos_k)
 * Only then is anything written. ta_tune_fwd runs steps 1-7 of ta_fwd, then
 * checks its own out and reps, then asks the backend (TA_ERR_UNSUPPORTED
 * without a tune entry). ta_merge runs steps 1-3, then its num_parts, o's
 * strides and its pointers (NULL, size, alignment, overlap); it has no
 * workspace and no seqlens. Each refusal is recorded in a ta_diag (the
 * caller's stack), which the ta_explain_* calls format: they run the same
 * validation functions as the entry points.
 */
#include <stddef.h>

#include "cpu/ta_cpu.h"
#include "ta_internal.h"
#include "ta_validate.h"

/* The entry-point table of a backend; NULL for a value outside the enum. */
static const ta_backend_ops *ta_ops(ta_backend be) {
    switch (be) {
    case TA_BACKEND_REF: return &ta_ref_ops;
    case TA_BACKEND_CPU: return &ta_cpu_ops;
    case TA_BACKEND_CUDA: return &ta_cuda_ops;
    }
    return NULL;
}

int ta_backend_available(ta_backend be) {
    const ta_backend_ops *ops = ta_ops(be);
    return ops && ops->fwd_size && ops->available();
}

static ta_status ta_fail_backend(ta_diag *d, ta_status st, ta_backend be, const char *rule) {
    ta_fail(d, st, "backend", rule);
    d->value = (int64_t)(int)be;
    d->flags = TA_DIAG_VALUE;
    return st;
}

/* Steps 1-2 of the check order: the problem, then the backend. A query needs
 * the backend's layout (not its hardware); a call also needs it available. */
static ta_status ta_plan_for(const ta_problem *p, ta_backend be, int for_call, int pass,
                             ta_plan *pl, const ta_backend_ops **ops_out, ta_diag *d) {
    const ta_backend_ops *ops = ta_ops(be);
    ta_status st = ta_plan_make(p, be, pl, d);
    if (st != TA_OK) return st;
    if ((st = ta_check_ranges(pl, pass, d)) != TA_OK) return st; /* on the pass's tiles */
    if (!ops)
        return ta_fail_backend(d, TA_ERR_BAD_ARG, be,
                               "not TA_BACKEND_REF (0), TA_BACKEND_CPU (1) or TA_BACKEND_CUDA (2)");
    if (!ops->fwd_size) /* not implemented in this build */
        return ta_fail_backend(d, TA_ERR_BACKEND_UNAVAILABLE, be, "not implemented in this build");
    if (!ops->supports(pl))
        return ta_fail_backend(d, TA_ERR_UNSUPPORTED, be, "does not implement this operation");
    if (for_call && !ops->available())
        return ta_fail_backend(d, TA_ERR_BACKEND_UNAVAILABLE, be,
                               be == TA_BACKEND_CUDA && !ta_cuda_compiled()
                                   ? "not linked: the program does not link tileattn::cuda "
                                     "(or the library was built with TILEATTN_CUDA=OFF)"
                                   : "no usable device present");
    *ops_out = ops;
    return TA_OK;
}

/* Right after step 2 for the backward: what its pass cannot run yet. The
 * query history rows (ta_problem.q_history) are forward only: their scores
 * enter the conv, so dk, dv and dconv_w would need their terms and their own
 * gradient would be another output (docs/mta.md section 2a). */
static ta_status ta_check_bwd_problem(const ta_plan *pl, ta_diag *d) {
    if (pl->p.q_history > 0)
        return ta_fail_value(d, TA_ERR_UNSUPPORTED, "q_history", pl->p.q_history,
                             "the backward has no query history rows yet (forward only; "
                             "must be 0 for ta_bwd)");
    if (pl->p.kv_page_size > 0) /* the gradients would be pools too: not built */
        return ta_fail_value(d, TA_ERR_UNSUPPORTED, "kv_page_size", pl->p.kv_page_size,
                             "the backward has no paged KV cache yet (forward only; "
                             "must be 0 for ta_bwd)");
    if (pl->stages.score == TA_SCORE_RBAND && pl->p.seq_q != pl->p.seq_k) {
        ta_fail_pair(d, TA_ERR_UNSUPPORTED, "seq_q", "with TA_RBAND: the backward needs it equal to",
                     "seq_k");
        d->value = pl->p.seq_q;
        d->other_value = pl->p.seq_k;
        d->flags = TA_DIAG_VALUE | TA_DIAG_OTHER_VALUE;
        return TA_ERR_UNSUPPORTED;
    }
    return TA_OK;
}

/* The band has no key lengths yet: the transposed score S_ji reads the key at
 * the query's position, which seqlens_k could mask (docs/api.md). */
static ta_status ta_check_rband_seqlens(const ta_plan *pl, const int32_t *seqlens_k, ta_diag *d) {
    if (pl->stages.score == TA_SCORE_RBAND && seqlens_k)
        return ta_fail(d, TA_ERR_UNSUPPORTED, "args.seqlens_k",
                       "must be NULL with TA_RBAND (no key lengths with the band yet)");
    return TA_OK;
}

/* Steps 1-2 and the backend's workspace size for one pass (bwd: 0 or 1). */
static ta_status ta_size_validate(const ta_problem *p, ta_backend be, int bwd, size_t *n,
                                  ta_diag *d) {
    const ta_backend_ops *ops = NULL;
    ta_plan pl;
    ta_status st;
    if ((st = ta_plan_for(p, be, 0, bwd, &pl, &ops, d)) != TA_OK) return st;
    if (bwd && (st = ta_check_bwd_problem(&pl, d)) != TA_OK) return st;
    if ((st = (bwd ? ops->bwd_size : ops->fwd_size)(&pl, n)) != TA_OK)
        return ta_fail(d, st, "workspace size", "the backend's workspace layout overflows size_t");
    return TA_OK;
}

static ta_status ta_size_query(const ta_problem *p, ta_backend be, int bwd, size_t *bytes) {
    ta_diag d;
    size_t n = 0;
    ta_status st;
    ta_diag_init(&d);
    if (!p || !bytes) return TA_ERR_NULL_ARG;
    if ((st = ta_size_validate(p, be, bwd, &n, &d)) != TA_OK) return st;
    *bytes = n;
    return TA_OK;
}

ta_status ta_fwd_workspace_size(const ta_problem *p, ta_backend be, size_t *bytes) {
    return ta_size_query(p, be, 0, bytes);
}

ta_status ta_bwd_workspace_size(const ta_problem *p, ta_backend be, size_t *bytes) {
    return ta_size_query(p, be, 1, bytes);
}

static ta_status ta_check_stream(const ta_backend_ops *ops, const void *stream, ta_diag *d) {
    return (ops->host_memory && stream != NULL)
               ? ta_fail(d, TA_ERR_BAD_ARG, "stream", "must be NULL on a host backend")
               : TA_OK;
}

/* Byte extents of the tensors, for the alignment and overlap checks. The
 * workspace and the trace (struct and entries) count as outputs: nothing may
 * overlap them. */
#define TA_BUF(ptr, n, eb, name)                                                                   \
    { (ptr), (n) * (eb), (eb), (name) }
#define TA_TRACE_BUFS(tr, tr_bytes)                                                                \
    {(tr), sizeof(ta_trace), _Alignof(ta_trace), "args.trace"}, {                                  \
        (tr) ? (tr)->entries : NULL, (tr_bytes), _Alignof(ta_trace_entry), "args.trace->entries"   \
    }

/* The rotary tables and positions (NULL when the problem has no rotary stage):
 * four inputs. */
#define TA_ROPE_BUFS(pl)                                                                           \
    TA_BUF((pl)->rope.cos, (pl)->n_rope, sizeof(float), "args.rope.cos"),                          \
        TA_BUF((pl)->rope.sin, (pl)->n_rope, sizeof(float), "args.rope.sin"),                      \
        TA_BUF((pl)->rope.pos_q, (size_t)(pl)->p.batch * (size_t)(pl)->p.seq_q, sizeof(int32_t),   \
               "args.rope.pos_q"),                                                                 \
        TA_BUF((pl)->rope.pos_k, (size_t)(pl)->p.batch * (size_t)(pl)->p.seq_k, sizeof(int32_t),   \
               "args.rope.pos_k")

/* The first NULL among n required pointers, recorded; TA_OK if none. */
static ta_status ta_check_required(const void *const *ptrs, const char *const *names, int n,
                                   ta_diag *d) {
    int i;
    for (i = 0; i < n; ++i)
        if (!ptrs[i]) return ta_fail(d, TA_ERR_NULL_ARG, names[i], "must not be NULL");
    return TA_OK;
}

static ta_status ta_fwd_check_ptrs(ta_plan *pl, const ta_extents *ex, ta_backend be,
                                   const ta_fwd_args *a, const void *ws, size_t ws_bytes,
                                   size_t ws_needed, ta_diag *d) {
    static const char *const names[] = {"args.q",      "args.k",      "args.v",
                                        "args.o",      "args.conv_w", "args.q_hist",
                                        "args.block_table", "args.w_qlat", "args.w_vup"};
    const int lat = pl->p.latent_dim > 0;
    const void *const req[] = {a->q,
                               a->k,
                               a->v,
                               a->o,
                               pl->has_conv ? (const void *)a->conv_w : (const void *)a,
                               pl->p.q_history > 0 && !pl->ring_read ? a->q_hist
                                                                     : (const void *)a,
                               pl->p.kv_page_size > 0 ? (const void *)a->block_table
                                                      : (const void *)a,
                               lat ? (const void *)a->w_qlat : (const void *)a,
                               lat ? (const void *)a->w_vup : (const void *)a};
    const size_t eb = pl->elem_bytes;
    const size_t n_seql = (size_t)pl->p.batch;
    size_t tr_bytes;
    ta_status st;
    if ((st = ta_check_required(req, names, 9, d)) != TA_OK) return st;
    if ((st = ta_check_rband_seqlens(pl, a->seqlens_k, d)) != TA_OK) return st;
    pl->block_table = pl->p.kv_page_size > 0 ? a->block_table : NULL;
    if ((st = ta_plan_set_rope(pl, &a->rope, d)) != TA_OK) return st;
    if ((st = ta_check_trace(be, a->trace, &tr_bytes, d)) != TA_OK) return st;
    {
        const ta_buf in[] = {
            {a->q, ex->q, eb, "args.q"},
            {pl->p.q_history > 0 ? a->q_hist : NULL, ex->q_hist, eb, "args.q_hist"},
            TA_BUF(pl->block_table, n_seql * (size_t)pl->p.kv_max_blocks, sizeof(int32_t),
                   "args.block_table"),
            {a->k, ex->k, eb, "args.k"},
            {a->v, ex->v, eb, "args.v"},
            TA_BUF(pl->has_conv ? a->conv_w : NULL, pl->n_conv, sizeof(float), "args.conv_w"),
            TA_BUF(a->seqlens_k, n_seql, sizeof(int32_t), "args.seqlens_k"),
            TA_ROPE_BUFS(pl),
            TA_BUF(lat ? a->w_qlat : NULL, pl->n_wq, sizeof(float), "args.w_qlat"),
            TA_BUF(lat ? a->w_vup : NULL, pl->n_wv, sizeof(float), "args.w_vup")};
        const ta_buf out[] = {{a->o, ex->o, eb, "args.o"},
                              TA_BUF(a->lse, pl->n_lse, sizeof(float), "args.lse"),
                              TA_TRACE_BUFS(a->trace, tr_bytes),
                              {pl->ring, ex->ring, sizeof(float), "args.score_ring"},
                              {ws, ws_needed, 1, "workspace"}};
        if ((st = ta_check_buffers(in, 13, out, 6, d)) != TA_OK) return st;
    }
    return ta_check_workspace(ws, ws_bytes, ws_needed, d);
}

/* Caller-run tasks (ta_*_task_plan, ta_*_tasks_prepare): a CPU backend mode;
 * checked right after the backend (step 2). */
static ta_status ta_tasks_backend(ta_backend be, ta_diag *d) {
    return be == TA_BACKEND_CPU ? TA_OK
                                : ta_fail_backend(d, TA_ERR_UNSUPPORTED, be,
                                                  "has no caller-run tasks (TA_BACKEND_CPU only)");
}

/* Steps 1-3 of a call: the problem, the backend (tasks: CPU only), the stream
 * (a: the args, NULL-checked). */
static ta_status ta_call_begin(const ta_problem *p, ta_backend be, const void *a,
                               const void *stream, int tasks, int pass, ta_plan *pl,
                               const ta_backend_ops **ops, ta_diag *d) {
    ta_status st;
    if (!p) return ta_fail(d, TA_ERR_NULL_ARG, "problem", "must not be NULL");
    if (!a) return ta_fail(d, TA_ERR_NULL_ARG, "args", "must not be NULL");
    if ((st = ta_plan_for(p, be, 1, pass, pl, ops, d)) != TA_OK) return st;
    if (tasks && (st = ta_tasks_backend(be, d)) != TA_OK) return st;
    return ta_check_stream(*ops, stream, d);
}

/* After step 4's strides: the backend runs this layout; the workspace it needs
 * (tasks: the caller-run call's shared workspace). */
static ta_status ta_call_need(ta_backend be, const ta_backend_ops *ops, const ta_plan *pl, int bwd,
                              int tasks, size_t *need, ta_diag *d) {
    ta_task_plan tp;
    ta_status st;
    if (!ops->supports(pl))
        return ta_fail_backend(d, TA_ERR_UNSUPPORTED, be, "does not run this strided layout");
    st = tasks ? ta_cpu_tasks_plan(pl, bwd, &tp) : (bwd ? ops->bwd_size : ops->fwd_size)(pl, need);
    if (st != TA_OK)
        return ta_fail(d, st, "workspace size", "the backend's workspace layout overflows size_t");
    if (tasks) *need = tp.shared_bytes;
    return TA_OK;
}

/* Steps 1-7 for ta_fwd (tasks: for ta_fwd_tasks_prepare, whose workspace is
 * the shared one); on TA_OK, *pl, *ops and *ex are ready for the call. */
static ta_status ta_fwd_validate_mode(const ta_problem *p, ta_backend be, const ta_fwd_args *a,
                                      const void *ws, size_t ws_bytes, const void *stream,
                                      int tasks, ta_plan *pl, const ta_backend_ops **ops,
                                      ta_extents *ex, ta_diag *d) {
    size_t need = 0;
    ta_status st;
    if ((st = ta_call_begin(p, be, a, stream, tasks, TA_TILING_FWD, pl, ops, d)) != TA_OK)
        return st;
    if ((st = ta_plan_set_fwd_layout(pl, a, ex, d)) != TA_OK) return st;
    if (pl->ring && be == TA_BACKEND_CUDA) /* docs/mta.md 2a, "The score ring" */
        return ta_fail_backend(d, TA_ERR_UNSUPPORTED, be,
                               "has no score ring yet (args.score_ring: REF and CPU)");
    if ((st = ta_call_need(be, *ops, pl, 0, tasks, &need, d)) != TA_OK) return st;
    if ((st = ta_fwd_check_ptrs(pl, ex, be, a, ws, ws_bytes, need, d)) != TA_OK) return st;
    if ((st = ta_check_seqlens_host(pl, a->seqlens_k, (*ops)->host_memory, d)) != TA_OK) return st;
    /* a block table in device memory (CUDA): not readable here; the kernels
     * clamp its entries into the pool (docs/api.md, "Paged KV cache") */
    if ((*ops)->host_memory && (st = ta_check_block_table(pl, d)) != TA_OK) return st;
    /* positions in device memory (CUDA): not readable here, the kernels clamp
     * them into the table; a NULL array's sequence is checked on every
     * backend (docs/rope.md) */
    return ta_check_rope_pos(pl, (*ops)->host_memory, d);
}

static ta_status ta_fwd_validate(const ta_problem *p, ta_backend be, const ta_fwd_args *a,
                                 const void *ws, size_t ws_bytes, const void *stream, ta_plan *pl,
                                 const ta_backend_ops **ops, ta_diag *d) {
    ta_extents ex;
    return ta_fwd_validate_mode(p, be, a, ws, ws_bytes, stream, 0, pl, ops, &ex, d);
}

ta_status ta_fwd(const ta_problem *p, ta_backend be, const ta_fwd_args *a, void *workspace,
                 size_t workspace_bytes, void *stream) {
    const ta_backend_ops *ops = NULL;
    ta_plan pl;
    ta_diag d;
    ta_status st;
    ta_diag_init(&d);
    st = ta_fwd_validate(p, be, a, workspace, workspace_bytes, stream, &pl, &ops, &d);
    if (st != TA_OK) return st;
    return ops->fwd(&pl, a, workspace, stream);
}

/* ta_tune_fwd's own arguments, after ta_fwd's checks (docs/api.md, "Tuning"). */
static ta_status ta_tune_check(const ta_tune_result *out, int32_t reps, ta_diag *d) {
    if (!out) return ta_fail(d, TA_ERR_NULL_ARG, "out", "must not be NULL");
    if (!ta_ptr_aligned(out, _Alignof(ta_tune_result)))
        return ta_fail(d, TA_ERR_BAD_ARG, "out", "not aligned to its type");
    if (reps < 1 || reps > TA_TUNE_REPS_MAX)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "reps", reps, TA_DIAG_LO | TA_DIAG_HI, 1,
                              TA_TUNE_REPS_MAX);
    return TA_OK;
}

ta_status ta_tune_fwd(const ta_problem *p, ta_backend be, const ta_fwd_args *a, void *workspace,
                      size_t workspace_bytes, void *stream, int32_t reps, ta_tune_result *out) {
    const ta_backend_ops *ops = NULL;
    ta_tune_result res;
    ta_plan pl;
    ta_diag d;
    ta_status st;
    ta_diag_init(&d);
    st = ta_fwd_validate(p, be, a, workspace, workspace_bytes, stream, &pl, &ops, &d);
    if (st == TA_OK) st = ta_tune_check(out, reps, &d);
    if (st != TA_OK) return st;
    if (!ops->tune_fwd) return TA_ERR_UNSUPPORTED; /* REF, CPU: one configuration */
    if ((st = ops->tune_fwd(&pl, a, workspace, stream, reps, &res)) != TA_OK) return st;
    *out = res;
    return TA_OK;
}

/* The operations the pairs of ta_bwd_args.accumulate and ta_bwd_finish
 * exist for, on every backend (field: the name a failure gives). */
static ta_status ta_check_accumulate_problem(const ta_plan *pl, const char *field, ta_diag *d) {
    if (pl->stages.load == TA_LOAD_ROPE || pl->stages.score == TA_SCORE_RBAND ||
        pl->p.latent_dim > 0)
        return ta_fail(d, TA_ERR_UNSUPPORTED, field,
                       "SDPA or the MTA conv only (no rope, reciprocal band or latent "
                       "projections)");
    return TA_OK;
}

/* The f32 extent of a gradient whose storage-dtype extent is *bytes (the
 * same strides; whole elements up to one past the last): 4 / elem_bytes as
 * many bytes, checked (n fits size_t in the storage dtype, 4 n bytes may
 * not). */
static ta_status ta_f32_extent(const ta_plan *pl, size_t *bytes, const char *field, ta_diag *d) {
    if (!ta_mul_size(*bytes / pl->elem_bytes, sizeof(float), bytes))
        return ta_fail(d, TA_ERR_OVERFLOW, field, "the f32 buffers' byte counts overflow size_t");
    return TA_OK;
}

/* ta_bwd_args.accumulate (docs/api.md, "Backward over key and query ranges"),
 * after the strides: the mode's value, its operations (not the rotary stage,
 * the band or the projections), the lo
 * words present; then dq, dk, dv's extents are their f32 ones (their lo
 * words' too). */
static ta_status ta_check_bwd_accumulate(const ta_plan *pl, const ta_bwd_args *a,
                                         ta_extents *ex, ta_diag *d) {
    static const char *const names[] = {"args.dq_lo", "args.dk_lo", "args.dv_lo"};
    const void *const req[] = {a->dq_lo, a->dk_lo, a->dv_lo};
    ta_status st;
    if (a->accumulate == 0) return TA_OK;
    if (a->accumulate != TA_BWD_ACCUMULATE)
        return ta_fail_value(d, TA_ERR_BAD_ARG, "args.accumulate", a->accumulate,
                             "not 0 or TA_BWD_ACCUMULATE (1)");
    if ((st = ta_check_accumulate_problem(pl, "args.accumulate", d)) != TA_OK) return st;
    if ((st = ta_check_required(req, names, 3, d)) != TA_OK) return st;
    if (pl->has_conv && !a->dconv_w_lo) /* the conv: dconv_w's pair too */
        return ta_fail(d, TA_ERR_NULL_ARG, "args.dconv_w_lo",
                       "must not be NULL with args.accumulate and the conv");
    if ((st = ta_f32_extent(pl, &ex->dq, "args.dq", d)) != TA_OK) return st;
    if ((st = ta_f32_extent(pl, &ex->dk, "args.dk", d)) != TA_OK) return st;
    return ta_f32_extent(pl, &ex->dv, "args.dv", d);
}

static ta_status ta_bwd_check_ptrs(ta_plan *pl, const ta_extents *ex, ta_backend be,
                                   const ta_bwd_args *a, const void *ws, size_t ws_bytes,
                                   size_t ws_needed, ta_diag *d) {
    static const char *const names[] = {"args.q",   "args.k",      "args.v",      "args.o",
                                        "args.d_o", "args.lse",    "args.dq",     "args.dk",
                                        "args.dv",  "args.conv_w", "args.dconv_w",
                                        "args.d_alpha", "args.w_qlat", "args.w_vup",
                                        "args.dw_qlat", "args.dw_vup"};
    const int rband = pl->stages.score == TA_SCORE_RBAND, lat = pl->p.latent_dim > 0;
    const void *const req[] = {a->q,
                               a->k,
                               a->v,
                               a->o,
                               a->d_o,
                               a->lse,
                               a->dq,
                               a->dk,
                               a->dv,
                               pl->has_conv ? (const void *)a->conv_w : (const void *)a,
                               pl->has_conv ? (const void *)a->dconv_w : (const void *)a,
                               rband ? (const void *)a->d_alpha : (const void *)a,
                               lat ? (const void *)a->w_qlat : (const void *)a,
                               lat ? (const void *)a->w_vup : (const void *)a,
                               lat ? (const void *)a->dw_qlat : (const void *)a,
                               lat ? (const void *)a->dw_vup : (const void *)a};
    const size_t eb = pl->elem_bytes;
    const size_t eb_g = a->accumulate ? sizeof(float) : eb; /* the gradients' element */
    size_t tr_bytes;
    ta_status st;
    if ((st = ta_check_required(req, names, 16, d)) != TA_OK) return st;
    if ((st = ta_check_rband_seqlens(pl, a->seqlens_k, d)) != TA_OK) return st;
    if ((st = ta_plan_set_rope(pl, &a->rope, d)) != TA_OK) return st;
    if ((st = ta_check_trace(be, a->trace, &tr_bytes, d)) != TA_OK) return st;
    {
        const ta_buf in[] = {
            {a->q, ex->q, eb, "args.q"},
            {a->k, ex->k, eb, "args.k"},
            {a->v, ex->v, eb, "args.v"},
            {a->o, ex->o, eb, "args.o"},
            {a->d_o, ex->d_o, eb, "args.d_o"},
            TA_BUF(a->lse, pl->n_lse, sizeof(float), "args.lse"),
            TA_BUF(pl->has_conv ? a->conv_w : NULL, pl->n_conv, sizeof(float), "args.conv_w"),
            TA_BUF(a->seqlens_k, (size_t)pl->p.batch, sizeof(int32_t), "args.seqlens_k"),
            TA_ROPE_BUFS(pl),
            TA_BUF(lat ? a->w_qlat : NULL, pl->n_wq, sizeof(float), "args.w_qlat"),
            TA_BUF(lat ? a->w_vup : NULL, pl->n_wv, sizeof(float), "args.w_vup")};
        const ta_buf out[] = {
            {a->dq, ex->dq, eb_g, "args.dq"},
            {a->dk, ex->dk, eb_g, "args.dk"},
            {a->dv, ex->dv, eb_g, "args.dv"},
            {a->accumulate ? a->dq_lo : NULL, ex->dq, eb_g, "args.dq_lo"},
            {a->accumulate ? a->dk_lo : NULL, ex->dk, eb_g, "args.dk_lo"},
            {a->accumulate ? a->dv_lo : NULL, ex->dv, eb_g, "args.dv_lo"},
            TA_BUF(pl->has_conv ? a->dconv_w : NULL, pl->n_conv, sizeof(float), "args.dconv_w"),
            TA_BUF(pl->has_conv && a->accumulate ? a->dconv_w_lo : NULL, pl->n_conv,
                   sizeof(float), "args.dconv_w_lo"),
            TA_BUF(rband ? a->d_alpha : NULL, 1, sizeof(float), "args.d_alpha"),
            TA_BUF(lat ? a->dw_qlat : NULL, pl->n_wq, sizeof(float), "args.dw_qlat"),
            TA_BUF(lat ? a->dw_vup : NULL, pl->n_wv, sizeof(float), "args.dw_vup"),
            TA_TRACE_BUFS(a->trace, tr_bytes),
            {ws, ws_needed, 1, "workspace"}};
        if ((st = ta_check_buffers(in, 14, out, 14, d)) != TA_OK) return st;
    }
    return ta_check_workspace(ws, ws_bytes, ws_needed, d);
}

/* Steps 1-7 for ta_bwd (tasks: for ta_bwd_tasks_prepare). */
static ta_status ta_bwd_validate_mode(const ta_problem *p, ta_backend be, const ta_bwd_args *a,
                                      const void *ws, size_t ws_bytes, const void *stream,
                                      int tasks, ta_plan *pl, const ta_backend_ops **ops,
                                      ta_extents *ex, ta_diag *d) {
    size_t need = 0;
    ta_status st;
    if ((st = ta_call_begin(p, be, a, stream, tasks, TA_TILING_BWD, pl, ops, d)) != TA_OK)
        return st;
    if ((st = ta_check_bwd_problem(pl, d)) != TA_OK) return st;
    if ((st = ta_plan_set_bwd_layout(pl, a, ex, d)) != TA_OK) return st;
    if ((st = ta_check_bwd_accumulate(pl, a, ex, d)) != TA_OK) return st;
    if ((st = ta_call_need(be, *ops, pl, 1, tasks, &need, d)) != TA_OK) return st;
    if ((st = ta_bwd_check_ptrs(pl, ex, be, a, ws, ws_bytes, need, d)) != TA_OK) return st;
    if ((st = ta_check_seqlens_host(pl, a->seqlens_k, (*ops)->host_memory, d)) != TA_OK) return st;
    /* positions in device memory (CUDA): not readable here, the kernels clamp
     * them into the table; a NULL array's sequence is checked on every
     * backend (docs/rope.md) */
    return ta_check_rope_pos(pl, (*ops)->host_memory, d);
}

static ta_status ta_bwd_validate(const ta_problem *p, ta_backend be, const ta_bwd_args *a,
                                 const void *ws, size_t ws_bytes, const void *stream, ta_plan *pl,
                                 const ta_backend_ops **ops, ta_diag *d) {
    ta_extents ex;
    return ta_bwd_validate_mode(p, be, a, ws, ws_bytes, stream, 0, pl, ops, &ex, d);
}

ta_status ta_bwd(const ta_problem *p, ta_backend be, const ta_bwd_args *a, void *workspace,
                 size_t workspace_bytes, void *stream) {
    const ta_backend_ops *ops = NULL;
    ta_plan pl;
    ta_diag d;
    ta_status st;
    ta_diag_init(&d);
    st = ta_bwd_validate(p, be, a, workspace, workspace_bytes, stream, &pl, &ops, &d);
    if (st != TA_OK) return st;
    return ops->bwd(&pl, a, workspace, stream);
}

/* ---- ta_bwd_finish (docs/api.md, "Backward over key and query ranges") ---- */

/* Steps 1-3 as ta_bwd's, its problem checks and the accumulating mode's, the
 * gradients' strides, each (hi, gradient) both set or both NULL, then the
 * buffers (alignment, overlap: the hi words are inputs, contiguous). */
static ta_status ta_finish_validate(const ta_problem *p, ta_backend be, const ta_bwd_finish_args *a,
                                    const void *stream, ta_plan *pl, const ta_backend_ops **ops,
                                    ta_diag *d) {
    static const char *const names[3][2] = {
        {"args.dq_hi", "args.dq"}, {"args.dk_hi", "args.dk"}, {"args.dv_hi", "args.dv"}};
    ta_bwd_args strides = {0}; /* only the gradients' strides */
    ta_extents ex;
    size_t hi_bytes[3];
    ta_status st;
    int g;
    if ((st = ta_call_begin(p, be, a, stream, 0, TA_TILING_BWD, pl, ops, d)) != TA_OK) return st;
    if ((st = ta_check_bwd_problem(pl, d)) != TA_OK) return st;
    if ((st = ta_check_accumulate_problem(pl, "problem", d)) != TA_OK) return st;
    strides.dq_strides = a->dq_strides;
    strides.dk_strides = a->dk_strides;
    strides.dv_strides = a->dv_strides;
    if ((st = ta_plan_set_bwd_layout(pl, &strides, &ex, d)) != TA_OK) return st;
    {
        const void *const his[3] = {a->dq_hi, a->dk_hi, a->dv_hi};
        const void *const grads[3] = {a->dq, a->dk, a->dv};
        const size_t counts[3] = {pl->n_q, pl->n_k, pl->n_v};
        for (g = 0; g < 3; ++g) {
            if (!his[g] != !grads[g])
                return ta_fail_pair(d, TA_ERR_BAD_ARG, names[g][his[g] ? 1 : 0],
                                    "is NULL: must be set with", names[g][his[g] ? 0 : 1]);
            hi_bytes[g] = counts[g] * pl->elem_bytes; /* fits: checked by the plan */
            if ((st = ta_f32_extent(pl, hi_bytes + g, names[g][0], d)) != TA_OK) return st;
        }
    }
    {
        const ta_buf in[] = {{a->dq_hi, hi_bytes[0], sizeof(float), "args.dq_hi"},
                             {a->dk_hi, hi_bytes[1], sizeof(float), "args.dk_hi"},
                             {a->dv_hi, hi_bytes[2], sizeof(float), "args.dv_hi"}};
        const ta_buf out[] = {{a->dq, ex.dq, pl->elem_bytes, "args.dq"},
                              {a->dk, ex.dk, pl->elem_bytes, "args.dk"},
                              {a->dv, ex.dv, pl->elem_bytes, "args.dv"}};
        return ta_check_buffers(in, 3, out, 3, d);
    }
}

ta_status ta_bwd_finish(const ta_problem *p, ta_backend be, const ta_bwd_finish_args *a,
                        void *stream) {
    const ta_backend_ops *ops = NULL;
    ta_plan pl;
    ta_diag d;
    ta_status st;
    ta_diag_init(&d);
    st = ta_finish_validate(p, be, a, stream, &pl, &ops, &d);
    if (st != TA_OK) return st;
    return ops->bwd_finish(&pl, a, stream); /* REF, CPU: one host loop; CUDA: a kernel */
}

ta_status ta_explain_bwd_finish(const ta_problem *p, ta_backend be, const ta_bwd_finish_args *a,
                                const void *stream, char *buf, size_t buf_len) {
    const ta_backend_ops *ops = NULL;
    ta_plan pl;
    ta_diag d;
    ta_status st;
    ta_diag_init(&d);
    st = ta_finish_validate(p, be, a, stream, &pl, &ops, &d);
    ta_diag_format(&d, st, buf, buf_len);
    return st;
}

/* ---- ta_merge (docs/api.md, "Split-K and merge") ---- */

/* Steps 1-3 as ta_fwd's, then num_parts, o's strides, the pointers (NULL,
 * sizes, alignment, overlap). */
static ta_status ta_merge_validate(const ta_problem *p, ta_backend be, const ta_merge_args *a,
                                   const void *stream, ta_plan *pl, const ta_backend_ops **ops,
                                   ta_diag *d) {
    static const char *const names[] = {"args.o_parts", "args.lse_parts", "args.o"};
    ta_fwd_args strides = {0}; /* only o's strides: q, k, v stay contiguous */
    ta_extents ex;
    size_t n_parts_o, n_parts_lse, bytes;
    ta_status st;
    if ((st = ta_call_begin(p, be, a, stream, 0, TA_TILING_FWD, pl, ops, d)) != TA_OK) return st;
    if (!(*ops)->merge)
        return ta_fail_backend(d, TA_ERR_UNSUPPORTED, be, "does not implement ta_merge");
    if (a->num_parts < 1)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "args.num_parts", a->num_parts, TA_DIAG_LO, 1, 0);
    strides.o_strides = a->o_strides;
    if ((st = ta_plan_set_fwd_layout(pl, &strides, &ex, d)) != TA_OK) return st;
    {
        const void *const req[] = {a->o_parts, a->lse_parts, a->o};
        if ((st = ta_check_required(req, names, 3, d)) != TA_OK) return st;
    }
    if (!ta_mul_size(pl->n_o, (size_t)a->num_parts, &n_parts_o) ||
        !ta_mul_size(n_parts_o, pl->elem_bytes, &bytes) ||
        !ta_mul_size(pl->n_lse, (size_t)a->num_parts, &n_parts_lse) ||
        !ta_mul_size(n_parts_lse, sizeof(float), &bytes))
        return ta_fail(d, TA_ERR_OVERFLOW, "args.num_parts",
                       "the parts' byte count overflows size_t");
    {
        const ta_buf in[] = {TA_BUF(a->o_parts, n_parts_o, pl->elem_bytes, "args.o_parts"),
                             TA_BUF(a->lse_parts, n_parts_lse, sizeof(float), "args.lse_parts")};
        const ta_buf out[] = {{a->o, ex.o, pl->elem_bytes, "args.o"},
                              TA_BUF(a->lse, pl->n_lse, sizeof(float), "args.lse")};
        return ta_check_buffers(in, 2, out, 2, d);
    }
}

ta_status ta_merge(const ta_problem *p, ta_backend be, const ta_merge_args *a, void *stream) {
    const ta_backend_ops *ops = NULL;
    ta_plan pl;
    ta_diag d;
    ta_status st;
    ta_diag_init(&d);
    if ((st = ta_merge_validate(p, be, a, stream, &pl, &ops, &d)) != TA_OK) return st;
    return ops->merge(&pl, a, stream);
}

/* ---- Caller-run tasks (CPU; docs/api.md "Caller-run tasks") ---- */

static ta_status ta_task_plan_query(const ta_problem *p, ta_backend be, int bwd,
                                    ta_task_plan *out) {
    const ta_backend_ops *ops = NULL;
    ta_task_plan tp;
    ta_plan pl;
    ta_diag d;
    ta_status st;
    ta_diag_init(&d);
    if (!p || !out) return TA_ERR_NULL_ARG;
    if ((st = ta_plan_for(p, be, 0, bwd, &pl, &ops, &d)) != TA_OK) return st;
    if ((st = ta_tasks_backend(be, &d)) != TA_OK) return st;
    if (bwd && (st = ta_check_bwd_problem(&pl, &d)) != TA_OK) return st;
    if ((st = ta_cpu_tasks_plan(&pl, bwd, &tp)) != TA_OK) return st;
    *out = tp;
    return TA_OK;
}

ta_status ta_fwd_task_plan(const ta_problem *p, ta_backend be, ta_task_plan *out) {
    return ta_task_plan_query(p, be, 0, out);
}

ta_status ta_bwd_task_plan(const ta_problem *p, ta_backend be, ta_task_plan *out) {
    return ta_task_plan_query(p, be, 1, out);
}

/* The checks of ta_fwd_tasks_prepare (bwd 0, fa) and ta_bwd_tasks_prepare
 * (bwd 1, ba); the failed one formatted into buf (the explanations; NULL:
 * none). On TA_OK, *pl and *ex are ready for ta_cpu_tasks_prepare. */
static ta_status ta_tasks_check(const ta_problem *p, ta_backend be, int bwd, const ta_fwd_args *fa,
                                const ta_bwd_args *ba, const void *shared, size_t shared_bytes,
                                ta_plan *pl, ta_extents *ex, char *buf, size_t buf_len) {
    const ta_backend_ops *ops = NULL;
    ta_diag d;
    ta_status st;
    ta_diag_init(&d);
    st = bwd ? ta_bwd_validate_mode(p, be, ba, shared, shared_bytes, NULL, 1, pl, &ops, ex, &d)
             : ta_fwd_validate_mode(p, be, fa, shared, shared_bytes, NULL, 1, pl, &ops, ex, &d);
    if (buf) ta_diag_format(&d, st, buf, buf_len);
    return st;
}

/* ta_fwd_tasks_prepare (bwd 0, fa) and ta_bwd_tasks_prepare (bwd 1, ba). */
static ta_status ta_tasks_prepare(const ta_problem *p, ta_backend be, int bwd,
                                  const ta_fwd_args *fa, const ta_bwd_args *ba, void *shared,
                                  size_t shared_bytes) {
    ta_extents ex;
    ta_plan pl;
    const ta_status st =
        ta_tasks_check(p, be, bwd, fa, ba, shared, shared_bytes, &pl, &ex, NULL, 0);
    if (st != TA_OK) return st;
    ta_cpu_tasks_prepare(&pl, bwd ? NULL : fa, bwd ? ba : NULL, &ex, shared);
    return TA_OK;
}

ta_status ta_fwd_tasks_prepare(const ta_problem *p, ta_backend be, const ta_fwd_args *a,
                               void *shared, size_t shared_bytes) {
    return ta_tasks_prepare(p, be, 0, a, NULL, shared, shared_bytes);
}

ta_status ta_bwd_tasks_prepare(const ta_problem *p, ta_backend be, const ta_bwd_args *a,
                               void *shared, size_t shared_bytes) {
    return ta_tasks_prepare(p, be, 1, NULL, a, shared, shared_bytes);
}

ta_status ta_task_run(void *shared, int32_t phase, int64_t task, void *scratch,
                      size_t scratch_bytes) {
    return ta_cpu_task_run(shared, phase, task, scratch, scratch_bytes);
}

/* ---- Explanations: the same validation, formatted (docs/api.md "Diagnostics") ---- */

ta_status ta_explain_fwd(const ta_problem *p, ta_backend be, const ta_fwd_args *a,
                         const void *workspace, size_t workspace_bytes, const void *stream,
                         char *buf, size_t buf_len) {
    const ta_backend_ops *ops = NULL;
    ta_plan pl;
    ta_diag d;
    ta_status st;
    ta_diag_init(&d);
    st = ta_fwd_validate(p, be, a, workspace, workspace_bytes, stream, &pl, &ops, &d);
    ta_diag_format(&d, st, buf, buf_len);
    return st;
}

ta_status ta_explain_bwd(const ta_problem *p, ta_backend be, const ta_bwd_args *a,
                         const void *workspace, size_t workspace_bytes, const void *stream,
                         char *buf, size_t buf_len) {
    const ta_backend_ops *ops = NULL;
    ta_plan pl;
    ta_diag d;
    ta_status st;
    ta_diag_init(&d);
    st = ta_bwd_validate(p, be, a, workspace, workspace_bytes, stream, &pl, &ops, &d);
    ta_diag_format(&d, st, buf, buf_len);
    return st;
}

ta_status ta_explain_merge(const ta_problem *p, ta_backend be, const ta_merge_args *a,
                           const void *stream, char *buf, size_t buf_len) {
    const ta_backend_ops *ops = NULL;
    ta_plan pl;
    ta_diag d;
    ta_status st;
    ta_diag_init(&d);
    st = ta_merge_validate(p, be, a, stream, &pl, &ops, &d);
    ta_diag_format(&d, st, buf, buf_len);
    return st;
}

static ta_status ta_explain_tasks(const ta_problem *p, ta_backend be, int bwd,
                                  const ta_fwd_args *fa, const ta_bwd_args *ba, const void *shared,
                                  size_t shared_bytes, char *buf, size_t buf_len) {
    ta_extents ex;
    ta_plan pl;
    return ta_tasks_check(p, be, bwd, fa, ba, shared, shared_bytes, &pl, &ex, buf, buf_len);
}

ta_status ta_explain_fwd_tasks_prepare(const ta_problem *p, ta_backend be, const ta_fwd_args *a,
                                       const void *shared, size_t shared_bytes, char *buf,
                                       size_t buf_len) {
    return ta_explain_tasks(p, be, 0, a, NULL, shared, shared_bytes, buf, buf_len);
}

ta_status ta_explain_bwd_tasks_prepare(const ta_problem *p, ta_backend be, const ta_bwd_args *a,
                                       const void *shared, size_t shared_bytes, char *buf,
                                       size_t buf_len) {
    return ta_explain_tasks(p, be, 1, NULL, a, shared, shared_bytes, buf, buf_len);
}

static ta_status ta_explain_size(const ta_problem *p, ta_backend be, int bwd, char *buf,
                                 size_t buf_len) {
    ta_diag d;
    size_t n = 0;
    ta_status st;
    ta_diag_init(&d);
    st = p ? ta_size_validate(p, be, bwd, &n, &d)
           : ta_fail(&d, TA_ERR_NULL_ARG, "problem", "must not be NULL");
    ta_diag_format(&d, st, buf, buf_len);
    return st;
}

ta_status ta_explain_fwd_workspace_size(const ta_problem *p, ta_backend be, char *buf,
                                        size_t buf_len) {
    return ta_explain_size(p, be, 0, buf, buf_len);
}

ta_status ta_explain_bwd_workspace_size(const ta_problem *p, ta_backend be, char *buf,
                                        size_t buf_len) {
    return ta_explain_size(p, be, 1, buf, buf_len);
}
