"""The `lacs` command-line checker ($LACS_BUILD/lacs), run as a user would.

The example plugins under tests/plugins/ (built into $LACS_BUILD/plugins/)
are written from include/lacs/plugin.h alone: good_plugin (linear attention in
binary32: PASSes linear_attn, SKIPs the rest), wrong_plugin (ignores scale),
chunk_plugin (drops the state between chunks of 64), crash_plugin (SIGSEGV on
delta_rule, returns 7 on retention), hang_plugin (never returns on T = 1),
nosymbol (no lacs_plugin_run); for a backward, good_vjp_plugin (the gated delta
rule's VJP in binary32, SPEC.md 4.19), wrong_vjp_plugin (dv of value head 1
wrong at t = 63) and chunk_vjp_plugin (the state's cotangent not handed back
across chunks of 64). Runs use --op filters to stay within seconds.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import xml.etree.ElementTree as ET

import numpy as np

from lacs import safetensors as st
from lacs import vectors

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VECTORS = os.path.join(REPO, "vectors", "core")
CLOSING = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped( \(shard \d+/\d+\))?$")
RESULT = re.compile(r"^(PASS|FAIL|SKIP)  (\S+) +(\S+)$")


def build_dir():
    build = os.environ.get("LACS_BUILD", "build")
    return build if os.path.isabs(build) else os.path.join(REPO, build)


def lacs_binary():
    return os.path.join(build_dir(), "lacs")


def plugin(name):
    return os.path.join(build_dir(), "plugins", name + ".so")


def case_ids(op, tier=None):
    """The ids of op's cases on disk, sorted."""
    pattern = f"{op}-{tier}-*.safetensors" if tier else f"{op}-*.safetensors"
    return sorted(os.path.basename(p)[: -len(".safetensors")] for p in glob.glob(os.path.join(VECTORS, op, pattern)))


def vector_path(case_id):
    op = re.split(r"-(?:fp32|bf16)-", case_id)[0]
    return os.path.join(VECTORS, op, case_id + ".safetensors")


def copy_with_manifest(directory, ids):
    """Copies committed vectors to directory/<op>/ with a MANIFEST.json listing
    them (the committed entries, paths relative to directory)."""
    with open(os.path.join(REPO, "vectors", "MANIFEST.json")) as f:
        committed = {c["id"]: c for c in json.load(f)["cases"]}
    entries = []
    for case_id in ids:
        entry = dict(committed[case_id])
        entry["path"] = f"{entry['op']}/{case_id}.safetensors"
        os.makedirs(os.path.join(directory, entry["op"]), exist_ok=True)
        shutil.copy(vector_path(case_id), os.path.join(directory, entry["path"]))
        entries.append(entry)
    with open(os.path.join(directory, "MANIFEST.json"), "w") as f:
        json.dump({"format": "lacs-manifest/1", "spec_version": "1.3", "generator_version": "2", "set": "test",
                   "cases": entries}, f)


