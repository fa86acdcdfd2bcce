"""python3 -m lacs: the Python harness's command line.

  python3 -m lacs check --impl python:FILE_OR_MODULE:FUNCTION [--op OP ...] [--tier fp32|bf16]
                        [--vectors DIR] [--json FILE] [--junit FILE] [--html FILE] [--shard I/N]
                        [--timeout SECONDS] [--jobs N] [--strict] [--no-verify] [--in-process]
                        [--quiet | --verbose]
  python3 -m lacs list [--op OP ...] [--tier fp32|bf16] [--vectors DIR] [--no-verify]
  python3 -m lacs explain CASE [--impl python:FILE_OR_MODULE:FUNCTION] [--vectors DIR] [--plot FILE.png]
                          [--timeout SECONDS] [--force] [--no-verify]
  python3 -m lacs version     (also --version): the spec, and which liblacs.so, lacs program and vectors

The same commands, output and exit codes as `build/lacs check` and `build/lacs
list` (checker/cli_*.c), for implementations written in Python (lacs/check.py
says what such a function takes and returns, lacs/workers.py how it is run).
Exit 0: nothing failed, nothing was skipped without being declared, and some
case passed; 1: otherwise; 2: a user error or a rejected vector, printed as
one line `lacs: <problem>` on stderr.
"""

import argparse
import json
import math
import os
import sys
import time

from . import check, workers
from .check import FAIL, PASS, SKIP, HarnessError

DETAIL_INDENT = " " * 6


class _Parser(argparse.ArgumentParser):
    """argparse, with errors as one line `lacs: <problem>` and exit 2."""

    def error(self, message):
        raise HarnessError(message)


def _parser():
    parser = _Parser(prog="python3 -m lacs", description="The lacs harness for Python implementations.")
    parser.add_argument("--version", action="store_true", help="the spec version and which liblacs.so is used")
    commands = parser.add_subparsers(dest="command", metavar="{check,list,explain,version}", parser_class=_Parser)

    def filters(p):
        p.add_argument("--op", action="append", metavar="OP",
                       help="only this op (repeatable, or comma-separated)")
        p.add_argument("--tier", metavar="TIER", help="only fp32 or bf16 cases")
        p.add_argument("--vectors", metavar="DIR", help="default ./vectors/core, else $LACS_VECTORS")
        p.add_argument("--no-verify", action="store_true",
                       help="do not verify the vectors against their MANIFEST.json (their SHA-256)")

    run = commands.add_parser(
        "check", help="run a Python implementation on the golden vectors",
        description="Runs FUNCTION(op, inputs, params) on every case and compares its outputs with the "
                    "goldens through the C checker (liblacs.so), each in a worker process. One line per case: "
                    "`PASS  0.0123    delta_rule-fp32-t64` (status, worst error/allowed ratio, id; 1 is the "
                    "limit), and under a FAIL, where and why. Then the verdict per op and tier, "
                    "`N passed, M failed, K skipped`, and the line to cite.")
    run.add_argument("--impl", metavar="python:FILE_OR_MODULE:FUNCTION",
                     help="fn(op, inputs, params) -> {output: array}; raise NotImplementedError or "
                          "return None to skip a case; declare limits with fn.lacs_describe")
    filters(run)
    run.add_argument("--json", metavar="FILE", help="write a JSON report (replacing FILE)")
    run.add_argument("--junit", metavar="FILE", help="write a JUnit XML report (replacing FILE)")
    run.add_argument("--html", metavar="FILE",
                     help="write the conformance report a person reads: one self-contained page (the verdict "
                          "matrix, the ratios of each op, each failure with its error over time; replacing FILE)")
    run.add_argument("--shard", metavar="I/N", help="only the cases whose index in the filtered list is I-1 mod N")
    run.add_argument("--timeout", metavar="SECONDS", help="a case running longer fails (default 300)")
    run.add_argument("--jobs", metavar="N", help="run up to N cases at once, in N worker processes (default 1)")
    run.add_argument("--strict", action="store_true",
                     help="count the strict cases in the verdict (by default they are listed beside it)")
    run.add_argument("--in-process", action="store_true",
                     help="call the function in this process (for a debugger): no timeout, and a crash or an "
                          "exit in a C extension ends the run")
    run.add_argument("--quiet", action="store_true", help="print only failures and the closing line")
    run.add_argument("--verbose", action="store_true",
                     help="print every output's ratio, the time of each case and the traceback of an exception")

    listing = commands.add_parser("list", help="list the cases and the implementations",
                                  description="Lists the cases under DIR/<op>/*.safetensors (id, flags, "
                                              "reason), sorted by id, then the implementations.")
    filters(listing)

    explain = commands.add_parser(
        "explain", help="what a case tests, and where a Python implementation goes wrong on it",
        description="Prints what CASE (an id or a vector file) tests; with --impl, runs the function on it in a "
                    "worker process and prints each output's ratio, the first time step over the limit, whether it "
                    "starts a chunk of 16, 32 or 64, and the error over time (the lacs program's explain, given the "
                    "function's outputs).")
    explain.add_argument("case", metavar="CASE", help="a case id (delta_rule-fp32-t65) or a vector file")
    explain.add_argument("--impl", metavar="python:FILE_OR_MODULE:FUNCTION", help="the function to run on it")
    explain.add_argument("--vectors", metavar="DIR", help="default ./vectors/core, else $LACS_VECTORS")
    explain.add_argument("--plot", metavar="FILE.png", help="draw log10(ratio) against t (python3-matplotlib)")
    explain.add_argument("--timeout", metavar="SECONDS", help="a run longer than this fails (default 300)")
    explain.add_argument("--force", action="store_true", help="replace FILE.png if it is a regular file")
    explain.add_argument("--no-verify", action="store_true", help="do not verify CASE against its MANIFEST.json")

    commands.add_parser("version", help="the spec version, and which liblacs.so, lacs program and vectors are used")
    return parser


