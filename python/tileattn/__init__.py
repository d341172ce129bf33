"""tileattn for PyTorch: exact attention (SDPA and Multi-Token Attention's key-query
convolution) with forward and backward, through ctypes over libtileattn_shared.so.

    o = tileattn.attention(q, k, v, causal=True)        # q [B, H, S_q, D], k, v [B, H_kv, S_k, *]
    o.sum().backward()                                    # dq, dk, dv (and dconv_w) from ta_bwd

python/README.md has the details; docs/api.md the library's contract.
"""
import contextlib
import ctypes
import math

import torch

from . import _lib
from ._lib import BwdArgs, FwdArgs, Problem, Strides
from .reference import eager_mta

__version__ = "0.2.0"
__all__ = ["attention", "TileattnError", "backend_available", "library_version", "library_path",
           "eager_mta"]

_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}  # ta_dtype


class TileattnError(RuntimeError):
    """A ta_* call returned an error status. `status` is the code (e.g. -2),
    `status_name` its name ("TA_ERR_BAD_SHAPE"), `explanation` the line of
    ta_explain_* naming the failed check (empty where none applies)."""

    def __init__(self, what, status, explanation=""):
        lib = _lib.lib()
        self.status = status
        self.status_name = _lib.STATUS_NAMES.get(status, "TA_ERR_UNKNOWN")
        self.explanation = explanation
        msg = f"{what}: {lib.ta_status_string(status).decode()}"
        if explanation:
            msg += f" [{explanation}]"
        super().__init__(msg)


def backend_available(backend):
    """True if the loaded library has `backend` ("ref", "cpu", "cuda") and can run it now."""
    return bool(_lib.lib().ta_backend_available(_backend_id(backend)))


def library_version():
    """The loaded library's version string, e.g. "0.2.0"."""
    return _lib.lib().ta_version_string().decode()


def library_path():
    """The path of the shared library this package loads (TILEATTN_LIB overrides)."""
    return _lib.lib_path()


def _backend_id(backend):
    if backend not in _lib.BACKENDS:
        raise ValueError(f"backend must be one of {sorted(_lib.BACKENDS)}, got {backend!r}")
    return _lib.BACKENDS[backend]


def _explain(fn, *args):
    buf = ctypes.create_string_buffer(256)
    fn(*args, buf, len(buf))
    return buf.value.decode(errors="replace")


def _strided(x):
    """x itself when the library can read its layout (feature dim contiguous, no
    zero stride on a dim of size > 1), else a contiguous copy."""
    if x.stride(-1) == 1 and all(st != 0 or n == 1 for n, st in zip(x.shape, x.stride())):
        return x
    return x.contiguous()


def _strides(x):
    return Strides(batch=x.stride(0), head=x.stride(1), seq=x.stride(2))


def _ptr(x):
    return None if x is None else x.data_ptr()


class _Config:
    """Everything but the differentiable tensors: the problem, backend, seqlens_k."""

    def __init__(self, problem, backend_id, seqlens_k, device):
        self.problem = problem
        self.backend = backend_id
        self.seqlens_k = seqlens_k  # host int32 [B] or None
        self.device = device

    def on_device(self):
        """The CUDA device of the tensors made current for the call (a no-op on CPU)."""
        if self.device.type == "cuda":
            return torch.cuda.device(self.device)
        return contextlib.nullcontext()

    def stream(self):
        if self.backend != _lib.BACKENDS["cuda"]:
            return None
        return torch.cuda.current_stream(self.device).cuda_stream

    def workspace(self, size_fn, explain_fn, what):
        """(pointer, bytes, keep-alive tensor) of a TA_WORKSPACE_ALIGN-aligned workspace."""
        n = ctypes.c_size_t()
        st = size_fn(ctypes.byref(self.problem), self.backend, ctypes.byref(n))
        if st != _lib.TA_OK:
            raise TileattnError(what, st, _explain(explain_fn, ctypes.byref(self.problem),
                                                   self.backend))
        if n.value == 0:
            return None, 0, None
        buf = torch.empty(n.value + _lib.TA_WORKSPACE_ALIGN, dtype=torch.uint8,
                          device=self.device)
        skip = -buf.data_ptr() % _lib.TA_WORKSPACE_ALIGN
        return buf.data_ptr() + skip, n.value, buf


