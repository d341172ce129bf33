/*
 * Golden hashes of reference outputs (docs/design.md 7; issue 3 item 4).
 *
 * A fixed list of problems (SDPA and MTA, every dtype, GQA, seqlens_k (also with
 * seqlens_k[0] < S_k), S_q != S_k both ways, odd sizes, default and
 * non-power-of-two tiles; latent attention with the reciprocal band and the
 * fused projections, whose extra outputs d_alpha, dw_qlat, dw_vup are hashed
 * after the others) runs a forward and a
 * backward on TA_BACKEND_REF; the raw bytes of every output (o, lse, dq, dk, dv,
 * dconv_w) are hashed with FNV-1a 64. The expected hashes are checked in under
 * test/golden/hashes.txt, so equal hashes under gcc and clang, -O0 and -O3, and
 * on another architecture show the exactness contract (docs/design.md 3) holds there.
 *
 * The inputs must themselves be bit-exact everywhere: every value is a small
 * integer from the in-tree PRNG (ta_rng, splitmix64: integer arithmetic only)
 * times a power of two, so it is exact in f32, f16 and bf16 and no float
 * arithmetic or libm is involved in making it.
 *
 *   test_golden HASHES          check every problem against the file
 *   test_golden --print         print "name hash" lines (regenerate the file:
 *                               test_golden --print > test/golden/hashes.txt)
 * Exit: 0 all equal; 1 a difference, a missing line or a failed call; 2 usage.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ta_math.h"
#include "test_util.h"
#include "tileattn.h"

/* One golden problem. seqlens: up to 3 batches, used when has_seqlens. */
typedef struct golden {
    const char *name;
    int32_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim, head_dim_v;
    ta_dtype dtype;
    uint32_t flags;
    int32_t conv_q, conv_k, block_q, block_k;
    float scale;
    int has_seqlens;
    int32_t seqlens[3];
} golden;

