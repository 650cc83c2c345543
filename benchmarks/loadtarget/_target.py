"""``LoadTarget``: start the server (in a process of its own by default) and talk to it."""

from __future__ import annotations

import atexit
import ctypes
import http.client
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from ._config import Faults, Limits, Synthetic, TargetConfig
from ._server import run_in_thread

if TYPE_CHECKING:
    from kinesis_actors import ClientConfig, KinesisClient

__all__ = ["LoadTarget", "self_signed_certificate"]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """The server dies with us (SIGKILL from the kernel, Linux), as the local servers do."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


_REPO = Path(__file__).resolve().parents[2]
_CERT: tuple[str, str] | None = None
_CERT_LOCK = threading.Lock()
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def self_signed_certificate() -> tuple[str, str]:
    """(cert file, key file) for ``localhost`` and 127.0.0.1, made once per process."""
    global _CERT  # noqa: PLW0603 - one certificate per process, made on first use
    with _CERT_LOCK:
        if _CERT is None:
            folder = tempfile.mkdtemp(prefix="kinesis-load-target-")
            atexit.register(shutil.rmtree, folder, True)
            cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
            subprocess.run(
                [
                    "openssl", "req", "-x509", "-nodes", "-days", "7",
                    "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-keyout", key, "-out", cert, "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                ],
                check=True,
                capture_output=True,
            )  # fmt: skip
            _CERT = (cert, key)
        return _CERT


def _cpu_from_proc(path: str) -> float | None:
    try:
        with open(path, "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


class LoadTarget:
    """A loopback Kinesis endpoint for benchmarks; a context manager.

    ``shards`` shards of one stream (``stream_name``). ``limits`` emulates the per-shard
    service limits (``True`` for the service's figures, a :class:`Limits`, or None for
    none); ``faults`` injects failures (changeable later with :meth:`set_faults`);
    ``synthetic`` makes reads serve endless pre-encoded records; ``retain_records`` keeps up
    to that many put records per shard for GetRecords and SubscribeToShard. ``tls`` adds an
    HTTPS port offering ALPN ``h2`` and ``http/1.1`` (SubscribeToShard needs it).
    ``manual_clock`` freezes the server's clock for buckets and iterators until
    :meth:`advance_clock`. ``isolation`` is ``"process"`` (own CPU, measurable apart) or
    ``"thread"`` (own loop in this process; cheaper to start).
    """

    def __init__(
        self,
        shards: int = 4,
        *,
        stream_name: str = "bench",
        limits: Limits | bool | None = None,
        faults: Faults | None = None,
        synthetic: Synthetic | None = None,
        retain_records: int = 0,
        tls: bool = True,
        manual_clock: bool = False,
        initial_response: bool = True,
        subscription_seconds: float = 300.0,
        heartbeat_seconds: float = 1.0,
        max_record_size_kib: int = 1024,
        region: str = "us-east-1",
        isolation: Literal["process", "thread"] = "process",
        start_timeout: float = 30.0,
    ) -> None:
        if isolation not in ("process", "thread"):
            raise ValueError(f"isolation must be 'process' or 'thread', got {isolation!r}")
        cert, key = self_signed_certificate() if tls else ("", "")
        self.config = TargetConfig(
            shards=shards,
            stream_name=stream_name,
            region=region,
            retain_records=retain_records,
            limits=Limits() if limits is True else (limits or None),
            faults=faults or Faults(),
            synthetic=synthetic,
            manual_clock=manual_clock,
            initial_response=initial_response,
            subscription_seconds=subscription_seconds,
            heartbeat_seconds=heartbeat_seconds,
            max_record_size_kib=max_record_size_kib,
            tls=tls,
            cert_file=cert,
            key_file=key,
        )
        self.isolation = isolation
        self.start_timeout = start_timeout
        self.ca_file: str | None = cert or None
        self.port = 0
        self.tls_port: int | None = None
        self.pid: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None
        self._thread: threading.Thread | None = None
        self._stop_thread: Callable[[], None] | None = None
        self._stat_path: str | None = None

    # Addresses --------------------------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        """Plain HTTP/1.1 (keep-alive): the cheapest path for unary calls."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def tls_endpoint_url(self) -> str:
        """HTTPS with ALPN h2 and http/1.1; SubscribeToShard needs this one."""
        if self.tls_port is None:
            raise RuntimeError("this target was started with tls=False")
        return f"https://localhost:{self.tls_port}"

    @property
    def stream_name(self) -> str:
        return self.config.stream_name

    @property
    def stream_arn(self) -> str:
        config = self.config
        return f"arn:aws:kinesis:{config.region}:{config.account}:stream/{config.stream_name}"

    def shard_ids(self) -> list[str]:
        return [f"shardId-{index:012d}" for index in range(self.config.shards)]

    def client(self, tls: bool = False, config: ClientConfig | None = None) -> KinesisClient:
        """A :class:`KinesisClient` for this target (dummy credentials; trusts its cert)."""
        from kinesis_actors import KinesisClient  # noqa: PLC0415 - the server must not need it

        return KinesisClient(
            self.config.region,
            self.tls_endpoint_url if tls else self.endpoint_url,
            verify=self.ca_file or True,
            credentials=("load-target", "load-target"),
            config=config,
        )

    # Lifecycle --------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        if self.isolation == "thread":
            self._thread, ports, self._stop_thread = run_in_thread(self.config)
            self._stat_path = f"/proc/self/task/{ports['native_id']}/stat"
            self.pid = os.getpid()
        else:
            ports = self._start_process()
        self.port, self.tls_port = ports["port"], ports["tls_port"]

    def _start_process(self) -> dict[str, Any]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO), env.get("PYTHONPATH")]))
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.loadtarget._server",
                json.dumps(self.config.to_dict()),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=str(_REPO),
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl
        )
        self._process = process
        self.pid = process.pid
        self._stat_path = f"/proc/{process.pid}/stat"
        assert process.stdout is not None
        readable, _, _ = select.select([process.stdout], [], [], self.start_timeout)
        line = process.stdout.readline() if readable else b""
        if not line:
            self.stop()
            raise RuntimeError(f"the load target did not start:\n{self._errors()}")
        ports: dict[str, Any] = json.loads(line)
        return ports

    def _errors(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        text: str = self._stderr.read()[-4000:].decode("utf-8", "replace")
        return text

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            if process.stdin is not None:
                process.stdin.close()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
            if process.stdout is not None:
                process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        stop, self._stop_thread = self._stop_thread, None
        if stop is not None:
            stop()
            if self._thread is not None:
                self._thread.join(10)

    # Admin ------------------------------------------------------------------------------------

    def _admin(self, path: str, document: dict[str, Any] | None = None) -> dict[str, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            if document is None:
                connection.request("GET", path)
            else:
                body = json.dumps(document).encode()
                connection.request("POST", path, body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            payload = response.read()
        finally:
            connection.close()
        if response.status != 200:
            raise RuntimeError(f"load target admin {path}: {response.status} {payload!r}")
        result: dict[str, Any] = json.loads(payload)
        return result

    def stats(self) -> dict[str, Any]:
        """Counters: requests per operation, errors per code, injected faults, connections,
        totals and per-shard counts, and per shard a series of rows
        ``[second, accepted records, accepted bytes, throttled records, records read]``."""
        return self._admin("/_stats")

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server has used: its process's, or its thread's."""
        if self._stat_path is not None:
            seconds = _cpu_from_proc(self._stat_path)
            if seconds is not None:
                return seconds
        return float(self.stats()["cpu_seconds"])

    def set_faults(self, faults: Faults) -> None:
        self._admin("/_control", {"faults": faults.to_dict()})

    def pause(self, *shard_ids: str) -> None:
        """Stall every call and subscription touching these shards until :meth:`resume`."""
        self._admin("/_control", {"pause": list(shard_ids)})

    def resume(self, *shard_ids: str) -> None:
        self._admin("/_control", {"resume": list(shard_ids)})

    def advance_clock(self, seconds: float) -> float:
        """Move a manual clock forward; returns the clock's new reading."""
        return float(self._admin("/_control", {"advance": seconds})["clock"])

    def wait_until(self, predicate: Callable[[dict[str, Any]], bool], timeout: float) -> None:
        """Poll :meth:`stats` until ``predicate`` holds (for tests)."""
        deadline = time.monotonic() + timeout
        while not predicate(self.stats()):
            if time.monotonic() > deadline:
                raise TimeoutError("the load target never reached the expected state")
            time.sleep(0.02)
