import json

import anyio

from kinesis_actors import Consumer, ConsumerConfig, LocalKinesis, Producer, StartingPosition


async def main() -> None:
    # On AWS: async with KinesisClient(region="eu-west-1") as kinesis: (the stream exists)
    async with LocalKinesis() as server, server.client() as kinesis:
        await kinesis.create_stream("orders", shard_count=2)
        async with Producer(kinesis, "orders") as producer:
            for i in range(100):
                await producer.put(f"order {i}".encode(), f"customer-{i % 10}")

        config = ConsumerConfig(
            mode="polling",  # or mode="efo", consumer_name="orders-app": Enhanced Fan-Out
            start=StartingPosition.trim_horizon(),  # the default is latest: new records only
        )
        # Another account's stream by its ARN, once shared with you:
        # ["orders", "arn:aws:kinesis:eu-west-1:111122223333:stream/payments"]
        streams = ["orders"]
        read = 0
        async with Consumer(kinesis, streams, config) as consumer:
            async for batch in consumer:  # RecordBatch: .stream, .shard_id, .arrow, len(batch)
                first = batch.arrow.column("data")[0].as_py()  # a pyarrow.RecordBatch
                print(f"{batch.shard_id}: {len(batch)} records from {first!r}")
                read += len(batch)
                consumer.commit(batch)  # processed up to the end of this batch
                if read == 100:
                    break
            saved = json.dumps(consumer.positions())  # a dict: store it as JSON

        async with Producer(kinesis, "orders") as producer:
            await producer.put(b"order 100", "customer-0")
        resume = ConsumerConfig(positions=json.loads(saved))  # after the last commit
        async with Consumer(kinesis, streams, resume) as consumer:
            async for batch in consumer:
                print(f"resumed: {batch.arrow.column('data').to_pylist()}")
                break


anyio.run(main)
