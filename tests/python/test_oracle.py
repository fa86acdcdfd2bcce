"""The independent oracle (tests/oracle/oracle.py) against the committed golden
vectors, and evidence that the comparison can fail.

Run by `make test-python` (PYTHONPATH=python LACS_BUILD=build /usr/bin/python3
-m unittest discover -s tests/python -t .). LACS_VECTORS overrides the vector
directory (default: vectors/ at the repository root).
"""

import ctypes
import importlib.util
import io
import os
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VECTORS = os.environ.get("LACS_VECTORS", os.path.join(ROOT, "vectors"))
MANIFEST = os.path.join(VECTORS, "MANIFEST.json")
TOL = 1e-10


def _load_oracle():
    spec = importlib.util.spec_from_file_location(
        "lacs_oracle", os.path.join(ROOT, "tests", "oracle", "oracle.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


O = _load_oracle()


def _cases():
    return O._manifest_cases(VECTORS)


def _size(entry):
    shapes = entry.get("shapes") or {}
    return sum(int(np.prod(s)) for s in shapes.values()) if shapes else 0


def _smallest(op, pred=None):
    """The vector of `op` with the fewest elements (manifest shapes) for
    which pred(vector) holds, or None."""
    entries = sorted((c for c in _cases() if c.get("op") == op), key=_size)
    for c in entries:
        vec = O.load_vector(os.path.join(VECTORS, c["path"]))
        if pred is None or pred(vec):
            return vec
    return None


def _inputs(vec):
    return {k: np.asarray(a) for k, a in vec.inputs.items()}


def _finite(vec):
    return all(np.all(np.isfinite(a)) for k, a in vec.inputs.items() if k != "cu_seqlens") and \
        all(np.all(np.isfinite(a)) for a in vec.expected.values())


# ----------------------------------------------------------------------------
# deliberately wrong variants, written plainly (not from the oracle's forms)
# ----------------------------------------------------------------------------


def _delta_rule_beta_only_on_write(inp, scale):
    """h_t = (I - k_t k_t^T) h_{t-1} + beta_t k_t v_t^T: beta missing from the
    erase term."""
    q, k, v, beta = (np.asarray(inp[n], dtype=np.float64) for n in ("q", "k", "v", "beta"))
    h0 = inp.get("h0")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    G = HV // H
    o = np.zeros((B, T, HV, V))
    for n, b, t0, t1 in O._sequences(B, T, inp.get("cu_seqlens")):
        for hv in range(HV):
            h = np.zeros((K, V)) if h0 is None else np.array(h0[n, hv], dtype=np.float64)
            for t in range(t0, t1):
                kt = k[b, t, hv // G]
                h = h - np.outer(kt, kt @ h) + beta[b, t, hv] * np.outer(kt, v[b, t, hv])
                o[b, t, hv] = scale * (h.T @ q[b, t, hv // G])
    return {"o": o}


def _path_attn_reversed(inp, scale):
    """PaTH with the product reversed: H_{j+1} ... H_i instead of H_i ... H_{j+1}."""
    q, k, v, w, beta = (np.asarray(inp[n], dtype=np.float64) for n in ("q", "k", "v", "w", "beta"))
    g = inp.get("g")
    B, T, H, K = q.shape
    HV = v.shape[2]
    G = HV // H
    o = np.zeros(v.shape)
    for n, b, t0, t1 in O._sequences(B, T, inp.get("cu_seqlens")):
        L = t1 - t0
        for hv in range(HV):
            qs, ks, ws = q[b, t0:t1, hv // G], k[b, t0:t1, hv // G], w[b, t0:t1, hv // G]
            bs = beta[b, t0:t1, hv]
            P = np.broadcast_to(np.eye(K), (L, K, K)).copy()   # P[j] = H_{j+1} ... H_i
            logits = np.full((L, L), -np.inf)
            for i in range(L):
                # P[j] <- P[j] H_i for j < i (right multiplication: reversed order)
                Pw = P[:i] @ ws[i]
                P[:i] -= bs[i] * Pw[:, :, None] * ws[i][None, None, :]
                x = np.einsum("jab,jb->ja", P[:i + 1], ks[:i + 1])
                gate = 0.0 if g is None else (np.cumsum(g[b, t0:t1, hv])[i] - np.cumsum(g[b, t0:t1, hv])[:i + 1])
                logits[i, :i + 1] = scale * (x @ qs[i] + gate)
            m = logits.max(axis=1, keepdims=True)
            p = np.exp(logits - m)
            o[b, t0:t1, hv] = (p / p.sum(axis=1, keepdims=True)) @ v[b, t0:t1, hv]
    return {"o": o}


def _dyt_alpha_outside(inp):
    """y = weight alpha tanh(x) + bias instead of weight tanh(alpha x) + bias."""
    x = np.asarray(inp["x"], dtype=np.float64)
    alpha = float(np.asarray(inp["alpha"]).reshape(-1)[0])
    y = alpha * np.tanh(x)
    if inp.get("weight") is not None:
        y = y * np.asarray(inp["weight"], dtype=np.float64)
    if inp.get("bias") is not None:
        y = y + np.asarray(inp["bias"], dtype=np.float64)
    return {"y": y}


# ----------------------------------------------------------------------------


class OracleAgreesWithTheGoldens(unittest.TestCase):
    def test_manifest_exists(self):
        self.assertTrue(os.path.exists(MANIFEST), "%s is missing" % MANIFEST)

    def test_every_supported_case_within_1e_10(self):
        self.assertTrue(os.path.exists(MANIFEST), "%s is missing" % MANIFEST)
        out = io.StringIO()
        n, failed, nskip, worst = O.run(VECTORS, out=out)
        report = out.getvalue()
        self.assertGreater(n, 0, "no case of a supported op in the manifest\n" + report)
        bad = [line for line in report.splitlines() if line.endswith("FAIL")]
        self.assertEqual(failed, 0, "cases beyond %g:\n%s" % (TOL, "\n".join(bad)))
        self.assertLessEqual(worst, TOL, report.splitlines()[-1])
        ops = {c.get("op") for c in _cases()}
        # every gradient of an op on sequences (SPEC 4.19) is recomputed by the oracle's own adjoint
        vjps = {op for op in ops if op.endswith("_vjp") and op not in O.ELEMENTWISE_OPS}
        self.assertGreaterEqual(len(vjps), 12, sorted(vjps))
        self.assertEqual(vjps - set(O.VJP_RECURRENT + O.VJP_ATTENTION), set(), "VJPs the oracle skips")
        for op in O.SUPPORTED_OPS:   # every supported op present is exercised
            if op in ops:
                self.assertTrue(any(line.split(" ")[0].startswith(op + "-") for line in report.splitlines()),
                                op)


@unittest.skipUnless(os.path.exists(MANIFEST), "no vectors/MANIFEST.json")
class OracleCanFail(unittest.TestCase):
    def test_a_golden_perturbed_by_1e_8_is_rejected(self):
        seen = set()
        for c in _cases():
            op = c.get("op")
            if op not in O.SUPPORTED_OPS or op in seen:
                continue
            vec = O.load_vector(os.path.join(VECTORS, c["path"]))
            if not _finite(vec):
                continue
            inputs = _inputs(vec)
            got = O.compute(op, inputs, vec.params)
            ok, _ = O.compare(op, got, vec.expected, inputs.get("cu_seqlens"))
            self.assertLessEqual(ok, TOL, vec.meta.get("id"))
            for name, ref in vec.expected.items():
                if not np.any(ref != 0):
                    continue
                # perturb one block only (the last block that is not all zero) by 1e-8 relative
                bad = dict(vec.expected)
                pert = np.array(ref, dtype=np.float64, copy=True)
                blocks = O._blocks(op, name, pert.shape, inputs.get("cu_seqlens"))
                nonzero = [b for b in blocks if np.any(pert[b] != 0)]
                blk = nonzero[-1]
                pert[blk] = pert[blk] * (1 + 1e-8)
                bad[name] = pert
                err, per = O.compare(op, got, bad, inputs.get("cu_seqlens"))
                with self.subTest(case=vec.meta.get("id"), output=name):
                    self.assertGreater(err, TOL)
                    self.assertGreater(per[name], 5e-9)
            seen.add(op)
        self.assertTrue(seen, "no finite case of a supported op")

    def test_delta_rule_with_beta_missing_from_the_erase_term_is_rejected(self):
        vec = _smallest("delta_rule", lambda v: _finite(v) and np.any(np.abs(v.inputs["beta"] - 1) > 1e-3))
        if vec is None:
            self.skipTest("no delta_rule vector with beta != 1")
        inp = _inputs(vec)
        scale = float(vec.params["scale"])
        good, _ = O.compare("delta_rule", O.compute("delta_rule", inp, vec.params),
                            vec.expected, inp.get("cu_seqlens"))
        self.assertLessEqual(good, TOL)
        bad, _ = O.compare("delta_rule", _delta_rule_beta_only_on_write(inp, scale),
                           {"o": vec.expected["o"]}, inp.get("cu_seqlens"))
        self.assertGreater(bad, TOL, vec.meta.get("id"))

    def test_a_gate_gradient_without_its_reverse_cumulative_sum_is_rejected(self):
        # the local term dG_t = dg_t - dg_{t+1} for dg_t = sum_{s >= t} dG_s: the bug of a
        # chunked backward that forgets chunk_local_cumsum(reverse=True)
        vec = _smallest("gated_delta_rule_vjp", lambda v: _finite(v) and "g" in v.inputs and v.inputs["g"].shape[1] > 8)
        if vec is None:
            self.skipTest("no gated_delta_rule_vjp vector with g")
        inp = _inputs(vec)
        got = O.compute("gated_delta_rule_vjp", inp, vec.params)
        good, _ = O.compare("gated_delta_rule_vjp", got, vec.expected, inp.get("cu_seqlens"))
        self.assertLessEqual(good, TOL)
        local = dict(got)
        local["dg"] = got["dg"] - np.concatenate([got["dg"][:, 1:], np.zeros_like(got["dg"][:, :1])], axis=1)
        bad, per = O.compare("gated_delta_rule_vjp", local, vec.expected, inp.get("cu_seqlens"))
        self.assertGreater(per["dg"], 1e-2, vec.meta.get("id"))

    def test_path_attn_with_the_product_reversed_is_rejected(self):
        vec = _smallest("path_attn", lambda v: _finite(v) and v.inputs["q"].shape[1] >= 3
                        and np.any(v.inputs["beta"] != 0))
        if vec is None:
            self.skipTest("no path_attn vector")
        inp = _inputs(vec)
        scale = float(vec.params["scale"])
        good, _ = O.compare("path_attn", O.compute("path_attn", inp, vec.params),
                            vec.expected, inp.get("cu_seqlens"))
        self.assertLessEqual(good, TOL)
        bad, _ = O.compare("path_attn", _path_attn_reversed(inp, scale), vec.expected,
                           inp.get("cu_seqlens"))
        self.assertGreater(bad, TOL, vec.meta.get("id"))

    def test_dyt_with_alpha_outside_tanh_is_rejected(self):
        def differs(v):
            a = float(np.asarray(v.inputs["alpha"]).reshape(-1)[0])
            x = np.asarray(v.inputs["x"], dtype=np.float64)
            return a not in (0.0, 1.0) and np.any(np.isfinite(x) & (x != 0))
        vec = _smallest("dyt", differs)
        if vec is None:
            self.skipTest("no dyt vector with alpha other than 0, 1")
        inp = _inputs(vec)
        good, _ = O.compare("dyt", O.compute("dyt", inp, vec.params), vec.expected)
        self.assertLessEqual(good, TOL)
        bad, _ = O.compare("dyt", _dyt_alpha_outside(inp), vec.expected)
        self.assertGreater(bad, TOL, vec.meta.get("id"))


# ----------------------------------------------------------------------------
# the development check against the C reference on random inputs (skipped
# without build/liblacs.so): the oracle's matrix forms against lacs_ref_*,
# which compute the recurrences and explicit forms
# ----------------------------------------------------------------------------

_LIB = os.path.join(ROOT, os.environ.get("LACS_BUILD", "build"), "liblacs.so")
_DP = ctypes.POINTER(ctypes.c_double)
_I64 = ctypes.c_int64


class _Dims(ctypes.Structure):   # lacs_dims, include/lacs/types.h
    _fields_ = [(n, _I64) for n in ("B", "T", "H", "HV", "K", "V")] + [
        ("cu_seqlens", ctypes.POINTER(_I64)), ("N", _I64)]


class _Inputs(ctypes.Structure):  # lacs_inputs, include/lacs/types.h
    _fields_ = [(n, _DP) for n in ("q", "k", "v", "beta", "g", "gk", "g_gamma", "h0", "w",
                                   "lambda", "h0_kk")] + [("scale", ctypes.c_double), ("eps", ctypes.c_double)]


_SEQ_NAMES = ("q", "k", "v", "beta", "g", "gk", "g_gamma", "h0", "w", "lambda", "h0_kk")
_STATEFUL = ("linear_attn", "linear_attn_postnorm", "retention", "simple_gla", "gla", "delta_rule",
             "gated_delta_rule", "comba", "efla")


@unittest.skipUnless(os.path.exists(_LIB), "no %s" % _LIB)
class OracleAgreesWithTheCReference(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lib = ctypes.CDLL(_LIB)
        cls.rng = np.random.default_rng(20240611)

    def _c_seq(self, op, inp, scale=0.0, eps=0.0, form=None):
        """Runs lacs_ref_<op> on the named inputs; returns its outputs by name."""
        keep = []

        def ptr(a):
            a = np.ascontiguousarray(a, dtype=np.float64)
            keep.append(a)
            return a.ctypes.data_as(_DP)
        q, v = inp["q"], inp["v"]
        B, T, H, K = q.shape
        HV, V = v.shape[2], v.shape[3]
        d = _Dims(B, T, H, HV, K, V, None, 0)
        N = B
        if inp.get("cu_seqlens") is not None:
            cu = np.ascontiguousarray(inp["cu_seqlens"], dtype=np.int64)
            keep.append(cu)
            d.cu_seqlens = cu.ctypes.data_as(ctypes.POINTER(_I64))
            N = d.N = len(cu) - 1
        ins = _Inputs()
        for n in _SEQ_NAMES:
            if inp.get(n) is not None:
                setattr(ins, n, ptr(inp[n]))
        ins.scale, ins.eps = scale, eps
        out = {"o": np.zeros((B, T, HV, V))}
        if op in _STATEFUL:
            out["ht"] = np.zeros((N, HV, K, V))
        if op == "mesa_net":
            out["ht"], out["ht_kk"] = np.zeros((N, HV, K, V)), np.zeros((N, HV, K, K))
        args = [ctypes.byref(d), ctypes.byref(ins)]
        if form is not None:
            args.append(ctypes.c_int(form))
        args += [a.ctypes.data_as(_DP) for a in out.values()]
        rc = getattr(self.lib, "lacs_ref_" + op)(*args)
        self.assertEqual(rc, 0, op)
        return out

    def _problem(self, B, T, H, HV, K, V, cu=None, gate=None):
        r = self.rng
        f32 = lambda a: np.asarray(a, dtype=np.float32).astype(np.float64)
        unit = lambda a: a / np.linalg.norm(a, axis=-1, keepdims=True)
        N = B if cu is None else len(cu) - 1
        inp = {"q": f32(r.standard_normal((B, T, H, K))), "k": f32(unit(r.standard_normal((B, T, H, K)))),
               "v": f32(r.standard_normal((B, T, HV, V))),
               "beta": f32(1 / (1 + np.exp(-r.standard_normal((B, T, HV))))),
               "h0": f32(r.standard_normal((N, HV, K, V)))}
        if cu is not None:
            inp["cu_seqlens"] = np.array(cu, dtype=np.int64)
        if gate == "g":          # one -inf: full forgetting (SPEC 8)
            inp["g"] = f32(-r.random((B, T, HV)) * 3)
            inp["g"][0, min(5, T - 1), 0] = -np.inf
        elif gate == "gk":
            inp["gk"] = f32(-r.random((B, T, HV, K)) * 3)
            inp["gk"][0, min(5, T - 1), 0, :2] = -np.inf
        elif gate == "g_gamma":
            inp["g_gamma"] = np.log(1 - 2.0 ** (-5 - np.arange(HV)))
        return inp

    def _check(self, op, got, ref, cu, bound, **what):
        err, per = O.compare(op, got, ref, cu)
        with self.subTest(op=op, **what):
            self.assertLessEqual(err, bound, per)

    SHAPES = ((2, 130, 2, 4, 8, 6, None), (1, 150, 1, 2, 16, 8, [0, 0, 37, 38, 150]))

    def test_recurrent_ops(self):
        ops = (("linear_attn", None, False), ("linear_attn_postnorm", None, False),
               ("retention", "g_gamma", False), ("simple_gla", "g", False), ("gla", "gk", False),
               ("delta_rule", None, True), ("gated_delta_rule", "g", True), ("gated_delta_rule", "gk", True),
               ("comba", "g", True), ("efla", None, True))
        for op, gate, beta in ops:
            for B, T, H, HV, K, V, cu in self.SHAPES:
                inp = self._problem(B, T, H, HV, K, V, cu, gate)
                if beta:
                    inp["beta"][0, 10:14] = -0.25       # computed outside the stable domain
                    inp["k"][0, 20] = 0.0
                else:
                    del inp["beta"]
                if op == "efla":
                    inp["k"] = inp["k"] * 1.7
                eps = 1e-3 if op == "linear_attn_postnorm" else 0.0
                got = O.compute(op, inp, {"scale": K ** -0.5, "eps": eps})
                ref = self._c_seq(op, inp, K ** -0.5, eps)
                self._check(op, got, ref, inp.get("cu_seqlens"), 1e-13, gate=gate, T=T)

    def test_mesa_net(self):
        for B, T, H, HV, K, V, cu in self.SHAPES:
            for gate in (None, "g"):
                inp = self._problem(B, T, H, HV, K, V, cu, gate)
                N = inp["h0"].shape[0]
                if gate:
                    inp["g"][np.isinf(inp["g"])] = -2.0
                A = self.rng.standard_normal((N, HV, K, K))
                inp["h0_kk"] = A @ np.swapaxes(A, -1, -2)
                inp["lambda"] = self.rng.random((HV, K)) + 0.1
                self._check("mesa_net", O.compute("mesa_net", inp, {}), self._c_seq("mesa_net", inp),
                            inp.get("cu_seqlens"), 1e-12, gate=gate, T=T)

    def test_attention_ops(self):
        for B, T, H, HV, K, V, cu in ((2, 60, 2, 4, 8, 6, None), (1, 90, 1, 2, 16, 8, [0, 0, 37, 38, 90])):
            for form in (0, 1, 2):
                inp = self._problem(B, T, H, HV, K, V, cu)
                del inp["h0"]
                if form == 1:
                    del inp["beta"]
                got = O.compute("deltaformer", inp, {"scale": K ** -0.5, "form": form})
                ref = self._c_seq("deltaformer", inp, K ** -0.5, form=form)
                self._check("deltaformer", got, ref, inp.get("cu_seqlens"), 1e-13, form=form, T=T)
            for gate in (None, "g"):
                inp = self._problem(B, T, H, HV, K, V, cu, gate)
                del inp["h0"]
                w = self.rng.standard_normal((B, T, H, K))
                inp["w"] = np.float32(w / np.linalg.norm(w, axis=-1, keepdims=True)).astype(np.float64)
                inp["beta"] = 2 * inp["beta"]
                inp["beta"][0, :3] = 0                   # H_t = I
                for scale in (K ** -0.5, 1000.0):
                    got = O.compute("path_attn", inp, {"scale": scale})
                    self._check("path_attn", got, self._c_seq("path_attn", inp, scale),
                                inp.get("cu_seqlens"), 1e-13, gate=gate, T=T, scale=scale)
            for gate in (None, "g", "g_gamma"):
                inp = self._problem(B, T, H, HV, K, V, cu, gate)
                del inp["h0"], inp["beta"]
                op = "softmax_attn" if gate is None else "fox"
                for scale in (K ** -0.5, 1000.0):
                    self._check(op, O.compute(op, inp, {"scale": scale}), self._c_seq(op, inp, scale),
                                inp.get("cu_seqlens"), 1e-13, gate=gate, T=T, scale=scale)

    SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2.0 ** -1074, -2.0 ** -1074, 1e-30, 1.0,
                        -3.0, 25.0, -400.0, 1e200])

    def _c_norm(self, fname, arrays, scalars, outs):
        P = lambda a: None if a is None else np.ascontiguousarray(a).ctypes.data_as(_DP)
        args = []
        for a in arrays:
            args.append(P(a))
        fn = getattr(self.lib, fname)
        argtypes = [_DP] * len(arrays) + [type(c) for c in scalars] + [_DP] * len(outs)
        fn.argtypes = argtypes
        self.assertEqual(fn(*(args + list(scalars) + [P(o) for o in outs])), 0, fname)
        return outs

    def test_elementwise_and_row_ops_with_their_ieee_tables(self):
        r = self.rng
        dbl = ctypes.c_double
        dim = self.SPECIAL.size
        for op, params in (("dyt", (0.7, -2.0, 0.0, 1.0)), ("dyisru", (0.5, 0.0, 1.0, 1e-300, 1e308))):
            for p in params:
                x = r.standard_normal((5, dim)) * 3
                x[0], x[1] = self.SPECIAL, -self.SPECIAL
                for w, b in ((None, None), (r.standard_normal(dim), r.standard_normal(dim)),
                             (None, np.zeros(dim))):
                    y = np.zeros_like(x)
                    self._c_norm("lacs_ref_" + op, [x], [_I64(5), _I64(dim), dbl(p)], [w, b, y])
                    got = (O.dyt if op == "dyt" else O.dyisru)(x, p, w, b)
                    self._check(op, {"y": got}, {"y": y}, None, 1e-15, p=p, w=w is not None, b=b is not None)
                # the VJP on rows without NaN, so that the sums stay finite
                xs = x[2:].copy()
                xs[0, :4] = self.SPECIAL[:4]
                dy = r.standard_normal(xs.shape)
                for w in (None, r.standard_normal(dim)):
                    dx, dp, dw, db = np.zeros_like(xs), np.zeros(1), np.zeros(dim), np.zeros(dim)
                    fv = getattr(self.lib, "lacs_ref_%s_vjp" % op)
                    fv.argtypes = [_DP, _DP, _I64, _I64, dbl, _DP, _DP, _DP, _DP, _DP]
                    P = lambda a: None if a is None else a.ctypes.data_as(_DP)
                    self.assertEqual(fv(P(xs), P(dy), 3, dim, p, P(w), P(dx), P(dp), P(dw), P(db)), 0)
                    pname = "dalpha" if op == "dyt" else "dC"
                    got = (O.dyt_vjp if op == "dyt" else O.dyisru_vjp)(xs, dy, p, w)
                    ref = {"dx": dx, pname: dp, "dweight": dw, "dbias": db}
                    # the C sums in row order, the oracle exactly (math.fsum)
                    self._check(op + "_vjp", got, ref, None, 1e-12, p=p, w=w is not None)
        for cap in (1.0, 3e-5, 1e300):
            x = r.standard_normal((4, dim))
            x[0], x[1] = self.SPECIAL, -self.SPECIAL
            y = np.zeros_like(x)
            self._c_norm("lacs_ref_softcap", [x], [_I64(x.size), dbl(cap)], [y])
            self._check("softcap", {"y": O.softcap(x, cap)}, {"y": y}, None, 1e-15, cap=cap)
            xs = x[2:] * 1e-3 * cap                      # the series range of dcap
            xs[0, :4] = self.SPECIAL[:4]
            dy = r.standard_normal(xs.shape)
            dx, dcap = np.zeros_like(xs), np.zeros(1)
            self._c_norm("lacs_ref_softcap_vjp", [xs, dy], [_I64(xs.size), dbl(cap)], [dx, dcap])
            self._check("softcap_vjp", O.softcap_vjp(xs, dy, cap), {"dx": dx, "dcap": dcap}, None, 1e-12,
                        cap=cap)
        for eps in (0.0, 1e-3):
            x = r.standard_normal((6, dim)) * 2
            x[0] = self.SPECIAL
            x[1] = np.where(np.isnan(self.SPECIAL), 1.0, self.SPECIAL)   # an infinity, no NaN
            x[2], x[3] = 0.0, np.array([1, -2, 0, 2] * 4)[:dim] * 2.0 ** -1074
            x[4] *= 1e160
            for w in (None, r.standard_normal(dim)):
                y = np.zeros_like(x)
                self._c_norm("lacs_ref_rmsnorm", [x], [_I64(6), _I64(dim), dbl(eps)], [w, y])
                self._check("rmsnorm", {"y": O.rmsnorm(x, eps, w)}, {"y": y}, None, 1e-15, eps=eps)
                xs, dy = x[2:], r.standard_normal((4, dim))
                dx, dw = np.zeros_like(xs), np.zeros(dim)
                self._c_norm("lacs_ref_rmsnorm_vjp", [xs, dy], [_I64(4), _I64(dim), dbl(eps)], [w, dx, dw])
                ref = {"dx": dx} if w is None else {"dx": dx, "dweight": dw}
                self._check("rmsnorm_vjp", O.rmsnorm_vjp(xs, dy, eps, w), ref, None, 1e-13, eps=eps)
            for conv in (0, 1):
                for e2 in (eps, np.inf):
                    xs, dy = x[2:], r.standard_normal((4, dim))      # no NaN rows: see the report
                    y, dx = np.zeros_like(xs), np.zeros_like(xs)
                    self._c_norm("lacs_ref_l2norm", [xs], [_I64(4), _I64(dim), dbl(e2), ctypes.c_int(conv)], [y])
                    self._check("l2norm", {"y": O.l2norm(xs, e2, conv)}, {"y": y}, None, 1e-15, eps=e2, conv=conv)
                    self._c_norm("lacs_ref_l2norm_vjp", [xs, dy], [_I64(4), _I64(dim), dbl(e2), ctypes.c_int(conv)],
                                 [dx])
                    self._check("l2norm_vjp", O.l2norm_vjp(xs, dy, e2, conv), {"dx": dx}, None, 1e-13,
                                eps=e2, conv=conv)


if __name__ == "__main__":
    unittest.main()
