"""What the hostile-input suite (tests/hostile/) shares: where the checker
under test is, the hostile plugins and Python functions, and copies of golden
vectors (with their own MANIFEST.json) that a test may corrupt.

Every file a test creates lies under a temporary directory of its own: FIFOs,
symbolic links, reports, vector copies. No test writes to a device node.

The suite runs against the build in $LACS_BUILD (default build/) and the Python
harness in $LACS_PYTHON (default python/), so that the same tests can be run
against an older checker (LACS_BUILD=/old/build LACS_PYTHON=/old/python) to
show what it got wrong.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import numpy as np  # noqa: E402

from lacs import safetensors as st  # noqa: E402  (the test helpers' own reader and writer)


def _absolute(path):
    return path if os.path.isabs(path) else os.path.join(ROOT, path)


BUILD = _absolute(os.environ.get("LACS_BUILD", "build"))
PYTHON_UNDER_TEST = _absolute(os.environ.get("LACS_PYTHON", "python"))
VECTORS = os.path.join(ROOT, "vectors")
CORE = os.path.join(VECTORS, "core")
HERE = os.path.dirname(os.path.abspath(__file__))
IMPLS = os.path.join(HERE, "impls")
LACS = os.path.join(BUILD, "lacs")
PY = "/usr/bin/python3"


def manifest_entries():
    """The committed manifest's cases, by id."""
    with open(os.path.join(VECTORS, "MANIFEST.json")) as f:
        return {c["id"]: c for c in json.load(f)["cases"]}


_ENTRIES = None


def entry(case_id):
    global _ENTRIES
    if _ENTRIES is None:
        _ENTRIES = manifest_entries()
    return _ENTRIES[case_id]


def ids(op, tier=None):
    """The committed ids of op (and tier), sorted."""
    global _ENTRIES
    if _ENTRIES is None:
        _ENTRIES = manifest_entries()
    return sorted(i for i, c in _ENTRIES.items() if c["op"] == op and (tier is None or c["tier"] == tier))


# ---- running the checker ----

