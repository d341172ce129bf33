/*
 * Non-finite scores (issue 15 item 2; docs/exactness.md section 8): NaN and
 * +-inf scores, SDPA and the MTA conv, REF == CPU on every ISA path the
 * machine has (forced with TA_CPU_ISA) and 1 or 3 threads, forward and
 * backward, bit for bit but NaN payloads (NaN positions must agree); and the
 * documented rules on REF's outputs (test/nonfinite.h): a row with a NaN or
 * +inf visible score gives o = lse = NaN (and, SDPA, a NaN dq row); a row of
 * -inf scores o = 0, lse = -inf (dq = 0); else finite.
 *
 * Cases: the fixed ones of nonfinite.c (issue 15's MTA repro: REF gave NaN
 * in row 1, the CPU backend o = 0, lse = -inf), then random SDPA and MTA
 * problems whose q, k mix ordinary values with +-1e20 (overflowing scores,
 * inf - inf in dot products and convs) and NaNs; f32, f16, bf16; GQA,
 * seqlens_k, causal or not, explicit tiles. Outputs poisoned (0xFF), the
 * workspace random bytes. Fresh seed per run (printed; TA_SEED replays).
 *
 *   test_nonfinite [--quick]     (--quick: the fixed cases and 8 random ones)
 */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nonfinite.h"
#include "cpu/ta_cpu.h"
#include "test_util.h"
#include "tileattn.h"

static size_t g_payload, g_nan_rows, g_empty_rows, g_cpu_runs;

static void run_case(ta_rng *r, nf_case *c) {
    nf_out ref, cpu;
    const ta_cpu_isa best = ta_cpu_isa_best();
    int isa, threads;
    ta_status st;
    nf_alloc_out(c, &ref);
    st = nf_run_host(TA_BACKEND_REF, r, c, &ref, NULL, NULL);
    TA_CHECK(st == TA_OK, "%s: REF status %d", c->name, (int)st);
    if (st != TA_OK) {
        nf_free_out(&ref);
        return;
    }
    (void)nf_check_rules(c, &ref, &g_nan_rows, &g_empty_rows);
    for (isa = TA_CPU_ISA_SCALAR; isa <= (int)best; ++isa)
        for (threads = 1; threads <= 3; threads += 2) {
            char what[64];
            nf_case cc = *c;
            cc.p.num_threads = threads;
            setenv("TA_CPU_ISA", ta_cpu_isa_name((ta_cpu_isa)isa), 1);
            snprintf(what, sizeof what, "cpu %s, %d thread(s)", ta_cpu_isa_name((ta_cpu_isa)isa),
                     threads);
            nf_alloc_out(c, &cpu);
            st = nf_run_host(TA_BACKEND_CPU, r, &cc, &cpu, ref.o, ref.lse);
            TA_CHECK(st == TA_OK, "%s: %s: status %d", c->name, what, (int)st);
            if (st == TA_OK) (void)nf_same_all(what, c, &ref, &cpu, &g_payload);
            ++g_cpu_runs;
            nf_free_out(&cpu);
        }
    unsetenv("TA_CPU_ISA");
    nf_free_out(&ref);
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const int n_random = quick ? 8 : 160;
    const uint64_t seed = ta_test_seed("test_nonfinite");
    int i;
    ta_rng r;
    ta_rng_seed(&r, seed);
    for (i = 0; i < nf_fixed_count(); ++i) {
        nf_case c;
        nf_make_fixed(i, &r, &c);
        run_case(&r, &c);
        nf_free_case(&c);
    }
    for (i = 0; i < n_random; ++i) {
        nf_case c;
        const int before = ta_test_failures;
        nf_make_random(&r, &c, i % 3 == 2);
        run_case(&r, &c);
        if (ta_test_failures != before) fprintf(stderr, "  in random case %d: %s\n", i, c.name);
        nf_free_case(&c);
    }
    printf("test_nonfinite: %d fixed + %d random cases, %zu CPU runs compared with REF; %zu NaN "
           "rows, %zu rows of -inf only; %zu NaN pairs with other payload bits (allowed)\n",
           nf_fixed_count(), n_random, g_cpu_runs, g_nan_rows, g_empty_rows, g_payload);
    return ta_test_finish("test_nonfinite");
}
