"""The actors an asynchronous root still serves: one that dies is dropped, not fatal.

In the asynchronous architectures no rank waits for a particular actor, so a learner,
replay or parameter-server rank can carry on when an actor's process dies (an env crash,
an OOM kill, a pre-empted node), as RLlib's and SEED RL's learners do. The root learns of
the death where it next touches that actor (the engine fails the pending receive or send
with :class:`~archzoo.comm.PeerFailure`); :meth:`Survivors.drop` then logs it once (rank,
time, what the root was doing), forgets the actor in every component that listed it, and
ends the run with :class:`TooFewActors` only when fewer than ``--min-actors`` remain.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import TypeGuard, TypeVar

from archzoo.comm import CommError, PeerFailure
from archzoo.records import DeadActor, JSONObject

T = TypeVar("T")


class TooFewActors(CommError):
    """Fewer actors alive than ``--min-actors``: the run cannot go on."""


class Survivors:
    """The live actors of a root; ``forget`` callbacks remove a dead one from components
    (an Inbox, a parameter publisher, a replay client) when it is dropped."""

    def __init__(self, rank: int, actors: Iterable[int], min_actors: int,
                 elapsed: Callable[[], float] | None = None) -> None:
        """``elapsed``: the run's clock (the Monitor's), for when an actor was lost."""
        self.rank = rank
        self.live = list(actors)
        self.min_actors = min_actors
        self.dead: dict[int, DeadActor] = {}
        t0 = time.time()
        self.elapsed = elapsed or (lambda: time.time() - t0)
        self._forget: list[Callable[[int], object]] = []

    def on_drop(self, forget: Callable[[int], object]) -> None:
        self._forget.append(forget)

    def is_actor(self, peer: object) -> TypeGuard[int]:
        return isinstance(peer, int) and (peer in self.live or peer in self.dead)

    def drop(self, error: PeerFailure, during: str) -> None:
        """Forget the actor ``error`` names; re-raise if it is no actor of this root, or
        raise :class:`TooFewActors` when too few remain."""
        peer = error.peer
        if not self.is_actor(peer):
            raise error
        if peer in self.dead:
            return
        self.live.remove(peer)
        self.dead[peer] = {"time_s": round(self.elapsed(), 3), "during": during,
                           "error": str(error)}
        print(f"archzoo: rank {self.rank}: actor rank {peer} is gone after "
              f"{self.dead[peer]['time_s']:.1f}s, during {during} ({error}); "
              f"{len(self.live)} actors go on", file=sys.stderr, flush=True)
        for forget in self._forget:
            forget(peer)
        if len(self.live) < self.min_actors:  # 0: never (a rank that does not decide)
            raise TooFewActors(f"rank {self.rank}: {len(self.live)} actors left "
                               f"(--min-actors {self.min_actors}); dead: "
                               f"{', '.join(map(str, self.dead))}")

    def guard(self, step: Callable[[], T], during: str) -> T | None:
        """Run ``step``; if an actor died during it, drop that actor and return None."""
        try:
            return step()
        except PeerFailure as e:
            self.drop(e, during)
            return None

    def summary(self) -> JSONObject:
        """summary.json's ``dead_actors``: rank -> when, during what, the error."""
        return {"dead_actors": {str(r): d for r, d in self.dead.items()},
                "live_actors": len(self.live), "min_actors": self.min_actors}
