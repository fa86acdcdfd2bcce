"""lacs inside a kernel repository's own tests: the cases as objects a test
takes, and one assertion that judges outputs with the C checker.

    import lacs

    def test_my_kernel():
        for case in lacs.cases(op="gated_delta_rule", tier="bf16"):
            outputs = my_kernel_adapter(case.op, case.inputs, case.params)   # {"o": ..., "ht": ...}
            lacs.assert_conforms(case, outputs)

With pytest, `@lacs.pytest.cases(op=..., tier=...)` makes one test per case
(lacs/pytest.py). Nothing of the checker is written here: the cases come from
lacs_cases_find (verified against their manifest), each vector is opened
verified, and the comparison is lacs_check_outputs (check.py, through ctypes).
NumPy only; torch is imported only by Case.torch_inputs.
"""

import functools

from . import check
from .check import HarnessError


class NonConformance(AssertionError):
    """Outputs that do not conform to a case: the message is lacs's element
    report (the worst output, where, expected and actual values, the allowed
    error, the ratios). `result` is the check.CaseResult."""

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result


@functools.lru_cache(maxsize=None)
def library():
    """The liblacs.so this process uses (check.find_installation), loaded once."""
    return check.Library()


class Case:
    """One golden case, for a test: id, op, tier, flags (tuple), strict,
    reason, path; its inputs (a fresh dict of NumPy arrays at each access:
    float32, bf16-tier values widened exactly, cu_seqlens int64) and params
    (floats, `split` among them for a state-carry case); info, the
    check.CaseInfo a harness function is given as `case`."""

    def __init__(self, entry):
        self.entry = entry  # a check.Case
        self.id, self.op, self.tier = entry.id, entry.op, entry.tier
        self.flags, self.strict, self.reason, self.path = tuple(entry.flags), entry.strict, entry.reason, entry.path

    def _request(self):
        return check.Request(library(), self.entry)

    def _load(self):
        request = self._request()
        try:
            return request.inputs, request.params, request.info, request.expected
        finally:
            request.close()

    @property
    def inputs(self):
        return self._load()[0]

    @property
    def params(self):
        return self._load()[1]

    @property
    def info(self):
        return self._load()[2]

    @property
    def outputs(self):
        """{name: shape} of the outputs the case expects (o, ht, ht_split, ...)."""
        return dict(self._load()[3])

    def torch_inputs(self, device=None):
        """The inputs as torch tensors in their stored dtype (bfloat16 for the
        bf16 tier's q, k, v, gates; float32; cu_seqlens int64), on `device`."""
        inputs, _, info, _ = self._load()
        tensors = check.torch_inputs(inputs, info.bf16)
        return {name: t.to(device) for name, t in tensors.items()} if device is not None else tensors

    def run(self, fn):
        """Calls a harness function fn(op, inputs, params[, case]) on this case in
        this process (torch inputs if it declares lacs_inputs = "torch") and
        returns its outputs as {name: float64 array}; NonConformance if it raised
        (the exception chained), pytest's skip path is the caller's: a
        NotImplementedError propagates."""
        check.check_input_kind(fn)
        inputs, params, info, _ = self._load()
        if check.input_kind(fn) == "torch":
            inputs = check.torch_inputs(inputs, info.bf16)
        if check.takes_case(fn):
            return fn(self.op, inputs, params, case=info)
        return fn(self.op, inputs, params)

    def __repr__(self):
        return f"lacs.Case({self.id!r})"


def cases(op=None, tier=None, vectors=None, verify=True):
    """The cases of `op` (a name or a list; None: every op) and `tier` ("fp32",
    "bf16" or None), sorted by id, from `vectors` (default ./vectors/core, else
    $LACS_VECTORS, else the vectors installed with the library), verified
    against their MANIFEST.json. HarnessError for an unknown op or tier, a
    missing directory, or no case."""
    lib = library()
    ops = [op] if isinstance(op, str) else list(op or ())
    check.check_filters(lib, ops, tier)
    directory = check.vectors_dir(vectors, lib.installation)
    found, _ = check.find_cases(lib, directory, ops, tier, verify=verify)
    bad = [c for c in found if c.error is not None]
    if bad:
        raise HarnessError(f"{bad[0].id}: {bad[0].error}")
    if not found:
        raise HarnessError(f"no case under '{lib.printable(directory)}' for op {ops or 'any'} and tier {tier or 'any'}")
    return [Case(c) for c in found]


def judge(case, outputs):
    """The check.CaseResult of `outputs` ({name: array or torch tensor, on any
    device}) against the case's goldens."""
    lib = library()
    result = check.CaseResult(case.entry)
    request = case._request()
    try:
        converted = {}
        for name, value in outputs.items():
            try:
                converted[name] = check.to_float64(name, value)
            except ValueError as e:
                result.fail(str(e))
                return result
        check.judge(lib, request, converted, result)
        result.strict = request.strict
    finally:
        request.close()
    return result


def assert_conforms(case, outputs):
    """Passes if `outputs` conform to `case` (every output within its
    tolerance, SPEC.md 11); else raises NonConformance with lacs's element
    report. Returns the check.CaseResult (its ratio: error / allowed, 1 the
    limit)."""
    if outputs is None or not hasattr(outputs, "items"):
        raise NonConformance(f"{case.id}: expected a dict of output name -> array, got {type(outputs).__name__}")
    result = judge(case, outputs)
    if result.status != check.PASS:
        from .__main__ import _failure_text
        raise NonConformance(f"{case.id}: {_failure_text(result)}", result)
    return result