def _run(cfg, which, args):
    """ta_<which> ("fwd" or "bwd") on args: sizes and allocates the workspace, calls,
    and raises TileattnError with the ta_explain_* line on a failed status."""
    lib = _lib.lib()
    size_name = f"ta_{which}_workspace_size"
    ws, ws_bytes, _keep = cfg.workspace(getattr(lib, size_name),
                                        getattr(lib, f"ta_explain_{which}_workspace_size"),
                                        size_name)
    call = (ctypes.byref(cfg.problem), cfg.backend, ctypes.byref(args), ws, ws_bytes,
            cfg.stream())
    st = getattr(lib, f"ta_{which}")(*call)
    if st != _lib.TA_OK:
        raise TileattnError(f"ta_{which}", st, _explain(getattr(lib, f"ta_explain_{which}"),
                                                        *call))


def _forward(cfg, q, k, v, conv_w):
    b, h, s_q, _ = q.shape
    o = torch.empty(b, h, s_q, v.shape[3], dtype=q.dtype, device=q.device)
    lse = torch.empty(b, h, s_q, dtype=torch.float32, device=q.device)
    a = FwdArgs(q=_ptr(q), k=_ptr(k), v=_ptr(v), conv_w=_ptr(conv_w),
                seqlens_k=_ptr(cfg.seqlens_k), o=_ptr(o), lse=_ptr(lse),
                q_strides=_strides(q), k_strides=_strides(k), v_strides=_strides(v))
    _run(cfg, "fwd", a)
    return o, lse


def _backward(cfg, q, k, v, conv_w, o, lse, d_o):
    dq, dk, dv = (torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in (q, k, v))
    dconv_w = None if conv_w is None else torch.empty_like(conv_w)
    a = BwdArgs(q=_ptr(q), k=_ptr(k), v=_ptr(v), o=_ptr(o), d_o=_ptr(d_o), lse=_ptr(lse),
                conv_w=_ptr(conv_w), seqlens_k=_ptr(cfg.seqlens_k), dq=_ptr(dq), dk=_ptr(dk),
                dv=_ptr(dv), dconv_w=_ptr(dconv_w),
                q_strides=_strides(q), k_strides=_strides(k), v_strides=_strides(v),
                d_o_strides=_strides(d_o))
    _run(cfg, "bwd", a)
    return dq, dk, dv, dconv_w


class _Attention(torch.autograd.Function):
    """forward: ta_fwd (o, and lse kept for the backward); backward: ta_bwd."""

    @staticmethod
    def forward(ctx, q, k, v, conv_w, cfg):
        with cfg.on_device():
            o, lse = _forward(cfg, q, k, v, conv_w)
        ctx.save_for_backward(q, k, v, conv_w, o, lse)
        ctx.cfg = cfg
        return o

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_o):
        q, k, v, conv_w, o, lse = ctx.saved_tensors
        with ctx.cfg.on_device():
            dq, dk, dv, dconv_w = _backward(ctx.cfg, q, k, v, conv_w, o, lse, _strided(d_o))
        need = ctx.needs_input_grad
        return (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None,
                dconv_w if need[3] else None, None)


def _check_tensors(q, k, v, backend):
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError(f"{name} must be a 4-d torch tensor [B, heads, S, dim]")
        if x.dtype not in _DTYPES:
            raise TypeError(f"{name}: dtype {x.dtype} is not float32, float16 or bfloat16")
        if x.dtype != q.dtype or x.device != q.device:
            raise TypeError(f"{name}: dtype/device {x.dtype}/{x.device} differs from q's "
                            f"{q.dtype}/{q.device}")
    on_cuda = q.device.type == "cuda"
    if on_cuda != (backend == "cuda"):
        raise ValueError(f"backend {backend!r} takes {'CUDA' if backend == 'cuda' else 'CPU'} "
                         f"tensors, got tensors on {q.device}")
    if k.shape[0] != q.shape[0] or v.shape[:3] != k.shape[:3] or k.shape[3] != q.shape[3]:
        raise ValueError(f"shapes do not fit: q {tuple(q.shape)} [B, H, S_q, D], "
                         f"k {tuple(k.shape)} [B, H_kv, S_k, D], v {tuple(v.shape)} "
                         "[B, H_kv, S_k, D_v]")


