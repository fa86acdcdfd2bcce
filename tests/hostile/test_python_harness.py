"""The Python harness (python3 -m lacs check) against hostile and careless
functions (issue 17): exceptions outside the call, os._exit(0), hangs,
os.chdir, printing on stdout, non-UTF-8 file names, declared limits; and
--timeout and --jobs, which the README promises."""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import unittest
import xml.etree.ElementTree as ET

import support
from support import VectorCopy, harness, python_impl

CLOSING = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped( \(shard \d+/\d+\))?$")


class HarnessTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lacs-hostile-harness-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def check(self, function, *args, **kwargs):
        return harness("check", "--impl", python_impl(function), "--vectors", support.CORE, *args, **kwargs)

    def counts(self, result):
        for line in result.lines:
            m = CLOSING.match(line)
            if m:
                return tuple(int(x) for x in m.groups()[:3])
        return None


class Exceptions(HarnessTestCase):
    def test_an_exception_raised_outside_the_call_fails_its_case(self):
        for function, words in (("meta_tensor", "NotImplementedError: Cannot copy out of meta tensor"),
                                ("cuda_fault", "RuntimeError: CUDA error: an illegal memory access")):
            result = self.check(function, "--op", "dyt", "--tier", "fp32")
            self.assertEqual(result.returncode, 1, result)
            self.assertNotIn("Traceback", result.stderr, result)
            for case_id in support.ids("dyt", "fp32"):
                self.assertEqual(result.status_of(case_id), "FAIL", result)  # not a SKIP
                self.assertIn(words, result.detail_of(case_id))
            self.assertEqual(self.counts(result), (0, len(support.ids("dyt", "fp32")), 0))

    def test_a_non_utf8_file_name_with_junit(self):
        copy = VectorCopy(os.path.join(self.tmp, "vectors"), ["dyt-fp32-basic"])
        folder = os.fsencode(os.path.join(copy.root, "dyt"))
        shutil.copyfile(copy.path("dyt-fp32-basic"), os.path.join(folder, b"dyt-fp32-\xff.safetensors"))
        junit = os.path.join(self.tmp, "r.xml")
        result = harness("check", "--impl", python_impl("printer"), "--vectors", copy.root, "--junit", junit)
        self.assertNotIn("Traceback", result.stderr, result)
        self.assertIn(result.returncode, (1, 2), result)
        names = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")]
        self.assertIn("dyt-fp32-\\xFF", names)


class Processes(HarnessTestCase):
    def test_os_exit_0_in_the_function_is_a_failure_with_a_report(self):
        # dyt-fp32-specials is strict (SPEC.md 11.7): --strict counts its failure
        result = self.check("os_exit0", "--op", "dyt", "--tier", "fp32", "--strict")
        self.assertEqual(result.returncode, 1, result)
        self.assertEqual(result.status_of("dyt-fp32-basic"), "PASS", result)
        self.assertEqual(result.status_of("dyt-fp32-specials"), "FAIL", result)
        self.assertIn("exited", result.detail_of("dyt-fp32-specials"))
        self.assertIsNotNone(self.counts(result))

    def test_timeout_and_jobs(self):
        one = self.check("hang_without_weight", "--op", "dyt", "--tier", "fp32", "--timeout", "2", "--strict",
                         timeout=60)
        self.assertFalse(one.timed_out, "the harness did not time the hanging case out")
        self.assertEqual(one.returncode, 1, one)
        self.assertEqual(one.status_of("dyt-fp32-specials"), "FAIL", one)
        self.assertEqual(one.detail_of("dyt-fp32-specials"), "timed out after 2s")
        self.assertEqual(one.status_of("dyt-fp32-basic"), "PASS", one)
        two = self.check("hang_without_weight", "--op", "dyt", "--tier", "fp32", "--timeout", "2", "--strict",
                         "--jobs", "2", timeout=60)
        self.assertEqual(two.stdout, one.stdout)
        bad = self.check("printer", "--jobs", "0")
        self.assertEqual(bad.returncode, 2, bad)
        self.assertIn("--jobs", bad.stderr)

    def test_printing_stays_out_of_the_report(self):
        for mode in ([], ["--in-process"]):
            result = self.check("printer", "--op", "dyt", "--tier", "fp32", *mode)
            self.assertEqual(result.returncode, 0, result)
            self.assertNotIn("forged", result.stdout)
            self.assertIn("forged", result.stderr)

    def test_chdir_does_not_break_later_cases(self):
        for mode in ([], ["--in-process"]):
            result = harness("check", "--impl", python_impl("chdir_away"), "--vectors", "vectors/core", "--op",
                             "dyt", "--tier", "fp32", *mode)
            self.assertEqual(result.returncode, 0, result)
            self.assertEqual(self.counts(result), (len(support.ids("dyt", "fp32")), 0, 0))


