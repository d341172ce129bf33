/*
 * The CPU backend returns the reference backend's bits (docs/design.md 3).
 *
 *   1. the vector widening (f16, bf16 -> f32) of every ISA path equals the
 *      scalar one on all 2^16 inputs; vector exp/log on a strided sample
 *      (test_math_exhaustive --vector covers all 2^32)
 *   2. many random problems (fresh seed, printed; replay with TA_SEED=...):
 *      sizes from 1, odd and prime lengths, S_q != S_k both ways, causal or
 *      not, seqlens_k (0, partial, full), GQA, head dims 1..256, every dtype,
 *      default and explicit tiles (any size in [8, 256]), some inputs with
 *      zeros, signed zeros and subnormals, some lse rows set to -inf. Per
 *      problem the reference runs forward, then backward from its own o and
 *      lse; then the CPU backend runs both under every ISA path the machine
 *      has (forced with TA_CPU_ISA) and with one and several threads, outputs
 *      poisoned and workspace filled with NaN or random bytes, and every
 *      output must be memcmp-equal to the reference's.
 *      About 30% of the problems (SDPA and MTA) have a sliding window
 *      (TA_WINDOW) whose bounds are unbounded, 0, small, around the lengths or
 *      past them; one in eight runs every tensor in the [B, S, H, D] layout
 *      (ta_strides, the reference on the same layout).
 *      A share of the problems (one in four) are MTA: causal, a c_q x c_k
 *      conv (c_q 1..16, odd c_k 1..31, 6x11 and 3x3 more often), random
 *      kernels of mixed signs, default or explicit tiles that leave at least
 *      one effective row and column in both passes, a negative scale now and
 *      then (masked raw scores must stay +0), sequences up to 300 (some up to
 *      600 with a small head dim: several row vectors and Q-tile groups); run
 *      like the others under every ISA path with one and several threads
 *      (c_q and c_k below and above the vector width and the conv/dconv_w
 *      register blocks, so every tail); dconv_w is compared too. The MTA
 *      backward runs in one pass or two by the problem and the thread count
 *      (ta_cpu_mta_one_pass: one thread always one pass, several threads
 *      with few (b, kv heads) two); both must have run (counted per call).
 *   3. every fourth problem also: lse = NULL leaves o unchanged; a workspace
 *      too small for the call's thread count gives TA_ERR_WORKSPACE_SIZE and
 *      leaves every output untouched.
 * Usage: test_cpu_equiv [--quick] [--problems N]
 *   --quick  twelve small problems (valgrind, sanitizers)
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/ta_cpu.h"
#include "cpu/ta_cpu_vmath_avx2.h"
#include "cpu/ta_cpu_vmath_avx512.h"
#include "ta_math.h"
#include "test_util.h"
#include "tileattn.h"

enum { T_O, T_LSE, T_DQ, T_DK, T_DV, T_DW, T_COUNT };
static const char *const tensor_name[T_COUNT] = {"o", "lse", "dq", "dk", "dv", "dconv_w"};
static const char *const dtype_name[3] = {"f32", "f16", "bf16"};

static double now_s(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------- */
/* 1. Vector math of the ISA paths vs the scalar functions                 */
/* ---------------------------------------------------------------------- */

#if defined(TA_HAVE_VMATH_AVX2)
__attribute__((target("avx2,fma"))) static long check_vmath_avx2(void) {
    long bad = 0;
    uint32_t h, u;
    uint16_t in[8];
    float out[8];
    int x;
    for (h = 0; h < 65536u; h += 8) {
        for (x = 0; x < 8; ++x)
            in[x] = (uint16_t)(h + (uint32_t)x);
        _mm256_storeu_ps(out, ta_avx2_f16_to_f32(in));
        for (x = 0; x < 8; ++x)
            bad += ta_f32_bits(out[x]) != ta_f32_bits(ta_f16_to_f32(in[x]));
        _mm256_storeu_ps(out, ta_avx2_bf16_to_f32(in));
        for (x = 0; x < 8; ++x)
            bad += ta_f32_bits(out[x]) != ta_f32_bits(ta_bf16_to_f32(in[x]));
    }
    for (u = 0; u < 0xffffffffu - 8u * 1021u; u += 8u * 1021u) {
        float xs[8];
        for (x = 0; x < 8; ++x)
            xs[x] = ta_f32_from_bits(u + (uint32_t)x * 997u);
        _mm256_storeu_ps(out, ta_avx2_exp(_mm256_loadu_ps(xs)));
        for (x = 0; x < 8; ++x)
            bad += ta_f32_bits(out[x]) != ta_f32_bits(ta_exp(xs[x]));
        _mm256_storeu_ps(out, ta_avx2_log(_mm256_loadu_ps(xs)));
        for (x = 0; x < 8; ++x)
            bad += ta_f32_bits(out[x]) != ta_f32_bits(ta_log(xs[x]));
    }
    return bad;
}
#endif

