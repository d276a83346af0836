"""Ship the project's runbooks, experiments, locustfiles, game-day plans and target profiles
inside the wheel, as `drillbook/shipped/<folder>/`, so that an installed drillbook runs from any
folder. The folders stay at the top of the repository, where people look for them; everything
else about the build is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("runbooks", "experiments", "loadtests", "gamedays", "targets")
LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")


class BuildWithShippedFiles(build_py):
    """build_py that also copies the shipped folders into the package (not for editable
    installs: those find the folders in the source tree)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        root = Path(__file__).resolve().parent
        destination = Path(self.build_lib) / "drillbook" / "shipped"
        for folder in SHIPPED:
            target = destination / folder
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(root / folder, target, ignore=LEFT_OUT)


setup(cmdclass={"build_py": BuildWithShippedFiles})
