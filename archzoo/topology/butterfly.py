"""Butterfly with radix m: all-reduce by generalised recursive doubling.

The exchange pattern of recursive doubling (Thakur, Rabenseifner & Gropp 2005, "Optimization
of Collective Communication Operations in MPICH"), generalised to radix m; docs/topologies.md
gives the counts. Write ranks in base m.

- N = m^K: in round k = 0..K−1 each rank exchanges its partial sum with the m−1 ranks that
  differ from it only in digit k, and adds the m values of that group in digit order (so every
  rank ends with bitwise the same sum). K = log_m N rounds; every rank sends (m−1)·log_m N
  messages of the full size — m^K·(m−1)·K in all, not fewer than a tree's, but every rank
  ends with the result after K rounds instead of 2K.
- Other N — the *fold–unfold butterfly* (the pre-/post-step of Thakur, Rabenseifner & Gropp's
  recursive doubling, generalised to radix m): let P = m^⌊log_m N⌋ be the largest power of m
  ≤ N and K = log_m P. Excess rank P + i (0 ≤ i < N − P) folds into core rank i mod P (one
  message), the P core ranks run the butterfly above, and each core rank sends the result back
  to its excess ranks (unfold). With e_r = |{P + r, 2P + r, …} ∩ [0, N)| ≤ m−1 excess ranks of
  core rank r:
    core rank r:   sends (m−1)·K + e_r messages in K + 2·[e_r > 0] rounds,
    excess rank:   sends 1 message in 2 rounds (fold, unfold),
  K + 2 rounds overall and P·(m−1)·K + 2(N − P) messages in all.
- broadcast, reduce and gather use the k-nomial tree with the same radix m (a butterfly with one
  source *is* that tree — the all-reduce overlays one such tree per source), so their counts
  are the tree's (:mod:`archzoo.topology.tree`).

A butterfly does not survive a failed process: every rank's result needs every rank's data,
so here a dead peer makes its partners' waits raise, naming it, like every other schedule.
"""

from __future__ import annotations

import numpy as np

from archzoo.topology.base import divide, floor_log
from archzoo.topology.tree import TreeTopology


class ButterflyTopology(TreeTopology):
    """Fold–unfold radix-m butterfly all-reduce; tree broadcast/reduce/gather."""

    name = "butterfly"

    def _all_reduce(self, flat: np.ndarray, mean: bool) -> None:
        n, m, r = self.size, self.fanout, self.rank
        big_k = floor_log(n, m)
        p = m ** big_k
        if r >= p:  # excess rank: fold into the core partner, get the result back at the end
            partner = (r - p) % p
            self._step("all_reduce fold", sends=[(flat, partner)])
            self._step("all_reduce unfold", recvs=[(flat, partner)])
            return
        extras = list(range(p + r, n, p))
        if extras:
            bufs = [np.empty_like(flat) for _ in extras]
            self._step("all_reduce fold",
                       recvs=list(zip(bufs, extras, strict=True)))
            for b in bufs:
                np.add(flat, b, out=flat)
        for k in range(big_k):
            s = m ** k
            base = r - ((r // s) % m) * s
            group = [base + j * s for j in range(m)]
            got = {g: np.empty_like(flat) for g in group if g != r}
            self._step(f"all_reduce round {k}", recvs=[(b, g) for g, b in got.items()],
                       sends=[(flat, g) for g in got])
            vals = [flat if g == r else got[g] for g in group]
            total = vals[0].copy()
            for x in vals[1:]:
                np.add(total, x, out=total)
            flat[...] = total
        if mean:
            divide(flat, n)
        if extras:
            self._step("all_reduce unfold", sends=[(flat, e) for e in extras])