#if defined(TA_HAVE_VMATH_AVX512)
__attribute__((target("avx512f,avx2,fma"))) static long check_vmath_avx512(void) {
    long bad = 0;
    uint32_t h, u;
    uint16_t in[16];
    float out[16];
    int x;
    for (h = 0; h < 65536u; h += 16) {
        for (x = 0; x < 16; ++x)
            in[x] = (uint16_t)(h + (uint32_t)x);
        _mm512_storeu_ps(out, ta_avx512_f16_to_f32(in));
        for (x = 0; x < 16; ++x)
            bad += ta_f32_bits(out[x]) != ta_f32_bits(ta_f16_to_f32(in[x]));
        _mm512_storeu_ps(out, ta_avx512_bf16_to_f32(in));
        for (x = 0; x < 16; ++x)
            bad += ta_f32_bits(out[x]) != ta_f32_bits(ta_bf16_to_f32(in[x]));
    }
    for (u = 0; u < 0xffffffffu - 16u * 1021u; u += 16u * 1021u) {
        float xs[16];
        for (x = 0; x < 16; ++x)
            xs[x] = ta_f32_from_bits(u + (uint32_t)x * 997u);
        _mm512_storeu_ps(out, ta_avx512_exp(_mm512_loadu_ps(xs)));
        for (x = 0; x < 16; ++x)
            bad += ta_f32_bits(out[x]) != ta_f32_bits(ta_exp(xs[x]));
        _mm512_storeu_ps(out, ta_avx512_log(_mm512_loadu_ps(xs)));
        for (x = 0; x < 16; ++x)
            bad += ta_f32_bits(out[x]) != ta_f32_bits(ta_log(xs[x]));
    }
    return bad;
}
#endif

static void check_vmath(void) {
    const ta_cpu_isa best = ta_cpu_isa_best();
    (void)best;
#if defined(TA_HAVE_VMATH_AVX2)
    if (best >= TA_CPU_ISA_AVX2) {
        const long bad = check_vmath_avx2();
        printf("vector math avx2: f16/bf16 widening on 2^16 inputs, exp/log on a sample: "
               "%ld mismatches\n",
               bad);
        TA_CHECK(bad == 0, "avx2 vector math differs from the scalar functions");
    }
#endif
#if defined(TA_HAVE_VMATH_AVX512)
    if (best >= TA_CPU_ISA_AVX512) {
        const long bad = check_vmath_avx512();
        printf("vector math avx512: f16/bf16 widening on 2^16 inputs, exp/log on a sample: "
               "%ld mismatches\n",
               bad);
        TA_CHECK(bad == 0, "avx512 vector math differs from the scalar functions");
    }
#endif
}

/* ---------------------------------------------------------------------- */
/* 2. Random problems                                                      */
/* ---------------------------------------------------------------------- */

typedef struct tcase {
    ta_problem p;
    int bshd; /* 1: every tensor [B, S, H, D] (strides), else contiguous [B, H, S, D] */
    int32_t *seqlens;
    size_t eb, n[T_COUNT]; /* elements of o, lse, dq (= q), dk (= k), dv (= v), dconv_w */
    void *q, *k, *v, *d_o;
    float *conv_w;      /* MTA: [H, c_q, c_k]; NULL without a conv */
    float *lse_in;      /* the backward's lse: the reference's, some rows -inf */
    void *ref[T_COUNT]; /* reference outputs */
    void *out[T_COUNT]; /* CPU outputs */
} tcase;

static size_t tensor_bytes(const tcase *tc, int t) {
    return tc->n[t] * (t == T_LSE || t == T_DW ? sizeof(float) : tc->eb);
}

static int32_t pick_len(ta_rng *r, int32_t max_len) {
    static const int32_t primes[] = {2, 3, 5, 7, 11, 13, 17, 31, 61, 67, 127, 131, 251, 257, 509};
    const int32_t c = ta_rng_int(r, 0, 99);
    int32_t len;
    if (c < 12) return 1;
    if (c < 32) {
        do
            len = primes[ta_rng_int(r, 0, (int32_t)(sizeof primes / sizeof primes[0]) - 1)];
        while (len > max_len && len > 2);
        return len < max_len ? len : max_len;
    }
    len = c < 52 ? ta_rng_int(r, 2, 17) : ta_rng_int(r, 1, max_len);
    return len < max_len ? len : max_len;
}

static int32_t pick_dim(ta_rng *r) {
    static const int32_t common[] = {16, 32, 64, 80, 96, 128};
    const int32_t c = ta_rng_int(r, 0, 99);
    if (c < 35) return ta_rng_int(r, 1, 20);
    if (c < 65) return common[ta_rng_int(r, 0, 5)];
    if (c < 92) return ta_rng_int(r, 1, 256);
    return ta_rng_int(r, 0, 1) ? 256 : 255;
}

/* 0 (default), any size in [8, 256], small sizes and powers of two more often */
static int32_t pick_block(ta_rng *r) {
    const int32_t c = ta_rng_int(r, 0, 99);
    if (c < 30) return 0;
    if (c < 50) return ta_rng_int(r, 8, 20);
    if (c < 70) return (int32_t)1 << ta_rng_int(r, 3, 8);
    return ta_rng_int(r, 8, 256);
}

