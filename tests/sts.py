"""A real STS API on loopback for the assume-role tests: moto's server, with IAM enforced.

The server is moto's WSGI application under werkzeug's threaded server, in a thread of this
process, on a free loopback port. Before IAM is enforced two users are made: ``allowed``
(a policy allowing ``sts:AssumeRole``) and ``denied`` (no policy), each with an access key.
Then every request must be signed by a known key and permitted, so that AssumeRole with the
``denied`` keys gets STS's real ``AccessDenied``.

A thin WSGI layer in front of moto records every STS request (action, status, the role asked
for and the access key it was signed with): moto keeps the roles it handed out, not the
calls that were refused, and the tests count both.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from io import BytesIO
from typing import Any
from urllib.parse import parse_qs

_ASSUME_ROLE_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "*"}],
}
_KEY_ID = re.compile(r"Credential=([A-Z0-9]+)/")


@dataclass(frozen=True)
class StsCall:
    action: str
    status: int
    role_arn: str | None
    signed_by: str | None  # the access key id in the Authorization header
    external_id: str | None
    session_name: str | None
    duration: str | None


class _Recorder:
    """WSGI middleware: records each request's form parameters and the reply's status."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.calls: list[StsCall] = []
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = BytesIO(body)
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        found = _KEY_ID.search(environ.get("HTTP_AUTHORIZATION", ""))

        def record(status: str, headers: Any, *rest: Any) -> Any:
            if "Action" in form:
                with self.lock:
                    self.calls.append(
                        StsCall(
                            form["Action"],
                            int(status.split(maxsplit=1)[0]),
                            form.get("RoleArn"),
                            found.group(1) if found else None,
                            form.get("ExternalId"),
                            form.get("RoleSessionName"),
                            form.get("DurationSeconds"),
                        )
                    )
            return start_response(status, headers, *rest)

        result: Iterable[bytes] = self.app(environ, record)
        return result


class LocalSTS:
    """moto's STS (and IAM) on a free loopback port, IAM enforced; a context manager.

    ``endpoint_url``; ``allowed`` and ``denied``: ``(access_key, secret_key)`` of a user who
    may assume any role and of one who may not; :meth:`calls` lists the STS requests seen,
    :meth:`issued` the access key ids AssumeRole handed out for a role.
    """

    region = "us-east-1"

    def __init__(self) -> None:
        self.port = 0
        self.allowed: tuple[str, str] = ("", "")
        self.denied: tuple[str, str] = ("", "")
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._recorder: _Recorder | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LocalSTS:
        from moto import settings
        from moto.core.authorization import ActionAuthenticatorMixin
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one INFO line per request
        self._recorder = _Recorder(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            "127.0.0.1", 0, self._recorder, threaded=True, request_handler=MotoRequestHandler
        )
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="local-sts", daemon=True
        )
        self._thread.start()
        self.allowed = self._user("allowed", _ASSUME_ROLE_POLICY)
        self.denied = self._user("denied", None)
        # From here on every request is authenticated and authorized (moto reads these on
        # each request; this process runs no other moto).
        settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
        ActionAuthenticatorMixin.request_count = 0
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)

    def _user(self, name: str, policy: dict[str, Any] | None) -> tuple[str, str]:
        import boto3

        iam = boto3.client(
            "iam",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id="setup",
            aws_secret_access_key="setup",
        )
        iam.create_user(UserName=name)
        if policy is not None:
            iam.put_user_policy(
                UserName=name, PolicyName="assume", PolicyDocument=json.dumps(policy)
            )
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]

    def calls(self, role_arn: str | None = None, action: str = "AssumeRole") -> list[StsCall]:
        assert self._recorder is not None
        with self._recorder.lock:
            return [
                call
                for call in self._recorder.calls
                if call.action == action and (role_arn is None or call.role_arn == role_arn)
            ]

    def issued(self, role_arn: str) -> list[str]:
        """The access key ids AssumeRole gave for ``role_arn``, oldest first (from moto)."""
        from moto.sts.models import sts_backends

        keys: list[str] = []
        for account in list(sts_backends):
            for backend in sts_backends[account].values():
                keys += [r.access_key_id for r in backend.assumed_roles if r.role_arn == role_arn]
        return keys
