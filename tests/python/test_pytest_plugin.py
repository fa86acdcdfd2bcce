"""The pytest plugin and helper (python/lacs/pytest.py) on a scratch kernel
repository, examples/pytest_project/ (a correct delta rule and a deliberately
wrong twin, tested with @lacs.pytest.cases), copied to a temporary directory
and run by Debian's pytest (python3-pytest) as its authors would run it.

What each pytest run says per case (read from pytest's own --junitxml) must
be what `python3 -m lacs check` says for the same function: the plugin and
the helper add no verdict of their own.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROJECT = os.path.join(ROOT, "examples", "pytest_project")
VECTORS = os.path.join(ROOT, "vectors", "core")
BUILD = os.path.abspath(os.path.join(ROOT, os.environ.get("LACS_BUILD", "build")))


def environment():
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), LACS_BUILD=BUILD, LACS_VECTORS=VECTORS)
    env.pop("PYTEST_ADDOPTS", None)
    return env


class PytestProject(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lacs-pytest-project-")
        cls.project = os.path.join(cls.tmp, "project")
        shutil.copytree(PROJECT, cls.project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        cls.lacs_status = {}
        for function in ("run_correct", "run_wrong"):
            report = os.path.join(cls.tmp, function + ".json")
            subprocess.run([sys.executable, "-m", "lacs", "check", "--impl", f"python:my_kernels.py:{function}",
                            "--op", "delta_rule", "--json", report], cwd=cls.project, env=environment(),
                           capture_output=True, timeout=300)
            with open(report) as f:
                cls.lacs_status[function] = {c["id"]: c["status"] for c in json.load(f)["cases"]}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def pytest(self, *args):
        """(exit status, stdout, {(classname, name): (outcome, message)}) of pytest ARGS in the project."""
        junit = os.path.join(self.tmp, "junit.xml")
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN",
                              f"--junitxml={junit}", *args], cwd=self.project, env=environment(),
                             capture_output=True, text=True, timeout=300)
        cases = {}
        if os.path.exists(junit):
            for case in ET.parse(junit).getroot().iter("testcase"):
                outcome, message = "passed", None
                for tag in ("failure", "error", "skipped"):
                    node = case.find(tag)
                    if node is not None:
                        outcome, message = tag, node.get("message")
                cases[(case.get("classname"), case.get("name"))] = (outcome, message)
            os.remove(junit)
        return run.returncode, run.stdout + run.stderr, cases

    def expected(self, function, tier=None):
        """{case id: "passed" | "failure"} as python3 -m lacs check judged the function."""
        return {i: {"PASS": "passed", "FAIL": "failure"}[s] for i, s in self.lacs_status[function].items()
                if tier is None or f"-{tier}-" in i}

    def test_the_repositorys_own_tests_pass_the_correct_kernel_and_fail_the_wrong_one(self):
        status, out, cases = self.pytest()
        self.assertEqual(status, 1, out)  # the wrong kernel fails
        correct = {name[len("test_correct_delta_rule["):-1]: outcome for (cls, name), (outcome, _) in cases.items()
                   if name.startswith("test_correct_delta_rule[")}
        wrong = {name[len("test_wrong_delta_rule["):-1]: (outcome, message) for (cls, name), (outcome, message)
                 in cases.items() if name.startswith("test_wrong_delta_rule[")}
        self.assertEqual(correct, self.expected("run_correct", "fp32"))
        self.assertEqual(set(correct.values()), {"passed"})
        self.assertEqual({i: o for i, (o, _) in wrong.items()}, self.expected("run_wrong", "fp32"))
        failed = {i: m for i, (o, m) in wrong.items() if o == "failure"}
        self.assertGreaterEqual(len(failed), 15)
        self.assertIn("delta_rule-fp32-beta1", set(wrong) - set(failed))  # beta = 1: the bug changes nothing
        # the failure message is lacs's element report
        self.assertRegex(failed["delta_rule-fp32-t65"], r"NonConformance: delta_rule-fp32-t65: ratio [0-9.e+]+: "
                                                        r"(o|ht)\[.*\]: expected .*, got .*, allowed error .*")

    def test_the_plugin_runs_every_case_as_one_test(self):
        for function in ("run_correct", "run_wrong"):
            status, out, cases = self.pytest("-p", "lacs.pytest", "--lacs-impl", f"python:my_kernels.py:{function}",
                                             "--lacs-op", "delta_rule", "-k", "lacs")
            plugin = {name: (outcome, message) for (cls, name), (outcome, message) in cases.items()
                      if cls == "lacs.delta_rule"}
            self.assertEqual({i: o for i, (o, _) in plugin.items()}, self.expected(function), function)
            self.assertEqual(status, 0 if function == "run_correct" else 1, out)
            if function == "run_correct":
                self.assertIn("conforms to lacs spec 1.4 for ops delta_rule in tiers fp32, bf16", out)
            else:
                outcome, message = plugin["delta_rule-bf16-t65"]
                self.assertEqual(outcome, "failure")
                self.assertRegex(message, r"^delta_rule-bf16-t65: (o|ht)\[.*\]: expected .*, got .*, allowed error "
                                          r".*; normwise ratio .*, elementwise ratio ")
                self.assertIn("does not conform to lacs spec 1.4: delta_rule fails in fp32, bf16", out)

    def test_filters_skips_and_strict_cases(self):
        status, out, cases = self.pytest("-p", "lacs.pytest", "--lacs-impl", "python:my_kernels.py:run_correct",
                                         "--lacs-op", "dyt,delta_rule", "--lacs-tier", "bf16", "-k", "lacs")
        plugin = {(cls, name): outcome for (cls, name), (outcome, _) in cases.items() if cls.startswith("lacs.")}
        self.assertTrue(plugin)
        self.assertEqual({cls for cls, _ in plugin}, {"lacs.dyt", "lacs.delta_rule"})
        self.assertTrue(all("-bf16-" in name for _, name in plugin))
        self.assertEqual({o for (cls, _), o in plugin.items() if cls == "lacs.dyt"}, {"skipped"})  # NotImplemented
        self.assertEqual(status, 0, out)
        self.assertRegex(out, r"dyt +bf16 +not claimed")
        # a strict case (SPEC.md 11.7) that fails is an xfail, a failure with --lacs-strict
        raises = f"python:{os.path.join(ROOT, 'tests', 'python', 'impls', 'bad.py')}:raises"
        for strict, expected_status, expected_outcome in (([], 0, "skipped"), (["--lacs-strict"], 1, "failure")):
            status, out, cases = self.pytest("-p", "lacs.pytest", "--lacs-impl", raises, "--lacs-op", "dyt",
                                             "--lacs-tier", "fp32", "-k", "lacs", *strict)
            self.assertEqual(status, expected_status, out)
            outcome, message = cases[("lacs.dyt", "dyt-fp32-specials")]
            self.assertEqual(outcome, expected_outcome, out)
            self.assertIn("ValueError: this kernel needs a weight", message)
            self.assertEqual(cases[("lacs.dyt", "dyt-fp32-basic")][0], "passed")

    def test_a_bad_implementation_is_a_usage_error(self):
        status, out, _ = self.pytest("-p", "lacs.pytest", "--lacs-impl", "python:no_such_file.py:run")
        self.assertEqual(status, 4, out)  # pytest's usage error
        self.assertIn("lacs: no_such_file.py: no such file", out)
        status, out, _ = self.pytest("-p", "lacs.pytest", "--lacs-impl", "python:my_kernels.py:run_correct",
                                     "--lacs-op", "deltanet")
        self.assertEqual(status, 4, out)
        self.assertIn("unknown op 'deltanet'", out)

    def test_without_lacs_impl_the_plugin_adds_nothing(self):
        status, out, cases = self.pytest("-p", "lacs.pytest", "-k", "correct")
        self.assertEqual(status, 0, out)
        self.assertFalse([c for c in cases if c[0].startswith("lacs")])
        self.assertEqual(len(cases), len(self.expected("run_correct", "fp32")))


if __name__ == "__main__":
    unittest.main()
