"""An architecture's role map: which roles its ranks play, how many of each, and in what
rank order, declared once on its :class:`~archzoo.architectures.Architecture` record.

A :class:`RoleMap` is a tuple of :class:`Role` in rank order. A role's count is a number, a
config field (``"replay_shards"``), a function of the config, or :data:`ACTORS`: as many as
``--actors`` (exactly one role scales so). Everything else follows from it:

- :meth:`RoleMap.world_size` and :meth:`RoleMap.actors_for` (``archzoo.architectures``'
  ``world_size``/``actors_for``, which the launchers use): ``--actors 0`` is one process;
- :meth:`RoleMap.place`: the ranks of each role (a :class:`Placement`), whose
  :meth:`Placement.role` names the ranks in summary.json's time breakdown;
- ``str(role_map)``: the registry's line (``archzoo list``), e.g. ``0 learner; 1..K replay
  shards; then N actors``;
- :func:`play`: every rank's dispatch, from its architecture's ``run(ctx)``, and
  :func:`placement`: the ranks of the others, for a role that talks to them.

No torch here: the CLI lists, parses and validates without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from archzoo.config import RunConfig
    from archzoo.envs import EnvSpec
    from archzoo.harness.protocol import RankContext

ACTORS = "actors"  # a role's count: as many ranks as --actors

# a function takes its architecture's own config class, so its parameter stays untyped
# (a function of an ImpalaConfig is no function of every RunConfig)
Count = int | str | Callable[[Any], int]


@dataclass(frozen=True)
class Role:
    """One role: its ``name`` (summary.json calls its ranks ``name + rank``, e.g.
    ``shard1``), how many ranks play it (``count``: a number, a config field, a function of
    the config, or :data:`ACTORS`), and the registry's words for them (``what``; its
    ``symbol`` stands for a count that is not a number, e.g. ``K``)."""

    name: str
    count: Count = 1
    what: str = ""
    symbol: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.count, int) and self.count != ACTORS and not self.symbol:
            raise ValueError(f"role {self.name!r}: a count of {self.count!r} needs a symbol "
                             "for the registry's text (e.g. symbol='K')")

    @property
    def scales(self) -> bool:
        """Whether this role is the actors': as many ranks as ``--actors``."""
        return self.count == ACTORS

    def ranks(self, cfg: RunConfig) -> int:
        """How many ranks play this role under ``cfg`` (not for the scaling role)."""
        if isinstance(self.count, int):
            return self.count
        if isinstance(self.count, str):
            return int(getattr(cfg, self.count))
        return int(self.count(cfg))

    def words(self, one: bool) -> str:
        return self.what or (self.name if one else f"{self.name}s")


@dataclass(frozen=True)
class Placement:
    """The ranks of each role in a world: ``placement["shard"]`` is the list of the shards'
    ranks, in order (empty where the config gives a role no rank)."""

    ranks: Mapping[str, list[int]]

    def __getitem__(self, name: str) -> list[int]:
        return self.ranks[name]

    def role(self, rank: int) -> str:
        """The role that ``rank`` plays (summary.json's name for it)."""
        for name, ranks in self.ranks.items():
            if rank in ranks:
                return name
        raise ValueError(f"rank {rank} plays no role in {dict(self.ranks)}")

    def index(self, rank: int) -> int:
        """``rank``'s place among the ranks of its role (0 for the first)."""
        return self.ranks[self.role(rank)].index(rank)


