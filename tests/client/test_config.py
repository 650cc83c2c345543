"""Bad configuration fails at construction, naming the option, before any network call."""

from __future__ import annotations

from typing import Any

import pytest

from kinesis_actors import ClientConfig, KinesisClient, errors


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"max_connections": 0}, "ClientConfig.max_connections"),
        ({"max_connections": True}, "ClientConfig.max_connections"),
        ({"max_keepalive_connections": -1}, "ClientConfig.max_keepalive_connections"),
        ({"connect_timeout": 0}, "ClientConfig.connect_timeout"),
        ({"read_timeout": -5}, "ClientConfig.read_timeout"),
        ({"subscribe_read_timeout": float("inf")}, "ClientConfig.subscribe_read_timeout"),
        ({"http2": "yes"}, "ClientConfig.http2"),
        ({"subscribe_window": 1024}, "ClientConfig.subscribe_window"),
        ({"subscribe_window": 2**30}, "ClientConfig.subscribe_window"),
        ({"subscriptions_per_connection": 0}, "ClientConfig.subscriptions_per_connection"),
        ({"subscriptions_per_connection": 2.5}, "ClientConfig.subscriptions_per_connection"),
        (
            {"subscriptions_per_connection": 2000, "subscribe_window": 2**20},
            "ClientConfig.subscriptions_per_connection",
        ),
        ({"retry": {"max_retries": 3}}, "ClientConfig.retry"),
    ],
)
def test_client_config_names_the_bad_option(kwargs: dict[str, Any], option: str) -> None:
    with pytest.raises(errors.ConfigError, match=option):
        ClientConfig(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"region": ""}, "region"),
        ({"endpoint_url": "localhost:4567"}, "endpoint_url"),
        ({"endpoint_url": "ftp://x"}, "endpoint_url"),
        ({"verify": 1}, "verify"),
        ({"credentials": ("only-a-key",)}, "credentials"),
        ({"credentials": ("key", "")}, "credentials"),
        ({"config": {"read_timeout": 1}}, "config"),
    ],
)
def test_client_arguments_name_the_bad_option(kwargs: dict[str, Any], option: str) -> None:
    with pytest.raises(errors.ConfigError, match=option):
        KinesisClient(**kwargs)


def test_config_errors_are_value_errors_too() -> None:
    # Callers that only know Python's conventions still catch them.
    with pytest.raises(ValueError, match="max_connections"):
        ClientConfig(max_connections=0)
