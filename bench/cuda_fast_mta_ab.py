#!/usr/bin/env python3
"""Two builds of tileattn's fast-mode MTA backward, old and new, timed side by
side in one process on the same bf16 tensors and stream (the before/after check
of a kernel change in cuda/ta_cuda_fast_mta_bwd.cu), with PyTorch's flash
causal backward (same shape, no conv) interleaved as the yardstick.

    python3 bench/cuda_fast_mta_ab.py --old OLD.so --new NEW.so
        [--rounds 5] [--reps 10] [--kernels]

Each .so is a shared build (TILEATTN_SHARED=ON, libtileattn_shared.so).
Shapes: 6 x 11 with D = 128 at S = 2k, 4k, 8k and D = 64 at 4k, and 7 x 7
with D = 64 at 4k; B = 1, H = 16, causal. Inputs as
bench/cuda_fast_mta_bench.py. Per shape, --rounds rounds each time old, new
and flash in turn (CUDA-event median of --reps calls after 3 warm-ups); the
table gives each side's best and median over rounds, new/old and new/flash
(both best-of and median-of), and max |old - new| per gradient (fast mode is
deterministic, but a kernel change may reorder sums: the two builds need not
agree to the bit; both are checked against the float64 oracle by
test_cuda_fast_mta_bwd). --kernels adds each build's per-kernel device time
(torch.profiler) per shape. Hardware limit column: the new build's
tensor-core TFLOP/s (as cuda_fast_mta_bench.py --bwd counts it) over the
dense bf16 peak.
"""
import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_bench import kernel_table, load, median_ms  # noqa: E402
from cuda_fast_bench import bf16_peak_tflops  # noqa: E402
from cuda_fast_mta_bench import (TA_BF16, TA_PRECISION_FAST, MtaCase, inputs,  # noqa: E402
                                 tc_tflops)

SHAPES = [(1, 16, 4096, 128, 6, 11), (1, 16, 4096, 64, 6, 11), (1, 16, 4096, 64, 7, 7),
          (1, 16, 2048, 128, 6, 11), (1, 16, 8192, 128, 6, 11)]


def case(lib, shape, q, k, v, d_o, w):
    b, h, s, d, cq, ck = shape
    c = MtaCase(lib, b, h, s, d, cq, ck, TA_BF16, TA_PRECISION_FAST, q, k, v, w)
    c()
    c.bwd_setup(d_o)
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--kernels", action="store_true")
    a = ap.parse_args()
    libs = {"old": load(a.old), "new": load(a.new)}
    peak, name = bf16_peak_tflops()
    print(f"device: {name}; torch {torch.__version__}; bf16 dense peak {peak:.0f} TFLOP/s")
    print(f"old = {a.old}; new = {a.new}; {a.rounds} rounds of (old, new, flash), "
          f"each a median of {a.reps} calls")
    head = ("  S   D  conv | old best  new best flash best | new/old best med | "
            "new/flash best med | old/flash best | tc TF/s %peak | max|old-new| dq dk dv dw")
    print(head)
    print("-" * len(head))
    for shape in SHAPES:
        b, h, s, d, cq, ck = shape
        q, k, v, d_o, w = inputs(b, h, s, d, cq, ck, 1357 + s + d + cq, 4)
        cases = {n: case(lib, shape, q, k, v, d_o, w) for n, lib in libs.items()}
        qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True)

        def flash():
            torch.autograd.grad(out, (qg, kg, vg), d_o, retain_graph=True)

        t = {"old": [], "new": [], "flash": []}
        for _ in range(a.rounds):
            for n in ("old", "new"):
                t[n].append(median_ms(cases[n].bwd, 3, a.reps))
            t["flash"].append(median_ms(flash, 3, a.reps))
        for n in ("old", "new"):
            cases[n].bwd()
        torch.cuda.synchronize()
        diff = [(x.float() - y.float()).abs().max().item()
                for x, y in zip(cases["old"].grads, cases["new"].grads)]
        best = {n: min(x) for n, x in t.items()}
        med = {n: statistics.median(x) for n, x in t.items()}
        tc = tc_tflops(b, h, s, d, cq, best["new"], True)
        print(f"{s:>5} {d:>3} {cq:>2}x{ck:<2}| {best['old']:>8.3f} {best['new']:>9.3f} "
              f"{best['flash']:>10.3f} | {best['new'] / best['old']:>8.3f} "
              f"{med['new'] / med['old']:>5.3f} | {best['new'] / best['flash']:>9.2f} "
              f"{med['new'] / med['flash']:>5.2f} | {best['old'] / best['flash']:>9.2f}      | "
              f"{tc:>6.1f} {100 * tc / peak:>5.1f} | "
              + " ".join(f"{x:.2e}" for x in diff), flush=True)
        if a.kernels:
            for n in ("old", "new"):
                kernel_table(cases[n].bwd, max(3, a.reps // 2), f"{n}, {d=} {cq}x{ck} {s=}")
        del cases, out, qg, kg, vg, q, k, v, d_o, w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
