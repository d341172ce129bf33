/*
 * Rotary position embedding tables (include/tileattn.h, docs/rope.md): the
 * caller's cos/sin buffers filled from a plain description. Host code only;
 * the kernels never call it. Angles and cos/sin in double precision (the C
 * library's cos, sin, pow, log), each entry rounded once to float.
 *
 *   1-D:  row t < identity_rows:   cos = 1, sin = 0
 *         row t >= identity_rows:  pos = (t - identity_rows) pos_scale + pos_offset,
 *                                  cos[t][i] = m cos(pos f_i), sin[t][i] = m sin(pos f_i)
 *   2-D:  row identity_rows + y W + x: pair i < n/2 turns by x scale_w (y first: y
 *         scale_h) with f_i of the axis, pair n/2 + i by the other axis
 *
 * with the frequencies of ta_rope_freq1d (1-D, scaled) or base^(-2 i / n_pairs)
 * (2-D), m = 1 except YaRN's mscale.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "ta_internal.h"
#include "tileattn.h"

#define TA_ROPE_PI 3.14159265358979323846

/* Bytes of a [rows][row_stride] float table, 0 with *ok = 0 on overflow. */
static size_t ta_rope_bytes(int64_t rows, int64_t row_stride, int *ok) {
    const uint64_t n = (uint64_t)rows * (uint64_t)row_stride;
    *ok = rows == 0 || n / (uint64_t)rows == (uint64_t)row_stride;
    if (!*ok || n > SIZE_MAX / sizeof(float)) {
        *ok = 0;
        return 0;
    }
    return (size_t)n * sizeof(float);
}

/* The two output tables: non-NULL, float-aligned, disjoint. */
static ta_status ta_rope_check_out(const float *cos, const float *sin, size_t bytes) {
    const uintptr_t c = (uintptr_t)cos, s = (uintptr_t)sin;
    if (!cos || !sin) return TA_ERR_NULL_ARG;
    if (c % sizeof(float) != 0 || s % sizeof(float) != 0) return TA_ERR_BAD_ARG;
    if (bytes > 0 && c < s + bytes && s < c + bytes) return TA_ERR_BAD_ARG;
    return TA_OK;
}

static int ta_rope_finite(double x) { return x == x && x - x == 0.0; }

/* A field that is 0 takes its default. */
static double ta_rope_or(double x, double dflt) { return x == 0.0 ? dflt : x; }

/* YaRN's correction dim (a fractional pair index) for num_rot rotations over
 * max_pos positions, R rotated dims. */
static double ta_rope_yarn_dim(double num_rot, double r, double base, double max_pos) {
    return r * log(max_pos / (num_rot * 2.0 * TA_ROPE_PI)) / (2.0 * log(base));
}

/* Frequency f_i of pair i of a 1-D table (cfg checked). */
static double ta_rope_freq1d(const ta_rope_1d *cfg, int32_t i) {
    const double r = 2.0 * cfg->n_pairs, base = ta_rope_or(cfg->base, 10000.0);
    const double e = -2.0 * i / r;
    switch (cfg->scaling) {
    case TA_ROPE_SCALE_LINEAR: return pow(base, e) / cfg->factor;
    case TA_ROPE_SCALE_NTK: return pow(base * pow(cfg->factor, r / (r - 2.0)), e);
    case TA_ROPE_SCALE_YARN: {
        const double fast = ta_rope_or(cfg->beta_fast, 32.0), slow = ta_rope_or(cfg->beta_slow, 1.0);
        double lo = floor(ta_rope_yarn_dim(fast, r, base, cfg->orig_max_pos));
        double hi = ceil(ta_rope_yarn_dim(slow, r, base, cfg->orig_max_pos)), ramp, keep;
        if (lo < 0.0) lo = 0.0;
        if (hi > r - 1.0) hi = r - 1.0;
        if (hi == lo) hi += 0.001;
        ramp = (i - lo) / (hi - lo);
        ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
        keep = 1.0 - ramp; /* the share of the unscaled frequency */
        return pow(base, e) / cfg->factor * (1.0 - keep) + pow(base, e) * keep;
    }
    default: return pow(base, e);
    }
}

