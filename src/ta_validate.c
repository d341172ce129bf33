/*
 * Validation of a problem and of call arguments. Everything here runs before
 * any output byte is written; each cause has its own status (tileattn.h).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ta_internal.h"
#include "ta_validate.h"

/* Shapes: every size positive, heads divide, within the supported domain. */
static ta_status ta_check_shape(const ta_problem *p) {
    if (p->batch < 1 || p->heads_q < 1 || p->heads_kv < 1 || p->seq_q < 1 || p->seq_k < 1 ||
        p->head_dim < 1 || p->head_dim_v < 1)
        return TA_ERR_BAD_SHAPE;
    if (p->heads_q % p->heads_kv != 0) return TA_ERR_BAD_SHAPE;
    if (p->seq_q > TA_SEQ_MAX || p->seq_k > TA_SEQ_MAX) return TA_ERR_OVERFLOW;
    if (p->head_dim > TA_HEAD_DIM_MAX || p->head_dim_v > TA_HEAD_DIM_MAX) return TA_ERR_UNSUPPORTED;
    return TA_OK;
}

/* Enums, flags, scale, conv and tile sizes. */
static ta_status ta_check_args(const ta_problem *p) {
    if (p->dtype != TA_F32 && p->dtype != TA_F16 && p->dtype != TA_BF16) return TA_ERR_BAD_ARG;
    if (p->precision != TA_PRECISION_EXACT && p->precision != TA_PRECISION_FAST)
        return TA_ERR_BAD_ARG;
    if ((p->flags & ~(uint32_t)TA_FLAGS_ALL) != 0) return TA_ERR_BAD_ARG;
    if (isnan(p->scale) || isinf(p->scale)) return TA_ERR_BAD_ARG;
    if (!(p->flags & TA_WINDOW) && (p->window_left != 0 || p->window_right != 0))
        return TA_ERR_BAD_ARG; /* window sizes without the flag: a caller mistake */
    if ((p->conv_q == 0) != (p->conv_k == 0)) return TA_ERR_BAD_ARG;
    if (p->conv_q < 0 || p->conv_k < 0) return TA_ERR_BAD_ARG;
    if (p->conv_k != 0 && p->conv_k % 2 == 0) return TA_ERR_BAD_ARG;
    if (p->conv_q > TA_CONV_Q_MAX || p->conv_k > TA_CONV_K_MAX) return TA_ERR_UNSUPPORTED;
    if (p->block_q < 0 || p->block_k < 0) return TA_ERR_BAD_ARG;
    if (p->num_threads < 0) return TA_ERR_BAD_ARG;
    if (p->tile_config < 0) return TA_ERR_BAD_ARG;
    if (p->block_q != 0 && !ta_tiling_is_block_size(p->block_q)) return TA_ERR_UNSUPPORTED;
    if (p->block_k != 0 && !ta_tiling_is_block_size(p->block_k)) return TA_ERR_UNSUPPORTED;
    return TA_OK;
}

/* Element counts of every tensor, overflow-checked (and their byte sizes). */
static ta_status ta_count_elems(ta_plan *pl) {
    const ta_problem *p = &pl->p;
    size_t bh, bhkv, t, bytes;
    if (!ta_mul_size((size_t)p->batch, (size_t)p->heads_q, &bh) ||
        !ta_mul_size((size_t)p->batch, (size_t)p->heads_kv, &bhkv))
        return TA_ERR_OVERFLOW;
    if (!ta_mul_size(bh, (size_t)p->seq_q, &pl->n_lse)) return TA_ERR_OVERFLOW;
    if (!ta_mul_size(pl->n_lse, (size_t)p->head_dim, &pl->n_q)) return TA_ERR_OVERFLOW;
    if (!ta_mul_size(pl->n_lse, (size_t)p->head_dim_v, &pl->n_o)) return TA_ERR_OVERFLOW;
    if (!ta_mul_size(bhkv, (size_t)p->seq_k, &t)) return TA_ERR_OVERFLOW;
    if (!ta_mul_size(t, (size_t)p->head_dim, &pl->n_k)) return TA_ERR_OVERFLOW;
    if (!ta_mul_size(t, (size_t)p->head_dim_v, &pl->n_v)) return TA_ERR_OVERFLOW;
    if (!ta_mul_size((size_t)p->heads_q, (size_t)p->conv_q, &t) ||
        !ta_mul_size(t, (size_t)p->conv_k, &pl->n_conv))
        return TA_ERR_OVERFLOW;
    /* byte sizes of the largest tensors must fit too */
    if (!ta_mul_size(pl->n_q, pl->elem_bytes, &bytes) ||
        !ta_mul_size(pl->n_k, pl->elem_bytes, &bytes) ||
        !ta_mul_size(pl->n_v, pl->elem_bytes, &bytes) ||
        !ta_mul_size(pl->n_o, pl->elem_bytes, &bytes) ||
        !ta_mul_size(pl->n_lse, sizeof(float), &bytes))
        return TA_ERR_OVERFLOW;
    return TA_OK;
}

