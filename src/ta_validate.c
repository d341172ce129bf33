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
static ta_status ta_check_shape(const ta_problem *p, ta_diag *d) {
    const struct {
        const char *name;
        int32_t value;
    } sizes[] = {{"batch", p->batch},          {"heads_q", p->heads_q}, {"heads_kv", p->heads_kv},
                 {"seq_q", p->seq_q},          {"seq_k", p->seq_k},     {"head_dim", p->head_dim},
                 {"head_dim_v", p->head_dim_v}};
    size_t i;
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
        if (sizes[i].value < 1)
            return ta_fail_bounds(d, TA_ERR_BAD_SHAPE, sizes[i].name, sizes[i].value, TA_DIAG_LO, 1,
                                  0);
    if (p->heads_q % p->heads_kv != 0) {
        ta_fail_pair(d, TA_ERR_BAD_SHAPE, "heads_q", "not a multiple of", "heads_kv");
        d->value = p->heads_q;
        d->other_value = p->heads_kv;
        d->flags = TA_DIAG_VALUE | TA_DIAG_OTHER_VALUE;
        return TA_ERR_BAD_SHAPE;
    }
    if (p->seq_q > TA_SEQ_MAX)
        return ta_fail_bounds(d, TA_ERR_OVERFLOW, "seq_q", p->seq_q, TA_DIAG_HI, 0, TA_SEQ_MAX);
    if (p->seq_k > TA_SEQ_MAX)
        return ta_fail_bounds(d, TA_ERR_OVERFLOW, "seq_k", p->seq_k, TA_DIAG_HI, 0, TA_SEQ_MAX);
    if (p->head_dim > TA_HEAD_DIM_MAX)
        return ta_fail_bounds(d, TA_ERR_UNSUPPORTED, "head_dim", p->head_dim,
                              TA_DIAG_LO | TA_DIAG_HI, 1, TA_HEAD_DIM_MAX);
    if (p->head_dim_v > TA_HEAD_DIM_MAX)
        return ta_fail_bounds(d, TA_ERR_UNSUPPORTED, "head_dim_v", p->head_dim_v,
                              TA_DIAG_LO | TA_DIAG_HI, 1, TA_HEAD_DIM_MAX);
    return TA_OK;
}

/* Enums, flags, scale, window without its flag. */
static ta_status ta_check_enums(const ta_problem *p, ta_diag *d) {
    if (p->dtype != TA_F32 && p->dtype != TA_F16 && p->dtype != TA_BF16)
        return ta_fail_value(d, TA_ERR_BAD_ARG, "dtype", (int64_t)(int)p->dtype,
                             "not TA_F32 (0), TA_F16 (1) or TA_BF16 (2)");
    if (p->precision != TA_PRECISION_EXACT && p->precision != TA_PRECISION_FAST)
        return ta_fail_value(d, TA_ERR_BAD_ARG, "precision", (int64_t)(int)p->precision,
                             "not TA_PRECISION_EXACT (0) or TA_PRECISION_FAST (1)");
    if ((p->flags & ~(uint32_t)TA_FLAGS_ALL) != 0)
        return ta_fail_value(d, TA_ERR_BAD_ARG, "flags", (int64_t)p->flags,
                             "unknown bits (known: TA_CAUSAL | TA_WINDOW | "
                             "TA_SEQLENS_DEVICE | TA_RBAND = 15)");
    if (isnan(p->scale)) return ta_fail(d, TA_ERR_BAD_ARG, "scale", "is NaN; must be finite");
    if (isinf(p->scale)) return ta_fail(d, TA_ERR_BAD_ARG, "scale", "is infinite; must be finite");
    /* window sizes without the flag: a caller mistake */
    if (!(p->flags & TA_WINDOW) && p->window_left != 0)
        return ta_fail_value(d, TA_ERR_BAD_ARG, "window_left", p->window_left,
                             "set without TA_WINDOW in flags (must then be 0)");
    if (!(p->flags & TA_WINDOW) && p->window_right != 0)
        return ta_fail_value(d, TA_ERR_BAD_ARG, "window_right", p->window_right,
                             "set without TA_WINDOW in flags (must then be 0)");
    return TA_OK;
}

/* The rotary stage's fields: all zero when off; when on, the pairs fit the
 * head dim, the table has rows, strides cover a row. */
static ta_status ta_check_rope(const ta_problem *p, ta_diag *d) {
    if (p->rope == TA_ROPE_NONE) {
        const struct {
            const char *name;
            int32_t value;
        } f[] = {{"rope_pairs", p->rope_pairs},
                 {"rope_rows", p->rope_rows},
                 {"rope_row_stride", p->rope_row_stride},
                 {"rope_head_stride", p->rope_head_stride}};
        size_t i;
        for (i = 0; i < sizeof f / sizeof f[0]; ++i)
            if (f[i].value != 0)
                return ta_fail_value(d, TA_ERR_BAD_ARG, f[i].name, f[i].value,
                                     "set without rope (TA_ROPE_NONE: must then be 0)");
        return TA_OK;
    }
    if (p->rope != TA_ROPE_INTERLEAVED && p->rope != TA_ROPE_HALF)
        return ta_fail_value(d, TA_ERR_BAD_ARG, "rope", p->rope,
                             "not TA_ROPE_NONE (0), TA_ROPE_INTERLEAVED (1) or TA_ROPE_HALF (2)");
    if (p->rope_pairs < 1 || p->rope_pairs > p->head_dim / 2)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "rope_pairs", p->rope_pairs,
                              TA_DIAG_LO | TA_DIAG_HI, 1, p->head_dim / 2);
    if (p->rope_rows < 1)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "rope_rows", p->rope_rows, TA_DIAG_LO, 1, 0);
    if (p->rope_row_stride != 0 && p->rope_row_stride < p->rope_pairs)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "rope_row_stride", p->rope_row_stride, TA_DIAG_LO,
                              p->rope_pairs, 0);
    if (p->rope_head_stride < 0)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "rope_head_stride", p->rope_head_stride,
                              TA_DIAG_LO, 0, 0);
    return TA_OK;
}

/* The operations latent attention's band (band = 1) or fused projections
 * (band = 0) do not combine with yet (TA_ERR_UNSUPPORTED). */
