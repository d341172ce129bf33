/*
 * Rotary table builders (ta_rope_table_1d, ta_rope_table_2d; docs/rope.md),
 * label unit:
 *  1. 1-D tables of random shape (n_pairs, rows, row_stride, identity rows,
 *     base, position scale and offset) for each scaling (none, linear, NTK,
 *     YaRN), against this file's own double-precision evaluation of the
 *     formulas of docs/rope.md: every entry within one float ulp (the two
 *     evaluations may round a double differently once), identity rows exactly
 *     cos = 1, sin = 0, the floats past n_pairs of each row untouched (canary).
 *  2. Reductions: linear and NTK with factor 1 give the unscaled table bit for
 *     bit; YaRN with factor 1 within one ulp; position 0 gives cos = 1, sin = 0
 *     exactly; cos(1), sin(1) at pair 0 of position 1.
 *  3. 2-D tables: every patch's pairs against the axial formula (x for the
 *     first half unless y_first), identity prefix rows.
 *  4. Bad input: each refused with its status and both tables untouched.
 *   test_rope_table                 TA_SEED replays a run.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tileattn.h"

#define PI 3.14159265358979323846

/* |got - want| within one float ulp of want (or 2^-149 near zero), plus what
 * the angle's own double rounding can move cos or sin by (|a| 2^-48, a few
 * double ulps of a: the library and this file compute a in different orders,
 * and near a zero of cos or sin that difference is many float ulps of the
 * tiny result; one CI run hit it with YaRN at a position near 1e5). */
static int within_ulp_at(float got, double want, double a) {
    const double ulp = fmax(ldexp(1.0, -149), ldexp(fabs(want), -23)) + ldexp(fabs(a), -48);
    return fabs((double)got - want) <= ulp;
}
static int within_ulp(float got, double want) { return within_ulp_at(got, want, 0.0); }

static double or_default(double x, double d) { return x == 0.0 ? d : x; }

/* docs/rope.md's frequency of pair i, written out independently. */
static double want_freq(const ta_rope_1d *c, int32_t i) {
    const double r = 2.0 * c->n_pairs, base = or_default(c->base, 10000.0);
    const double f = 1.0 / pow(base, 2.0 * i / r);
    if (c->scaling == TA_ROPE_SCALE_LINEAR) return f / c->factor;
    if (c->scaling == TA_ROPE_SCALE_NTK) return 1.0 / pow(base * pow(c->factor, r / (r - 2.0)), 2.0 * i / r);
    if (c->scaling == TA_ROPE_SCALE_YARN) {
        const double two_log_base = 2.0 * log(base), L = c->orig_max_pos;
        double lo = floor(r * log(L / (or_default(c->beta_fast, 32.0) * 2.0 * PI)) / two_log_base);
        double hi = ceil(r * log(L / (or_default(c->beta_slow, 1.0) * 2.0 * PI)) / two_log_base);
        double ramp;
        lo = fmax(lo, 0.0);
        hi = fmin(hi, r - 1.0);
        if (hi == lo) hi += 0.001;
        ramp = fmin(fmax((i - lo) / (hi - lo), 0.0), 1.0);
        return f / c->factor * ramp + f * (1.0 - ramp);
    }
    return f;
}

static void random_1d(ta_rng *r, ta_rope_1d *c, int scaling) {
    memset(c, 0, sizeof *c);
    c->n_pairs = ta_rng_int(r, 2, 80);
    c->rows = ta_rng_int(r, 0, 300);
    c->row_stride = ta_rng_int(r, 0, 1) ? 0 : c->n_pairs + ta_rng_int(r, 0, 5);
    c->identity_rows = c->rows ? ta_rng_int(r, 0, c->rows < 4 ? c->rows : 4) : 0;
    c->base = ta_rng_int(r, 0, 2) == 0 ? 0.0 : (double)ta_rng_uniform(r, 50.0f, 5e5f);
    c->pos_scale = ta_rng_int(r, 0, 1) ? 0.0 : (double)ta_rng_uniform(r, 0.1f, 4.0f);
    c->pos_offset = ta_rng_int(r, 0, 1) ? 0.0 : (double)ta_rng_int(r, 0, 100000);
    c->scaling = scaling;
    c->factor = (double)ta_rng_uniform(r, 1.0f, 40.0f);
    c->orig_max_pos = ta_rng_int(r, 256, 8192);
    if (ta_rng_int(r, 0, 1)) {
        c->beta_slow = (double)ta_rng_uniform(r, 0.5f, 2.0f);
        c->beta_fast = c->beta_slow + (double)ta_rng_uniform(r, 1.0f, 40.0f);
    }
}

