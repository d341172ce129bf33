"""tileattn.attention against PyTorch: SDPA (torch.nn.functional.scaled_dot_product_attention)
and an eager MTA, forward and gradients; REF == CPU bit for bit; CUDA == CPU bit for bit
(skipped without a GPU). unittest, so pytest is optional:

    python -m unittest discover -s python/tests -v      or      pytest python/tests

Seeds: one base seed per run, printed first; TILEATTN_TEST_SEED=N replays a run.
Every test prints the seed it used.
"""
import os
import random
import sys
import unittest

import torch
import torch.nn.functional as F

import tileattn
from tileattn.reference import eager_mta

BASE_SEED = int(os.environ.get("TILEATTN_TEST_SEED", random.SystemRandom().randrange(1 << 31)))
print(f"tileattn tests: base seed {BASE_SEED} (TILEATTN_TEST_SEED={BASE_SEED} replays), "
      f"torch {torch.__version__}, library {tileattn.library_path()}", flush=True)

# Tolerances against PyTorch in f32: both sides compute in f32 with other summation
# orders and other exp/log, so they differ by a few ulps of the values' magnitude.
# Measured over 9 seeded runs of the cases here (inputs in [-1, 1)): at most 1.7e-6
# (o and grads), dconv_w 1.4e-6 of its magnitude.
ATOL_O, ATOL_GRAD, RTOL = 2e-6, 5e-6, 1e-5


def _gen(test, offset):
    seed = BASE_SEED + offset
    print(f"\n{test.id()}: seed {seed}", flush=True)
    return torch.Generator().manual_seed(seed)


def _rand(gen, *shape, dtype=torch.float32):
    return (torch.rand(*shape, generator=gen, dtype=torch.float32) * 2 - 1).to(dtype)


def _leaf(x):
    return x.detach().clone().requires_grad_(True)


def _grads(out, inputs, d_o):
    return torch.autograd.grad(out, inputs, d_o)


def _visible(s_q, s_k, causal=False, window=None, seqlens=None, batch=1):
    """[B, 1, S_q, S_k] bool: what query row r may see (bottom-right alignment)."""
    r = torch.arange(s_q).unsqueeze(1) + (s_k - s_q)  # the row's absolute position
    j = torch.arange(s_k).unsqueeze(0)
    vis = torch.ones(s_q, s_k, dtype=torch.bool)
    if causal:
        vis &= j <= r
    if window is not None:
        left, right = window
        if left >= 0:
            vis &= j >= r - left
        if right >= 0:
            vis &= j <= r + right
    vis = vis.expand(batch, 1, s_q, s_k).clone()
    if seqlens is not None:
        for b, n in enumerate(seqlens):
            vis[b, :, :, n:] = False
    return vis


