"""docs/runtime.md's fragments, run: a mailbox, a weighted holding mailbox, a supervisor, a
group of one unwrapped at an API edge, and the blocking facade."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import ClassVar

import anyio

from kinesis_actors.runtime import (
    Actor,
    ActorContext,
    ActorRef,
    Backoff,
    BlockingRuntime,
    ChildSpec,
    DeadLetter,
    FullPolicy,
    Mailbox,
    Restart,
    Strategy,
    Supervisor,
    unwrap_sole,
)

Record = str


@dataclass
class Entry:
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


def weight(entry: Entry) -> int:
    return entry.size


def hook(letter: DeadLetter[Record]) -> None:
    print(f"dead letter: {letter.item!r} ({letter.reason.value})")


async def mailboxes() -> None:
    x = "record"
    # [mailbox]
    mailbox = Mailbox[Record](capacity=64, policy=FullPolicy.BLOCK, name="shard-7", on_drop=hook)
    await mailbox.send(x)  # applies the policy; BLOCK waits for room
    accepted = mailbox.try_send(x)  # never waits: False when full
    mailbox.send_nowait(x)  # never waits; MailboxFull (a WouldBlock) where try_send says False
    mailbox.send_control(x)  # priority lane, delivered before any data
    item = await mailbox.receive()  # or: async for item in mailbox
    mailbox.close()
    mailbox.purge()  # what is still queued goes to on_drop, never lost in silence
    stats = mailbox.statistics()  # a frozen MailboxStats, like every statistics()
    # [/mailbox]
    print(f"mailbox: accepted={accepted}, first out {item!r}, {stats.received} received")

    entries = [Entry(b"x" * 100) for _ in range(5)]
    entry = Entry(b"y" * 200)
    # [weighted]
    queue = Mailbox[Entry](10_000, max_weight=8 * 1024 * 1024, hold=True, name="producer")
    queue.try_send(entry, weight=entry.size)  # or: await queue.send(entry, entry.size)
    queue.try_send_many(entries, 0, len(entries), weight)  # a run of them while they fit: how many
    entry = queue.receive_nowait()  # still holds its slot and weight...
    queue.release(1, entry.size)  # ...until its record was acknowledged
    print(queue.occupied, queue.weight, queue.senders_waiting, queue.longest_wait())
    # [/weighted]


class Processor(Actor[int]):
    total: ClassVar[int] = 0
    finished: ClassVar[anyio.Event]

    async def handle(self, ctx: ActorContext[int], message: int) -> None:
        Processor.total += message
        if message == 10:
            Processor.finished.set()


class Reader(Actor[int]):
    def __init__(self, processor: ActorRef[int]) -> None:
        self.processor = processor

    async def run(self, ctx: ActorContext[int]) -> None:
        for number in range(1, 11):
            await self.processor.send(number)  # returns: a transient child is done


async def supervision() -> None:
    Processor.finished = anyio.Event()
    # [supervisor]
    async with Supervisor(Strategy.REST_FOR_ONE, intensity=(3, 5.0), backoff=Backoff()) as sup:
        processor = await sup.start_child(ChildSpec("processor", Processor, capacity=2))
        await sup.start_child(
            ChildSpec("reader", lambda: Reader(processor), restart=Restart.TRANSIENT)
        )
        # [/supervisor]
        await Processor.finished.wait()
    print(f"supervisor: the processor summed {Processor.total}")


class Owner:
    """An API edge that owns a task group."""

    async def __aenter__(self) -> Owner:
        self.task_group = anyio.create_task_group()
        await self.task_group.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        task_group = self.task_group
        # [unwrap]
        with unwrap_sole():  # a group of one -> that exception, as itself
            await task_group.__aexit__(exc_type, exc, tb)
        # [/unwrap]
        return None


async def edges() -> None:
    try:
        async with Owner():
            settings: dict[str, str] = {}
            print(settings["region"])  # a KeyError inside the task group's block
    except KeyError as caught:
        print(f"unwrap_sole: the block's {caught!r} left as itself")


class Sink(Actor[int]):
    rows: ClassVar[list[int]] = []

    async def handle(self, ctx: ActorContext[int], message: int) -> None:
        Sink.rows.append(message)


def blocking() -> None:
    rows = range(2_500)
    # [blocking]
    with BlockingRuntime(backend="trio", stop_timeout=10) as runtime:
        ref = runtime.start_child(ChildSpec("sink", Sink))
        with runtime.batcher(ref, size=1000) as batch:  # or runtime.send_batch(ref, rows)
            for row in rows:
                batch.send(row)
    # [/blocking]
    print(f"BlockingRuntime: the sink got {len(Sink.rows)} rows")


async def main() -> None:
    await mailboxes()
    await supervision()
    await edges()


anyio.run(main)
blocking()
