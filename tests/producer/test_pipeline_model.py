"""The pipeline driven at random against a model of what it promises.

Each run adds records (keys that repeat, keys never seen, explicit hash keys), builds calls,
answers them in any order with any mix of successes, throttles, failures and unknown
outcomes, abandons a few (their senders cancelled), lets time pass, changes the shard map,
and finally answers everything until nothing is left. After every step it checks what the
pipeline must never break:

- every record settles exactly once, and is never both settled and in flight;
- what waits, is in flight and is settled adds up to what was added;
- a Kinesis record carries exactly its entries, in order (deaggregated, key and data);
- with ``preserve_order`` no key has two Kinesis records in flight, and a key's records are
  acknowledged in the order they were added (without it a retry may land after a later record
  of its key, as the option's documentation says);
- with a TTL, no record is sent past its deadline;
- the lanes' summary the pipeline keeps between looks (the oldest head, the first lane
  that may send) is what a pass over the lanes finds;
- in the end every record is settled, and nothing is counted as waiting: after answering
  everything, or after a drain (a cancelled close) with the calls still out answered or
  abandoned.

A failure names its seed; the run is deterministic for it.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from kinesis_actors import errors
from kinesis_actors.producer import PutResult, ShardRateLimiter
from kinesis_actors.producer._pipeline import Call, Entry, Pipeline
from kinesis_actors.records import (
    MAX_HASH_KEY,
    HashRange,
    ShardMap,
    deaggregate,
    effective_hash_key,
)

THIRD = MAX_HASH_KEY // 3
TWO_SHARDS = ShardMap(
    [HashRange("s0", 0, MAX_HASH_KEY // 2), HashRange("s1", MAX_HASH_KEY // 2 + 1, MAX_HASH_KEY)]
)
THREE_SHARDS = ShardMap(
    [
        HashRange("s2", 0, THIRD),
        HashRange("s3", THIRD + 1, 2 * THIRD),
        HashRange("s4", 2 * THIRD + 1, MAX_HASH_KEY),
    ]
)
# Per-record answers: most succeed.
_ANSWERS = ["ok"] * 6 + ["throttled", "internal", "denied", "neither"]


class Model:
    """A pipeline, the records given to it, and what came back."""

    def __init__(self, seed: int, *, preserve_order: bool, ttl: float | None) -> None:
        self.rng = random.Random(seed)
        self.preserve_order = preserve_order
        self.ttl = ttl
        self.pipeline = Pipeline(
            # Paced in a third of the runs: lanes then wait for their shard's tokens.
            limiter=(
                ShardRateLimiter(records_per_s=200, bytes_per_s=20_000)
                if self.rng.random() < 0.33
                else ShardRateLimiter(records_per_s=1e9, bytes_per_s=1e12)
            ),
            settle=self._settle,
            aggregation=self.rng.random() < 0.8,
            aggregation_max_bytes=self.rng.choice([300, 2_000, 51_200]),
            max_call_records=self.rng.choice([3, 50, 500]),
            max_call_bytes=self.rng.choice([4_000, 5 * 1024 * 1024]),
            full_records=self.rng.choice([1, 20, 10_000]),
            full_bytes=5 * 1024 * 1024,
            linger=0.05,
            preserve_order=preserve_order,
            retry_base=0.01,
            retry_max=0.1,
            record_ttl=ttl,
            max_unknown_outcomes=2,
            rng=random.Random(seed),
        )
        self.pipeline.set_shard_map(TWO_SHARDS)
        self.now = 0.0
        self.added: dict[int, Entry] = {}  # id(entry) -> entry
        self.order: dict[int, int] = {}  # id(entry) -> when it was added
        self.settled: dict[int, tuple[PutResult | None, BaseException | None]] = {}
        self.acknowledged: dict[Any, list[int]] = {}  # domain key -> add order, as acknowledged
        self.in_flight: list[Call] = []
        self.fresh = 0

    def _settle(self, entry: Entry, result: PutResult | None, error: BaseException | None) -> None:
        key = id(entry)
        assert key in self.added, "settled a record never added"
        assert key not in self.settled, "a record settled twice"
        assert not any(entry in part.entries for call in self.in_flight for part in call.parts), (
            "a record settled while still in flight"
        )
        self.settled[key] = (result, error)
        if error is None:
            domain = (entry.partition_key, entry.explicit_hash_key)
            self.acknowledged.setdefault(domain, []).append(self.order[key])

    # -- steps -----------------------------------------------------------------------------

    def add(self) -> None:
        rng = self.rng
        for _ in range(rng.randint(1, 12)):
            roll = rng.random()
            if roll < 0.6:
                key = f"key-{rng.randint(0, 7)}"
            else:
                self.fresh += 1
                key = f"new-{self.fresh}"
            explicit = str(rng.randint(0, MAX_HASH_KEY)) if rng.random() < 0.1 else None
            data = f"{key}/{len(self.added)}".encode() * rng.choice([1, 1, 1, 5, 40])
            hashed = effective_hash_key(key, explicit)
            size = len(data) + len(key)
            entry = Entry(data, key, explicit, hashed, size, self.now)
            self.order[id(entry)] = len(self.added)
            self.added[id(entry)] = entry
            self.pipeline.add_many([entry], self.now)

    def build(self, *, force: bool | None = None) -> bool:
        if force is None:
            force = self.rng.random() < 0.7
        call = self.pipeline.next_call(self.now, force=force)
        if call is None:
            return False
        self._check_call(call)
        self.in_flight.append(call)
        return True

    def answer(self, *, all_ok: bool = False) -> None:
        call = self.in_flight.pop(self.rng.randrange(len(self.in_flight)))
        roll = 1.0 if all_ok else self.rng.random()
        if roll < 0.03:  # its sender cancelled: the outcome will never be known
            self.pipeline.abandon(call, errors.ProducerClosedError("abandoned"))
        elif roll < 0.05:
            self.pipeline.fail(call, errors.ServiceError("unavailable", code="x"), self.now)
        elif roll < 0.1:
            self.pipeline.unknown(call, errors.TransportError("reset"), self.now)
        else:
            results = [self._result(part, all_ok) for part in call.parts]
            self.pipeline.complete(call, results, self.now)

    def _result(self, part: Any, all_ok: bool) -> Any:
        answer = "ok" if all_ok else self.rng.choice(_ANSWERS)
        if answer == "ok":
            return {"ShardId": part.lane, "SequenceNumber": str(self.rng.randrange(10**9))}
        if answer == "throttled":
            return {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "x"}
        if answer == "internal":
            return {"ErrorCode": "InternalFailure", "ErrorMessage": "x"}
        if answer == "denied":
            return {"ErrorCode": "KMSAccessDeniedException", "ErrorMessage": "x"}
        return {}

    def step(self) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.35:
            self.add()
        elif roll < 0.6:
            self.build()
        elif roll < 0.85 and self.in_flight:
            self.answer()
        elif roll < 0.97:
            self.now += rng.choice([0.001, 0.01, 0.05, 0.2])
        else:
            # None: the stream places records itself (one lane, nothing predicted)
            self.pipeline.set_shard_map(rng.choice([TWO_SHARDS, THREE_SHARDS, None]))
        self.check()

    def stop(self) -> None:
        """A cancelled close: drain, then each call still out is answered or abandoned (its
        sender cancelled), as an abort does. Every record must settle, the drained ones with
        the drain's error."""
        drained = errors.ProducerClosedError("drained")
        waiting = self.pipeline.pending_records
        self.pipeline.drain(drained)
        self.check()
        while self.in_flight:
            if self.rng.random() < 0.5:
                self.pipeline.abandon(self.in_flight.pop(), errors.ProducerClosedError("cut"))
            else:
                self.answer()
            self.check()
        assert len(self.settled) == len(self.added), "a record was never settled"
        failed_by_drain = [error for _, error in self.settled.values() if error is drained]
        assert len(failed_by_drain) >= waiting
        pipeline = self.pipeline
        assert pipeline.pending_records == pipeline.ready_records == pipeline.ready_bytes == 0

    def finish(self) -> None:
        """Answer everything with success until nothing is left (retries included)."""
        for _ in range(10_000):
            if self.in_flight:
                self.answer(all_ok=True)
            elif not self.build(force=True):
                if not self.pipeline.pending_records:
                    break
                wake = self.pipeline.next_wakeup(self.now, force=True)
                assert wake is not None, "records wait with nothing to wake them"
                self.now = wake
            self.check()
        assert len(self.settled) == len(self.added), "a record was never settled"
        pipeline = self.pipeline
        assert pipeline.pending_records == pipeline.ready_records == pipeline.ready_bytes == 0

    # -- what must hold ----------------------------------------------------------------------

    def _check_call(self, call: Call) -> None:
        for part in call.parts:
            entries = part.entries
            if self.ttl is not None:  # never sent once past its deadline (and the sweep's 1 %)
                deadline = self.ttl + max(0.005, self.ttl * 0.01)
                assert all(self.now - entry.enqueued <= deadline for entry in entries)
            if len(entries) == 1 and part.data == entries[0].data:
                continue  # sent as itself
            unpacked = [
                (r.partition_key, r.data) for r in deaggregate(part.data, part.partition_key)
            ]
            assert unpacked == [(e.partition_key, e.data) for e in entries]

    def check(self) -> None:
        flying = [entry for call in self.in_flight for part in call.parts for entry in part.entries]
        assert len({id(entry) for entry in flying}) == len(flying), "a record in flight twice"
        assert not any(id(entry) in self.settled for entry in flying)
        pending = len(self.added) - len(self.settled) - len(flying)
        assert self.pipeline.pending_records == pending
        # What the lanes' summary says (kept between looks) is what a pass over them finds.
        kept = self.pipeline._room._summary
        if kept is not None:
            oldest, first, lanes = self.pipeline._room._summarize()
            assert kept[:2] == (oldest, first), "a stale summary of the lanes"
            assert kept[2] <= lanes, "more lanes counted ready than have ready records"
        assert 0 <= self.pipeline.ready_records <= pending
        if self.preserve_order:
            keys = [
                {(e.partition_key, e.explicit_hash_key) for e in part.entries}
                for call in self.in_flight
                for part in call.parts
            ]
            seen: set[Any] = set()
            for part_keys in keys:
                assert not part_keys & seen, "a key with two Kinesis records in flight"
                seen |= part_keys
            for orders in self.acknowledged.values():
                assert orders == sorted(orders), "a key's records acknowledged out of order"


@pytest.mark.parametrize("preserve_order", [True, False])
@pytest.mark.parametrize("ttl", [None, 0.3])
@pytest.mark.parametrize("seed", range(12))
def test_the_pipeline_keeps_its_promises_under_any_answers(
    seed: int, preserve_order: bool, ttl: float | None
) -> None:
    model = Model(seed, preserve_order=preserve_order, ttl=ttl)
    for _ in range(400):
        model.step()
    model.finish()
    failures = [error for _, error in model.settled.values() if error is not None]
    assert len(failures) < len(model.settled)  # the run acknowledged something
    assert all(isinstance(error, errors.KinesisError) for error in failures)  # typed
    expired = [error for error in failures if isinstance(error, errors.RecordExpiredError)]
    assert bool(expired) == (ttl is not None)  # this much time passes in every run


@pytest.mark.parametrize("preserve_order", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_a_drained_pipeline_settles_every_record_once(seed: int, preserve_order: bool) -> None:
    model = Model(seed, preserve_order=preserve_order, ttl=0.3)
    for _ in range(300):
        model.step()
    model.stop()