def sdpa_ref(q, k, v, scale, mask=None):
    """PyTorch SDPA (math), GQA by repeating kv heads (query head h reads kv head h // g)."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


class Case:
    def __init__(self, b, h, h_kv, s_q, s_k, d, d_v, causal=False, window=None, seqlens=None):
        self.__dict__.update(locals())
        del self.__dict__["self"]

    def __repr__(self):
        return " ".join(f"{k}={v}" for k, v in self.__dict__.items())

    def tensors(self, gen, dtype=torch.float32):
        return (_rand(gen, self.b, self.h, self.s_q, self.d, dtype=dtype),
                _rand(gen, self.b, self.h_kv, self.s_k, self.d, dtype=dtype),
                _rand(gen, self.b, self.h_kv, self.s_k, self.d_v, dtype=dtype),
                _rand(gen, self.b, self.h, self.s_q, self.d_v, dtype=dtype))


SDPA_CASES = [
    Case(2, 4, 4, 50, 50, 32, 32),
    Case(2, 4, 4, 50, 50, 32, 32, causal=True),
    Case(2, 4, 2, 40, 40, 16, 16, causal=True),              # GQA
    Case(1, 4, 1, 33, 33, 64, 24, causal=True),              # MQA, D != D_v
    Case(1, 2, 2, 24, 70, 32, 32, causal=True),              # S_q < S_k: bottom-right
    Case(1, 2, 1, 70, 24, 32, 16),                           # S_q > S_k
    Case(2, 2, 2, 45, 60, 16, 16, causal=True, seqlens=[60, 41]),
    Case(1, 2, 2, 64, 64, 16, 16, window=(9, 3)),
    Case(1, 2, 2, 64, 80, 16, 16, causal=True, window=(20, -1)),
]


class TestSDPA(unittest.TestCase):
    """CPU backend, f32, against PyTorch SDPA: o and dq, dk, dv."""

    def check_case(self, i, c):
        gen = _gen(self, 100 + i)
        q, k, v, d_o = c.tensors(gen)
        scale = 0.25
        mask = None
        if c.causal or c.window or c.seqlens:
            mask = _visible(c.s_q, c.s_k, c.causal, c.window, c.seqlens, c.b)
        ins_t, ins_r = [_leaf(x) for x in (q, k, v)], [_leaf(x) for x in (q, k, v)]
        o_t = tileattn.attention(*ins_t, causal=c.causal, scale=scale, seqlens_k=c.seqlens,
                                 window=c.window)
        o_r = sdpa_ref(*ins_r, scale, mask)
        err = (o_t - o_r).abs().max().item()
        torch.testing.assert_close(o_t, o_r, atol=ATOL_O, rtol=RTOL, msg=lambda m: f"{c}: o: {m}")
        g_t, g_r = _grads(o_t, ins_t, d_o), _grads(o_r, ins_r, d_o)
        for name, a, b in zip(("dq", "dk", "dv"), g_t, g_r):
            err = max(err, (a - b).abs().max().item())
            torch.testing.assert_close(a, b, atol=ATOL_GRAD, rtol=RTOL,
                                       msg=lambda m, n=name: f"{c}: {n}: {m}")
        print(f"  {c}: max |tileattn - torch| = {err:.2e}")

    def test_cases(self):
        for i, c in enumerate(SDPA_CASES):
            with self.subTest(case=repr(c)):
                self.check_case(i, c)

    def test_default_scale(self):
        gen = _gen(self, 200)
        q, k, v, _ = Case(1, 2, 2, 20, 20, 48, 48).tensors(gen)
        torch.testing.assert_close(tileattn.attention(q, k, v), sdpa_ref(q, k, v, None),
                                   atol=ATOL_O, rtol=RTOL)

    def test_half_precision(self):
        """f16/bf16 storage, f32 arithmetic: within the output's rounding of torch in f32."""
        for dtype, u in ((torch.float16, 2.0 ** -11), (torch.bfloat16, 2.0 ** -8)):
            gen = _gen(self, 210 + _DT_OFFSET[dtype])
            q, k, v, _ = Case(1, 4, 2, 30, 30, 32, 32, causal=True).tensors(gen, dtype)
            o_t = tileattn.attention(q, k, v, causal=True)
            o_r = sdpa_ref(q.float(), k.float(), v.float(), None,
                           _visible(30, 30, causal=True))
            self.assertEqual(o_t.dtype, dtype)
            torch.testing.assert_close(o_t.float(), o_r, atol=2 * u, rtol=0)

    def test_strided_inputs(self):
        """[B, S, H, D] tensors viewed as [B, H, S, D]: read in place, same bits as contiguous."""
        gen = _gen(self, 220)
        q, k, v, d_o = Case(2, 4, 2, 30, 40, 16, 16, causal=True).tensors(gen)
        q_s, k_s, v_s = (_leaf(x.transpose(1, 2).contiguous()) for x in (q, k, v))
        ins_c = [_leaf(x) for x in (q, k, v)]
        o_s = tileattn.attention(*(x.transpose(1, 2) for x in (q_s, k_s, v_s)), causal=True)
        o_c = tileattn.attention(*ins_c, causal=True)
        self.assertTrue(torch.equal(o_s, o_c))
        g_s = _grads(o_s, (q_s, k_s, v_s), d_o)
        g_c = _grads(o_c, ins_c, d_o)
        for a, b in zip(g_s, g_c):
            self.assertTrue(torch.equal(a.transpose(1, 2), b))

    def test_sum_backward(self):
        """o.sum().backward(): the incoming gradient is an expanded (stride 0) tensor."""
        gen = _gen(self, 230)
        q, k, v, _ = Case(1, 2, 2, 16, 16, 8, 8).tensors(gen)
        ins_t, ins_r = [_leaf(x) for x in (q, k, v)], [_leaf(x) for x in (q, k, v)]
        tileattn.attention(*ins_t).sum().backward()
        sdpa_ref(*ins_r, None).sum().backward()
        for a, b in zip(ins_t, ins_r):
            torch.testing.assert_close(a.grad, b.grad, atol=ATOL_GRAD, rtol=RTOL)