def _ops(values):
    """--op values, repeatable and comma-separated, in order, without repeats."""
    ops = []
    for value in values or ():
        names = [name.strip() for name in value.split(",") if name.strip()]
        if not names:
            raise HarnessError("--op needs an op name")
        ops.extend(name for name in names if name not in ops)
    return ops


def _shard(text):
    """(I, N) from "I/N", 1 <= I <= N."""
    if text is None:
        return None
    i, sep, n = text.partition("/")
    if sep and i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n) <= 1000000:
        return int(i), int(n)
    raise HarnessError(f"bad --shard '{text}': expected I/N with 1 <= I <= N")


# ---- list ----

def command_list(args):
    library = check.Library()
    ops = _ops(args.op)
    check.check_filters(library, ops, args.tier)
    directory = check.vectors_dir(args.vectors, library.installation)
    cases, manifest = check.find_cases(library, directory, ops, args.tier, verify=not args.no_verify, read=True)
    id_width = max([2] + [len(c.id) for c in cases])
    flags_width = max([5] + [len(",".join(c.flags)) for c in cases])
    verified = f"verified against {library.printable(manifest)}" if manifest else "not verified"
    print(f"{len(cases)} case{'' if len(cases) == 1 else 's'} under {library.printable(directory)} ({verified})")
    if cases:
        print(f"  {'id':<{id_width}}  {'flags':<{flags_width}}  reason")
    for case in cases:
        if case.error is None:
            level = "(strict) " if case.strict else ""
            print(f"  {case.id:<{id_width}}  {','.join(case.flags):<{flags_width}}  {level}{case.reason}")
        else:
            print(f"  {case.id:<{id_width}}  {'?':<{flags_width}}  {check.CASE_STATE_WORDS[case.state]}: "
                  f"{case.error}")
    print("\nimplementations (--impl):")
    for name, what in (("builtin:reference", "the double reference, run by build/lacs check"),
                       ("builtin:cpu", "the optimized CPU implementation, run by build/lacs check"),
                       ("builtin:cuda", "the CUDA implementation (make cuda), run by build/lacs check; "
                                        "build/lacs list gives its device and status"),
                       ("PATH.so", "a shared library exporting lacs_plugin_run (ABI v1.1, include/lacs/plugin.h), "
                                   "run by build/lacs check"),
                       ("python:FILE_OR_MODULE:FUNCTION", "a Python function, run by this harness "
                                                          "(PYTHONPATH=python /usr/bin/python3 -m lacs check)")):
        print(f"  {name:<34}  {what}")
    print(f"\nlibrary: {library.printable(library.installation.describe())}")
    return 0


# ---- version ----

def command_version(args):
    """The spec, and where the C side is (find_installation says how it was found)."""
    installation = check.find_installation()
    print(f"lacs {check.SPEC_VERSION} (Python harness {os.path.dirname(os.path.abspath(__file__))})")
    print(f"library  {installation.describe()}")
    print(f"program  {installation.cli or '(no lacs program beside it: explain needs one; set LACS_CLI)'}")
    print(f"vectors  {installation.vectors or '(none installed with it: use --vectors DIR or LACS_VECTORS)'}")
    return 0


