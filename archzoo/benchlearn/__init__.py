"""``archzoo bench learning``: the learning benchmark that docs/results.md is generated from.

Every architecture on the five MinAtar games at a fixed wall time, two setups each, at
equal resources: ``--actors 2`` with its preset, and one process (``--actors 0``) given the
same cores, the same total envs and the same exploration. Seeds 0–4 are reported; seeds 100
and up choose the presets and are never reported. Each run appends one record (JSON lines)
with its commit, resolved config, versions, machine, threads, metrics rows and read-outs;
the page and its figures are drawn from those records alone, with rliable's statistics.

One module per concern:

- :mod:`~archzoo.benchlearn.protocol`: games, seeds, setups at equal resources, cell order;
- :mod:`~archzoo.benchlearn.store`: the append-only record store;
- :mod:`~archzoo.benchlearn.runner`: one cell: the run, the frozen evaluation, its record;
- :mod:`~archzoo.benchlearn.readouts`: what a record's rows say (final, best, mean, entropy);
- :mod:`~archzoo.benchlearn.tuning`: choosing a preset on the tuning seeds;
- :mod:`~archzoo.benchlearn.stats`: IQM, bootstrap intervals, probability of improvement;
- :mod:`~archzoo.benchlearn.page`: docs/results.md and its figures;
- :mod:`~archzoo.benchlearn.cli`: the commands.
"""

from archzoo.benchlearn.cli import main

__all__ = ["main"]
