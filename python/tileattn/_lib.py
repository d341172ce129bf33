"""ctypes mirror of include/tileattn.h and the loader of libtileattn_shared.so.

The structs list every field in the header's order (ctypes zero-fills those not
set, which the header defines as "default"). Keep them in step with the header:
tests/test_mirror.py compares every struct here (C_NAMES) with the compiler's
layout of the header's (test/abi_layout.c: offsets, sizes, kinds; CTest
python_layout), tests/test_attention.py checks the version the library reports
against this package's, and a struct grows only by appending (docs/api.md,
"Versions and ABI").
"""
import ctypes
import os

LIB_NAME = "libtileattn_shared.so"

# ta_status (stable numbers)
TA_OK = 0
STATUS_NAMES = {
    0: "TA_OK", -1: "TA_ERR_NULL_ARG", -2: "TA_ERR_BAD_SHAPE", -3: "TA_ERR_BAD_ARG",
    -4: "TA_ERR_UNSUPPORTED", -5: "TA_ERR_OVERFLOW", -6: "TA_ERR_WORKSPACE_SIZE",
    -7: "TA_ERR_WORKSPACE_ALIGN", -8: "TA_ERR_BACKEND_UNAVAILABLE", -9: "TA_ERR_DEVICE",
}
BACKENDS = {"ref": 0, "cpu": 1, "cuda": 2}   # ta_backend
PRECISIONS = {"exact": 0, "fast": 1}         # ta_precision
TA_CAUSAL = 1 << 0
TA_WINDOW = 1 << 1
TA_SEQLENS_DEVICE = 1 << 2  # args.seqlens_k in device memory (CUDA)
TA_RBAND = 1 << 3  # the reciprocal band of latent attention (REF, CPU, CUDA)
TA_WORKSPACE_ALIGN = 64
TA_THREADS_MAX = 256


class Problem(ctypes.Structure):  # ta_problem
    _fields_ = [(n, ctypes.c_int32) for n in
                ("batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim", "head_dim_v",
                 "dtype", "precision")] + [
        ("flags", ctypes.c_uint32), ("scale", ctypes.c_float)] + [
        (n, ctypes.c_int32) for n in ("conv_q", "conv_k", "block_q", "block_k", "num_threads",
                                      "window_left", "window_right", "tile_config", "num_splits",
                                      "rope", "rope_pairs", "rope_rows", "rope_row_stride",
                                      "rope_head_stride", "q_history", "kv_page_size",
                                      "kv_num_pages", "kv_max_blocks")] + [
        ("rband_alpha", ctypes.c_float), ("rband_width", ctypes.c_int32),  # reciprocal band
        ("latent_dim", ctypes.c_int32)] + [  # fused latent projections
        (n, ctypes.c_int32) for n in ("q_offset", "key_begin", "key_end")] + [  # key ranges
        (n, ctypes.c_int32) for n in ("row_begin", "row_end")]  # the backward's row range


class RopeArgs(ctypes.Structure):  # ta_rope_args; all NULL with rope = 0 (no rotation)
    _fields_ = [(n, ctypes.c_void_p) for n in ("cos", "sin", "pos_q", "pos_k")]


class Strides(ctypes.Structure):  # ta_strides; all zero = contiguous
    _fields_ = [(n, ctypes.c_int64) for n in ("batch", "head", "seq")]


class FwdArgs(ctypes.Structure):  # ta_fwd_args
    _fields_ = [(n, ctypes.c_void_p) for n in
                ("q", "k", "v", "conv_w", "seqlens_k", "o", "lse", "trace")] + [
        (n + "_strides", Strides) for n in ("q", "k", "v", "o")] + [("rope", RopeArgs)] + [
        ("q_hist", ctypes.c_void_p), ("q_hist_strides", Strides)] + [  # MTA query history rows
        ("block_table", ctypes.c_void_p)] + [  # paged KV cache
        (n, ctypes.c_void_p) for n in ("w_qlat", "w_vup")] + [  # fused latent projections
        ("score_ring", ctypes.c_void_p), ("score_ring_slots", ctypes.c_int32),  # MTA decode
        ("score_ring_strides", Strides)]