# ---- check ----

def ratio_text(ratio):
    """3 significant digits, `inf` or `nan` (checker/cli_result.c's cli_format_ratio)."""
    if math.isnan(ratio):
        return "nan"
    if math.isinf(ratio):
        return "inf"
    return f"{ratio:.3g}"


def case_ratio_text(result):
    """The ratio column: `-` for a SKIP and for a FAIL that compared nothing."""
    if result.status == SKIP or result.ratio is None:
        return "-"
    return ratio_text(result.ratio)


def _worst_output(result):
    """The output with the largest ratio (a NaN counts as the worst), or None."""
    worst = None
    for output in result.outputs:
        if worst is None or math.isnan(output.ratio) or \
                (not math.isnan(worst.ratio) and output.ratio > worst.ratio):
            worst = output
        if math.isnan(output.ratio):
            break
    return worst


def describe_output(output):
    """Where an output is worst, its values there, the allowed error and both
    ratios (checker/cli_result.c's cli_describe_output)."""
    text = (f"{output.where}: expected {output.expected:.10g}, got {output.actual:.10g}, "
            f"allowed error {output.allowed:.3g}; normwise ratio {ratio_text(output.normwise_ratio)}, "
            f"elementwise ratio {ratio_text(output.elementwise_ratio)}")
    if output.nonfinite_mismatches > 0:
        text += (f"; {output.nonfinite_mismatches} element(s) non-finite where the golden is not, "
                 "or the reverse")
    return text


def failure_detail(result):
    """The line under a FAIL (without its indent): the worst output, the others
    over the limit, the message; or the message alone."""
    worst = _worst_output(result)
    if worst is None:
        return result.message or "failed"
    text = describe_output(worst)
    others = [f"{o.name} ({ratio_text(o.ratio)})" for o in result.outputs
              if o is not worst and not o.ratio <= 1]
    if others:
        text += "; also over the limit: " + ", ".join(others)
    if result.message:
        text += f"; {result.message}"
    return text


def print_result(result, verbose):
    print(f"{result.status}  {case_ratio_text(result):<8}  {result.case.id}")
    if result.status == FAIL:
        print(DETAIL_INDENT + failure_detail(result))
    if not verbose:
        return
    if result.status == SKIP and result.message:
        print(DETAIL_INDENT + result.message)
    for line in (result.traceback or "").rstrip().splitlines():
        print(DETAIL_INDENT + line)
    for output in result.outputs:
        print(f"{DETAIL_INDENT}{output.name} ratio {ratio_text(output.ratio)}; worst {describe_output(output)}")
    print(f"{DETAIL_INDENT}{result.seconds:.3f} s")


class _Progress:
    """`[i/n] id` on stderr, overwritten in place, when stderr is a terminal."""

    def __init__(self):
        self.enabled = sys.stderr.isatty()
        self.shown = False

    def draw(self, text):
        if self.enabled:
            sys.stderr.write("\r\033[K" + text)
            sys.stderr.flush()
            self.shown = True

    def erase(self):
        if self.enabled and self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown = False


def _positive(text, option, kind):
    try:
        value = kind(text)
    except (TypeError, ValueError):
        value = None
    if value is None or not (value > 0) or value != value or value > 1e6:
        what = "a whole number from 1 to 256" if kind is int else "a positive number of seconds (at most 1e6)"
        raise HarnessError(f"bad {option} '{text}': expected {what}")
    if kind is int and value > 256:
        raise HarnessError(f"bad {option} '{text}': expected a whole number from 1 to 256")
    return value


