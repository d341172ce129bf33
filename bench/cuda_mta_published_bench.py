#!/usr/bin/env python3
"""tileattn's fast MTA against the published fused MTA kernels, in one process
(issue 11's second target: at least 10x faster than them, forward and
backward, measured in the same run).

The published kernels are Gusanidas/flash-multi-token-attention (bf16 WMMA,
square conv kernels 3/5/6/7/11, D = 32/64/128, dconv_w by atomics). They are
not part of this repository: pass a checkout of that project's
`flash_multi_token_attention` package directory (the one holding
`conv_attn/` and `common/`) as --published; this script compiles its
PyTorch extension there with torch.utils.cpp_extension (their four sources,
their flags -O3 --use_fast_math, for this GPU's architecture) and calls its
three entry points as its own autograd function does:

    forward(Q, K, V, w_bf16, scale, pad_q, pad_k, causal)        -> O (f32), M, L
    backward: D = rowsum(dO * O) (bf16), L = M + log L (bf16),
              dq_backward(...) -> dQ, dW;  dkdv_backward(...) -> dK, dV

    python3 bench/cuda_mta_published_bench.py --lib BUILD/libtileattn_bench.so \\
        --published DIR [--seqs 1024,2048,4096,8192] [--reps N] [--warmup N] [--csv FILE]

Shapes: 7 x 7 (the issue's), D = 64, H = 16, B = 1, causal, S in --seqs; and
7 x 7, D = 128 (both sides support it). Inputs as bench/cuda_fast_mta_bench.py
(uniform in [-1, 1) in bf16; kernel 0.3 uniform(-1, 1) plus 1 at the identity
tap). Times: CUDA-event medians of --reps calls after --warmup (each side's
forward alone; each side's backward alone, after its forward). Columns: ours and
theirs (ms), theirs / ours (> 1: tileattn faster; the target is >= 10), flash
= PyTorch SDPA flash causal on the same shape without the conv, and both
sides' max |o - o_eager| against the eager PyTorch MTA in bf16
(python/tileattn/reference.py), and max |dq - dq_eager| / max |dq_eager|;
"first bad row": the first query row where their o is off by more than 0.05
or not finite (-1: none); and with the identity kernel (whose MTA is causal
SDPA) their o against flash's. A launch of theirs that fails is reported,
with nan times. Hardware limit: ours' tensor-core TFLOP/s as
bench/cuda_fast_mta_bench.py counts it (forward B H S^2 / 2 times 2 D (c_q +
1), backward times 2 D (3 c_q + 2)) over the dense bf16 peak (--peak, else
989 TFLOP/s on an H100/H200 SXM).
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_bench import load, median_ms  # noqa: E402
from cuda_fast_bench import bf16_peak_tflops  # noqa: E402
from cuda_fast_mta_bench import (TA_BF16, TA_PRECISION_FAST, MtaCase, inputs,  # noqa: E402
                                 tc_tflops, write_csv)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from tileattn.reference import eager_mta  # noqa: E402


def build_published(pkg, build_dir):
    """Their extension, compiled from `pkg`/conv_attn (sources untouched)."""
    from torch.utils.cpp_extension import load as load_ext
    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}" + ("a" if major == 9 else "")
    src = os.path.join(pkg, "conv_attn")
    os.makedirs(build_dir, exist_ok=True)
    t0 = time.time()
    ext = load_ext(
        name="published_conv_attention",
        sources=[os.path.join(src, "bindings.cpp"),
                 os.path.join(src, "kernels", "fwd_wrapper.cu"),
                 os.path.join(src, "kernels", "dq_bwd_wrapper.cu"),
                 os.path.join(src, "kernels", "dkdv_wrapper.cu")],
        extra_cflags=["-O3"],
        extra_cuda_cflags=["-O3", "--use_fast_math",
                           f"-gencode=arch=compute_{arch},code=sm_{arch}"],
        build_directory=build_dir, verbose=False)
    print(f"published kernels built for sm_{arch} in {time.time() - t0:.0f} s", flush=True)
    return ext


class Published:
    """Their forward and backward on bf16 q, k, v and the kernel w (f32, cast
    to bf16 as their module does)."""

    def __init__(self, ext, q, k, v, w, c_q, c_k):
        self.ext, self.q, self.k, self.v = ext, q, k, v
        self.w = w.to(torch.bfloat16).contiguous()
        self.scale = 1.0 / q.shape[-1] ** 0.5
        self.pad_q, self.pad_k = c_q - 1, (c_k - 1) // 2
        self.out = None

    def fwd(self):
        self.out = self.ext.forward(self.q, self.k, self.v, self.w, self.scale, self.pad_q,
                                    self.pad_k, True)

    def bwd_setup(self, d_o):
        self.fwd()
        self.d_o = d_o

    def bwd(self):
        o, m, l = self.out
        d = (self.d_o.float() * o).sum(dim=-1).to(torch.bfloat16)
        lse = m.to(torch.bfloat16) + torch.log(l.to(torch.bfloat16))
        args = (self.q, self.k, self.v, self.d_o, d.contiguous(), lse.contiguous(), self.w,
                self.scale, self.pad_q, self.pad_k, True)
        dq, dw = self.ext.dq_backward(*args)
        dk, dv = self.ext.dkdv_backward(*args)
        return dq, dk, dv, dw


def first_bad_row(dev):
    """The first query row where a deviation [B, H, S, D] exceeds 0.05 or is
    not finite; -1 if none."""
    bad = (~(dev <= 0.05)).any(dim=-1).any(dim=0).any(dim=0)
    return int(bad.nonzero()[0].item()) if bad.any() else -1


def run(lib, ext, b, h, s, d, c_q, c_k, a):
    q, k, v, d_o, w = inputs(b, h, s, d, c_q, c_k, 1357 + s + d + c_q, 4)
    scale = 1.0 / d ** 0.5
    ours = MtaCase(lib, b, h, s, d, c_q, c_k, TA_BF16, TA_PRECISION_FAST, q, k, v, w)
    theirs = Published(ext, q, k, v, w, c_q, c_k)
    failed = []

    def theirs_ms(fn, what):
        """Their time, or nan where their launch fails (recorded)."""
        try:
            return median_ms(fn, a.warmup, a.reps)
        except RuntimeError as e:
            failed.append(f"{what}: {str(e).splitlines()[0]}")
            return float("nan")

    t = {"ours_fwd": median_ms(ours, a.warmup, a.reps), "theirs_fwd": theirs_ms(theirs.fwd, "fwd")}
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        t["flash_fwd"] = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                   a.warmup, a.reps)
    ours()
    ours.bwd_setup(d_o)
    t["ours_bwd"] = median_ms(ours.bwd, a.warmup, a.reps)
    t["theirs_bwd"] = float("nan")
    if not failed:
        theirs.bwd_setup(d_o)
        t["theirs_bwd"] = theirs_ms(theirs.bwd, "bwd")
    # accuracy against the eager MTA (bf16, autograd for the gradients)
    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
    wg = w.to(torch.bfloat16).detach().requires_grad_()
    ref = eager_mta(qg, kg, vg, wg, scale)
    dq_ref = torch.autograd.grad(ref, (qg,), d_o)[0].float()
    ours()
    ours.bwd()
    torch.cuda.synchronize()
    ref = ref.detach().float()
    nan = float("nan")
    err = {"ours_o": (ours.o.float() - ref).abs().max().item(), "theirs_o": nan,
           "ours_dq": ((ours.grads[0].float() - dq_ref).abs().max() / dq_ref.abs().max()).item(),
           "theirs_dq": nan, "theirs_first_bad_row": -1}
    fwd_ok = not any(f.startswith("fwd") for f in failed)
    if fwd_ok:
        theirs.fwd()
        torch.cuda.synchronize()
        err["theirs_o"] = (theirs.out[0].float() - ref).abs().max().item()
        if not failed:
            dq_theirs = theirs.bwd()[0]
            torch.cuda.synchronize()
            err["theirs_dq"] = ((dq_theirs.float() - dq_ref).abs().max() /
                                dq_ref.abs().max()).item()
        err["theirs_first_bad_row"] = first_bad_row((theirs.out[0].float() - ref).abs())
    # the identity kernel, whose MTA is causal SDPA: their o against flash's
    err["theirs_id_o"], err["theirs_id_first_bad_row"] = nan, -1
    if fwd_ok:
        w_id = torch.zeros_like(w)
        w_id[:, c_q - 1, (c_k - 1) // 2] = 1.0
        ident = Published(ext, q, k, v, w_id, c_q, c_k)
        ident.fwd()
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            sd = F.scaled_dot_product_attention(q, k, v, is_causal=True).float()
        dev = (ident.out[0].float() - sd).abs()
        err["theirs_id_o"] = dev.max().item()
        err["theirs_id_first_bad_row"] = first_bad_row(dev)
        del ident, sd, dev
    err["theirs_failed"] = "; ".join(failed)
    del ours, theirs, ref, dq_ref, qg, kg, vg, wg
    torch.cuda.empty_cache()
    return t, err


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--published", required=True,
                    help="the published project's flash_multi_token_attention directory")
    ap.add_argument("--build-dir", default="/tmp/published_build")
    ap.add_argument("--seqs", default="1024,2048,4096,8192")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--csv", default="")
    ap.add_argument("--peak", type=float, default=0.0)
    a = ap.parse_args()
    lib = load(a.lib)
    ext = build_published(a.published, a.build_dir)
    peak, name = bf16_peak_tflops()
    if a.peak > 0:
        peak = a.peak
    print(f"device: {name}; torch {torch.__version__}; bf16, causal, B = 1, H = 16; "
          f"bf16 dense peak {peak:.0f} TFLOP/s")
    head = ("  S   D  conv | fwd ours  theirs theirs/ours flash | bwd ours  theirs theirs/ours |"
            " ours tc TF/s (%peak) fwd bwd |"
            " max|o-eager| ours theirs (first bad row) | dq rel err ours theirs |"
            " identity kernel: theirs max|o-flash| (first bad row)")
    print(head)
    print("-" * len(head))
    rows = []
    for d in (64, 128):
        for s in (int(x) for x in a.seqs.split(",")):
            t, e = run(lib, ext, 1, 16, s, d, 7, 7, a)
            tc_f = tc_tflops(1, 16, s, d, 7, t["ours_fwd"], False)
            tc_b = tc_tflops(1, 16, s, d, 7, t["ours_bwd"], True)
            row = dict(device=name, B=1, H=16, S=s, D=d, conv="7x7", **t, **e,
                       fwd_ratio=t["theirs_fwd"] / t["ours_fwd"],
                       bwd_ratio=t["theirs_bwd"] / t["ours_bwd"], tc_fwd=tc_f, tc_bwd=tc_b,
                       peak_frac_fwd=tc_f / peak, peak_frac_bwd=tc_b / peak)
            rows.append(row)
            print(f"{s:>5} {d:>3}  7x7 | {t['ours_fwd']:>8.3f} {t['theirs_fwd']:>7.3f} "
                  f"{row['fwd_ratio']:>11.1f} {t['flash_fwd']:>5.3f} | {t['ours_bwd']:>8.3f} "
                  f"{t['theirs_bwd']:>7.3f} {row['bwd_ratio']:>11.1f} | {tc_f:>5.0f} "
                  f"({100 * tc_f / peak:.0f}) {tc_b:>5.0f} ({100 * tc_b / peak:.0f}) | "
                  f"{e['ours_o']:>9.2e} "
                  f"{e['theirs_o']:>9.2e} ({e['theirs_first_bad_row']:>5}) | "
                  f"{e['ours_dq']:.2e} {e['theirs_dq']:.2e} | {e['theirs_id_o']:.2e} "
                  f"({e['theirs_id_first_bad_row']:>5})"
                  + (f"  (theirs failed: {e['theirs_failed']})" if e["theirs_failed"] else ""),
                  flush=True)
    write_csv(a.csv, rows)


if __name__ == "__main__":
    main()