/* MTA conv sizes: 6x11 and 3x3 often, else any c_q in 1..16, odd c_k in 1..31. */
static void pick_conv(ta_rng *r, ta_problem *p) {
    const int32_t c = ta_rng_int(r, 0, 9);
    if (c < 3) {
        p->conv_q = 6, p->conv_k = 11;
    } else if (c < 5) {
        p->conv_q = 3, p->conv_k = 3;
    } else {
        p->conv_q = ta_rng_int(r, 1, TA_CONV_Q_MAX);
        p->conv_k = 2 * ta_rng_int(r, 0, (TA_CONV_K_MAX - 1) / 2) + 1;
    }
}

/* An MTA tile size: 0 (the default), or an explicit one in [TA_BLOCK_MIN,
 * TA_BLOCK_MAX] that leaves `min_eff` or more effective rows/columns in the
 * backward (whose halos are `halo`, the sum of both sides) and so in the forward. */
static int32_t pick_mta_block(ta_rng *r, int32_t halo) {
    int32_t lo = halo + 1;
    if (ta_rng_int(r, 0, 9) < 4) return 0;
    lo = lo < TA_BLOCK_MIN ? TA_BLOCK_MIN : lo;
    return ta_rng_int(r, lo, lo + 48 < TA_BLOCK_MAX ? lo + 48 : TA_BLOCK_MAX);
}

static int32_t mta_max_len = 300; /* --quick: 40 */

static int n_window, n_bshd; /* problems with a window, with the [B, S, H, D] layout */

/* A random MTA problem: causal, GQA, seqlens_k, S_q != S_k, every dtype; small
 * (the reference's conv is scalar and slow). */
static void random_mta_problem(ta_rng *r, tcase *tc) {
    ta_problem *p = &tc->p;
    int32_t b;
    memset(tc, 0, sizeof *tc);
    p->batch = ta_rng_int(r, 1, 2);
    p->heads_kv = ta_rng_int(r, 1, 2);
    p->heads_q = p->heads_kv * ta_rng_int(r, 1, 2);
    p->head_dim = ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, 20) : 16 * ta_rng_int(r, 1, 4);
    p->head_dim_v = ta_rng_int(r, 0, 2) == 0 ? p->head_dim : ta_rng_int(r, 1, 64);
    p->dtype = (ta_dtype)ta_rng_int(r, 0, 2);
    p->flags = TA_CAUSAL; /* MTA is causal */
    pick_conv(r, p);
    p->seq_q = ta_rng_int(r, 0, 3) == 0 ? ta_rng_int(r, 1, 9) : ta_rng_int(r, 1, mta_max_len);
    p->seq_k = ta_rng_int(r, 0, 9) < 3 ? p->seq_q : ta_rng_int(r, 1, mta_max_len);
    if (p->conv_q * p->conv_k > 100) { /* big kernels: shorter sequences */
        p->seq_q = 1 + p->seq_q / 3;
        p->seq_k = 1 + p->seq_k / 3;
    } else if (ta_rng_int(r, 0, 9) == 0) { /* longer, narrower: more row vectors */
        p->seq_q = ta_rng_int(r, mta_max_len, 2 * mta_max_len);
        p->seq_k = ta_rng_int(r, 0, 1) ? p->seq_q : ta_rng_int(r, mta_max_len, 2 * mta_max_len);
        p->head_dim = ta_rng_int(r, 1, 16);
        p->head_dim_v = ta_rng_int(r, 1, 16);
        p->batch = p->heads_q = p->heads_kv = 1;
    }
    p->block_q = pick_mta_block(r, 2 * (p->conv_q - 1));
    p->block_k = pick_mta_block(r, 4 * ((p->conv_k - 1) / 2));
    if (ta_rng_int(r, 0, 9) < 3)
        p->scale = ta_rng_uniform(r, 0.25f, 2.0f) / sqrtf((float)p->head_dim);
    if (ta_rng_int(r, 0, 9) == 0)
        p->scale = -ta_rng_uniform(r, 0.25f, 2.0f) / sqrtf((float)p->head_dim);
    if (ta_rng_int(r, 0, 9) < 4) {
        tc->seqlens = (int32_t *)malloc((size_t)p->batch * sizeof(int32_t));
        for (b = 0; b < p->batch; ++b) {
            const int32_t c = ta_rng_int(r, 0, 99);
            tc->seqlens[b] = c < 15 ? 0 : c < 40 ? p->seq_k : ta_rng_int(r, 1, p->seq_k);
        }
    }
    ta_test_random_window(r, p, 30);
    tc->bshd = ta_rng_int(r, 0, 7) == 0;
}