/* Part 1 for one table: returns the entries out of bound. */
static int check_1d(const ta_rope_1d *c, const char *what) {
    const int32_t stride = c->row_stride ? c->row_stride : c->n_pairs;
    const size_t n = (size_t)c->rows * (size_t)stride + 1;
    float *cs = (float *)malloc(n * sizeof(float)), *sn = (float *)malloc(n * sizeof(float));
    double m = 1.0;
    int32_t t, i, bad = 0;
    ta_status st;
    if (!cs || !sn) exit(1);
    ta_canary_fill(cs, n * sizeof(float));
    ta_canary_fill(sn, n * sizeof(float));
    st = ta_rope_table_1d(c, cs, sn);
    TA_CHECK(st == TA_OK, "%s: %s", what, ta_status_string(st));
    if (c->scaling == TA_ROPE_SCALE_YARN) m = c->mscale != 0.0 ? c->mscale : 0.1 * log(c->factor) + 1.0;
    for (t = 0; st == TA_OK && t < c->rows; ++t) {
        const double pos = (t - c->identity_rows) * or_default(c->pos_scale, 1.0) + c->pos_offset;
        for (i = 0; i < stride; ++i) {
            const size_t at = (size_t)t * (size_t)stride + (size_t)i;
            if (i >= c->n_pairs) {
                bad += !ta_canary_intact(cs + at, sizeof(float)) || !ta_canary_intact(sn + at, sizeof(float));
            } else if (t < c->identity_rows) {
                bad += cs[at] != 1.0f || sn[at] != 0.0f;
            } else {
                const double a = pos * want_freq(c, i);
                if ((!within_ulp_at(cs[at], m * cos(a), a) || !within_ulp_at(sn[at], m * sin(a), a)) &&
                    bad++ < 3)
                    fprintf(stderr, "%s: row %d pair %d: %.9g %.9g, want %.9g %.9g\n", what, t, i,
                            (double)cs[at], (double)sn[at], m * cos(a), m * sin(a));
            }
        }
    }
    bad += !ta_canary_intact(cs + n - 1, sizeof(float)) || !ta_canary_intact(sn + n - 1, sizeof(float));
    TA_CHECK(bad == 0, "%s: %d entries wrong", what, bad);
    free(cs);
    free(sn);
    return bad;
}

/* Part 2. */
static void check_reductions(ta_rng *r) {
    static const int scalings[3] = {TA_ROPE_SCALE_LINEAR, TA_ROPE_SCALE_NTK, TA_ROPE_SCALE_YARN};
    float c0[64 * 40], s0[64 * 40], c1[64 * 40], s1[64 * 40];
    ta_rope_1d c;
    int k;
    size_t i, off = 0;
    random_1d(r, &c, TA_ROPE_SCALE_NONE);
    c.n_pairs = 40;
    c.rows = 64;
    c.row_stride = 0;
    c.identity_rows = 0;
    TA_CHECK(ta_rope_table_1d(&c, c0, s0) == TA_OK, "unscaled table");
    for (k = 0; k < 3; ++k) {
        ta_rope_1d s = c;
        s.scaling = scalings[k];
        s.factor = 1.0;
        s.orig_max_pos = 4096;
        TA_CHECK(ta_rope_table_1d(&s, c1, s1) == TA_OK, "scaling %d, factor 1", s.scaling);
        for (i = 0; i < 64 * 40; ++i)
            off += k < 2 ? (c1[i] != c0[i] || s1[i] != s0[i])
                         : (!within_ulp(c1[i], (double)c0[i]) || !within_ulp(s1[i], (double)s0[i]));
        TA_CHECK(off == 0, "scaling %d with factor 1: %zu entries differ from the unscaled table",
                 s.scaling, off);
    }
    c.pos_offset = 0.0;
    c.pos_scale = 1.0;
    c.base = 10000.0;
    TA_CHECK(ta_rope_table_1d(&c, c0, s0) == TA_OK, "position table");
    for (i = 0; i < 40; ++i)
        off += c0[i] != 1.0f || s0[i] != 0.0f;
    TA_CHECK(off == 0, "position 0: cos 1, sin 0 exactly");
    TA_CHECK(c0[40] == (float)cos(1.0) && s0[40] == (float)sin(1.0),
             "position 1, pair 0: %.9g %.9g, want cos(1) sin(1)", (double)c0[40], (double)s0[40]);
}

