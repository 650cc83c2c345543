"""Lessons from other Kinesis consumers, replayed against the runtime."""

from __future__ import annotations

import anyio
import pytest

from kinesis_actors.runtime import CreditGate, FullPolicy, Mailbox, wait_any

from .helpers import Journal

pytestmark = pytest.mark.anyio

SHARDS = 8
CAPACITY = 2
BOUND = SHARDS * CAPACITY + SHARDS  # every mailbox full, plus one record in each consumer's hand
PER_PHASE = 400


async def test_flink_34071_one_stalled_shard_never_stalls_others() -> None:
    """FLINK-34071: one network thread served many shards and blocked on one full queue.

    Here one reader task serves 8 shards into 8 mailboxes of capacity 2. It takes a credit
    before each read and offers without waiting, so when shard 0's consumer stalls, the other
    7 keep flowing at full rate, the buffered total stays bounded, and shard 0 catches up
    once its consumer resumes.
    """
    gates = [CreditGate(CAPACITY, name=f"shard-{i}") for i in range(SHARDS)]
    # FAIL policy: if a credit ever lied about room, the reader's offer would raise.
    mailboxes = [Mailbox[int](CAPACITY, FullPolicy.FAIL, name=f"shard-{i}") for i in range(SHARDS)]
    consumed = [0] * SHARDS
    in_hand = [0] * SHARDS
    peak = 0
    stall_shard_0 = anyio.Event()
    resume_shard_0 = anyio.Event()
    journal = Journal()

    def check_bound() -> None:
        nonlocal peak
        total = sum(len(m) for m in mailboxes) + sum(in_hand)
        total += sum(gate.credits.outstanding for gate in gates)
        peak = max(peak, total)
        assert total <= BOUND

    async def reader() -> None:
        """One task, all shards: it never awaits a mailbox, only 'any shard has demand'."""
        sequence = [0] * SHARDS
        while True:
            progressed = False
            for shard, gate in enumerate(gates):
                if not gate.try_acquire():
                    continue  # no demand from this shard: serve the others
                await anyio.lowlevel.checkpoint()  # the network read
                gate.delivered()
                mailboxes[shard].send_nowait(sequence[shard])
                sequence[shard] += 1
                progressed = True
                check_bound()
            if not progressed:
                await wait_any(gates)

    async def consumer(shard: int) -> None:
        async for record in mailboxes[shard]:
            in_hand[shard] += 1
            gates[shard].consumed()  # taken: request one more
            check_bound()
            assert record == consumed[shard], "records arrive in order, none lost"
            if shard == 0 and stall_shard_0.is_set() and not resume_shard_0.is_set():
                journal.add("stalled")
                await resume_shard_0.wait()
            await anyio.lowlevel.checkpoint()  # the processing
            in_hand[shard] -= 1
            consumed[shard] += 1
            journal.add("consumed", shard)

    def everyone(shards: range, at_least: int) -> bool:
        return all(consumed[s] >= at_least for s in shards)

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        for shard in range(SHARDS):
            tg.start_soon(consumer, shard)

        # Phase 1, the baseline: all 8 shards flowing.
        started = anyio.current_time()
        await journal.wait_for(lambda: everyone(range(SHARDS), PER_PHASE))
        baseline = PER_PHASE / (anyio.current_time() - started)

        # Phase 2: shard 0's consumer stalls, holding a record, for as long as we like.
        stall_shard_0.set()
        await journal.wait_count("stalled", 1)
        stalled_at = consumed[0]
        mark = max(consumed[1:])
        started = anyio.current_time()
        await journal.wait_for(lambda: everyone(range(1, SHARDS), mark + PER_PHASE))
        during_stall = PER_PHASE / (anyio.current_time() - started)
        assert consumed[0] == stalled_at, "the stalled consumer made no progress"
        assert len(mailboxes[0]) + gates[0].credits.outstanding <= CAPACITY
        # Full rate: the 7 healthy shards are no slower than when all 8 shared the reader.
        assert during_stall >= 0.5 * baseline, (during_stall, baseline)

        # Phase 3: shard 0 resumes and catches up with where the others had got to.
        target = max(consumed[1:])
        resume_shard_0.set()
        await journal.wait_for(lambda: consumed[0] >= target)
        tg.cancel_scope.cancel()

    assert peak <= BOUND
    assert all(mailbox.statistics().peak_depth <= CAPACITY for mailbox in mailboxes)
    assert all(mailbox.statistics().rejected == 0 for mailbox in mailboxes)
