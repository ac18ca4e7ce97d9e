"""``python -m streams.cli``: the ``clingate`` command line."""

from streams.cli import main

main()
