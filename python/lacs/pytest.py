"""lacs's pytest plugin, and the helper for a kernel repository's own tests.

The plugin (registered as `lacs` by the installed package's pytest11 entry
point; from a source tree, `pytest -p lacs.pytest`):

    pytest --lacs-impl python:FILE_OR_MODULE:FUNCTION [--lacs-op OP ...] [--lacs-tier fp32|bf16]
           [--lacs-vectors DIR] [--lacs-timeout SECONDS] [--lacs-strict] [--lacs-no-verify]
           [--junitxml report.xml]

adds one test per golden case, `lacs::<op>::<case id>`, run as `python3 -m
lacs check` runs it: the function in a worker process of its own (a crash or
a hang fails that case, --lacs-timeout), verified vectors, the C checker's
comparison. A failure's message is lacs's element report (the worst output,
where, expected and actual, the allowed error); a skip (NotImplementedError,
or left out by the function's lacs_describe) is a pytest skip; a strict case
(SPEC.md 11.7) that fails is an xfail unless --lacs-strict. The verdict per
(op, tier) and the line to cite close the terminal summary. pytest's
--junitxml writes JUnit (classname lacs.<op>, name the case id).

The helper, without the plugin:

    import lacs.pytest

    @lacs.pytest.cases(op="gated_delta_rule", tier="bf16")
    def test_my_kernel(case):                       # case: a lacs.conformance.Case
        outputs = my_adapter(case.op, case.inputs, case.params)
        lacs.assert_conforms(case, outputs)          # lacs's element report on failure

`cases` parametrizes the test with every case of the op and tier (ids: the
case ids); the strict cases are marked xfail unless strict=True.

Written against pytest 7.2 (Debian bookworm's python3-pytest) and later.
"""

import pytest

from . import check, conformance, workers
from .check import FAIL, PASS, SKIP, HarnessError


# ---- the helper ----

def cases(op=None, tier=None, vectors=None, strict=False, argname="case"):
    """A pytest.mark.parametrize over lacs.conformance.cases(op, tier, vectors):
    one test per case, its id the case id. A strict case (SPEC.md 11.7) is
    expected to fail (xfail, not strict) unless strict=True."""
    try:
        found = conformance.cases(op, tier, vectors)
    except HarnessError as e:
        raise pytest.UsageError(f"lacs.pytest.cases: {e}") from None
    params = []
    for case in found:
        marks = []
        if case.strict and not strict:
            marks.append(pytest.mark.xfail(raises=conformance.NonConformance, strict=False,
                                           reason="a strict case (SPEC.md 11.7): cases(..., strict=True) counts it"))
        params.append(pytest.param(case, id=case.id, marks=marks))
    return pytest.mark.parametrize(argname, params)


# ---- the plugin ----

def pytest_addoption(parser):
    group = parser.getgroup("lacs", "lacs: a kernel against the golden vectors of the Linear-Attention Conformance "
                                    "Suite")
    group.addoption("--lacs-impl", metavar="python:FILE_OR_MODULE:FUNCTION",
                    help="add one test per lacs case, running this function (fn(op, inputs, params[, case]))")
    group.addoption("--lacs-op", action="append", metavar="OP", default=[],
                    help="only this op (repeatable, or comma-separated)")
    group.addoption("--lacs-tier", metavar="TIER", help="only fp32 or bf16 cases")
    group.addoption("--lacs-vectors", metavar="DIR",
                    help="the vectors (default ./vectors/core, else $LACS_VECTORS, else those installed with lacs)")
    group.addoption("--lacs-timeout", metavar="SECONDS", type=float, default=300.0,
                    help="a case running longer fails (default 300)")
    group.addoption("--lacs-strict", action="store_true",
                    help="a strict case (SPEC.md 11.7) that fails is a failure, not an xfail")
    group.addoption("--lacs-no-verify", action="store_true",
                    help="do not verify the vectors against their MANIFEST.json")


