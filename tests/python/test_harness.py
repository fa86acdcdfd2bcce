"""The Python harness, `python3 -m lacs check` and `list` (python/lacs/check.py,
python/lacs/__main__.py), run as a user runs it: a subprocess on the committed
vectors, with the example implementations of tests/python/impls/ (good.py
passes delta_rule and dyt; bad.py is wrong in one way per function).

Run by `make test-python` (PYTHONPATH=python LACS_BUILD=build /usr/bin/python3
-m unittest discover -s tests/python -t .). Needs build/liblacs.so with the
checker (make builds it).
"""

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

from lacs import check  # noqa: E402

VECTORS = os.path.join(ROOT, "vectors", "core")
BUILD = os.path.abspath(os.path.join(ROOT, os.environ.get("LACS_BUILD", "build")))
IMPLS = os.path.join("tests", "python", "impls")
GOOD = f"python:{IMPLS}/good.py:run"
CLOSING = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped( \(shard \d+/\d+\))?$")
LINE = re.compile(r"^(PASS|FAIL|SKIP)  (\S+) +(\S+)$")


def harness(*args, cwd=ROOT, env=None):
    """Runs `python3 -m lacs ARGS` in `cwd`; returns the CompletedProcess."""
    environment = dict(os.environ)
    environment.pop("LACS_VECTORS", None)
    environment["PYTHONPATH"] = os.path.join(ROOT, "python")
    environment["LACS_BUILD"] = BUILD
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "lacs", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=120)


def check_run(impl, *args, **kwargs):
    return harness("check", "--impl", impl, "--vectors", VECTORS, *args, **kwargs)


def parse(stdout):
    """(results {id: (status, ratio text, detail line or None)}, closing counts
    (passed, failed, skipped)) from check's stdout."""
    lines = stdout.splitlines()
    results, closing = {}, None
    for i, line in enumerate(lines):
        match = LINE.match(line)
        if match:
            status, ratio, case_id = match.groups()
            detail = lines[i + 1] if status == "FAIL" and i + 1 < len(lines) else None
            results[case_id] = (status, ratio, detail)
        elif CLOSING.match(line):
            closing = tuple(int(n) for n in CLOSING.match(line).groups()[:3])
    return results, closing


def case_ids(op, tier=None):
    names = sorted(f[:-len(".safetensors")] for f in os.listdir(os.path.join(VECTORS, op))
                   if f.endswith(".safetensors"))
    return [n for n in names if tier is None or n.startswith(f"{op}-{tier}-")]


