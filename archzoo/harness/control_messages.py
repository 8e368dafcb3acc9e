"""The messages of the control channel (archzoo/comm/control.py), typed.

Each is a JSON object whose ``type`` names its kind; these ``TypedDict``s say which keys
each kind has, so a receiver that tests ``msg["type"]`` knows the rest. The wire format
is the JSON itself: these are plain dicts at run time.

Start-up (archzoo/harness/protocol.py): a leaf's ``hello``, the root's ``welcome`` or
``abort``. During the run: a leaf's ``stats`` (archzoo/harness/stats.py). Stop: the root's
``stop``, each leaf's ``bye``, the root's ``final``.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from archzoo.records import ByeStats, Place


class Hello(TypedDict):
    """Leaf to root at start-up: its message schemas' digests (name -> digest), its place."""
    type: Literal["hello"]
    digests: dict[str, str]
    place: Place


class Welcome(TypedDict):
    """Root to leaf: the handshake passed."""
    type: Literal["welcome"]


class Abort(TypedDict):
    """Root to leaf: the handshake failed, and why."""
    type: Literal["abort"]
    reason: str


class Stats(TypedDict):
    """Leaf to root, every so often: env steps and episode returns since the last report,
    greedy-evaluation returns, the parameter version it acts with (None: it does not act),
    when its first step was taken, its updates' statistics (name -> [sum, count])."""
    type: Literal["stats"]
    steps: int
    returns: list[float]
    eval: list[float]
    version: int | None
    first_step_time: float | None
    learner: NotRequired[dict[str, list[float]]]


class Stop(TypedDict):
    """Root to every leaf: the run stops."""
    type: Literal["stop"]


class Bye(TypedDict):
    """Leaf to root after STOP, once its sends completed: its statistics."""
    type: Literal["bye"]
    stats: ByeStats


class Final(TypedDict):
    """Root to every leaf once it has every BYE; ``barrier``: False when an actor died,
    so the final barrier, which needs every rank, is skipped."""
    type: Literal["final"]
    barrier: bool


ControlMessage = Hello | Welcome | Abort | Stats | Stop | Bye | Final
