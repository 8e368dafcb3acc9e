"""k-nomial tree with fan-out m, and the star as its one-round special case.

The binomial tree of Thakur, Rabenseifner & Gropp 2005 ("Optimization of Collective
Communication Operations in MPICH") generalised to fan-out m; docs/topologies.md gives the
counts. Ranks are relabelled relative to the root, ``v = (rank - root) mod N``, and written in
base m. With K = ⌈log_m N⌉:

- broadcast, rounds k = K−1, …, 0 (stride s = m^k): every rank holding the data (v ≡ 0 mod
  m·s) sends it to the m−1 new ranks v + j·s < N (j = 1..m−1). Rank v > 0 receives once, from
  its parent v − (v mod m^(L+1)) in round L(v) = position of its lowest non-zero digit.
  N is reached in ⌈log_m N⌉ rounds with N−1 messages in all; rank v sends
  Σ_{k<L(v)} min(m−1, ⌊(N−1−v)/m^k⌋) messages, so the root sends (m−1)⌈log_m N⌉ when N = m^K
  and at most that otherwise (a tree spreads the load; it does not cut the total).
- reduce: the same tree reversed, rounds k = 0, …, K−1: each rank adds its children's partial
  sums to its own and sends the result to its parent (N−1 messages of the full size).
- all_reduce: reduce to rank 0, then broadcast from rank 0 (2K rounds, 2(N−1) messages).
- gather: the reduce tree carrying concatenated blocks. The subtree of v is the contiguous
  relative range [v, v + min(m^L(v), N − v)), so v's one message to its parent holds
  min(m^L(v), N−v) blocks of ``array.nbytes`` each; the root receives N−1 blocks in (m−1)K
  messages at most, and Σ_v min(m^L(v), N−v) blocks travel in all.

Star: the root exchanges with every other rank directly, i.e. this
tree with m = N: one round, the root sends (broadcast) or receives (reduce, gather) N−1
messages; all_reduce = reduce + broadcast in two rounds.
"""

from __future__ import annotations

import numpy as np

from archzoo.topology.base import Topology, ceil_log, divide


def lowest_digit(v: int, m: int, k_max: int) -> int:
    """Position of the lowest non-zero base-m digit of v (k_max for v = 0): the round in which
    v receives in the k-nomial broadcast."""
    if v == 0:
        return k_max
    k = 0
    while v % m == 0:
        v //= m
        k += 1
    return k


class TreeTopology(Topology):
    """k-nomial tree with fan-out m = ``fanout`` (see the module docstring for the schedule)."""

    name = "tree"

    def _radix(self) -> int:
        return self.fanout

    def _abs(self, v: int, root: int) -> int:
        return (v + root) % self.size

    def _broadcast(self, flat: np.ndarray, root: int) -> None:
        n, m = self.size, self._radix()
        v = (self.rank - root) % n
        for k in reversed(range(ceil_log(n, m))):
            s = m ** k
            if v % (m * s) == 0:  # holds the data: send to the m−1 new ranks of this round
                kids = [v + j * s for j in range(1, m) if v + j * s < n]
                self._step(f"broadcast round {k}",
                           sends=[(flat, self._abs(c, root)) for c in kids])
            elif v % s == 0:  # lowest non-zero digit is k: receive from the parent now
                parent = v - v % (m * s)
                self._step(f"broadcast round {k}", recvs=[(flat, self._abs(parent, root))])

    def _reduce(self, flat: np.ndarray, root: int, mean: bool) -> None:
        n, m = self.size, self._radix()
        v = (self.rank - root) % n
        acc = flat if v == 0 else None  # non-roots keep their array: accumulate in a copy
        for k in range(ceil_log(n, m)):
            s = m ** k
            if v % (m * s) == 0:
                kids = [v + j * s for j in range(1, m) if v + j * s < n]
                if not kids:
                    continue
                bufs = [np.empty_like(flat) for _ in kids]
                self._step(f"reduce round {k}",
                           recvs=[(b, self._abs(c, root)) for b, c in zip(bufs, kids, strict=True)])
                if acc is None:
                    acc = flat.copy()
                for b in bufs:
                    np.add(acc, b, out=acc)
            elif v % s == 0:
                parent = v - v % (m * s)
                self._step(f"reduce round {k}",
                           sends=[(flat if acc is None else acc, self._abs(parent, root))])
                return
        if v == 0 and mean:
            divide(flat, n)

    def _all_reduce(self, flat: np.ndarray, mean: bool) -> None:
        self._reduce(flat, 0, mean)
        self._broadcast(flat, 0)

    def _gather(self, flat: np.ndarray, root: int) -> np.ndarray | None:
        n, m = self.size, self._radix()
        big_k = ceil_log(n, m)
        v = (self.rank - root) % n
        blocks = np.empty((min(m ** lowest_digit(v, m, big_k), n - v), flat.size), flat.dtype)
        blocks[0] = flat  # row i holds relative rank v + i
        for k in range(big_k):
            s = m ** k
            if v % (m * s) == 0:
                kids = [v + j * s for j in range(1, m) if v + j * s < n]
                self._step(f"gather round {k}", recvs=[
                    (blocks[c - v:c - v + min(s, n - c)], self._abs(c, root)) for c in kids])
            elif v % s == 0:
                parent = v - v % (m * s)
                self._step(f"gather round {k}", sends=[(blocks, self._abs(parent, root))])
                return None
        return np.roll(blocks, root, axis=0)  # relative order -> rank order


class StarTopology(TreeTopology):
    """Star: the root exchanges with every other rank directly (the tree with m = N).

    ``fanout`` is validated but not used. Counts: broadcast — root sends N−1, one round each;
    reduce/gather — every non-root sends 1, one round each; all_reduce (root 0) — two rounds.
    """

    name = "star"

    def _radix(self) -> int:
        return max(2, self.size)
