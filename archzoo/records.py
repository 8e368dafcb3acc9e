"""The records a run writes and its ranks exchange, typed: what a leaf's BYE carries, and
the sections of summary.json that every architecture writes.

They are ``TypedDict``s, so they stay the plain dicts that JSON (summary.json) and the
control channel's JSON messages carry, while one place says which keys each has and what
they hold. An architecture adds its own keys to both (``extra``); these are the ones every
run has. tests/test_records.py checks real runs against them.
"""

from __future__ import annotations

from typing import Any, TypedDict

JSONObject = dict[str, object]  # a JSON object as written: its values serialise as JSON
# summary.json: RunSummary's keys and an architecture's own
Summary = dict[str, object]
# policy.pt's metadata (archzoo.builders.policy_meta): how to rebuild the policy
PolicyMeta = dict[str, object]


class ByteTotals(TypedDict):
    """A rank's traffic: its transport's counters (:meth:`Counters.totals`)."""
    msgs_sent: int
    bytes_sent: int
    msgs_recv: int
    bytes_recv: int


class Distribution(TypedDict, total=False):
    """A distribution's summary (:func:`archzoo.runlog.hist_stats`); empty when nothing was
    measured."""
    mean: float
    p50: float
    p90: float
    max: float


class LagSummary(TypedDict):
    """summary.json's ``policy_lag`` (and ``grad_staleness``): in learner versions and in
    seconds since the version was published."""
    versions: Distribution
    seconds: Distribution


class LeafStats(TypedDict, total=False):
    """A leaf role's own statistics (``stats`` of :meth:`archzoo.harness.roles.LeafLink.
    on_stop`): its time breakdown in seconds; an actor also its env steps, episodes, the
    parameter versions it loaded (``params``) and its exploration ``epsilon``; a learner
    its ``updates`` or gradient ``steps``; a parameter-server shard its counters (``ps``),
    a replay rank its memory's (``replay``)."""
    timing: dict[str, float]
    env_steps: int
    episodes: int
    params: dict[str, int | float | None]  # None: no parent (the tree's root)
    epsilon: float
    steps: int
    updates: int
    ps: dict[str, int]
    replay: dict[str, int]


class ByeStats(LeafStats):
    """What a leaf reports in its BYE (:class:`archzoo.harness.roles.LeafLink`): its
    :class:`LeafStats` (the time breakdown gets ``wait``) and its traffic."""
    bytes: ByteTotals


class DeadActor(TypedDict):
    """One entry of summary.json's ``dead_actors``: when (seconds into the run), during
    what the root noticed, and the error that told it."""
    time_s: float
    during: str
    error: str


class Place(TypedDict):
    """Where a rank runs (archzoo/harness/placement.py): host, network namespace (None:
    the machine's own), pid, archzoo version."""
    host: str
    netns: str | None
    pid: int
    archzoo: str


class RunSummary(TypedDict):
    """The keys of summary.json that every run writes (:func:`archzoo.harness.finish.
    run_summary`); architectures add theirs next to them."""
    arch: str
    env: str
    backend: str
    launcher: str
    topology: str
    topology_applied: str
    mode: str
    world_size: int
    actors: int
    envs_per_actor: int
    device: str
    seed: int
    solved: bool
    stop_reason: str | None
    target_return: float | None
    time_to_target_s: float | None
    env_steps_to_target: int | None
    startup_s: float | None
    wall_s: float
    final_mean_return: float | None
    eval_mean_return: float | None
    episodes: int
    env_steps: int
    learner_updates: int
    fps: float
    policy_lag_mean: float | None
    policy_lag: LagSummary
    grad_staleness: LagSummary
    learner_stats: dict[str, float]
    bytes_sent: int
    bytes_recv: int
    bytes_sent_per_env_step: float
    time_breakdown_s: dict[str, dict[str, float]]
    hosts_by_rank: dict[str, Any]  # rank -> Place (Any: tests/test_records.py holds names)
    torch_threads: int