/* A random problem whose work B*H*S_q*S_k*(D+D_v) stays under `work`. */
static void random_problem(ta_rng *r, tcase *tc, double work) {
    ta_problem *p = &tc->p;
    double max_len;
    int32_t b;
    memset(tc, 0, sizeof *tc);
    p->batch = ta_rng_int(r, 0, 9) == 0 ? 3 : ta_rng_int(r, 1, 2);
    p->heads_kv = ta_rng_int(r, 1, 2);
    p->heads_q = p->heads_kv * ta_rng_int(r, 1, 3);
    p->head_dim = pick_dim(r);
    p->head_dim_v = ta_rng_int(r, 0, 2) == 0 ? p->head_dim : pick_dim(r);
    p->dtype = (ta_dtype)ta_rng_int(r, 0, 2);
    p->flags = ta_rng_int(r, 0, 1) ? TA_CAUSAL : 0u;
    max_len = sqrt(work / ((double)p->batch * p->heads_q * (p->head_dim + p->head_dim_v)));
    max_len = max_len < 2.0 ? 2.0 : (max_len > 600.0 ? 600.0 : max_len);
    p->seq_q = pick_len(r, (int32_t)max_len);
    p->seq_k = ta_rng_int(r, 0, 9) < 3 ? p->seq_q : pick_len(r, (int32_t)max_len);
    p->block_q = pick_block(r);
    p->block_k = pick_block(r);
    if (ta_rng_int(r, 0, 9) < 3) /* explicit scale, sometimes negative */
        p->scale = ta_rng_uniform(r, ta_rng_int(r, 0, 9) == 0 ? -2.0f : 0.25f, 2.0f) /
                   sqrtf((float)p->head_dim);
    if (ta_rng_int(r, 0, 9) < 4) {
        tc->seqlens = (int32_t *)malloc((size_t)p->batch * sizeof(int32_t));
        for (b = 0; b < p->batch; ++b) {
            const int32_t c = ta_rng_int(r, 0, 99);
            tc->seqlens[b] = c < 15 ? 0 : c < 40 ? p->seq_k : ta_rng_int(r, 1, p->seq_k);
        }
    }
    ta_test_random_window(r, p, 30);
    tc->bshd = ta_rng_int(r, 0, 7) == 0;
}

/* Some elements replaced by +-0 and subnormals of the dtype (rounding of the
 * f32 value takes care of the dtype's own subnormal range). */
static void sprinkle_specials(ta_rng *r, void *buf, ta_dtype dt, size_t n) {
    static const float specials[] = {0.0f, -0.0f, 1e-40f, -3e-39f, 6e-8f, -6e-8f, 1e-30f};
    size_t i, count = n / 16 + 1;
    for (i = 0; i < count; ++i) {
        const size_t at = (size_t)ta_rng_u64(r) % n;
        const float x = specials[ta_rng_int(r, 0, 6)];
        switch (dt) {
        case TA_F32: ((float *)buf)[at] = x; break;
        case TA_F16: ((uint16_t *)buf)[at] = ta_f32_to_f16(x); break;
        case TA_BF16: ((uint16_t *)buf)[at] = ta_f32_to_bf16(x); break;
        }
    }
}

static void make_buffers(ta_rng *r, tcase *tc) {
    const ta_problem *p = &tc->p;
    /* q, k range sets the score spread: wide ones drive exp to subnormals and 0 */
    const float a =
        ta_rng_int(r, 0, 9) == 0 ? ta_rng_uniform(r, 4.0f, 12.0f) : ta_rng_uniform(r, 0.5f, 2.5f);
    int t;
    tc->eb = ta_dtype_size(p->dtype);
    tc->n[T_LSE] = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    tc->n[T_DQ] = tc->n[T_LSE] * (size_t)p->head_dim;
    tc->n[T_O] = tc->n[T_LSE] * (size_t)p->head_dim_v;
    tc->n[T_DK] = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k * (size_t)p->head_dim;
    tc->n[T_DV] = tc->n[T_DK] / (size_t)p->head_dim * (size_t)p->head_dim_v;
    tc->n[T_DW] = (size_t)p->heads_q * (size_t)p->conv_q * (size_t)p->conv_k;
    tc->q = ta_test_alloc(tc->n[T_DQ] * tc->eb);
    tc->k = ta_test_alloc(tc->n[T_DK] * tc->eb);
    tc->v = ta_test_alloc(tc->n[T_DV] * tc->eb);
    tc->d_o = ta_test_alloc(tc->n[T_O] * tc->eb);
    tc->lse_in = (float *)ta_test_alloc(tc->n[T_LSE] * sizeof(float));
    for (t = 0; t < T_COUNT; ++t) {
        tc->ref[t] = ta_test_alloc(tensor_bytes(tc, t));
        tc->out[t] = ta_test_alloc(tensor_bytes(tc, t));
    }
    ta_fill_uniform(r, tc->q, p->dtype, tc->n[T_DQ], -a, a);
    ta_fill_uniform(r, tc->k, p->dtype, tc->n[T_DK], -a, a);
    ta_fill_uniform(r, tc->v, p->dtype, tc->n[T_DV], -1.0f, 1.0f);
    ta_fill_uniform(r, tc->d_o, p->dtype, tc->n[T_O], -1.0f, 1.0f);
    if (p->conv_q > 0) { /* mixed signs, some exact zeros */
        size_t i;
        tc->conv_w = (float *)ta_test_alloc(tc->n[T_DW] * sizeof(float));
        ta_fill_uniform(r, tc->conv_w, TA_F32, tc->n[T_DW], -1.0f, 1.0f);
        for (i = 0; i < tc->n[T_DW] / 8; ++i)
            tc->conv_w[(size_t)ta_rng_u64(r) % tc->n[T_DW]] = 0.0f;
    }
    if (ta_rng_int(r, 0, 9) == 0) {
        sprinkle_specials(r, tc->q, p->dtype, tc->n[T_DQ]);
        sprinkle_specials(r, tc->k, p->dtype, tc->n[T_DK]);
        sprinkle_specials(r, tc->v, p->dtype, tc->n[T_DV]);
        sprinkle_specials(r, tc->d_o, p->dtype, tc->n[T_O]);
    }
}

