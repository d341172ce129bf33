/*
 * The forward's running sums (the softmax denominator l and the output
 * accumulator acc of every row), kept as a pair of floats (hi, lo) whose sum
 * holds the value to about 2^-48 relative (docs/exactness.md section 11). One
 * source, compiled as C and as CUDA; the CPU backend's vector layer runs the
 * same sequence lane by lane (ta_cpu_stages.inc, v_sum2_add).
 *
 * Why: one f32 running sum stops growing once a term is below half its ulp
 * (1 + 1 + ... stays at 2^24), and TA_SEQ_MAX is 2^30. So each K tile sums its
 * own terms from +0 (a partial of at most B_c terms), and the partial enters
 * the pair with the double-word + word addition below (2Sum, then Fast2Sum),
 * whose error is a few u^2 of the running value whatever the number of tiles.
 *
 * Every operation is one IEEE binary32 +, - or *, in this order (no fmaf, no
 * contraction: the build's -ffp-contract=off, -fmad=false):
 *
 *   a  = hi * alpha;  c = lo * alpha     rescale both words (alpha = 1: exact)
 *   s  = a + part                          2Sum: s + e = a + part exactly
 *   b  = s - a
 *   e  = (a - (s - b)) + (part - b)
 *   w  = c + e
 *   hi = w != w ? s : s + w                Fast2Sum: hi + lo = s + w exactly
 *   lo = w - (hi - s)
 *
 * hi is the pair's value rounded to f32 (Fast2Sum's result is RN(s + w)), so
 * the store reads hi alone. The select keeps an infinite sum infinite: when s
 * or a is infinite, s - a or s - b is inf - inf and w a NaN, which must not
 * reach hi (it would turn an overflow, or an infinite v, into a NaN row); a
 * NaN part or alpha makes s a NaN anyway. For finite values w is never a NaN
 * and the select is the plain Fast2Sum.
 */
#ifndef TA_SUM2_H
#define TA_SUM2_H

#ifndef TA_SUM2_FN
#if defined(__CUDACC__)
#define TA_SUM2_FN static inline __host__ __device__
#else
#define TA_SUM2_FN static inline
#endif
#endif

/*
 * The backward's long sums use the same addition with alpha = 1 (no rescale),
 * one partial per chunk of TA_SUM2_CHUNK consecutive indices [64c, 64c + 64)
 * of the summed direction: dq_i over the keys of chunk c; dk_j and dv_j over
 * the rows of chunk c of one query head (heads ascending, then chunks). The
 * chunks are absolute, so the backward's bits still depend on no tile size
 * (docs/design.md 3.5; a chunk may span tiles, a tile may hold several).
 * Adding a partial of +0 leaves hi unchanged (hi is never -0, and once it is
 * infinite or NaN, lo no longer reaches it), so a backend may skip a chunk
 * it has no live entry of. docs/exactness.md section 11.
 */
#define TA_SUM2_CHUNK 64

#ifdef __cplusplus
extern "C" {
#endif

/* (hi, lo) = (hi, lo) * alpha + part: the sequence of the header comment. */
TA_SUM2_FN void ta_sum2_add(float *hi, float *lo, float alpha, float part) {
    const float a = *hi * alpha, c = *lo * alpha;
    const float s = a + part;
    const float b = s - a;
    const float e = (a - (s - b)) + (part - b);
    const float w = c + e;
    const float h = w != w ? s : s + w;
    *hi = h;
    *lo = w - (h - s);
}

#ifdef __cplusplus
}
#endif

#endif /* TA_SUM2_H */
