"""Messages and rounds per rank by the formulas of each schedule (docs/topologies.md), written
independently of the schedules so that tests can hold them to it.

``expected_counts(name, op, n, fanout, root)[rank] == (messages sent, rounds)``, with
``op`` one of broadcast, reduce, all_reduce, gather, gossip_average. all_reduce has no root:
the tree and star reduce to rank 0 and broadcast from it, so ``root`` is ignored there.
The native topology has no formula (the engine's own schedule): asking for it is a ValueError.
"""

from __future__ import annotations

from archzoo.topology.base import ceil_log, check_fanout, floor_log

COLLECTIVES = ("broadcast", "reduce", "all_reduce", "gather", "gossip_average")
COUNTED = ("star", "tree", "butterfly", "ring")


def _lowest_digit(v: int, m: int, k_max: int) -> int:
    if v == 0:
        return k_max
    k = 0
    while v % m == 0:
        v //= m
        k += 1
    return k


def tree_broadcast_counts(v: int, n: int, m: int) -> tuple[int, int]:
    """k-nomial broadcast, relative rank v: sends Σ_{k<L(v)} min(m−1, ⌊(N−1−v)/m^k⌋) messages,
    in [v>0] + |{k < L(v) : v + m^k < N}| rounds (L(v): lowest non-zero base-m digit of v,
    ⌈log_m N⌉ for the root)."""
    big_l = _lowest_digit(v, m, ceil_log(n, m))
    sent = sum(min(m - 1, (n - 1 - v) // m ** k) for k in range(big_l))
    rounds = int(v > 0) + sum(1 for k in range(big_l) if v + m ** k < n)
    return sent, rounds


def _tree(op: str, n: int, m: int, root: int) -> dict[int, tuple[int, int]]:
    if op == "all_reduce":  # reduce to 0, then broadcast from 0
        root = 0
    out = {}
    for r in range(n):
        v = (r - root) % n
        sent, rounds = tree_broadcast_counts(v, n, m)
        if op == "broadcast":
            out[r] = (sent, rounds)
        elif op in ("reduce", "gather"):  # the same rounds, one message up per non-root
            out[r] = (int(v > 0), rounds)
        else:
            out[r] = (int(v > 0) + sent, 2 * rounds)
    return out


def _butterfly_all_reduce(n: int, m: int) -> dict[int, tuple[int, int]]:
    """Fold–unfold butterfly: P = m^⌊log_m N⌋, K = log_m P; core rank r with e_r excess ranks
    sends (m−1)K + e_r in K + 2[e_r > 0] rounds; an excess rank sends 1 in 2 rounds."""
    big_k = floor_log(n, m)
    p = m ** big_k
    out = {}
    for r in range(n):
        if r >= p:
            out[r] = (1, 2)
        else:
            e = len(range(p + r, n, p))
            out[r] = ((m - 1) * big_k + e, big_k + 2 * int(e > 0))
    return out


def _ring(op: str, n: int, root: int) -> dict[int, tuple[int, int]]:
    if n == 1:
        return {0: (0, 0)}
    out = {}
    for r in range(n):
        v = (r - root) % n
        if op == "all_reduce":
            out[r] = (2 * (n - 1), 2 * (n - 1))
        elif op == "broadcast":  # chain root → … → root−1
            out[r] = (int(v < n - 1), int(v > 0) + int(v < n - 1))
        elif op in ("reduce", "gather"):  # chain root+1 → … → root
            out[r] = (int(v > 0), 1 if v <= 1 else 2)
        else:  # gossip_average
            out[r] = (1 if n == 2 else 2, 1)
    return out


def expected_counts(name: str, op: str, n: int, fanout: int = 2,
                    root: int = 0) -> dict[int, tuple[int, int]]:
    """Per rank: (messages sent, rounds) of collective ``op`` on topology ``name`` over n ranks.

    Closed forms (K = ⌈log_m N⌉, v = relative rank):
      star broadcast: root (N−1, 1), others (0, 1); reduce/gather: root (0, 1), others (1, 1);
      tree broadcast: v sends Σ_{k<L(v)} min(m−1, ⌊(N−1−v)/m^k⌋) — (m−1)K at the root when
        N = m^K, N−1 in all; reduce/gather: 1 per non-root; all_reduce: reduce + broadcast;
      butterfly all_reduce: (m−1)·log_m N per rank in log_m N rounds when N = m^k, else the
        fold–unfold formula (:func:`_butterfly_all_reduce`); other ops: the tree's;
      ring all_reduce: 2(N−1) messages and rounds per rank; broadcast/reduce/gather: chains;
        gossip_average: 2 messages (1 for N = 2) in 1 round.
    """
    if op not in COLLECTIVES:
        raise ValueError(f"unknown collective {op!r} (choose one of {', '.join(COLLECTIVES)})")
    if name not in COUNTED:
        raise ValueError(f"no count formula for topology {name!r} "
                         f"(counted: {', '.join(COUNTED)}; native is the engine's own)")
    m = check_fanout(fanout)
    if n < 1 or not 0 <= root < n:
        raise ValueError(f"need n >= 1 and 0 <= root < n, got n={n}, root={root}")
    if op == "gossip_average" and name != "ring":
        raise ValueError(f"{name} has no gossip schedule (ring only)")
    if name == "ring":
        return _ring(op, n, root)
    if name == "star":
        return _tree(op, n, max(2, n), root)
    if name == "butterfly" and op == "all_reduce":
        return _butterfly_all_reduce(n, m)
    return _tree(op, n, m, root)