class RoleMap(tuple[Role, ...]):
    """The roles of an architecture in rank order; exactly one of them scales with
    ``--actors``."""

    def __new__(cls, *roles: Role) -> RoleMap:
        scaling = [r.name for r in roles if r.scales]
        if len(scaling) != 1:
            raise ValueError(f"a role map needs exactly one role of count ACTORS, got "
                             f"{scaling or 'none'}")
        names = [r.name for r in roles]
        if len(set(names)) != len(names):
            raise ValueError(f"role names repeat in {names}")
        return super().__new__(cls, roles)

    def others(self, cfg: RunConfig) -> int:
        """Ranks that do not scale with ``--actors`` (servers, learners, shards...)."""
        return sum(r.ranks(cfg) for r in self if not r.scales)

    def world_size(self, cfg: RunConfig, actors: int) -> int:
        """Processes for ``actors`` actors; ``--actors 0`` is one process."""
        return self.others(cfg) + actors if actors > 0 else 1

    def actors_for(self, cfg: RunConfig, world_size: int) -> int:
        """Actors in a world of ``world_size`` processes (the inverse of world_size)."""
        return world_size - self.others(cfg)

    def place(self, cfg: RunConfig, world_size: int) -> Placement:
        """Each role's ranks in a world of ``world_size`` processes, in rank order."""
        actors = self.actors_for(cfg, world_size)
        if actors < 1:
            raise ValueError(f"{world_size} processes leave no actor for the roles '{self}'")
        ranks, start = {}, 0
        for r in self:
            n = actors if r.scales else r.ranks(cfg)
            ranks[r.name] = list(range(start, start + n))
            start += n
        return Placement(ranks)

    def __str__(self) -> str:
        """The registry's line, each role's ranks: ``0 learner; 1..K replay shards; then N
        actors``. ``at`` is where the next role starts: a number, a symbol (right after
        the first role, when its count is one), or unknown ('then')."""
        parts: list[str] = []
        at: int | str | None = 0
        for r in self:
            words = r.words(r.count == 1)
            if isinstance(r.count, int):
                n = r.count
                if isinstance(at, int):
                    parts.append(f"{at} {words}" if n == 1 else f"{at}..{at + n - 1} {words}")
                    at += n
                else:
                    parts.append(f"{at} {words}" if at and n == 1 else
                                 f"then {words}" if n == 1 else f"then {n} {words}")
                    at = None
                continue
            s = "N" if r.scales else r.symbol
            parts.append(f"0..{s}-1 {words}" if at == 0 else f"1..{s} {words}" if at == 1
                         else f"{at}..{s}+{at - 1} {words}" if isinstance(at, int)
                         else f"then {s} {words}")
            at = s if at == 0 else None
        return "; ".join(parts)

    def __repr__(self) -> str:
        return f"RoleMap({', '.join(map(repr, self))})"


STAR = RoleMap(Role("learner"), Role("actor", ACTORS))  # IMPALA's: rank 0 learns


def placement(ctx: RankContext[RunConfig]) -> Placement:
    """Each role's ranks in ``ctx``'s world, from its architecture's role map."""
    from archzoo.architectures import get

    return get(ctx.cfg.arch).roles.place(ctx.cfg, ctx.world_size)


Cfg = TypeVar("Cfg", bound="RunConfig")
S = TypeVar("S")  # what a role returns: the summary on the deciding rank, else None
RoleFn = Callable[["RankContext[Cfg]", "EnvSpec"], S]


def play(ctx: RankContext[Cfg], single: RoleFn[Cfg, S] | None,
         **roles: RoleFn[Cfg, S]) -> S:
    """Every rank's dispatch: ``single(ctx, spec)`` when it is alone (``--actors 0``), else
    ``roles[name](ctx, spec)`` for the role its rank plays in the role map (which ranks
    play the others: :func:`placement`). Returns what that returns (the summary, on the
    deciding rank)."""
    from archzoo.builders import env_spec

    spec = env_spec(ctx.cfg)
    if ctx.world_size == 1 and single is not None:
        return single(ctx, spec)
    place = placement(ctx)
    if set(roles) != set(place.ranks):
        raise ValueError(f"{ctx.cfg.arch}: play() got the roles {sorted(roles)}, its role "
                         f"map has {sorted(place.ranks)}")
    return roles[place.role(ctx.rank)](ctx, spec)