class _Session:
    """The state of one pytest run of --lacs-impl: the library, the worker
    pool, the verdict, the results."""

    def __init__(self, config):
        self.config = config
        self.impl = config.getoption("lacs_impl")
        self.strict = config.getoption("lacs_strict")
        self.timeout = config.getoption("lacs_timeout")
        self.library = check.Library()
        self.pool = None
        self.verdict = check.Verdict(self.library, self.strict)
        self.results = []
        self.scope = []

    def start(self):
        check.parse_impl(self.impl)
        if not self.timeout > 0:
            raise HarnessError(f"bad --lacs-timeout {self.timeout}: expected a positive number of seconds")
        ops = []
        for value in self.config.getoption("lacs_op"):
            ops.extend(name.strip() for name in value.split(",") if name.strip() and name.strip() not in ops)
        tier = self.config.getoption("lacs_tier")
        check.check_filters(self.library, ops, tier)
        directory = check.vectors_dir(self.config.getoption("lacs_vectors"), self.library.installation)
        found, manifest = check.find_cases(self.library, directory, ops, tier,
                                           verify=not self.config.getoption("lacs_no_verify"))
        if not found:
            raise HarnessError(f"no case under '{self.library.printable(directory)}' matches the filters")
        # the worker imports the function now: an import error is a usage error of the run, not of each case
        self.pool = workers.Pool(self.impl, 1, self.timeout)
        if self.pool.description is not None:
            self.verdict.declare(self.pool.description)
        if manifest is None:
            self.verdict.scope("on unverified vectors")
        return found

    def run(self, case):
        """The check.CaseResult of one case."""
        result, request = check.prepare(self.library, case, self.verdict)
        if request is not None:
            try:
                (_, answer), = list(self.pool.run([(0, request.op, request.inputs, request.params, request.info)]))
                check.settle(self.library, request, answer, result)
            finally:
                request.close()
        self.results.append(result)
        return result

    def close(self):
        if self.pool is not None:
            self.pool.close()
            self.pool = None


class LacsFailure(Exception):
    """A case the implementation failed: the message is lacs's report."""


class LacsOp(pytest.Collector):
    """The cases of one op (node id lacs::<op>)."""

    def __init__(self, *, cases, **kwargs):
        super().__init__(**kwargs)
        self.cases = cases

    def collect(self):
        return [LacsItem.from_parent(self, name=case.id, case=case) for case in self.cases]


class LacsItem(pytest.Item):
    """One case (node id lacs::<op>::<case id>)."""

    def __init__(self, *, case, **kwargs):
        super().__init__(**kwargs)
        self.case = case
        self.result = None

    def runtest(self):
        session = self.config._lacs
        result = self.result = session.run(self.case)
        if result.status == PASS:
            return
        if result.status == SKIP:
            pytest.skip(result.message or "skipped by the implementation")
        from .__main__ import failure_detail
        detail = failure_detail(result)
        if result.strict and not session.strict:
            pytest.xfail(f"strict case (SPEC.md 11.7; --lacs-strict counts it): {detail}")
        raise LacsFailure(detail)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, LacsFailure):
            text = f"{self.case.id}: {excinfo.value}"
            if self.result is not None and self.result.traceback:
                text += "\n" + self.result.traceback.rstrip()
            return text
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.case.path, None, f"lacs {self.case.id}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    if not config.getoption("lacs_impl"):
        return
    state = config._lacs = _Session(config)
    try:
        found = state.start()
    except HarnessError as e:
        state.close()
        raise pytest.UsageError(f"lacs: {e}") from None
    root = _LacsRoot.from_parent(session, name="lacs", nodeid="lacs")
    by_op = {}
    for case in found:
        by_op.setdefault(case.op, []).append(case)
    for op, op_cases in by_op.items():
        collector = LacsOp.from_parent(root, name=op, cases=op_cases)
        items.extend(collector.collect())


class _LacsRoot(pytest.Collector):
    """The node `lacs`, parent of the ops."""

    def collect(self):
        return []


def pytest_report_header(config):
    if config.getoption("lacs_impl"):
        try:
            installation = check.find_installation()
        except HarnessError as e:
            return f"lacs: {e}"
        return f"lacs {check.SPEC_VERSION}: {config.getoption('lacs_impl')}, library {installation.describe()}"
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = getattr(config, "_lacs", None)
    if state is None or not state.results:
        return
    for result in state.results:
        state.verdict.add(result)
    counts = {status: sum(r.status == status for r in state.results) for status in (PASS, FAIL, SKIP)}
    terminalreporter.section("lacs verdict")
    terminalreporter.write(state.verdict.table())
    terminalreporter.write_line(f"lacs: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped")
    terminalreporter.write_line(state.verdict.citation())


def pytest_unconfigure(config):
    state = getattr(config, "_lacs", None)
    if state is not None:
        state.close()
        state.verdict.close()
        config._lacs = None