static void free_case(tcase *tc) {
    int t;
    ta_test_free(tc->q);
    ta_test_free(tc->k);
    ta_test_free(tc->v);
    ta_test_free(tc->d_o);
    ta_test_free(tc->lse_in);
    ta_test_free(tc->conv_w);
    for (t = 0; t < T_COUNT; ++t) {
        ta_test_free(tc->ref[t]);
        ta_test_free(tc->out[t]);
    }
    free(tc->seqlens);
}

static void describe(const tcase *tc, char *buf, size_t n) {
    const ta_problem *p = &tc->p;
    char win[48] = "";
    if (p->flags & TA_WINDOW)
        snprintf(win, sizeof win, " window(%d,%d)", p->window_left, p->window_right);
    snprintf(buf, n,
             "B=%d H=%d H_kv=%d S_q=%d S_k=%d D=%d D_v=%d %s %s%s conv %dx%d blocks %d,%d "
             "scale %g%s%s",
             p->batch, p->heads_q, p->heads_kv, p->seq_q, p->seq_k, p->head_dim, p->head_dim_v,
             dtype_name[p->dtype], (p->flags & TA_CAUSAL) ? "causal" : "full", win, p->conv_q,
             p->conv_k, p->block_q, p->block_k, (double)p->scale, tc->seqlens ? " seqlens" : "",
             tc->bshd ? " BSHD" : "");
}

/* Strides of a [B, heads, S, dim] tensor held as [B, S, heads, dim] (no gaps),
 * or zeros (contiguous). */
static ta_strides layout_of(const tcase *tc, int32_t heads, int32_t seq, int32_t dim) {
    ta_strides st;
    memset(&st, 0, sizeof st);
    return tc->bshd ? ta_test_strides_bshd(heads, seq, dim) : st;
}

/* Workspace of `bytes` (at least 64), filled with NaN bytes or random bytes:
 * the results must not depend on what it held. */
static void *make_workspace(ta_rng *r, size_t bytes, int kind) {
    unsigned char *ws = (unsigned char *)ta_test_alloc(bytes ? bytes : 64);
    size_t i;
    if (kind == 0) {
        ta_poison(ws, bytes);
    } else {
        for (i = 0; i < bytes; ++i)
            ws[i] = (unsigned char)ta_rng_u64(r);
    }
    return ws;
}

static ta_fwd_args fwd_args(const tcase *tc, void *const *out) {
    ta_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = tc->q;
    a.k = tc->k;
    a.v = tc->v;
    a.seqlens_k = tc->seqlens;
    a.o = out[T_O];
    a.lse = (float *)out[T_LSE];
    a.conv_w = tc->conv_w;
    a.q_strides = layout_of(tc, tc->p.heads_q, tc->p.seq_q, tc->p.head_dim);
    a.k_strides = layout_of(tc, tc->p.heads_kv, tc->p.seq_k, tc->p.head_dim);
    a.v_strides = layout_of(tc, tc->p.heads_kv, tc->p.seq_k, tc->p.head_dim_v);
    a.o_strides = layout_of(tc, tc->p.heads_q, tc->p.seq_q, tc->p.head_dim_v);
    return a;
}

static ta_bwd_args bwd_args(const tcase *tc, void *const *out) {
    ta_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = tc->q;
    a.k = tc->k;
    a.v = tc->v;
    a.o = tc->ref[T_O];
    a.d_o = tc->d_o;
    a.lse = tc->lse_in;
    a.seqlens_k = tc->seqlens;
    a.dq = out[T_DQ];
    a.dk = out[T_DK];
    a.dv = out[T_DV];
    a.conv_w = tc->conv_w;
    a.dconv_w = tc->conv_w ? (float *)out[T_DW] : NULL;
    a.q_strides = a.dq_strides = layout_of(tc, tc->p.heads_q, tc->p.seq_q, tc->p.head_dim);
    a.k_strides = a.dk_strides = layout_of(tc, tc->p.heads_kv, tc->p.seq_k, tc->p.head_dim);
    a.v_strides = a.dv_strides = layout_of(tc, tc->p.heads_kv, tc->p.seq_k, tc->p.head_dim_v);
    a.o_strides = a.d_o_strides = layout_of(tc, tc->p.heads_q, tc->p.seq_q, tc->p.head_dim_v);
    return a;
}

