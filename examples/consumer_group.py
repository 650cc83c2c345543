import anyio

from kinesis_actors import (
    Consumer,
    ConsumerConfig,
    LocalDynamoDB,
    LocalKinesis,
    Producer,
    RecordBatch,
    StartingPosition,
)


def process(batch: RecordBatch) -> None:
    print(f"{batch.shard_id}: {len(batch)} records")


async def main() -> None:
    # On AWS: KinesisClient(region="eu-west-1") and dynamodb_endpoint_url=None below
    async with LocalKinesis() as server, LocalDynamoDB() as dynamodb, server.client() as kinesis:
        await kinesis.create_stream("orders", shard_count=2)
        async with Producer(kinesis, "orders") as producer:
            for i in range(100):
                await producer.put(f"order {i}".encode(), f"customer-{i % 10}")

        read = 0
        # [group]
        config = ConsumerConfig(
            lease_table="orders-app",  # created on first use; worker_id: unique per process
            start=StartingPosition.trim_horizon(),  # where a shard without a checkpoint starts
            dynamodb_endpoint_url=dynamodb.endpoint_url,  # None: the region's DynamoDB
        )
        async with Consumer(kinesis, "orders", config) as consumer:
            async for batch in consumer:
                process(batch)
                consumer.commit(batch)  # the lease's checkpoint, written with its next renewal
                # [/group]
                read += len(batch)
                if read == 100:
                    break
        print(f"read {read} records; leaving handed the leases back, checkpointed")


anyio.run(main)
