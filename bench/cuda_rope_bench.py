#!/usr/bin/env python3
"""Fused rotary embeddings on the GPU (issue 13's benchmark): tileattn's fast
mode with the rotary load stage against the same tileattn call without it, and
against PyTorch applying RoPE outside attention and then SDPA (flash, cuDNN),
bf16, in the same process on the same tensors and stream:

    python3 bench/cuda_rope_bench.py --lib BUILD/libtileattn_bench.so [--reps N]
        [--warmup N] [--csv FILE]

Shapes (issue 13):
  vit  (B, H, N, D) = (1024, 6, 197, 64), not causal, 2-D axial RoPE as
       rope-vit/EVA-02 hold it: interleaved pairs, 32 per row, one table row
       per token (row 0 the CLS token: cos 1, sin 0);
  llm  (B, H, S, D) = (4, 16, 4096, 128), causal, Llama's half-split pairs
       (64 per row), base 10000.
Both go through ta_rope_table_1d / 2d-equivalent tables computed here in
float64 and rounded once (the values do not change the timing).

PyTorch's RoPE is the usual eager code: x * cos + rotate(x) * sin in bf16
with the tables cast to bf16 (Hugging Face's apply_rotary_pos_emb for the
half-split convention; the interleaved one rotates pairs by a view and a stack).
Timed: forward (RoPE of q and k, then SDPA) and forward + backward (the same,
then torch.autograd.grad of q, k, v through both); tileattn: ta_fwd, and
ta_fwd + ta_bwd. CUDA-event medians of --reps calls after --warmup.

Columns: ms of tileattn with the stage (ours), without it (plain), PyTorch RoPE +
flash, + cuDNN; ours/plain - 1 (the stage's cost); the speed ratios (> 1:
tileattn faster); TFLOP/s of ours (4 B H S^2 D, halved under the causal mask,
x 3.5 for forward + backward) and its fraction of the dense bf16 peak. `saved MB`:
the least traffic applying RoPE outside costs and the fused stage does not: a
rotated copy of q and k written and read back in the forward (2 x 2 x
(|q| + |k|) bytes), and the same for dq and dk in the backward.
"""
import argparse
import csv
import ctypes
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_bench import BwdArgs, FwdArgs, Problem, check, load, median_ms  # noqa: E402
from cuda_fast_bench import bf16_peak_tflops  # noqa: E402

TA_BACKEND_CUDA = 2
TA_BF16 = 2
TA_PRECISION_FAST = 1
TA_CAUSAL = 1
TA_ROPE_INTERLEAVED = 1
TA_ROPE_HALF = 2
BASELINES = (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))
SHAPES = (  # name, B, H, S, D, causal, pairing
    ("vit", 1024, 6, 197, 64, False, TA_ROPE_INTERLEAVED),
    ("llm", 4, 16, 4096, 128, True, TA_ROPE_HALF),
)


def tables(name, s, d):
    """cos, sin [S][D/2] f32 on the GPU: 2-D axial for the ViT (14 x 14 grid + CLS),
    1-D base 10000 for the LLM."""
    n = d // 2
    ang = torch.zeros(s, n, dtype=torch.float64)
    if name == "vit":
        side = int(math.isqrt(s - 1))
        half = n // 2  # pairs per axis
        freq = 1.0 / (100.0 ** (torch.arange(half, dtype=torch.float64) / half))
        for t in range(1, s):
            y, x = divmod(t - 1, side)
            ang[t, :half] = y * freq
            ang[t, half:] = x * freq
    else:
        freq = 1.0 / (10000.0 ** (torch.arange(n, dtype=torch.float64) * 2 / d))
        ang = torch.arange(s, dtype=torch.float64)[:, None] * freq[None, :]
    return ang.cos().float().cuda().contiguous(), ang.sin().float().cuda().contiguous()


def torch_rope(x, cos, sin, pairing):
    """Eager RoPE in x's dtype: [B, H, S, D] with cos/sin [S, D/2] (f32, cast)."""
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    if pairing == TA_ROPE_HALF:
        c2, s2 = torch.cat((c, c), -1), torch.cat((s, s), -1)
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return x * c2 + torch.cat((-x2, x1), -1) * s2
    xp = x.unflatten(-1, (-1, 2))
    a, b = xp[..., 0], xp[..., 1]
    return torch.stack((a * c - b * s, b * c + a * s), -1).flatten(-2)