static ta_status ta_check_latent_combo(const ta_problem *p, int band, ta_diag *d) {
    const char *const rule = band ? "not with TA_RBAND yet (must be 0 with the band)"
                                  : "not with latent_dim yet (must be 0 with the projections)";
    if (p->conv_q != 0) return ta_fail_value(d, TA_ERR_UNSUPPORTED, "conv_q", p->conv_q, rule);
    if (band && (p->flags & TA_WINDOW))
        return ta_fail_value(d, TA_ERR_UNSUPPORTED, "flags", (int64_t)p->flags,
                             "TA_WINDOW not with TA_RBAND yet");
    if (p->rope != TA_ROPE_NONE) return ta_fail_value(d, TA_ERR_UNSUPPORTED, "rope", p->rope, rule);
    if (p->kv_page_size != 0)
        return ta_fail_value(d, TA_ERR_UNSUPPORTED, "kv_page_size", p->kv_page_size, rule);
    if (p->num_splits > 1 || p->num_splits == TA_SPLITS_AUTO)
        return ta_fail_value(d, TA_ERR_UNSUPPORTED, "num_splits", p->num_splits,
                             band ? "split-K not with TA_RBAND yet (0 or 1)"
                                  : "split-K not with latent_dim yet (0 or 1)");
    if (p->q_offset != 0) return ta_fail_value(d, TA_ERR_UNSUPPORTED, "q_offset", p->q_offset, rule);
    if (p->key_begin != 0)
        return ta_fail_value(d, TA_ERR_UNSUPPORTED, "key_begin", p->key_begin, rule);
    if (p->key_end != 0) return ta_fail_value(d, TA_ERR_UNSUPPORTED, "key_end", p->key_end, rule);
    if (p->row_begin != 0)
        return ta_fail_value(d, TA_ERR_UNSUPPORTED, "row_begin", p->row_begin, rule);
    if (p->row_end != 0) return ta_fail_value(d, TA_ERR_UNSUPPORTED, "row_end", p->row_end, rule);
    return TA_OK;
}

/* Latent attention's fields (docs/api.md, "Latent attention and the reciprocal
 * band"): latent_dim in range; rband_alpha and rband_width zero without
 * TA_RBAND; with it a finite alpha, W >= 0, the causal mask, seq_q <= seq_k and
 * exactly the history rows the band reads, min(seq_k - seq_q, W). */
static ta_status ta_check_rband(const ta_problem *p, ta_diag *d) {
    int64_t need;
    ta_status st;
    if (p->latent_dim < 0)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "latent_dim", p->latent_dim, TA_DIAG_LO, 0, 0);
    if (p->latent_dim > TA_HEAD_DIM_MAX)
        return ta_fail_bounds(d, TA_ERR_UNSUPPORTED, "latent_dim", p->latent_dim,
                              TA_DIAG_LO | TA_DIAG_HI, 0, TA_HEAD_DIM_MAX);
    if (p->latent_dim > 0 && (st = ta_check_latent_combo(p, 0, d)) != TA_OK) return st;
    if (!(p->flags & TA_RBAND)) {
        if (p->rband_alpha != 0.0f) /* NaN too */
            return ta_fail(d, TA_ERR_BAD_ARG, "rband_alpha",
                           "set without TA_RBAND in flags (must then be 0)");
        if (p->rband_width != 0)
            return ta_fail_value(d, TA_ERR_BAD_ARG, "rband_width", p->rband_width,
                                 "set without TA_RBAND in flags (must then be 0)");
        return TA_OK;
    }
    if (isnan(p->rband_alpha))
        return ta_fail(d, TA_ERR_BAD_ARG, "rband_alpha", "is NaN; must be finite");
    if (isinf(p->rband_alpha))
        return ta_fail(d, TA_ERR_BAD_ARG, "rband_alpha", "is infinite; must be finite");
    if (p->rband_width < 0)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "rband_width", p->rband_width, TA_DIAG_LO, 0, 0);
    if (!(p->flags & TA_CAUSAL))
        return ta_fail_value(d, TA_ERR_BAD_ARG, "flags", (int64_t)p->flags,
                             "TA_RBAND needs TA_CAUSAL (the band is the causal side)");
    if (p->seq_q > p->seq_k) {
        ta_fail_bounds(d, TA_ERR_BAD_ARG, "seq_q", p->seq_q, TA_DIAG_HI, 0, p->seq_k);
        d->rule = "above seq_k: the band's query rows are the last seq_q of seq_k positions";
        return TA_ERR_BAD_ARG;
    }
    need = (int64_t)p->seq_k - p->seq_q;
    if (need > p->rband_width) need = p->rband_width;
    if (p->q_history != need) {
        ta_fail_bounds(d, TA_ERR_BAD_ARG, "q_history", p->q_history, TA_DIAG_LO | TA_DIAG_HI,
                       need, need);
        d->rule = "with TA_RBAND must be min(seq_k - seq_q, rband_width): the query rows "
                  "of the band's key positions above row 0";
        return TA_ERR_BAD_ARG;
    }
    return ta_check_latent_combo(p, 1, d);
}

/* Floats one table spans (cos, sin each), overflow-checked: (tables - 1)
 * head_stride + (rows - 1) row_stride + pairs, all int32 terms (< 2^63). */
static ta_status ta_rope_span(ta_plan *pl, ta_diag *d) {
    const ta_problem *p = &pl->p;
    const int64_t heads = p->rope_head_stride > 0 ? p->heads_kv : 1;
    const int64_t n = (heads - 1) * (int64_t)p->rope_head_stride +
                      (int64_t)(p->rope_rows - 1) * p->rope_row_stride + p->rope_pairs;
    size_t bytes;
    if ((uint64_t)n > (uint64_t)SIZE_MAX || !ta_mul_size((size_t)n, sizeof(float), &bytes))
        return ta_fail(d, TA_ERR_OVERFLOW, "rope_rows",
                       "the rotary table's span in bytes overflows size_t");
    pl->n_rope = (size_t)n;
    return TA_OK;
}

/* The paged KV cache's sizes: all zero without pages; with them a pool and a
 * table row long enough for seq_k keys. */
static ta_status ta_check_pages(const ta_problem *p, ta_diag *d) {
    int64_t need;
    if (p->kv_page_size < 0)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "kv_page_size", p->kv_page_size, TA_DIAG_LO, 0,
                              0);
    if (p->kv_page_size == 0) {
        if (p->kv_num_pages != 0)
            return ta_fail_value(d, TA_ERR_BAD_ARG, "kv_num_pages", p->kv_num_pages,
                                 "set without kv_page_size (must then be 0)");
        if (p->kv_max_blocks != 0)
            return ta_fail_value(d, TA_ERR_BAD_ARG, "kv_max_blocks", p->kv_max_blocks,
                                 "set without kv_page_size (must then be 0)");
        return TA_OK;
    }
    if (p->kv_num_pages < 1)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "kv_num_pages", p->kv_num_pages, TA_DIAG_LO, 1,
                              0);
    need = ((int64_t)p->seq_k + p->kv_page_size - 1) / p->kv_page_size;
    if (p->kv_max_blocks < need) {
        ta_fail_bounds(d, TA_ERR_BAD_ARG, "kv_max_blocks", p->kv_max_blocks, TA_DIAG_LO, need, 0);
        d->rule = "too few blocks for seq_k keys (ceil(seq_k / kv_page_size))";
        return TA_ERR_BAD_ARG;
    }
    return TA_OK;
}

