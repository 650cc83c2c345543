"""docs/producer.md: an error taken from its handle is handled; leaving the block does not
raise it again. The stream is deleted under the producer, so every record fails for good."""

import anyio

from kinesis_actors import LocalKinesis, Producer, errors


async def main() -> None:
    async with LocalKinesis() as server, server.client() as kinesis:
        await kinesis.create_stream("orders", shard_count=1)
        records = [(f"order {i}".encode(), f"customer-{i}") for i in range(3)]
        parked: list[errors.KinesisError] = []

        def park(error: errors.KinesisError) -> None:  # a dead-letter store, say
            parked.append(error)

        # [handled]
        async with Producer(kinesis, "orders") as producer:
            await kinesis.delete_stream("orders")  # so that every record below fails for good
            handles = await producer.put_many(records)
            for handle in handles:
                try:
                    await handle
                except errors.KinesisError as error:
                    park(error)  # handled here: leaving the block raises nothing for it
        # [/handled]
        print(f"parked {len(parked)} records: {type(parked[0]).__name__}; the block left quietly")

        await kinesis.create_stream("payments", shard_count=1)
        try:
            async with Producer(kinesis, "payments") as producer:
                await kinesis.delete_stream("payments")
                await producer.put_many(records)  # nobody looks at these handles
        except errors.ProducerFailedError as failed:
            print(f"unretrieved: {failed}")


anyio.run(main)