#define C TA_CAUSAL
/* clang-format off */
static const golden k_problems[] = {
 /* name                      B  H Hkv  Sq   Sk    D   Dv  dtype    flags cq ck  bq   bk  scale  seqlens */
 {"sdpa_f32_causal",          1, 2, 2,  64,  64,  32,  32, TA_F32,  C,    0, 0,  0,   0,  0.0f,  0, {0}},
 {"sdpa_f32_full_sq_lt_sk",   1, 3, 1,  37,  91,  16,  24, TA_F32,  0,    0, 0,  0,   0,  0.0f,  0, {0}},
 {"sdpa_f16_gqa_seqlens",     2, 4, 2,  53,  53,  24,  40, TA_F16,  C,    0, 0,  0,   0,  0.0f,  1, {53, 17}},
 {"sdpa_bf16_sq_gt_sk",       1, 2, 2,  90,  33,  20,  20, TA_BF16, C,    0, 0,  0,   0,  0.0f,  0, {0}},
 {"sdpa_f32_blocks_9x54",     2, 2, 1,  71,  97,  12,   8, TA_F32,  C,    0, 0,  9,  54,  0.0f,  1, {97, 0}},
 {"sdpa_f16_d256",            1, 1, 1,  19,  23, 256, 256, TA_F16,  C,    0, 0,  0,   0,  0.0f,  0, {0}},
 {"sdpa_f32_s1_neg_scale",    1, 2, 1,   1,   1,   7,   5, TA_F32,  C,    0, 0,  0,   0, -0.7f,  0, {0}},
 {"mta_f32_6x11",             1, 2, 2, 100, 100,  32,  32, TA_F32,  C,    6, 11, 0,   0,  0.0f,  0, {0}},
 {"mta_f16_6x11_gqa_seqlens", 2, 4, 2,  77,  77,  16,  16, TA_F16,  C,    6, 11, 0,   0,  0.0f,  1, {77, 40}},
 {"mta_bf16_3x3",             1, 2, 1,  65,  65,  24,  16, TA_BF16, C,    3, 3,  0,   0,  0.0f,  0, {0}},
 {"mta_f32_16x31",            1, 1, 1,  70,  70,   8,   8, TA_F32,  C,   16, 31, 0,   0,  0.0f,  0, {0}},
 {"mta_f32_1x1",              1, 2, 2,  41,  41,   8,   8, TA_F32,  C,    1, 1,  0,   0,  0.0f,  0, {0}},
 {"mta_f32_sq_gt_sk",         1, 2, 1,  75,  40,  16,  16, TA_F32,  C,    6, 11, 0,   0,  0.0f,  0, {0}},
 {"mta_f16_sq_lt_sk",         1, 2, 2,  31,  90,  16,  24, TA_F16,  C,    4, 7,  0,   0,  0.0f,  0, {0}},
 {"mta_f32_min_blocks",       1, 2, 2,  45,  45,   8,   8, TA_F32,  C,    4, 5,  8,   9,  0.0f,  0, {0}},
 {"mta_bf16_blocks_33x54",    2, 2, 2,  83,  83,  16,  16, TA_BF16, C,    6, 11, 33, 54,  0.0f,  1, {83, 61}},
 {"mta_f32_s_lt_kernel",      1, 2, 2,   3,   3,   8,   8, TA_F32,  C,    6, 11, 0,   0,  0.0f,  0, {0}},
 {"mta_f16_seqlens_0",        3, 2, 1,  29,  29,  12,  12, TA_F16,  C,    3, 5,  0,   0,  0.0f,  1, {29, 0, 11}},
 {"mta_f32_odd_dims",         1, 3, 3,  59,  61,   1,   7, TA_F32,  C,    5, 7,  0,   0,  0.0f,  0, {0}},
 {"mta_f32_neg_scale",        1, 2, 2,  48,  48,  16,  16, TA_F32,  C,    2, 3,  0,   0, -0.5f,  0, {0}},
 {"mta_bf16_gqa_h6",          1, 6, 2,  57,  57,  32,  32, TA_BF16, C,    6, 11, 0,   0,  0.0f,  0, {0}},
 /* seqlens_k[0] < S_k: the first batch's keys cut short (issue 15 found 7) */
 {"sdpa_f32_seqlens0_short",  2, 2, 1,  40,  70,  16,  12, TA_F32,  C,    0, 0,  0,   0,  0.0f,  1, {33, 70}},
 {"sdpa_bf16_full_seqlens0_5",2, 2, 2,  23,  19,   8,   8, TA_BF16, 0,    0, 0,  0,  13,  0.0f,  1, {5, 19}},
 {"mta_f32_seqlens0_short",   2, 2, 2,  60,  60,  16,  16, TA_F32,  C,    6, 11, 0,   0,  0.0f,  1, {37, 60}},
 {"mta_f16_seqlens0_1",       3, 2, 1,  45,  45,   8,   8, TA_F16,  C,    3, 5,  0,   0,  0.0f,  1, {1, 45, 0}},
};
/* clang-format on */

/* Latent attention (issue 14): a golden problem with the band's alpha and
 * width (TA_RBAND in flags) and the projections' latent_dim. Inputs seeded by
 * the name as above; alpha a short binary fraction. */
typedef struct golden_lat {
    golden g;
    float alpha;
    int32_t width, latent_dim;
} golden_lat;
#define R TA_RBAND
/* clang-format off */
static const golden_lat k_latent[] = {
 /* name                       B  H Hkv  Sq  Sk   D  Dv  dtype    flags cq ck bq  bk  scale seqlens   alpha  W  L */
 {{"rband_f32_w5",             1, 4, 1,  48, 48, 16, 16, TA_F32,  C|R,  0, 0, 0,  0, 0.0f,  0, {0}},  0.75f,  5, 0},
 {{"rband_bf16_w0_blocks",     2, 3, 1,  37, 37, 24, 24, TA_BF16, C|R,  0, 0, 13, 21, 0.0f, 0, {0}}, -0.5f,   0, 0},
 {{"rband_f16_gqa_wide",       1, 4, 2,  40, 40,  8, 12, TA_F16,  C|R,  0, 0, 0,  0, 0.0f,  0, {0}},  1.25f, 100, 0},
 {{"rband_f32_alpha0_w9",      1, 2, 1,  70, 70, 12, 12, TA_F32,  C|R,  0, 0, 0, 24, 0.0f,  0, {0}},  0.0f,   9, 0},
 {{"mla_f32_proj_band",        1, 2, 1,  33, 33, 24, 20, TA_F32,  C|R,  0, 0, 0,  0, 0.0f,  0, {0}},  0.5f,   7, 16},
 {{"mla_bf16_proj_noband",     2, 3, 1,  29, 29, 16, 12, TA_BF16, 0,    0, 0, 0,  0, 0.0f,  0, {0}},  0.0f,   0, 8},
};
/* clang-format on */
#undef R
#undef C
#define N_PROBLEMS ((int)(sizeof k_problems / sizeof k_problems[0]))
#define N_LATENT ((int)(sizeof k_latent / sizeof k_latent[0]))

