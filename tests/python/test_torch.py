"""The torch-native harness, with Debian's python3-torch (CPU) under
/usr/bin/python3:

  - the README's PyTorch example, cut out of README.md and run exactly as
    printed, passes every delta_rule case in both tiers (varlen batches and
    state carry included), returning torch tensors; its deliberately wrong
    twin (beta kept out of the erase term) and the same file on a device
    that cannot compute (DEVICE = "meta") fail;
  - a function is told its case (id, tier, flags, strict, the bf16 inputs)
    and, with lacs_inputs = "torch", gets tensors in their stored dtype;
  - `lacs explain` runs on a Python implementation (the README example and
    its twin), through build/lacs and through python3 -m lacs.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VECTORS = os.path.join(ROOT, "vectors", "core")
BUILD = os.path.abspath(os.path.join(ROOT, os.environ.get("LACS_BUILD", "build")))
CLOSING = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", re.M)
ERASE = "u = beta[b, t, :, None] * (v[b, t] - torch.einsum(\"hkv,hk->hv\", h, k[b, t]))"
WRONG_ERASE = "u = beta[b, t, :, None] * v[b, t] - torch.einsum(\"hkv,hk->hv\", h, k[b, t])"


def readme_example():
    """The README's PyTorch example: the ```python block that starts with `# my_torch_kernel.py`."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("```python\n# my_torch_kernel.py")
    end = text.index("\n```\n", start)
    return text[start + len("```python\n"):end + 1]


