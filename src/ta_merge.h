/*
 * The merge of partial attention results (docs/exactness.md section 10): one
 * source for every backend, compiled as C11 (REF, CPU, the public ta_merge on
 * host memory) and as CUDA (the merge kernel), like ta_math.h. Split-K's
 * forward merges its f32 parts with it, ta_merge the caller's parts in the
 * storage dtype (widened exactly first): the same operations in the same
 * order, so the same bits on every backend.
 *
 * Per row, over the parts s = 0 .. n-1 ascending, with lse_s f32 and o_s the
 * part's normalised output (f32 after widening):
 *
 *   M   = max_s lse_s                  from -inf, `x > M ? x : M`
 *   row with M = -inf (every part empty): o = 0, lse = -inf
 *   L   = sum_s w_s                    from +0, plain `+`, parts with lse_s = -inf skipped
 *   w_s = ta_exp(lse_s - M)
 *   acc = sum_s fmaf(w_s, o_sd, acc)   from -0, per feature d, same parts skipped
 *   o_d = acc / L                      IEEE division
 *   lse = M + ta_log(L)
 *
 * A single non-empty part gives w = exp(0) = 1, L = 1, acc = o_sd (from -0:
 * fmaf(1, x, -0) = x for every x, -0 included; from +0 a part's -0, which an
 * f16 / bf16 forward stores when a tiny negative output rounds to zero, came
 * back +0: found by test/fuzz/fuzz_calls), o_d = o_sd and lse = lse_s +
 * log(1) = lse_s: its bits unchanged. With more parts the start matters only
 * where every live part's product is an exact zero: the sum is then -0 when all
 * of them are -0, else +0, as before.
 */
#ifndef TA_MERGE_H
#define TA_MERGE_H

#include <stddef.h>
#include <stdint.h>

#include "ta_math.h"
#include "tileattn.h"

/* -inf, from its bits (the same constant on host and device) */
#define TA_MERGE_NEG_INF_BITS 0xff800000u

/* Element idx of a tensor in storage dtype dt, widened to f32 (exact). */
TA_MATH_FN float ta_merge_load(const void *base, ta_dtype dt, size_t idx) {
    if (dt == TA_F16) return ta_f16_to_f32(((const uint16_t *)base)[idx]);
    if (dt == TA_BF16) return ta_bf16_to_f32(((const uint16_t *)base)[idx]);
    return ((const float *)base)[idx];
}

/* M: the largest lse_s of the n parts at lse[s * stride], from -inf. */
TA_MATH_FN float ta_merge_max(const float *lse, size_t stride, int32_t n) {
    float m = ta_f32_from_bits(TA_MERGE_NEG_INF_BITS);
    int32_t s;
    for (s = 0; s < n; ++s) {
        const float x = lse[(size_t)s * stride];
        m = x > m ? x : m;
    }
    return m;
}

/* 1 if part lse_s contributes (it saw a key of the row). */
TA_MATH_FN int ta_merge_live(float lse_s) { return ta_f32_bits(lse_s) != TA_MERGE_NEG_INF_BITS; }

/* w_s = exp(lse_s - M) of a live part. */
TA_MATH_FN float ta_merge_weight(float lse_s, float m) { return ta_exp(lse_s - m); }

/* L: the sum of the live parts' weights, s ascending, from +0. m finite. */
TA_MATH_FN float ta_merge_sum(const float *lse, size_t stride, int32_t n, float m) {
    float l = 0.0f;
    int32_t s;
    for (s = 0; s < n; ++s) {
        const float x = lse[(size_t)s * stride];
        if (ta_merge_live(x)) l = l + ta_merge_weight(x, m);
    }
    return l;
}

/* Feature d of the merged row: the parts' o_s at o[idx0 + s * o_stride] in dtype
 * dt; m, l from ta_merge_max / ta_merge_sum (m finite). */
TA_MATH_FN float ta_merge_feature(const void *o, ta_dtype dt, size_t idx0, size_t o_stride,
                                  const float *lse, size_t lse_stride, int32_t n, float m,
                                  float l) {
    float acc = -0.0f; /* from -0: one part's -0 stays -0 (see the top) */
    int32_t s;
    for (s = 0; s < n; ++s) {
        const float x = lse[(size_t)s * lse_stride];
        if (ta_merge_live(x))
            acc = TA_FMAF(ta_merge_weight(x, m), ta_merge_load(o, dt, idx0 + (size_t)s * o_stride),
                          acc);
    }
    return acc / l;
}

/* The merged lse of a row with finite m. */
TA_MATH_FN float ta_merge_lse(float m, float l) { return m + ta_log(l); }

/* One row on the host: out[d] (f32, dv features) and the return value (lse)
 * from the n parts; part s of feature d at o[idx0 + s * o_stride + d], its lse
 * at lse[s * lse_stride]. A row with every part empty gives out = 0, -inf. */
TA_MATH_FN float ta_merge_row(const void *o, ta_dtype dt, size_t idx0, size_t o_stride,
                              const float *lse, size_t lse_stride, int32_t n, int32_t dv,
                              float *out) {
    const float m = ta_merge_max(lse, lse_stride, n);
    float l;
    int32_t d;
    if (!ta_merge_live(m)) {
        for (d = 0; d < dv; ++d)
            out[d] = 0.0f;
        return m;
    }
    l = ta_merge_sum(lse, lse_stride, n, m);
    for (d = 0; d < dv; ++d)
        out[d] = ta_merge_feature(o, dt, idx0 + (size_t)d, o_stride, lse, lse_stride, n, m, l);
    return ta_merge_lse(m, l);
}

#endif /* TA_MERGE_H */
