"""The ctypes mirror (tileattn/_lib.py) against the C header and the loaded library.

ctypes lays a Structure out from its _fields_ alone: a field added, dropped or
retyped on one side only shifts every later field, and the library then reads
the wrong values (or past the end of a shorter struct) without any error. Two
checks, neither needing torch (this module loads _lib.py by path, not the
tileattn package, whose __init__ imports torch):

  TestLayout   the header, as the C compiler lays it out (test/abi_layout.c
               prints sizeof, _Alignof and each field's name, offsetof, sizeof
               and kind) == ctypes' layout of every struct _lib.C_NAMES lists:
               same fields, order, offsets, sizes, kinds, sizeof. This is the
               check that sees a field appended to the header only (a shorter
               ctypes struct: the library would read past its end).
               TILEATTN_LAYOUT_EXE names the program (CTest sets it); unset:
               skipped.
  TestProbes   the loaded library (TILEATTN_LIB) reads every field where the
               mirror writes it: from a call the ta_explain_* functions accept,
               one field at a time is set to a value the library must refuse
               (a size out of range, a misaligned pointer, a negative stride,
               ...), and the explanation must name that field (a shifted
               mirror makes the library see the value in another field, or in
               none). Catches a library built from another header than _lib.py
               mirrors (the version number does not move within a series).
               Every field of Problem, FwdArgs, BwdArgs and of their nested
               Strides and RopeArgs is probed. TILEATTN_LIB names the library;
               unset: skipped.
"""
import ctypes
import importlib.util
import json
import os
import re
import subprocess
import unittest

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load_lib_module():
    path = os.path.join(_HERE, os.pardir, "tileattn", "_lib.py")
    spec = importlib.util.spec_from_file_location("tileattn_lib_mirror", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_INT_TYPES = (ctypes.c_int8, ctypes.c_int16, ctypes.c_int32, ctypes.c_int64, ctypes.c_uint8,
              ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t,
              ctypes.c_ssize_t, ctypes.c_int, ctypes.c_uint, ctypes.c_long, ctypes.c_ulong)
_FLOAT_TYPES = (ctypes.c_float, ctypes.c_double)
_POINTER_TYPES = (ctypes.c_void_p, ctypes.c_char_p)


def _kind(ctype, c_names):
    """The kind of a ctypes field type, in abi_layout.c's words."""
    if ctype in _INT_TYPES:
        return "int"
    if ctype in _FLOAT_TYPES:
        return "float"
    if ctype in _POINTER_TYPES or issubclass(ctype, ctypes._Pointer):
        return "pointer"
    if issubclass(ctype, ctypes.Structure):
        return "struct:" + c_names.get(ctype, f"<{ctype.__name__}, not in _lib.C_NAMES>")
    return f"<unclassified {ctype.__name__}>"


def python_layout(cls, c_names):
    """[name, offset, size, kind] of every field of ctypes Structure cls, in offset order."""
    rows = []
    for name, ctype in cls._fields_:
        desc = getattr(cls, name)
        rows.append([name, desc.offset, desc.size, _kind(ctype, c_names)])
    return sorted(rows, key=lambda r: r[1])


def layout_diff(c_name, c, cls, c_names):
    """Lines saying how ctypes Structure cls differs from C layout c (empty: equal)."""
    out = []
    py_fields = python_layout(cls, c_names)
    c_fields = [list(f) for f in c["fields"]]
    for i in range(max(len(py_fields), len(c_fields))):
        p = py_fields[i] if i < len(py_fields) else None
        k = c_fields[i] if i < len(c_fields) else None
        if p != k:
            out.append(f"{c_name} field {i}: C {k} (name, offset, size, kind), "
                       f"ctypes {cls.__name__} {p}")
            break  # every later field follows from the first difference
    if ctypes.sizeof(cls) != c["size"]:
        out.append(f"{c_name}: sizeof {c['size']} in C, {ctypes.sizeof(cls)} in ctypes")
    if ctypes.alignment(cls) != c["align"]:
        out.append(f"{c_name}: alignment {c['align']} in C, {ctypes.alignment(cls)} in ctypes")
    return out


class TestLayout(unittest.TestCase):
    """Every ctypes Structure of _lib.py == its C struct (test/abi_layout.c's report)."""

    @classmethod
    def setUpClass(cls):
        exe = os.environ.get("TILEATTN_LAYOUT_EXE")
        if not exe:
            raise unittest.SkipTest("TILEATTN_LAYOUT_EXE not set (CTest sets it to the "
                                    "abi_layout program built from test/abi_layout.c)")
        run = subprocess.run([exe], capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            raise AssertionError(f"{exe} failed (exit {run.returncode}): {run.stderr.strip()}")
        cls.c_layouts = json.loads(run.stdout)
        cls.mirror = _load_lib_module()
        print(f"\nlayouts of {exe}: " + ", ".join(
            f"{n} ({v['size']} bytes, {len(v['fields'])} fields)"
            for n, v in cls.c_layouts.items()), flush=True)

    def test_every_struct_named(self):
        """Every Structure subclass in _lib.py has its C name in _lib.C_NAMES."""
        structs = [v for v in vars(self.mirror).values()
                   if isinstance(v, type) and issubclass(v, ctypes.Structure)
                   and v.__module__ == self.mirror.__name__]
        self.assertTrue(structs)
        for cls in structs:
            self.assertIn(cls, self.mirror.C_NAMES,
                          f"_lib.{cls.__name__}: add its C struct's name to _lib.C_NAMES")

    def test_layouts_match(self):
        c_names = self.mirror.C_NAMES
        for cls, c_name in c_names.items():
            with self.subTest(struct=c_name):
                self.assertIn(c_name, self.c_layouts,
                              f"{c_name} (mirrored by _lib.{cls.__name__}) is not in "
                              "test/abi_layout.c's table: add it there")
                diff = layout_diff(c_name, self.c_layouts[c_name], cls, c_names)
                if diff:
                    self.fail("\n".join(diff))
                print(f"  {c_name} == _lib.{cls.__name__}: {len(cls._fields_)} fields, "
                      f"{ctypes.sizeof(cls)} bytes")

    def test_diff_can_fail(self):
        """layout_diff sees a field dropped, appended, swapped or retyped (the check itself)."""
        c_names = self.mirror.C_NAMES
        p = self.mirror.Problem
        c = self.c_layouts["ta_problem"]
        fields = list(p._fields_)
        variants = {
            "dropped": fields[:5] + fields[6:],
            "appended": fields + [("extra", ctypes.c_int32)],
            "swapped": fields[:1] + [fields[2], fields[1]] + fields[3:],
            "retyped": [(n, ctypes.c_int32 if t is ctypes.c_float else t) for n, t in fields],
        }
        for what, fl in variants.items():
            bad = type("Bad" + what, (ctypes.Structure,), {"_fields_": fl})
            self.assertNotEqual(layout_diff("ta_problem", c, bad, c_names), [], what)


# TestProbes: a small valid problem, and the settings under which each optional
# argument is read (a field the library ignores in a call cannot be probed there).
_BASE = dict(batch=1, heads_q=2, heads_kv=1, seq_q=16, seq_k=16, head_dim=8, head_dim_v=8)
_BUF_FLOATS = 8192  # every float buffer: larger than any tensor of these problems


def _configs(m):
    return {
        "sdpa": {},
        "conv": dict(conv_q=2, conv_k=3, flags=m.TA_CAUSAL),
        "history": dict(conv_q=2, conv_k=3, flags=m.TA_CAUSAL, q_history=1),
        "ring": dict(conv_q=2, conv_k=3, flags=m.TA_CAUSAL),
        "rope": dict(rope=1, rope_pairs=2, rope_rows=16),
        "pages": dict(kv_page_size=8, kv_num_pages=2, kv_max_blocks=2),
        "latent": dict(latent_dim=4),
        "rband": dict(flags=m.TA_CAUSAL | m.TA_RBAND, rband_alpha=0.5, rband_width=2),
        "accumulate": {},
        "conv_accumulate": dict(conv_q=2, conv_k=3, flags=m.TA_CAUSAL),
    }


# The setting each args field is probed under (others: "sdpa").
_FWD_CONFIG = dict(conv_w="conv", rope="rope", q_hist="history", q_hist_strides="history",
                   block_table="pages", w_qlat="latent", w_vup="latent", score_ring="ring",
                   score_ring_slots="ring", score_ring_strides="ring")
# int32 args fields' refused values where 2 would pass (others: 2)
_INT_BAD = dict(score_ring_slots=1)  # below conv_q
_BWD_CONFIG = dict(conv_w="conv", dconv_w="conv", rope="rope", d_alpha="rband",
                   w_qlat="latent", w_vup="latent", dw_qlat="latent", dw_vup="latent",
                   accumulate="accumulate", dq_lo="accumulate", dk_lo="accumulate",
                   dv_lo="accumulate", dconv_w_lo="conv_accumulate")

# Refused values of the Problem fields (each alone on _BASE), as the library
# documents them (include/tileattn.h); a float NaN / non-zero without its flag.
_PROBLEM_BAD = dict(
    batch=0, heads_q=0, heads_kv=0, seq_q=0, seq_k=0, head_dim=0, head_dim_v=0, dtype=7,
    precision=9, flags=1 << 20, scale=float("nan"), conv_q=17, conv_k=2, block_q=5, block_k=5,
    num_threads=-1, window_left=1, window_right=1, tile_config=-1, num_splits=-2, rope=9,
    rope_pairs=1, rope_rows=1, rope_row_stride=1, rope_head_stride=1, q_history=1,
    kv_page_size=-1, kv_num_pages=1, kv_max_blocks=1, rband_alpha=1.0, rband_width=1,
    latent_dim=-1, q_offset=(1 << 30) + 1, key_begin=-1, key_end=17, row_begin=-1, row_end=17)


def _names(explanation, name):
    """True if the explanation line is about `name` (a field path, e.g. args.rope.cos)."""
    return re.match(re.escape(name) + r"(?![A-Za-z0-9_.])", explanation) is not None


class TestProbes(unittest.TestCase):
    """The loaded library reads every mirrored field where _lib.py writes it."""

    @classmethod
    def setUpClass(cls):
        if not os.environ.get("TILEATTN_LIB"):
            raise unittest.SkipTest("TILEATTN_LIB not set (CTest sets it where the build "
                                    "has the shared library)")
        m = _load_lib_module()
        cls.lib = m.lib()
        print(f"\nprobing {m.lib_path()}", flush=True)
        cls.m = m
        cls.keep = []  # the buffers of the calls, alive until the class is done

    def _floats(self):
        a = (ctypes.c_float * _BUF_FLOATS)()
        self.keep.append(a)
        return ctypes.addressof(a)

    def _ints(self, values):
        a = (ctypes.c_int32 * len(values))(*values)
        self.keep.append(a)
        return ctypes.addressof(a)

    def _problem(self, config, **fields):
        p = self.m.Problem(**_BASE, **_configs(self.m)[config])
        for k, v in fields.items():
            setattr(p, k, v)
        return p

    def _args(self, kind, config):
        """A valid FwdArgs / BwdArgs of setting config: every buffer it reads, distinct."""
        m, a = self.m, (self.m.FwdArgs() if kind == "fwd" else self.m.BwdArgs())
        tensors = ("q", "k", "v", "o", "lse") if kind == "fwd" else (
            "q", "k", "v", "o", "d_o", "lse", "dq", "dk", "dv")
        for name in tensors:
            setattr(a, name, self._floats())
        if config != "rband":  # no key lengths with the band
            a.seqlens_k = self._ints([_BASE["seq_k"]])
        if config in ("conv", "history", "conv_accumulate", "ring"):
            a.conv_w = self._floats()
        if config == "rope":
            a.rope = m.RopeArgs(self._floats(), self._floats(), self._ints(list(range(16))),
                                self._ints(list(range(16))))
        if config == "latent":
            a.w_qlat, a.w_vup = self._floats(), self._floats()
        if kind == "fwd":
            if config == "history":
                a.q_hist = self._floats()
            if config == "pages":
                a.block_table = self._ints([0, 1])
            if config == "ring":  # the MTA decode score ring, c_q = 2 slots
                a.score_ring, a.score_ring_slots = self._floats(), 2
        else:
            if config in ("conv", "conv_accumulate"):
                a.dconv_w = self._floats()
            if config == "rband":
                a.d_alpha = self._floats()
            if config == "latent":
                a.dw_qlat, a.dw_vup = self._floats(), self._floats()
            if config in ("accumulate", "conv_accumulate"):
                a.accumulate = 1
                a.dq_lo, a.dk_lo, a.dv_lo = self._floats(), self._floats(), self._floats()
            if config == "conv_accumulate":
                a.dconv_w_lo = self._floats()
        return a

    def _explain(self, kind, p, a=None):
        """(status, line) of ta_explain_fwd/bwd (or of the size query's, a = None)."""
        lib, buf = self.lib, ctypes.create_string_buffer(512)
        if a is None:
            fn = lib.ta_explain_fwd_workspace_size if kind == "fwd" else \
                lib.ta_explain_bwd_workspace_size
            return fn(ctypes.byref(p), 0, buf, len(buf)), buf.value.decode()
        size = ctypes.c_size_t(0)
        query = lib.ta_fwd_workspace_size if kind == "fwd" else lib.ta_bwd_workspace_size
        st = query(ctypes.byref(p), 0, ctypes.byref(size))
        if st != 0:
            return st, "the workspace size query failed"
        ws = (ctypes.c_uint8 * (size.value + 64))()
        self.keep.append(ws)
        base = (ctypes.addressof(ws) + 63) // 64 * 64
        fn = lib.ta_explain_fwd if kind == "fwd" else lib.ta_explain_bwd
        st = fn(ctypes.byref(p), 0, ctypes.byref(a), base, size.value, None, buf, len(buf))
        return st, buf.value.decode()

    def _expect_named(self, what, st, line, name):
        self.assertNotEqual(st, 0, f"{what}: accepted ({line})")
        self.assertTrue(_names(line, name), f"{what}: the library names another field: "
                                            f"{line!r}, expected {name!r}")

    def test_problem_fields(self):
        fields = [n for n, _ in self.m.Problem._fields_]
        self.assertEqual(sorted(fields), sorted(_PROBLEM_BAD),
                         "_PROBLEM_BAD needs a refused value of every Problem field")
        self.assertEqual(self._explain("fwd", self._problem("sdpa")), (0, "ok: every check passed"))
        for name in fields:
            with self.subTest(field=name):
                p = self._problem("sdpa", **{name: _PROBLEM_BAD[name]})
                st, line = self._explain("fwd", p)
                self._expect_named(f"Problem.{name} = {_PROBLEM_BAD[name]}", st, line, name)
        print(f"  Problem: {len(fields)} fields named by ta_explain_fwd_workspace_size")

    def _probe_args(self, kind, cls, configs):
        m, probed = self.m, 0
        for config in sorted(set(configs.values()) | {"sdpa"}):
            st, line = self._explain(kind, self._problem(config), self._args(kind, config))
            self.assertEqual(st, 0, f"{kind} setting {config}: {line}")
        for name, ctype in cls._fields_:
            config = configs.get(name, "sdpa")
            if ctype is m.Strides:  # each member negative
                paths = [((name, mem), -1) for mem, _ in m.Strides._fields_]
            elif ctype is m.RopeArgs:  # each pointer misaligned
                paths = [((name, mem), None) for mem, _ in m.RopeArgs._fields_]
            elif ctype is ctypes.c_int32:  # accumulate: 0 or 1; score_ring_slots >= c_q
                paths = [((name,), _INT_BAD.get(name, 2))]
            else:  # a pointer: misaligned (trace: into a zeroed buffer)
                paths = [((name,), None)]
            for path, bad in paths:
                full = "args." + ".".join(path)
                with self.subTest(field=full):
                    a = self._args(kind, config)
                    obj = a
                    for part in path[:-1]:
                        obj = getattr(obj, part)
                    if bad is None:
                        bad = (getattr(obj, path[-1]) or self._floats()) + 1
                    setattr(obj, path[-1], bad)
                    st, line = self._explain(kind, self._problem(config), a)
                    self._expect_named(f"{full} = {bad} ({config})", st, line, full)
                    probed += 1
        print(f"  {cls.__name__}: {len(cls._fields_)} fields ({probed} probes) named by "
              f"ta_explain_{kind}")

    def test_fwd_args_fields(self):
        self._probe_args("fwd", self.m.FwdArgs, _FWD_CONFIG)

    def test_bwd_args_fields(self):
        self._probe_args("bwd", self.m.BwdArgs, _BWD_CONFIG)


if __name__ == "__main__":
    unittest.main()