static void ta_plan_contiguous_layout(ta_plan *pl);

ta_status ta_plan_make(const ta_problem *p, ta_backend be, ta_plan *pl) {
    ta_status st;
    int32_t bq, bk;
    (void)be;
    if (!p) return TA_ERR_NULL_ARG;
    if ((st = ta_check_shape(p)) != TA_OK) return st;
    if ((st = ta_check_args(p)) != TA_OK) return st;
    memset(pl, 0, sizeof *pl);
    pl->p = *p;
    pl->has_conv = p->conv_q > 0;
    pl->stages.load = TA_LOAD_NONE;
    pl->stages.score = pl->has_conv ? TA_SCORE_MTA_CONV : TA_SCORE_NONE;
    pl->stages.num_splits = 1;
    pl->group = p->heads_q / p->heads_kv;
    pl->elem_bytes = p->dtype == TA_F32 ? 4u : 2u;
    if ((st = ta_count_elems(pl)) != TA_OK) return st;
    if (pl->has_conv && !(p->flags & TA_CAUSAL)) return TA_ERR_UNSUPPORTED; /* MTA is causal */
    if (p->scale == 0.0f) pl->p.scale = 1.0f / sqrtf((float)p->head_dim);
    ta_tiling_default_blocks(p->conv_q, p->conv_k, &bq, &bk);
    if (p->block_q != 0) bq = p->block_q;
    if (p->block_k != 0) bk = p->block_k;
    pl->p.block_q = bq;
    pl->p.block_k = bk;
    /* a problem is accepted only if both passes have a valid geometry, so a
     * forward that runs never leaves its backward unsupported */
    st = (ta_status)ta_tiling_make(&pl->fwd, p->seq_q, p->seq_k, bq, bk, p->conv_q, p->conv_k,
                                   (p->flags & TA_CAUSAL) != 0, TA_TILING_FWD, 1);
    if (st != TA_OK) return st;
    st = (ta_status)ta_tiling_make(&pl->bwd, p->seq_q, p->seq_k, bq, bk, p->conv_q, p->conv_k,
                                   (p->flags & TA_CAUSAL) != 0, TA_TILING_BWD, 1);
    if (st != TA_OK) return st;
    pl->has_window = (p->flags & TA_WINDOW) != 0;
    if (pl->has_window) {
        ta_tiling_set_window(&pl->fwd, p->window_left, p->window_right);
        ta_tiling_set_window(&pl->bwd, p->window_left, p->window_right);
    }
    ta_plan_contiguous_layout(pl);
    return TA_OK;
}

/* ---- Strided layouts ---- */

/* The contiguous layout of every tensor of the problem. */
static void ta_plan_contiguous_layout(ta_plan *pl) {
    const ta_problem *p = &pl->p;
    ta_layout *l = &pl->layout;
    l->q = l->dq = ta_strides_contiguous(p->heads_q, p->seq_q, p->head_dim);
    l->o = l->d_o = ta_strides_contiguous(p->heads_q, p->seq_q, p->head_dim_v);
    l->k = l->dk = ta_strides_contiguous(p->heads_kv, p->seq_k, p->head_dim);
    l->v = l->dv = ta_strides_contiguous(p->heads_kv, p->seq_k, p->head_dim_v);
    pl->strided = 0;
}