/* Checks of a 1-D table's fields (the order of the header's documentation). */
static ta_status ta_rope_check_1d(const ta_rope_1d *c) {
    const int32_t stride = c->row_stride ? c->row_stride : c->n_pairs;
    if (c->n_pairs < 1 || c->rows < 0 || stride < c->n_pairs || c->identity_rows < 0 ||
        c->identity_rows > c->rows)
        return TA_ERR_BAD_ARG;
    if (!ta_rope_finite(c->base) || c->base < 0.0 || !ta_rope_finite(c->pos_scale) ||
        !ta_rope_finite(c->pos_offset))
        return TA_ERR_BAD_ARG;
    switch (c->scaling) {
    case TA_ROPE_SCALE_NONE: return TA_OK;
    case TA_ROPE_SCALE_LINEAR:
    case TA_ROPE_SCALE_NTK:
    case TA_ROPE_SCALE_YARN: break;
    default: return TA_ERR_BAD_ARG;
    }
    if (!ta_rope_finite(c->factor) || c->factor < 1.0) return TA_ERR_BAD_ARG;
    if (c->scaling == TA_ROPE_SCALE_NTK && c->n_pairs < 2) return TA_ERR_BAD_ARG; /* R - 2 = 0 */
    if (c->scaling == TA_ROPE_SCALE_YARN) {
        const double fast = ta_rope_or(c->beta_fast, 32.0), slow = ta_rope_or(c->beta_slow, 1.0);
        if (c->orig_max_pos < 1 || !ta_rope_finite(fast) || !ta_rope_finite(slow) || slow <= 0.0 ||
            fast <= slow || !ta_rope_finite(c->mscale) || c->mscale < 0.0)
            return TA_ERR_BAD_ARG;
    }
    return TA_OK;
}

ta_status ta_rope_table_1d(const ta_rope_1d *cfg, float *cos_t, float *sin_t) {
    int32_t t, i, stride;
    size_t bytes;
    double m = 1.0;
    int ok;
    ta_status st;
    if (!cfg) return TA_ERR_NULL_ARG;
    if ((st = ta_rope_check_1d(cfg)) != TA_OK) return st;
    stride = cfg->row_stride ? cfg->row_stride : cfg->n_pairs;
    bytes = ta_rope_bytes(cfg->rows, stride, &ok);
    if (!ok) return TA_ERR_OVERFLOW;
    if ((st = ta_rope_check_out(cos_t, sin_t, bytes)) != TA_OK) return st;
    if (cfg->scaling == TA_ROPE_SCALE_YARN)
        m = ta_rope_or(cfg->mscale, cfg->factor > 1.0 ? 0.1 * log(cfg->factor) + 1.0 : 1.0);
    for (i = 0; i < cfg->n_pairs; ++i) { /* one frequency per pair, down its column */
        const double f = ta_rope_freq1d(cfg, i);
        for (t = 0; t < cfg->rows; ++t) {
            const double pos =
                (t - cfg->identity_rows) * ta_rope_or(cfg->pos_scale, 1.0) + cfg->pos_offset;
            const size_t at = (size_t)t * (size_t)stride + (size_t)i;
            const int id = t < cfg->identity_rows;
            cos_t[at] = id ? 1.0f : (float)(m * cos(pos * f));
            sin_t[at] = id ? 0.0f : (float)(m * sin(pos * f));
        }
    }
    return TA_OK;
}

ta_status ta_rope_table_2d(const ta_rope_2d *cfg, float *cos_t, float *sin_t) {
    int32_t stride, half, t, i;
    int64_t rows;
    size_t bytes;
    double base;
    int ok;
    ta_status st;
    if (!cfg) return TA_ERR_NULL_ARG;
    stride = cfg->row_stride ? cfg->row_stride : cfg->n_pairs;
    if (cfg->n_pairs < 2 || cfg->n_pairs % 2 != 0 || cfg->grid_h < 1 || cfg->grid_w < 1 ||
        stride < cfg->n_pairs || cfg->identity_rows < 0 || (cfg->y_first != 0 && cfg->y_first != 1) ||
        !ta_rope_finite(cfg->base) || cfg->base < 0.0 || !ta_rope_finite(cfg->scale_h) ||
        !ta_rope_finite(cfg->scale_w))
        return TA_ERR_BAD_ARG;
    rows = (int64_t)cfg->identity_rows + (int64_t)cfg->grid_h * cfg->grid_w;
    if (rows > INT32_MAX) return TA_ERR_OVERFLOW;
    bytes = ta_rope_bytes(rows, stride, &ok);
    if (!ok) return TA_ERR_OVERFLOW;
    if ((st = ta_rope_check_out(cos_t, sin_t, bytes)) != TA_OK) return st;
    half = cfg->n_pairs / 2;
    base = ta_rope_or(cfg->base, 100.0);
    for (i = 0; i < cfg->n_pairs; ++i) { /* one frequency per pair, down its column */
        const double f = pow(base, -2.0 * (i % half) / cfg->n_pairs);
        const int use_x = (i < half) != (cfg->y_first == 1);
        for (t = 0; t < (int32_t)rows; ++t) {
            const int32_t patch = t - cfg->identity_rows;
            const size_t at = (size_t)t * (size_t)stride + (size_t)i;
            const double pos =
                patch < 0 ? 0.0
                : use_x   ? (patch % cfg->grid_w) * ta_rope_or(cfg->scale_w, 1.0)
                          : (patch / cfg->grid_w) * ta_rope_or(cfg->scale_h, 1.0);
            cos_t[at] = patch < 0 ? 1.0f : (float)cos(pos * f);
            sin_t[at] = patch < 0 ? 0.0f : (float)sin(pos * f);
        }
    }
    return TA_OK;
}