/* Conv, tile sizes and thread count. */
static ta_status ta_check_sizes(const ta_problem *p, ta_diag *d) {
    ta_status st;
    if ((p->conv_q == 0) != (p->conv_k == 0))
        return ta_fail_value(d, TA_ERR_BAD_ARG, p->conv_q == 0 ? "conv_k" : "conv_q",
                             p->conv_q == 0 ? p->conv_k : p->conv_q,
                             "set without the other conv size (both 0 = no conv)");
    if (p->conv_q < 0)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "conv_q", p->conv_q, TA_DIAG_LO, 0, 0);
    if (p->conv_k < 0)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "conv_k", p->conv_k, TA_DIAG_LO, 0, 0);
    if (p->conv_k != 0 && p->conv_k % 2 == 0)
        return ta_fail_value(d, TA_ERR_BAD_ARG, "conv_k", p->conv_k, "must be odd");
    if (p->conv_q > TA_CONV_Q_MAX)
        return ta_fail_bounds(d, TA_ERR_UNSUPPORTED, "conv_q", p->conv_q, TA_DIAG_LO | TA_DIAG_HI,
                              1, TA_CONV_Q_MAX);
    if (p->conv_k > TA_CONV_K_MAX)
        return ta_fail_bounds(d, TA_ERR_UNSUPPORTED, "conv_k", p->conv_k, TA_DIAG_LO | TA_DIAG_HI,
                              1, TA_CONV_K_MAX);
    if (p->block_q < 0)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "block_q", p->block_q, TA_DIAG_LO, 0, 0);
    if (p->block_k < 0)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "block_k", p->block_k, TA_DIAG_LO, 0, 0);
    /* 0 = the OpenMP default; no other negative meaning */
    if (p->num_threads < 0)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "num_threads", p->num_threads,
                              TA_DIAG_LO | TA_DIAG_HI, 0, TA_THREADS_MAX);
    if (p->num_threads > TA_THREADS_MAX)
        return ta_fail_bounds(d, TA_ERR_UNSUPPORTED, "num_threads", p->num_threads,
                              TA_DIAG_LO | TA_DIAG_HI, 0, TA_THREADS_MAX);
    /* 0 = the backend's default tile configuration; the CUDA backend bounds it
     * by its fast table (ta_cuda_supports) */
    if (p->tile_config < 0)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "tile_config", p->tile_config, TA_DIAG_LO, 0, 0);
    /* 0, 1: one split; TA_SPLITS_AUTO (-1): the problem's count; no other negative */
    if (p->num_splits < TA_SPLITS_AUTO)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "num_splits", p->num_splits, TA_DIAG_LO,
                              TA_SPLITS_AUTO, 0);
    /* history rows feed the conv's query window: at most c_q - 1 of them (the
     * band's are checked with the band, ta_check_rband) */
    if (!(p->flags & TA_RBAND) &&
        (p->q_history < 0 || p->q_history > (p->conv_q > 0 ? p->conv_q - 1 : 0))) {
        ta_fail_bounds(d, TA_ERR_BAD_ARG, "q_history", p->q_history, TA_DIAG_LO | TA_DIAG_HI, 0,
                       p->conv_q > 0 ? p->conv_q - 1 : 0);
        d->rule = p->conv_q > 0 ? "more rows than the conv's query window reads (conv_q - 1)"
                                : "needs the MTA conv (without one it must be 0)";
        return TA_ERR_BAD_ARG;
    }
    if ((st = ta_check_pages(p, d)) != TA_OK) return st;
    if (p->block_q != 0 && !ta_tiling_is_block_size(p->block_q))
        return ta_fail_bounds(d, TA_ERR_UNSUPPORTED, "block_q", p->block_q, TA_DIAG_LO | TA_DIAG_HI,
                              TA_BLOCK_MIN, TA_BLOCK_MAX);
    if (p->block_k != 0 && !ta_tiling_is_block_size(p->block_k))
        return ta_fail_bounds(d, TA_ERR_UNSUPPORTED, "block_k", p->block_k, TA_DIAG_LO | TA_DIAG_HI,
                              TA_BLOCK_MIN, TA_BLOCK_MAX);
    return TA_OK;
}

/* a * b into *out, or the overflow recorded against what (a tensor's count). */
static int ta_mul_count(size_t a, size_t b, size_t *out, const char *what, ta_diag *d) {
    if (ta_mul_size(a, b, out)) return 1;
    ta_fail(d, TA_ERR_OVERFLOW, what, "element or byte count overflows size_t");
    return 0;
}

/* Element counts of every tensor, overflow-checked (and their byte sizes). */
static ta_status ta_count_elems(ta_plan *pl, ta_diag *d) {
    const ta_problem *p = &pl->p;
    size_t bh, bhkv, t, bytes;
    if (!ta_mul_count((size_t)p->batch, (size_t)p->heads_q, &bh, "q (batch * heads_q)", d) ||
        !ta_mul_count((size_t)p->batch, (size_t)p->heads_kv, &bhkv, "k (batch * heads_kv)", d) ||
        !ta_mul_count(bh, (size_t)p->seq_q, &pl->n_lse, "lse (batch * heads_q * seq_q)", d) ||
        !ta_mul_count(pl->n_lse, (size_t)p->head_dim, &pl->n_q, "q", d) ||
        !ta_mul_count(pl->n_lse, (size_t)p->head_dim_v, &pl->n_o, "o", d) ||
        !ta_mul_count(bhkv, (size_t)p->seq_k, &t, "k (batch * heads_kv * seq_k)", d) ||
        !ta_mul_count(t, (size_t)pl->dim_k, &pl->n_k, "k", d) ||
        !ta_mul_count(t, (size_t)pl->dim_v, &pl->n_v, "v", d) ||
        !ta_mul_count((size_t)p->heads_q, (size_t)p->conv_q, &t, "conv_w", d) ||
        !ta_mul_count(t, (size_t)p->conv_k, &pl->n_conv, "conv_w", d) ||
        !ta_mul_count((size_t)p->heads_q * (size_t)p->head_dim, (size_t)p->latent_dim, &pl->n_wq,
                      "w_qlat", d) ||
        !ta_mul_count((size_t)p->heads_q * (size_t)p->latent_dim, (size_t)p->head_dim_v,
                      &pl->n_wv, "w_vup", d) ||
        !ta_mul_count(pl->n_wq + pl->n_wv, sizeof(float), &bytes, "w_qlat", d))
        return d->status;
    /* byte sizes of the largest tensors must fit too */
    if (!ta_mul_count(pl->n_q, pl->elem_bytes, &bytes, "q", d) ||
        !ta_mul_count(pl->n_k, pl->elem_bytes, &bytes, "k", d) ||
        !ta_mul_count(pl->n_v, pl->elem_bytes, &bytes, "v", d) ||
        !ta_mul_count(pl->n_o, pl->elem_bytes, &bytes, "o", d) ||
        !ta_mul_count(pl->n_lse, sizeof(float), &bytes, "lse", d))
        return d->status;
    return TA_OK;
}

