"""A PyTorch backward checked by the harness (issue 20), with Debian's python3-torch (CPU) under /usr/bin/python3:

  - the README's torch.autograd.Function example (the ```python block that starts with
    `# my_torch_backward.py`), cut out of README.md and run exactly as printed by the command of its first
    comment line, passes every gated_delta_rule_vjp case in both tiers (varlen, state carry with dh_split, GVA,
    the per-channel gate included), returning torch tensors; `build/lacs check --impl python:...` gives the same;
  - the same file with dh0 dropped fails: its backward returning None for the initial state (dh0 zeros) fails
    every case that has h0 and passes the others; dh0 left out of what run() returns fails as a missing output;
  - the other VJP kinds run the same way (tests/python/impls/autograd_vjp.py: autograd's VJPs of the linear
    family and of softmax attention / FoX, in fp32): per-head parameter gradients (dg_gamma), per-channel gates,
    ops without a state; the same with dg_gamma averaged instead of summed fails retention's and ALiBi's cases;
  - `lacs explain` on a Python backward (build/lacs and python3 -m lacs) names the wrong gradient, its head and
    the token where it goes wrong, and where that token sits: a twin with dv wrong at one token of one head, and
    the dh0-dropped twin on a state carry (the error starts at the split).
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
BUILD = os.path.abspath(os.path.join(ROOT, os.environ.get("LACS_BUILD", "build")))
OP = "gated_delta_rule_vjp"
CLOSING = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", re.M)
RESULT = re.compile(r"^(PASS|FAIL|SKIP)  (\S+) +(\S+)$", re.M)
# the line of the example's backward that returns dh0, and the same without it
RETURNS_DH0 = "return dq, dk, dv, dbeta, dgk, dh0 if h0 is not None else None, None, None"
DROPS_DH0 = "return dq, dk, dv, dbeta, dgk, None, None, None"
# the line of run() that returns the gradients, and the same without dh0
RETURNS_ALL = "for (name, t), d in zip(wrt.items(), grads)}"
OMITS_DH0 = "for (name, t), d in zip(wrt.items(), grads) if name != \"dh0\"}"
# a twin wrong at one token of one head of one gradient
ONE_TOKEN_WRONG = '''

_run = run


def run(op, inputs, params, case):
    gradients = _run(op, inputs, params, case)
    gradients["dv"][0, 70, 1] *= 1.5  # dv of value head 1 at t = 70 only
    return gradients


run.lacs_inputs = "torch"
'''


def readme_example():
    """The README's autograd example: the ```python block that starts with `# my_torch_backward.py`."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("```python\n# my_torch_backward.py")
    end = text.index("\n```\n", start)
    return text[start + len("```python\n"):end + 1]


def run_command(argv, cwd):
    """The README's command line (`PYTHONPATH=python /usr/bin/python3 -m lacs ...`) run in `cwd`, with the
    PYTHONPATH pointing at this checkout's package and this interpreter (the one running the tests)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), LACS_BUILD=BUILD)
    env.pop("LACS_VECTORS", None)
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def harness(*args):
    return run_command(["-m", "lacs", *args], ROOT)


def lacs_program(*args):
    env = dict(os.environ, LACS_PYTHON=sys.executable)
    for name in ("PYTHONPATH", "LACS_BUILD", "LACS_VECTORS"):
        env.pop(name, None)
    return subprocess.run([os.path.join(BUILD, "lacs"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


def results(stdout):
    return {case: status for status, _, case in RESULT.findall(stdout)}


def where_lines(stdout):
    """explain's closing summary: the `where` line of each failing output."""
    block = stdout[stdout.index("\nwhere "):].strip().split("\n\n")[0]
    return [line.split(None, 1)[1] if line.startswith("where ") else line.strip() for line in block.splitlines()]