def harness(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), LACS_BUILD=BUILD)
    env.pop("LACS_VECTORS", None)
    return subprocess.run([sys.executable, "-m", "lacs", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def lacs_program(*args):
    env = dict(os.environ, LACS_PYTHON=sys.executable)
    for name in ("PYTHONPATH", "LACS_BUILD", "LACS_VECTORS"):
        env.pop(name, None)
    return subprocess.run([os.path.join(BUILD, "lacs"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


class TorchHarness(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch  # noqa: F401  (Debian's python3-torch; ci/deps.sh installs it)
        cls.tmp = tempfile.mkdtemp(prefix="lacs-torch-")
        example = readme_example()
        cls.example = os.path.join(cls.tmp, "my_torch_kernel.py")
        with open(cls.example, "w") as f:
            f.write(example)
        assert ERASE in example, "the README example's update line changed: update the wrong twin"
        cls.wrong = os.path.join(cls.tmp, "wrong_torch_kernel.py")
        with open(cls.wrong, "w") as f:
            f.write(example.replace(ERASE, WRONG_ERASE))
        cls.meta = os.path.join(cls.tmp, "meta_torch_kernel.py")
        with open(cls.meta, "w") as f:
            f.write(example.replace('DEVICE = "cpu"', 'DEVICE = "meta"'))
        with open(os.path.join(ROOT, "vectors", "MANIFEST.json")) as f:
            cls.manifest = {c["id"]: c for c in json.load(f)["cases"]}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def delta_rule_ids(self):
        return sorted(i for i, c in self.manifest.items() if c["op"] == "delta_rule")

    def test_the_readme_example_passes_every_delta_rule_case_as_printed(self):
        # the command of the example's first comment line, with the file where the test wrote it
        first_line = readme_example().splitlines()[1]
        self.assertIn("-m lacs check --impl python:my_torch_kernel.py:run --op delta_rule", first_line)
        run = harness("check", "--impl", f"python:{self.example}:run", "--op", "delta_rule", "--jobs", "2")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        n = len(self.delta_rule_ids())
        self.assertEqual(CLOSING.search(run.stdout).groups(), (str(n), "0", "0"))
        self.assertEqual(run.stdout.splitlines()[-1], "conforms to lacs spec 1.4 for ops delta_rule in tiers fp32, bf16")
        flags = {f for i in self.delta_rule_ids() for f in self.manifest[i]["flags"]}
        self.assertTrue({"Varlen", "StateCarry", "GroupedValueHeads", "InitialState"} <= flags, flags)  # what "every case" covers
        declared = harness("check", "--impl", f"python:{self.example}:run", "--op", "dyt", "--tier", "fp32")
        self.assertRegex(declared.stdout, r"dyt +fp32 +not claimed")

    def test_the_wrong_twin_and_an_unusable_device_fail(self):
        wrong = harness("check", "--impl", f"python:{self.wrong}:run", "--op", "delta_rule", "--jobs", "2")
        self.assertEqual(wrong.returncode, 1, wrong.stdout + wrong.stderr)
        passed, failed, skipped = (int(x) for x in CLOSING.search(wrong.stdout).groups())
        self.assertGreaterEqual(failed, 30)
        self.assertIn("does not conform to lacs spec 1.4: delta_rule fails in fp32, bf16", wrong.stdout)
        meta = harness("check", "--impl", f"python:{self.meta}:run", "--op", "delta_rule", "--tier", "fp32")
        self.assertEqual(meta.returncode, 1, meta.stdout + meta.stderr)
        self.assertEqual(CLOSING.search(meta.stdout).groups()[:2], ("0", str(len(self.delta_rule_ids()) // 2)))

    def test_a_function_is_told_its_case_and_gets_tensors_in_the_stored_dtype(self):
        path = os.path.join(self.tmp, "introspect.py")
        with open(path, "w") as f:
            f.write("import torch\n"
                    "def run(op, inputs, params, case):\n"
                    "    dtypes = ','.join(f'{n}={str(t.dtype).replace(\"torch.\", \"\")}' "
                    "for n, t in sorted(inputs.items()))\n"
                    "    raise NotImplementedError(f'{case.id}|{case.op}|{case.tier}|{\" \".join(case.flags)}|'\n"
                    "                              f'{case.strict}|{\" \".join(sorted(case.bf16))}|{dtypes}')\n"
                    "run.lacs_inputs = 'torch'\n")
        run = harness("check", "--impl", f"python:{path}:run", "--op", "delta_rule,dyt", "--verbose")
        told = re.findall(r"unsupported by the implementation \(NotImplementedError: (.*)\)$", run.stdout, re.M)
        self.assertEqual(len(told), len([i for i, c in self.manifest.items() if c["op"] in ("delta_rule", "dyt")]))
        for line in told:
            case_id, op, tier, flags, strict, bf16, dtypes = line.split("|")
            entry = self.manifest[case_id]
            self.assertEqual((op, tier, flags.split()), (entry["op"], entry["tier"], entry["flags"]), line)
            self.assertIn(strict, ("True", "False"))
            dtype = dict(pair.split("=") for pair in dtypes.split(","))
            for name, kind in dtype.items():
                expected = "int64" if name == "cu_seqlens" else "bfloat16" if name in bf16.split() else "float32"
                self.assertEqual(kind, expected, line)
            if tier == "bf16":
                self.assertIn(dtype.get("q", dtype.get("x")), ("bfloat16",), line)
        self.assertTrue(any(line.split("|")[4] == "True" for line in told))  # dyt-*-specials are strict

    def test_explain_runs_on_a_python_implementation(self):
        good = lacs_program("explain", "delta_rule-bf16-carry37", "--impl", f"python:{self.example}:run")
        self.assertEqual(good.returncode, 0, good.stdout + good.stderr)
        self.assertIn(f"impl       python:{self.example}:run", good.stdout)
        self.assertIn("over time: the limit is never passed", good.stdout)
        self.assertRegex(good.stdout, r"\nPASS  \S+ +delta_rule-bf16-carry37\n")
        for explain in (lambda *a: lacs_program("explain", *a), lambda *a: harness("explain", *a)):
            bad = explain("delta_rule-fp32-t65", "--impl", f"python:{self.wrong}:run")
            self.assertEqual(bad.returncode, 1, bad.stdout + bad.stderr)
            self.assertIn("case       delta_rule-fp32-t65", bad.stdout)
            self.assertRegex(bad.stdout, r"over time: first passes the limit at t = \d+")
            self.assertIn("error over time (worst ratio per slice of t", bad.stdout)
            self.assertRegex(bad.stdout, r"\nFAIL  \S+ +delta_rule-fp32-t65\n")
        skipped = harness("explain", "dyt-fp32-basic", "--impl", f"python:{self.example}:run")
        self.assertEqual(skipped.returncode, 0, skipped.stdout + skipped.stderr)
        self.assertIn("case       dyt-fp32-basic", skipped.stdout)
        self.assertRegex(skipped.stdout, r"\nSKIP  -  +dyt-fp32-basic\n")


if __name__ == "__main__":
    unittest.main()