/* One pass's tiling; a block that leaves no effective row or column is named with
 * the conv size whose halos take it, and the smallest block that would do. */
static ta_status ta_make_pass(ta_tiling *t, const ta_problem *p, int32_t bq, int32_t bk,
                              int32_t pass, ta_diag *d) {
    static const char *const rules[2][2] = {{"no effective column left by the forward halos of",
                                             "no effective row left by the forward halos of"},
                                            {"no effective column left by the backward halos of",
                                             "no effective row left by the backward halos of"}};
    int32_t top, bottom, side;
    ta_tiling_halos(p->conv_q, p->conv_k, pass, &top, &bottom, &side);
    if (bq - top - bottom < 1 || bk - 2 * side < 1) {
        const int rows = bq - top - bottom < 1;
        ta_fail_pair(d, TA_ERR_UNSUPPORTED, rows ? "block_q" : "block_k",
                     rules[pass == TA_TILING_BWD][rows], rows ? "conv_q" : "conv_k");
        d->value = rows ? bq : bk;
        d->other_value = rows ? p->conv_q : p->conv_k;
        d->lo = rows ? top + bottom + 1 : 2 * side + 1;
        d->flags = TA_DIAG_VALUE | TA_DIAG_OTHER_VALUE | TA_DIAG_LO;
        return TA_ERR_UNSUPPORTED;
    }
    /* the remaining causes were checked above (sizes, block range, one split) */
    if (ta_tiling_make(t, p->seq_q, p->seq_k, bq, bk, p->conv_q, p->conv_k,
                       (p->flags & TA_CAUSAL) != 0, pass, 1) != TA_OK)
        return ta_fail(d, TA_ERR_UNSUPPORTED, "tiling", "refused by ta_tiling_make");
    return TA_OK;
}

static void ta_plan_contiguous_layout(ta_plan *pl);

/* One range [begin, end) of n items (end 0 = n): end in [0, n], begin in
 * [0, end) (TA_ERR_BAD_ARG, end's bounds first; rule: an empty range's). */
static ta_status ta_check_range_bounds(ta_diag *d, const char *f_begin, const char *f_end,
                                       int32_t begin, int32_t end, int32_t n, const char *rule) {
    const int32_t e = end != 0 ? end : n;
    if (end < 0 || end > n)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, f_end, end, TA_DIAG_LO | TA_DIAG_HI, 0, n);
    if (begin < 0 || begin >= e) {
        ta_fail_bounds(d, TA_ERR_BAD_ARG, f_begin, begin, TA_DIAG_LO | TA_DIAG_HI, 0, e - 1);
        d->rule = rule;
        return TA_ERR_BAD_ARG;
    }
    return TA_OK;
}

/* q_offset, key_begin, key_end, row_begin, row_end (docs/api.md, "Key ranges
 * and the query offset"): the bounds (TA_ERR_BAD_ARG). Sets both tilings'
 * offset and ranges (the forward's rows stay whole: ta_check_ranges refuses a
 * row range there); whether the ranges lie on the pass's tiles is
 * ta_check_ranges's (each pass has its own tile widths). */
static ta_status ta_check_keys(ta_plan *pl, ta_diag *d) {
    const ta_problem *p = &pl->p;
    const int64_t base = (int64_t)p->seq_k - p->seq_q, diag = base + p->q_offset;
    const int32_t end = p->key_end != 0 ? p->key_end : p->seq_k;
    const int32_t rend = p->row_end != 0 ? p->row_end : p->seq_q;
    ta_status st;
    if (diag < -(int64_t)TA_SEQ_MAX || diag > (int64_t)TA_SEQ_MAX) {
        ta_fail_bounds(d, TA_ERR_BAD_ARG, "q_offset", p->q_offset, TA_DIAG_LO | TA_DIAG_HI,
                       -(int64_t)TA_SEQ_MAX - base, (int64_t)TA_SEQ_MAX - base);
        d->rule = "moves the rows' positions (seq_k - seq_q + q_offset) past TA_SEQ_MAX";
        return TA_ERR_BAD_ARG;
    }
    if ((st = ta_check_range_bounds(d, "key_begin", "key_end", p->key_begin, p->key_end, p->seq_k,
                                    "the key range [key_begin, key_end) (key_end 0 = seq_k) "
                                    "must hold a key")) != TA_OK ||
        (st = ta_check_range_bounds(d, "row_begin", "row_end", p->row_begin, p->row_end, p->seq_q,
                                    "the row range [row_begin, row_end) (row_end 0 = seq_q) "
                                    "must hold a row")) != TA_OK)
        return st;
    ta_tiling_set_keys(&pl->fwd, p->q_offset, p->key_begin, end);
    ta_tiling_set_keys(&pl->bwd, p->q_offset, p->key_begin, end);
    ta_tiling_set_rows(&pl->bwd, p->row_begin, rend);
    return TA_OK;
}

/* One bound of a range off its pass's tiles (TA_ERR_UNSUPPORTED). */
static ta_status ta_fail_tile_bound(ta_diag *d, const char *field, int32_t value, int32_t width,
                                    const char *rule) {
    ta_fail_bounds(d, TA_ERR_UNSUPPORTED, field, value, TA_DIAG_MULTIPLE, width, 0);
    d->rule = rule;
    return TA_ERR_UNSUPPORTED;
}

ta_status ta_check_ranges(const ta_plan *pl, int pass, ta_diag *d) {
    const ta_problem *p = &pl->p;
    const ta_tiling *t = pass == TA_TILING_BWD ? &pl->bwd : &pl->fwd;
    const int32_t ce = t->cols_eff, re = t->rows_eff;
    const int32_t end = p->key_end != 0 ? p->key_end : p->seq_k;
    const int32_t rend = p->row_end != 0 ? p->row_end : p->seq_q;
    const int bwd = pass == TA_TILING_BWD;
    if (!bwd && (p->row_begin != 0 || p->row_end != 0))
        return ta_fail_value(d, TA_ERR_UNSUPPORTED, p->row_begin != 0 ? "row_begin" : "row_end",
                             p->row_begin != 0 ? p->row_begin : p->row_end,
                             "the forward has no row range (backward only; must be 0 for "
                             "ta_fwd)");
    if (p->key_begin % ce != 0)
        return ta_fail_tile_bound(d, "key_begin", p->key_begin, ce,
                                  bwd ? "on a K tile boundary of the backward: its effective K "
                                        "tile width (block_k, minus 2 (conv_k - 1) with the "
                                        "conv)"
                                      : "on a K tile boundary: the forward's effective K tile "
                                        "width (block_k, minus conv_k - 1 with the conv)");
    if (end != p->seq_k && end % ce != 0)
        return ta_fail_tile_bound(d, "key_end", p->key_end, ce,
                                  bwd ? "seq_k, or on a K tile boundary of the backward: its "
                                        "effective K tile width (block_k, minus 2 (conv_k - 1) "
                                        "with the conv)"
                                      : "seq_k, or on a K tile boundary: the forward's "
                                        "effective K tile width (block_k, minus conv_k - 1 "
                                        "with the conv)");
    if (p->row_begin % re != 0)
        return ta_fail_tile_bound(d, "row_begin", p->row_begin, re,
                                  "on a Q tile boundary of the backward: its effective Q tile "
                                  "height (block_q, minus 2 (conv_q - 1) with the conv)");
    if (rend != p->seq_q && rend % re != 0)
        return ta_fail_tile_bound(d, "row_end", p->row_end, re,
                                  "seq_q, or on a Q tile boundary of the backward: its "
                                  "effective Q tile height (block_q, minus 2 (conv_q - 1) "
                                  "with the conv)");
    return TA_OK;
}