/* The reference outputs: forward, then backward from its own o and an lse
 * with, sometimes, a few rows set to -inf (a caller may pass those: such rows
 * are not live, whatever their keys). */
static int run_reference(ta_rng *r, tcase *tc) {
    ta_fwd_args fa = fwd_args(tc, tc->ref);
    ta_bwd_args ba = bwd_args(tc, tc->ref);
    size_t fb = 0, bb = 0, i;
    void *ws;
    ta_status st;
    int t;
    for (t = 0; t < T_COUNT; ++t)
        ta_poison(tc->ref[t], tensor_bytes(tc, t));
    st = ta_fwd_workspace_size(&tc->p, TA_BACKEND_REF, &fb);
    if (st == TA_OK) st = ta_bwd_workspace_size(&tc->p, TA_BACKEND_REF, &bb);
    TA_CHECK(st == TA_OK, "reference size query: %s", ta_status_string(st));
    if (st != TA_OK) return 0;
    ws = make_workspace(r, fb > bb ? fb : bb, 0);
    st = ta_fwd(&tc->p, TA_BACKEND_REF, &fa, ws, fb > bb ? fb : bb, NULL);
    TA_CHECK(st == TA_OK, "reference forward: %s", ta_status_string(st));
    memcpy(tc->lse_in, tc->ref[T_LSE], tensor_bytes(tc, T_LSE));
    if (ta_rng_int(r, 0, 9) == 0)
        for (i = 0; i < tc->n[T_LSE] / 8 + 1; ++i)
            tc->lse_in[(size_t)ta_rng_u64(r) % tc->n[T_LSE]] = -INFINITY;
    if (st == TA_OK) st = ta_bwd(&tc->p, TA_BACKEND_REF, &ba, ws, fb > bb ? fb : bb, NULL);
    TA_CHECK(st == TA_OK, "reference backward: %s", ta_status_string(st));
    ta_test_free(ws);
    return st == TA_OK;
}

/* memcmp one tensor; on a difference print the first differing element. */
static int same_tensor(const tcase *tc, int t, const char *what) {
    const int f32 = t == T_LSE || t == T_DW;
    const size_t eb = f32 ? sizeof(float) : tc->eb;
    const unsigned char *x = (const unsigned char *)tc->out[t],
                        *y = (const unsigned char *)tc->ref[t];
    size_t i;
    char desc[256];
    if (memcmp(x, y, tensor_bytes(tc, t)) == 0) return 1;
    for (i = 0; i < tc->n[t]; ++i)
        if (memcmp(x + i * eb, y + i * eb, eb) != 0) break;
    describe(tc, desc, sizeof desc);
    TA_CHECK(0, "%s: %s differs at element %zu of %zu: cpu %.9g, ref %.9g (%s)", what,
             tensor_name[t], i, tc->n[t], ta_get(tc->out[t], f32 ? TA_F32 : tc->p.dtype, i),
             ta_get(tc->ref[t], f32 ? TA_F32 : tc->p.dtype, i), desc);
    return 0;
}

static long n_runs[3][2];  /* [isa][several threads?]: CPU calls compared */
static long n_mta_runs[2]; /* [several threads?]: of those, MTA problems */
static long n_mta_problems, n_mta_6x11, n_mta_3x3;
static long n_mta_pass[2]; /* MTA backward runs in two passes [0] or one [1] (ta_cpu_mta_one_pass) */

/* Which MTA backward the CPU call with num_threads = threads runs (the rule
 * of ta_cpu_mta_one_pass for the thread count the call resolves). */
static int mta_one_pass(const ta_problem *p, int32_t threads) {
    ta_plan plan;
    int32_t n = 1;
#ifdef _OPENMP
    n = threads > 0 ? threads : (int32_t)omp_get_max_threads();
    n = n > TA_THREADS_MAX ? TA_THREADS_MAX : n;
#else
    (void)threads;
#endif
    if (ta_plan_make(p, TA_BACKEND_CPU, &plan, NULL) != TA_OK) return -1;
    return ta_cpu_mta_one_pass(&plan, n);
}

