"""The embedded local servers: Kinesis (kinesis-mock, npm package ``kinesis-local``) and
DynamoDB (npm package ``dynalite``, for lease tables).

Used by the demo and the test suite. :class:`LocalKinesis` serves plain HTTP on one port and
HTTPS with HTTP/2 (self-signed certificate: use ``verify=False``) on another;
:class:`LocalDynamoDB` serves plain HTTP, in memory. All ports are loopback ports chosen free
at start. Each server process is tied to this one: it runs in a process group of its own,
stopped (the whole group) on exit, and on Linux the kernel kills it if the thread that
started it (the event loop's, for ``async with``) dies first, so no run leaves an orphan
server behind.
"""

from ._dynamodb import DYNALITE_INSTALL_COMMAND, DYNALITE_VERSION, LocalDynamoDB, find_dynalite_dir
from ._kinesis import INSTALL_COMMAND, KINESIS_LOCAL_VERSION, LocalKinesis, find_server_dir
from ._process import LocalDynamoDBError, LocalKinesisError

__all__ = [
    "DYNALITE_INSTALL_COMMAND",
    "DYNALITE_VERSION",
    "INSTALL_COMMAND",
    "KINESIS_LOCAL_VERSION",
    "LocalDynamoDB",
    "LocalDynamoDBError",
    "LocalKinesis",
    "LocalKinesisError",
    "find_dynalite_dir",
    "find_server_dir",
]