/*
 * One tensor [n_b, n_h, n_s, dim] with element strides s (the caller's; all
 * zero = contiguous `dense`). Strides must be >= 0, and no two distinct
 * elements may share an address. The test is the usual sufficient one: order
 * the dimensions of extent > 1 by stride; each stride must reach past the span
 * of all smaller ones (the feature dimension, stride 1, spans dim elements).
 * It accepts every permutation of the dimensions with any gaps, and rejects
 * interleavings it cannot prove disjoint. *bytes = the tensor's byte extent.
 */
static ta_status ta_check_strides(ta_strides *s, const ta_strides *dense, int32_t n_b, int32_t n_h,
                                  int32_t n_s, int32_t dim, size_t elem_bytes, int *strided,
                                  size_t *bytes) {
    int64_t stride[3], extent[3], span = dim, last = dim - 1;
    int n = 0, i, j;
    if (s->batch == 0 && s->head == 0 && s->seq == 0) *s = *dense;
    if (s->batch < 0 || s->head < 0 || s->seq < 0) return TA_ERR_BAD_ARG;
    if (s->batch != dense->batch || s->head != dense->head || s->seq != dense->seq) *strided = 1;
    /* dims of extent > 1, sorted by stride (insertion sort of at most 3) */
    {
        const int64_t st_all[3] = {s->batch, s->head, s->seq}, ex_all[3] = {n_b, n_h, n_s};
        for (i = 0; i < 3; ++i) {
            if (ex_all[i] <= 1) continue;
            for (j = n; j > 0 && stride[j - 1] > st_all[i]; --j) {
                stride[j] = stride[j - 1];
                extent[j] = extent[j - 1];
            }
            stride[j] = st_all[i];
            extent[j] = ex_all[i];
            ++n;
        }
    }
    for (i = 0; i < n; ++i) {
        /* span <= 2^62 here: each step below is checked against it */
        if (stride[i] < span) return TA_ERR_BAD_ARG; /* would alias a smaller dim's elements */
        if (stride[i] > (INT64_C(1) << 62) / (extent[i] - 1)) return TA_ERR_OVERFLOW;
        last += stride[i] * (extent[i] - 1);
        if (last >= (INT64_C(1) << 62)) return TA_ERR_OVERFLOW;
        span = last + 1;
    }
    if (!ta_mul_size((size_t)span, elem_bytes, bytes)) return TA_ERR_OVERFLOW;
    return TA_OK;
}

#define TA_CHECK_STRIDES(field, user, nh, ns, dim, out)                                         \
    do {                                                                                         \
        ta_strides dense_ = pl->layout.field;                                                    \
        pl->layout.field = (user);                                                               \
        st = ta_check_strides(&pl->layout.field, &dense_, p->batch, (nh), (ns), (dim),          \
                              pl->elem_bytes, &pl->strided, &(out));                             \
        if (st != TA_OK) return st;                                                              \
    } while (0)

/* q, k, v, o: the tensors both passes take. */
static ta_status ta_set_qkvo_layout(ta_plan *pl, const ta_strides *q, const ta_strides *k,
                                    const ta_strides *v, const ta_strides *o, ta_extents *ext) {
    const ta_problem *p = &pl->p;
    ta_status st;
    memset(ext, 0, sizeof *ext);
    ta_plan_contiguous_layout(pl);
    TA_CHECK_STRIDES(q, *q, p->heads_q, p->seq_q, p->head_dim, ext->q);
    TA_CHECK_STRIDES(k, *k, p->heads_kv, p->seq_k, p->head_dim, ext->k);
    TA_CHECK_STRIDES(v, *v, p->heads_kv, p->seq_k, p->head_dim_v, ext->v);
    TA_CHECK_STRIDES(o, *o, p->heads_q, p->seq_q, p->head_dim_v, ext->o);
    return TA_OK;
}

