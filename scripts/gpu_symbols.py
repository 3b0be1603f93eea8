"""Which NVML functions the exporter uses this host's libnvidia-ml exports, against the stand-in.

    python scripts/gpu_symbols.py [--library libnvidia-ml.so.1]

Looks each C symbol of ``mirrorwatch.exporter.nvml.versions.SYMBOLS`` up in the real library
(a ctypes/dlsym lookup, as nvidia-ml-py's ``_nvmlGetFunctionPointer`` does), reads the driver
version through ``nvmlInit_v2`` and ``nvmlSystemGetDriverVersion``, picks the stand-in branch of
tests/exporter/nvml_standin for that version (the newest at or below it), and prints one line
per symbol where the two disagree. Exit 0 when they agree, 1 when they differ (the stand-in's
symbol table for that branch is wrong, or the branch is missing from the matrix), 2 when the
library cannot be loaded.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mirrorwatch.exporter.nvml.versions import SYMBOLS
from tests.exporter.nvml_standin.branches import BRANCHES, Branch, release

_VERSION_BUFFER = 80  # NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE


def driver_version(library: ctypes.CDLL) -> str | None:
    try:
        if library.nvmlInit_v2() != 0:
            return None
        buffer = ctypes.create_string_buffer(_VERSION_BUFFER)
        if library.nvmlSystemGetDriverVersion(buffer, ctypes.c_uint(_VERSION_BUFFER)) != 0:
            return None
    except AttributeError:
        return None
    return buffer.value.decode(errors="replace")


def branch_for(version: str) -> Branch | None:
    """The stand-in branch for a driver version: the newest at or below it."""
    try:
        wanted = release(version)
    except ValueError:
        return None
    below = [branch for branch in BRANCHES if branch.release <= wanted]
    return below[-1] if below else None


def compare(exported: set[str], branch: Branch) -> list[str]:
    """One line per symbol the real library and the stand-in disagree on."""
    standin = branch.symbols
    lines = []
    for symbol in SYMBOLS:
        real, stand = symbol in exported, symbol in standin
        if real != stand:
            lines.append(
                f"{symbol}: real library {'has' if real else 'lacks'} it,"
                f" stand-in {branch.name} {'has' if stand else 'lacks'} it"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", default="libnvidia-ml.so.1", help="the NVML library")
    args = parser.parse_args(argv)
    try:
        library = ctypes.CDLL(args.library)
    except OSError as error:
        sys.stderr.write(f"gpu_symbols: --library {args.library} cannot be loaded: {error}\n")
        return 2
    exported = {symbol for symbol in SYMBOLS if hasattr(library, symbol)}
    version = driver_version(library)
    print(f"driver: {version or 'unknown'}")
    print(f"exported: {len(exported)} of the {len(SYMBOLS)} functions the exporter may call")
    for symbol in SYMBOLS:
        if symbol not in exported:
            print(f"  absent: {symbol}")
    branch = None if version is None else branch_for(version)
    if branch is None:
        print("stand-in: no branch of the matrix at or below this driver")
        return 1
    differences = compare(exported, branch)
    print(f"stand-in: {branch.name} ({branch.version}, {branch.header})")
    for line in differences:
        print(f"  differs: {line}")
    print("stand-in agrees" if not differences else f"{len(differences)} difference(s)")
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