class Result:
    def __init__(self, returncode, stdout, stderr, timed_out=False):
        self.returncode, self.stdout, self.stderr, self.timed_out = returncode, stdout, stderr, timed_out
        self.lines = stdout.splitlines()

    def status_of(self, case_id):
        """The status word printed for case_id, or None."""
        for line in self.lines:
            parts = line.split()
            if len(parts) >= 3 and parts[0] in ("PASS", "FAIL", "SKIP") and parts[-1] == case_id:
                return parts[0]
        return None

    def detail_of(self, case_id):
        """The indented line under case_id's result line ("" if none)."""
        for i, line in enumerate(self.lines):
            parts = line.split()
            if len(parts) >= 3 and parts[0] in ("PASS", "FAIL", "SKIP") and parts[-1] == case_id:
                if i + 1 < len(self.lines) and self.lines[i + 1].startswith("      "):
                    return self.lines[i + 1].strip()
                return ""
        return None

    def __repr__(self):
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def run(argv, timeout=60, env=None, cwd=ROOT, stdin=subprocess.DEVNULL):
    """Runs argv with captured output; a run past `timeout` is killed (with its
    process group) and reported with timed_out set, never raised."""
    environment = dict(os.environ)
    environment.pop("LACS_VECTORS", None)
    environment.update(env or {})
    process = subprocess.Popen(argv, cwd=cwd, env=environment, stdin=stdin, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
        return Result(process.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            out, err = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a grandchild outside the group holds the pipes
            out, err = b"", b""
        return Result(None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), timed_out=True)


def lacs(*args, **kwargs):
    return run([LACS, *args], **kwargs)


def harness(*args, env=None, **kwargs):
    """python3 -m lacs ARGS, the harness under test."""
    environment = {"PYTHONPATH": PYTHON_UNDER_TEST, "LACS_BUILD": BUILD}
    environment.update(env or {})
    return run([PY, "-m", "lacs", *args], env=environment, **kwargs)


# ---- the hostile plugins, compiled once per test process ----

_PLUGIN_DIR = None


def plugin(name):
    """tests/hostile/plugins/NAME.c compiled against include/lacs/plugin.h into a temporary directory."""
    global _PLUGIN_DIR
    if _PLUGIN_DIR is None:
        _PLUGIN_DIR = tempfile.mkdtemp(prefix="lacs-hostile-plugins-")
    path = os.path.join(_PLUGIN_DIR, name + ".so")
    if not os.path.exists(path):
        compiler = shutil.which("cc") or shutil.which("gcc")
        subprocess.run([compiler, "-std=c11", "-O1", "-shared", "-fPIC", "-I", os.path.join(ROOT, "include"),
                        "-I", os.path.join(ROOT, "tests", "plugins"), "-o", path,
                        os.path.join(HERE, "plugins", name + ".c"), "-lm"], check=True)
    return path


def hostile_env(mode, describe=None, **extra):
    env = {"LACS_HOSTILE_MODE": mode}
    if describe is not None:
        env["LACS_HOSTILE_DESCRIBE"] = describe
    env.update(extra)
    return env


def python_impl(function):
    return f"python:{os.path.join(IMPLS, 'hostile_py.py')}:{function}"


# ---- vector copies with their own manifest ----

def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class VectorCopy:
    """Copies of committed vectors under root/<op>/<id>.safetensors with
    root/MANIFEST.json listing them (paths relative to root), in the
    committed manifest's format. Tests corrupt the copies; `rehash` makes the
    manifest agree with a corrupted file, so that only the checker's own
    validation of the content can refuse it."""

    def __init__(self, root, case_ids):
        self.root = root
        self.entries = {}
        for case_id in case_ids:
            e = dict(entry(case_id))
            source = os.path.join(VECTORS, e["path"])
            e["path"] = f"{e['op']}/{case_id}.safetensors"
            os.makedirs(os.path.join(root, e["op"]), exist_ok=True)
            shutil.copyfile(source, os.path.join(root, e["path"]))
            self.entries[case_id] = e
        self.write_manifest()

    def path(self, case_id):
        return os.path.join(self.root, self.entries[case_id]["path"])

    def write_manifest(self):
        manifest = {"format": "lacs-manifest/1", "spec_version": "1.3", "generator_version": "2", "set": "copy",
                    "cases": [self.entries[i] for i in sorted(self.entries)]}
        with open(os.path.join(self.root, "MANIFEST.json"), "w") as f:
            json.dump(manifest, f, indent=1)

    def rehash(self, case_id):
        path = self.path(case_id)
        self.entries[case_id]["sha256"] = sha256_of(path)
        self.entries[case_id]["bytes"] = os.path.getsize(path)
        self.write_manifest()

    def rewrite(self, case_id, meta=None, tensors=None, text=None, rehash=True):
        """Rewrites the copy: meta(dict) edits the `lacs` metadata in place,
        text(str) -> str edits its JSON text (for literals json cannot write,
        such as 1e999), tensors(dict name -> (dtype, array)) edits the tensors
        (BF16 as uint16 bit patterns, so nothing is rounded)."""
        path = self.path(case_id)
        f = st.read(path)
        contents = {}
        for name, t in f.tensors.items():
            if t.dtype == "BF16":
                contents[name] = ("BF16", np.frombuffer(t.raw, dtype="<u2").reshape(t.shape).copy())
            else:
                contents[name] = (t.dtype, t.array().copy())
        data = json.loads(f.metadata["lacs"])
        if meta:
            meta(data)
        if tensors:
            tensors(contents)
        serialized = json.dumps(data)
        if text:
            serialized = text(serialized)
        os.remove(path)
        st.write(path, contents, {"lacs": serialized})
        if rehash:
            self.rehash(case_id)

    def flip_bit(self, case_id, tensor, index, bit, rehash=False):
        """Flips one bit of one element of a tensor in the file itself."""
        path = self.path(case_id)
        f = st.read(path)
        with open(path, "rb") as handle:
            data = bytearray(handle.read())
        header_length = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + header_length])
        begin = header[tensor]["data_offsets"][0]
        size = st.DTYPE_SIZES[f.tensors[tensor].dtype]
        position = 8 + header_length + begin + index * size + bit // 8
        data[position] ^= 1 << (bit % 8)
        with open(path, "wb") as handle:
            handle.write(data)
        if rehash:
            self.rehash(case_id)


def wait_for(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def process_alive(pid):
    """Whether pid runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_quietly(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
