"""Poison records: a malformed record in a reply from the server. Sans-IO.

A record without ``Data``, ``SequenceNumber``, ``ApproximateArrivalTimestamp`` or
``PartitionKey``, with bad base64 or a sequence number that is not a string of digits, cannot
be delivered. The client reports such records in ``MalformedReplyError.bad_records`` (with the
rest of the reply); a reply the client returns has every record decoded, so the consumer
checks none again.

``ConsumerConfig.poison_records`` decides:

* ``"fail"`` (the default): :class:`~kinesis_actors.errors.PoisonRecordError` naming the
  stream, the shard, the sequence number and the index. Nothing of that reply is delivered,
  so the shard's position stays before the record and a resume meets it again: nothing is
  skipped without the user's say-so (what a careful user expects of at-least-once);
* ``"skip"``: the record is dropped, counted in the shard's ``poison_records`` metric, and
  logged as a warning naming it; the rest of the reply is delivered and reading goes on past
  it. For pipelines where one bad record must not stop a stream.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import PoisonRecordError
from ._metrics import ShardMetrics
from ._replies import BadRecord

__all__ = ["POISON_POLICIES", "screen"]

log = logging.getLogger("kinesis_actors.consumer")

POISON_POLICIES = ("fail", "skip")


def screen(
    stream: str,
    shard_id: str,
    records: Sequence[Mapping[str, Any]],
    bad: Sequence[BadRecord],
    *,
    policy: str,
    metrics: ShardMetrics,
    operation: str,
    removed: bool = False,
) -> tuple[list[Mapping[str, Any]], str | None]:
    """Apply the policy to one reply's ``bad`` records.

    Returns the records to deliver and the last sequence number the reply covered (the last
    one among good and skipped records: reading goes on after it). ``removed`` says the bad
    records were already taken out of ``records`` (the client's ``MalformedReplyError.reply``).
    Raises :class:`PoisonRecordError` for the first bad record under ``"fail"``.
    """
    if bad and policy != "skip":
        index, sequence, problem = bad[0]
        raise PoisonRecordError(
            f"{stream}/{shard_id}: record {index} of a {operation} reply (sequence number "
            f"{sequence}) is malformed: {problem}. The shard's position stays before it; "
            "ConsumerConfig(poison_records='skip') skips such records and counts them",
            stream=stream,
            shard_id=shard_id,
            sequence_number=sequence,
            index=index,
            operation=operation,
        )
    dropped = {index for index, _, _ in bad}
    kept = list(records) if removed else [r for i, r in enumerate(records) if i not in dropped]
    for index, sequence, problem in bad:
        metrics.poison_records += 1
        log.warning(
            "%s/%s: skipping malformed record %d of a %s reply (sequence number %s): %s",
            stream,
            shard_id,
            index,
            operation,
            sequence,
            problem,
        )
    sequences = [int(s) for _, s, _ in bad if s is not None]
    sequences += [int(r["SequenceNumber"]) for r in kept[-1:]]
    last = str(max(sequences)) if sequences else None
    return kept, last
