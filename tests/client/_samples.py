"""Replies as the local server (kinesis-mock 0.6.2) sends them, captured through the fault
proxy: nulls for absent members, the end of a closed shard with ``ChildShards``."""

from __future__ import annotations

import json

_SHARD_ITERATOR = "AAAAAAAAAAHOJPjWz8wL0g7L656qS1f3ywVp8fCadRaeAML4v/2YOFWdXj4LTqcpInQ="
_STREAM_ARN = "arn:aws:kinesis:us-east-1:000000000000:stream/s"
_CONSUMER_ARN = f"{_STREAM_ARN}/consumer/c:1795567422"
_SEQUENCE = "49680537172745315614383918161286903110318796913332191234"
_CHILD_SHARDS = [
    {
        "HashKeyRange": {
            "EndingHashKey": "170141183460469231731687303715884105727",
            "StartingHashKey": "0",
        },
        "ParentShards": ["shardId-000000000000"],
        "ShardId": "shardId-000000000001",
    }
]
RECORD = {
    "ApproximateArrivalTimestamp": 1795567422.249,
    "Data": "eA==",
    "EncryptionType": "NONE",
    "PartitionKey": "a",
    "SequenceNumber": _SEQUENCE,
}

#: One well-formed reply per operation the library calls (SubscribeToShard: one event).
REPLIES: dict[str, dict[str, object]] = {
    "ListShards": {
        "NextToken": None,
        "Shards": [
            {
                "AdjacentParentShardId": None,
                "HashKeyRange": {
                    "EndingHashKey": "340282366920938463463374607431768211455",
                    "StartingHashKey": "0",
                },
                "ParentShardId": None,
                "SequenceNumberRange": {
                    "EndingSequenceNumber": "9223372036854775807",
                    "StartingSequenceNumber": "4968053717274531561438391816128569418449918",
                },
                "ShardId": "shardId-000000000000",
            },
            {
                "AdjacentParentShardId": None,
                "HashKeyRange": {
                    "EndingHashKey": "170141183460469231731687303715884105727",
                    "StartingHashKey": "0",
                },
                "ParentShardId": "shardId-000000000000",
                "SequenceNumberRange": {
                    "EndingSequenceNumber": None,
                    "StartingSequenceNumber": "4968053717276761635958244878442722990277183",
                },
                "ShardId": "shardId-000000000001",
            },
        ],
    },
    "GetShardIterator": {"ShardIterator": _SHARD_ITERATOR},
    "GetRecords": {
        "ChildShards": None,
        "MillisBehindLatest": 0,
        "NextShardIterator": _SHARD_ITERATOR,
        "Records": [RECORD],
    },
    "DescribeStreamSummary": {
        "StreamDescriptionSummary": {
            "ConsumerCount": 0,
            "EncryptionType": "NONE",
            "EnhancedMonitoring": [{"ShardLevelMetrics": []}],
            "KeyId": None,
            "MaxRecordSizeInKiB": None,
            "OpenShardCount": 1,
            "RetentionPeriodHours": 24,
            "StreamARN": _STREAM_ARN,
            "StreamCreationTimestamp": 1795567422.124,
            "StreamModeDetails": {"StreamMode": "PROVISIONED"},
            "StreamName": "s",
            "StreamStatus": "ACTIVE",
            "WarmThroughput": None,
        }
    },
    "DescribeStreamConsumer": {
        "ConsumerDescription": {
            "ConsumerARN": _CONSUMER_ARN,
            "ConsumerCreationTimestamp": 1795567422.468,
            "ConsumerName": "c",
            "ConsumerStatus": "ACTIVE",
            "StreamARN": _STREAM_ARN,
            "Tags": {},
        }
    },
    "RegisterStreamConsumer": {
        "Consumer": {
            "ConsumerARN": _CONSUMER_ARN,
            "ConsumerCreationTimestamp": 1795567422.468,
            "ConsumerName": "c",
            "ConsumerStatus": "CREATING",
        }
    },
    "ListStreamConsumers": {
        "Consumers": [
            {
                "ConsumerARN": _CONSUMER_ARN,
                "ConsumerCreationTimestamp": 1795567422.468,
                "ConsumerName": "c",
                "ConsumerStatus": "ACTIVE",
            }
        ],
        "NextToken": "c",
    },
    "PutRecords": {
        "EncryptionType": "NONE",
        "FailedRecordCount": 0,
        "Records": [
            {
                "ErrorCode": None,
                "ErrorMessage": None,
                "SequenceNumber": _SEQUENCE,
                "ShardId": "shardId-000000000000",
            }
        ],
    },
}

#: The last GetRecords of a closed shard: no next iterator, and the children.
CLOSED_SHARD_END = {
    "ChildShards": _CHILD_SHARDS,
    "MillisBehindLatest": 0,
    "NextShardIterator": None,
    "Records": [RECORD],
}

#: A SubscribeToShard event, and the last one of a closed shard (as the service sends it).
EVENT = {
    "Records": [RECORD],
    "ContinuationSequenceNumber": _SEQUENCE,
    "MillisBehindLatest": 0,
    "ChildShards": None,
}
LAST_EVENT = {
    "Records": [],
    "ContinuationSequenceNumber": None,
    "MillisBehindLatest": 0,
    "ChildShards": _CHILD_SHARDS,
}


def body(document: object) -> bytes:
    return json.dumps(document).encode()