def command_check(args):
    if not args.impl:
        raise HarnessError("check: --impl IMPL is required (python:FILE_OR_MODULE:FUNCTION)")
    if args.quiet and args.verbose:
        raise HarnessError("check: --quiet and --verbose exclude each other")
    timeout = _positive(args.timeout, "--timeout", float) if args.timeout is not None else 300.0
    jobs = _positive(args.jobs, "--jobs", int) if args.jobs is not None else 1
    if args.in_process and (args.timeout is not None or jobs > 1):
        raise HarnessError("check: --timeout and --jobs need worker processes: drop --in-process")
    shard = _shard(args.shard)
    check.parse_impl(args.impl)
    library = check.Library()
    ops = _ops(args.op)
    check.check_filters(library, ops, args.tier)
    directory = check.vectors_dir(args.vectors, library.installation)
    # before any work: a report that could not be written is refused now, not after the run
    for path in (args.json, args.junit, args.html):
        if path:
            library.check_output_file(path, directory)
    cases, manifest = check.find_cases(library, directory, ops, args.tier, verify=not args.no_verify)
    matching = len(cases)
    if shard is not None:
        cases = check.shard(cases, *shard)
    if matching == 0:
        raise HarnessError(f"no case under '{library.printable(directory)}' matches the filters"
                           + (" (--op, --tier)" if ops or args.tier else ""))

    verdict = check.Verdict(library, args.strict)
    pool = fn = None
    try:
        # after the cheap checks: importing torch takes seconds
        if args.in_process:
            fn = check.load_impl(args.impl)
            description = check.describe_impl(fn)
        else:
            pool = workers.Pool(args.impl, jobs, timeout)
            description = pool.description
        if description is not None:
            verdict.declare(description)
        scope = [f"shard {shard[0]}/{shard[1]} only"] if shard is not None else []
        if manifest is None:
            scope.append("on unverified vectors")
        verdict.scope(", ".join(scope))
        results = _run_cases(library, cases, verdict, fn, pool, args, timeout)
    finally:
        if pool is not None:
            pool.close()

    counts = {status: sum(r.status == status for r in results) for status in (PASS, FAIL, SKIP)}
    closing = f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"
    if shard is not None:
        closing += f" (shard {shard[0]}/{shard[1]})"
    for result in results:
        verdict.add(result)
    if not results:
        print(closing)
        sys.stdout.flush()
        print(f"lacs: shard {shard[0]}/{shard[1]} of the {matching} matching cases is empty: nothing to check in it",
              file=sys.stderr)
        status = 0
    else:
        sys.stdout.write(verdict.table())
        print(closing)
        print(verdict.citation())
        sys.stdout.flush()
        status = verdict.exit_status()
        if counts[FAIL] == 0 and counts[PASS] == 0:
            print(f"lacs: no case ran: {library.printable(args.impl)} skipped every one of the {len(results)} "
                  "cases", file=sys.stderr)
        if manifest is None:
            print("lacs: the vectors were not verified (--no-verify): the verdict holds only if they are the "
                  "published ones", file=sys.stderr)
    report = {"impl": library.printable(args.impl), "vectors": library.printable(directory),
              "manifest": library.printable(manifest) if manifest else None, "shard": shard, "counts": counts,
              "verdict": json.loads(verdict.json_text()) if results else None,
              "citation": verdict.citation() if results else None}
    verdict.close()
    if args.json:
        library.write_output_file(args.json, "JSON", json_report(report, results), directory)
    if args.junit:
        library.write_output_file(args.junit, "JUnit", junit_report(report, results), directory)
    if args.html and results:
        library.write_output_file(args.html, "HTML", library.report_html(json_report(report, results, extra=True)),
                                  directory)
    return status


def _run_cases(library, cases, verdict, fn, pool, args, timeout):
    """Runs every case (in the pool's workers, or in this process with fn),
    printing the results in case order as they come; returns them."""
    progress = _Progress()
    results = [None] * len(cases)
    printed = 0

    def show_ready():
        nonlocal printed
        while printed < len(results) and results[printed] is not None:
            result = results[printed]
            printed += 1
            if args.quiet and result.status != FAIL:
                continue
            progress.erase()
            print_result(result, args.verbose)
            sys.stdout.flush()

    requests = {}

    def to_run():
        for index, case in enumerate(cases):
            progress.draw(f"[{index + 1}/{len(cases)}] {case.id}")
            started = time.perf_counter()
            result, request = check.prepare(library, case, verdict)
            result.seconds = time.perf_counter() - started
            if request is None:
                results[index] = result
                show_ready()
                continue
            requests[index] = (result, request, started)
            yield index, request.op, request.inputs, request.params, request.info

    try:
        if pool is not None:
            for index, answer in pool.run(to_run()):
                result, request, started = requests.pop(index)
                try:
                    check.settle(library, request, answer, result)
                    if args.html:
                        check.keep_over_time(library, request, answer, result)
                finally:
                    request.close()
                result.seconds = time.perf_counter() - started
                results[index] = result
                show_ready()
        else:
            for index, case in enumerate(cases):
                progress.draw(f"[{index + 1}/{len(cases)}] {case.id}")
                results[index] = check.run_case(library, fn, case, verdict, over_time=bool(args.html))
                show_ready()
    finally:
        progress.erase()
        for result, request, _ in requests.values():
            request.close()
    return results