class Run:
    """One run of the CLI: returncode, stdout, stderr, and its result lines."""

    def __init__(self, completed):
        self.returncode = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr
        self.lines = completed.stdout.splitlines()
        self.results = {}  # id -> (status, ratio text, the indented line under it or "")
        self.order = []
        for i, line in enumerate(self.lines):
            m = RESULT.match(line)
            if m:
                detail = self.lines[i + 1] if i + 1 < len(self.lines) and self.lines[i + 1].startswith("      ") else ""
                self.results[m.group(3)] = (m.group(1), m.group(2), detail.strip())
                self.order.append(m.group(3))

    def closing(self):
        """The counts of the `N passed, M failed, K skipped` line (the last but
        one: the verdict's citable line closes the output)."""
        for line in reversed(self.lines):
            m = CLOSING.match(line)
            if m:
                return (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        return None

    def citation(self):
        return self.lines[-1] if self.lines else None

    def ids(self, status):
        return sorted(i for i, r in self.results.items() if r[0] == status)


class CliTestCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        missing = [p for p in [lacs_binary()] + [plugin(n) for n in ("good_plugin", "wrong_plugin", "chunk_plugin",
                                                                      "crash_plugin", "hang_plugin", "nosymbol")]
                   if not os.path.isfile(p)]
        if missing:
            raise AssertionError(f"missing {', '.join(missing)}: build them (make test-python builds them)")
        if not os.path.isdir(VECTORS):
            raise AssertionError(f"no vectors at {VECTORS}")
        cls.tmp = tempfile.mkdtemp(prefix="lacs-cli-test-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def lacs(self, *args, cwd=REPO, timeout=60, env=None):
        completed = subprocess.run([lacs_binary(), *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, timeout=timeout, env=env)
        return Run(completed)

    def assert_user_error(self, run, *words):
        """Exit 2 and one line `lacs: ...` on stderr holding every word."""
        self.assertEqual(run.returncode, 2, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}")
        lines = run.stderr.splitlines()
        self.assertEqual(len(lines), 1, run.stderr)
        self.assertTrue(lines[0].startswith("lacs: "), lines[0])
        for word in words:
            self.assertIn(word, lines[0])

    def path(self, name):
        return os.path.join(self.tmp, name)


class Usage(CliTestCase):
    def test_help(self):
        run = self.lacs("--help")
        self.assertEqual(run.returncode, 0)
        self.assertIn("usage: lacs", run.stdout)
        for command in ("list", "check", "compare", "run", "explain"):
            run = self.lacs(command, "--help")
            self.assertEqual(run.returncode, 0, command)
            self.assertTrue(run.stdout.startswith(f"usage: lacs {command}"), run.stdout)

    def test_user_errors_are_one_line_and_exit_2(self):
        self.assert_user_error(self.lacs("frobnicate"), "unknown command", "frobnicate")
        self.assert_user_error(self.lacs("check", "--impl", "builtin:reference", "--op", "nope"),
                               "unknown op 'nope'", "linear_attn")
        self.assert_user_error(self.lacs("list", "--tier", "fp16"), "unknown tier 'fp16'")
        self.assert_user_error(self.lacs("check", "--impl", "builtin:reference", "--bogus"), "--bogus")
        self.assert_user_error(self.lacs("check", "--op", "linear_attn"), "--impl")
        self.assert_user_error(self.lacs("check", "--impl", "builtin:reference", "--vectors", self.path("absent")),
                               "absent", "does not exist")
        self.assert_user_error(self.lacs("check", "--impl", "builtin:reference", "--shard", "3/2"), "--shard")
        self.assert_user_error(self.lacs("check", "--impl", "builtin:reference", "--shard", "0/2"), "--shard")
        self.assert_user_error(self.lacs("check", "--impl", "builtin:cpu", env=dict(os.environ, LACS_ISA="avx9")),
                               "LACS_ISA=avx9", "avx512, avx2, scalar")
        self.assert_user_error(self.lacs("check", "--impl", "builtin:cpu", env=dict(os.environ, LACS_THREADS="0")),
                               "LACS_THREADS=0")
        self.assert_user_error(self.lacs("check", "--impl", "builtin:cpu",
                                         env=dict(os.environ, LACS_CPU_BF16_PRODUCTS="fast")),
                               "LACS_CPU_BF16_PRODUCTS=fast", "native, widened")
        self.assert_user_error(self.lacs("check", "--impl", "builtin:cpu",
                                         env=dict(os.environ, LACS_CPU_BACKWARD_STATE_MIB="-1")),
                               "LACS_CPU_BACKWARD_STATE_MIB=-1", "whole number of MiB")
        no_library = dict(os.environ, LACS_CUDA_LIBRARY=self.path("absent.so"))
        self.assert_user_error(self.lacs("check", "--impl", "builtin:cuda", env=no_library),
                               "builtin:cuda is unavailable: not built", "absent.so", "make cuda")
        no_symbols = dict(os.environ, LACS_CUDA_LIBRARY=plugin("nosymbol"))
        self.assert_user_error(self.lacs("check", "--impl", "builtin:cuda", env=no_symbols),
                               "nosymbol.so", "lacs_cuda_run")
        # a Python function is handed to the Python harness, whose user errors are the same one line
        self.assert_user_error(self.lacs("check", "--impl", "python:my_kernels:run"), "cannot import my_kernels")
        self.assert_user_error(self.lacs("check", "--impl", self.path("absent.so")), "absent.so")

    def test_library_without_the_symbol(self):
        run = self.lacs("check", "--impl", plugin("nosymbol"), "--op", "linear_attn")
        self.assert_user_error(run, "nosymbol.so", "lacs_plugin_run")
        self.assertEqual(run.stdout, "")

    def test_no_vectors_directory(self):
        env = {k: v for k, v in os.environ.items() if k != "LACS_VECTORS"}
        self.assert_user_error(self.lacs("list", cwd=self.tmp, env=env), "vectors/core", "LACS_VECTORS")
        env["LACS_VECTORS"] = VECTORS
        run = self.lacs("list", "--op", "softcap", cwd=self.tmp, env=env)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn(f"under {VECTORS}", run.stdout)


class List(CliTestCase):
    def test_list_filters_and_implementations(self):
        run = self.lacs("list", "--op", "linear_attn", "--tier", "fp32")
        self.assertEqual(run.returncode, 0, run.stderr)
        ids = case_ids("linear_attn", "fp32")
        self.assertIn(f"{len(ids)} cases under vectors/core", run.stdout)
        listed = [line.split()[0] for line in run.lines if line.startswith("  linear_attn-")]
        self.assertEqual(listed, ids)
        t64 = next(line for line in run.lines if line.startswith("  linear_attn-fp32-t64 "))
        self.assertIn("ChunkBoundary", t64)
        for impl in ("builtin:reference", "builtin:cpu", "builtin:cuda", "PATH.so", "python:"):
            self.assertIn(impl, run.stdout)
        self.assertIn("the optimized CPU implementation (lacs_cpu_run)", run.stdout)
        cpu = next(line for line in run.lines if line.startswith("  builtin:cpu "))
        self.assertRegex(cpu, r"\((bf16 products (native|widened))\)|unavailable")  # dispatch.c's choice, said
        cuda = next(line for line in run.lines if line.startswith("  builtin:cuda "))
        self.assertIn("the CUDA implementation (lacs_cuda_run)", cuda)
        if os.path.exists(os.path.join(build_dir(), "liblacs_cuda.so")):
            self.assertRegex(cuda, r"validated on NVIDIA [^;]+ on 20[0-9-]+")  # the last device run (dispatch.c)
        else:  # built without nvcc (make test skips make cuda): the line says how to build it
            self.assertIn("make cuda", cuda)

    def test_ops_comma_separated_or_repeated(self):
        a = self.lacs("list", "--op", "softcap,dyt")
        b = self.lacs("list", "--op", "softcap", "--op", "dyt")
        self.assertEqual(a.stdout, b.stdout)
        self.assertIn(f"{len(case_ids('softcap')) + len(case_ids('dyt'))} cases", a.stdout)


class Check(CliTestCase):
    def test_reference_passes(self):
        run = self.lacs("check", "--impl", "builtin:reference", "--op", "linear_attn,softcap_vjp")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        ids = sorted(case_ids("linear_attn") + case_ids("softcap_vjp"))
        self.assertEqual(run.order, ids)
        self.assertEqual(run.closing(), (len(ids), 0, 0))
        self.assertEqual(run.stderr, "")  # no progress display when stderr is not a terminal

    def test_good_plugin_passes_linear_attn_and_skips_the_rest(self):
        run = self.lacs("check", "--impl", plugin("good_plugin"), "--op", "linear_attn,delta_rule", "--jobs", "2")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertEqual(run.ids("PASS"), case_ids("linear_attn"))
        self.assertEqual(run.ids("SKIP"), case_ids("delta_rule"))
        self.assertEqual(run.closing(), (len(case_ids("linear_attn")), 0, len(case_ids("delta_rule"))))
        for case_id in case_ids("delta_rule"):
            self.assertEqual(run.results[case_id][1], "-")

    def test_everything_skipped_is_not_a_pass(self):
        run = self.lacs("check", "--impl", plugin("good_plugin"), "--op", "softcap")
        self.assertEqual(run.returncode, 1)
        self.assertEqual(run.closing(), (0, 0, len(case_ids("softcap"))))
        self.assertIn("no case ran", run.stderr)

    def test_wrong_plugin_fails_with_where(self):
        run = self.lacs("check", "--impl", plugin("wrong_plugin"), "--op", "linear_attn", "--tier", "fp32")
        self.assertEqual(run.returncode, 1)
        ids = case_ids("linear_attn", "fp32")
        self.assertEqual(run.ids("FAIL"), ids)
        self.assertEqual(run.closing(), (0, len(ids), 0))
        status, ratio, detail = run.results["linear_attn-fp32-t64"]
        self.assertGreater(float(ratio), 1)
        self.assertRegex(detail, r"^o\[b=0, t=\d+, head=\d+, v=\d+\]: expected \S+, got \S+, allowed error \S+; "
                                 r"normwise ratio \S+, elementwise ratio \S+")

    def test_crash_and_error_code_fail_one_case_each(self):
        ops = "linear_attn,delta_rule,retention"
        run = self.lacs("check", "--impl", plugin("crash_plugin"), "--op", ops, "--tier", "fp32", "--jobs", "2")
        self.assertEqual(run.returncode, 1)
        for case_id in case_ids("delta_rule", "fp32"):
            self.assertEqual(run.results[case_id][0], "FAIL")
            self.assertEqual(run.results[case_id][2], "crashed: SIGSEGV (Segmentation fault)")
        for case_id in case_ids("retention", "fp32"):
            self.assertEqual(run.results[case_id][:1] + run.results[case_id][2:], ("FAIL", "plugin returned 7"))
        self.assertEqual(run.ids("PASS"), case_ids("linear_attn", "fp32"))
        failed = len(case_ids("delta_rule", "fp32")) + len(case_ids("retention", "fp32"))
        self.assertEqual(run.closing(), (len(case_ids("linear_attn", "fp32")), failed, 0))
        # One job or two: the same lines in the same order (the times differ only in --verbose).
        serial = self.lacs("check", "--impl", plugin("crash_plugin"), "--op", ops, "--tier", "fp32")
        self.assertEqual(serial.stdout, run.stdout)

    def test_timeout(self):
        run = self.lacs("check", "--impl", plugin("hang_plugin"), "--op", "linear_attn", "--tier", "fp32",
                        "--timeout", "1")
        self.assertEqual(run.returncode, 1)
        self.assertEqual(run.results["linear_attn-fp32-t1"][0::2], ("FAIL", "timed out after 1s"))
        ids = case_ids("linear_attn", "fp32")
        self.assertEqual(run.closing(), (len(ids) - 1, 1, 0))

    def test_corrupt_vector_fails_its_case_and_the_run_exits_2(self):
        # a rejected vector is the input's fault, not the implementation's: exit 2, the other cases still run
        directory = self.path("corrupt")
        ids = ["linear_attn-fp32-t63", "linear_attn-fp32-t64", "linear_attn-fp32-t65"]
        copy_with_manifest(directory, ids)
        broken = os.path.join(directory, "linear_attn", "linear_attn-fp32-t64.safetensors")
        os.truncate(broken, 1000)
        run = self.lacs("check", "--impl", "builtin:reference", "--vectors", directory)
        self.assertEqual(run.returncode, 2)
        self.assertEqual(run.order, ids)
        status, ratio, detail = run.results["linear_attn-fp32-t64"]
        self.assertEqual((status, ratio), ("FAIL", "-"))
        self.assertIn("linear_attn-fp32-t64.safetensors: hash: ", detail)
        self.assertEqual(run.closing(), (2, 1, 0))
        self.assertTrue(run.citation().startswith("no verdict for lacs spec 1.4"), run.citation())
        unverified = self.lacs("check", "--impl", "builtin:reference", "--vectors", directory, "--no-verify")
        self.assertIn("header-length", unverified.results["linear_attn-fp32-t64"][2])
        listing = self.lacs("list", "--vectors", directory)
        self.assertEqual(listing.returncode, 0)
        self.assertIn("cannot be loaded", listing.stdout)

    def test_no_matching_case(self):
        directory = self.path("empty-set")
        os.makedirs(directory, exist_ok=True)
        self.assert_user_error(self.lacs("check", "--impl", "builtin:reference", "--vectors", directory,
                                         "--no-verify"), "no case")
        self.assert_user_error(self.lacs("check", "--impl", "builtin:reference", "--vectors", directory),
                               "no MANIFEST.json covers", "--no-verify")

    def test_shards_cover_the_list_once(self):
        args = ["check", "--impl", "builtin:reference", "--op", "linear_attn", "--tier", "bf16"]
        whole = self.lacs(*args)
        first = self.lacs(*args, "--shard", "1/2")
        second = self.lacs(*args, "--shard", "2/2")
        self.assertEqual(sorted(first.order + second.order), whole.order)
        self.assertFalse(set(first.order) & set(second.order))
        self.assertEqual(first.order, whole.order[0::2])
        self.assertTrue(first.lines[-2].endswith(" (shard 1/2)"), first.lines[-2])
        self.assertTrue(first.citation().endswith(" (shard 1/2 only)"), first.citation())
        self.assertEqual(first.closing()[0] + second.closing()[0], whole.closing()[0])

    def test_quiet_and_verbose(self):
        args = ["check", "--impl", plugin("crash_plugin"), "--op", "linear_attn,delta_rule", "--tier", "bf16"]
        quiet = self.lacs(*args, "--quiet")
        self.assertEqual(set(quiet.results), set(case_ids("delta_rule", "bf16")))
        verbose = self.lacs(*args, "--verbose")
        self.assertIn("      o ratio ", verbose.stdout)
        self.assertEqual(verbose.closing(), quiet.closing())

    def test_json_and_junit_reports(self):
        json_path, junit_path = self.path("report.json"), self.path("report.xml")
        with open(json_path, "w") as f:
            f.write("an old report, to be replaced")
        run = self.lacs("check", "--impl", plugin("crash_plugin"), "--op", "linear_attn,delta_rule,rmsnorm",
                        "--tier", "bf16", "--json", json_path, "--junit", junit_path)
        self.assertEqual(run.returncode, 1)
        passed, failed, skipped = run.closing()
        with open(json_path) as f:
            report = json.load(f)
        self.assertEqual(report["lacs_version"], "1.4")
        self.assertEqual(report["impl"], plugin("crash_plugin"))
        self.assertEqual(report["summary"], {"passed": passed, "failed": failed, "skipped": skipped})
        cases = {c["id"]: c for c in report["cases"]}
        self.assertEqual(list(cases), run.order)
        good = cases["linear_attn-bf16-t64"]
        self.assertEqual((good["op"], good["tier"], good["status"]), ("linear_attn", "bf16", "PASS"))
        self.assertLessEqual(good["ratio"], 1)
        self.assertEqual([o["name"] for o in good["outputs"]], ["o", "ht"])
        for key in ("ratio", "normwise_ratio", "elementwise_ratio", "normwise_error", "worst_block",
                    "worst_element", "where", "expected", "actual", "allowed"):
            self.assertIn(key, good["outputs"][0])
        crashed = cases["delta_rule-bf16-t64"]
        self.assertEqual((crashed["status"], crashed["ratio"], crashed["ratio_text"]), ("FAIL", None, "-"))
        self.assertEqual(crashed["message"], "crashed: SIGSEGV (Segmentation fault)")
        skipped_case = cases[case_ids("rmsnorm", "bf16")[0]]
        self.assertEqual((skipped_case["status"], skipped_case["ratio"]), ("SKIP", None))

        suite = ET.parse(junit_path).getroot()
        self.assertEqual(suite.tag, "testsuite")
        self.assertEqual(suite.get("name"), "lacs")
        self.assertEqual((int(suite.get("tests")), int(suite.get("failures")), int(suite.get("skipped"))),
                         (passed + failed + skipped, failed, skipped))
        testcases = {t.get("name"): t for t in suite.iter("testcase")}
        self.assertEqual(sorted(testcases), sorted(run.order))
        self.assertEqual(testcases["delta_rule-bf16-t64"].get("classname"), "delta_rule")
        self.assertIn("SIGSEGV", testcases["delta_rule-bf16-t64"].find("failure").get("message"))
        self.assertIsNotNone(testcases[case_ids("rmsnorm", "bf16")[0]].find("skipped"))
        self.assertIsNone(testcases["linear_attn-bf16-t64"].find("failure"))
        self.assertFalse(os.path.exists(json_path + ".tmp") or os.path.exists(junit_path + ".tmp"))


class CompareAndRun(CliTestCase):
    CASE = "delta_rule-fp32-t65"

    def test_run_then_compare(self):
        out = self.path("reference-outputs.safetensors")
        run = self.lacs("run", "--op", "delta_rule", "--impl", "builtin:reference", "--in", vector_path(self.CASE),
                        "--out", out)
        self.assertEqual(run.returncode, 0, run.stderr)
        written = st.read(out)
        self.assertEqual(sorted(written.tensors), ["ht", "o"])
        self.assertEqual(written.tensors["o"].dtype, "F64")
        meta = json.loads(written.metadata["lacs"])
        self.assertEqual((meta["op"], meta["impl"]), ("delta_rule", "builtin:reference"))
        self.assertAlmostEqual(meta["params"]["scale"], vectors.load_vector(vector_path(self.CASE)).params["scale"])

        compared = self.lacs("compare", vector_path(self.CASE), out)
        self.assertEqual(compared.returncode, 0, compared.stdout + compared.stderr)
        self.assertEqual(compared.results[self.CASE][0], "PASS")

        refused = self.lacs("run", "--op", "delta_rule", "--impl", "builtin:reference", "--in",
                            vector_path(self.CASE), "--out", out)
        self.assert_user_error(refused, "reference-outputs.safetensors", "--force")
        forced = self.lacs("run", "--op", "delta_rule", "--impl", "builtin:reference", "--in",
                           vector_path(self.CASE), "--out", out, "--force", "--param", "scale=0.5")
        self.assertEqual(forced.returncode, 0, forced.stderr)
        self.assertEqual(json.loads(st.read(out).metadata["lacs"])["params"]["scale"], 0.5)

    def test_run_with_a_plugin(self):
        case = "linear_attn-fp32-t64"
        out = self.path("plugin-outputs.safetensors")
        run = self.lacs("run", "--op", "linear_attn", "--impl", plugin("good_plugin"), "--in", vector_path(case),
                        "--out", out)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(st.read(out).tensors["o"].dtype, "F32")
        compared = self.lacs("compare", vector_path(case), out)
        self.assertEqual(compared.returncode, 0, compared.stdout)
        self.assert_user_error(self.lacs("run", "--op", "linear_attn", "--impl", "builtin:reference", "--in",
                                         vector_path(case), "--out", self.path("x.safetensors"), "--param", "eps=1"),
                               "eps")

    def test_run_with_builtin_cpu_under_each_isa(self):
        # builtin:cpu through `lacs run`, compared with the golden: every instruction set this CPU has
        case = "gated_delta_rule-fp32-t129"
        for isa in ("avx512", "avx2", "scalar"):
            env = dict(os.environ, LACS_ISA=isa)
            listed = self.lacs("list", "--op", "rmsnorm", env=env)
            if "unavailable" in next(line for line in listed.lines if line.startswith("  builtin:cpu")):
                continue
            out = self.path(f"cpu-{isa}.safetensors")
            run = self.lacs("run", "--op", "gated_delta_rule", "--impl", "builtin:cpu", "--in", vector_path(case),
                            "--out", out, env=env)
            self.assertEqual(run.returncode, 0, run.stderr)
            compared = self.lacs("compare", vector_path(case), out)
            self.assertEqual(compared.returncode, 0, compared.stdout)
            # the same output made wrong by 2^-10 relative (far beyond the fp32 tier's bound of a few ulp) must fail
            outputs = st.read(out).tensors
            wrong = {name: t.array() * np.float32(1 + 2.0 ** -10 if name == "o" else 1) for name, t in outputs.items()}
            wrong_path = self.path(f"cpu-{isa}-wrong.safetensors")
            st.write(wrong_path, wrong, overwrite=True)
            self.assertNotEqual(self.lacs("compare", vector_path(case), wrong_path).returncode, 0)

    def test_builtin_cuda_emulated(self):
        # builtin:cuda's kernels under emulation (LACS_CUDA_LIBRARY): lacs run and compare pass a chunked case and
        # a decoding case of each tier, the fp32 output made wrong by 2^-10 (far beyond the tier's bound of a few ulp)
        # fails, the per-channel gate passes, and a head too large for its kernels (K = 272) is a SKIP naming the
        # limit (make test-cuda rejects a wrong kernel in both tiers: the mutants)
        env = dict(os.environ, LACS_CUDA_LIBRARY=os.path.join(build_dir(), "liblacs_cuda_emulated.so"))
        listed = self.lacs("list", "--op", "rmsnorm", env=env)
        self.assertIn("emulated on the CPU", next(line for line in listed.lines if line.startswith("  builtin:cuda")))
        for case in ("gated_delta_rule-fp32-t129", "gated_delta_rule-bf16-t129", "efla-bf16-t1"):
            out = self.path(f"cuda-{case}.safetensors")
            op = case.split("-")[0]
            run = self.lacs("run", "--op", op, "--impl", "builtin:cuda", "--in", vector_path(case), "--out", out,
                            env=env)
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertEqual(self.lacs("compare", vector_path(case), out).returncode, 0)
            if "-fp32-" not in case:
                continue
            outputs = st.read(out).tensors
            wrong = {name: t.array() * np.float32(1 + 2.0 ** -10 if name == "o" else 1) for name, t in outputs.items()}
            wrong_path = self.path(f"cuda-{case}-wrong.safetensors")
            st.write(wrong_path, wrong, overwrite=True)
            self.assertNotEqual(self.lacs("compare", vector_path(case), wrong_path).returncode, 0)
        run = self.lacs("check", "--impl", "builtin:cuda", "--op", "gated_delta_rule", "--tier", "fp32",
                        "--json", self.path("cuda.json"), env=env)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertEqual(run.results["gated_delta_rule-fp32-gk"][0], "PASS")
        self.assertEqual(run.results["gated_delta_rule-fp32-t129"][0], "PASS")
        # builtin:cuda implements every forward op (its declaration, lacs_plugin_describe of the library): the
        # gradients of the ops on sequences are not claimed
        self.assertEqual(run.citation(), "conforms to lacs spec 1.4 for ops gated_delta_rule in tiers fp32")
        rng = np.random.default_rng(0)
        big = {"q": rng.standard_normal((1, 4, 1, 272)).astype(np.float32),
               "k": rng.standard_normal((1, 4, 1, 272)).astype(np.float32),
               "v": rng.standard_normal((1, 4, 1, 8)).astype(np.float32),
               "beta": np.full((1, 4, 1), 0.5, np.float32), "g": np.full((1, 4, 1), -0.1, np.float32)}
        st.write(self.path("k272.safetensors"), big, overwrite=True)
        run = self.lacs("run", "--op", "gated_delta_rule", "--impl", "builtin:cuda", "--in",
                        self.path("k272.safetensors"), "--out", self.path("k272-out.safetensors"), env=env)
        self.assertEqual(run.returncode, 1)
        self.assertIn("LACS_UNSUPPORTED); gated_delta_rule: builtin:cuda does not implement this case", run.stderr)
        self.assertIn("K = 272", run.stderr)

    def test_compare_fails_a_perturbed_or_incomplete_candidate(self):
        v = vectors.load_vector(vector_path(self.CASE))
        rounded = {f"expected.{name}": g.astype(np.float32) for name, g in v.expected.items()}
        good = self.path("rounded.safetensors")
        st.write(good, rounded, overwrite=True)
        run = self.lacs("compare", vector_path(self.CASE), good, "--json", self.path("compare.json"))
        self.assertEqual(run.returncode, 0, run.stdout)
        with open(self.path("compare.json")) as f:
            self.assertEqual(json.load(f)["cases"][0]["status"], "PASS")

        perturbed = dict(rounded)
        perturbed["expected.o"] = (v.expected["o"] * (1 + 1e-3)).astype(np.float32)
        bad = self.path("perturbed.safetensors")
        st.write(bad, perturbed, overwrite=True)
        run = self.lacs("compare", vector_path(self.CASE), bad)
        self.assertEqual(run.returncode, 1)
        status, ratio, detail = run.results[self.CASE]
        self.assertEqual(status, "FAIL")
        self.assertTrue(detail.startswith("o["), detail)

        incomplete = self.path("incomplete.safetensors")
        st.write(incomplete, {"o": v.expected["o"]}, overwrite=True)
        run = self.lacs("compare", vector_path(self.CASE), incomplete)
        self.assertEqual(run.returncode, 1)
        self.assertIn("'ht' is missing", run.results[self.CASE][2])

        self.assert_user_error(self.lacs("compare", vector_path(self.CASE), self.path("absent.safetensors")),
                               "absent.safetensors")


class Explain(CliTestCase):
    def test_explain_describes_the_case(self):
        run = self.lacs("explain", "linear_attn-fp32-t64")
        self.assertEqual(run.returncode, 0, run.stderr)
        for words in ("linear_attn-fp32-t64", "(H2)", "lacs_ref_linear_attn", "ChunkBoundary", "exactly one chunk",
                      "scale = ", "T = 64", "tolerance", "goldens"):
            self.assertIn(words, run.stdout)
        by_path = self.lacs("explain", vector_path("linear_attn-fp32-t64"))
        self.assertEqual(by_path.returncode, 0)
        self.assert_user_error(self.lacs("explain", "linear_attn-fp32-nope"), "linear_attn-fp32-nope")

    def test_explain_finds_where_the_error_starts(self):
        run = self.lacs("explain", "linear_attn-fp32-t129", "--impl", plugin("wrong_plugin"))
        self.assertEqual(run.returncode, 1)
        self.assertIn("first passes the limit at t = 0", run.stdout)
        self.assertIn("t = 0 is the first token", run.stdout)
        self.assertIn("error over time", run.stdout)

        run = self.lacs("explain", "linear_attn-fp32-t129", "--impl", plugin("chunk_plugin"))
        self.assertEqual(run.returncode, 1)
        self.assertIn("first passes the limit at t = 64, the 65th token", run.stdout)
        self.assertIn("t = 64 is the first token of a chunk of 64 (and of 32, 16)", run.stdout)
        self.assertRegex(run.stdout, r"worst there: o\[b=0, t=64, head=0, v=\d+\]")

        run = self.lacs("explain", "linear_attn-fp32-t129", "--impl", plugin("good_plugin"))
        self.assertEqual(run.returncode, 0)
        self.assertIn("the limit is never passed", run.stdout)

    def test_plot(self):
        png = self.path("error.png")
        args = ["explain", "linear_attn-fp32-t129", "--impl", plugin("chunk_plugin"), "--plot", png]
        has_matplotlib = subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"],
                                        stderr=subprocess.DEVNULL).returncode == 0
        run = self.lacs(*args)
        if not has_matplotlib:
            self.assert_user_error(run, "apt-get install python3-matplotlib")
            return
        self.assertEqual(run.returncode, 1, run.stderr)  # the case fails; the plot is drawn
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assert_user_error(self.lacs(*args), "error.png", "--force")
        self.assertEqual(self.lacs(*args, "--force").returncode, 1)
        self.assert_user_error(self.lacs("explain", "linear_attn-fp32-t129", "--plot", png, "--force"), "--impl")

    def test_plot_without_matplotlib(self):
        # A matplotlib that cannot be imported, first on the plot script's path.
        shadow = self.path("no-matplotlib")
        os.makedirs(os.path.join(shadow, "matplotlib"), exist_ok=True)
        with open(os.path.join(shadow, "matplotlib", "__init__.py"), "w") as f:
            f.write("raise ImportError('hidden for the test')\n")
        env = dict(os.environ, PYTHONPATH=shadow)
        png = self.path("never.png")
        run = self.lacs("explain", "linear_attn-fp32-t129", "--impl", plugin("chunk_plugin"), "--plot", png, env=env)
        self.assert_user_error(run, "apt-get install python3-matplotlib")
        self.assertFalse(os.path.exists(png))


class Gradients(CliTestCase):
    """A backward through the plugin ABI: the forward's inputs plus do and dht in, the gradients out, named
    like the goldens (SPEC.md 4.19, 11.5), and explain's localisation of a wrong gradient (SPEC.md 11.8)."""

    OP = "gated_delta_rule_vjp"

    def test_a_correct_backward_passes_and_wrong_ones_fail(self):
        ids = case_ids(self.OP)
        good = self.lacs("check", "--impl", plugin("good_vjp_plugin"), "--op", self.OP, "--jobs", "2")
        self.assertEqual(good.returncode, 0, good.stdout + good.stderr)
        self.assertEqual(good.closing(), (len(ids), 0, 0))
        self.assertEqual(good.citation(), f"conforms to lacs spec 1.4 for ops {self.OP} in tiers fp32, bf16")
        # the cases that exercise a state carry, varlen, GVA, K != V and the per-channel gate are among them
        for case in ("carry37", "carry64", "varlen", "hv2h", "k8-v16", "gk"):
            self.assertEqual(good.results[f"{self.OP}-fp32-{case}"][0], "PASS", case)
        wrong = self.lacs("check", "--impl", plugin("wrong_vjp_plugin"), "--op", self.OP, "--jobs", "2")
        self.assertEqual(wrong.returncode, 1, wrong.stdout + wrong.stderr)
        status, ratio, detail = wrong.results[f"{self.OP}-fp32-mixed"]
        self.assertEqual(status, "FAIL")
        self.assertTrue(detail.startswith("dv[b=0, t=63, head=1, "), detail)
        self.assertNotIn("also over the limit", detail)  # one gradient wrong, the others pass
        self.assertEqual(wrong.results[f"{self.OP}-fp32-t129"][0], "PASS")  # one value head: head 1 does not exist
        chunk = self.lacs("check", "--impl", plugin("chunk_vjp_plugin"), "--op", self.OP, "--jobs", "2")
        self.assertEqual(chunk.returncode, 1, chunk.stdout + chunk.stderr)
        self.assertEqual(chunk.results[f"{self.OP}-fp32-t129"][0], "FAIL")
        self.assertEqual(chunk.results[f"{self.OP}-fp32-t64"][0], "PASS")  # one chunk: nothing to hand back

    def test_explain_names_the_gradient_the_head_and_the_token(self):
        run = self.lacs("explain", f"{self.OP}-fp32-mixed", "--impl", plugin("wrong_vjp_plugin"))
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        where = run.stdout[run.stdout.index("\nwhere "):].strip().split("\n\n")[0].splitlines()
        self.assertEqual(len(where), 1, where)  # dv alone
        self.assertRegex(where[0], r"^where +dv: head 1 \(of 2\), 1 of 129 tokens over the limit \(t = 63\), from t = 63 "
                                   r"\(the last, where the backward's error starts\): token 63 of chunk 0 of 64 "
                                   r"\(t = 0\.\.63\): at a chunk boundary, the last token of its chunk")
        self.assertIn("over the limit: 1 of 129 tokens (t = 63), in head 1 (of 2)", run.stdout)
        self.assertIn("worst there: dv[b=0, t=63, head=1, ", run.stdout)

        # an error carried backwards by the state's cotangent: it starts at the last token over the limit
        run = self.lacs("explain", f"{self.OP}-fp32-t129", "--impl", plugin("chunk_vjp_plugin"))
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        where = run.stdout[run.stdout.index("\nwhere "):].strip().split("\n\n")[0].splitlines()
        self.assertRegex(where[0], r"^where +dk: ")  # the outputs in order: dq passes, dk is the first to fail
        for gradient in ("dk", "dv", "dbeta", "dg"):
            self.assertTrue(any(re.search(rf"\b{gradient}: head 0 \(of 1\), \d+ of 129 tokens over the limit "
                                          r"\(t = \d+\.\.63, \d+\.\.127\), from t = 127 \(the last, where the backward's error starts\): token 63 of "
                                          r"chunk 1 of 64 \(t = 64\.\.127\): at a chunk boundary", line)
                                for line in where), (gradient, where))
        self.assertFalse(any(re.search(r"\bdq:", line) for line in where), where)  # dq does not read the cotangent

        # the same outputs written by `lacs run` and explained with --outputs
        out = self.path("wrong_vjp.safetensors")
        made = self.lacs("run", "--op", self.OP, "--impl", plugin("wrong_vjp_plugin"), "--in",
                         vector_path(f"{self.OP}-fp32-mixed"), "--out", out, "--param", "scale=0.5", "--force")
        self.assertEqual(made.returncode, 0, made.stdout + made.stderr)
        run = self.lacs("explain", f"{self.OP}-fp32-mixed", "--outputs", out)
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        self.assertRegex(run.stdout, r"\nwhere +dv: head 1 \(of 2\), 1 of 129 tokens over the limit \(t = 63\), from t = 63 ")

        good = self.lacs("explain", f"{self.OP}-fp32-carry37", "--impl", plugin("good_vjp_plugin"))
        self.assertEqual(good.returncode, 0, good.stdout + good.stderr)
        self.assertNotIn("\nwhere ", good.stdout)
        self.assertIn("output     dh_split: ratio ", good.stdout)


if __name__ == "__main__":
    unittest.main()
