"""The stack's locally built images, installed the way their Dockerfiles install them.

No Docker engine runs here, so each image is reproduced as a fresh virtual environment holding
exactly what its Dockerfile's `pip install` lines put there, from a copy of exactly the files its
COPY lines take from the build context: nothing of the test environment leaks in. One
substitution, and only one: `tensorflow[and-cuda]==V` installs as `tensorflow-cpu==V`, the same
release without its 3 GB of CUDA wheels, which a host without a GPU cannot use anyway (the
`and-cuda` extra's own requirements are checked from TensorFlow's metadata instead).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.hang import HANG_SECONDS
from tests.stack import dockerfile

_AND_CUDA = re.compile(r"^tensorflow\[and-cuda\](==.+)$")


def substitute(requirement: str) -> str:
    match = _AND_CUDA.match(requirement)
    return f"tensorflow-cpu{match[1]}" if match else requirement


def copy_context(image: dockerfile.Dockerfile, context: Path, workdir: Path) -> None:
    """The files the image's COPY lines take, laid out under ``workdir`` (its WORKDIR)."""
    for sources, destination in image.copies:
        target = workdir / destination
        for source in sources:
            origin = context / source
            if origin.is_dir():
                shutil.copytree(
                    origin, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
                )
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target / origin.name)


def install(image: dockerfile.Dockerfile, context: Path, into: Path) -> Path:
    """A virtual environment with what ``image`` installs; returns its bin folder."""
    workdir = into / "src"
    workdir.mkdir(parents=True)
    copy_context(image, context, workdir)
    venv = into / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=HANG_SECONDS)
    for requirements in dockerfile.pip_requirements(image):
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-input"]
            + [substitute(r) for r in requirements],
            cwd=workdir,
            check=True,
            timeout=1200,
            capture_output=True,
        )
    return venv / "bin"
