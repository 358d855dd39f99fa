"""Running ``run`` as several processes (``torchrun``): which process does which work, and the few
collectives that keep them in step.

``torchrun`` sets ``RANK``/``WORLD_SIZE`` (read by :class:`~imagenet_zsl.features.distributed.
RankInfo`, as extraction does); with ``WORLD_SIZE`` > 1 the ranks join a gloo process group, with
one process there is none and every collective is the identity. Rank 0 does what writes the
run's shared files (checks, features, class lists, records of skipped cells, summary, manifest)
and hands its results to the others (:meth:`Ranks.first`); models and cells are spread over the
ranks by :func:`owner` and :func:`cell_phases`, a pure function of the plan's order and the world
size, so every rank agrees without talking, and a cell's bytes never depend on who computed it.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.distributed import RankInfo

T = TypeVar("T")
#: how long a rank waits for the others at a collective: one rank may train a large model or
#: evaluate the "All" split for hours while the others wait (a failed rank ends the job anyway:
#: torchrun stops every process when one fails)
WAIT = datetime.timedelta(days=7)
#: how long the processes wait for each other to join: environment variables left over from a
#: cluster script (WORLD_SIZE=2 with one process started) must end in an error, not a week's wait
JOIN_WAIT = datetime.timedelta(minutes=10)


class PeerFailed(UserInputError):
    """Rank 0 stopped the run with a one-line error (it prints it; the others only exit)."""


@dataclass
class Ranks:
    """This process's place in the job and its collectives (identities in a single process)."""

    info: RankInfo
    dist: Any = None
    #: the process group of the collectives (its timeout is :data:`WAIT`); None: the default group
    group: Any = None

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def world(self) -> int:
        return self.info.world_size

    @property
    def primary(self) -> bool:
        return self.info.rank == 0

    def barrier(self) -> None:
        if self.dist is not None:
            with _peer_failure():
                self.dist.barrier(group=self.group)

    def gather(self, obj: T) -> list[T]:
        """Every rank's ``obj`` (picklable), in rank order, on every rank."""
        if self.dist is None:
            return [obj]
        objects: list[Any] = [None] * self.world
        with _peer_failure():
            self.dist.all_gather_object(objects, obj, group=self.group)
        return objects

    def first(self, work: Callable[[], T]) -> T:
        """``work()`` on rank 0, its result (or its error) handed to every rank."""
        if self.dist is None:
            return work()
        payload: list[Any] = [None]
        if self.primary:
            try:
                payload = [("ok", work())]
            except UserInputError as err:
                self.dist.broadcast_object_list([("error", str(err))], src=0, group=self.group)
                raise
            except BaseException as err:
                self.dist.broadcast_object_list(
                    [("bug", f"{type(err).__name__}: {err}")], src=0, group=self.group
                )
                raise
        with _peer_failure():
            self.dist.broadcast_object_list(payload, src=0, group=self.group)
        status, value = payload[0]
        if status == "error":
            raise PeerFailed(value)
        if status == "bug":
            raise RuntimeError(f"rank 0 failed: {value}")
        return value

    def echo(self, echo: Callable[[str], None]) -> Callable[[str], None]:
        """``echo`` for this rank: rank 0's lines as they are, the others' prefixed ``[rank R]``."""
        if self.primary:
            return echo
        return lambda line: echo(f"[rank {self.rank}] {line}")


@contextlib.contextmanager
def _peer_failure() -> Iterator[None]:
    """A collective that fails because another process stopped (its own error line already
    printed, e.g. a full disk) ends this one quietly too, instead of with a gloo traceback."""
    try:
        yield
    except RuntimeError as err:
        raise PeerFailed(f"another process of the job stopped; see its error ({err})") from err


@contextlib.contextmanager
def job_ranks() -> Iterator[Ranks]:
    """This process's :class:`Ranks`: a gloo process group under torchrun (``WORLD_SIZE`` > 1,
    rendezvous through torchrun's ``MASTER_ADDR``/``MASTER_PORT``), none otherwise."""
    info = RankInfo.from_env()
    if info.world_size == 1:
        yield Ranks(info)
        return
    import torch.distributed as dist  # deferred: only under torchrun: a plain run needs no torch here

    try:
        dist.init_process_group("gloo", rank=info.rank, world_size=info.world_size, timeout=JOIN_WAIT)
        group = dist.new_group(backend="gloo", timeout=WAIT)
    except (ValueError, RuntimeError) as err:  # e.g. WORLD_SIZE set by hand, no MASTER_ADDR
        raise UserInputError(
            f"WORLD_SIZE={info.world_size}: cannot join the other processes within "
            f"{JOIN_WAIT.seconds // 60} minutes ({' '.join(str(err).split())}); start several "
            "processes with torchrun, or unset WORLD_SIZE for one"
        ) from err
    try:
        yield Ranks(info, dist, group)
    finally:
        dist.destroy_process_group()


def owner(index: int, world: int) -> int:
    """The rank owning the ``index``-th model of the plan (it trains the model)."""
    return index % world


#: a pending cell: (model, split, ...) (only the model is read here)
Cell = tuple[Any, ...]


def cell_phases(pending: Sequence[Cell], models: Sequence[str], world: int) -> list[list[list[Cell]]]:
    """The pending cells as phases of per-rank lists, ``phases[p][rank]``, each in the given order.

    Phase 0: each model's first pending cell, on the rank owning the model (:func:`owner`); it
    fills the run's shared search cache with the model's seen and validation searches. Phase 1,
    after a barrier: the other cells round-robin over the ranks; they find those searches in the
    cache. A pure function of its arguments, so every rank computes the same phases."""
    first: dict[str, Cell] = {}
    for cell in pending:
        first.setdefault(cell[0], cell)
    rank_of = {model: owner(i, world) for i, model in enumerate(models)}
    phase0: list[list[Cell]] = [[] for _ in range(world)]
    for cell in first.values():
        phase0[rank_of[cell[0]]].append(cell)
    rest = [cell for cell in pending if first[cell[0]] is not cell]
    return [phase0, [rest[r::world] for r in range(world)]]
