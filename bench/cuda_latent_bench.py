#!/usr/bin/env python3
"""Latent attention with the reciprocal band on the GPU (issue 14's benchmark):
tileattn at GPT-2-small shapes (exact mode: cuda/ta_cuda_latent.cu's f32
kernels; --fast: fast mode, the tensor-core kernels of
cuda/ta_cuda_fast_latent.cu with the fast SDPA) against, in the same process,
on the same bf16 tensors:

- an eager PyTorch implementation of the definition (docs/api.md, "Latent
  attention and the reciprocal band"): q~ = q W_qlat, S = scale q~ K^T,
  l = S + alpha S^T in the causal band 0 <= i - j <= W, causal softmax,
  ctx~ = P V, o = ctx~ W_vup; forward and autograd backward (grads of q, K, V,
  W_qlat, W_vup, alpha);
- PyTorch SDPA (flash backend) on the equivalent dense attention without the
  band or the projections: q~ [B, H, S, L] against K, V expanded to H heads,
  causal (the attention part's yardstick).

    python3 bench/cuda_latent_bench.py --lib BUILD/libtileattn_bench.so
        [--fast] [--quick] [--reps N] [--warmup N] [--csv FILE] [--kernels]

Shapes: E = 768, H = 12, D = 64, L = 64, W = 64, alpha = 0.5, B = 1,
S = 1k, 2k, 4k, bf16 (--quick: 1k, 2k). Rows:

- `ours band` / `ours plain`: tileattn's latent attention (q~ given, one
  shared kv head of width L) with and without the band: `band/plain` is the
  band's cost (the issue's target: at most 1.15 at S >= 2k);
- `ours band+proj`: the whole definition (q projected on load, the output
  up-projected), the eager implementation's function: `eager/ours` is the
  speed-up (the issue's target: at least 5x at S = 4k); `ours proj` the same
  without the band (`b+p/proj`: the band's cost with the projections);
- fwd and fwd+bwd (each backward timed after its own forward); TFLOP/s of the
  attention's useful work, 4 B H L S (S + 1) / 2 forward (2.5x that for the
  backward's five products), against the f32 FMA peak (exact mode runs on
  CUDA cores) or, with --fast, the dense bf16 tensor-core peak (989 TFLOP/s
  on an H100 SXM); memory: our workspace against eager's peak (GiB).
Times are CUDA-event medians of --reps calls after --warmup calls. --kernels
prints, per S, the device time of each kernel of `ours plain` and `ours band`
(torch.profiler, mean over --reps calls; printed, not in the CSV).
"""
import argparse
import csv
import ctypes
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_bench import (BwdArgs, FwdArgs, Problem, check, f32_peak_tflops, kernel_table,  # noqa: E402
                        load, median_ms)

TA_BACKEND_CUDA = 2
TA_BF16 = 2
TA_CAUSAL, TA_RBAND = 1, 1 << 3
GIB = float(1 << 30)


def ptr(t):
    return ctypes.c_void_p(t.data_ptr()) if t is not None else None


class Ours:
    """One tileattn problem on fixed tensors: forward and backward closures."""

    def __init__(self, lib, t, band, proj, alpha, width, precision):
        b, h, s, dq = t["q"].shape
        lat = t["k"].shape[-1]
        flags = TA_CAUSAL | (TA_RBAND if band else 0)
        self.p = Problem(batch=b, heads_q=h, heads_kv=1, seq_q=s, seq_k=s, head_dim=dq,
                         head_dim_v=t["o"].shape[-1], dtype=TA_BF16, precision=precision,
                         flags=flags)
        if band:
            self.p.rband_alpha, self.p.rband_width = alpha, width
        if proj:
            self.p.latent_dim = lat
        nf, nb = ctypes.c_size_t(), ctypes.c_size_t()
        check(lib, lib.ta_fwd_workspace_size(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                             ctypes.byref(nf)), "fwd size")
        check(lib, lib.ta_bwd_workspace_size(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                             ctypes.byref(nb)), "bwd size")
        self.ws_f = torch.empty(max(nf.value, 1), dtype=torch.uint8, device="cuda")
        self.ws_b = torch.empty(max(nb.value, 1), dtype=torch.uint8, device="cuda")
        self.bytes_f, self.bytes_b = nf.value, nb.value
        self.fa = FwdArgs(q=ptr(t["q"]), k=ptr(t["k"]), v=ptr(t["v"]), o=ptr(t["o"]),
                          lse=ptr(t["lse"]), w_qlat=ptr(t["wq"]) if proj else None,
                          w_vup=ptr(t["wv"]) if proj else None)
        self.ba = BwdArgs(q=ptr(t["q"]), k=ptr(t["k"]), v=ptr(t["v"]), o=ptr(t["o"]),
                          d_o=ptr(t["do"]), lse=ptr(t["lse"]), dq=ptr(t["dq"]), dk=ptr(t["dk"]),
                          dv=ptr(t["dv"]), d_alpha=ptr(t["da"]) if band else None,
                          w_qlat=ptr(t["wq"]) if proj else None,
                          w_vup=ptr(t["wv"]) if proj else None,
                          dw_qlat=ptr(t["dwq"]) if proj else None,
                          dw_vup=ptr(t["dwv"]) if proj else None)
        self.lib = lib
        self.stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def fwd(self):
        check(self.lib, self.lib.ta_fwd(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                        ctypes.byref(self.fa), ptr(self.ws_f), self.bytes_f,
                                        self.stream), "ta_fwd")

    def fwd_bwd(self):
        self.fwd()
        check(self.lib, self.lib.ta_bwd(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                        ctypes.byref(self.ba), ptr(self.ws_b), self.bytes_b,
                                        self.stream), "ta_bwd")


