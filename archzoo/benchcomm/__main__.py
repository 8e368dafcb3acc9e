"""``python -m archzoo.benchcomm ARGS``: as ``archzoo bench comm ARGS`` (the ranks of a job
run it with ``--worker``)."""

import sys

from archzoo.benchcomm.cli import main

sys.exit(main(sys.argv[1:]))
