"""Ring: each rank talks to its neighbours r−1 and r+1 (mod N) only.

All-reduce as in Patarasuk & Yuan 2009 ("Bandwidth optimal all-reduce algorithms for clusters
of workstations"); gossip as in GALA (Assran et al., NeurIPS 2019, Algorithm 1). Messages
travel in the direction r → r+1 except in gossip, which uses both neighbours.

- all_reduce: reduce-scatter then all-gather on the flat view split into N chunks whose sizes
  differ by at most one (⌊i·size/N⌋ boundaries, so any size works, 0 included: chunks may be
  empty). In step t of the reduce-scatter rank r sends chunk r−t to r+1 and adds chunk r−t−1
  from r−1; after N−1 steps it owns the total of chunk r+1 (divided by N for the mean), which
  the N−1 steps of the all-gather pass round. 2(N−1) rounds; every rank sends 2(N−1) messages
  of ≈ size/N — what MPI uses for large messages.
- broadcast: a simple chain (not pipelined) root → root+1 → … → root−1: N−1 rounds, each rank
  but the last sends the whole array once; interior ranks take part in 2 rounds, the ends in 1.
- reduce: the chain the other way round, ending at the root: root+1 → root+2 → … → root−1 →
  root, each rank adding its own array to the running sum (N−1 rounds, one full-size message
  per non-root rank).
- gather: the same chain with growing messages: relative rank v sends v blocks (those of
  relative ranks 1..v), N(N−1)/2 blocks in all, N−1 of them into the root.
- gossip_average: one synchronous round — each rank sends its array to both neighbours and
  takes x ← (x_{r−1} + x + x_{r+1})/3; N = 2: x ← (x + x_other)/2; N = 1: no-op. The mixing
  matrix is doubly stochastic, so the mean is preserved and repeated rounds converge to it.
  (PALA's ring is directed and only row-stochastic; the symmetric ring keeps the mean exact.)
"""

from __future__ import annotations

import numpy as np

from archzoo.topology.base import Topology, divide


