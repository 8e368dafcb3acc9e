"""``archzoo bench comm``: broadcast and all-reduce per topology against the native collective.

    archzoo bench comm [--backend gloo,mpi] [--procs 2,3] [--sizes 1KB,1MiB,16MiB]
                       [--ops all_reduce,broadcast] [--topologies star,tree,butterfly,ring,native]
                       [--fanout 2] [--iters N] [--repeats R] [--timeout S] [--out DIR]
                       [--link loopback,netns:1gbit]

For each (link, backend, N) the parent (no torch import) starts one job of N ranks
(:func:`archzoo.spawn.run_ranks`). With ``--link netns[:RATE]`` the N ranks are split over
two simulated hosts (:mod:`archzoo.simhosts`; the link shaped to RATE) and started as on two
machines (:mod:`archzoo.multinode`: torchrun per host, or mpiexec with a host file); the table,
the fit and the figure keep each link apart (``gloo over netns:1gbit``).

The parent writes into ``--out`` (default ``bench-comm-<time>/``): ``raw/<backend>-n<N>.json``
(the workers' rows), ``comm.csv``, ``comm.md``, ``fit.json`` and ``comm.png``, and prints the
table and the fit.

One module per concern:

- :mod:`~archzoo.benchcomm.cli`: the flags, the jobs, the outputs (``main``);
- :mod:`~archzoo.benchcomm.measure`: what every rank runs (verified calls, timed turns);
- :mod:`~archzoo.benchcomm.fit`: the α–β model per engine;
- :mod:`~archzoo.benchcomm.report`: rows, comm.csv, comm.md and comm.png.
"""

from archzoo.benchcomm.cli import build_parser, main, parse_size, run, validate
from archzoo.benchcomm.fit import fit_alpha_beta, fit_engines
from archzoo.benchcomm.measure import measure, n_iters, timed_limit
from archzoo.benchcomm.report import build_rows, engine, fmt_size, fmt_time, markdown

__all__ = ["build_parser", "build_rows", "engine", "fit_alpha_beta", "fit_engines", "fmt_size",
           "fmt_time", "main", "markdown", "measure", "n_iters", "parse_size", "run",
           "timed_limit", "validate"]