def eager_ra_mla(q, wq, k, v, wv, alpha, width, scale):
    """The definition in bf16: q [B, H, S, D], k, v [B, 1, S, L], wq [H, D, L], wv [H, L, Dv]."""
    s = q.shape[2]
    ql = torch.einsum("bhsd,hdl->bhsl", q, wq.to(q.dtype))
    sc = scale * ql @ k.transpose(-1, -2)                     # [B, H, S, S]
    i = torch.arange(s, device=q.device)
    dist = i[:, None] - i[None, :]
    band = (dist >= 0) & (dist <= width)
    logit = torch.where(band, sc + alpha * sc.transpose(-1, -2), sc)
    logit = logit.masked_fill(dist < 0, float("-inf"))
    p = torch.softmax(logit.float(), dim=-1).to(q.dtype)
    ctx = p @ v
    return torch.einsum("bhsl,hle->bhse", ctx, wv.to(q.dtype))


def run(lib, s, args, peak):
    dev = torch.device("cuda")
    b, h, d, lat, width, alpha = 1, 12, 64, 64, 64, 0.5
    gen = torch.Generator(device=dev).manual_seed(4321 + s)

    def rand(*shape, a=1.0, dt=torch.bfloat16):
        return ((torch.rand(*shape, device=dev, generator=gen) * 2 - 1) * a).to(dt)

    scale = 1.0 / lat ** 0.5
    base = dict(k=rand(b, 1, s, lat), v=rand(b, 1, s, lat), lse=torch.empty(b, h, s, device=dev),
                da=torch.empty(1, device=dev),
                wq=rand(h, d, lat, a=1.5 / d ** 0.5, dt=torch.float32),
                wv=rand(h, lat, d, a=1.0 / lat ** 0.5, dt=torch.float32))
    base["dk"], base["dv"] = torch.empty_like(base["k"]), torch.empty_like(base["v"])
    base["dwq"], base["dwv"] = torch.empty_like(base["wq"]), torch.empty_like(base["wv"])
    ql = rand(b, h, s, lat)  # the latent queries (ours band / plain, SDPA)
    q = rand(b, h, s, d)     # the raw queries (band+proj, eager)
    rows = []
    flops_f = 4.0 * b * h * lat * s * (s + 1) / 2
    for name, band, proj in (("ours plain", False, False), ("ours band", True, False),
                             ("ours proj", False, True), ("ours band+proj", True, True)):
        t = dict(base)
        t["q"] = q if proj else ql
        t["o"] = torch.empty(b, h, s, d if proj else lat, device=dev, dtype=torch.bfloat16)
        t["do"] = rand(*t["o"].shape)
        t["dq"] = torch.empty_like(t["q"])
        ours = Ours(lib, t, band, proj, alpha, width, 1 if args.fast else 0)
        tf = median_ms(ours.fwd, args.warmup, args.reps)
        tb = median_ms(ours.fwd_bwd, args.warmup, args.reps)
        if args.kernels and not proj:
            kernel_table(ours.fwd, args.reps, f"{name} forward, S = {s}")
            kernel_table(ours.fwd_bwd, args.reps, f"{name} forward + backward, S = {s}")
        rows.append(dict(name=name, fwd=tf, fb=tb, gib=max(ours.bytes_f, ours.bytes_b) / GIB))
    # eager: the definition, forward and forward + backward
    qe = q.clone().requires_grad_(True)
    ke, ve = base["k"].clone().requires_grad_(True), base["v"].clone().requires_grad_(True)
    wqe, wve = base["wq"].clone().requires_grad_(True), base["wv"].clone().requires_grad_(True)
    do = rand(b, h, s, d)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    m0 = torch.cuda.memory_allocated()

    def e_fwd():
        with torch.no_grad():
            eager_ra_mla(qe, wqe, ke, ve, wve, alpha, width, scale)

    def e_fb():
        o = eager_ra_mla(qe, wqe, ke, ve, wve, alpha, width, scale)
        torch.autograd.grad(o, (qe, ke, ve, wqe, wve), do)

    ef = median_ms(e_fwd, args.warmup, args.reps)
    eb = median_ms(e_fb, args.warmup, args.reps)
    e_gib = (torch.cuda.max_memory_allocated() - m0) / GIB
    # SDPA flash on the dense equivalent (no band, no projections)
    qs = ql.clone().requires_grad_(True)
    ks = base["k"].expand(b, h, s, lat).contiguous().requires_grad_(True)
    vs = base["v"].expand(b, h, s, lat).contiguous().requires_grad_(True)
    dos = rand(b, h, s, lat)

    def f_fwd():
        with torch.no_grad(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(qs, ks, vs, is_causal=True)

    def f_fb():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
        torch.autograd.grad(o, (qs, ks, vs), dos)

    ff = median_ms(f_fwd, args.warmup, args.reps)
    fb = median_ms(f_fb, args.warmup, args.reps)
    plain, band, proj, full = rows
    out = dict(S=s, plain_fwd=plain["fwd"], band_fwd=band["fwd"], full_fwd=full["fwd"],
               plain_fb=plain["fb"], band_fb=band["fb"], full_fb=full["fb"],
               proj_fwd=proj["fwd"], proj_fb=proj["fb"],
               band_cost_proj_fwd=full["fwd"] / proj["fwd"],
               band_cost_proj_fb=full["fb"] / proj["fb"],
               eager_fwd=ef, eager_fb=eb, flash_fwd=ff, flash_fb=fb,
               band_cost_fwd=band["fwd"] / plain["fwd"], band_cost_fb=band["fb"] / plain["fb"],
               eager_over_ours_fwd=ef / full["fwd"], eager_over_ours_fb=eb / full["fb"],
               ours_over_flash_fwd=band["fwd"] / ff, ours_over_flash_fb=band["fb"] / fb,
               band_tflops_fwd=flops_f / band["fwd"] / 1e9,
               band_tflops_fb=3.5 * flops_f / band["fb"] / 1e9,
               peak=peak, ws_gib=full["gib"], eager_gib=e_gib)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--fast", action="store_true", help="TA_PRECISION_FAST (tensor cores)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--csv")
    ap.add_argument("--kernels", action="store_true",
                    help="also print where ours band / plain spend their time (torch.profiler's "
                         "device time per kernel)")
    args = ap.parse_args()
    lib = load(args.lib)
    peak = 989.4 if args.fast else f32_peak_tflops()
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"{'bf16 tensor-core' if args.fast else 'f32 FMA'} peak {peak:.1f} TFLOP/s; B 1, H 12, "
          f"D 64, L 64, W 64, alpha 0.5, bf16, tileattn "
          f"{'fast mode' if args.fast else 'exact kernels'}")
    print(f"{'S':>5} | {'plain':>8} {'band':>8} {'proj':>8} {'b+proj':>8} {'eager':>8} "
          f"{'flash':>7} | {'band/plain':>10} {'b+p/proj':>8} {'eager/ours':>10} "
          f"{'ours/flash':>10} {'TF/s':>6} {'%peak':>6} | {'ws GiB':>7} {'eager GiB':>9}")
    results = []
    for s in ((1024, 2048) if args.quick else (1024, 2048, 4096)):
        r = run(lib, s, args, peak)
        results.append(r)
        for kind, tag in (("fwd", "fwd"), ("fb", "fwd+bwd")):
            tf = r[f"band_tflops_{kind}"]
            print(f"{s:>5} | {r['plain_' + kind]:8.3f} {r['band_' + kind]:8.3f} "
                  f"{r['proj_' + kind]:8.3f} {r['full_' + kind]:8.3f} {r['eager_' + kind]:8.3f} "
                  f"{r['flash_' + kind]:7.3f} | {r['band_cost_' + kind]:10.3f} "
                  f"{r['band_cost_proj_' + kind]:8.3f} {r['eager_over_ours_' + kind]:10.2f} "
                  f"{r['ours_over_flash_' + kind]:10.1f} {tf:6.2f} {100 * tf / peak:5.1f}% | "
                  f"{r['ws_gib']:7.3f} {r['eager_gib']:9.3f}   {tag} (ms)")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(results[0].keys()))
            w.writeheader()
            w.writerows(results)


if __name__ == "__main__":
    main()