/* The forward's split count: num_splits (0 = 1), or TA_SPLITS_AUTO's, at most
 * the key tiles. */
static int32_t ta_plan_splits(const ta_problem *p, int32_t num_k_tiles) {
    int32_t n = p->num_splits;
    if (n == TA_SPLITS_AUTO) n = ta_tiling_splits_auto(p->batch, p->heads_q, p->seq_q, p->seq_k);
    if (n < 1) n = 1;
    return n < num_k_tiles ? n : num_k_tiles;
}

ta_status ta_plan_make(const ta_problem *p, ta_backend be, ta_plan *pl, ta_diag *d) {
    ta_status st;
    int32_t bq, bk;
    (void)be;
    if (!p) return ta_fail(d, TA_ERR_NULL_ARG, "problem", "must not be NULL");
    if ((st = ta_check_shape(p, d)) != TA_OK) return st;
    if ((st = ta_check_enums(p, d)) != TA_OK) return st;
    if ((st = ta_check_sizes(p, d)) != TA_OK) return st;
    if ((st = ta_check_rope(p, d)) != TA_OK) return st;
    if ((st = ta_check_rband(p, d)) != TA_OK) return st;
    memset(pl, 0, sizeof *pl);
    pl->p = *p;
    pl->has_conv = p->conv_q > 0;
    pl->stages.load = p->rope != TA_ROPE_NONE ? TA_LOAD_ROPE : TA_LOAD_NONE;
    if (pl->stages.load == TA_LOAD_ROPE) {
        if (p->rope_row_stride == 0) pl->p.rope_row_stride = p->rope_pairs;
        if ((st = ta_rope_span(pl, d)) != TA_OK) return st;
    }
    pl->stages.score = pl->has_conv               ? TA_SCORE_MTA_CONV
                       : (p->flags & TA_RBAND) != 0 ? TA_SCORE_RBAND
                                                    : TA_SCORE_NONE;
    pl->stages.num_splits = 1;
    pl->group = p->heads_q / p->heads_kv;
    pl->elem_bytes = p->dtype == TA_F32 ? 4u : 2u;
    pl->dim_k = p->latent_dim > 0 ? p->latent_dim : p->head_dim;
    pl->dim_v = p->latent_dim > 0 ? p->latent_dim : p->head_dim_v;
    if ((st = ta_count_elems(pl, d)) != TA_OK) return st;
    if (pl->has_conv && !(p->flags & TA_CAUSAL)) /* MTA is causal */
        return ta_fail_value(d, TA_ERR_UNSUPPORTED, "flags", (int64_t)p->flags,
                             "the MTA conv needs TA_CAUSAL");
    if (p->scale == 0.0f) pl->p.scale = 1.0f / sqrtf((float)pl->dim_k);
    ta_tiling_default_blocks(p->conv_q, p->conv_k, &bq, &bk);
    if (p->block_q != 0) bq = p->block_q;
    if (p->block_k != 0) bk = p->block_k;
    pl->p.block_q = bq;
    pl->p.block_k = bk;
    /* a problem is accepted only if both passes have a valid geometry, so a
     * forward that runs never leaves its backward unsupported */
    if ((st = ta_make_pass(&pl->fwd, p, bq, bk, TA_TILING_FWD, d)) != TA_OK) return st;
    if ((st = ta_make_pass(&pl->bwd, p, bq, bk, TA_TILING_BWD, d)) != TA_OK) return st;
    if ((st = ta_check_keys(pl, d)) != TA_OK) return st;
    /* split-K (forward only): the count, clamped to the key tiles of the
     * output range (the parts past them would be empty: same bits, less
     * workspace) */
    pl->fwd.num_splits =
        ta_plan_splits(p, (pl->fwd.key_end - 1) / pl->fwd.cols_eff + 1 -
                              pl->fwd.key_begin / pl->fwd.cols_eff);
    pl->stages.num_splits = pl->fwd.num_splits;
    ta_tiling_set_history(&pl->fwd, p->q_history); /* the backward refuses history rows */
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
    l->k = l->dk = ta_strides_contiguous(p->heads_kv, p->seq_k, pl->dim_k);
    l->v = l->dv = ta_strides_contiguous(p->heads_kv, p->seq_k, pl->dim_v);
    l->q_hist = ta_strides_contiguous(p->heads_q, p->q_history, p->head_dim);
    pl->strided = 0;
    if (p->kv_page_size > 0) { /* pool rows [page, slot] of H_kv heads: row j's element of
                                  (h, d) at row * H_kv dim + h dim + d (ta_tile_kv_row) */
        l->k.batch = 0, l->k.head = p->head_dim, l->k.seq = (int64_t)p->heads_kv * p->head_dim;
        l->v.batch = 0, l->v.head = p->head_dim_v;
        l->v.seq = (int64_t)p->heads_kv * p->head_dim_v;
    }
}

/*
 * One tensor [n_b, n_h, n_s, dim] with element strides s (the caller's; all
 * zero = contiguous `dense`). Strides must be >= 0, and no two distinct
 * elements may share an address. The test is the usual sufficient one: order
 * the dimensions of extent > 1 by stride; each stride must reach past the span
 * of all smaller ones (the feature dimension, stride 1, spans dim elements).
 * It accepts every permutation of the dimensions with any gaps, and rejects
 * interleavings it cannot prove disjoint. *bytes = the tensor's byte extent.
 * A failure names the field (name, e.g. "args.k_strides") and the dimension.
 */
