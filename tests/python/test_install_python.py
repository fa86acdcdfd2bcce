"""`pip install ./python` as a user does it, offline, with Debian's tools:
into a fresh `/usr/bin/python3 -m venv --system-site-packages` environment,
`pip install --no-index --no-build-isolation` (Debian's setuptools and wheel
build it; nothing is downloaded). From there, outside the source tree and
with no PYTHONPATH:

  - `python3 -m lacs version` says which liblacs.so it uses: the build tree it
    was installed from, or an installed prefix (`make install PREFIX=...`,
    found through LACS_PREFIX or pkg-config), with that prefix's vectors;
  - `python3 -m lacs check` runs a function (examples/pytest_project) to its
    verdict, on either;
  - pytest finds the plugin through the package's entry point (no `-p`).
"""

import os
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.path.join(ROOT, os.environ.get("LACS_BUILD", "build")))
KERNELS = os.path.join(ROOT, "examples", "pytest_project", "my_kernels.py")


class PipInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lacs-pip-install-")
        cls.venv = os.path.join(cls.tmp, "venv")
        cls.python = os.path.join(cls.venv, "bin", "python3")
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", cls.venv], check=True,
                       capture_output=True, timeout=300)
        cls.install = subprocess.run([cls.python, "-m", "pip", "install", "--no-index", "--no-build-isolation",
                                      os.path.join(ROOT, "python")], env=cls.env(), capture_output=True, text=True,
                                     timeout=300)
        cls.work = os.path.join(cls.tmp, "work")  # outside the source tree: no ./vectors/core here
        os.mkdir(cls.work)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @staticmethod
    def env(**extra):
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "LACS_BUILD", "LACS_VECTORS", "LACS_PREFIX", "LACS_LIBRARY", "LACS_CLI",
                            "PKG_CONFIG_PATH", "PIP_FIND_LINKS")}
        env["PIP_NO_INDEX"] = "1"
        env.update(extra)
        return env

    def run_venv(self, *args, **env):
        return subprocess.run([self.python, *args], cwd=self.work, env=self.env(**env), capture_output=True,
                              text=True, timeout=300)

    def test_1_installs_offline_into_the_venv(self):
        self.assertEqual(self.install.returncode, 0, self.install.stdout + self.install.stderr)
        where = self.run_venv("-c", "import lacs, lacs.pytest; print(lacs.__file__)")
        self.assertEqual(where.returncode, 0, where.stderr)
        self.assertTrue(where.stdout.strip().startswith(os.path.join(self.venv, "lib")), where.stdout)

    def test_2_finds_the_build_tree_it_was_installed_from(self):
        version = self.run_venv("-m", "lacs", "version")
        self.assertEqual(version.returncode, 0, version.stderr)
        self.assertIn(f"library  {os.path.join(ROOT, 'build', 'liblacs.so')} (the build tree of {ROOT}, which this "
                      "package was installed from)", version.stdout)
        self.assertIn(f"vectors  {os.path.join(ROOT, 'vectors', 'core')}", version.stdout)
        run = self.run_venv("-m", "lacs", "check", "--impl", f"python:{KERNELS}:run_correct", "--op", "delta_rule",
                            "--tier", "fp32", "--quiet")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertEqual(run.stdout.splitlines()[-1], "conforms to lacs spec 1.4 for ops delta_rule in tiers fp32")
        wrong = self.run_venv("-m", "lacs", "check", "--impl", f"python:{KERNELS}:run_wrong", "--op", "delta_rule",
                              "--tier", "fp32", "--quiet")
        self.assertEqual(wrong.returncode, 1, wrong.stdout + wrong.stderr)

    def test_3_finds_an_installed_prefix(self):
        prefix = os.path.join(self.tmp, "prefix")
        make = subprocess.run(["make", "-s", "--no-print-directory", "install", f"PREFIX={prefix}",
                               f"BUILD={os.path.relpath(BUILD, ROOT)}"], cwd=ROOT, capture_output=True, text=True,
                              timeout=600)
        self.assertEqual(make.returncode, 0, make.stdout + make.stderr)
        for how, env in (("LACS_PREFIX", {"LACS_PREFIX": prefix}),
                         ("pkg-config lacs", {"PKG_CONFIG_PATH": os.path.join(prefix, "lib", "pkgconfig")})):
            version = self.run_venv("-m", "lacs", "version", **env)
            self.assertEqual(version.returncode, 0, version.stderr)
            self.assertIn(f"library  {prefix}/lib/liblacs.so (the prefix {prefix}, from {how})", version.stdout)
            self.assertIn(f"program  {prefix}/bin/lacs", version.stdout)
            self.assertIn(f"vectors  {prefix}/share/lacs/vectors/core", version.stdout)
            run = self.run_venv("-m", "lacs", "check", "--impl", f"python:{KERNELS}:run_correct", "--op", "delta_rule",
                                "--tier", "bf16", "--quiet", **env)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertIn(f"{prefix}/share/lacs/vectors/core", self.run_venv("-m", "lacs", "list", "--op", "dyt",
                                                                             **env).stdout)

    def test_4_pytest_finds_the_plugin_by_its_entry_point(self):
        project = os.path.join(self.tmp, "project")
        shutil.copytree(os.path.join(ROOT, "examples", "pytest_project"), project,
                        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        run = subprocess.run([self.python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--lacs-impl",
                              "python:my_kernels.py:run_correct", "--lacs-op", "delta_rule", "--lacs-tier", "fp32",
                              "-k", "lacs or correct"], cwd=project, env=self.env(), capture_output=True, text=True,
                             timeout=300)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("conforms to lacs spec 1.4 for ops delta_rule in tiers fp32", run.stdout)
        self.assertRegex(run.stdout, r"\b44 passed\b")  # 22 cases through the plugin, 22 through the helper


if __name__ == "__main__":
    unittest.main()
