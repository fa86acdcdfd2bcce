"""Damage to the user's files and hangs on special files (issue 17): the
report writers and `lacs run --out` against planted symbolic links, FIFOs,
golden vectors and concurrent runs; a FIFO named like a vector. Every FIFO,
link and file is created under the test's temporary directory; no test
writes to a device node."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import support
from support import VectorCopy, hostile_env, lacs, plugin

CASE = "linear_attn-fp32-t64"


class FileTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lacs-hostile-files-")
        self.copy = VectorCopy(os.path.join(self.tmp, "vectors"), [CASE, "linear_attn-fp32-t65"])

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def check(self, *args, **kwargs):
        return lacs("check", "--impl", plugin("hostile"), "--vectors", self.copy.root, *args,
                    env=hostile_env("correct"), **kwargs)

    def assertRefusedBeforeTheRun(self, result, *words):
        self.assertEqual(result.returncode, 2, result)
        self.assertNotIn("PASS", result.stdout, "the cases ran before the report path was refused")
        self.assertEqual(len(result.stderr.splitlines()), 1, result)
        for word in words:
            self.assertIn(word, result.stderr, result)


class Reports(FileTestCase):
    def test_a_symlink_planted_at_the_old_temporary_name_is_left_alone(self):
        precious = self.path("precious.txt")
        with open(precious, "w") as f:
            f.write("the user's file\n")
        for option, name in (("--json", "r.json"), ("--junit", "r.xml")):
            os.symlink(precious, self.path(name + ".tmp"))
            result = self.check(option, self.path(name))
            self.assertEqual(result.returncode, 0, result)
            with open(precious) as f:
                self.assertEqual(f.read(), "the user's file\n")
            self.assertTrue(os.path.isfile(self.path(name)) and not os.path.islink(self.path(name)))

    def test_a_fifo_or_a_symlink_as_the_report_path_is_refused_before_the_run(self):
        fifo = self.path("report.fifo")
        os.mkfifo(fifo)
        self.assertRefusedBeforeTheRun(self.check("--json", fifo), fifo, "not a regular file")
        self.assertTrue(stat_is_fifo(fifo))
        link = self.path("link.json")
        os.symlink(self.path("elsewhere.json"), link)
        self.assertRefusedBeforeTheRun(self.check("--junit", link), link, "symbolic link")
        self.assertFalse(os.path.exists(self.path("elsewhere.json")))

    def test_a_report_over_a_golden_vector_is_refused(self):
        golden = self.copy.path(CASE)
        before = support.sha256_of(golden)
        self.assertRefusedBeforeTheRun(self.check("--json", golden), golden, "golden")
        beside = os.path.join(self.copy.root, "report.json")  # under a directory that holds a MANIFEST.json
        self.assertRefusedBeforeTheRun(
            lacs("check", "--impl", plugin("hostile"), "--op", "linear_attn", "--tier", "fp32", "--junit", beside,
                 env=hostile_env("correct")), beside, "MANIFEST.json")
        self.assertEqual(support.sha256_of(golden), before)

    def test_an_unwritable_report_path_is_refused_before_the_run(self):
        missing = self.path("no/such/dir/report.json")
        self.assertRefusedBeforeTheRun(self.check("--json", missing), missing)

    def test_concurrent_runs_writing_one_report_leave_a_whole_report(self):
        # reports of about 100 kB, written by 8 runs ending together, six times over (on the old writer,
        # which shared one FILE.tmp, about one round in six failed or left invalid JSON)
        report = self.path("shared.json")
        for _ in range(6):
            processes = [subprocess.Popen([support.LACS, "check", "--impl", "builtin:reference", "--op",
                                           "linear_attn,delta_rule", "--json", report], cwd=support.ROOT,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(8)]
            codes = [(p.wait(timeout=120), p.stderr.read().decode()) for p in processes]
            for p in processes:
                p.stderr.close()
            self.assertEqual([c for c, _ in codes], [0] * 8, codes)
            with open(report) as f:
                self.assertEqual(json.load(f)["summary"]["failed"], 0)
            self.assertEqual(sorted(os.listdir(self.tmp)), ["shared.json", "vectors"])  # no temporary file left


class RunOut(FileTestCase):
    def run_out(self, out, *extra):
        return lacs("run", "--op", "linear_attn", "--impl", "builtin:reference", "--in",
                    os.path.join(support.CORE, "linear_attn", CASE + ".safetensors"), "--out", out, *extra)

    def test_run_out_follows_the_same_rules(self):
        precious = self.path("precious.txt")
        with open(precious, "w") as f:
            f.write("the user's file\n")
        out = self.path("out.safetensors")
        os.symlink(precious, out + ".tmp")
        self.assertEqual(self.run_out(out).returncode, 0)
        with open(precious) as f:
            self.assertEqual(f.read(), "the user's file\n")
        fifo = self.path("out.fifo")
        os.mkfifo(fifo)
        refused = self.run_out(fifo, "--force")
        self.assertEqual(refused.returncode, 2, refused)
        self.assertIn("not a regular file", refused.stderr)
        self.assertTrue(stat_is_fifo(fifo))
        golden = self.copy.path(CASE)
        before = support.sha256_of(golden)
        refused = self.run_out(golden, "--force")
        self.assertEqual(refused.returncode, 2, refused)
        self.assertIn("MANIFEST.json", refused.stderr)
        self.assertEqual(support.sha256_of(golden), before)


class Fifos(FileTestCase):
    """Hangs: a FIFO named *.safetensors among the vectors."""

    def test_a_fifo_among_the_vectors_does_not_block(self):
        fifo = os.path.join(self.copy.root, "linear_attn", "linear_attn-fp32-t66.safetensors")
        os.mkfifo(fifo)
        for result in (self.check(timeout=20), lacs("list", "--vectors", self.copy.root, timeout=20),
                       support.harness("list", "--vectors", self.copy.root, timeout=20),
                       support.harness("check", "--impl", support.python_impl("linear_attn_zeros"), "--vectors",
                                       self.copy.root, timeout=30)):
            self.assertFalse(result.timed_out, "blocked on the FIFO")
            self.assertIn("not a regular file", result.stdout, result)
        self.assertEqual(self.check(timeout=20).returncode, 2)


def stat_is_fifo(path):
    import stat
    return stat.S_ISFIFO(os.lstat(path).st_mode)


if __name__ == "__main__":
    unittest.main()