static ta_status ta_check_strides(ta_strides *s, const ta_strides *dense, int32_t n_b, int32_t n_h,
                                  int32_t n_s, int32_t dim, size_t elem_bytes, int *strided,
                                  size_t *bytes, const char *name, ta_diag *d) {
    static const char *const dim_names[3] = {"batch", "head", "seq"};
    int64_t stride[3], extent[3], span = dim, last = dim - 1;
    int which[3], n = 0, i, j;
    if (s->batch == 0 && s->head == 0 && s->seq == 0) *s = *dense;
    {
        const int64_t st_all[3] = {s->batch, s->head, s->seq}, ex_all[3] = {n_b, n_h, n_s};
        for (i = 0; i < 3; ++i)
            if (st_all[i] < 0) {
                ta_fail_bounds(d, TA_ERR_BAD_ARG, name, st_all[i], TA_DIAG_LO, 0, 0);
                d->member = dim_names[i];
                return TA_ERR_BAD_ARG;
            }
        if (s->batch != dense->batch || s->head != dense->head || s->seq != dense->seq)
            *strided = 1;
        /* dims of extent > 1, sorted by stride (insertion sort of at most 3) */
        for (i = 0; i < 3; ++i) {
            if (ex_all[i] <= 1) continue;
            for (j = n; j > 0 && stride[j - 1] > st_all[i]; --j) {
                stride[j] = stride[j - 1];
                extent[j] = extent[j - 1];
                which[j] = which[j - 1];
            }
            stride[j] = st_all[i];
            extent[j] = ex_all[i];
            which[j] = i;
            ++n;
        }
    }
    for (i = 0; i < n; ++i) {
        /* span <= 2^62 here: each step below is checked against it */
        if (stride[i] < span) { /* would alias a smaller dim's elements */
            ta_fail_bounds(d, TA_ERR_BAD_ARG, name, stride[i], TA_DIAG_LO, span, 0);
            d->member = dim_names[which[i]];
            d->rule = "aliases the elements of the dimensions with smaller strides";
            return TA_ERR_BAD_ARG;
        }
        if (stride[i] > (INT64_C(1) << 62) / (extent[i] - 1) ||
            (last += stride[i] * (extent[i] - 1)) >= (INT64_C(1) << 62)) {
            ta_fail_value(d, TA_ERR_OVERFLOW, name, stride[i],
                          "the tensor's span exceeds 2^62 elements");
            d->member = dim_names[which[i]];
            return TA_ERR_OVERFLOW;
        }
        span = last + 1;
    }
    if (!ta_mul_size((size_t)span, elem_bytes, bytes))
        return ta_fail(d, TA_ERR_OVERFLOW, name, "the tensor's span in bytes overflows size_t");
    return TA_OK;
}