/* CPU forward and backward with this ISA and thread count vs the reference. */
static void run_cpu(ta_rng *r, tcase *tc, ta_cpu_isa isa, int32_t threads) {
    ta_problem p = tc->p;
    ta_fwd_args fa = fwd_args(tc, tc->out);
    ta_bwd_args ba = bwd_args(tc, tc->out);
    size_t fb = 0, bb = 0;
    void *ws;
    ta_status st;
    char what[64];
    int t;
    p.num_threads = threads;
    setenv("TA_CPU_ISA", ta_cpu_isa_name(isa), 1);
    TA_CHECK(ta_cpu_isa_resolve() == isa, "TA_CPU_ISA=%s not honoured", ta_cpu_isa_name(isa));
    snprintf(what, sizeof what, "cpu %s, %d thread(s)", ta_cpu_isa_name(isa), (int)threads);
    st = ta_fwd_workspace_size(&p, TA_BACKEND_CPU, &fb);
    if (st == TA_OK) st = ta_bwd_workspace_size(&p, TA_BACKEND_CPU, &bb);
    TA_CHECK(st == TA_OK, "%s: size query: %s", what, ta_status_string(st));
    if (st != TA_OK) return;
    for (t = 0; t < T_COUNT; ++t)
        ta_poison(tc->out[t], tensor_bytes(tc, t));
    ws = make_workspace(r, fb, ta_rng_int(r, 0, 1));
    st = ta_fwd(&p, TA_BACKEND_CPU, &fa, ws, fb, NULL);
    TA_CHECK(st == TA_OK, "%s: forward: %s", what, ta_status_string(st));
    ta_test_free(ws);
    ws = make_workspace(r, bb, ta_rng_int(r, 0, 1));
    st = ta_bwd(&p, TA_BACKEND_CPU, &ba, ws, bb, NULL);
    TA_CHECK(st == TA_OK, "%s: backward: %s", what, ta_status_string(st));
    ta_test_free(ws);
    for (t = 0; t < T_COUNT; ++t)
        same_tensor(tc, t, what);
    n_runs[isa][threads != 1]++;
    if (p.conv_q > 0) {
        const int one = mta_one_pass(&p, threads);
        TA_CHECK(one >= 0, "%s: no plan", what);
        n_mta_runs[threads != 1]++;
        if (one >= 0) n_mta_pass[one]++;
    }
}

/* lse = NULL leaves o as it was; a workspace too small for the call's thread
 * count is refused before anything is written. */
static void run_extras(ta_rng *r, tcase *tc, ta_cpu_isa isa) {
    ta_problem p = tc->p;
    ta_fwd_args fa = fwd_args(tc, tc->out);
    size_t fb1 = 0, fb = 0;
    void *ws;
    ta_status st;
    setenv("TA_CPU_ISA", ta_cpu_isa_name(isa), 1);
    p.num_threads = 3;
    (void)ta_fwd_workspace_size(&p, TA_BACKEND_CPU, &fb);
    ws = make_workspace(r, fb, 1);
    ta_poison(tc->out[T_O], tensor_bytes(tc, T_O));
    fa.lse = NULL;
    st = ta_fwd(&p, TA_BACKEND_CPU, &fa, ws, fb, NULL);
    TA_CHECK(st == TA_OK, "forward without lse: %s", ta_status_string(st));
    same_tensor(tc, T_O, "forward without lse");
    /* a workspace one byte short of what three threads need: refused before
     * any write; and one sized for a single thread, which is too small for
     * three unless one thread's tiles happen to be larger (ta_cpu_q_group
     * holds more Q tiles per task when there are fewer threads) */
    p.num_threads = 1;
    (void)ta_fwd_workspace_size(&p, TA_BACKEND_CPU, &fb1);
    p.num_threads = 3;
    fa.lse = (float *)tc->out[T_LSE];
    ta_canary_fill(tc->out[T_O], tensor_bytes(tc, T_O));
    ta_canary_fill(tc->out[T_LSE], tensor_bytes(tc, T_LSE));
    st = ta_fwd(&p, TA_BACKEND_CPU, &fa, ws, fb - 1, NULL);
    TA_CHECK(st == TA_ERR_WORKSPACE_SIZE, "workspace 1 byte short: %s", ta_status_string(st));
    TA_CHECK(ta_canary_intact(tc->out[T_O], tensor_bytes(tc, T_O)) &&
                 ta_canary_intact(tc->out[T_LSE], tensor_bytes(tc, T_LSE)),
             "refused call (1 byte short) wrote an output");
    st = ta_fwd(&p, TA_BACKEND_CPU, &fa, ws, fb1, NULL);
#ifdef _OPENMP
    TA_CHECK(st == (fb1 < fb ? TA_ERR_WORKSPACE_SIZE : TA_OK), "3 threads, 1-thread workspace: %s",
             ta_status_string(st));
#else
    TA_CHECK(st == TA_OK && fb1 == fb, "no OpenMP: one thread, whatever num_threads says");
#endif
    if (st != TA_OK)
        TA_CHECK(ta_canary_intact(tc->out[T_O], tensor_bytes(tc, T_O)) &&
                     ta_canary_intact(tc->out[T_LSE], tensor_bytes(tc, T_LSE)),
                 "refused call wrote an output");
    else
        same_tensor(tc, T_O, "3 threads, 1-thread workspace");
    ta_test_free(ws);
}

/*
 * One small CPU forward with the largest team the run uses, before anything
 * else. LLVM's libomp (14) loses its old thread array when a later parallel
 * region grows the team past the size of the first one: valgrind reports it
 * as definitely lost (libgomp does not). Starting with the largest team
 * avoids that; it changes nothing else.
 */
