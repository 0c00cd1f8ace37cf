"""The ``tsattn`` command line from Python: the console script ``tsattn`` and ``python -m tsattn``
run the CLI binary that ships in the wheel (``tsattn/bin/tsattn``), with the same subcommands
(run, precompile, warm, cache, env)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from . import _library


def cli_path() -> str:
    """The tsattn executable: next to the package, else the build tree of the checkout this package
    runs from. RuntimeError naming both places when neither has it."""
    beside = Path(__file__).resolve().parent / "bin" / "tsattn"
    root = _library.repo_root()
    candidates = [beside] + ([root / "build" / "tsattn"] if root is not None else [])
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise RuntimeError(
        "tsattn: the tsattn executable was not found. Looked in:\n  - "
        + "\n  - ".join(str(p) for p in candidates)
        + "\nInstall the tsattn wheel, or build the CLI (cmake --build build --target tsattn_cli)."
    )


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Replaces this process with the CLI, so its exit code and signals are the command's own."""
    try:
        path = cli_path()
    except RuntimeError as e:
        print(e, file=sys.stderr)
        sys.exit(3)  # the CLI's exit code for a broken environment
    args = list(sys.argv[1:] if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [path] + args)