/* Part 3. */
static void check_2d(ta_rng *r) {
    ta_rope_2d c;
    int32_t rows, stride, t, i, bad = 0;
    float *cs, *sn;
    memset(&c, 0, sizeof c);
    c.n_pairs = 2 * ta_rng_int(r, 1, 24);
    c.grid_h = ta_rng_int(r, 1, 20);
    c.grid_w = ta_rng_int(r, 1, 20);
    c.identity_rows = ta_rng_int(r, 0, 3);
    c.row_stride = ta_rng_int(r, 0, 1) ? 0 : c.n_pairs + 3;
    c.y_first = ta_rng_int(r, 0, 1);
    c.base = ta_rng_int(r, 0, 1) ? 0.0 : 10000.0;
    c.scale_h = ta_rng_int(r, 0, 1) ? 0.0 : 0.5;
    c.scale_w = ta_rng_int(r, 0, 1) ? 0.0 : 2.0;
    stride = c.row_stride ? c.row_stride : c.n_pairs;
    rows = c.identity_rows + c.grid_h * c.grid_w;
    cs = (float *)malloc((size_t)rows * (size_t)stride * sizeof(float));
    sn = (float *)malloc((size_t)rows * (size_t)stride * sizeof(float));
    if (!cs || !sn) exit(1);
    TA_CHECK(ta_rope_table_2d(&c, cs, sn) == TA_OK, "2-D table");
    for (t = 0; t < rows; ++t)
        for (i = 0; i < c.n_pairs; ++i) {
            const size_t at = (size_t)t * (size_t)stride + (size_t)i;
            const int32_t patch = t - c.identity_rows, half = c.n_pairs / 2;
            double x, y, pos, a;
            if (patch < 0) {
                bad += cs[at] != 1.0f || sn[at] != 0.0f;
                continue;
            }
            x = (patch % c.grid_w) * or_default(c.scale_w, 1.0);
            y = (patch / c.grid_w) * or_default(c.scale_h, 1.0);
            pos = (i < half) == (c.y_first == 0) ? x : y;
            a = pos / pow(or_default(c.base, 100.0), 2.0 * (i % half) / c.n_pairs);
            bad += !within_ulp_at(cs[at], cos(a), a) || !within_ulp_at(sn[at], sin(a), a);
        }
    TA_CHECK(bad == 0, "2-D table (%dx%d, %d pairs, y_first %d): %d entries wrong", c.grid_h,
             c.grid_w, c.n_pairs, c.y_first, bad);
    free(cs);
    free(sn);
}

/* Part 4: one refused 1-D or 2-D table; both buffers untouched. */
static void expect_refused(const char *what, const ta_rope_1d *c1, const ta_rope_2d *c2, float *cs,
                           float *sn, ta_status want) {
    static float buf[2][512];
    ta_status st;
    ta_canary_fill(buf, sizeof buf);
    st = c1 ? ta_rope_table_1d(c1, cs, sn) : ta_rope_table_2d(c2, cs, sn);
    TA_CHECK(st == want, "%s: %s, want %s", what, ta_status_string(st), ta_status_string(want));
    TA_CHECK(ta_canary_intact(buf, sizeof buf), "%s: a table was written", what);
}

