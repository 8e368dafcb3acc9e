"""The learning benchmark that docs/results.md is generated from: ``archzoo bench learning``
(archzoo/benchlearn/), runnable from a checkout as a script.

    python benchmarks/bench_learning.py tune && python benchmarks/bench_learning.py choose
    python benchmarks/bench_learning.py grid          # every reported cell not run yet
    python benchmarks/bench_learning.py page          # docs/results.md and its figures
    python benchmarks/bench_learning.py status        # cells done and left, hours
"""

import sys

from archzoo.benchlearn import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