def attention(q, k, v, conv_w=None, causal=False, backend="cpu", precision="exact", scale=None,
              seqlens_k=None, window=None, block_q=0, block_k=0, num_threads=None):
    """Attention softmax(scale q k^T [conv]) v of tileattn, differentiable.

    q [B, H, S_q, D], k [B, H_kv, S_k, D], v [B, H_kv, S_k, D_v]: float32, float16
    or bfloat16, all one dtype and device; H_kv divides H (query head h reads kv
    head h // (H // H_kv)). Any strides with the last dim contiguous are read in
    place; other layouts are copied. Returns o [B, H, S_q, D_v], contiguous.

    conv_w      None, or [H, c_q, c_k] (float32; other dtypes are cast): MTA's
                pre-softmax key-query convolution (needs causal=True; c_q in
                [1, 16], c_k odd in [1, 31]); its gradient is dconv_w.
    causal      bottom-right causal mask: query row r sees keys j <= r + S_k - S_q.
    backend     "ref" (scalar reference), "cpu" (AVX2/AVX-512 + OpenMP): CPU
                tensors; "cuda": CUDA tensors, on torch's current stream.
    precision   "exact" (bit-identical on every backend) or "fast" (CUDA f16/bf16:
                the SDPA forward and backward and the MTA forward on tensor
                cores, within documented bounds; docs/api.md).
    scale       score scale; None = 1/sqrt(D).
    seqlens_k   None, or B ints (list or tensor): keys at or past seqlens_k[b] are masked.
    window      None, or (left, right): row r at position p = r + S_k - S_q sees keys
                in [p - left, p + right]; a negative bound is unbounded (FlashAttention's
                window_size).
    block_q, block_k  tile sizes (0 = the library's default); block_k is part of the
                exactness contract (equal block_k, equal bits).
    num_threads CPU backend threads; None = torch.get_num_threads() (results never
                depend on it).
    Errors from the library raise TileattnError with the failed check in words.
    """
    be = _backend_id(backend)
    if precision not in _lib.PRECISIONS:
        raise ValueError(f"precision must be 'exact' or 'fast', got {precision!r}")
    _check_tensors(q, k, v, backend)
    b, h, s_q, d = q.shape
    h_kv, s_k, d_v = k.shape[1], k.shape[2], v.shape[3]
    p = Problem(batch=b, heads_q=h, heads_kv=h_kv, seq_q=s_q, seq_k=s_k, head_dim=d,
                head_dim_v=d_v, dtype=_DTYPES[q.dtype], precision=_lib.PRECISIONS[precision],
                block_q=block_q, block_k=block_k)
    p.flags = _lib.TA_CAUSAL if causal else 0
    if window is not None:
        left, right = window
        p.flags |= _lib.TA_WINDOW
        p.window_left, p.window_right = int(left), int(right)
    if scale is not None:
        if not math.isfinite(scale) or scale == 0:
            raise ValueError(f"scale must be finite and non-zero, got {scale}")
        p.scale = scale
    if num_threads is None:
        num_threads = min(torch.get_num_threads(), _lib.TA_THREADS_MAX) if backend == "cpu" else 0
    p.num_threads = num_threads
    if conv_w is not None:
        if conv_w.dim() != 3:
            raise ValueError(f"conv_w must be [H, c_q, c_k], got shape {tuple(conv_w.shape)}")
        if conv_w.device != q.device:
            raise TypeError(f"conv_w is on {conv_w.device}, q on {q.device}")
        if conv_w.shape[0] != h:
            raise ValueError(f"conv_w must be [H = {h}, c_q, c_k], got {tuple(conv_w.shape)}")
        conv_w = conv_w.to(torch.float32).contiguous()  # a cast autograd differentiates
        p.conv_q, p.conv_k = conv_w.shape[1], conv_w.shape[2]
    if seqlens_k is not None:
        seqlens_k = torch.as_tensor(seqlens_k).to(device="cpu", dtype=torch.int32).contiguous()
        if seqlens_k.shape != (b,):
            raise ValueError(f"seqlens_k must have B = {b} entries, got {tuple(seqlens_k.shape)}")
    cfg = _Config(p, be, seqlens_k, q.device)
    return _Attention.apply(_strided(q), _strided(k), _strided(v), conv_w, cfg)
