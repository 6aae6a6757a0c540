"""``python -m fedqr.cli``: the ``fedqr`` command (e.g. ``python -X importtime -m fedqr.cli``)."""

from fedqr.cli import main

main()
