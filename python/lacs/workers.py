"""The harness's worker processes: a Python implementation runs in a process
of its own (python/lacs/_worker.py), never in the one that judges it.

A worker is started with `python3 -m lacs._worker`, in a session (and so a
process group) of its own, and two pipes on file descriptors it is told
about; its stdout is its stderr, so whatever the implementation prints stays
off the report. It imports the implementation once, says hello (with the
implementation's declaration, lacs_describe), then answers one request per
case. A worker that dies (a crash, an os._exit(0)) or runs past the timeout is
killed with its whole process group, its case fails with the reason, and a
new worker takes the next case.

The messages, in both directions: a 4-byte little-endian length, a JSON
header of that many bytes, then the raw bytes of the arrays the header lists
({"name", "dtype": "float32"|"float64"|"int64", "shape"}), in order. No pickle:
nothing a worker sends can run code in the harness.
"""

import json
import os
import select
import signal
import struct
import subprocess
import sys
import time

import numpy as np

from .check import FAIL, SKIP, HarnessError

DTYPES = {"float32": "<f4", "float64": "<f8", "int64": "<i8"}
MAX_MESSAGE = 1 << 34


# ---- messages ----

def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def send(fd, header, arrays=()):
    """Sends a header (a JSON-able dict) and arrays ([(name, ndarray)])."""
    header = dict(header)
    header["arrays"] = []
    chunks = []
    for name, array in arrays:
        dtype = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64",
                 np.dtype(np.int64): "int64"}[array.dtype]
        header["arrays"].append({"name": name, "dtype": dtype, "shape": list(array.shape)})
        chunks.append(np.ascontiguousarray(array, dtype=DTYPES[dtype]).tobytes())
    text = json.dumps(header).encode("utf-8")
    _write_all(fd, struct.pack("<I", len(text)) + text)
    for chunk in chunks:
        _write_all(fd, chunk)


class _Reader:
    """Reads messages from fd, within a deadline when given."""

    def __init__(self, fd):
        self.fd = fd

    def _exactly(self, n, deadline):
        parts, left = [], n
        while left > 0:
            if deadline is not None:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    raise TimeoutError
                ready, _, _ = select.select([self.fd], [], [], wait)
                if not ready:
                    raise TimeoutError
            chunk = os.read(self.fd, min(left, 1 << 20))
            if not chunk:
                raise EOFError
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def receive(self, deadline=None):
        """(header, [(name, ndarray)]); EOFError when the other side is gone,
        TimeoutError past the deadline, ValueError for a malformed message."""
        (length,) = struct.unpack("<I", self._exactly(4, deadline))
        header = json.loads(self._exactly(length, deadline).decode("utf-8"))
        arrays = []
        for spec in header.get("arrays", []):
            dtype = DTYPES[spec["dtype"]]
            shape = tuple(int(d) for d in spec["shape"])
            count = int(np.prod(shape, dtype=np.int64))
            size = count * np.dtype(dtype).itemsize
            if count < 0 or size > MAX_MESSAGE:
                raise ValueError("an array too large")
            raw = self._exactly(size, deadline)
            arrays.append((spec["name"], np.frombuffer(raw, dtype=dtype).reshape(shape).copy()))
        return header, arrays


# ---- the harness's side ----