static void check_bad_input(void) {
    static float t[2][1024];
    ta_rope_1d g, c;
    ta_rope_2d g2, c2;
    float *cs = t[0], *sn = t[1];
    memset(&g, 0, sizeof g);
    g.n_pairs = 8;
    g.rows = 16;
    memset(&g2, 0, sizeof g2);
    g2.n_pairs = 8;
    g2.grid_h = g2.grid_w = 4;
#define REFUSE1(what, edit, want, a, b)                                                   \
    do {                                                                                  \
        static float tmp_[2][512];                                                        \
        c = g;                                                                            \
        edit;                                                                             \
        ta_canary_fill(tmp_, sizeof tmp_);                                                \
        expect_refused(what, &c, NULL, (a) ? (a) : tmp_[0], (b) ? (b) : tmp_[1], want);   \
        TA_CHECK(ta_canary_intact(tmp_, sizeof tmp_), "%s: a table was written", what);   \
    } while (0)
    (void)cs;
    (void)sn;
    TA_CHECK(ta_rope_table_1d(NULL, t[0], t[1]) == TA_ERR_NULL_ARG, "NULL cfg");
    TA_CHECK(ta_rope_table_2d(NULL, t[0], t[1]) == TA_ERR_NULL_ARG, "NULL 2-D cfg");
    {
        static float a[512];
        ta_canary_fill(a, sizeof a);
        TA_CHECK(ta_rope_table_1d(&g, NULL, a) == TA_ERR_NULL_ARG, "cos NULL");
        TA_CHECK(ta_rope_table_1d(&g, a, NULL) == TA_ERR_NULL_ARG, "sin NULL");
        TA_CHECK(ta_rope_table_1d(&g, a, a + 100) == TA_ERR_BAD_ARG, "overlapping tables");
        TA_CHECK(ta_rope_table_1d(&g, (float *)((char *)a + 2), a + 300) == TA_ERR_BAD_ARG,
                 "misaligned cos");
        TA_CHECK(ta_canary_intact(a, sizeof a), "refused calls wrote a table");
    }
    REFUSE1("n_pairs 0", c.n_pairs = 0, TA_ERR_BAD_ARG, NULL, NULL);
    REFUSE1("rows -1", c.rows = -1, TA_ERR_BAD_ARG, NULL, NULL);
    REFUSE1("row_stride < n_pairs", c.row_stride = 7, TA_ERR_BAD_ARG, NULL, NULL);
    REFUSE1("identity_rows > rows", c.identity_rows = 17, TA_ERR_BAD_ARG, NULL, NULL);
    REFUSE1("NaN base", c.base = (double)NAN, TA_ERR_BAD_ARG, NULL, NULL);
    REFUSE1("negative base", c.base = -2.0, TA_ERR_BAD_ARG, NULL, NULL);
    REFUSE1("inf pos_offset", c.pos_offset = (double)INFINITY, TA_ERR_BAD_ARG, NULL, NULL);
    REFUSE1("scaling 9", c.scaling = 9, TA_ERR_BAD_ARG, NULL, NULL);
    REFUSE1("linear factor 0.5", (c.scaling = TA_ROPE_SCALE_LINEAR, c.factor = 0.5),
            TA_ERR_BAD_ARG, NULL, NULL);
    REFUSE1("NTK with one pair", (c.scaling = TA_ROPE_SCALE_NTK, c.factor = 2.0, c.n_pairs = 1),
            TA_ERR_BAD_ARG, NULL, NULL);
    REFUSE1("YaRN orig_max_pos 0", (c.scaling = TA_ROPE_SCALE_YARN, c.factor = 4.0),
            TA_ERR_BAD_ARG, NULL, NULL);
    REFUSE1("YaRN beta_fast <= beta_slow",
            (c.scaling = TA_ROPE_SCALE_YARN, c.factor = 4.0, c.orig_max_pos = 2048,
             c.beta_fast = 1.0, c.beta_slow = 2.0),
            TA_ERR_BAD_ARG, NULL, NULL);
    c2 = g2;
    c2.n_pairs = 7;
    expect_refused("2-D odd n_pairs", NULL, &c2, t[0], t[1], TA_ERR_BAD_ARG);
    c2 = g2;
    c2.grid_w = 0;
    expect_refused("2-D grid_w 0", NULL, &c2, t[0], t[1], TA_ERR_BAD_ARG);
    c2 = g2;
    c2.y_first = 2;
    expect_refused("2-D y_first 2", NULL, &c2, t[0], t[1], TA_ERR_BAD_ARG);
    /* each remaining clause of the two checks (issue 15, branch coverage) */
    REFUSE1("identity_rows -1", c.identity_rows = -1, TA_ERR_BAD_ARG, NULL, NULL);
    REFUSE1("inf base", c.base = (double)INFINITY, TA_ERR_BAD_ARG, NULL, NULL);
    REFUSE1("NaN pos_scale", c.pos_scale = (double)NAN, TA_ERR_BAD_ARG, NULL, NULL);
    REFUSE1("NTK inf factor", (c.scaling = TA_ROPE_SCALE_NTK, c.factor = (double)INFINITY),
            TA_ERR_BAD_ARG, NULL, NULL);
    {
        static const struct {
            const char *what;
            double beta_fast, beta_slow, mscale;
        } yarn[] = {
            {"YaRN inf beta_fast", (double)INFINITY, 0.0, 0.0},
            {"YaRN NaN beta_slow", 0.0, (double)NAN, 0.0},
            {"YaRN beta_slow < 0", 0.0, -1.0, 0.0},
            {"YaRN NaN mscale", 0.0, 0.0, (double)NAN},
            {"YaRN mscale < 0", 0.0, 0.0, -0.5},
        };
        size_t y;
        for (y = 0; y < sizeof yarn / sizeof yarn[0]; ++y)
            REFUSE1(yarn[y].what,
                    (c.scaling = TA_ROPE_SCALE_YARN, c.factor = 4.0, c.orig_max_pos = 2048,
                     c.beta_fast = yarn[y].beta_fast, c.beta_slow = yarn[y].beta_slow,
                     c.mscale = yarn[y].mscale),
                    TA_ERR_BAD_ARG, NULL, NULL);
    }
    {
        static float a[512];
        ta_canary_fill(a, sizeof a);
        TA_CHECK(ta_rope_table_1d(&g, a, (float *)((char *)a + 1026)) == TA_ERR_BAD_ARG,
                 "misaligned sin");
        TA_CHECK(ta_rope_table_2d(&g2, NULL, a) == TA_ERR_NULL_ARG, "2-D cos NULL");
        TA_CHECK(ta_rope_table_2d(&g2, a, a + 64) == TA_ERR_BAD_ARG, "2-D overlapping tables");
        TA_CHECK(ta_canary_intact(a, sizeof a), "refused calls wrote a table");
    }
    {
        static const struct {
            const char *what;
            int32_t n_pairs, grid_h, row_stride, identity_rows;
            double base, scale_h, scale_w;
        } bad2[] = {
            {"2-D n_pairs 0", 0, 4, 0, 0, 0.0, 0.0, 0.0},
            {"2-D grid_h 0", 8, 0, 0, 0, 0.0, 0.0, 0.0},
            {"2-D row_stride < n_pairs", 8, 4, 6, 0, 0.0, 0.0, 0.0},
            {"2-D identity_rows -1", 8, 4, 0, -1, 0.0, 0.0, 0.0},
            {"2-D NaN base", 8, 4, 0, 0, (double)NAN, 0.0, 0.0},
            {"2-D negative base", 8, 4, 0, 0, -100.0, 0.0, 0.0},
            {"2-D inf scale_h", 8, 4, 0, 0, 0.0, (double)INFINITY, 0.0},
            {"2-D NaN scale_w", 8, 4, 0, 0, 0.0, 0.0, (double)NAN},
        };
        size_t b;
        for (b = 0; b < sizeof bad2 / sizeof bad2[0]; ++b) {
            c2 = g2;
            c2.n_pairs = bad2[b].n_pairs, c2.grid_h = bad2[b].grid_h;
            c2.row_stride = bad2[b].row_stride, c2.identity_rows = bad2[b].identity_rows;
            c2.base = bad2[b].base, c2.scale_h = bad2[b].scale_h, c2.scale_w = bad2[b].scale_w;
            expect_refused(bad2[b].what, NULL, &c2, t[0], t[1], TA_ERR_BAD_ARG);
        }
    }
    c2 = g2;
    c2.grid_h = c2.grid_w = 65536;
    expect_refused("2-D rows past INT32_MAX", NULL, &c2, t[0], t[1], TA_ERR_OVERFLOW);
#undef REFUSE1
}

int main(void) {
    static const int scalings[4] = {TA_ROPE_SCALE_NONE, TA_ROPE_SCALE_LINEAR, TA_ROPE_SCALE_NTK,
                                    TA_ROPE_SCALE_YARN};
    const uint64_t seed = ta_test_seed("test_rope_table");
    ta_rng r;
    int i, k, bad = 0;
    ta_rng_seed(&r, seed);
    for (i = 0; i < 40; ++i)
        for (k = 0; k < 4; ++k) {
            ta_rope_1d c;
            char what[96];
            random_1d(&r, &c, scalings[k]);
            snprintf(what, sizeof what, "1-D table %d, scaling %d", i, scalings[k]);
            bad += check_1d(&c, what) != 0;
        }
    printf("1-D tables: %d of 160 within one ulp of the formulas (plus the angle's own rounding)\n", 160 - bad);
    check_reductions(&r);
    for (i = 0; i < 20; ++i)
        check_2d(&r);
    check_bad_input();
    return ta_test_finish("test_rope_table");
}
