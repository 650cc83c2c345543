"""The local DynamoDB server, for lease tables: dynalite (npm package ``dynalite``), in
memory, plain HTTP."""

from __future__ import annotations

import os
from pathlib import Path

from ..client import ClientConfig, DynamoDBClient
from ..errors import ConfigError
from ._process import LocalDynamoDBError, LocalServer, find_tools, free_port

__all__ = ["DYNALITE_INSTALL_COMMAND", "DYNALITE_VERSION", "LocalDynamoDB", "find_dynalite_dir"]

DYNALITE_VERSION = "4.0.0"
DYNALITE_INSTALL_COMMAND = f"npm install --prefix .tools dynalite@{DYNALITE_VERSION}"
_DYNALITE = Path("node_modules") / "dynalite"


def find_dynalite_dir() -> Path:
    """The folder holding dynalite's ``cli.js``: ``$DYNALITE_DIR``, else looked up like
    :func:`find_server_dir`."""
    found = find_tools(_DYNALITE, ("cli.js", "package.json"), os.environ.get("DYNALITE_DIR"))
    if found is None:
        raise LocalDynamoDBError(
            "the local DynamoDB server (npm package dynalite) is not installed; run "
            f"`make setup` or `{DYNALITE_INSTALL_COMMAND}` in the project folder, or set "
            "DYNALITE_DIR to the folder holding its cli.js"
        )
    return found


# dynalite 4.0.0 throws from a request's "error" handler, so a client that goes away in the
# middle of a request (a cancelled call, a killed worker: what lease tests do on purpose)
# kills the whole server. This runs its cli.js with that one error logged and survived;
# any other uncaught error still ends the server, with its trace in the log.
_DYNALITE_GUARD = """
process.on("uncaughtException", (err) => {
  if (err && err.code === "ECONNRESET") {
    console.error("a client went away mid-request (survived): " + err.message);
    return;
  }
  console.error(err);
  process.exit(70);
});
process.argv.splice(1, 0, "cli.js");
require(require("path").resolve("cli.js"));
"""


class LocalDynamoDB(LocalServer):
    """Runs a local DynamoDB (dynalite, in memory) for the lifetime of a ``with`` (or
    ``async with``) block, on a free loopback port: ``endpoint_url`` is plain HTTP.

    ``table_delay`` is how long a table stays CREATING, DELETING or UPDATING (dynalite's
    default is half a second; zero here so tests do not wait). Any credentials are accepted
    (a signature must be present, its value is not checked). It implements the item and
    table operations a lease table needs (conditional writes included), not
    ``ReturnValuesOnConditionCheckFailure``'s item, streams, TTL or transactions.
    """

    _NAME = "local DynamoDB server"
    _ERROR = LocalDynamoDBError

    def __init__(
        self,
        *,
        region: str = "us-east-1",
        table_delay: float = 0.0,
        start_timeout: float = 60.0,
    ) -> None:
        if table_delay < 0:
            raise ConfigError(f"table_delay must be >= 0 seconds, got {table_delay!r}")
        super().__init__(region=region, start_timeout=start_timeout)
        self.table_delay = table_delay
        self.port = 0

    @property
    def endpoint_url(self) -> str:
        """Plain HTTP (HTTP/1.1) endpoint."""
        return f"http://127.0.0.1:{self.port}"

    def _command(self, node: str) -> tuple[list[str], Path, dict[str, str]]:
        server_dir = find_dynalite_dir()
        self.port = free_port()
        delay = str(round(self.table_delay * 1000))
        command = [
            node,
            "-e",
            _DYNALITE_GUARD,
            "--",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        for flag in ("--createTableMs", "--deleteTableMs", "--updateTableMs"):
            command += [flag, delay]
        return command, server_dir, dict(os.environ)

    def _answering(self) -> bool:
        return self._answers_here(
            self.port, "DynamoDB_20120810.ListTables", "application/x-amz-json-1.0"
        )

    def client(self, *, config: ClientConfig | None = None) -> DynamoDBClient:
        """A :class:`~kinesis_actors.client.DynamoDBClient` for this server."""
        return DynamoDBClient(
            region=self.region,
            endpoint_url=self.endpoint_url,
            verify=False,
            credentials=self.credentials,
            config=config,
        )
