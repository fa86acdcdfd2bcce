"""What the client suites (tests/clients/, make test-clients) share: running the
Python harness with this interpreter (build/venv-clients' python, which sees
PyPI's onnx and fla-core and Debian's NumPy and torch) on the committed vectors."""

import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.path.join(ROOT, os.environ.get("LACS_BUILD", "build")))
VECTORS = os.path.join(ROOT, "vectors", "core")
CLOSING = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", re.M)


def check(impl, ops, *args, env=None):
    """(exit status, stdout, stderr, {case id: case of the JSON report}) of python3 -m lacs check."""
    environment = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), LACS_BUILD=BUILD)
    environment.update(env or {})
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        run = subprocess.run([sys.executable, "-m", "lacs", "check", "--impl", impl, "--op", ",".join(ops),
                              "--vectors", VECTORS, "--json", report, "--jobs", "2", "--quiet"], cwd=ROOT,
                             env=environment, capture_output=True, text=True, timeout=1800)
        with open(report) as f:
            cases = {c["id"]: c for c in json.load(f)["cases"]}
    return run.returncode, run.stdout, run.stderr, cases


def manifest_ids(ops):
    with open(os.path.join(ROOT, "vectors", "MANIFEST.json")) as f:
        return sorted(c["id"] for c in json.load(f)["cases"] if c["op"] in ops)
