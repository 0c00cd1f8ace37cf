"""``python -m tsattn ...``: the tsattn command line (see _cli)."""

from ._cli import main

main()
