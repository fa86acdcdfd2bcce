"""Hostile and careless plugins (issue 17): writes out of bounds or into the
inputs, state kept in place, an exit(0) on load, skips that would pass for
conformance, reasons, signals and forked grandchildren. Each runs
`build/lacs` with tests/hostile/plugins/hostile.c in one of its modes on a
few committed vectors."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import support
from support import VectorCopy, hostile_env, lacs, plugin


class PluginTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lacs-hostile-plugins-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def check(self, mode, *args, describe=None, impl=None, env=None, **kwargs):
        environment = hostile_env(mode, describe)
        environment.update(env or {})
        return lacs("check", "--impl", impl or plugin("hostile"), *args, env=environment, **kwargs)


class Bounds(PluginTestCase):
    """Out-of-bounds writes go unseen; inputs are writable."""

    ARGS = ("--op", "linear_attn", "--tier", "fp32")

    def assertEveryCaseFails(self, result, *words):
        self.assertEqual(result.returncode, 1, result)
        ids = support.ids("linear_attn", "fp32")
        for case_id in ids:
            self.assertEqual(result.status_of(case_id), "FAIL", result)
            detail = result.detail_of(case_id)
            for word in words:
                self.assertIn(word, detail, result)

    def test_writing_one_or_two_floats_past_the_end_fails_with_the_reason(self):
        for mode in ("overflow1", "overflow2"):
            self.assertEveryCaseFails(self.check(mode, *self.ARGS), "past the end of output")

    def test_writing_before_the_start_fails_with_the_reason(self):
        self.assertEveryCaseFails(self.check("underflow", *self.ARGS), "before the start of output")

    def test_writing_into_an_input_fails_with_the_reason(self):
        self.assertEveryCaseFails(self.check("write_input", *self.ARGS), "input 'q'", "read-only")

    def test_the_same_plugin_without_the_stray_writes_passes(self):
        result = self.check("correct", *self.ARGS)
        self.assertEqual(result.returncode, 0, result)


class StateCarry(PluginTestCase):
    def test_a_kernel_updating_its_state_in_place_passes_the_carry_cases(self):
        result = self.check("inplace_h0", "--op", "linear_attn")
        self.assertEqual(result.returncode, 0, result)
        for case_id in ("linear_attn-fp32-carry37", "linear_attn-bf16-carry64"):
            self.assertEqual(result.status_of(case_id), "PASS", result)


class Loading(PluginTestCase):
    def test_a_constructor_calling_exit_0_is_not_a_pass(self):
        result = self.check("", "--op", "linear_attn", impl=plugin("constructor_exit"))
        self.assertEqual(result.returncode, 2, result)
        self.assertIn("constructor_exit.so", result.stderr)
        self.assertIn("exited", result.stderr)

    def test_a_constructor_forking_a_daemon_neither_stalls_the_run_nor_outlives_it(self):
        pids = os.path.join(self.tmp, "pids")
        os.mkdir(pids)
        started = time.monotonic()
        try:
            result = self.check("", "--op", "linear_attn", "--tier", "fp32", impl=plugin("constructor_fork"),
                                env={"LACS_HOSTILE_PIDS": pids}, timeout=50)
            self.assertFalse(result.timed_out, "lacs check waited for the constructor's process")
            self.assertLess(time.monotonic() - started, 40)
            self.assertEqual(result.returncode, 0, result)
            daemons = [int(name.split("-")[1]) for name in os.listdir(pids)]
            self.assertTrue(daemons)
            self.assertTrue(support.wait_for(lambda: not any(support.process_alive(p) for p in daemons), 5))
        finally:
            for name in os.listdir(pids):
                support.kill_quietly(int(name.split("-")[1]))

    def test_the_impl_option_with_an_empty_value(self):
        result = lacs("check", "--impl=", "--op", "linear_attn")
        self.assertEqual(result.returncode, 2, result)
        self.assertEqual(result.stderr.strip(), "lacs: option --impl needs a value (--impl=VALUE or --impl VALUE)")


class Verdicts(PluginTestCase):
    """Conformance by skipping: the verdict per (op, tier), at the required level."""

    def test_undeclared_skips_are_partial_and_fail_the_run(self):
        result = self.check("skip_varlen_h0", "--op", "linear_attn", "--json", os.path.join(self.tmp, "r.json"))
        self.assertEqual(result.returncode, 1, result)
        self.assertRegex(result.stdout, r"linear_attn +fp32 +partial")
        self.assertIn("Varlen", result.stdout)
        self.assertIn("InitialState", result.stdout)
        self.assertRegex(result.lines[-2], r"^\d+ passed, 0 failed, \d+ skipped$")
        self.assertTrue(result.lines[-1].startswith("does not conform to lacs spec 1.4"), result.lines[-1])
        with open(os.path.join(self.tmp, "r.json")) as f:
            verdict = json.load(f)["verdict"]
        groups = {(g["op"], g["tier"]): g for g in verdict["groups"]}
        self.assertEqual(groups[("linear_attn", "fp32")]["verdict"], "partial")
        self.assertFalse(groups[("linear_attn", "fp32")]["declared"])
        self.assertIn("Varlen", groups[("linear_attn", "fp32")]["skipped_flags"])
        self.assertEqual(verdict["exit_status"], 1)

    def test_declared_limits_are_named_and_pass(self):
        result = self.check("skip_varlen_h0", "--op", "linear_attn",
                            describe="linear_attn;fp32 bf16;Varlen InitialState StateCarry")
        self.assertEqual(result.returncode, 0, result)
        self.assertRegex(result.stdout, r"linear_attn +fp32 +partial \(declared\)")
        self.assertEqual(result.lines[-1],
                         "conforms to lacs spec 1.4 for ops linear_attn in tiers fp32, bf16, "
                         "except the declared InitialState, StateCarry, Varlen")

    def test_a_tier_every_case_of_which_is_skipped_is_not_claimed(self):
        result = self.check("bf16_only", "--op", "linear_attn")
        self.assertEqual(result.returncode, 0, result)
        self.assertRegex(result.stdout, r"linear_attn +fp32 +not claimed")
        self.assertRegex(result.stdout, r"linear_attn +bf16 +conforms")
        self.assertEqual(result.lines[-1], "conforms to lacs spec 1.4 for ops linear_attn in tiers bf16")

    def test_a_failure_is_a_failure(self):
        result = self.check("scale1pct", "--op", "linear_attn", "--tier", "fp32")
        self.assertEqual(result.returncode, 1, result)
        self.assertRegex(result.stdout, r"linear_attn +fp32 +fails")

    def test_strict_cases_are_listed_beside_and_count_under_strict(self):
        strict_case = "linear_attn-fp32-t127"
        copy = VectorCopy(os.path.join(self.tmp, "vectors"), support.ids("linear_attn", "fp32"))

        def strict(m):
            m["level"] = "strict"
            m["level_reason"] = "a test's strict case"
        copy.rewrite(strict_case, meta=strict)
        env = {"LACS_HOSTILE_ONLY_T": "127"}  # 1% off on the strict case (T = 127; no other call has it) only
        result = self.check("scale1pct", "--vectors", copy.root, env=env)
        self.assertEqual(result.returncode, 0, result)
        self.assertEqual(result.status_of(strict_case), "FAIL", result)
        self.assertRegex(result.stdout, r"linear_attn +fp32 +conforms")
        self.assertRegex(result.stdout, r"strict failures \(not counted at the required level; --strict counts "
                                        r"them\): linear_attn-fp32-t127")
        self.assertEqual(result.lines[-1], "conforms to lacs spec 1.4 for ops linear_attn in tiers fp32")
        strict_run = self.check("scale1pct", "--vectors", copy.root, "--strict", env=env)
        self.assertEqual(strict_run.returncode, 1, strict_run)
        self.assertRegex(strict_run.stdout, r"linear_attn +fp32 +fails")
        self.assertIn("strict level", strict_run.stdout)


class Reasons(PluginTestCase):
    def test_a_plugin_gives_the_reason_of_a_skip_and_of_an_error(self):
        skipped = self.check("reason_skip", "--op", "linear_attn", "--tier", "fp32", "--verbose")
        self.assertIn("unsupported by the implementation (needs K <= 8)", skipped.stdout)
        failed = self.check("reason_error", "--op", "linear_attn", "--tier", "fp32")
        self.assertIn("plugin returned 5: workspace allocation failed", failed.stdout)


class Processes(PluginTestCase):
    """Hangs: orphaned case processes and forked grandchildren."""

    def test_sigterm_ends_the_case_processes(self):
        pids = os.path.join(self.tmp, "pids")
        os.mkdir(pids)
        environment = dict(os.environ, **hostile_env("hang", LACS_HOSTILE_PIDS=pids))
        process = subprocess.Popen([support.LACS, "check", "--impl", plugin("hostile"), "--op", "linear_attn",
                                    "--jobs", "2"], cwd=support.ROOT, env=environment, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
        started = []
        try:
            self.assertTrue(support.wait_for(lambda: len(os.listdir(pids)) >= 2), "no case process started")
            started = [int(name.split("-")[1]) for name in os.listdir(pids)]
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)
            self.assertTrue(support.wait_for(lambda: not any(support.process_alive(p) for p in started), 5),
                            f"case processes {started} outlived lacs")
            self.assertEqual(process.returncode, -signal.SIGTERM)  # ended by the signal it got
        finally:
            for pid in started:
                support.kill_quietly(pid)
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def test_a_forked_grandchild_does_not_hold_the_run_open(self):
        pids = os.path.join(self.tmp, "pids")
        os.mkdir(pids)
        started = time.monotonic()
        try:
            result = self.check("fork_grandchild", "--op", "linear_attn", "--tier", "fp32",
                                env={"LACS_HOSTILE_PIDS": pids}, timeout=40)
            self.assertFalse(result.timed_out, "lacs check waited for the plugin's grandchildren")
            self.assertLess(time.monotonic() - started, 30)
            self.assertEqual(result.returncode, 0, result)
            grandchildren = [int(name.split("-")[1]) for name in os.listdir(pids)]
            self.assertTrue(grandchildren)
            self.assertTrue(support.wait_for(lambda: not any(support.process_alive(p) for p in grandchildren), 5))
        finally:
            for name in os.listdir(pids):
                support.kill_quietly(int(name.split("-")[1]))

    def test_what_a_plugin_prints_stays_out_of_the_report(self):
        result = self.check("print", "--op", "linear_attn", "--tier", "fp32")
        self.assertEqual(result.returncode, 0, result)
        self.assertNotIn("linear_attn-fp32-forged", result.stdout)
        self.assertIn("linear_attn-fp32-forged", result.stderr)


class Timeouts(PluginTestCase):
    def test_explain_and_run_take_a_timeout(self):
        case = os.path.join(support.CORE, "linear_attn", "linear_attn-fp32-t64.safetensors")
        explained = lacs("explain", case, "--impl", plugin("hostile"), "--timeout", "1", env=hostile_env("hang"),
                         timeout=30)
        self.assertFalse(explained.timed_out)
        self.assertIn("timed out after 1s", explained.stdout)
        out = os.path.join(self.tmp, "out.safetensors")
        ran = lacs("run", "--op", "linear_attn", "--impl", plugin("hostile"), "--in", case, "--out", out,
                   "--timeout", "1", env=hostile_env("hang"), timeout=30)
        self.assertFalse(ran.timed_out)
        self.assertEqual(ran.returncode, 1, ran)
        self.assertIn("timed out after 1s", ran.stderr)
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
