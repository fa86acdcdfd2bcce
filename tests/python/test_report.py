"""The conformance report (`lacs check --html`, `python3 -m lacs check
--html`; lacs/report.h) opened in a real browser: Debian's Chromium, headless
(ci/deps.sh installs it), renders each page; the test reads the rendered DOM
(--dump-dom) for the verdict matrix and a failure's element report and
compares them with the same run's JSON report, checks that the page refers to
nothing outside itself, and takes the screenshot the README shows
(build/report/report.png; docs/report.png is its committed copy, refreshed with
LACS_UPDATE_SCREENSHOT=1).
"""

import html.parser
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
VECTORS = os.path.join(ROOT, "vectors", "core")
DEMO = "python:tests/python/impls/report_demo.py:run"  # run from ROOT: the page shows what the user typed
EXTERNAL = re.compile(r"(?i)\b(src|href|xlink:href|action|poster|srcset)\s*=|url\s*\(|@import|<\s*(link|script|iframe|"
                      r"object|embed|img|base)\b|https?:|file:|//[a-z0-9]")


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError("headless Chromium not found: ci/deps.sh installs Debian's chromium")


class Dom(html.parser.HTMLParser):
    """The rendered DOM: the verdict matrix's cells, the failures' element reports and plots."""

    def __init__(self):
        super().__init__()
        self.cells, self.failures, self.plots = {}, {}, {}
        self.stack, self.text_of = [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.stack.append((tag, a))
        if tag == "td" and "data-verdict" in a:
            self.cells[(a["data-op"], a["data-tier"])] = a["data-verdict"]
        if tag == "article" and "failure" in a.get("class", "").split():
            self.current = a["data-case"]
            self.failures[self.current] = ""
            self.plots[self.current] = []
        if tag == "p" and "element-report" in a.get("class", "").split():
            self.text_of = self.current
        if tag == "svg" and "over-time" in a.get("class", "").split():
            self.plots[self.current].append(a.get("data-output"))

    def handle_endtag(self, tag):
        if self.stack:
            self.stack.pop()
        if tag == "p":
            self.text_of = None

    def handle_data(self, data):
        if self.text_of is not None:
            self.failures[self.text_of] += data


class HtmlReport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lacs-report-")
        cls.profile = os.path.join(cls.tmp, "profile")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def browser(self, page, *args):
        run = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                              "--disable-background-networking", "--hide-scrollbars", f"--user-data-dir={self.profile}",
                              *args, "file://" + page], capture_output=True, text=True, timeout=180)
        return run

    def check_page(self, page, report):
        with open(page, encoding="utf-8") as f:
            source = f.read()
        self.assertIsNone(EXTERNAL.search(source), "the page refers to something outside itself")
        dump = self.browser(page, "--dump-dom")
        self.assertEqual(dump.returncode, 0, dump.stderr[-2000:])
        dom = Dom()
        dom.feed(dump.stdout)
        self.assertIn("lacs conformance report", dump.stdout)
        self.assertIn(report["verdict"]["citation"], dump.stdout)
        # the matrix is the verdict of the run, cell for cell
        expected = {(g["op"], g["tier"]): g["verdict"] for g in report["verdict"]["groups"]}
        self.assertEqual(dom.cells, expected)
        # one article per failure, with lacs's element report
        failed = {c["id"]: c for c in report["cases"] if c["status"] == "FAIL"}
        self.assertEqual(set(dom.failures), set(failed))
        for case_id, text in dom.failures.items():
            outputs = failed[case_id]["outputs"]
            if outputs:
                worst = max(outputs, key=lambda o: o["ratio"] if o["ratio"] is not None else float("inf"))
                self.assertTrue(text.startswith(worst["where"] + ": expected "), text)
                self.assertRegex(text, r"allowed error \S+; normwise ratio \S+, elementwise ratio \S+")
                self.assertIn("o", dom.plots[case_id])  # the error over time of o
            else:
                self.assertEqual(text, failed[case_id]["message"])
        return dom

    def test_the_c_checkers_report_renders_with_its_verdicts(self):
        page, report = os.path.join(self.tmp, "plugin.html"), os.path.join(self.tmp, "plugin.json")
        make = subprocess.run(["make", "-s", "--no-print-directory", f"BUILD={os.path.relpath(BUILD, ROOT)}",
                               os.path.join(os.path.relpath(BUILD, ROOT), "plugins", "wrong_plugin.so"),
                               os.path.join(os.path.relpath(BUILD, ROOT), "plugins", "good_plugin.so")], cwd=ROOT,
                              capture_output=True, text=True)
        self.assertEqual(make.returncode, 0, make.stderr)
        for plugin, status in (("good_plugin.so", 0), ("wrong_plugin.so", 1)):
            run = subprocess.run([os.path.join(BUILD, "lacs"), "check", "--impl",
                                  os.path.join(BUILD, "plugins", plugin), "--op", "linear_attn,dyt", "--vectors",
                                  VECTORS, "--html", page, "--json", report, "--quiet"], cwd=ROOT,
                                 capture_output=True, text=True, timeout=300)
            self.assertEqual(run.returncode, status, run.stdout + run.stderr)
            with open(report) as f:
                dom = self.check_page(page, json.load(f))
            if plugin == "wrong_plugin.so":
                self.assertEqual(dom.cells[("linear_attn", "fp32")], "fails")
                self.assertGreaterEqual(len(dom.failures), 10)
            else:
                self.assertEqual(dom.cells[("linear_attn", "fp32")], "conforms")
                self.assertEqual(dom.failures, {})
        refused = subprocess.run([os.path.join(BUILD, "lacs"), "check", "--impl", "builtin:reference", "--op", "dyt",
                                  "--vectors", VECTORS, "--html", os.path.join(VECTORS, "dyt", "dyt-fp32-basic.safetensors")],
                                 cwd=ROOT, capture_output=True, text=True)
        self.assertEqual(refused.returncode, 2, refused.stdout + refused.stderr)
        self.assertIn("golden", refused.stderr)

    def test_the_python_harness_report_renders_and_is_the_readmes_screenshot(self):
        page, report = os.path.join(self.tmp, "python.html"), os.path.join(self.tmp, "python.json")
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), LACS_BUILD=BUILD)
        run = subprocess.run([sys.executable, "-m", "lacs", "check", "--impl", DEMO, "--op",
                              "delta_rule,dyt,linear_attn", "--vectors", "vectors/core", "--html", page, "--json", report,
                              "--quiet"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        with open(report) as f:
            dom = self.check_page(page, json.load(f))
        self.assertEqual({dom.cells[("delta_rule", "fp32")], dom.cells[("delta_rule", "bf16")],
                          dom.cells[("dyt", "fp32")], dom.cells[("linear_attn", "bf16")]},
                         {"partial", "fails", "conforms", "not claimed"})
        self.assertIn("delta_rule-bf16-t4096-slow", dom.failures)
        out = os.path.join(BUILD, "report")
        os.makedirs(out, exist_ok=True)
        shutil.copyfile(page, os.path.join(out, "report.html"))
        shot = os.path.join(out, "report.png")
        if os.path.exists(shot):
            os.remove(shot)
        taken = self.browser(page, f"--screenshot={shot}", "--window-size=1200,1500")
        self.assertEqual(taken.returncode, 0, taken.stderr[-2000:])
        with open(shot, "rb") as f:
            png = f.read()
        self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n")
        width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
        self.assertEqual((width, height), (1200, 1500))
        self.assertGreater(len(png), 30000)  # a rendered page, not a blank one
        if os.environ.get("LACS_UPDATE_SCREENSHOT") == "1":
            shutil.copyfile(shot, os.path.join(ROOT, "docs", "report.png"))


if __name__ == "__main__":
    unittest.main()