# ---- reports (the structure of checker/cli_report.c's) ----

def _number(x):
    """A JSON number, or null for NaN and infinities (JSON has none)."""
    return x if x is not None and math.isfinite(x) else None


def _output_json(o):
    return {
        "name": o.name,
        "ratio": _number(o.ratio),
        "ratio_text": ratio_text(o.ratio),
        "normwise_ratio": _number(o.normwise_ratio),
        "elementwise_ratio": _number(o.elementwise_ratio),
        "normwise_error": _number(o.normwise_error),
        "worst_block": o.worst_block,
        "worst_element": o.worst_element,
        "where": o.where,
        "expected": _number(o.expected),
        "actual": _number(o.actual),
        "allowed": _number(o.allowed),
        "nonfinite_mismatches": o.nonfinite_mismatches,
    }


def _machine():
    """What the HTML report adds to the machine's description: this interpreter, and torch if it is loaded."""
    import platform
    machine = {"python": f"{platform.python_implementation()} {platform.python_version()} ({sys.executable})",
               "numpy": check.np.__version__}
    torch = sys.modules.get("torch")
    if torch is not None:
        machine["torch"] = getattr(torch, "__version__", "?")
    return machine


def json_report(report, results, extra=False):
    """{"lacs_version", "impl", "vectors", ["shard"], "summary", "cases"}; every
    non-finite number is null, its text in "ratio_text". With extra (for the
    HTML report), each failure's "error_over_time" and the "machine"."""
    root = {"lacs_version": check.SPEC_VERSION, "impl": report["impl"], "vectors": report["vectors"],
            "manifest": report["manifest"]}
    if report["shard"] is not None:
        root["shard"] = "%d/%d" % report["shard"]
    counts = report["counts"]
    root["summary"] = {"passed": counts[PASS], "failed": counts[FAIL], "skipped": counts[SKIP]}
    root["verdict"] = report["verdict"]
    root["cases"] = [{
        "id": r.case.id,
        "op": r.case.op,
        "tier": r.case.tier,
        "status": r.status,
        "outcome": check.OUTCOME_WORDS[r.outcome],
        "strict": r.strict,
        "ratio": None if r.status == SKIP or r.ratio is None else _number(r.ratio),
        "ratio_text": case_ratio_text(r),
        "outputs": [_output_json(o) for o in r.outputs],
        "message": r.message,
        "seconds": r.seconds,
    } for r in results]
    if extra:
        root["machine"] = _machine()
        for case, r in zip(root["cases"], results):
            case["error_over_time"] = [{"output": name, "ratios": [_number(x) for x in ratios]}
                                       for name, ratios in r.over_time]
    return json.dumps(root, indent="\t") + "\n"


def _xml(text):
    """Text as XML character data or attribute value: the five entities, and
    the control characters XML 1.0 forbids replaced by '?'."""
    entities = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;"}
    return "".join(entities.get(c, "?" if ord(c) < 0x20 and c not in "\t\n\r" else c) for c in text)


def _failure_text(result):
    """The failure's one-line summary: the ratio and where, or the message."""
    worst = _worst_output(result)
    if worst is None:
        return result.message or "failed"
    text = f"ratio {ratio_text(result.ratio)}: {describe_output(worst)}"
    return text + (f"; {result.message}" if result.message else "")


def junit_report(report, results):
    """One <testsuite name="lacs">, a <testcase classname=op name=id> per case,
    <failure> for a FAIL (with the traceback of an exception), <skipped/> for
    a SKIP."""
    counts = report["counts"]
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f'<testsuite name="lacs" tests="{len(results)}" failures="{counts[FAIL]}" errors="0" '
             f'skipped="{counts[SKIP]}" time="{sum(r.seconds for r in results):.6f}">',
             "  <properties>",
             f'    <property name="impl" value="{_xml(report["impl"])}"/>',
             f'    <property name="vectors" value="{_xml(report["vectors"])}"/>',
             f'    <property name="manifest" value="{_xml(report["manifest"] or "(not verified)")}"/>',
             f'    <property name="lacs_version" value="{check.SPEC_VERSION}"/>']
    if report["citation"]:
        lines.append(f'    <property name="verdict" value="{_xml(report["citation"])}"/>')
    lines.append("  </properties>")
    for r in results:
        opening = f'  <testcase classname="{_xml(r.case.op)}" name="{_xml(r.case.id)}" time="{r.seconds:.6f}"'
        if r.status == PASS:
            lines.append(opening + "/>")
            continue
        lines.append(opening + ">")
        if r.status == SKIP:
            lines.append(f'    <skipped message="{_xml(r.message or "unsupported")}"/>')
        else:
            message = _failure_text(r)
            body = message + ("\n" + r.traceback if r.traceback else "")
            lines.append(f'    <failure message="{_xml(message)}">{_xml(body)}</failure>')
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"


