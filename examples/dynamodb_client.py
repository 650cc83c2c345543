import anyio

from kinesis_actors import DynamoDBClient, LocalDynamoDB, errors


async def main() -> None:
    async with LocalDynamoDB() as local:  # on AWS: no local server
        ddb = DynamoDBClient(  # on AWS: DynamoDBClient(region="eu-west-1"); also verify=, config=
            region=local.region, endpoint_url=local.endpoint_url, credentials=local.credentials
        )
        async with ddb:
            await ddb.create_table(  # waits until ACTIVE (wait=False: does not)
                {
                    "TableName": "my-app",
                    "KeySchema": [{"AttributeName": "leaseKey", "KeyType": "HASH"}],
                    "AttributeDefinitions": [{"AttributeName": "leaseKey", "AttributeType": "S"}],
                    "BillingMode": "PAY_PER_REQUEST",
                }
            )
            table = await ddb.describe_table("my-app")  # DescribeTable's "Table"
            print(f"table {table['TableName']}: {table['TableStatus']}")
            await ddb.call(
                "PutItem",
                {
                    "TableName": "my-app",
                    "Item": {"leaseKey": {"S": "shardId-000000000000"}, "leaseCounter": {"N": "8"}},
                },
            )
            try:
                await ddb.call(
                    "UpdateItem",
                    {
                        "TableName": "my-app",
                        "Key": {"leaseKey": {"S": "shardId-000000000000"}},
                        "UpdateExpression": "SET leaseCounter = leaseCounter + :one",
                        "ConditionExpression": "leaseCounter = :seen",
                        "ExpressionAttributeValues": {":one": {"N": "1"}, ":seen": {"N": "7"}},
                        "ReturnValues": "ALL_NEW",
                    },
                )
            except errors.ConditionalCheckFailedError as lost:
                # lost.item (with ReturnValuesOnConditionCheckFailure, on AWS), lost.retried
                print(f"someone else renewed the lease first (retried: {lost.retried})")
            async for item in ddb.scan({"TableName": "my-app"}):  # every item, page by page
                print(f"{item['leaseKey']['S']}: counter {item['leaseCounter']['N']}")


anyio.run(main)