class RingTopology(Topology):
    """Ring all-reduce, chain broadcast/reduce/gather, neighbour gossip. ``fanout`` unused."""

    name = "ring"

    def _chunks(self, flat: np.ndarray) -> list[np.ndarray]:
        n = self.size
        b = [i * flat.size // n for i in range(n + 1)]
        return [flat[b[i]:b[i + 1]] for i in range(n)]

    def _all_reduce(self, flat: np.ndarray, mean: bool) -> None:
        n, r = self.size, self.rank
        if n == 1:
            return
        left, right = (r - 1) % n, (r + 1) % n
        chunks = self._chunks(flat)
        tmp = np.empty(max(c.size for c in chunks), flat.dtype)
        for t in range(n - 1):
            out, into = chunks[(r - t) % n], chunks[(r - t - 1) % n]
            got = tmp[:into.size]
            self._step(f"all_reduce reduce-scatter step {t}", recvs=[(got, left)],
                       sends=[(out, right)])
            np.add(into, got, out=into)
        if mean:
            divide(chunks[(r + 1) % n], n)
        for t in range(n - 1):
            self._step(f"all_reduce all-gather step {t}", recvs=[(chunks[(r - t) % n], left)],
                       sends=[(chunks[(r + 1 - t) % n], right)])

    def _broadcast(self, flat: np.ndarray, root: int) -> None:
        n = self.size
        v = (self.rank - root) % n
        if v > 0:
            self._step(f"broadcast step {v}", recvs=[(flat, (self.rank - 1) % n)])
        if v < n - 1:
            self._step(f"broadcast step {v + 1}", sends=[(flat, (self.rank + 1) % n)])

    def _reduce(self, flat: np.ndarray, root: int, mean: bool) -> None:
        n, r = self.size, self.rank
        v = (r - root) % n
        if n == 1:
            return
        prev, nxt = (r - 1) % n, (r + 1) % n
        if v == 1:
            self._step("reduce step 1", sends=[(flat, nxt)])
            return
        got = np.empty_like(flat)
        self._step(f"reduce step {(v - 1) % n}", recvs=[(got, prev)])
        if v == 0:
            np.add(flat, got, out=flat)
            if mean:
                divide(flat, n)
            return
        np.add(got, flat, out=got)
        self._step(f"reduce step {v}", sends=[(got, nxt)])

    def _gather(self, flat: np.ndarray, root: int) -> np.ndarray | None:
        n, r = self.size, self.rank
        v = (r - root) % n
        prev, nxt = (r - 1) % n, (r + 1) % n
        # rows: relative ranks 1..v here (v > 0); 0..N−1 at the root
        blocks = np.empty((n if v == 0 else v, flat.size), flat.dtype)
        if v == 0:
            blocks[0] = flat
            if n > 1:
                self._step(f"gather step {n - 1}", recvs=[(blocks[1:], prev)])
            return np.roll(blocks, root, axis=0)
        blocks[v - 1] = flat
        if v > 1:
            self._step(f"gather step {v - 1}", recvs=[(blocks[:v - 1], prev)])
        self._step(f"gather step {v}", sends=[(blocks, nxt)])
        return None

    def _gossip_average(self, flat: np.ndarray) -> None:
        n, r = self.size, self.rank
        if n == 1:
            return
        left, right = (r - 1) % n, (r + 1) % n
        if n == 2:
            other = np.empty_like(flat)
            self._step("gossip", recvs=[(other, left)], sends=[(flat, left)])
            flat[...] = (flat + other) / 2
            return
        bl, br = np.empty_like(flat), np.empty_like(flat)
        self._step("gossip", recvs=[(bl, left), (br, right)], sends=[(flat, left), (flat, right)])
        flat[...] = (bl + flat + br) / 3


# -- GALA's measures of agreement (archzoo/architectures/gala.py) --------------------------


def ring_neighbours(n: int) -> int:
    """How many distinct neighbours an agent has on a ring of ``n``: 2, or 1 for two agents,
    or none alone."""
    return min(2, n - 1)


def neighbour_distance(before: np.ndarray, after: np.ndarray, neighbours: int) -> float:
    """‖x − m‖₂: the L2 distance between an agent's parameters x (``before`` a gossip round)
    and the mean m of its ``neighbours`` ring neighbours' x_j, taken from the round's
    average x' = (x + Σ_j x_j)/(k + 1) (``after``; k = ``neighbours``) with no other message:
    x − m = (k + 1)/k · (x − x'). Exact up to the float32 rounding of x'."""
    if neighbours < 1:
        raise ValueError(f"neighbours must be >= 1, got {neighbours}")
    diff = np.asarray(before, np.float64) - np.asarray(after, np.float64)
    return float((neighbours + 1) / neighbours * np.linalg.norm(diff))


def consensus_distance(ring: Topology, x: np.ndarray) -> float | None:
    """On rank 0: max_i ‖x_i − x̄‖ / ‖x̄‖ over every rank's ``x`` (GALA's consensus distance
    of the agents' parameters; after a gossip round on a ring of 2 or 3 it is 0 up to
    rounding, since every rank then holds the mean); None elsewhere. Collective: every rank
    calls it."""
    xs = ring.gather(x, 0)
    if xs is None:
        return None
    mean = xs.astype(np.float64).mean(0)
    return float(np.linalg.norm(xs - mean, axis=1).max() / max(np.linalg.norm(mean), 1e-12))


class NeighbourDistances:
    """A rank's :func:`neighbour_distance` at each gossip round it measures, for the metrics
    row's ``consensus_distance`` (:meth:`window`: their mean since the last row)."""

    def __init__(self) -> None:
        self.rounds: list[float] = []

    def add(self, before: np.ndarray, after: np.ndarray, size: int) -> None:
        """One round on a ring of ``size``: this rank's parameters ``before`` and ``after``."""
        if size > 1:
            self.rounds.append(neighbour_distance(before, after, ring_neighbours(size)))

    def window(self) -> dict[str, float | None]:
        d, self.rounds = self.rounds, []
        return {"consensus_distance": round(float(np.mean(d)), 6) if d else None}
