"""A soak of a consumer group on a hostile lease table: what it writes, loses and repeats.

Worker processes (``tests/consumer/_group_worker.py``) share a stream through a lease table
behind the fault proxy, which loses UpdateItem replies (the write lands, the reply does
not), stalls requests and throttles them at random. One worker's wall clock runs 30 s fast.
The group starts at ``LATEST``; once every shard is being read a writer puts rounds of keyed
records, while a chaos loop SIGKILLs workers and restarts them under the same id, SIGSTOPs
and resumes them, stops them with SIGTERM and starts them again, and stops one again as
soon as it has opened (it leaves with the handoffs it just asked for). Then the faults stop,
everything written must arrive, and the logs are judged:

* ``lost``: written, never delivered (must be 0);
* ``duplicates``: deliveries beyond the first, by cause - after a crash (the first reader was
  SIGKILLed or SIGSTOPped later, or a later delivery came from a SIGSTOPped worker within a
  failover time of its resumption: a read it had in flight, delivered before it saw its
  lease expired - the KCL has the same window), after a lease loss (its reading ended
  ``expired`` or ``taken``), or ``unexplained``;
* ``worker_deaths``: processes that ended on their own (an error, not our signal);
* ``max_overlap``: the longest time two workers delivered one shard's records interleaved;
* ``order_violations``: a key's rounds going backwards within one reading of a shard;
* ``handoffs_asked`` / ``_given`` / ``_withdrawn``: summed over the clean stops' lease
  statistics, the graceful handoffs the run went through (a SIGKILLed worker's are lost).

The suite runs a short form (``tests/consumer/test_lease_soak_local.py``); the long one runs
by hand, and prints its report::

    python -m tests.consumer.lease_soak --seconds 300 --workers 3
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import signal
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio

from kinesis_actors import LocalDynamoDB, LocalKinesis
from tests.faults import Delay, FaultProxy, LoseReply, Reply, Request

from .group import Group, Writer, keys_per_shard
from .helpers import shard_map


@dataclass(frozen=True)
class SoakSettings:
    """How long, how many, how hostile."""

    seconds: float = 40.0
    workers: int = 3
    shards: int = 6
    keys_per_shard: int = 3
    write_pause: float = 0.2
    lost_replies: float = 0.05  # of UpdateItem requests: landed, reply lost
    stalls: float = 0.03  # of every request: held 0.2-1 s
    throttles: float = 0.03  # of every request: ProvisionedThroughputExceeded
    chaos_every: float = 5.0
    # () for faults of the table only
    actions: tuple[str, ...] = ("kill", "pause", "term", "leave")
    skew: float = 30.0  # the first worker's clock, seconds fast
    seed: int = 0
    leases: dict[str, float] = field(
        default_factory=lambda: {
            "failover_time": 2.5,
            "renew_interval": 0.5,
            "take_interval": 0.25,
            "shard_sync_interval": 1.0,
        }
    )


@dataclass
class SoakReport:
    """What the soak measured (see the module's doc)."""

    seconds: float = 0.0
    written: int = 0
    delivered: int = 0
    lost: int = 0
    deliveries: int = 0
    duplicates_after_crash: int = 0
    duplicates_after_lease_loss: int = 0
    duplicates_unexplained: int = 0
    worker_deaths: int = 0
    death_codes: list[int] = field(default_factory=list)
    max_overlap: float = 0.0
    order_violations: int = 0
    # Summed over the clean stops' lease statistics: the handoff paths the run exercised.
    handoffs_asked: int = 0
    handoffs_given: int = 0
    handoffs_withdrawn: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    faults: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        return json.dumps({**asdict(self), "actions": dict(self.actions)}, sort_keys=True)


class _Chaos:
    """Decides the proxy's faults and the chaos loop's actions, from one seeded generator."""

    def __init__(self, settings: SoakSettings) -> None:
        self.settings = settings
        self.rng = random.Random(settings.seed)
        self.on = True

    def decide(self, request: Request) -> LoseReply | Delay | Reply | None:
        if not self.on:
            return None
        roll = self.rng.random()
        s = self.settings
        if request.target == "UpdateItem" and roll < s.lost_replies:
            return LoseReply()
        roll = self.rng.random()
        if roll < s.stalls:
            return Delay(self.rng.uniform(0.2, 1.0))
        if roll < s.stalls + s.throttles:
            return Reply.error("ProvisionedThroughputExceededException", "injected", 400)
        return None


@dataclass
class _Incarnation:
    worker: str
    number: int
    killed_at: float | None = None
    paused: list[tuple[float, float]] = field(default_factory=list)


class Workers:
    """The group's processes, each worker id's incarnations, and what happened to them."""

    def __init__(self, group: Group, ids: list[str], skew: float) -> None:
        self.group = group
        self.ids = ids
        self.skew = skew
        self.incarnations: dict[str, list[_Incarnation]] = defaultdict(list)
        self.deaths = 0
        self.death_codes: list[int] = []  # exit codes of the deaths, to tell them apart
        self.signalled: set[int] = set()

    def start(self, worker: str) -> None:
        # The first worker's clock runs fast in every incarnation; every other worker runs
        # on trio.
        index = self.ids.index(worker)
        self.group.extra["clock_skew"] = self.skew if index == 0 else 0.0
        self.group.extra["backend"] = "trio" if index % 2 else "asyncio"
        self.group.start(worker)
        self.incarnations[worker].append(_Incarnation(worker, len(self.incarnations[worker])))

    def current(self, worker: str) -> _Incarnation:
        return self.incarnations[worker][-1]

    async def leave_at_once(self, worker: str) -> None:
        """Stop and start ``worker``, then stop the new process as soon as it is ready (and
        start it again): it leaves with the handoffs it asked for on opening still pending,
        and withdraws them."""
        await self.stop_and_restart(worker)
        await self.stop_and_restart(worker)

    def check(self) -> None:
        """A process that ended without our signal died: count it, start it again."""
        for worker in self.ids:
            process = self.group.processes[worker]
            if process.poll() is not None and process.pid not in self.signalled:
                self.deaths += 1
                self.death_codes.append(process.returncode)
                self.start(worker)

    async def kill_and_restart(self, worker: str) -> None:
        self.signalled.add(self.group.processes[worker].pid)
        self.current(worker).killed_at = self.group.kill(worker)
        await anyio.sleep(0.5)
        self.start(worker)

    async def pause(self, worker: str, seconds: float) -> None:
        process = self.group.processes[worker]
        process.send_signal(signal.SIGSTOP)
        began = time.time()
        await anyio.sleep(seconds)
        process.send_signal(signal.SIGCONT)
        self.current(worker).paused.append((began, time.time()))

    async def running(self, worker: str) -> None:
        """Wait until ``worker``'s current process said it is ready (its SIGTERM handler is
        set up), so that a SIGTERM means a clean stop."""
        number = len(self.incarnations[worker])

        def ready() -> bool:
            readies = [e for e in self.group.events() if e["w"] == worker and e["ev"] == "ready"]
            return len(readies) >= number

        with anyio.fail_after(60):
            await self.group.wait_for(ready)

    async def stop_and_restart(self, worker: str) -> None:
        await self.running(worker)
        self.signalled.add(self.group.processes[worker].pid)
        with anyio.fail_after(30):
            code = await self.group.terminate(worker)
        if code != 0:
            self.deaths += 1
            self.death_codes.append(code)
        self.start(worker)


def _read_log(path: Path, worker: str) -> list[dict[str, Any]]:
    """A worker id's log lines, each tagged with its incarnation (a ``ready`` starts one)."""
    out: list[dict[str, Any]] = []
    number = -1
    for n, line in enumerate(path.read_text().splitlines()):
        if not line.endswith("}"):
            continue  # a SIGKILL may cut the last line
        event = json.loads(line)
        if event["ev"] == "ready":
            number += 1
        event.update(n=n, i=max(number, 0), w=worker)
        out.append(event)
    return out


def expected(written: set[str], records: list[dict[str, Any]]) -> set[str]:
    """What must arrive of ``written``: a shard's rounds from the first one any reader of it
    delivered. The group starts at ``LATEST``, so a round written before a shard's first
    iterator was taken is not the group's to read (the writer starts once every shard's
    reading began, which is a little before its iterator)."""
    shard_of: dict[str, str] = {}
    first_round: dict[str, int] = {}
    for event in records:
        key, round_ = event["data"].rsplit(":", 1)
        shard_of[key] = event["shard"]
        shard = event["shard"]
        first_round[shard] = min(first_round.get(shard, int(round_)), int(round_))
    out = set()
    for data in written:
        key, round_ = data.rsplit(":", 1)
        shard = shard_of.get(key)
        if shard is None or int(round_) >= first_round[shard]:
            out.add(data)
    return out


def judge(
    events: list[dict[str, Any]],
    written: set[str],
    incarnations: dict[str, list[_Incarnation]],
    report: SoakReport,
    failover: float,
) -> None:
    """Fill ``report`` from the workers' logs (see the module's doc)."""
    records = [e for e in events if e["ev"] == "record"]
    report.deliveries = len(records)
    delivered = {e["data"] for e in records}
    written = expected(written, records)
    report.written, report.delivered = len(written), len(written & delivered)
    report.lost = len(written - delivered)
    for event in events:
        if event["ev"] == "exit" and event.get("leases"):
            for name in ("handoffs_asked", "handoffs_given", "handoffs_withdrawn"):
                setattr(report, name, getattr(report, name) + event["leases"][name])
    ends: dict[tuple[str, int, str], list[tuple[float, str]]] = defaultdict(list)
    for event in events:
        if event["ev"] == "stop":
            ends[(event["w"], event["i"], event["shard"])].append((event["t"], event["reason"]))
    first: dict[tuple[str, str, int], dict[str, Any]] = {}
    counts: Counter[tuple[str, str, int]] = Counter()
    for event in sorted(records, key=lambda e: e["t"]):
        record = (event["shard"], event["seq"], event["sub"])
        counts[record] += 1
        first.setdefault(record, event)
    later: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for event in records:
        record = (event["shard"], event["seq"], event["sub"])
        if event is not first[record]:
            later[record].append(event)

    def stale(event: dict[str, Any]) -> bool:
        life = incarnations[event["w"]][event["i"]]
        return any(end <= event["t"] <= end + failover for _, end in life.paused)

    for record, count in counts.items():
        if count == 1:
            continue
        origin = first[record]
        life = incarnations[origin["w"]][origin["i"]]
        crashed = (
            (life.killed_at is not None and life.killed_at >= origin["t"])
            or any(end >= origin["t"] for _, end in life.paused)
            or any(stale(event) for event in later[record])
        )
        lease_lost = any(
            t >= origin["t"] and reason in ("expired", "taken")
            for t, reason in ends[(origin["w"], origin["i"], origin["shard"])]
        )
        extra = count - 1
        if crashed:
            report.duplicates_after_crash += extra
        elif lease_lost:
            report.duplicates_after_lease_loss += extra
        else:
            report.duplicates_unexplained += extra
    # Two readings of one shard delivering interleaved: one still delivering after the next
    # one began. A reading is a worker incarnation's ``start`` of the shard to its next one.
    reading_of: dict[tuple[str, int, str], int] = Counter()
    first_of: dict[tuple[str, int, str, int], float] = {}
    last_of: dict[tuple[str, int, str, int], float] = {}
    for event in sorted(events, key=lambda e: (e["w"], e["n"])):
        if event["ev"] == "start":
            reading_of[(event["w"], event["i"], event["shard"])] += 1
        elif event["ev"] == "record":
            place = (event["w"], event["i"], event["shard"])
            reading = (*place, reading_of[place])
            first_of.setdefault(reading, event["t"])
            last_of[reading] = event["t"]
    by_shard: dict[str, list[tuple[str, int, str, int]]] = defaultdict(list)
    for reading in first_of:
        by_shard[reading[2]].append(reading)
    for readings in by_shard.values():
        readings.sort(key=lambda r: first_of[r])
        for a, b in itertools.pairwise(readings):
            report.max_overlap = max(report.max_overlap, last_of[a] - first_of[b])
    # Within one reading (a worker incarnation's start of a shard), each key's rounds rise.
    seen: dict[tuple[str, int, str], dict[str, int]] = {}
    for event in sorted(events, key=lambda e: (e["w"], e["n"])):
        reading = (event["w"], event["i"], event.get("shard", ""))
        if event["ev"] == "start":
            seen[reading] = {}
        elif event["ev"] == "record":
            key, round_ = event["data"].rsplit(":", 1)
            rounds = seen.setdefault(reading, {})
            if int(round_) <= rounds.get(key, -1):
                report.order_violations += 1
            rounds[key] = int(round_)


async def run_soak(
    kinesis: LocalKinesis, dynamodb: LocalDynamoDB, directory: Path, settings: SoakSettings
) -> SoakReport:
    """One soak, bounded by ``settings.seconds`` plus the time to drain (at most 60 s)."""
    report = SoakReport()
    chaos = _Chaos(settings)
    stream = f"soak-{settings.seed}-{int(time.time())}"
    async with kinesis.client(tls=False) as client:
        await client.create_stream(stream, settings.shards)
        keys = keys_per_shard(await shard_map(client, stream), settings.keys_per_shard)
        with FaultProxy(dynamodb.port, chaos.decide) as proxy:
            group = Group(
                kinesis,
                dynamodb,
                stream,
                f"soak-{settings.seed}-{int(time.time())}",
                directory,
                dict(settings.leases),
                {"dynamodb": proxy.endpoint_url, "start": "latest"},
            )
            ids = [f"w{n}" for n in range(1, settings.workers + 1)]
            workers = Workers(group, ids, settings.skew)
            try:
                started = time.time()
                for worker in ids:
                    workers.start(worker)
                with anyio.fail_after(60):  # LATEST: write once every shard is being read
                    await group.wait_for(
                        lambda: (
                            len({e["shard"] for e in group.events() if e["ev"] == "start"})
                            == settings.shards
                        )
                    )
                writer = Writer(client, stream, keys, settings.write_pause)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(writer.run)
                    deadline = started + settings.seconds
                    while True:
                        left = deadline - time.time()
                        await anyio.sleep(max(0.0, min(settings.chaos_every, left)))
                        workers.check()
                        if time.time() >= deadline:
                            break
                        if not settings.actions:
                            continue
                        worker = chaos.rng.choice(ids)
                        action = chaos.rng.choice(settings.actions)
                        report.actions[action] += 1
                        if action == "kill":
                            await workers.kill_and_restart(worker)
                        elif action == "pause":
                            await workers.pause(worker, chaos.rng.uniform(1.0, 4.0))
                        elif action == "leave":
                            await workers.leave_at_once(worker)
                        else:
                            await workers.stop_and_restart(worker)
                    chaos.on = False
                    writer.stopping.set()
                written = writer.written()

                def arrived() -> bool:
                    records = [e for e in group.events() if e["ev"] == "record"]
                    return expected(written, records) <= {e["data"] for e in records}

                with anyio.move_on_after(60):
                    await group.wait_for(arrived)
                workers.check()
                for worker in ids:
                    await workers.running(worker)
                    workers.signalled.add(group.processes[worker].pid)
                    with anyio.fail_after(30):
                        code = await group.terminate(worker)
                    if code != 0:  # long started: it must stop cleanly
                        report.worker_deaths += 1
                        report.death_codes.append(code)
                report.seconds = time.time() - started
            finally:
                group.close()
            report.worker_deaths += workers.deaths
            report.death_codes.extend(workers.death_codes)
            report.faults = dict(proxy.stats.faults)
    events: list[dict[str, Any]] = []
    for worker in ids:
        path = group.log_path(worker)
        if path.exists():
            events.extend(_read_log(path, worker))
    judge(events, written, workers.incarnations, report, settings.leases["failover_time"])
    return report


async def _main(settings: SoakSettings, keep: str | None) -> None:
    with (
        tempfile.TemporaryDirectory() as directory,
        LocalKinesis() as kinesis,
        LocalDynamoDB() as dynamodb,
    ):
        logs = Path(keep) if keep else Path(directory)
        logs.mkdir(parents=True, exist_ok=True)
        report = await run_soak(kinesis, dynamodb, logs, settings)
    print(report.line())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--shards", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", help="a folder to keep the workers' logs in")
    args = parser.parse_args()
    settings = SoakSettings(
        seconds=args.seconds, workers=args.workers, shards=args.shards, seed=args.seed
    )
    anyio.run(_main, settings, args.keep)


if __name__ == "__main__":
    main()