_DT_OFFSET = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}

MTA_CASES = [  # (B, H, S_q, S_k, D, c_q, c_k)
    (1, 2, 40, 40, 16, 3, 5),
    (2, 2, 33, 33, 32, 6, 11),   # the paper's 6 x 11
    (1, 3, 24, 40, 16, 2, 3),    # S_q < S_k
]


def _mta_inputs(gen, b, h, s_q, s_k, d, c_q, c_k):
    q, k, v = _rand(gen, b, h, s_q, d), _rand(gen, b, h, s_k, d), _rand(gen, b, h, s_k, d)
    w = _rand(gen, h, c_q, c_k) * 0.3
    w[:, c_q - 1, (c_k - 1) // 2] += 1.0  # near the identity: a softmax that is not flat
    return q, k, v, w, _rand(gen, b, h, s_q, d)


class TestMTA(unittest.TestCase):
    """CPU backend, f32, MTA against the eager PyTorch MTA: o, dq, dk, dv, dconv_w."""

    def test_cases(self):
        for i, (b, h, s_q, s_k, d, c_q, c_k) in enumerate(MTA_CASES):
            with self.subTest(case=(b, h, s_q, s_k, d, c_q, c_k)):
                gen = _gen(self, 300 + i)
                *ins, d_o = _mta_inputs(gen, b, h, s_q, s_k, d, c_q, c_k)
                scale = 0.25
                ins_t, ins_r = [_leaf(x) for x in ins], [_leaf(x) for x in ins]
                o_t = tileattn.attention(*ins_t[:3], conv_w=ins_t[3], causal=True, scale=scale)
                o_r = eager_mta(*ins_r, scale)
                torch.testing.assert_close(o_t, o_r, atol=ATOL_O, rtol=RTOL)
                g_t, g_r = _grads(o_t, ins_t, d_o), _grads(o_r, ins_r, d_o)
                err = (o_t - o_r).abs().max().item()
                for name, a, r in zip(("dq", "dk", "dv"), g_t[:3], g_r[:3]):
                    err = max(err, (a - r).abs().max().item())
                    torch.testing.assert_close(a, r, atol=ATOL_GRAD, rtol=RTOL,
                                               msg=lambda m, n=name: f"{n}: {m}")
                # dconv_w sums B * S_q * S_k terms: relative to its magnitude
                dw_err = ((g_t[3] - g_r[3]).abs().max() / g_r[3].abs().max()).item()
                self.assertLess(dw_err, 5e-6, "dconv_w")
                print(f"  MTA {(b, h, s_q, s_k, d, c_q, c_k)}: max |tileattn - torch| = "
                      f"{err:.2e}, dconv_w relative {dw_err:.2e}")

    def test_identity_conv_is_causal_sdpa(self):
        gen = _gen(self, 320)
        q, k, v, _ = Case(1, 2, 2, 30, 30, 16, 16).tensors(gen)
        w = torch.zeros(2, 3, 5)
        w[:, 2, 2] = 1.0
        torch.testing.assert_close(tileattn.attention(q, k, v, conv_w=w, causal=True),
                                   tileattn.attention(q, k, v, causal=True), atol=0, rtol=0)


def _run_all(backend, q, k, v, d_o, device="cpu", **kw):
    """o, dq, dk, dv (and dconv_w) of one backend."""
    ins = [_leaf(x.to(device)) for x in (q, k, v)]
    conv_w = kw.pop("conv_w", None)
    if conv_w is not None:
        ins.append(_leaf(conv_w.to(device)))
        kw["conv_w"] = ins[3]
    o = tileattn.attention(*ins[:3], backend=backend, **kw)
    return [o] + list(_grads(o, ins, d_o.to(device)))


class TestBitIdentity(unittest.TestCase):
    """Exact mode: REF and CPU give the same bits (torch.equal), forward and backward."""

    def assert_same_bits(self, ref, other, what):
        for name, a, b in zip(("o", "dq", "dk", "dv", "dconv_w"), ref, other):
            self.assertTrue(torch.equal(a.cpu(), b.cpu()), f"{what}: {name} differs")

    def test_ref_equals_cpu(self):
        problems = [
            ("sdpa f32 causal GQA", Case(2, 4, 2, 70, 90, 32, 32, causal=True), torch.float32, {}),
            ("sdpa bf16 window", Case(1, 2, 2, 50, 50, 64, 64, window=(10, 10)),
             torch.bfloat16, {}),
            ("sdpa f16 seqlens", Case(2, 2, 1, 20, 40, 16, 8, seqlens=[40, 17]),
             torch.float16, {}),
        ]
        for i, (what, c, dtype, kw) in enumerate(problems):
            with self.subTest(what=what):
                gen = _gen(self, 400 + i)
                q, k, v, d_o = c.tensors(gen, dtype)
                args = dict(causal=c.causal, window=c.window, seqlens_k=c.seqlens, **kw)
                self.assert_same_bits(_run_all("ref", q, k, v, d_o, **args),
                                      _run_all("cpu", q, k, v, d_o, **args), what)

    def test_ref_equals_cpu_mta(self):
        gen = _gen(self, 410)
        q, k, v, w, d_o = _mta_inputs(gen, 2, 2, 45, 45, 32, 6, 11)
        self.assert_same_bits(_run_all("ref", q, k, v, d_o, conv_w=w, causal=True),
                              _run_all("cpu", q, k, v, d_o, conv_w=w, causal=True), "mta")

    def test_thread_counts(self):
        gen = _gen(self, 420)
        q, k, v, d_o = Case(1, 4, 4, 60, 60, 32, 32, causal=True).tensors(gen)
        one = _run_all("cpu", q, k, v, d_o, causal=True, num_threads=1)
        two = _run_all("cpu", q, k, v, d_o, causal=True, num_threads=2)
        self.assert_same_bits(one, two, "num_threads 1 vs 2")


class TestErrors(unittest.TestCase):
    def test_library_version(self):
        self.assertEqual(tileattn.library_version(), tileattn.__version__)

    def test_bad_heads(self):
        q, k = torch.zeros(1, 3, 8, 8), torch.zeros(1, 2, 8, 8)
        with self.assertRaises(tileattn.TileattnError) as cm:
            tileattn.attention(q, k, k)
        self.assertEqual(cm.exception.status_name, "TA_ERR_BAD_SHAPE")
        self.assertIn("heads", cm.exception.explanation)
        print(f"\n  {cm.exception}")

    def test_conv_needs_causal(self):
        q = torch.zeros(1, 2, 8, 8)
        with self.assertRaises(tileattn.TileattnError) as cm:
            tileattn.attention(q, q, q, conv_w=torch.zeros(2, 2, 3))
        self.assertEqual(cm.exception.status_name, "TA_ERR_UNSUPPORTED")
        self.assertIn("causal", str(cm.exception).lower())
        print(f"\n  {cm.exception}")

    def test_python_side_checks(self):
        q = torch.zeros(1, 2, 8, 8)
        with self.assertRaises(ValueError):
            tileattn.attention(q, q, q, backend="gpu")
        with self.assertRaises(TypeError):
            tileattn.attention(q, q.double(), q)
        with self.assertRaises(ValueError):
            tileattn.attention(q, q, q, conv_w=torch.zeros(3, 2, 3), causal=True)


def _cuda_ok():
    return torch.cuda.is_available() and tileattn.backend_available("cuda")


@unittest.skipUnless(_cuda_ok(), "no CUDA device, or a library built without CUDA")
class TestCUDA(unittest.TestCase):
    """CUDA exact == CPU, bit for bit, on torch's current stream."""

    def test_cuda_equals_cpu(self):
        gen = _gen(self, 500)
        q, k, v, d_o = Case(2, 4, 2, 70, 90, 32, 32, causal=True).tensors(gen)
        cpu = _run_all("cpu", q, k, v, d_o, causal=True)
        gpu = _run_all("cuda", q, k, v, d_o, device="cuda", causal=True)
        for name, a, b in zip(("o", "dq", "dk", "dv"), cpu, gpu):
            self.assertTrue(torch.equal(a, b.cpu()), name)

    def test_cuda_equals_cpu_mta(self):
        gen = _gen(self, 510)
        q, k, v, w, d_o = _mta_inputs(gen, 1, 2, 45, 45, 32, 6, 11)
        cpu = _run_all("cpu", q, k, v, d_o, conv_w=w, causal=True)
        gpu = _run_all("cuda", q, k, v, d_o, device="cuda", conv_w=w, causal=True)
        for name, a, b in zip(("o", "dq", "dk", "dv", "dconv_w"), cpu, gpu):
            self.assertTrue(torch.equal(a, b.cpu()), name)


if __name__ == "__main__":
    sys.exit(unittest.main())
