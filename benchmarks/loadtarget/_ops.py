"""The Kinesis operations: writes, reads, the control plane and SubscribeToShard."""

from __future__ import annotations

import time
from typing import Any

from ._base import (
    _EVENT_BYTES,
    _ITERATOR_TTL,
    _MAX_GET_BYTES,
    _TOKEN_TTL,
    PTE,
    Outcome,
    Reply,
    Result,
    ServiceBase,
    ServiceError,
    Subscription,
    loads,
    ok,
)
from ._limits import TokenBucket
from ._records import retained_records
from ._stream import Shard

__all__ = ["Operations"]


def _refilled(shard: Shard, fresh: list[bool]) -> bool:
    shard.refill_write()
    fresh[shard.index] = True
    return True


class Operations(ServiceBase):
    """Every operation's handler; ``Service`` maps operation names to them."""

    # Writes ----------------------------------------------------------------------------------

    def put_records(self, document: dict[str, Any]) -> Result:
        self._check_stream(document)
        entries: list[dict[str, Any]] = document["Records"]
        if not 1 <= len(entries) <= 500:
            raise ServiceError("ValidationException", "PutRecords takes 1 to 500 records")
        longest = max(len(entry["Data"]) for entry in entries)
        if (longest >> 2) * 3 > self._max_record + 2:
            raise ServiceError("ValidationException", "a record is larger than the stream allows")
        if self.paused:
            stream = self.stream
            touched = {
                (
                    stream.for_hash_key(e["ExplicitHashKey"])
                    if e.get("ExplicitHashKey")
                    else stream.for_partition_key(e["PartitionKey"])
                ).shard_id
                for e in entries
            }
            return self._stalled(touched, lambda: self._put_records(entries))
        return self._put_records(entries)

    def _put_records(self, entries: list[dict[str, Any]]) -> Reply:
        stream = self.stream
        by_key, by_hash = stream.for_partition_key, stream.for_hash_key
        retain = self.config.retain_records
        arrival = self.clock.epoch()
        share = self.faults.throttle_share
        draw = self.random.random
        limited = self.config.limits is not None
        count = len(stream.shards)
        accepted = [0] * count
        accepted_bytes = [0] * count
        throttled = [0] * count
        injected = 0
        fresh = [False] * count  # write buckets refilled in this call
        parts: list[str] = []
        for entry in entries:
            data: str = entry["Data"]
            key: str = entry["PartitionKey"]
            explicit = entry.get("ExplicitHashKey")
            shard = by_hash(explicit) if explicit else by_key(key)
            size = (len(data) >> 2) * 3 + len(key) - data.count("=", -2)
            index = shard.index
            if share and draw() < share:
                injected += 1
            elif not limited or (
                (fresh[index] or _refilled(shard, fresh)) and shard.admit_write(size)
            ):
                counter = shard.next_counter
                shard.next_counter = counter + 1
                parts.append(f"{shard.put_head}{counter:020d}{shard.put_tail}")
                accepted[index] += 1
                accepted_bytes[index] += size
                if retain:
                    shard.append((arrival, data, key), retain)
                continue
            throttled[index] += 1
            parts.append(
                '{"ErrorCode":"' + PTE + '","ErrorMessage":"Rate exceeded for shard '
                f"{shard.shard_id} in stream {stream.name} under account "
                f'{self.config.account}."}}'
            )
        failed = 0
        for shard in stream.shards:
            index = shard.index
            if accepted[index] or throttled[index]:
                stats = shard.stats
                stats["records_in"] += accepted[index]
                stats["bytes_in"] += accepted_bytes[index]
                stats["throttled"] += throttled[index]
                failed += throttled[index]
                shard.series.add(accepted[index], accepted_bytes[index], throttled[index], 0)
                if retain and accepted[index]:
                    shard.notify()
        if injected:
            self.count_fault("throttled_records", injected)
        body = (
            f'{{"FailedRecordCount":{failed},"Records":[{",".join(parts)}],'
            '"EncryptionType":"NONE"}'
        )
        return Reply(200, body.encode())

    def put_record(self, document: dict[str, Any]) -> Result:
        self._check_stream(document)
        entry = {
            "Data": document["Data"],
            "PartitionKey": document["PartitionKey"],
            "ExplicitHashKey": document.get("ExplicitHashKey"),
        }

        def put() -> Reply:
            reply = self._put_records([entry])
            result = loads(reply.body)["Records"][0]
            if "ErrorCode" in result:
                raise ServiceError(PTE, result["ErrorMessage"])
            return ok({**result, "EncryptionType": "NONE"})

        stream = self.stream
        shard = (
            stream.for_hash_key(entry["ExplicitHashKey"])
            if entry["ExplicitHashKey"]
            else stream.for_partition_key(entry["PartitionKey"])
        )
        return self._stalled((shard.shard_id,), put)

    # Reads -----------------------------------------------------------------------------------

    def get_shard_iterator(self, document: dict[str, Any]) -> Result:
        self._check_stream(document)
        shard = self._shard(document["ShardId"])
        bucket = shard.get_iterator_bucket
        if bucket is not None and not bucket.take(1):
            raise ServiceError(PTE, f"Rate exceeded for GetShardIterator on {shard.shard_id}")
        counter = self._position(
            shard,
            document["ShardIteratorType"],
            document.get("StartingSequenceNumber"),
            document.get("Timestamp"),
        )
        return ok({"ShardIterator": self._iterator(shard, counter)})

    def _iterator(self, shard: Shard, counter: int) -> str:
        return f"LT.{shard.index}.{counter}.{self.clock.now():.3f}"

    def _parse_iterator(self, iterator: str) -> tuple[Shard, int]:
        try:
            tag, index, counter, issued = iterator.split(".", 3)
            shard = self.stream.shards[int(index)]
            if tag != "LT":
                raise ValueError(tag)
        except (ValueError, IndexError):
            raise ServiceError("InvalidArgumentException", "Invalid ShardIterator") from None
        if self.clock.now() - float(issued) > _ITERATOR_TTL:
            raise ServiceError("ExpiredIteratorException", "Iterator expired")
        return shard, int(counter)

    def get_records(self, document: dict[str, Any]) -> Result:
        shard, counter = self._parse_iterator(document["ShardIterator"])
        default = self.synthetic.settings.records_per_call if self.synthetic else 10_000
        limit = int(document.get("Limit") or default)
        if not 1 <= limit <= 10_000:
            raise ServiceError("ValidationException", "Limit must be between 1 and 10000")
        return self._stalled((shard.shard_id,), lambda: self._get_records(shard, counter, limit))

    def _get_records(self, shard: Shard, counter: int, limit: int) -> Reply:
        stats = shard.stats
        calls, data = shard.read_calls_bucket, shard.read_bytes_bucket
        if (calls is not None and not calls.take(1)) or (data is not None and not data.positive()):
            stats["read_throttled"] += 1
            raise ServiceError(PTE, f"Rate exceeded for shard {shard.shard_id}")
        stats["get_records_calls"] += 1
        now = self.clock.epoch()
        if self.synthetic is not None:
            items, size = self.synthetic.items(shard, counter, limit, now)
            served, following = limit, counter + limit
            behind = self.synthetic.settings.millis_behind_latest
        else:
            items, start, served, size, next_arrival = retained_records(
                shard, counter, limit, _MAX_GET_BYTES
            )
            following = start + served
            behind = 0 if next_arrival is None else max(0, int((now - next_arrival) * 1000))
        if data is not None:
            data.charge(size)
        stats["records_out"] += served
        stats["bytes_out"] += size
        shard.series.add(0, 0, 0, served)
        body = (
            f'{{"Records":[{items}],"NextShardIterator":"{self._iterator(shard, following)}",'
            f'"MillisBehindLatest":{behind}}}'
        )
        return Reply(200, body.encode())

    # Control plane ----------------------------------------------------------------------------

    def list_shards(self, document: dict[str, Any]) -> Result:
        shards = self.stream.shards
        token = document.get("NextToken")
        if token is not None:
            if "StreamName" in document or "StreamARN" in document:
                raise ServiceError(
                    "InvalidArgumentException", "NextToken and StreamName cannot be combined"
                )
            try:
                tag, position_text, issued = str(token).split(".", 2)
                position = int(position_text)
                if tag != "LS":
                    raise ValueError(tag)
            except ValueError:
                raise ServiceError("InvalidArgumentException", "Invalid NextToken") from None
            if self.clock.now() - float(issued) > _TOKEN_TTL:
                raise ServiceError("ExpiredNextTokenException", "NextToken expired")
        else:
            self._check_stream(document)
            position = 0
            after = document.get("ExclusiveStartShardId")
            shard_filter = document.get("ShardFilter") or {}
            if shard_filter.get("Type") == "AFTER_SHARD_ID":
                after = shard_filter.get("ShardId")
            if after is not None:
                position = next(
                    (shard.index + 1 for shard in shards if shard.shard_id >= after), len(shards)
                )
                if after not in self.stream.by_id:
                    position = sum(1 for shard in shards if shard.shard_id <= after)
        max_results = int(document.get("MaxResults") or 1000)
        if not 1 <= max_results <= 10_000:
            raise ServiceError("ValidationException", "MaxResults must be between 1 and 10000")
        page = shards[position : position + max_results]
        result: dict[str, Any] = {"Shards": [shard.describe() for shard in page]}
        if position + max_results < len(shards):
            result["NextToken"] = f"LS.{position + max_results}.{self.clock.now():.3f}"
        return ok(result)

    def describe_stream_summary(self, document: dict[str, Any]) -> Result:
        self._check_stream(document)
        stream = self.stream
        return ok(
            {
                "StreamDescriptionSummary": {
                    "StreamName": stream.name,
                    "StreamARN": stream.arn,
                    "StreamStatus": "ACTIVE",
                    "StreamModeDetails": {"StreamMode": "PROVISIONED"},
                    "RetentionPeriodHours": 24,
                    "StreamCreationTimestamp": stream.created,
                    "EnhancedMonitoring": [{"ShardLevelMetrics": []}],
                    "EncryptionType": "NONE",
                    "OpenShardCount": len(stream.shards),
                    "ConsumerCount": len(self.consumers),
                    "MaxRecordSizeInKiB": self.config.max_record_size_kib,
                }
            }
        )

    def register_stream_consumer(self, document: dict[str, Any]) -> Result:
        self._check_stream({"StreamARN": document["StreamARN"]})
        name = str(document["ConsumerName"])
        if any(c["ConsumerName"] == name for c in self.consumers.values()):
            raise ServiceError("ResourceInUseException", f"Consumer {name} exists")
        created = self.clock.epoch()
        arn = f"{self.stream.arn}/consumer/{name}:{int(created)}"
        consumer = {
            "ConsumerName": name,
            "ConsumerARN": arn,
            "ConsumerStatus": "ACTIVE",
            "ConsumerCreationTimestamp": created,
        }
        self.consumers[arn] = consumer
        return ok({"Consumer": consumer})

    def _consumer(self, document: dict[str, Any]) -> dict[str, Any]:
        arn = document.get("ConsumerARN")
        if arn is None:
            self._check_stream({"StreamARN": document.get("StreamARN")})
            name = document.get("ConsumerName")
            found = next((c for c in self.consumers.values() if c["ConsumerName"] == name), None)
        else:
            found = self.consumers.get(arn)
        if found is None:
            raise ServiceError("ResourceNotFoundException", f"Consumer {arn} not found")
        return found

    def describe_stream_consumer(self, document: dict[str, Any]) -> Result:
        consumer = self._consumer(document)
        return ok({"ConsumerDescription": {**consumer, "StreamARN": self.stream.arn}})

    def list_stream_consumers(self, document: dict[str, Any]) -> Result:
        self._check_stream({"StreamARN": document["StreamARN"]})
        return ok({"Consumers": list(self.consumers.values())})

    def deregister_stream_consumer(self, document: dict[str, Any]) -> Result:
        consumer = self._consumer(document)
        del self.consumers[consumer["ConsumerARN"]]
        return ok({})

    # SubscribeToShard --------------------------------------------------------------------------

    def subscribe(self, body: bytes) -> Subscription | Outcome:
        """Open a subscription, or the outcome (error reply, injected fault) instead."""
        self.requests["SubscribeToShard"] = self.requests.get("SubscribeToShard", 0) + 1
        early, _, _ = self._decide("SubscribeToShard")
        if early is not None:
            return early
        try:
            document = loads(body)
            self._consumer({"ConsumerARN": document["ConsumerARN"]})
            shard = self._shard(document["ShardId"])
            position = document["StartingPosition"]
            counter = self._position(
                shard, position["Type"], position.get("SequenceNumber"), position.get("Timestamp")
            )
        except ServiceError as exc:
            return self._error(exc)
        except (KeyError, TypeError, ValueError) as exc:
            return self._error(ServiceError("ValidationException", f"malformed request: {exc!r}"))
        limits = self.config.limits
        rate = limits.efo_bytes_per_s if limits else None
        burst = limits.burst_seconds if limits else 1.0
        bucket = None if rate is None else TokenBucket(rate, rate * burst, self.clock)
        shard.stats["subscriptions"] += 1
        deadline = time.monotonic() + self.config.subscription_seconds
        return Subscription(shard, counter, bucket, deadline)

    def next_event(self, subscription: Subscription) -> tuple[bytes, int] | None:
        """The next event's JSON payload and its records, or None when nothing is new."""
        shard = subscription.shard
        counter = subscription.counter
        now = self.clock.epoch()
        if self.synthetic is not None:
            count = self.synthetic.settings.records_per_event
            items, size = self.synthetic.items(shard, counter, count, now)
            behind = self.synthetic.settings.millis_behind_latest
        else:
            items, counter, count, size, next_arrival = retained_records(
                shard, counter, 10_000, _EVENT_BYTES
            )
            if not count:
                return None
            behind = 0 if next_arrival is None else max(0, int((now - next_arrival) * 1000))
        subscription.counter = counter + count
        subscription.events += 1
        if subscription.bucket is not None:
            subscription.bucket.charge(size)
        stats = shard.stats
        stats["records_out"] += count
        stats["bytes_out"] += size
        stats["events"] += 1
        shard.series.add(0, 0, 0, count)
        return self.event_payload(subscription, items, behind), count

    def event_payload(self, subscription: Subscription, items: str, behind: int) -> bytes:
        continuation = subscription.shard.sequence(subscription.counter - 1)
        return (
            f'{{"Records":[{items}],"ContinuationSequenceNumber":"{continuation}",'
            f'"MillisBehindLatest":{behind}}}'
        ).encode()
