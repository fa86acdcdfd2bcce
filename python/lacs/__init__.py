"""lacs: the Python side of the linear-attention conformance suite.

safetensors: the reader and writer of the vector files (SPEC.md 10.1, 10.2).
vectors: the golden vectors (load_vector, load_manifest, iter_cases).
check: the harness behind `python3 -m lacs check`, judging a Python
implementation with the C checker (liblacs.so) through ctypes.
"""

from . import check, safetensors, vectors
from .safetensors import FormatError
from .vectors import Vector, iter_cases, load_manifest, load_vector

__all__ = ["check", "safetensors", "vectors", "FormatError", "Vector", "load_vector", "load_manifest", "iter_cases"]
