"""setup.py: only what pyproject.toml cannot say. The built package records
the lacs source tree it was built from (lacs/_installed.py, SOURCE_TREE), so
that an installed copy finds that tree's build/liblacs.so and vectors when no
prefix is named (lacs/check.py, find_installation)."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py


class build_py_recording_the_source_tree(build_py):
    def run(self):
        super().run()
        tree = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if not os.path.isfile(os.path.join(tree, "include", "lacs", "types.h")):
            tree = None
        target = os.path.join(self.build_lib, "lacs", "_installed.py")
        with open(target, "w", encoding="utf-8") as f:
            f.write('"""Written by setup.py when this copy of lacs was built."""\n\n')
            f.write(f"SOURCE_TREE = {tree!r}\n")


# The egg-info goes under build/, not beside the package: python/ is on PYTHONPATH when lacs runs from the source
# tree, and a python/lacs.egg-info there would register the pytest plugin a second time (its entry point) next to
# `pytest -p lacs.pytest`.
EGG_BASE = os.path.join("build", "egg-info")
os.makedirs(os.path.join(os.path.dirname(os.path.abspath(__file__)), EGG_BASE), exist_ok=True)

setup(cmdclass={"build_py": build_py_recording_the_source_tree}, options={"egg_info": {"egg_base": EGG_BASE}})
