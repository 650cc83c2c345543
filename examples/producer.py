import anyio

from kinesis_actors import LocalKinesis, Producer, ProducerConfig


async def main() -> None:
    # On AWS: async with KinesisClient(region="eu-west-1") as kinesis: (the stream exists)
    async with LocalKinesis() as server, server.client() as kinesis:
        await kinesis.create_stream("orders", shard_count=2)
        config = ProducerConfig(linger=0.05)
        async with Producer(kinesis, "orders", config) as producer:  # leaving flushes
            handles = [
                await producer.put(f"order {i}".encode(), f"customer-{i % 50}")
                for i in range(1_000)  # put waits while the queue is full
            ]
            print(await handles[0])  # PutResult(shard_id, sequence_number, sub_sequence_number)
        print(f"{producer.metrics.records_sent} records sent")


anyio.run(main)
