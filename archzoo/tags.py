"""Every message tag, in one place.

A tag names one stream of messages: messages between two ranks on one tag arrive in order,
and a receive posted on a tag only matches sends on that tag (docs/index.md, the Transport
contract). Each number that archzoo's runs and tools send on is defined here and nowhere
else; tests/test_tags.py checks that the numbers are distinct and the blocks do not
overlap, and that docs/index.md lists them. This module imports only the standard
library, so every layer may use it (the harness re-exports the architectures' tags as
``archzoo.harness.TAG_*``).
"""

from __future__ import annotations

from dataclasses import dataclass

# --- the architectures' streams (archzoo/harness/, archzoo/architectures/) -----------------
TAG_CONTROL = 1
"""JSON control messages: HELLO/WELCOME/ABORT at start-up, statistics, STOP, BYE, FINAL
(every architecture; archzoo/harness/protocol.py)."""
TAG_PARAMS = 2
"""Parameters from the learner to the actors: the star's ``StarPublisher`` and the async
broadcast down a tree of relaying actors (IMPALA, Ape-X, Gorila)."""
TAG_UNROLL = 3
"""Unrolls from an actor to the learner (IMPALA, GA3C)."""
TAG_TRANSITIONS = 4
"""Transitions and their priorities from an actor to a replay shard (Ape-X, Gorila)."""
TAG_SAMPLE_REQUEST = 5
"""A learner's sample request to a replay shard (Ape-X, Gorila)."""
TAG_SAMPLE_REPLY = 6
"""A replay shard's sampled batch back to the learner (Ape-X, Gorila)."""
TAG_TOPOLOGY = 7
"""The synchronous collectives of ``--topology`` other than star: the sync parameter
broadcast, A2C's all-reduce, GALA's ring."""
TAG_FINAL_PARAMS = 8
"""A parameter-server shard's final slice to shard 0, for the run directory's policy
(A3C, Gorila; archzoo/harness/ps_roles.py)."""
TAG_INFER_REQUEST = 9
"""An actor's request for actions to the inference server (GA3C, SEED RL)."""
TAG_INFER_REPLY = 10
"""The inference server's actions back to the actor (GA3C, SEED RL)."""
TAG_ACTIONS = 11
"""On resume, the learner sends a sync actor its action log (and the actor replies)
(IMPALA, SEED RL; actors/action_log.py)."""

SAMPLE_TAGS = (TAG_SAMPLE_REQUEST, TAG_SAMPLE_REPLY)
"""A learner's two streams to a replay shard."""
REPLAY_TAGS = (TAG_TRANSITIONS, *SAMPLE_TAGS)
"""A replay server's three streams."""


@dataclass(frozen=True)
class PSTags:
    """The three tags of one parameter server's streams."""

    push: int
    request: int
    reply: int

    @classmethod
    def at(cls, base: int) -> PSTags:
        return cls(base, base + 1, base + 2)

    def numbers(self) -> tuple[int, int, int]:
        return (self.push, self.request, self.reply)


PS_TAGS = PSTags.at(20)
"""The parameter server of A3C/A2C and Gorila: gradients pushed to the shards (20), pull
requests (21) and the shards' replies (22) (paramserver/)."""

# --- defaults and tools outside a run --------------------------------------------------------
TAG_COLLECTIVE_DEFAULT = 100
"""A topology made without its own tag (``make_topology``, ``Topology``): tests and
scripts; a run always passes ``TAG_TOPOLOGY``."""
TAG_BENCH_COMM = 300
"""``archzoo bench comm``: the first of its tags, one per topology measured (300, 301, ...,
one for each of archzoo.config.TOPOLOGIES)."""
TAG_ASYNC_BROADCAST_DEFAULT = 310
"""An ``AsyncTreeBroadcast`` made without its own tag (a run passes ``TAG_PARAMS``)."""


def blocks(topologies: int) -> dict[str, tuple[int, ...]]:
    """Every tag above by name, as the numbers it takes: one for a single tag, three for a
    parameter server's block, ``topologies`` for ``archzoo bench comm``'s (the number of
    topologies it measures at most)."""
    out: dict[str, tuple[int, ...]] = {
        name: (value,) for name, value in globals().items()
        if name.startswith("TAG_") and isinstance(value, int)}
    out["PS_TAGS"] = PS_TAGS.numbers()
    out["TAG_BENCH_COMM"] = tuple(range(TAG_BENCH_COMM, TAG_BENCH_COMM + topologies))
    return out