class LayoutTest(unittest.TestCase):
    """The ctypes mirrors of check.h, plugin.h and ops.h against the compiler."""

    def test_ctypes_layout_is_the_lp64_layout_worked_out_by_hand(self):
        self.assertEqual(check._layout_problems(), [])

    def test_ctypes_layout_matches_sizeof_and_offsetof_of_the_c_compiler(self):
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            self.skipTest("no C compiler")
        lines = []
        for struct, _, offsets in check.EXPECTED_LAYOUT:
            c_name = {"LacsTensor": "lacs_tensor", "LacsParam": "lacs_param", "LacsOutputCheck": "lacs_output_check",
                      "LacsCheckResult": "lacs_check_result", "LacsOpInfo": "lacs_op_info",
                      "LacsCase": "lacs_case_entry"}[struct.__name__]
            lines.append(f'printf("{struct.__name__} size %zu\\n", sizeof({c_name}));')
            for field in offsets:
                lines.append(f'printf("{struct.__name__} {field} %zu\\n", offsetof({c_name}, {field}));')
        source = ("#include <stddef.h>\n#include <stdio.h>\n#include \"lacs/cases.h\"\n#include \"lacs/check.h\"\n"
                  "#include \"lacs/ops.h\"\n"
                  "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "layout.c"), "w") as f:
                f.write(source)
            subprocess.run([compiler, "-std=c11", "-I", os.path.join(ROOT, "include"), "-o",
                            os.path.join(tmp, "layout"), os.path.join(tmp, "layout.c")], check=True)
            printed = subprocess.run([os.path.join(tmp, "layout")], capture_output=True, text=True,
                                     check=True).stdout
        for line in printed.splitlines():
            name, field, value = line.split()
            struct = getattr(check, name)
            actual = ctypes.sizeof(struct) if field == "size" else getattr(struct, field).offset
            self.assertEqual(actual, int(value), f"{name}.{field}")

    def test_spec_version_is_the_headers(self):
        with open(os.path.join(ROOT, "include", "lacs", "types.h")) as f:
            header = re.search(r'#define LACS_SPEC_VERSION "([^"]+)"', f.read()).group(1)
        self.assertEqual(check.SPEC_VERSION, header)


class ConversionTest(unittest.TestCase):
    """What an implementation may return, converted in-process."""

    def test_float32_and_integers_widen_exactly_to_float64(self):
        x = np.array([[1.5, -2.0**-149]], dtype=np.float32)
        y = check._to_float64("o", x)
        self.assertEqual(y.dtype, np.float64)
        self.assertTrue(y.flags.c_contiguous)
        self.assertEqual(y.tolist(), [[1.5, -2.0**-149]])
        self.assertEqual(check._to_float64("o", [1, 2]).tolist(), [1.0, 2.0])

    def test_a_torch_like_tensor_goes_through_detach_cpu_numpy(self):
        class FakeTensor:
            def __init__(self, values, numpy_works=True):
                self.values, self.numpy_works = values, numpy_works

            def detach(self):
                return self

            def cpu(self):
                return self

            def double(self):
                return FakeTensor(self.values)

            def numpy(self):
                if not self.numpy_works:  # what torch says for bfloat16
                    raise TypeError("Got unsupported ScalarType BFloat16")
                return np.asarray(self.values)

        self.assertEqual(check._to_float64("o", FakeTensor([0.25, 3.0])).tolist(), [0.25, 3.0])
        self.assertEqual(check._to_float64("o", FakeTensor([0.5], numpy_works=False)).tolist(), [0.5])

    def test_an_object_with_array_interface_is_accepted(self):
        class Wrapped:
            def __array__(self, dtype=None):
                return np.arange(3, dtype=np.float32)

        self.assertEqual(check._to_float64("o", Wrapped()).tolist(), [0.0, 1.0, 2.0])

    def test_non_numeric_outputs_are_refused_naming_the_output(self):
        for value in (["a", "b"], np.array([1 + 2j]), {"x": 1}, np.array([True])):
            with self.assertRaisesRegex(ValueError, "output 'ht'"):
                check._to_float64("ht", value)

    def test_the_goldens_themselves_pass_every_case_with_ratio_0(self):
        """Returning expected.* unchanged (NaN and infinities included) is
        exact: the float64 path loses nothing."""
        library = check.Library(os.path.join(BUILD, "liblacs.so"))
        cases, manifest = check.find_cases(library, VECTORS)
        self.assertTrue(manifest.endswith(os.path.join("vectors", "MANIFEST.json")), manifest)
        self.assertGreater(len(cases), 600)
        for case in cases:
            expected = check.load_vector(case.path).expected
            result = check.run_case(library, lambda op, inputs, params: dict(expected), case)
            self.assertEqual((result.status, result.ratio), ("PASS", 0.0), case.id)


class CheckTest(unittest.TestCase):

    def test_good_passes_every_delta_rule_and_dyt_case(self):
        run = check_run(GOOD, "--op", "delta_rule", "--op", "dyt")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        results, closing = parse(run.stdout)
        expected_ids = case_ids("delta_rule") + case_ids("dyt")
        self.assertEqual(sorted(results), expected_ids)
        self.assertEqual(list(results), expected_ids)  # printed in id order
        self.assertEqual({s for s, _, _ in results.values()}, {"PASS"})
        self.assertEqual(closing, (len(expected_ids), 0, 0))
        self.assertEqual(run.stdout.splitlines()[-2], f"{len(expected_ids)} passed, 0 failed, 0 skipped")
        self.assertEqual(run.stdout.splitlines()[-1], "conforms to lacs spec 1.4 for ops delta_rule, dyt in tiers "
                                                      "fp32, bf16")
        self.assertEqual(run.stderr, "")  # no progress display when stderr is not a terminal

    def test_good_skips_the_ops_it_does_not_implement(self):
        run = check_run(GOOD, "--op", "linear_attn,softcap")
        results, closing = parse(run.stdout)
        n = len(case_ids("linear_attn")) + len(case_ids("softcap"))
        self.assertEqual(closing, (0, 0, n))
        self.assertEqual({(s, r) for s, r, _ in results.values()}, {("SKIP", "-")})
        self.assertEqual(run.returncode, 1)  # nothing passed: not a success
        self.assertEqual(run.stderr, f"lacs: no case ran: {GOOD} skipped every one of the {n} cases\n")
        verbose = check_run(GOOD, "--op", "softcap", "--tier", "fp32", "--verbose")
        self.assertIn("      unsupported by the implementation (NotImplementedError: softcap)", verbose.stdout)

    def test_a_module_name_works_as_well_as_a_file(self):
        run = check_run("python:tests.python.impls.good:run", "--op", "dyt", "--tier", "fp32")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertEqual(parse(run.stdout)[1], (len(case_ids("dyt", "fp32")), 0, 0))

    def test_default_vectors_dir_is_vectors_core_else_lacs_vectors_else_the_librarys(self):
        run = harness("check", "--impl", GOOD, "--op", "dyt", "--tier", "fp32")
        self.assertEqual(run.returncode, 0, run.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            impl = f"python:{os.path.join(ROOT, IMPLS, 'good.py')}:run"
            run = harness("check", "--impl", impl, "--op", "dyt", "--tier", "fp32", cwd=tmp,
                          env={"LACS_VECTORS": os.path.join(tmp, "none")})
            self.assertEqual(run.returncode, 2)
            self.assertIn("LACS_VECTORS", run.stderr)
            run = harness("check", "--impl", impl, "--op", "dyt", "--tier", "fp32", cwd=tmp,
                          env={"LACS_VECTORS": VECTORS})
            self.assertEqual(run.returncode, 0, run.stderr)
            # neither: the vectors of the tree whose build/liblacs.so is used
            listing = harness("list", "--op", "dyt", cwd=tmp)
            self.assertEqual(listing.returncode, 0, listing.stderr)
            self.assertIn(f"under {VECTORS} (verified against", listing.stdout)
            self.assertIn(f"library: {os.path.join(BUILD, 'liblacs.so')} (LACS_BUILD", listing.stdout)
            # a library that came without vectors
            run = harness("check", "--impl", impl, "--op", "dyt", cwd=tmp,
                          env={"LACS_BUILD": "", "LACS_LIBRARY": os.path.join(BUILD, "liblacs.so")})
            self.assertEqual(run.returncode, 2, run.stdout + run.stderr)
            self.assertIn("no vectors directory", run.stderr)

    def test_beta_missing_from_the_erase_term_fails(self):
        run = check_run(f"python:{IMPLS}/bad.py:beta_outside_erase", "--op", "delta_rule", "--tier", "fp32")
        self.assertEqual(run.returncode, 1)
        results, closing = parse(run.stdout)
        status, ratio, detail = results["delta_rule-fp32-t65"]
        self.assertEqual(status, "FAIL")
        self.assertGreater(float(ratio), 1)
        self.assertRegex(detail, r"^      (o|ht)\[.*\]: expected .*, got .*, allowed error .*; "
                                 r"normwise ratio .*, elementwise ratio ")
        # beta = 1: the erase term is the same with or without beta
        self.assertEqual(results["delta_rule-fp32-beta1"][0], "PASS")
        self.assertEqual(sum(closing), len(case_ids("delta_rule", "fp32")))
        self.assertGreaterEqual(closing[1], 10)

    def test_an_exception_fails_its_case_and_the_run_goes_on(self):
        # the cases without a weight are strict (IEEE specials, SPEC.md 11.7): --strict counts their failures
        run = check_run(f"python:{IMPLS}/bad.py:raises", "--op", "dyt", "--strict")
        self.assertEqual(run.returncode, 1)
        results, closing = parse(run.stdout)
        self.assertEqual(results["dyt-fp32-basic"][0], "PASS")  # has a weight
        status, ratio, detail = results["dyt-fp32-specials"]
        self.assertEqual((status, ratio, detail), ("FAIL", "-", "      ValueError: this kernel needs a weight"))
        self.assertEqual(sum(closing), len(case_ids("dyt")))
        self.assertNotIn("Traceback", run.stdout + run.stderr)
        verbose = check_run(f"python:{IMPLS}/bad.py:raises", "--op", "dyt", "--tier", "fp32", "--verbose")
        self.assertIn("Traceback", verbose.stdout)
        self.assertIn("bad.py", verbose.stdout)

    def test_a_wrong_shape_fails_naming_the_output_and_the_shapes(self):
        run = check_run(f"python:{IMPLS}/bad.py:wrong_shape", "--op", "dyt", "--tier", "fp32")
        self.assertEqual(run.returncode, 1)
        results, closing = parse(run.stdout)
        self.assertEqual(results["dyt-fp32-specials"][2], "      output 'y' has shape [24, 1], expected [1, 24]")
        self.assertEqual(closing, (0, len(case_ids("dyt", "fp32")), 0))

    def test_an_extra_output_fails_naming_it(self):
        run = check_run(f"python:{IMPLS}/bad.py:extra_output", "--op", "dyt", "--tier", "fp32")
        self.assertEqual(run.returncode, 1)
        for status, _, detail in parse(run.stdout)[0].values():
            self.assertEqual(status, "FAIL")
            self.assertIn("extra output 'dx'", detail)

    def test_a_missing_output_fails_naming_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "no_state.py")
            with open(path, "w") as f:
                f.write("import sys\nsys.path.insert(0, %r)\nimport good\n"
                        "def run(op, inputs, params):\n"
                        "    out = good.run(op, inputs, params)\n"
                        "    out.pop('ht', None)\n"
                        "    return out\n" % os.path.join(ROOT, IMPLS))
            run = check_run(f"python:{path}:run", "--op", "delta_rule", "--tier", "fp32")
        self.assertEqual(run.returncode, 1)
        _, _, detail = parse(run.stdout)[0]["delta_rule-fp32-t1"]
        self.assertRegex(detail, r"missing output 'ht' \[\d+, \d+, \d+, \d+\]")

    def test_non_numeric_and_non_dict_results_fail(self):
        for function, message in (("not_numeric", "output 'y' is not a real numeric array"),
                                  ("not_a_dict", "returned ndarray, expected a dict")):
            run = check_run(f"python:{IMPLS}/bad.py:{function}", "--op", "dyt", "--tier", "fp32")
            self.assertEqual(run.returncode, 1, function)
            for status, _, detail in parse(run.stdout)[0].values():
                self.assertEqual(status, "FAIL")
                self.assertIn(message, detail)

    def test_nan_where_the_golden_is_finite_fails_with_ratio_inf(self):
        run = check_run(f"python:{IMPLS}/bad.py:nan_output", "--op", "dyt", "--tier", "fp32")
        self.assertEqual(run.returncode, 1)
        status, ratio, detail = parse(run.stdout)[0]["dyt-fp32-basic"]
        self.assertEqual((status, ratio), ("FAIL", "inf"))
        self.assertIn("got nan", detail)
        self.assertIn("non-finite where the golden is not", detail)

    def test_a_corrupt_vector_fails_its_case_naming_the_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            os.mkdir(os.path.join(tmp, "dyt"))
            with open(os.path.join(ROOT, "vectors", "MANIFEST.json")) as f:
                committed = {c["id"]: c for c in json.load(f)["cases"]}
            entries = []
            for case_id in ("dyt-fp32-basic", "dyt-fp32-specials"):
                shutil.copy(os.path.join(VECTORS, "dyt", case_id + ".safetensors"), os.path.join(tmp, "dyt"))
                entries.append(dict(committed[case_id], path=f"dyt/{case_id}.safetensors"))
            with open(os.path.join(tmp, "MANIFEST.json"), "w") as f:
                json.dump({"format": "lacs-manifest/1", "cases": entries}, f)
            corrupt = os.path.join(tmp, "dyt", "dyt-fp32-specials.safetensors")
            with open(corrupt, "r+b") as f:
                f.truncate(100)
            run = harness("check", "--impl", GOOD, "--vectors", tmp)
            results, closing = parse(run.stdout)
            self.assertEqual(run.returncode, 2)  # a rejected vector: the input's fault
            self.assertEqual(closing, (1, 1, 0))
            self.assertIn(corrupt, results["dyt-fp32-specials"][2])
            self.assertIn(": hash: ", results["dyt-fp32-specials"][2])
            unverified = harness("check", "--impl", GOOD, "--vectors", tmp, "--no-verify")
            self.assertIn("header-length", parse(unverified.stdout)[0]["dyt-fp32-specials"][2])
            listing = harness("list", "--vectors", tmp)
            self.assertEqual(listing.returncode, 0)
            self.assertRegex(listing.stdout, r"dyt-fp32-specials +\? +cannot be loaded: " + re.escape(corrupt))

    def test_json_report(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "report.json")
            run = check_run(f"python:{IMPLS}/bad.py:raises", "--op", "dyt,linear_attn", "--tier", "fp32",
                            "--json", path, "--strict")
            with open(path) as f:
                report = json.load(f)
            self.assertFalse(os.path.exists(path + ".tmp"))
        self.assertEqual(run.returncode, 1)
        self.assertEqual(report["lacs_version"], check.SPEC_VERSION)
        self.assertEqual(report["impl"], f"python:{IMPLS}/bad.py:raises")
        self.assertEqual(report["vectors"], VECTORS)
        _, closing = parse(run.stdout)
        summary = report["summary"]
        self.assertEqual((summary["passed"], summary["failed"], summary["skipped"]), closing)
        cases = {c["id"]: c for c in report["cases"]}
        self.assertEqual(sorted(cases), case_ids("dyt", "fp32") + case_ids("linear_attn", "fp32"))
        passed = cases["dyt-fp32-basic"]
        self.assertEqual((passed["op"], passed["tier"], passed["status"]), ("dyt", "fp32", "PASS"))
        self.assertLessEqual(passed["ratio"], 1)
        self.assertEqual(passed["ratio_text"], f"{passed['ratio']:.3g}")
        output = passed["outputs"][0]
        self.assertEqual(set(output), {"name", "ratio", "ratio_text", "normwise_ratio", "elementwise_ratio",
                                       "normwise_error", "worst_block", "worst_element", "where", "expected",
                                       "actual", "allowed", "nonfinite_mismatches"})
        self.assertEqual(output["name"], "y")
        self.assertTrue(output["where"].startswith("y["))
        failed = cases["dyt-fp32-specials"]
        self.assertEqual((failed["status"], failed["ratio"], failed["ratio_text"], failed["outputs"]),
                         ("FAIL", None, "-", []))
        self.assertEqual(failed["message"], "ValueError: this kernel needs a weight")
        skipped = cases["linear_attn-fp32-t1"]
        self.assertEqual((skipped["status"], skipped["ratio"], skipped["ratio_text"]), ("SKIP", None, "-"))
        self.assertIn("NotImplementedError", skipped["message"])
        self.assertIsInstance(skipped["seconds"], float)

    def test_junit_report(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "report.xml")
            check_run(f"python:{IMPLS}/bad.py:raises", "--op", "dyt,linear_attn", "--tier", "fp32",
                      "--junit", path)
            suite = ET.parse(path).getroot()
        self.assertEqual((suite.tag, suite.get("name")), ("testsuite", "lacs"))
        cases = {c.get("name"): c for c in suite.findall("testcase")}
        self.assertEqual(sorted(cases), case_ids("dyt", "fp32") + case_ids("linear_attn", "fp32"))
        self.assertEqual(cases["dyt-fp32-basic"].get("classname"), "dyt")
        self.assertEqual(list(cases["dyt-fp32-basic"]), [])
        failure = cases["dyt-fp32-specials"].find("failure")
        self.assertIn("ValueError: this kernel needs a weight", failure.get("message"))
        self.assertIsNotNone(cases["linear_attn-fp32-t1"].find("skipped"))
        self.assertEqual(suite.get("failures"), "1")

    def test_shards_partition_the_filtered_cases(self):
        whole, _ = parse(check_run(GOOD, "--op", "dyt,softcap").stdout)
        seen = []
        for i in (1, 2, 3):
            run = check_run(GOOD, "--op", "dyt,softcap", "--shard", f"{i}/3")
            results, closing = parse(run.stdout)
            self.assertTrue(run.stdout.splitlines()[-2].endswith(f" (shard {i}/3)"))
            self.assertTrue(run.stdout.splitlines()[-1].endswith(f" (shard {i}/3 only)"))
            self.assertEqual(sum(closing), len(results))
            self.assertEqual(list(results), list(whole)[i - 1::3])
            seen.extend(results)
        self.assertEqual(sorted(seen), sorted(whole))


class ErrorTest(unittest.TestCase):
    """User errors: exit 2, one line `lacs: ...` on stderr, no traceback."""

    def assertUserError(self, run, *fragments):
        self.assertEqual(run.returncode, 2, run.stdout + run.stderr)
        self.assertEqual(len(run.stderr.splitlines()), 1, run.stderr)
        self.assertTrue(run.stderr.startswith("lacs: "), run.stderr)
        self.assertNotIn("Traceback", run.stdout + run.stderr)
        for fragment in fragments:
            self.assertIn(fragment, run.stderr)

    def test_missing_vectors_dir(self):
        self.assertUserError(harness("check", "--impl", GOOD, "--vectors", "/nonexistent/lacs"), "/nonexistent/lacs")

    def test_unknown_op_and_tier(self):
        self.assertUserError(check_run(GOOD, "--op", "delta_rule,deltanet"), "deltanet", "delta_rule")
        self.assertUserError(check_run(GOOD, "--tier", "fp16"), "fp16")
        self.assertUserError(harness("list", "--op", "deltanet"), "deltanet")

    def test_implementation_file_missing(self):
        self.assertUserError(check_run("python:no/such/impl.py:run"), "no/such/impl.py")

    def test_function_missing(self):
        self.assertUserError(check_run(f"python:{IMPLS}/good.py:nothing"), "nothing")
        self.assertUserError(check_run("python:tests.python.impls.good:nothing"), "nothing")

    def test_module_import_errors_show_the_exceptions_summary(self):
        self.assertUserError(check_run("python:no_such_module_lacs:run"),
                             "ModuleNotFoundError: No module named 'no_such_module_lacs'")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "broken.py")
            with open(path, "w") as f:
                f.write("import no_such_dependency_lacs\n")
            self.assertUserError(check_run(f"python:{path}:run"), path,
                                 "ModuleNotFoundError: No module named 'no_such_dependency_lacs'")
            with open(path, "w") as f:
                f.write("def run(:\n")
            self.assertUserError(check_run(f"python:{path}:run"), "SyntaxError")

    def test_malformed_impl_shard_and_options(self):
        self.assertUserError(check_run("python:only_a_module"), "python:FILE_OR_MODULE:FUNCTION")
        self.assertUserError(check_run("builtin:reference"), "build/lacs")
        for shard in ("0/2", "3/2", "1", "a/b"):
            self.assertUserError(check_run(GOOD, "--shard", shard), "--shard")
        for jobs in ("0", "257", "x"):
            self.assertUserError(check_run(GOOD, "--jobs", jobs), "--jobs")
        self.assertUserError(check_run(GOOD, "--timeout", "-1"), "--timeout")
        self.assertUserError(check_run(GOOD, "--jobs", "2", "--in-process"), "--in-process")
        self.assertUserError(harness("check", "--op", "dyt"), "--impl")

    def test_no_case_matches(self):
        self.assertUserError(harness("check", "--impl", GOOD, "--vectors", os.path.join(ROOT, "vectors"),
                                     "--no-verify"), "no case")
        self.assertUserError(harness("check", "--impl", GOOD, "--vectors", os.path.join(ROOT, "vectors")),
                             "no MANIFEST.json covers")

    def test_library_missing(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.assertUserError(check_run(GOOD, env={"LACS_BUILD": tmp}), "liblacs.so not found: run make")


class ListTest(unittest.TestCase):

    def test_list_prints_the_filtered_cases_and_the_implementations(self):
        run = harness("list", "--op", "dyt", "--tier", "bf16", "--vectors", VECTORS)
        self.assertEqual(run.returncode, 0, run.stderr)
        lines = run.stdout.splitlines()
        ids = case_ids("dyt", "bf16")
        self.assertTrue(lines[0].startswith(f"{len(ids)} cases under {VECTORS} (verified against "), lines[0])
        self.assertEqual(lines[1].split(), ["id", "flags", "reason"])
        self.assertEqual([line.split()[0] for line in lines[2:2 + len(ids)]], ids)
        self.assertIn("AllBF16", lines[2])
        self.assertIn("python:FILE_OR_MODULE:FUNCTION", run.stdout)
        self.assertIn("builtin:reference", run.stdout)


if __name__ == "__main__":
    unittest.main()
