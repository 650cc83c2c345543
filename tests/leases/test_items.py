"""The KCL's lease item: fixtures written from its documented schema, decoded and re-encoded."""

from __future__ import annotations

import dataclasses

import pytest

from kinesis_actors.leases import (
    SHARD_END,
    TRIM_HORIZON,
    Lease,
    decode_lease,
    encode_lease,
    lease_key,
    stream_identifier,
)

# A single-stream KCL 2.x lease, mid-aggregate, owned, a child of a merge.
KCL_SINGLE = {
    "leaseKey": {"S": "shardId-000000000004"},
    "leaseOwner": {"S": "ip-10-0-0-7.ec2.internal:4b1e"},
    "leaseCounter": {"N": "1520"},
    "checkpoint": {"S": "49546986683135544286507457936321625675700192471156785154"},
    "checkpointSubSequenceNumber": {"N": "3"},
    "ownerSwitchesSinceCheckpoint": {"N": "1"},
    "parentShardId": {"SS": ["shardId-000000000001", "shardId-000000000002"]},
    "startingHashKey": {"S": "0"},
    "endingHashKey": {"S": "170141183460469231731687303715884105727"},
}

# A finished KCL lease with its children and the two-phase checkpoint's pending part.
KCL_FINISHED = {
    "leaseKey": {"S": "shardId-000000000000"},
    "leaseCounter": {"N": "77"},
    "checkpoint": {"S": "SHARD_END"},
    "checkpointSubSequenceNumber": {"N": "0"},
    "ownerSwitchesSinceCheckpoint": {"N": "0"},
    "childShardIds": {"SS": ["shardId-000000000002", "shardId-000000000001"]},
    "pendingCheckpoint": {"S": "49546986683135544286507457936321625675700192471156785153"},
    "pendingCheckpointSubSequenceNumber": {"N": "0"},
}

# A multi-stream KCL lease: identifier account:stream:creationEpoch under "streamName".
KCL_MULTI = {
    "leaseKey": {"S": "123456789012:orders:1700000000:shardId-000000000003"},
    "leaseOwner": {"S": "worker-a"},
    "leaseCounter": {"N": "9"},
    "checkpoint": {"S": "TRIM_HORIZON"},
    "checkpointSubSequenceNumber": {"N": "0"},
    "ownerSwitchesSinceCheckpoint": {"N": "0"},
    "streamName": {"S": "123456789012:orders:1700000000"},
    "shardId": {"S": "shardId-000000000003"},
}


def test_a_kcl_single_stream_lease_decodes_field_for_field() -> None:
    lease = decode_lease(KCL_SINGLE)
    assert lease.key == lease.shard_id == "shardId-000000000004"
    assert lease.owner == "ip-10-0-0-7.ec2.internal:4b1e"
    assert lease.counter == 1520
    assert lease.checkpoint == "49546986683135544286507457936321625675700192471156785154"
    assert lease.sub_sequence == 3
    assert lease.owner_switches_since_checkpoint == 1
    assert lease.parent_shard_ids == ("shardId-000000000001", "shardId-000000000002")
    assert lease.starting_hash_key == "0"
    assert lease.stream_identifier is None
    assert not lease.finished


@pytest.mark.parametrize("item", [KCL_SINGLE, KCL_FINISHED, KCL_MULTI])
def test_kcl_items_encode_back_to_the_same_item(item: dict[str, dict[str, object]]) -> None:
    encoded = encode_lease(decode_lease(item))
    normalized = {
        name: {"SS": sorted(value["SS"])} if "SS" in value else value  # type: ignore[call-overload]
        for name, value in item.items()
    }
    assert encoded == normalized


def test_a_finished_lease_keeps_its_children_and_pending_checkpoint() -> None:
    lease = decode_lease(KCL_FINISHED)
    assert lease.finished and lease.checkpoint == SHARD_END
    assert lease.owner is None
    assert lease.child_shard_ids == ("shardId-000000000001", "shardId-000000000002")
    assert lease.pending_checkpoint == "49546986683135544286507457936321625675700192471156785153"


def test_a_multi_stream_lease_names_its_stream_and_shard() -> None:
    lease = decode_lease(KCL_MULTI)
    assert lease.shard_id == "shardId-000000000003"
    assert lease.stream_identifier == stream_identifier("123456789012", "orders", 1700000000)
    assert lease.stream_name == "orders"
    assert lease.key == lease_key("shardId-000000000003", lease.stream_identifier)


def test_absent_optional_attributes_read_as_the_kcl_reads_them() -> None:
    lease = decode_lease({"leaseKey": {"S": "shardId-1"}})
    assert (lease.counter, lease.checkpoint, lease.sub_sequence) == (0, TRIM_HORIZON, 0)
    assert lease.parent_shard_ids == () and lease.owner is None


def test_our_stream_attributes_round_trip_and_name_the_stream() -> None:
    lease = Lease(
        key="shardId-1",
        shard_id="shardId-1",
        stream_arn="arn:aws:kinesis:us-east-1:000000000000:stream/orders",
        stream_created=1700000000,
    )
    item = encode_lease(lease)
    assert item["streamArn"] == {"S": "arn:aws:kinesis:us-east-1:000000000000:stream/orders"}
    assert item["streamCreationEpoch"] == {"N": "1700000000"}
    assert "streamName" not in item  # that attribute would make it a multi-stream lease
    assert decode_lease(item) == lease
    assert lease.stream_name == "orders"


def test_the_latest_pin_round_trips_and_a_kcl_latest_lease_without_it_decodes() -> None:
    lease = Lease(key="shardId-1", shard_id="shardId-1", checkpoint="LATEST", owner="w1")
    pinned = dataclasses.replace(lease, latest_pinned_at=1764049000123)
    item = encode_lease(pinned)
    assert item["latestPinnedAt"] == {"N": "1764049000123"}
    assert item["checkpoint"] == {"S": "LATEST"}  # what a KCL application reads is unchanged
    assert decode_lease(item) == pinned
    kcl = encode_lease(lease)
    assert "latestPinnedAt" not in kcl
    assert decode_lease(kcl).latest_pinned_at is None


def test_empty_sets_are_left_out_because_dynamodb_refuses_them() -> None:
    item = encode_lease(Lease(key="k", shard_id="k"))
    assert "parentShardId" not in item and "childShardIds" not in item
    assert "leaseOwner" not in item


@pytest.mark.parametrize(
    ("name", "value"),
    [("leaseCounter", {"S": "x"}), ("leaseOwner", {"N": "1"}), ("parentShardId", {"S": "a"})],
)
def test_an_attribute_of_the_wrong_type_is_named(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=name):
        decode_lease({"leaseKey": {"S": "k"}, name: value})