static void first_team_largest(ta_rng *r) {
    tcase tc;
    int32_t most = 7;
#ifdef _OPENMP
    if (omp_get_max_threads() > most) most = (int32_t)omp_get_max_threads();
#endif
    memset(&tc, 0, sizeof tc);
    tc.p.batch = 1;
    tc.p.heads_q = tc.p.heads_kv = 1;
    tc.p.seq_q = tc.p.seq_k = 3;
    tc.p.head_dim = tc.p.head_dim_v = 4;
    make_buffers(r, &tc);
    if (run_reference(r, &tc)) run_cpu(r, &tc, ta_cpu_isa_best(), most);
    free_case(&tc);
}

/* ISA paths this machine runs, in the order they are tried. */
static int machine_isas(ta_cpu_isa *isas) {
    const ta_cpu_isa best = ta_cpu_isa_best();
    int n = 0, i;
    for (i = TA_CPU_ISA_SCALAR; i <= (int)best; ++i)
        isas[n++] = (ta_cpu_isa)i;
    return n;
}

static void run_problem(ta_rng *r, tcase *tc, int index) {
    static const int32_t several[] = {2, 3, 4, 7};
    ta_cpu_isa isas[3];
    const int n_isa = machine_isas(isas);
    int i;
    if (!run_reference(r, tc)) return;
    n_window += (tc->p.flags & TA_WINDOW) != 0;
    n_bshd += tc->bshd;
    if (tc->p.conv_q > 0) { /* MTA: the same runs as SDPA below */
        n_mta_problems++;
        n_mta_6x11 += tc->p.conv_q == 6 && tc->p.conv_k == 11;
        n_mta_3x3 += tc->p.conv_q == 3 && tc->p.conv_k == 3;
    }
    for (i = 0; i < n_isa; ++i) {
        const int32_t many = several[ta_rng_int(r, 0, 3)];
        /* the scalar path costs as much as the reference: one thread count
         * per problem, alternating */
        if (isas[i] == TA_CPU_ISA_SCALAR) {
            run_cpu(r, tc, isas[i], index % 2 ? many : 1);
            continue;
        }
        run_cpu(r, tc, isas[i], ta_rng_int(r, 0, 4) == 0 ? 0 : 1);
        run_cpu(r, tc, isas[i], many);
    }
    if (index % 4 == 0 || (tc->p.conv_q > 0 && index % 8 == 3)) run_extras(r, tc, isas[n_isa - 1]);
}

int main(int argc, char **argv) {
    const char *isa_env = getenv("TA_CPU_ISA");
    char *saved_env = isa_env ? strdup(isa_env) : NULL;
    int quick = 0, n_problems = 320, i;
    uint64_t seed;
    ta_rng rng;
    double t0, work;
    ta_cpu_isa isas[3];
    int n_isa;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
            n_problems = 12;
            mta_max_len = 40;
        } else if (strcmp(argv[i], "--problems") == 0 && i + 1 < argc) {
            n_problems = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--quick] [--problems N]\n", argv[0]);
            return 2;
        }
    }
    seed = ta_test_seed("test_cpu_equiv");
    ta_rng_seed(&rng, seed);
    TA_CHECK(ta_backend_available(TA_BACKEND_CPU), "the CPU backend is not available");
    n_isa = machine_isas(isas);
    printf("ISA paths on this machine:");
    for (i = 0; i < n_isa; ++i)
        printf(" %s", ta_cpu_isa_name(isas[i]));
    printf("\n");
    t0 = now_s();
    first_team_largest(&rng);
    if (!quick) check_vmath();
    work = quick ? 2e4 : 5e6;
    for (i = 0; i < n_problems; ++i) {
        tcase tc;
        if (i % 4 == 3)
            random_mta_problem(&rng, &tc);
        else
            random_problem(&rng, &tc, ta_rng_int(&rng, 0, 9) == 0 ? work * 8 : work);
        make_buffers(&rng, &tc);
        run_problem(&rng, &tc, i);
        free_case(&tc);
    }
    printf("%d problems in %.1f s; CPU calls compared (fwd + bwd each):\n", n_problems,
           now_s() - t0);
    for (i = 0; i < n_isa; ++i)
        printf("  %-7s 1 thread: %4ld   several threads: %4ld\n", ta_cpu_isa_name(isas[i]),
               n_runs[isas[i]][0], n_runs[isas[i]][1]);
    printf("  of which MTA: %ld problems (%ld 6x11, %ld 3x3), 1 thread: %ld   several threads: "
           "%ld\n",
           n_mta_problems, n_mta_6x11, n_mta_3x3, n_mta_runs[0], n_mta_runs[1]);
    printf("  MTA backward in one pass: %ld calls, in two passes: %ld\n", n_mta_pass[1],
           n_mta_pass[0]);
#ifdef _OPENMP /* one thread always takes one pass; several threads and few (b, kv heads) two */
    TA_CHECK(quick || (n_mta_pass[0] > 0 && n_mta_pass[1] > 0),
             "the MTA backward ran in one way only");
#endif
    printf("  problems with a sliding window: %d; in the [B, S, H, D] layout: %d\n", n_window,
           n_bshd);
    if (saved_env)
        setenv("TA_CPU_ISA", saved_env, 1);
    else
        unsetenv("TA_CPU_ISA");
    free(saved_env);
    return ta_test_finish("test_cpu_equiv");
}