/* ---- Inputs: small integers times a power of two (exact in every dtype) ---- */

/* An integer in [-m, m] from the top bits of one PRNG draw (m < 2^20). */
static int32_t small_int(ta_rng *r, int32_t m) {
    return (int32_t)(ta_rng_u64(r) >> 40) % (2 * m + 1) - m;
}

/* n values n_i * 2^-shift, |n_i| <= 127 (8 significant bits: exact in bf16). The
 * conversion of an integer to float and the power-of-two multiply are exact. */
static void fill_exact(ta_rng *r, void *buf, ta_dtype dt, size_t n, float pow2_scale) {
    size_t i;
    for (i = 0; i < n; ++i) {
        const float x = (float)small_int(r, 127) * pow2_scale;
        switch (dt) {
        case TA_F32: ((float *)buf)[i] = x; break;
        case TA_F16: ((uint16_t *)buf)[i] = ta_f32_to_f16(x); break;
        case TA_BF16: ((uint16_t *)buf)[i] = ta_f32_to_bf16(x); break;
        }
    }
}

/* ---- FNV-1a 64 ---- */

static uint64_t fnv1a(uint64_t h, const void *buf, size_t n) {
    const unsigned char *b = (const unsigned char *)buf;
    size_t i;
    for (i = 0; i < n; ++i)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* ---- One problem: forward, backward, hash of every output ---- */

static ta_problem to_problem(const golden *g) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = g->batch, p.heads_q = g->heads_q, p.heads_kv = g->heads_kv;
    p.seq_q = g->seq_q, p.seq_k = g->seq_k, p.head_dim = g->head_dim;
    p.head_dim_v = g->head_dim_v, p.dtype = g->dtype, p.flags = g->flags;
    p.conv_q = g->conv_q, p.conv_k = g->conv_k, p.block_q = g->block_q, p.block_k = g->block_k;
    p.scale = g->scale;
    return p;
}

/* The problem of golden index i: k_problems first, then k_latent. */
static ta_problem golden_problem(int i, const char **name) {
    ta_problem p;
    if (i < N_PROBLEMS) {
        *name = k_problems[i].name;
        return to_problem(&k_problems[i]);
    }
    *name = k_latent[i - N_PROBLEMS].g.name;
    p = to_problem(&k_latent[i - N_PROBLEMS].g);
    p.rband_alpha = k_latent[i - N_PROBLEMS].alpha;
    p.rband_width = k_latent[i - N_PROBLEMS].width;
    p.latent_dim = k_latent[i - N_PROBLEMS].latent_dim;
    return p;
}

/* Runs problem `index` (inputs seeded by the hash of its name, so the list can
 * grow without moving the others); *hash over o, lse, dq, dk, dv, dconv_w in
 * that order, then d_alpha (with the band), dw_qlat and dw_vup (with the
 * projections). Returns TA_OK or the first failing status. */