class Files(HarnessTestCase):
    def test_a_report_over_a_golden_vector_is_refused_before_the_run(self):
        copy = VectorCopy(os.path.join(self.tmp, "vectors"), ["dyt-fp32-basic"])
        golden = copy.path("dyt-fp32-basic")
        before = support.sha256_of(golden)
        for option in ("--json", "--junit"):
            result = harness("check", "--impl", python_impl("printer"), "--vectors", copy.root, option, golden)
            self.assertEqual(result.returncode, 2, result)
            self.assertNotIn("PASS", result.stdout)
            self.assertIn("golden", result.stderr)
        fifo = os.path.join(self.tmp, "report.fifo")
        os.mkfifo(fifo)
        result = self.check("printer", "--op", "dyt", "--json", fifo, timeout=30)
        self.assertEqual(result.returncode, 2, result)
        self.assertIn("not a regular file", result.stderr)
        self.assertEqual(support.sha256_of(golden), before)

    def test_sigterm_ends_the_worker(self):
        pids = os.path.join(self.tmp, "pids")
        os.mkdir(pids)
        environment = dict(os.environ, PYTHONPATH=support.PYTHON_UNDER_TEST, LACS_BUILD=support.BUILD,
                           LACS_HOSTILE_PIDS=pids)
        process = subprocess.Popen([support.PY, "-m", "lacs", "check", "--impl", python_impl("hang_writing_pid"),
                                    "--vectors", support.CORE, "--op", "dyt"], cwd=support.ROOT, env=environment,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        started = []
        try:
            self.assertTrue(support.wait_for(lambda: os.listdir(pids), 30), "the function never ran")
            started = [int(name.split("-")[1]) for name in os.listdir(pids)]
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)
            self.assertTrue(support.wait_for(lambda: not any(support.process_alive(p) for p in started), 5),
                            f"the worker {started} outlived the harness")
            self.assertEqual(process.returncode, -signal.SIGTERM)
        finally:
            for pid in started:
                support.kill_quietly(pid)
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


class Verdicts(HarnessTestCase):
    def test_undeclared_skips_are_partial(self):
        result = self.check("skip_varlen_h0", "--op", "delta_rule")
        self.assertEqual(result.returncode, 1, result)
        self.assertRegex(result.stdout, r"delta_rule +fp32 +partial")
        self.assertTrue(result.lines[-1].startswith("does not conform to lacs spec 1.4"), result.lines[-1])

    def test_declared_limits(self):
        result = self.check("declared_skip_varlen_h0", "--op", "delta_rule")
        self.assertEqual(result.returncode, 0, result)
        self.assertRegex(result.stdout, r"delta_rule +fp32 +partial \(declared\)")
        self.assertEqual(result.lines[-1], "conforms to lacs spec 1.4 for ops delta_rule in tiers fp32, bf16, "
                                           "except the declared InitialState, StateCarry, Varlen")


class Shards(HarnessTestCase):
    def test_an_empty_shard_is_not_an_error(self):
        for run in (self.check("printer", "--op", "dyt", "--tier", "fp32", "--shard", "9/9"),
                    support.lacs("check", "--impl", "builtin:reference", "--op", "dyt", "--tier", "fp32",
                                 "--shard", "9/9")):
            self.assertEqual(run.returncode, 0, run)
            self.assertIn("0 passed, 0 failed, 0 skipped (shard 9/9)", run.stdout)
            self.assertIn("shard 9/9", run.stderr)


if __name__ == "__main__":
    unittest.main()
