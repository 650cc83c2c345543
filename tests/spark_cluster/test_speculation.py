"""Speculative execution: a second attempt of a task reads the same range, so nothing is lost or
duplicated.

Spark never launches a speculative copy on a host that runs an attempt of the task, so this
runs on a standalone cluster of two one-core workers with their own host names (see
``_cluster.py``). One attempt of one shard's task is slow: the fault proxy holds its first
GetRecords. The other shard's task ends, the slow one passes ``multiplier x median`` and Spark
starts a copy on the other host; the two attempts read the same range, one wins, the other is
killed, and every record arrives once.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from kinesis_actors import LocalKinesis
from tests.boto import create_stream
from tests.faults import Delay, Fault, FaultProxy, Request, Rewrite
from tests.spark_cluster._cluster import Child, StandaloneCluster, clean_env

pytestmark = pytest.mark.local_kinesis

HOLD = 20.0
"""Seconds the held attempt's first GetRecords waits: far past the other attempt's whole read,
and inside the client's 30 s ``read_timeout`` (the attempt has had its GetShardIterator
answered, so the client's 3 s bound on attempts before first contact no longer applies)."""


class HoldFirstRangeRead:
    """Holds one executor attempt of ``shard``'s task: the first GetRecords made with an
    iterator from an executor's GetShardIterator of the shard.

    The driver plans before the tasks read: its probe asks for a TRIM_HORIZON iterator, then
    the anchor an AT_TIMESTAMP one, so the shard's GetShardIterator calls after its first
    AT_TIMESTAMP one are the tasks'. Their answers are read on the way back to learn the
    tasks' iterators. The GetRecords is held rather than the GetShardIterator: a fresh Python
    worker's client has not yet been answered, and bounds such an attempt at 3 s and retries
    (that retry would pass unheld). Whichever attempt asks first is held: under load the
    original's Python worker can start so late that Spark's copy asks first, and then the
    original wins and the copy is killed, which checks the same thing."""

    def __init__(self, shard: str) -> None:
        self.shard = shard
        self.planned = False
        self.held = 0
        self.log: list[str] = []
        self._iterators: set[str] = set()
        self._lock = threading.Lock()

    def _learn(self, body: bytes) -> bytes:
        iterator = json.loads(body).get("ShardIterator")
        with self._lock:
            if isinstance(iterator, str):
                self._iterators.add(iterator)
        return body

    def __call__(self, request: Request) -> Fault:
        if request.target == "GetRecords":
            with self._lock:
                if request.json().get("ShardIterator") in self._iterators and not self.held:
                    self.held += 1
                    self.log.append(f"{time.monotonic():.3f} held a GetRecords")
                    return Delay(HOLD)
            return None
        if request.target != "GetShardIterator":
            return None
        body = request.json()
        kind = str(body.get("ShardIteratorType"))
        with self._lock:
            self.log.append(f"{time.monotonic():.3f} {body.get('ShardId')} {kind}")
            if body.get("ShardId") != self.shard:
                return None
            if kind == "AT_TIMESTAMP":
                self.planned = True
                return None
            if self.planned:
                return Rewrite(self._learn)
        return None


@pytest.mark.slow
def test_a_speculative_copy_of_a_task_loses_and_duplicates_nothing(
    cluster: StandaloneCluster, local_kinesis: LocalKinesis, stream_name: str, tmp_path: Path
) -> None:
    kinesis = create_stream(local_kinesis, stream_name, 2)
    shards = [s["ShardId"] for s in kinesis.list_shards(StreamName=stream_name)["Shards"]]
    for start in range(0, 400, 100):
        answer = kinesis.put_records(
            StreamName=stream_name,
            Records=[
                {"Data": b"r%04d" % i, "PartitionKey": f"key-{i % 17}"}
                for i in range(start, start + 100)
            ],
        )
        assert answer["FailedRecordCount"] == 0
    hold = HoldFirstRangeRead(shards[0])
    with FaultProxy(local_kinesis.plain_port, hold) as proxy:
        key, secret = local_kinesis.credentials[:2]
        options = {
            "streamName": stream_name,
            "endpointUrl": proxy.endpoint_url,
            "awsAccessKeyId": key,
            "awsSecretKey": secret,
        }
        result = tmp_path / "result.json"
        job = Child(
            [
                sys.executable,
                "-m",
                "tests.spark_cluster._job",
                cluster.master_url,
                json.dumps(options),
                str(tmp_path / "cp"),
                str(result),
            ],
            clean_env(PYTHONPATH=str(Path(__file__).parents[2])),
            tmp_path / "driver.log",
            None,
        )
        job.start()
        try:
            code = job.wait(120)
        finally:
            left = job.stop()
    assert not left, f"processes of the driver outlived it: {left}"
    assert code == 0, job.output()[-6000:]
    outcome = json.loads(result.read_text())
    assert outcome["error"] is None and not outcome["active"], outcome["error"]
    requests = "\n".join(hold.log)
    assert hold.held == 1, f"the slow shard's first range read was not held:\n{requests}"
    tasks = outcome["tasks"]
    copies = [t for t in tasks if t["speculative"]]
    assert copies, f"Spark started no speculative copy: {tasks}\n{requests}"
    for copy in copies:
        attempts = [t for t in tasks if t["stage"] == copy["stage"] and t["index"] == copy["index"]]
        assert {t["host"] for t in attempts} == {"127.0.0.2", "127.0.0.3"}, attempts
        won = [t for t in attempts if t["status"] == "SUCCESS"]
        assert len(won) == 1, f"not one winner among the attempts: {attempts}\n{requests}"
    datas = Counter(row[4] for row in outcome["rows"])
    assert sorted(datas) == [f"r{i:04d}" for i in range(400)], "records were lost"
    assert set(datas.values()) == {1}, [d for d, n in datas.items() if n > 1]
