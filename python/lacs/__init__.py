"""lacs: the Python side of the linear-attention conformance suite.

safetensors: the reader and writer of the vector files (SPEC.md 10.1, 10.2).
vectors: the golden vectors (load_vector, load_manifest, iter_cases).
check: the harness behind `python3 -m lacs check`, judging a Python
implementation with the C checker (liblacs.so) through ctypes.
conformance: the cases and assert_conforms, for a kernel repository's tests.
pytest: the pytest plugin (--lacs-impl) and @lacs.pytest.cases (imported on
first use: `import lacs` does not import pytest).
"""

from . import check, conformance, safetensors, vectors
from .check import CaseInfo, HarnessError
from .conformance import NonConformance, assert_conforms, cases
from .safetensors import FormatError
from .vectors import Vector, iter_cases, load_manifest, load_vector

__all__ = ["check", "conformance", "safetensors", "vectors", "CaseInfo", "FormatError", "HarnessError",
           "NonConformance", "Vector", "assert_conforms", "cases", "load_vector", "load_manifest", "iter_cases"]


def __getattr__(name):
    if name == "pytest":  # lacs.pytest without `import lacs.pytest`
        import importlib
        return importlib.import_module(".pytest", __name__)
    raise AttributeError(f"module 'lacs' has no attribute {name!r}")