ta_status ta_plan_set_fwd_layout(ta_plan *pl, const ta_fwd_args *a, ta_extents *ext) {
    return ta_set_qkvo_layout(pl, &a->q_strides, &a->k_strides, &a->v_strides, &a->o_strides,
                              ext);
}

ta_status ta_plan_set_bwd_layout(ta_plan *pl, const ta_bwd_args *a, ta_extents *ext) {
    const ta_problem *p = &pl->p;
    ta_status st =
        ta_set_qkvo_layout(pl, &a->q_strides, &a->k_strides, &a->v_strides, &a->o_strides, ext);
    if (st != TA_OK) return st;
    TA_CHECK_STRIDES(d_o, a->d_o_strides, p->heads_q, p->seq_q, p->head_dim_v, ext->d_o);
    TA_CHECK_STRIDES(dq, a->dq_strides, p->heads_q, p->seq_q, p->head_dim, ext->dq);
    TA_CHECK_STRIDES(dk, a->dk_strides, p->heads_kv, p->seq_k, p->head_dim, ext->dk);
    TA_CHECK_STRIDES(dv, a->dv_strides, p->heads_kv, p->seq_k, p->head_dim_v, ext->dv);
    return TA_OK;
}
#undef TA_CHECK_STRIDES

/* ---- Pointer checks ---- */

int ta_ptr_aligned(const void *ptr, size_t align) {
    return ((uintptr_t)ptr & (uintptr_t)(align - 1)) == 0;
}

/* 1 if [a, a+na) and [b, b+nb) overlap (both non-empty, non-NULL). */
int ta_ranges_overlap(const void *a, size_t na, const void *b, size_t nb) {
    const uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    if (!a || !b || na == 0 || nb == 0) return 0;
    return pa < pb + nb && pb < pa + na;
}

ta_status ta_check_buffers(const ta_buf *in, int n_in, const ta_buf *out, int n_out) {
    int i, j;
    for (i = 0; i < n_in; ++i)
        if (in[i].ptr && !ta_ptr_aligned(in[i].ptr, in[i].align)) return TA_ERR_BAD_ARG;
    for (i = 0; i < n_out; ++i) {
        if (out[i].ptr && !ta_ptr_aligned(out[i].ptr, out[i].align)) return TA_ERR_BAD_ARG;
        for (j = 0; j < n_in; ++j)
            if (ta_ranges_overlap(out[i].ptr, out[i].bytes, in[j].ptr, in[j].bytes))
                return TA_ERR_BAD_ARG;
        for (j = 0; j < i; ++j)
            if (ta_ranges_overlap(out[i].ptr, out[i].bytes, out[j].ptr, out[j].bytes))
                return TA_ERR_BAD_ARG;
    }
    return TA_OK;
}

ta_status ta_check_workspace(const void *ws, size_t ws_bytes, size_t needed) {
    if (needed > 0 && !ws) return TA_ERR_NULL_ARG;
    if (ws_bytes < needed) return TA_ERR_WORKSPACE_SIZE;
    if (ws && !ta_ptr_aligned(ws, TA_WORKSPACE_ALIGN)) return TA_ERR_WORKSPACE_ALIGN;
    return TA_OK;
}

ta_status ta_check_seqlens_host(const ta_plan *pl, const int32_t *seqlens_k) {
    int32_t b;
    if (!seqlens_k) return TA_OK;
    for (b = 0; b < pl->p.batch; ++b)
        if (seqlens_k[b] < 0 || seqlens_k[b] > pl->p.seq_k) return TA_ERR_BAD_ARG;
    return TA_OK;
}

ta_status ta_check_trace(ta_backend be, const ta_trace *tr) {
    if (!tr) return TA_OK;
    if (be != TA_BACKEND_REF) return TA_ERR_UNSUPPORTED;
    if (!tr->entries && tr->capacity > 0) return TA_ERR_NULL_ARG;
    return TA_OK;
}
