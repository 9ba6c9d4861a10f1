"""Fixtures for the data-path tests of tests/engine (issue #13).

``eng``       a gateway (in this process, on loopback) in front of a
              :class:`support.recorder.Recorder` that records the exact bytes
              it receives; routes under the domain ``gw.test``:

              ``/protected``  the ``denyall`` plugin (401 ``go away``)
              ``/slow``       a 300 ms route timeout
              ``/refused``    an upstream nobody listens on
              ``/``           the recorder

              and a ``*`` virtual service answering ``200 star`` itself.
              ``head_timeout`` 0.5 s, ``idle_timeout`` 1 s.
``recorders`` ``recorders(respond=None, interface="127.0.0.1")`` starts more.
``jwt_key``   an RSA key, its PEM public key, and ``token(**claims)``.

Helpers (requests in bytes, the strict xfail marks) are in engine_helpers.py.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import pytest
import pytest_twisted
from twisted.internet import defer

from engine_helpers import Engine, engine_config
from support.http import wait_for
from support.plugins import DenyAll
from support.recorder import Recorder, start_recorder


@pytest.fixture
def recorders() -> Any:
    started: list[Recorder] = []

    def start(respond: Callable[..., Any] | None = None, interface: str = "127.0.0.1") -> Recorder:
        r = start_recorder(respond, interface)
        started.append(r)
        return r

    yield start
    for r in started:
        pytest_twisted.blockon(defer.ensureDeferred(r.close()))


@pytest.fixture
def eng(recorders: Any, unused_port: int, config_dir: Any, gateway: Any) -> Any:
    rec = recorders()
    g = gateway(config_dir(engine_config(rec.port, unused_port)),
                plugins=[("denyall", DenyAll())], head_timeout=0.5, idle_timeout=1.0)
    e = Engine(g, rec)
    yield e
    pytest_twisted.blockon(defer.ensureDeferred(
        wait_for(lambda: g.service.gateway.inflight == 0, timeout=3)))


@pytest.fixture(scope="session")
def jwt_key() -> Any:
    """``(public_pem, token(**claims))``: RS256 tokens of issuer ``https://issuer.test``."""
    import jwt
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo).decode()

    def token(**claims: Any) -> str:
        body = {"iss": "https://issuer.test", "sub": "alice", "exp": int(time.time()) + 3600}
        body.update(claims)
        return jwt.encode(body, key, algorithm="RS256")

    return pem, token


