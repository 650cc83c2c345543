"""Fixtures for the client's tests of botocore's environment: a CONNECT proxy in front of the
local server, and the server's certificate as a CA bundle.

The local server's certificate is self-signed for the name ``Unknown`` (its subject's common
name; no subjectAltName), so it verifies for that name only, never for ``127.0.0.1`` or
``localhost``. The tests therefore reach the server as ``https://Unknown:<port>`` through the
proxy, which resolves ``Unknown`` to loopback as a corporate proxy resolves names its clients
cannot: verification is real (chain and hostname), with the certificate given only as
``AWS_CA_BUNDLE``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kinesis_actors import LocalKinesis
from kinesis_actors.local import find_server_dir
from tests.connect_proxy import ConnectProxy

#: The name the local server's certificate is issued to.
CERTIFICATE_HOST = "Unknown"

#: Every variable botocore (through urllib) reads for proxies and CA bundles.
_ENVIRONMENT = (
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "AWS_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
)


@pytest.fixture(scope="session")
def server_certificate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local server's certificate (from its ``server.json``) as a PEM file."""
    document = json.loads((find_server_dir() / "server.json").read_text())
    path = tmp_path_factory.mktemp("ca") / "kinesis-local.pem"
    path.write_text(document["server"]["cert"])
    return path


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No proxy or CA bundle from the machine, and an empty AWS config file."""
    for name in _ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "aws-config"
    config.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    return monkeypatch


@pytest.fixture
def connect_proxy() -> Iterator[ConnectProxy]:
    """A loopback CONNECT proxy that resolves the certificate's name to loopback."""
    with ConnectProxy(hosts={CERTIFICATE_HOST: "127.0.0.1"}) as running:
        yield running


@pytest.fixture
def behind_proxy(
    clean_environment: pytest.MonkeyPatch,
    connect_proxy: ConnectProxy,
    server_certificate: Path,
) -> ConnectProxy:
    """``HTTPS_PROXY`` set to the proxy and ``AWS_CA_BUNDLE`` to the server's certificate."""
    clean_environment.setenv("HTTPS_PROXY", connect_proxy.url())
    clean_environment.setenv("AWS_CA_BUNDLE", str(server_certificate))
    return connect_proxy


def certificate_endpoint(local: LocalKinesis) -> str:
    """The server's TLS endpoint under the name its certificate is issued to."""
    return f"https://{CERTIFICATE_HOST}:{local.tls_port}"
