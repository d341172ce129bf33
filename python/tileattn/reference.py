"""Eager PyTorch references for checking tileattn against a model's own code.

eager_mta is the released MTA code's pre-softmax key-query conv (facebookresearch/RAM,
projects/mta; docs/mta.md), materialised: used by python/tests and by
bench/cuda_bench.py as the baseline, so both compare against one definition.
"""
import torch
import torch.nn.functional as F


def eager_mta(q, k, v, w, scale):
    """Causal MTA, o [B, H, S_q, D_v] from q [B, H, S_q, D], k [B, H, S_k, D],
    v [B, H, S_k, D_v] and the kernel w [H, c_q, c_k] (c_k odd): scores zero-masked
    by each score's own causal pair (bottom-right), padded c_q - 1 rows on top and
    (c_k - 1) / 2 columns each side, conv2d per head (groups = H), then the -inf
    mask and the softmax. Differentiable in q, k, v and w."""
    h, c_q, c_k = w.shape
    s_q, s_k = q.shape[2], k.shape[2]
    vis = torch.ones(s_q, s_k, device=q.device, dtype=torch.bool).tril(s_k - s_q)
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~vis, 0.0)
    s = F.pad(s, ((c_k - 1) // 2, (c_k - 1) // 2, c_q - 1, 0))
    c = F.conv2d(s, w.unsqueeze(1), groups=h)
    c = c.masked_fill(~vis, float("-inf"))
    return torch.softmax(c, dim=-1) @ v
