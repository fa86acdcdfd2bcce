"""The C reader against the Python reader (SPEC.md 10.2): $LACS_BUILD/lacs-dump
and lacs.safetensors.dump() must print the same bytes for every corpus file
and every vector file."""

import os
import subprocess
import unittest

from lacs import safetensors as st

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dump_tool():
    build = os.environ.get("LACS_BUILD", "build")
    if not os.path.isabs(build):
        build = os.path.join(REPO, build)
    return os.path.join(build, "lacs-dump")


def files_under(directory):
    out = []
    for root, dirs, names in os.walk(directory):
        dirs.sort()
        for n in sorted(names):
            if n.endswith(".safetensors"):
                out.append(os.path.join(root, n))
    return out


class CrossReader(unittest.TestCase):
    def compare(self, files):
        tool = dump_tool()
        if not (os.path.isfile(tool) and os.access(tool, os.X_OK)):
            self.fail(f"{tool} is missing: build it (make {os.path.relpath(tool, REPO)}) to compare the C reader with the Python one")
        for p in files:
            with self.subTest(file=os.path.relpath(p, REPO)):
                r = subprocess.run([tool, p], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
                want = st.dump(p).encode("utf-8")
                if r.stdout != want:
                    self.fail(
                        f"lacs-dump (exit {r.returncode}) and lacs.safetensors.dump differ on {p}\n"
                        f"--- lacs-dump:\n{r.stdout.decode('utf-8', 'backslashreplace')}"
                        f"--- lacs-dump stderr:\n{r.stderr.decode('utf-8', 'backslashreplace')}"
                        f"--- lacs.safetensors.dump:\n{want.decode('utf-8')}")

    def test_corpus(self):
        files = files_under(os.path.join(REPO, "tests", "data"))
        self.assertTrue(any("/malformed/" in p for p in files) and any("/valid/" in p for p in files),
                        "the corpus under tests/data is missing: run /usr/bin/python3 tests/data/make_corpus.py")
        self.compare(files)

    def test_vectors(self):
        files = files_under(os.path.join(REPO, "vectors"))
        if not files:
            self.skipTest("no vector files under vectors/ yet")
        self.compare(files)


if __name__ == "__main__":
    unittest.main()