class TorchBackward(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch  # noqa: F401  (Debian's python3-torch; ci/deps.sh installs it)
        cls.tmp = tempfile.mkdtemp(prefix="lacs-torch-backward-")
        cls.example_text = readme_example()
        for fragment in (RETURNS_DH0, RETURNS_ALL):
            assert cls.example_text.count(fragment) == 1, f"the README example changed: update the twins ({fragment})"
        cls.files = {}
        for name, text in (("my_torch_backward", cls.example_text),
                           ("dh0_dropped", cls.example_text.replace(RETURNS_DH0, DROPS_DH0)),
                           ("dh0_omitted", cls.example_text.replace(RETURNS_ALL, OMITS_DH0)),
                           ("one_token_wrong", cls.example_text + ONE_TOKEN_WRONG)):
            cls.files[name] = os.path.join(cls.tmp, name + ".py")
            with open(cls.files[name], "w") as f:
                f.write(text)
        # the vectors directory of the repository, linked where the example is run (as a user's checkout would be)
        os.symlink(os.path.join(ROOT, "vectors"), os.path.join(cls.tmp, "vectors"))
        with open(os.path.join(ROOT, "vectors", "MANIFEST.json")) as f:
            cls.manifest = {c["id"]: c for c in json.load(f)["cases"] if c["op"] == OP}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def impl(self, name):
        return f"python:{self.files[name]}:run"

    def test_the_readme_example_passes_every_case_as_printed(self):
        command = self.example_text.splitlines()[1]
        prefix = "#   PYTHONPATH=python /usr/bin/python3 "
        self.assertTrue(command.startswith(prefix), command)
        argv = command[len(prefix):].split()
        self.assertEqual(argv, ["-m", "lacs", "check", "--impl", "python:my_torch_backward.py:run", "--op", OP])
        run = run_command(argv, self.tmp)  # in the directory holding my_torch_backward.py, as the README says
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertEqual(CLOSING.search(run.stdout).groups(), (str(len(self.manifest)), "0", "0"))
        self.assertEqual(run.stdout.splitlines()[-1], f"conforms to lacs spec 1.4 for ops {OP} in tiers fp32, bf16")
        flags = {f for c in self.manifest.values() for f in c["flags"]}
        self.assertTrue({"Varlen", "StateCarry", "GroupedValueHeads", "InitialState", "StateCotangent",
                         "PerChannelGate"} <= flags, flags)  # what "every case" covers
        # build/lacs hands a Python implementation to the harness
        program = lacs_program("check", "--impl", self.impl("my_torch_backward"), "--op", OP, "--tier", "fp32")
        self.assertEqual(program.returncode, 0, program.stdout + program.stderr)
        self.assertEqual(CLOSING.search(program.stdout).groups(), (str(len(self.manifest) // 2), "0", "0"))

    def test_the_same_backward_with_dh0_dropped_fails(self):
        with_h0 = {i for i, c in self.manifest.items() if "InitialState" in c["flags"]
                   or "StateCarry" in c["flags"]}
        dropped = harness("check", "--impl", self.impl("dh0_dropped"), "--op", OP, "--jobs", "2")
        self.assertEqual(dropped.returncode, 1, dropped.stdout + dropped.stderr)
        self.assertIn(f"does not conform to lacs spec 1.4: {OP} fails in fp32, bf16", dropped.stdout)
        status = results(dropped.stdout)
        self.assertEqual(len(status), len(self.manifest))
        failed = {i for i, s in status.items() if s == "FAIL"}
        self.assertGreaterEqual(len(failed), 20)
        self.assertLessEqual(failed, with_h0)  # only where there is an h0 to differentiate
        self.assertTrue(all(status[i] == "PASS" for i in set(status) - with_h0), status)
        self.assertRegex(dropped.stdout, r"dh0\[seq=\d+, head=\d+, k=\d+, v=\d+\]: expected \S+, got 0, ")

        omitted = harness("check", "--impl", self.impl("dh0_omitted"), "--op", OP, "--tier", "fp32", "--jobs", "2")
        self.assertEqual(omitted.returncode, 1, omitted.stdout + omitted.stderr)
        self.assertIn("missing output 'dh0'", omitted.stdout)
        self.assertEqual(results(omitted.stdout)[f"{OP}-fp32-carry37"], "FAIL")

    def test_the_other_vjp_kinds_run_through_the_harness(self):
        ops = ("linear_attn_vjp", "retention_vjp", "simple_gla_vjp", "gla_vjp", "softmax_attn_vjp", "fox_vjp")
        impl = f"python:{os.path.join(ROOT, 'tests', 'python', 'impls', 'autograd_vjp.py')}"
        good = harness("check", "--impl", impl + ":run", "--op", ",".join(ops), "--tier", "fp32", "--jobs", "2")
        self.assertEqual(good.returncode, 0, good.stdout + good.stderr)
        passed, failed, skipped = (int(n) for n in CLOSING.search(good.stdout).groups())
        self.assertEqual((failed, skipped), (0, 0))
        self.assertGreaterEqual(passed, 60)
        wrong = harness("check", "--impl", impl + ":run_gate_mean", "--op", ",".join(ops), "--tier", "fp32",
                        "--jobs", "2")
        self.assertEqual(wrong.returncode, 1, wrong.stdout + wrong.stderr)
        self.assertIn("does not conform to lacs spec 1.4: retention_vjp fails in fp32; fox_vjp fails in fp32",
                      wrong.stdout)
        self.assertEqual(results(wrong.stdout)["fox_vjp-fp32-alibi"], "FAIL")
        self.assertRegex(wrong.stdout, r"\n      dg_gamma\[\d\]: expected ")

    def test_explain_names_the_gradient_the_head_and_the_token(self):
        for explain in (lambda *a: lacs_program("explain", *a), lambda *a: harness("explain", *a)):
            run = explain(f"{OP}-fp32-mixed", "--impl", self.impl("one_token_wrong"))
            self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
            self.assertEqual(len(where_lines(run.stdout)), 1, run.stdout)
            self.assertRegex(where_lines(run.stdout)[0],
                             r"^dv: head 1 \(of 2\), 1 of 129 tokens over the limit \(t = 70\), from t = 70 \(the last, where "
                             r"the backward's error starts\): token 6 of chunk 1 of 64 \(t = 64\.\.127\): not at a "
                             r"chunk boundary; worst there dv\[b=0, t=70, head=1, v=\d\]$")
        # dh0 dropped on a state carry: the first part gets dht = 0, its gradients go wrong from the split back
        run = lacs_program("explain", f"{OP}-fp32-carry37", "--impl", self.impl("dh0_dropped"))
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        where = where_lines(run.stdout)
        for gradient in ("dk", "dv", "dbeta", "dg"):
            self.assertTrue(any(re.match(rf"{gradient}: heads? [0-9, ]+ \(of \d\), \d+ of 100 tokens over the limit "
                                         r"\(t = \d+\.\.36\), from t = 36 .*: at the state-carry split \(split = 37\), the last token "
                                         r"before it", line) for line in where), (gradient, where))
        self.assertIn("dh_split: worst element dh_split[seq=0, ", "\n".join(where))
        good = harness("explain", f"{OP}-bf16-carry64", "--impl", self.impl("my_torch_backward"))
        self.assertEqual(good.returncode, 0, good.stdout + good.stderr)
        self.assertNotIn("\nwhere ", good.stdout)


if __name__ == "__main__":
    unittest.main()