# ---- explain ----

def _find_case(library, directory, name, verify):
    """The Case for an id under directory, or for a vector file (found among the
    cases of its own directory, DIR/<op>/FILE); HarnessError when none."""
    ops = [op for op in library.op_names() if name.startswith(op + "-fp32-") or name.startswith(op + "-bf16-")]
    cases, _ = check.find_cases(library, directory, ops[-1:] or None, None, verify=verify)
    for case in cases:
        if case.id == name:
            return case
    raise HarnessError(f"explain: no case '{name}' under {library.printable(directory)}")


def _cli_program(library):
    program = os.environ.get("LACS_CLI") or (library.installation.cli if library.installation else None)
    if not program:
        raise HarnessError("explain: no lacs program found beside the library (build it with make, or set LACS_CLI)")
    return program


def command_explain(args):
    import subprocess
    import tempfile
    from . import safetensors
    library = check.Library()
    program = _cli_program(library)
    verify = ["--no-verify"] if args.no_verify else []
    if not args.impl:  # what the case is: the lacs program says it
        if args.plot:
            raise HarnessError("explain: --plot draws an implementation's error: give --impl IMPL")
        return subprocess.run([program, "explain", args.case] + verify +
                              (["--vectors", args.vectors] if args.vectors else [])).returncode
    check.parse_impl(args.impl)
    timeout = _positive(args.timeout, "--timeout", float) if args.timeout is not None else 300.0
    plot = (["--plot", args.plot] if args.plot else []) + (["--force"] if args.force else [])
    if os.path.isfile(args.case):
        path = os.path.abspath(args.case)
        directory = os.path.dirname(os.path.dirname(path))
        case = next((c for c in check.find_cases(library, directory, verify=not args.no_verify)[0]
                     if os.path.exists(c.path) and os.path.samefile(c.path, path)), None)
        if case is None:
            raise HarnessError(f"explain: {library.printable(args.case)} is not a case of {directory}")
    else:
        directory = check.vectors_dir(args.vectors, library.installation)
        case = _find_case(library, directory, args.case, not args.no_verify)
    result, request = check.prepare(library, case, None)
    if request is None:
        raise HarnessError(result.message or f"cannot load {case.id}")
    pool = None
    try:
        pool = workers.Pool(args.impl, 1, timeout)
        (_, answer), = list(pool.run([(0, request.op, request.inputs, request.params, request.info)]))
    finally:
        if pool is not None:
            pool.close()
        request.close()
    if not isinstance(answer, dict):  # skipped or failed before giving outputs: the case, then why
        sys.stdout.flush()
        status = subprocess.run([program, "explain", case.path] + verify).returncode
        if status == 2:
            return status
        check.settle(library, None, answer, result)
        print(f"\nimpl       {library.printable(args.impl)}\n")
        print_result(result, verbose=False)
        sys.stdout.flush()
        if result.traceback:
            print(result.traceback.rstrip(), file=sys.stderr)
        if args.plot:
            raise HarnessError(f"explain: nothing to plot: {result.message}")
        return 0 if result.status == SKIP else 1
    with tempfile.TemporaryDirectory(prefix="lacs-explain-") as private:
        outputs = os.path.join(private, "outputs.safetensors")
        safetensors.write(outputs, {name: ("F64", array) for name, array in answer.items()})
        sys.stdout.flush()
        return subprocess.run([program, "explain", case.path, "--outputs", outputs, "--outputs-of", args.impl]
                              + verify + plot).returncode


def main(argv=None):
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        if args.version or args.command == "version":
            return command_version(args)
        if args.command == "check":
            return command_check(args)
        if args.command == "list":
            return command_list(args)
        if args.command == "explain":
            return command_explain(args)
        parser.print_help()
        return 2
    except HarnessError as e:
        sys.stdout.flush()
        print(f"lacs: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`| head`): stop quietly, and keep Python from
        # complaining again when it flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print("\nlacs: interrupted", file=sys.stderr)
        return 130



if __name__ == "__main__":
    sys.exit(main())
