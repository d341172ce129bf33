#!/usr/bin/env python3
"""Fast mode (TA_PRECISION_FAST, tensor cores) SDPA forward on the GPU against
PyTorch SDPA's flash and cuDNN backends, bf16, in the same process, on the same
tensors and stream (issue 10's benchmark):

    python3 bench/cuda_fast_bench.py --lib BUILD/libtileattn_bench.so
        [--dims 64,128,256] [--seqs 512,1024,...] [--tokens 16384] [--hidden 2048]
        [--reps N] [--warmup N] [--csv FILE] [--quick]

Shapes: B * S = --tokens (16k) tokens, H = --hidden / D heads (2048), S from
--seqs, causal and not. [B, H, S, D] tensors for tileattn; PyTorch gets the
same storage. Times are CUDA-event medians of --reps calls after --warmup
calls; inputs uniform in [-1, 1). Before timing, each row checks tileattn's o
against flash's (max abs difference, printed: both are bf16 approximations).
TFLOP/s count 4 B H S^2 D, halved under the causal mask (as FlashAttention
reports). The hardware-limit column is the dense bf16 tensor-core peak of the
device's data sheet (989 TFLOP/s for an H100/H200 SXM; --peak overrides).
Ratios are tileattn's speed over the baseline's (> 1: tileattn faster).
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
from cuda_bench import FwdArgs, Problem, check, load, median_ms  # noqa: E402

TA_BACKEND_CUDA = 2
TA_BF16 = 2
TA_PRECISION_FAST = 1
TA_CAUSAL = 1


def bf16_peak_tflops():
    name = torch.cuda.get_device_name(0)
    if "H100" in name or "H200" in name or "H800" in name or "H20" in name:
        return 989.4, name
    if "A100" in name:
        return 312.0, name
    return float("nan"), name


N_CANDIDATES = {64: 4, 96: 3, 128: 4, 256: 4}  # cuda/ta_cuda_fast_fwd.cu's table (1: wgmma, sm_90)


def run(lib, b, h, s, d, causal, warmup, reps, sweep):
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(4321 + s + d + h)
    q, k, v = ((torch.rand(b, h, s, d, device=dev, generator=gen) * 2 - 1).to(torch.bfloat16)
               for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
    p = Problem(batch=b, heads_q=h, heads_kv=h, seq_q=s, seq_k=s, head_dim=d, head_dim_v=d,
                dtype=TA_BF16, precision=TA_PRECISION_FAST, flags=TA_CAUSAL if causal else 0)
    n_ws = ctypes.c_size_t()
    check(lib, lib.ta_fwd_workspace_size(ctypes.byref(p), TA_BACKEND_CUDA, ctypes.byref(n_ws)),
          "fwd size")
    ws = torch.empty(max(n_ws.value, 1), device=dev, dtype=torch.uint8)
    fa = FwdArgs(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                 lse=lse.data_ptr())
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def ta_fwd():
        check(lib, lib.ta_fwd(ctypes.byref(p), TA_BACKEND_CUDA, ctypes.byref(fa), ws.data_ptr(),
                              ws.numel(), stream), "ta_fwd")

    t = {"ta": median_ms(ta_fwd, warmup, reps)}
    cfg_ms = []
    if sweep:  # every candidate of the table (tile_config k >= 1); "ta" stays the default
        for cfg in range(1, N_CANDIDATES[d] + 1):
            p.tile_config = cfg
            cfg_ms.append(median_ms(ta_fwd, warmup, reps))
        p.tile_config = 0
    ref = None
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION),
                     ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(be):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                if ref is None:
                    ref = out
                t[name] = median_ms(
                    lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                    warmup, reps)
        except RuntimeError as e:  # backend not available for this shape
            print(f"  {name}: unavailable ({str(e).splitlines()[0][:80]})", file=sys.stderr)
            t[name] = float("nan")
    ta_fwd()
    torch.cuda.synchronize()
    err = (o.float() - ref.float()).abs().max().item() if ref is not None else float("nan")
    flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    return t, flops, err, cfg_ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqs", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peak", type=float, default=0.0)
    ap.add_argument("--csv", default="")
    ap.add_argument("--quick", action="store_true", help="D=128, S=1024 and 4096 only")
    ap.add_argument("--sweep", action="store_true",
                    help="also time every tile configuration of the table (ms per candidate)")
    a = ap.parse_args()
    lib = load(a.lib)
    peak, name = bf16_peak_tflops()
    if a.peak > 0:
        peak = a.peak
    dims = [128] if a.quick else [int(x) for x in a.dims.split(",")]
    seqs = [1024, 4096] if a.quick else [int(x) for x in a.seqs.split(",")]
    print(f"device: {name}; torch {torch.__version__}; bf16 dense peak {peak:.0f} TFLOP/s")
    print("fast-mode SDPA forward, bf16, B*S = %d tokens, hidden %d (H = hidden / D)"
          % (a.tokens, a.hidden))
    hdr = ("  D  causal      S   B   H |  ours ms  flash ms  cudnn ms | ours TF/s flash TF/s "
           "cudnn TF/s | ours/flash ours/cudnn | ours %peak | max|o-flash|")
    print(hdr)
    rows = []
    for d in dims:
        h = a.hidden // d
        for causal in (False, True):
            for s in seqs:
                b = max(1, a.tokens // s)
                t, flops, err, cfg_ms = run(lib, b, h, s, d, causal, a.warmup, a.reps, a.sweep)
                tf = {kk: flops / (ms * 1e-3) / 1e12 for kk, ms in t.items()}
                row = dict(D=d, causal=int(causal), S=s, B=b, H=h, ours_ms=t["ta"],
                           flash_ms=t["flash"], cudnn_ms=t["cudnn"], ours_tflops=tf["ta"],
                           flash_tflops=tf["flash"], cudnn_tflops=tf["cudnn"],
                           vs_flash=t["flash"] / t["ta"], vs_cudnn=t["cudnn"] / t["ta"],
                           peak_frac=tf["ta"] / peak, max_abs_diff=err)
                rows.append(row)
                print("%3d  %6s %6d %3d %3d | %8.3f  %8.3f  %8.3f | %9.1f %10.1f %10.1f | "
                      "%10.3f %10.3f | %9.1f%% | %.2e"
                      % (d, "yes" if causal else "no", s, b, h, t["ta"], t["flash"], t["cudnn"],
                         tf["ta"], tf["flash"], tf["cudnn"], row["vs_flash"], row["vs_cudnn"],
                         100 * row["peak_frac"], err), flush=True)
                if cfg_ms:
                    row["config_ms"] = " ".join("%.3f" % x for x in cfg_ms)
                    print("        tile_config 1..%d: %s ms (best %d: %.1f TFLOP/s)"
                          % (len(cfg_ms), row["config_ms"], 1 + cfg_ms.index(min(cfg_ms)),
                             flops / (min(cfg_ms) * 1e-3) / 1e12), flush=True)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
