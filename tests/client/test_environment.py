"""What botocore's configuration decides for the client, without a server: the CA bundle
(``_tls.resolve_verify``), the proxy (``_proxy.resolve_proxy``) and the CONNECT exchange."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from kinesis_actors import errors
from kinesis_actors.client._proxy import (
    Proxy,
    connect_request,
    parse_connect_reply,
    resolve_proxy,
)
from kinesis_actors.client._service import _resolve_network
from kinesis_actors.client._tls import resolve_verify, ssl_contexts

ENDPOINT = "https://kinesis.us-east-1.amazonaws.com"


def test_verify_true_takes_aws_ca_bundle(clean_environment: pytest.MonkeyPatch) -> None:
    clean_environment.setenv("AWS_CA_BUNDLE", "/etc/corp/ca.pem")
    assert resolve_verify(True) == "/etc/corp/ca.pem"


def test_verify_true_takes_the_config_file_ca_bundle(
    clean_environment: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.write_text("[default]\nca_bundle = /etc/from-config.pem\n")
    clean_environment.setenv("AWS_CONFIG_FILE", str(config))
    assert resolve_verify(True) == "/etc/from-config.pem"
    clean_environment.setenv("AWS_CA_BUNDLE", "/etc/from-env.pem")
    assert resolve_verify(True) == "/etc/from-env.pem"  # botocore: the environment first


def test_verify_true_falls_back_to_requests_ca_bundle_then_to_certifi(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    assert resolve_verify(True) is True
    clean_environment.setenv("REQUESTS_CA_BUNDLE", "/etc/requests.pem")
    assert resolve_verify(True) == "/etc/requests.pem"


def test_explicit_verify_wins_over_the_configured_bundle(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    clean_environment.setenv("AWS_CA_BUNDLE", "/etc/corp/ca.pem")
    assert resolve_verify(False) is False
    assert resolve_verify("/mine.pem") == "/mine.pem"


def test_a_blank_configured_bundle_is_a_config_error(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    clean_environment.setenv("AWS_CA_BUNDLE", "  ")
    with pytest.raises(errors.ConfigError, match="AWS_CA_BUNDLE"):
        resolve_verify(True)


def test_a_missing_bundle_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.pem"
    with pytest.raises(errors.ConfigError, match=r"nowhere\.pem"):
        ssl_contexts(str(missing))


def test_an_http_endpoint_builds_no_tls_context(tmp_path: Path) -> None:
    # Not even the CA bundle is read: a missing one is no error where TLS is never spoken.
    network = _resolve_network("http://localhost:4567", str(tmp_path / "nowhere.pem"))
    assert network.pool_ssl is None
    assert network.subscription_ssl is None


def test_an_https_endpoint_gets_both_tls_contexts() -> None:
    network = _resolve_network(ENDPOINT, True)
    assert network.pool_ssl is not None
    assert network.subscription_ssl is not None


def test_no_proxy_set_means_direct(clean_environment: pytest.MonkeyPatch) -> None:
    assert resolve_proxy(ENDPOINT) is None


def test_https_proxy_is_used_for_the_https_endpoint(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    clean_environment.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    clean_environment.setenv("HTTP_PROXY", "http://other.corp:8080")
    assert resolve_proxy(ENDPOINT) == Proxy("proxy.corp", 3128)
    assert resolve_proxy("http://127.0.0.1:4567") == Proxy("other.corp", 8080)


def test_a_proxy_without_scheme_or_port_gets_botocores_defaults(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    clean_environment.setenv("https_proxy", "proxy.corp")
    proxy = resolve_proxy(ENDPOINT)
    assert proxy == Proxy("proxy.corp", 80)
    assert proxy is not None
    assert proxy.url == "http://proxy.corp:80"


@pytest.mark.parametrize(
    "no_proxy", ["kinesis.us-east-1.amazonaws.com", ".amazonaws.com", "amazonaws.com"]
)
def test_no_proxy_bypasses_the_proxy(clean_environment: pytest.MonkeyPatch, no_proxy: str) -> None:
    clean_environment.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    clean_environment.setenv("NO_PROXY", f"localhost,{no_proxy}")
    assert resolve_proxy(ENDPOINT) is None
    assert resolve_proxy("https://kinesis.example.org") == Proxy("proxy.corp", 3128)


def test_no_proxy_star_bypasses_it_for_every_host(clean_environment: pytest.MonkeyPatch) -> None:
    clean_environment.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    clean_environment.setenv("NO_PROXY", "*")
    assert resolve_proxy(ENDPOINT) is None
    assert resolve_proxy("https://kinesis.example.org") is None


def test_proxy_credentials_become_a_header_and_stay_out_of_repr_and_str(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    clean_environment.setenv("HTTPS_PROXY", "http://alice:s%40cret@proxy.corp:3128")
    proxy = resolve_proxy(ENDPOINT)
    assert proxy is not None
    expected = "Basic " + base64.b64encode(b"alice:s@cret").decode()
    assert proxy.headers == {"Proxy-Authorization": expected}
    for text in (repr(proxy), str(proxy), proxy.url):
        assert "cret" not in text
        assert expected not in text
    assert str(proxy) == "proxy.corp:3128"


def test_an_https_proxy_is_refused_without_its_credentials(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    clean_environment.setenv("HTTPS_PROXY", "https://alice:hunter2@proxy.corp:3129")
    with pytest.raises(errors.ConfigError, match="http://") as caught:
        resolve_proxy(ENDPOINT)
    assert "hunter2" not in str(caught.value)
    assert "proxy.corp:3129" in str(caught.value)


def test_connect_request_names_the_target_and_carries_the_headers() -> None:
    assert connect_request("Unknown", 4567, {"Proxy-Authorization": "Basic eA=="}) == (
        b"CONNECT Unknown:4567 HTTP/1.1\r\nHost: Unknown:4567\r\n"
        b"Proxy-Authorization: Basic eA==\r\n\r\n"
    )
    assert connect_request("::1", 443, {}).startswith(b"CONNECT [::1]:443 HTTP/1.1\r\n")


def test_connect_reply_is_parsed_once_its_head_is_complete() -> None:
    reply = b"HTTP/1.1 200 Connection established\r\nVia: x\r\n\r\n"
    for cut in range(len(reply)):
        assert parse_connect_reply(reply[:cut]) is None
    assert parse_connect_reply(reply) == (200, "Connection established", b"")
    assert parse_connect_reply(b"HTTP/1.0 407 Proxy Auth\r\n\r\n\x16") == (
        407,
        "Proxy Auth",
        b"\x16",
    )


@pytest.mark.parametrize("head", [b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 2x0 OK\r\n\r\n"])
def test_a_reply_that_is_not_http_is_refused(head: bytes) -> None:
    with pytest.raises(ValueError, match="not an HTTP reply"):
        parse_connect_reply(head)


def test_an_endless_reply_head_is_refused() -> None:
    with pytest.raises(ValueError, match="within"):
        parse_connect_reply(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 5000)
