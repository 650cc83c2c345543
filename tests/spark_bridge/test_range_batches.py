"""How a task takes its shards' pages (``_range``): the pages waiting when it asks are taken
together, in order, up to Spark's batch size, so a task of many small shards does not pay a
crossing from the loop and a conversion per page. No server: a channel of scripted pages."""

from __future__ import annotations

import anyio
import pyarrow as pa
import pytest
from anyio.streams.memory import MemoryObjectSendStream

from spark_bridge import _range

pytestmark = pytest.mark.anyio


def page(first: int, rows: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"n": list(range(first, first + rows))})


async def send_one(send: MemoryObjectSendStream[pa.RecordBatch], batch: pa.RecordBatch) -> None:
    """One shard's reader: a page, then its end (its clone of the channel closed)."""
    async with send.clone() as mine:
        await mine.send(batch)


async def test_pages_waiting_together_are_taken_in_one_go_and_in_order() -> None:
    send, receive = anyio.create_memory_object_stream[pa.RecordBatch](0)
    async with anyio.create_task_group() as group:
        for index in range(5):  # five shards' readers, each with a page, all waiting
            group.start_soon(send_one, send, page(index * 10, 10))
            await anyio.wait_all_tasks_blocked()
        taken = await _range._receive_some(receive)
    assert [batch.column(0).to_pylist() for batch in taken] == [
        list(range(index * 10, index * 10 + 10)) for index in range(5)
    ]
    combined = _range._concat(taken)
    assert combined.column(0).to_pylist() == list(range(50))
    send.close()
    with pytest.raises(anyio.EndOfStream):  # nothing left, every sender gone
        await _range._receive_some(receive)


async def test_taking_stops_at_spark_s_batch_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_range, "_COALESCE_ROWS", 25)
    send, receive = anyio.create_memory_object_stream[pa.RecordBatch](0)
    async with anyio.create_task_group() as group:
        for index in range(5):
            group.start_soon(send_one, send, page(index * 10, 10))
            await anyio.wait_all_tasks_blocked()
        first = await _range._receive_some(receive)
        rest = await _range._receive_some(receive)
    assert sum(batch.num_rows for batch in first) == 30  # 10 + 10 + 10: the bound was reached
    assert sum(batch.num_rows for batch in rest) == 20
    send.close()
