"""Hostile and careless Python implementations for the hostile suite
(tests/hostile/test_python_harness.py). The correct parts come from
tests/python/impls/good.py (delta_rule and dyt, written from SPEC.md)."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "python", "impls"))
import good  # noqa: E402


class _DeviceTensor:
    """Looks like a torch tensor whose copy to the host raises, as a meta
    tensor's does or as every CUDA call does after an asynchronous fault."""

    def __init__(self, error):
        self.error = error

    def detach(self):
        return self

    def cpu(self):
        raise self.error


def meta_tensor(op, inputs, params):
    """dyt's output as a torch meta tensor: NotImplementedError outside the call (must FAIL, not SKIP)."""
    if op != "dyt":
        raise NotImplementedError(op)
    return {"y": _DeviceTensor(NotImplementedError("Cannot copy out of meta tensor; no data!"))}


def cuda_fault(op, inputs, params):
    if op != "dyt":
        raise NotImplementedError(op)
    return {"y": _DeviceTensor(RuntimeError("CUDA error: an illegal memory access was encountered"))}


def os_exit0(op, inputs, params):
    if op == "dyt" and "weight" not in inputs:
        os._exit(0)
    return good.run(op, inputs, params)


def chdir_away(op, inputs, params):
    os.chdir("/")
    return good.run(op, inputs, params)


def printer(op, inputs, params):
    print("PASS  0         dyt-fp32-forged")
    return good.run(op, inputs, params)


def hang_without_weight(op, inputs, params):
    if op == "dyt" and "weight" not in inputs:
        time.sleep(3600)
    return good.run(op, inputs, params)


def linear_attn_zeros(op, inputs, params):
    """Zeros of linear_attn's output shapes: wrong, but never crashes."""
    if op != "linear_attn":
        raise NotImplementedError(op)
    q, v = inputs["q"], inputs["v"]
    n = len(inputs["cu_seqlens"]) - 1 if "cu_seqlens" in inputs else q.shape[0]
    out = {"o": np.zeros(v.shape), "ht": np.zeros((n, v.shape[2], q.shape[3], v.shape[3]))}
    if "split" in params:
        out["ht_split"] = out["ht"].copy()
    return out


def skip_varlen_h0(op, inputs, params):
    """delta_rule broken on varlen and h0, hiding it by skipping those cases."""
    if op != "delta_rule" or "cu_seqlens" in inputs or "h0" in inputs:
        raise NotImplementedError(op)
    return good.run(op, inputs, params)


def declared_skip_varlen_h0(op, inputs, params):
    return skip_varlen_h0(op, inputs, params)


declared_skip_varlen_h0.lacs_describe = {"ops": ["delta_rule"], "tiers": ["fp32", "bf16"],
                                         "unsupported": ["Varlen", "InitialState", "StateCarry"]}


def hang_writing_pid(op, inputs, params):
    """Writes its process id to $LACS_HOSTILE_PIDS/worker-<pid>, then waits forever."""
    directory = os.environ.get("LACS_HOSTILE_PIDS")
    if directory:
        with open(os.path.join(directory, f"worker-{os.getpid()}"), "w"):
            pass
    time.sleep(3600)