static ta_status run_golden(int index, uint64_t *hash) {
    const char *name;
    const ta_problem p = golden_problem(index, &name);
    const int band = (p.flags & TA_RBAND) != 0;
    const int32_t wk = p.latent_dim ? p.latent_dim : p.head_dim;
    const int32_t wv = p.latent_dim ? p.latent_dim : p.head_dim_v;
    const size_t eb = ta_dtype_size(p.dtype);
    const size_t n_lse = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    const size_t n_kv = (size_t)p.batch * (size_t)p.heads_kv * (size_t)p.seq_k;
    const size_t n_q = n_lse * (size_t)p.head_dim, n_o = n_lse * (size_t)p.head_dim_v;
    const size_t n_k = n_kv * (size_t)wk, n_v = n_kv * (size_t)wv;
    const size_t n_wq = (size_t)p.heads_q * (size_t)p.head_dim * (size_t)p.latent_dim;
    const size_t n_wv = (size_t)p.heads_q * (size_t)p.latent_dim * (size_t)p.head_dim_v;
    float *wq = (float *)ta_test_alloc((n_wq + n_wv + 1) * sizeof(float));
    float *dwq = (float *)ta_test_alloc((n_wq + n_wv + 1) * sizeof(float));
    float d_alpha = 0.0f;
    const size_t n_w = (size_t)p.heads_q * (size_t)p.conv_q * (size_t)p.conv_k;
    void *q = ta_test_alloc(n_q * eb), *k = ta_test_alloc(n_k * eb), *v = ta_test_alloc(n_v * eb);
    void *d_o = ta_test_alloc(n_o * eb), *o = ta_test_alloc(n_o * eb);
    void *dq = ta_test_alloc(n_q * eb), *dk = ta_test_alloc(n_k * eb),
         *dv = ta_test_alloc(n_v * eb);
    float *lse = (float *)ta_test_alloc(n_lse * sizeof(float));
    float *w = (float *)ta_test_alloc((n_w ? n_w : 1) * sizeof(float));
    float *dw = (float *)ta_test_alloc((n_w ? n_w : 1) * sizeof(float));
    size_t fwd_bytes = 0, bwd_bytes = 0;
    void *ws = NULL;
    ta_fwd_args fa;
    ta_bwd_args ba;
    ta_status st;
    ta_rng rng;
    ta_rng_seed(&rng, fnv1a(0xcbf29ce484222325ull, name, strlen(name)));
    fill_exact(&rng, q, p.dtype, n_q, 1.0f / 64.0f); /* |q|, |k| < 2 */
    fill_exact(&rng, k, p.dtype, n_k, 1.0f / 64.0f);
    fill_exact(&rng, v, p.dtype, n_v, 1.0f / 128.0f); /* |v|, |dO| < 1 */
    fill_exact(&rng, d_o, p.dtype, n_o, 1.0f / 128.0f);
    fill_exact(&rng, w, TA_F32, n_w, 1.0f / 512.0f); /* |w| < 1/4, mixed signs */
    fill_exact(&rng, wq, TA_F32, n_wq + n_wv, 1.0f / 256.0f); /* projections: |w| < 1/2 */
    ta_poison(dwq, (n_wq + n_wv + 1) * sizeof(float));
    ta_poison(&d_alpha, sizeof d_alpha);
    ta_poison(o, n_o * eb);
    ta_poison(lse, n_lse * sizeof(float));
    ta_poison(dq, n_q * eb);
    ta_poison(dk, n_k * eb);
    ta_poison(dv, n_v * eb);
    ta_poison(dw, (n_w ? n_w : 1) * sizeof(float));
    memset(&fa, 0, sizeof fa);
    memset(&ba, 0, sizeof ba);
    fa.q = ba.q = q, fa.k = ba.k = k, fa.v = ba.v = v;
    fa.conv_w = ba.conv_w = n_w ? w : NULL;
    fa.seqlens_k = ba.seqlens_k =
        index < N_PROBLEMS && k_problems[index].has_seqlens ? k_problems[index].seqlens : NULL;
    fa.w_qlat = ba.w_qlat = wq, fa.w_vup = ba.w_vup = wq + n_wq;
    ba.dw_qlat = dwq, ba.dw_vup = dwq + n_wq, ba.d_alpha = &d_alpha;
    fa.o = o, fa.lse = lse;
    ba.o = o, ba.lse = lse, ba.d_o = d_o;
    ba.dq = dq, ba.dk = dk, ba.dv = dv, ba.dconv_w = n_w ? dw : NULL;
    st = ta_fwd_workspace_size(&p, TA_BACKEND_REF, &fwd_bytes);
    if (st == TA_OK) st = ta_bwd_workspace_size(&p, TA_BACKEND_REF, &bwd_bytes);
    if (st == TA_OK) {
        const size_t bytes = fwd_bytes > bwd_bytes ? fwd_bytes : bwd_bytes;
        ws = ta_test_alloc(bytes ? bytes : 64);
        ta_poison(ws, bytes);
        st = ta_fwd(&p, TA_BACKEND_REF, &fa, ws, fwd_bytes, NULL);
    }
    if (st == TA_OK) st = ta_bwd(&p, TA_BACKEND_REF, &ba, ws, bwd_bytes, NULL);
    if (st == TA_OK) {
        uint64_t h = 0xcbf29ce484222325ull;
        h = fnv1a(h, o, n_o * eb);
        h = fnv1a(h, lse, n_lse * sizeof(float));
        h = fnv1a(h, dq, n_q * eb);
        h = fnv1a(h, dk, n_k * eb);
        h = fnv1a(h, dv, n_v * eb);
        h = fnv1a(h, dw, n_w * sizeof(float));
        if (band) h = fnv1a(h, &d_alpha, sizeof d_alpha);
        h = fnv1a(h, dwq, (n_wq + n_wv) * sizeof(float));
        *hash = h;
    }
    ta_test_free(ws);
    ta_test_free(q), ta_test_free(k), ta_test_free(v), ta_test_free(d_o), ta_test_free(o);
    ta_test_free(dq), ta_test_free(dk), ta_test_free(dv), ta_test_free(lse), ta_test_free(w);
    ta_test_free(dw), ta_test_free(wq), ta_test_free(dwq);
    return st;
}

