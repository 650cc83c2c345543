"""How the lease protocol runs: :class:`LeaseConfig`, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass

from .._validate import check_positive, check_type
from ..errors import ConfigError

__all__ = ["MIN_FAILOVER_TIME", "MIN_INTERVAL", "LeaseConfig"]

#: The shortest ``failover_time`` accepted. A renewal is one conditional UpdateItem, and one
#: whose reply was lost is settled by a consistent GetItem: two DynamoDB round trips plus the
#: client's first backoff (25-50 ms), each round trip 5-20 ms on AWS and 100 ms or more when the
#: table is loaded. Two renewals must fit in a failover time, or a single slow one loses the
#: lease: measured before this bound, 0.05 s lost 59 leases in 3 s and 0.0001 s 140, at
#: 430-480 DynamoDB calls a second, with no error.
MIN_FAILOVER_TIME = 1.0
#: The shortest renewal, take or checkpoint interval accepted: each is a DynamoDB request per
#: lease (renewals) or a Scan of the table (takes), and a round must end before the next.
MIN_INTERVAL = 0.05


@dataclass(frozen=True, slots=True)
class LeaseConfig:
    """The lease protocol's timing and limits. Every option is checked at construction and a
    bad one raises :class:`~kinesis_actors.errors.ConfigError` naming it.

    - ``failover_time`` (10 s, the KCL's ``failoverTimeMillis``): a lease whose counter has not
      changed for this long, on this worker's clock, is expired and may be taken. A worker that
      could not renew a lease for this long drops it itself. At least
      :data:`MIN_FAILOVER_TIME` (1 s: a few DynamoDB round trips, twice).
    - ``renew_interval`` (None: ``failover_time / 3``, the KCL's renewer period): how often
      held leases are renewed. At most ``failover_time / 2``, so that one failed renewal does
      not lose a lease, and at least :data:`MIN_INTERVAL` (50 ms).
    - ``take_interval`` (None: ``failover_time / 6``): how often a take round runs: it takes
      free, expired or (to balance) other workers' leases, follows handoffs, and opens
      children whose parents another worker finished. The two watchers (the lowest live ids)
      Scan the table every other round (every round while they follow a handoff or a gated
      child, and in their first failover time), the other workers about once a failover time (see
      ``docs/leases.md``, "Who lists the table"); a watcher takes an expired lease at the
      moment its listings say it expires, between rounds, so a dead owner's lease is taken
      at most ``failover_time + 2 * take_interval`` after its last renewal: with half the
      renewal interval, ``failover_time + renew_interval`` (13.3 s with the defaults, against
      the KCL's up to ~40 s). The KCL's taker runs every ``2 * failover_time``. At most
      ``failover_time / 2`` and at least :data:`MIN_INTERVAL`.
    - ``shard_sync_interval`` (60 s, the KCL's ``shardSyncIntervalMillis``): how often
      ListShards runs to create leases for new shards (also at start and when a held shard
      ends).
    - ``max_leases_to_steal`` (None: toward the even share; the KCL's
      ``maxLeasesToStealAtOneTime``, whose default is 1): the most leases taken from other
      live workers in one take round, when nothing is free and some hold more than their
      share. The KCL's one a round moves a 1,000-lease group's shares over minutes; unset, a
      worker that joins reaches its share in one round (see ``docs/leases.md``).
    - ``max_leases`` (None: no limit, the KCL's ``maxLeasesForWorker``): the most leases this
      worker holds.
    - ``create_table`` (True): create the table (on-demand billing) when it does not exist;
      False makes a missing table a :class:`~kinesis_actors.leases.LeaseTableError`.
    - ``checkpoint_interval`` (None: with each renewal): the longest a checkpoint noted with
      ``note_checkpoint`` waits before it is written. Writes ride on renewals (one
      conditional UpdateItem renews and checkpoints), so the default costs no extra call; a
      shorter interval writes dirty checkpoints between renewals. Must not exceed
      ``renew_interval``.
    - ``graceful_handoff`` (True, the KCL 3.x's ``isGracefulLeaseHandoffEnabled``): a worker
      that balances the shares asks the owner for a lease through the table (the KCL 3.x's
      ``checkpointOwner``) instead of taking it: the owner stops reading, checkpoints what
      was delivered and committed, and hands it over; the taker resumes exactly there, so a
      rebalance delivers no duplicate. False: take it, as the KCL 2.x does (the owner's
      uncommitted records are delivered again).
    - ``handoff_timeout`` (30 s, the KCL 3.x's ``gracefulLeaseHandoffTimeoutMillis``): how
      long an owner may take to hand a lease over before it hands it over with its last
      checkpoint (and the taker, a failover time later, takes it as before).
    """

    failover_time: float = 10.0
    renew_interval: float | None = None
    take_interval: float | None = None
    shard_sync_interval: float = 60.0
    max_leases_to_steal: int | None = None
    max_leases: int | None = None
    create_table: bool = True
    checkpoint_interval: float | None = None
    graceful_handoff: bool = True
    handoff_timeout: float = 30.0

    def __post_init__(self) -> None:
        check_positive("LeaseConfig.failover_time", self.failover_time)
        if self.failover_time < MIN_FAILOVER_TIME:
            raise ConfigError(
                f"LeaseConfig.failover_time must be at least {MIN_FAILOVER_TIME} s, got "
                f"{self.failover_time!r}: a renewal that settles a lost reply takes a few "
                "DynamoDB round trips, and two renewals must fit in a failover time"
            )
        for option in ("renew_interval", "take_interval", "checkpoint_interval"):
            value = getattr(self, option)
            if value is not None:
                check_positive(f"LeaseConfig.{option}", value)
                if value < MIN_INTERVAL:
                    raise ConfigError(
                        f"LeaseConfig.{option} must be at least {MIN_INTERVAL} s, got "
                        f"{value!r}: each round is a DynamoDB request per lease or a Scan"
                    )
        check_positive("LeaseConfig.shard_sync_interval", self.shard_sync_interval)
        if self.max_leases_to_steal is not None:
            check_positive(
                "LeaseConfig.max_leases_to_steal", self.max_leases_to_steal, integer=True
            )
        if self.max_leases is not None:
            check_positive("LeaseConfig.max_leases", self.max_leases, integer=True)
        check_type("LeaseConfig.create_table", self.create_table, bool, "True or False")
        check_type("LeaseConfig.graceful_handoff", self.graceful_handoff, bool, "True or False")
        check_positive("LeaseConfig.handoff_timeout", self.handoff_timeout)
        half = self.failover_time / 2
        if self.renew_period > half:
            raise ConfigError(
                f"LeaseConfig.renew_interval must be at most failover_time / 2 ({half:g}), "
                f"got {self.renew_interval!r}: one failed renewal would lose every lease"
            )
        if self.take_period > half:
            raise ConfigError(
                f"LeaseConfig.take_interval must be at most failover_time / 2 ({half:g}), "
                f"got {self.take_interval!r}: a dead worker's leases would wait more than "
                "a failover time longer than needed"
            )
        if self.checkpoint_period > self.renew_period:
            raise ConfigError(
                f"LeaseConfig.checkpoint_interval must not exceed renew_interval "
                f"({self.renew_period}), got {self.checkpoint_interval!r}: checkpoints ride "
                "on renewals"
            )

    @property
    def renew_period(self) -> float:
        """``renew_interval``, or its default ``failover_time / 3``."""
        return self.renew_interval if self.renew_interval is not None else self.failover_time / 3

    @property
    def take_period(self) -> float:
        """``take_interval``, or its default ``failover_time / 6``."""
        return self.take_interval if self.take_interval is not None else self.failover_time / 6

    @property
    def checkpoint_period(self) -> float:
        """``checkpoint_interval``, or its default: the renewal period."""
        if self.checkpoint_interval is not None:
            return self.checkpoint_interval
        return self.renew_period