#define TA_CHECK_STRIDES(field, user, nh, ns, dim, out)                                            \
    do {                                                                                           \
        ta_strides dense_ = pl->layout.field;                                                      \
        pl->layout.field = (user);                                                                 \
        st = ta_check_strides(&pl->layout.field, &dense_, p->batch, (nh), (ns), (dim),             \
                              pl->elem_bytes, &pl->strided, &(out), "args." #field "_strides", d); \
        if (st != TA_OK) return st;                                                                \
    } while (0)

/* A paged k and v (ta_problem.kv_page_size > 0): contiguous pools, so their
 * strides must be zero (the layout is ta_plan_contiguous_layout's); their
 * extents are the pools', [kv_num_pages, kv_page_size, H_kv, D (D_v)]. */
static ta_status ta_paged_extents(const ta_plan *pl, const ta_strides *k, const ta_strides *v,
                                  ta_extents *ext, ta_diag *d) {
    const ta_problem *p = &pl->p;
    const ta_strides *const s[2] = {k, v};
    static const char *const names[2] = {"args.k_strides", "args.v_strides"};
    size_t rows, row_k, row_v;
    int i;
    for (i = 0; i < 2; ++i)
        if (s[i]->batch != 0 || s[i]->head != 0 || s[i]->seq != 0)
            return ta_fail(d, TA_ERR_BAD_ARG, names[i],
                           "must be zero with a paged KV cache (the pages are contiguous "
                           "[kv_num_pages, kv_page_size, H_kv, D])");
    if (!ta_mul_size((size_t)p->kv_num_pages, (size_t)p->kv_page_size, &rows) ||
        !ta_mul_size(rows, (size_t)p->heads_kv, &rows) ||
        !ta_mul_size(rows, (size_t)p->head_dim * pl->elem_bytes, &row_k) ||
        !ta_mul_size(rows, (size_t)p->head_dim_v * pl->elem_bytes, &row_v))
        return ta_fail(d, TA_ERR_OVERFLOW, "kv_num_pages",
                       "the page pool's byte count overflows size_t");
    ext->k = row_k;
    ext->v = row_v;
    return TA_OK;
}

/* q, k, v, o: the tensors both passes take. */
static ta_status ta_set_qkvo_layout(ta_plan *pl, const ta_strides *q, const ta_strides *k,
                                    const ta_strides *v, const ta_strides *o, ta_extents *ext,
                                    ta_diag *d) {
    const ta_problem *p = &pl->p;
    ta_status st;
    memset(ext, 0, sizeof *ext);
    ta_plan_contiguous_layout(pl);
    TA_CHECK_STRIDES(q, *q, p->heads_q, p->seq_q, p->head_dim, ext->q);
    if (p->kv_page_size > 0) {
        if ((st = ta_paged_extents(pl, k, v, ext, d)) != TA_OK) return st;
    } else {
        TA_CHECK_STRIDES(k, *k, p->heads_kv, p->seq_k, pl->dim_k, ext->k);
        TA_CHECK_STRIDES(v, *v, p->heads_kv, p->seq_k, pl->dim_v, ext->v);
    }
    TA_CHECK_STRIDES(o, *o, p->heads_q, p->seq_q, p->head_dim_v, ext->o);
    return TA_OK;
}

/* A forward's score ring into pl->ring (nothing without one): the MTA conv
 * only, slots in [c_q, TA_SEQ_MAX] and >= q_history + S_q when the history
 * is read from it (TA_ERR_BAD_ARG), no key range (TA_ERR_UNSUPPORTED), its
 * strides (seq >= S_k: ta_check_strides) and its byte extent into *bytes (0
 * without a ring) for the overlap checks. */
static ta_status ta_plan_set_score_ring(ta_plan *pl, const ta_fwd_args *a, size_t *bytes,
                                        ta_diag *d) {
    const ta_problem *p = &pl->p;
    ta_strides dense;
    int strided = 0; /* the ring's own strides never make the call "strided" */
    ta_status st;
    *bytes = 0;
    if (!a->score_ring) return TA_OK;
    if (!pl->has_conv)
        return ta_fail(d, TA_ERR_BAD_ARG, "args.score_ring",
                       "holds the MTA conv's raw scores: must be NULL without conv_q, conv_k");
    if (p->key_begin > 0 || (p->key_end != 0 && p->key_end < p->seq_k))
        return ta_fail(d, TA_ERR_UNSUPPORTED, "args.score_ring",
                       "has no key ranges yet (key_begin 0 and key_end 0 or seq_k with a ring)");
    if (a->score_ring_slots < p->conv_q || a->score_ring_slots > TA_SEQ_MAX)
        return ta_fail_bounds(d, TA_ERR_BAD_ARG, "args.score_ring_slots", a->score_ring_slots,
                              TA_DIAG_LO | TA_DIAG_HI, p->conv_q, TA_SEQ_MAX);
    pl->ring_read = p->q_history > 0 && a->q_hist == NULL;
    if (pl->ring_read && (int64_t)p->q_history + p->seq_q > a->score_ring_slots) {
        ta_fail_bounds(d, TA_ERR_BAD_ARG, "args.score_ring_slots", a->score_ring_slots, TA_DIAG_LO,
                       (int64_t)p->q_history + p->seq_q, 0);
        d->rule = "reading the history from the ring: the q_history rows read and the seq_q "
                  "rows written need distinct slots (q_history + seq_q)";
        return TA_ERR_BAD_ARG;
    }
    dense = ta_strides_contiguous(p->heads_q, a->score_ring_slots, p->seq_k);
    pl->ring_strides = a->score_ring_strides;
    st = ta_check_strides(&pl->ring_strides, &dense, p->batch, p->heads_q, a->score_ring_slots,
                          p->seq_k, sizeof(float), &strided, bytes, "args.score_ring_strides", d);
    if (st != TA_OK) return st;
    pl->ring = a->score_ring;
    pl->ring_slots = a->score_ring_slots;
    return TA_OK;
}

ta_status ta_plan_set_fwd_layout(ta_plan *pl, const ta_fwd_args *a, ta_extents *ext, ta_diag *d) {
    const ta_problem *p = &pl->p;
    ta_status st =
        ta_set_qkvo_layout(pl, &a->q_strides, &a->k_strides, &a->v_strides, &a->o_strides, ext, d);
    if (st != TA_OK) return st;
    /* the history rows [B, H, q_history, D]: strided like any input */
    if (p->q_history > 0)
        TA_CHECK_STRIDES(q_hist, a->q_hist_strides, p->heads_q, p->q_history, p->head_dim,
                         ext->q_hist);
    return ta_plan_set_score_ring(pl, a, &ext->ring, d);
}

ta_status ta_plan_set_bwd_layout(ta_plan *pl, const ta_bwd_args *a, ta_extents *ext, ta_diag *d) {
    const ta_problem *p = &pl->p;
    ta_status st =
        ta_set_qkvo_layout(pl, &a->q_strides, &a->k_strides, &a->v_strides, &a->o_strides, ext, d);
    if (st != TA_OK) return st;
    TA_CHECK_STRIDES(d_o, a->d_o_strides, p->heads_q, p->seq_q, p->head_dim_v, ext->d_o);
    TA_CHECK_STRIDES(dq, a->dq_strides, p->heads_q, p->seq_q, p->head_dim, ext->dq);
    TA_CHECK_STRIDES(dk, a->dk_strides, p->heads_kv, p->seq_k, pl->dim_k, ext->dk);
    TA_CHECK_STRIDES(dv, a->dv_strides, p->heads_kv, p->seq_k, pl->dim_v, ext->dv);
    return TA_OK;
}
#undef TA_CHECK_STRIDES

ta_status ta_plan_set_rope(ta_plan *pl, const ta_rope_args *r, ta_diag *d) {
    memset(&pl->rope, 0, sizeof pl->rope);
    if (pl->stages.load != TA_LOAD_ROPE) return TA_OK;
    if (!r->cos) return ta_fail(d, TA_ERR_NULL_ARG, "args.rope.cos", "must not be NULL with rope");
    if (!r->sin) return ta_fail(d, TA_ERR_NULL_ARG, "args.rope.sin", "must not be NULL with rope");
    /* history row -i turns by row 0's table row - i (ta_rope_token_row): without
     * positions that is row -i, outside every table (a pointer fact, so every
     * backend refuses it, CUDA too) */
    if (pl->p.q_history > 0 && !r->pos_q) {
        ta_fail_pair(d, TA_ERR_BAD_ARG, "args.rope.pos_q",
                     "NULL (query t uses table row t), so history row -i would use row -i: "
                     "positions are required with",
                     "q_history");
        d->other_value = pl->p.q_history;
        d->flags = TA_DIAG_OTHER_VALUE;
        return TA_ERR_BAD_ARG;
    }
    pl->rope = *r;
    return TA_OK;
}

ta_status ta_check_block_table(const ta_plan *pl, ta_diag *d) {
    const ta_problem *p = &pl->p;
    const int32_t need = p->kv_page_size > 0 ? (p->seq_k - 1) / p->kv_page_size + 1 : 0;
    int32_t b, i;
    if (!pl->block_table) return TA_OK;
    for (b = 0; b < p->batch; ++b)
        for (i = 0; i < need; ++i) {
            const size_t at = (size_t)b * (size_t)p->kv_max_blocks + (size_t)i;
            const int32_t page = pl->block_table[at];
            if (page < 0 || page >= p->kv_num_pages) {
                ta_fail_bounds(d, TA_ERR_BAD_ARG, "args.block_table", page,
                               TA_DIAG_LO | TA_DIAG_HI, 0, p->kv_num_pages - 1);
                d->flags |= TA_DIAG_INDEX;
                d->index = (int64_t)at;
                return TA_ERR_BAD_ARG;
            }
        }
    return TA_OK;
}

/* One position array: [B, seq] values in [0, rows) (read: host memory), or
 * NULL with seq <= rows (every backend). */
static ta_status ta_check_rope_side(const int32_t *pos, int32_t batch, int32_t seq, int32_t rows,
                                    const char *name, const char *seq_name, const char *null_rule,
                                    int read, ta_diag *d) {
    size_t i, n = (size_t)batch * (size_t)seq; /* fits: the q / k counts do */
    if (pos && !read) return TA_OK;
    if (!pos) {
        if (seq <= rows) return TA_OK;
        ta_fail_pair(d, TA_ERR_BAD_ARG, "rope_rows", null_rule, seq_name);
        d->value = rows;
        d->other_value = seq;
        d->flags = TA_DIAG_VALUE | TA_DIAG_OTHER_VALUE;
        return TA_ERR_BAD_ARG;
    }
    for (i = 0; i < n; ++i)
        if (pos[i] < 0 || pos[i] >= rows) {
            ta_fail_bounds(d, TA_ERR_BAD_ARG, name, pos[i], TA_DIAG_LO | TA_DIAG_HI, 0, rows - 1);
            d->flags |= TA_DIAG_INDEX;
            d->index = (int64_t)i;
            return TA_ERR_BAD_ARG;
        }
    return TA_OK;
}

/* The query history rows' table rows (ta_rope_token_row): row -i of batch
 * entry b turns by pos_q[b S_q] - i, so pos_q[b S_q] - q_history must be in
 * the table (the rows up to row 0's are then too). pos_q is non-NULL with
 * history (ta_plan_set_rope) and in [0, rope_rows) (checked before). */
static ta_status ta_check_rope_hist(const ta_plan *pl, ta_diag *d) {
    const ta_problem *p = &pl->p;
    int32_t b;
    for (b = 0; pl->rope.pos_q && b < p->batch; ++b) {
        const size_t at = (size_t)b * (size_t)p->seq_q;
        if (pl->rope.pos_q[at] - p->q_history < 0) {
            ta_fail_bounds(d, TA_ERR_BAD_ARG, "args.rope.pos_q", pl->rope.pos_q[at],
                           TA_DIAG_LO | TA_DIAG_HI, p->q_history, p->rope_rows - 1);
            d->flags |= TA_DIAG_INDEX;
            d->index = (int64_t)at;
            d->rule = "row 0's position: the q_history rows above it use table rows "
                      "pos - q_history .. pos - 1, each >= 0";
            return TA_ERR_BAD_ARG;
        }
    }
    return TA_OK;
}

ta_status ta_check_rope_pos(const ta_plan *pl, int host_memory, ta_diag *d) {
    const ta_problem *p = &pl->p;
    ta_status st;
    if (pl->stages.load != TA_LOAD_ROPE) return TA_OK;
    st = ta_check_rope_side(pl->rope.pos_q, p->batch, p->seq_q, p->rope_rows, "args.rope.pos_q",
                            "seq_q", "below (args.rope.pos_q NULL: query t uses row t)",
                            host_memory, d);
    if (st == TA_OK && p->q_history > 0 && host_memory) st = ta_check_rope_hist(pl, d);
    if (st != TA_OK) return st;
    return ta_check_rope_side(pl->rope.pos_k, p->batch, p->seq_k, p->rope_rows, "args.rope.pos_k",
                              "seq_k", "below (args.rope.pos_k NULL: key t uses row t)",
                              host_memory, d);
}

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

static ta_status ta_fail_align(const ta_buf *b, ta_diag *d) {
    ta_fail_bounds(d, TA_ERR_BAD_ARG, b->name, (int64_t)(uintptr_t)b->ptr, TA_DIAG_MULTIPLE,
                   (int64_t)b->align, 0);
    d->flags |= TA_DIAG_VALUE_ADDR;
    d->rule = "address not aligned to its element";
    return TA_ERR_BAD_ARG;
}

ta_status ta_check_buffers(const ta_buf *in, int n_in, const ta_buf *out, int n_out, ta_diag *d) {
    int i, j;
    for (i = 0; i < n_in; ++i)
        if (in[i].ptr && !ta_ptr_aligned(in[i].ptr, in[i].align)) return ta_fail_align(&in[i], d);
    for (i = 0; i < n_out; ++i) {
        if (out[i].ptr && !ta_ptr_aligned(out[i].ptr, out[i].align))
            return ta_fail_align(&out[i], d);
        for (j = 0; j < n_in; ++j)
            if (ta_ranges_overlap(out[i].ptr, out[i].bytes, in[j].ptr, in[j].bytes))
                return ta_fail_pair(d, TA_ERR_BAD_ARG, out[i].name, "overlaps", in[j].name);
        for (j = 0; j < i; ++j)
            if (ta_ranges_overlap(out[i].ptr, out[i].bytes, out[j].ptr, out[j].bytes))
                return ta_fail_pair(d, TA_ERR_BAD_ARG, out[i].name, "overlaps", out[j].name);
    }
    return TA_OK;
}

ta_status ta_check_workspace(const void *ws, size_t ws_bytes, size_t needed, ta_diag *d) {
    if (needed > 0 && !ws) {
        ta_fail_pair(d, TA_ERR_NULL_ARG, "workspace", "NULL, but", "the size query's bytes");
        d->other_value = (int64_t)needed;
        d->flags = TA_DIAG_OTHER_VALUE;
        return TA_ERR_NULL_ARG;
    }
    if (ws_bytes < needed)
        return ta_fail_bounds(d, TA_ERR_WORKSPACE_SIZE, "workspace_bytes", (int64_t)ws_bytes,
                              TA_DIAG_LO, (int64_t)needed, 0);
    if (ws && !ta_ptr_aligned(ws, TA_WORKSPACE_ALIGN)) {
        ta_fail_bounds(d, TA_ERR_WORKSPACE_ALIGN, "workspace", (int64_t)(uintptr_t)ws,
                       TA_DIAG_MULTIPLE, TA_WORKSPACE_ALIGN, 0);
        d->flags |= TA_DIAG_VALUE_ADDR;
        d->rule = "address not aligned";
        return TA_ERR_WORKSPACE_ALIGN;
    }
    return TA_OK;
}

ta_status ta_check_seqlens_host(const ta_plan *pl, const int32_t *seqlens_k, int host_memory,
                                ta_diag *d) {
    int32_t b;
    if (!seqlens_k) return TA_OK;
    if (pl->p.flags & TA_SEQLENS_DEVICE) /* the kernels clamp them (CUDA) */
        return host_memory ? ta_fail(d, TA_ERR_BAD_ARG, "flags",
                                     "TA_SEQLENS_DEVICE on a host-memory backend (CUDA only)")
                           : TA_OK;
    for (b = 0; b < pl->p.batch; ++b)
        if (seqlens_k[b] < 0 || seqlens_k[b] > pl->p.seq_k) {
            ta_fail_bounds(d, TA_ERR_BAD_ARG, "args.seqlens_k", seqlens_k[b],
                           TA_DIAG_LO | TA_DIAG_HI, 0, pl->p.seq_k);
            d->flags |= TA_DIAG_INDEX;
            d->index = b;
            return TA_ERR_BAD_ARG;
        }
    return TA_OK;
}

ta_status ta_check_trace(ta_backend be, const ta_trace *tr, size_t *bytes, ta_diag *d) {
    *bytes = 0;
    if (!tr) return TA_OK;
    if (be != TA_BACKEND_REF)
        return ta_fail(d, TA_ERR_UNSUPPORTED, "args.trace",
                       "must be NULL on this backend (a trace is REF only)");
    if (!tr->entries && tr->capacity > 0) {
        return ta_fail(d, TA_ERR_NULL_ARG, "args.trace->entries", "NULL with a capacity above 0");
    }
    if (!ta_mul_size(tr->capacity, sizeof(ta_trace_entry), bytes)) {
        return ta_fail(d, TA_ERR_OVERFLOW, "args.trace->capacity",
                       "capacity * sizeof(ta_trace_entry) overflows size_t");
    }
    return TA_OK;
}