class BwdArgs(ctypes.Structure):  # ta_bwd_args
    _fields_ = [(n, ctypes.c_void_p) for n in
                ("q", "k", "v", "o", "d_o", "lse", "conv_w", "seqlens_k", "dq", "dk", "dv",
                 "dconv_w", "trace")] + [
        (n + "_strides", Strides) for n in ("q", "k", "v", "o", "d_o", "dq", "dk", "dv")] + [
        ("rope", RopeArgs)] + [  # the reciprocal band's d_alpha, the latent projections
        (n, ctypes.c_void_p) for n in ("d_alpha", "w_qlat", "w_vup", "dw_qlat", "dw_vup")] + [
        ("accumulate", ctypes.c_int32)] + [  # the backward over ranges: f32 (hi, lo) pairs
        (n, ctypes.c_void_p) for n in ("dq_lo", "dk_lo", "dv_lo")] + [
        ("dconv_w_lo", ctypes.c_void_p)]  # with the MTA conv: dconv_w's lo words


# The C struct each Structure above mirrors (tests/test_mirror.py checks each one).
C_NAMES = {Problem: "ta_problem", RopeArgs: "ta_rope_args", Strides: "ta_strides",
           FwdArgs: "ta_fwd_args", BwdArgs: "ta_bwd_args"}


def _declare(lib):
    P, c_int, c_size_t, vp = ctypes.POINTER(Problem), ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p
    sizes = (P, c_int, ctypes.POINTER(c_size_t))
    calls = {
        "ta_status_string": ((c_int,), ctypes.c_char_p),
        "ta_fwd_workspace_size": (sizes, c_int),
        "ta_bwd_workspace_size": (sizes, c_int),
        "ta_fwd": ((P, c_int, ctypes.POINTER(FwdArgs), vp, c_size_t, vp), c_int),
        "ta_bwd": ((P, c_int, ctypes.POINTER(BwdArgs), vp, c_size_t, vp), c_int),
        "ta_explain_fwd": ((P, c_int, ctypes.POINTER(FwdArgs), vp, c_size_t, vp,
                            ctypes.c_char_p, c_size_t), c_int),
        "ta_explain_bwd": ((P, c_int, ctypes.POINTER(BwdArgs), vp, c_size_t, vp,
                            ctypes.c_char_p, c_size_t), c_int),
        "ta_explain_fwd_workspace_size": ((P, c_int, ctypes.c_char_p, c_size_t), c_int),
        "ta_explain_bwd_workspace_size": ((P, c_int, ctypes.c_char_p, c_size_t), c_int),
        "ta_backend_available": ((c_int,), c_int),
        "ta_version": ((), ctypes.c_uint32),
        "ta_version_string": ((), ctypes.c_char_p),
    }
    for name, (argtypes, restype) in calls.items():
        fn = getattr(lib, name)
        fn.argtypes = list(argtypes)
        fn.restype = restype
    return lib


def lib_path():
    """TILEATTN_LIB if set, else the copy this package was installed with."""
    env = os.environ.get("TILEATTN_LIB")
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), LIB_NAME)


_LIB = None


def lib():
    """The loaded library (loaded once, on first use)."""
    global _LIB
    if _LIB is None:
        path = lib_path()
        if not os.path.exists(path):
            raise ImportError(
                f"tileattn: no shared library at {path}: install the package with "
                "`pip install ./python` (it builds one with CMake), or build the target "
                "tileattn_shared (-DTILEATTN_SHARED=ON) and set TILEATTN_LIB to the .so")
        _LIB = _declare(ctypes.CDLL(path))
    return _LIB