/* ---- The hashes file: "# comment" lines, then "name 0123456789abcdef" ---- */

#define MAX_LINES 256
typedef struct expected {
    char name[64];
    uint64_t hash;
    int used;
} expected;

static int read_hashes(const char *path, expected *e, int *n) {
    char line[256];
    FILE *f = fopen(path, "r");
    *n = 0;
    if (!f) {
        fprintf(stderr, "test_golden: cannot open %s\n", path);
        return -1;
    }
    while (fgets(line, sizeof line, f) && *n < MAX_LINES) {
        unsigned long long h;
        if (line[0] == '#' || line[0] == '\n') continue;
        if (sscanf(line, "%63s %llx", e[*n].name, &h) != 2) {
            fprintf(stderr, "test_golden: bad line in %s: %s", path, line);
            fclose(f);
            return -1;
        }
        e[*n].hash = (uint64_t)h;
        e[*n].used = 0;
        ++*n;
    }
    fclose(f);
    return 0;
}

static void print_hashes(void) {
    int i;
    printf("# Golden hashes of TA_BACKEND_REF outputs (FNV-1a 64 over o, lse, dq, dk, dv,\n"
           "# dconv_w). Generated by `test_golden --print`; the problems are in test_golden.c.\n"
           "# A change here is a change of the library's bits: say why in the commit.\n");
    for (i = 0; i < N_PROBLEMS + N_LATENT; ++i) {
        uint64_t h = 0;
        const char *name;
        const ta_status st = run_golden(i, &h);
        (void)golden_problem(i, &name);
        if (st != TA_OK)
            printf("# %s: %s\n", name, ta_status_string(st));
        else
            printf("%s %016llx\n", name, (unsigned long long)h);
    }
}

int main(int argc, char **argv) {
    expected e[MAX_LINES];
    int n_e = 0, i, j, equal = 0;
    if (argc == 2 && strcmp(argv[1], "--print") == 0) {
        print_hashes();
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: %s HASHES_FILE | --print\n", argv[0]);
        return 2;
    }
    if (read_hashes(argv[1], e, &n_e) != 0) return 1;
    for (i = 0; i < N_PROBLEMS + N_LATENT; ++i) {
        const char *name;
        uint64_t h = 0;
        const ta_status st = run_golden(i, &h);
        expected *x = NULL;
        (void)golden_problem(i, &name);
        for (j = 0; j < n_e; ++j)
            if (strcmp(e[j].name, name) == 0) x = &e[j];
        TA_CHECK(st == TA_OK, "%s: %s", name, ta_status_string(st));
        if (st != TA_OK) continue;
        TA_CHECK(x != NULL, "%s: no line in %s (hash %016llx)", name, argv[1],
                 (unsigned long long)h);
        if (!x) continue;
        x->used = 1;
        TA_CHECK(x->hash == h, "%s: hash %016llx, golden %016llx", name, (unsigned long long)h,
                 (unsigned long long)x->hash);
        equal += x->hash == h;
        printf("  %-28s %016llx %s\n", name, (unsigned long long)h,
               x->hash == h ? "equal" : "DIFFERS");
    }
    for (j = 0; j < n_e; ++j)
        TA_CHECK(e[j].used, "%s: in %s but not a problem of this test", e[j].name, argv[1]);
    printf("test_golden: %d of %d problems equal to %s\n", equal, N_PROBLEMS + N_LATENT, argv[1]);
    return ta_test_finish("test_golden");
}