class Worker:
    """One worker process, importing `spec` (python:FILE_OR_MODULE:FUNCTION)."""

    def __init__(self, spec, start_timeout):
        self.spec = spec
        to_worker_r, to_worker_w = os.pipe()
        from_worker_r, from_worker_w = os.pipe()
        environment = dict(os.environ)
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        environment["PYTHONPATH"] = package_parent + (os.pathsep + environment["PYTHONPATH"]
                                                      if environment.get("PYTHONPATH") else "")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lacs._worker", str(to_worker_r), str(from_worker_w), spec],
            pass_fds=(to_worker_r, from_worker_w), stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(),
            start_new_session=True, env=environment, cwd=os.getcwd())
        os.close(to_worker_r)
        os.close(from_worker_w)
        self.to_worker = to_worker_w
        self.reader = _Reader(from_worker_r)
        self.busy = None  # what it is working on
        self.started = None
        try:
            hello, _ = self.reader.receive(time.monotonic() + start_timeout)
        except TimeoutError:
            self.kill()
            raise HarnessError(f"importing {spec} took more than {start_timeout:g}s") from None
        except (EOFError, ValueError):
            code = self.kill()
            raise HarnessError(f"the worker importing {spec} ended ({_how(code)})") from None
        if not hello.get("ok"):
            self.kill()
            raise HarnessError(hello.get("error", f"cannot import {spec}"))
        self.description = hello.get("describe")

    @property
    def fileno(self):
        return self.reader.fd

    def submit(self, token, op, inputs, params, info=None):
        self.busy = token
        self.started = time.monotonic()
        header = {"op": op, "params": params}
        if info is not None:
            header["case"] = info.as_dict()
        send(self.to_worker, header, list(inputs.items()))

    def answer(self, deadline=None):
        """call_function's answer for the submitted case: {name: float64
        array}, or (status, message, traceback). Kills the worker (and raises
        _Gone) when it died or ran past the deadline."""
        try:
            header, arrays = self.reader.receive(deadline)
        except TimeoutError:
            self.kill()
            raise _Gone(None) from None
        except (EOFError, ValueError, OSError):
            raise _Gone(self.kill()) from None
        finally:
            self.busy = None
        if header.get("status") == "ok":
            return {name: array.astype(np.float64) for name, array in arrays}
        return (header.get("status", FAIL), header.get("message", "the worker gave no reason"),
                header.get("traceback"))

    def kill(self):
        """Kills the worker's process group; its exit status."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        code = self.process.wait()
        for fd in (self.to_worker, self.reader.fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.to_worker = self.reader.fd = -1
        return code

    def close(self):
        """Ends an idle worker: its group killed (whatever it forked goes too)."""
        self.kill()


class _Gone(Exception):
    """The worker died (args[0]: its exit status) or timed out (None)."""


def _how(code):
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def failure_of(gone, timeout):
    """The message of a case whose worker died or timed out."""
    if gone.args[0] is None:
        return f"timed out after {timeout:g}s"
    code = gone.args[0]
    if code >= 0:
        return f"the implementation's process exited with status {code} during the call (it called exit?)"
    return f"the implementation's process crashed: {_how(code)}"


_LIVE = []


def _terminate(sig, frame):
    """SIGTERM, SIGHUP: every worker's process group ends with the harness."""
    for worker in list(_LIVE):
        try:
            os.killpg(worker.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)


def install_signal_handlers():
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _terminate)


class Pool:
    """`jobs` workers for one implementation; runs requests and yields their answers."""

    def __init__(self, spec, jobs, timeout):
        self.spec, self.jobs, self.timeout = spec, jobs, timeout
        self.start_timeout = max(timeout, 60.0)
        install_signal_handlers()
        self.idle = [self._start()]
        self.description = self.idle[0].description
        self.busy = []

    def _start(self):
        worker = Worker(self.spec, self.start_timeout)
        _LIVE.append(worker)
        return worker

    def _retire(self, worker):
        if worker in _LIVE:
            _LIVE.remove(worker)

    def run(self, requests):
        """requests: an iterator of (token, op, inputs, params[, info]) (info a
        check.CaseInfo). Yields (token, answer), answer as Worker.answer's or
        (FAIL, message, None)."""
        pending = iter(requests)
        exhausted = False
        while True:
            while not exhausted and len(self.busy) < self.jobs:
                try:
                    token, op, inputs, params, *info = next(pending)
                except StopIteration:
                    exhausted = True
                    break
                worker = self.idle.pop() if self.idle else self._start()
                try:
                    worker.submit(token, op, inputs, params, info[0] if info else None)
                    self.busy.append(worker)
                except OSError:  # it died while idle
                    code = worker.kill()
                    self._retire(worker)
                    yield token, (FAIL, failure_of(_Gone(code), self.timeout), None)
            if not self.busy:
                return
            now = time.monotonic()
            deadlines = [w.started + self.timeout for w in self.busy]
            wait = max(0.0, min(deadlines) - now)
            ready, _, _ = select.select([w.fileno for w in self.busy], [], [], wait)
            for worker in list(self.busy):
                expired = time.monotonic() >= worker.started + self.timeout
                if worker.fileno not in ready and not expired:
                    continue
                token = worker.busy
                self.busy.remove(worker)
                try:
                    answer = worker.answer(worker.started + self.timeout)
                    self.idle.append(worker)
                except _Gone as gone:
                    self._retire(worker)
                    answer = (FAIL, failure_of(gone, self.timeout), None)
                yield token, answer

    def close(self):
        for worker in self.idle + self.busy:
            worker.close()
            self._retire(worker)
        self.idle, self.busy = [], []