class Case:
    def __init__(self, lib, name, b, h, s, d, causal, pairing, rope):
        dev = torch.device("cuda")
        gen = torch.Generator(device=dev).manual_seed(97 + s + d)
        self.q, self.k, self.v, self.d_o = ((torch.rand(b, h, s, d, device=dev, generator=gen)
                                             * 2 - 1).to(torch.bfloat16) for _ in range(4))
        self.o, self.dq, self.dk, self.dv = (torch.empty_like(self.q) for _ in range(4))
        self.lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
        self.cos, self.sin = tables(name, s, d)
        self.lib, self.causal, self.pairing = lib, causal, pairing
        rp = dict(rope=pairing, rope_pairs=d // 2, rope_rows=s) if rope else {}
        self.p = Problem(batch=b, heads_q=h, heads_kv=h, seq_q=s, seq_k=s, head_dim=d,
                         head_dim_v=d, dtype=TA_BF16, precision=TA_PRECISION_FAST,
                         flags=TA_CAUSAL if causal else 0, scale=1.0 / math.sqrt(d), **rp)
        ptr = {k: getattr(self, k).data_ptr() for k in ("q", "k", "v", "o", "lse")}
        self.fa = FwdArgs(**ptr)
        self.ba = BwdArgs(d_o=self.d_o.data_ptr(), dq=self.dq.data_ptr(),
                          dk=self.dk.data_ptr(), dv=self.dv.data_ptr(), **ptr)
        if rope:
            for a in (self.fa, self.ba):
                a.rope.cos, a.rope.sin = self.cos.data_ptr(), self.sin.data_ptr()
        self.stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        n = ctypes.c_size_t()
        check(lib, lib.ta_bwd_workspace_size(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                             ctypes.byref(n)), "bwd size")
        m = ctypes.c_size_t()
        check(lib, lib.ta_fwd_workspace_size(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                             ctypes.byref(m)), "fwd size")
        self.ws = torch.empty(max(n.value, m.value, 1), device=dev, dtype=torch.uint8)
        self.flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)

    def fwd(self):
        check(self.lib, self.lib.ta_fwd(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                        ctypes.byref(self.fa), self.ws.data_ptr(),
                                        self.ws.numel(), self.stream), "ta_fwd")

    def fwd_bwd(self):
        self.fwd()
        check(self.lib, self.lib.ta_bwd(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                        ctypes.byref(self.ba), self.ws.data_ptr(),
                                        self.ws.numel(), self.stream), "ta_bwd")


def torch_calls(c, be):
    """PyTorch: RoPE outside, then SDPA on backend be; forward, forward + backward."""
    def fwd():
        with sdpa_kernel(be):
            return F.scaled_dot_product_attention(torch_rope(c.q, c.cos, c.sin, c.pairing),
                                                  torch_rope(c.k, c.cos, c.sin, c.pairing),
                                                  c.v, is_causal=c.causal)

    leaves = [x.detach().requires_grad_(True) for x in (c.q, c.k, c.v)]

    def fwd_bwd():
        with sdpa_kernel(be):
            out = F.scaled_dot_product_attention(torch_rope(leaves[0], c.cos, c.sin, c.pairing),
                                                 torch_rope(leaves[1], c.cos, c.sin, c.pairing),
                                                 leaves[2], is_causal=c.causal)
        return torch.autograd.grad(out, leaves, c.d_o)

    return fwd, fwd_bwd


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--csv", default="")
    a = ap.parse_args()
    lib = load(a.lib)
    peak, dev = bf16_peak_tflops()
    print(f"device: {dev}; torch {torch.__version__}; bf16 dense peak {peak:.0f} TFLOP/s")
    print("shape pass     B   H     S    D causal | ours ms plain ms flash ms cudnn ms | "
          "stage cost | ours/flash ours/cudnn | ours TF/s %peak | saved MB | max|o-flash|")
    rows = []
    for name, b, h, s, d, causal, pairing in SHAPES:
        ours = Case(lib, name, b, h, s, d, causal, pairing, True)
        plain = Case(lib, name, b, h, s, d, causal, pairing, False)
        # sanity: ours against PyTorch RoPE + flash (bf16 both: a few ulp of o)
        ours.fwd()
        with torch.no_grad():
            ref, _ = torch_calls(ours, BASELINES[0][1])
            err = (ours.o.float() - ref().float()).abs().max().item()
        qk_bytes = 2 * (ours.q.numel() + ours.k.numel())
        for pass_, mult in (("fwd", 1.0), ("fwd+bwd", 3.5)):
            t = {"ours": median_ms(ours.fwd if pass_ == "fwd" else ours.fwd_bwd, a.warmup, a.reps),
                 "plain": median_ms(plain.fwd if pass_ == "fwd" else plain.fwd_bwd, a.warmup,
                                    a.reps)}
            for bn, be in BASELINES:
                try:
                    f, fb = torch_calls(ours, be)
                    if pass_ == "fwd":
                        with torch.no_grad():
                            t[bn] = median_ms(f, a.warmup, a.reps)
                    else:
                        t[bn] = median_ms(fb, a.warmup, a.reps)
                except RuntimeError as e:
                    print(f"  {bn}: unavailable ({str(e).splitlines()[0][:80]})", file=sys.stderr)
                    t[bn] = float("nan")
            tf = mult * ours.flops / (t["ours"] * 1e-3) / 1e12
            saved = 2 * qk_bytes * (1 if pass_ == "fwd" else 2) / 1e6
            row = {"shape": name, "pass": pass_, "B": b, "H": h, "S": s, "D": d,
                   "causal": int(causal), "ours_ms": t["ours"], "plain_ms": t["plain"],
                   "flash_ms": t["flash"], "cudnn_ms": t["cudnn"],
                   "stage_cost": t["ours"] / t["plain"] - 1.0,
                   "vs_flash": t["flash"] / t["ours"], "vs_cudnn": t["cudnn"] / t["ours"],
                   "ours_tflops": tf, "peak_frac": tf / peak, "saved_mb": saved,
                   "max_abs_diff": err}
            rows.append(row)
            print("%-5s %-7s %4d %3d %5d %4d %6s | %7.3f %8.3f %8.3f %8.3f | %9.1f%% | %10.3f "
                  "%10.3f | %9.1f %5.1f%% | %8.1f | %.2e"
                  % (name, pass_, b, h, s, d, "yes" if causal else "no", t["ours"], t["plain"],
                     t["flash"], t["cudnn"], 100 * row["stage_cost"], row["vs_flash"],
                     row["vs_cudnn"], tf, 100 * row["peak_frac"], saved, err), flush=True)
        del ours, plain
        torch.cuda.empty_cache()
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
