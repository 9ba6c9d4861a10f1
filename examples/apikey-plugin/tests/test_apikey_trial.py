"""The apikey plugin's tests in trial style: ``twisted.trial.unittest.TestCase``.

The same module runs, with the same result and the same test count, under
both runners (from ``examples/apikey-plugin``)::

    python -m twisted.trial tests     # every TestCase under tests/
    pytest tests/test_apikey_trial.py

In memory, :class:`twistgw.sdk.testing.ChainTester` compiles the configuration
and runs requests through the plugin chain: no sockets. End to end,
:func:`twistgw.sdk.testing.start_gateway` serves the configuration on a free
loopback port; ``await gw.stop()`` (here an ``addCleanup``) closes every
connection and timer, so trial finds a clean reactor even after requests
made with treq's default (keep-alive) pool.
"""

from __future__ import annotations

import treq
from twisted.trial import unittest
from twisted.web.http_headers import Headers

from twistgw.sdk.testing import BackendResponse, ChainTester, ConfigError, start_gateway, start_recording_backend

from tests.apikey_support import CONFIG_DIR, HOST, PLUGINS, resources


class InMemoryTests(unittest.TestCase):
    """The plugin's decisions, through the real chain, without sockets."""

    def setUp(self) -> None:
        self.tester = ChainTester.from_directory(CONFIG_DIR, PLUGINS)

    async def test_key_required(self) -> None:
        missing = await self.tester.request("GET", f"{HOST}/orders")
        self.assertEqual((missing.status, missing.body), (401, b"API key is missing"))
        self.assertEqual(missing.decided_by, "apikey")

    async def test_wrong_key_is_forbidden(self) -> None:
        wrong = await self.tester.request("GET", f"{HOST}/orders", headers={"X-Api-Key": "nope"})
        self.assertEqual((wrong.status, wrong.body), (403, b"API key is not valid"))

    async def test_good_key_admits_and_is_not_forwarded(self) -> None:
        ok = await self.tester.request("GET", f"{HOST}/orders", headers={"X-Api-Key": "acme-key-1234"})
        self.assertEqual(ok.status, 200)
        assert ok.ctx is not None
        self.assertEqual(ok.ctx.principal, "acme")
        self.assertEqual(dict(ok.ctx.identities), {"apikey": "acme"})
        self.assertIsNone(ok.forwarded_headers.getRawHeaders(b"x-api-key"))

    async def test_status_route_is_open(self) -> None:
        status = await self.tester.request("GET", f"{HOST}/status")
        self.assertEqual((status.status, status.body), (200, b"up\n"))
        self.assertEqual(status.trace, [])  # the plugin is disabled on that route

    def test_bad_options_are_a_config_error(self) -> None:
        bad = """
apiVersion: gateway.vendor.io/v1
kind: VirtualService
metadata: {name: partners}
spec:
  virtualHost:
    domains: ["*"]
    options: {apikey: {header: X-Api-Key}}
    routes:
    - matchers: [{prefix: /}]
      directResponseAction: {status: 200}
"""
        with self.assertRaises(ConfigError) as caught:
            ChainTester.from_yaml(bad, PLUGINS)
        self.assertIn("options.apikey.keysSecretRef: is required", str(caught.exception))


class EndToEndTests(unittest.TestCase):
    """The gateway on a loopback port, asked over real HTTP with treq."""

    def setUp(self) -> None:
        self.gw = start_gateway(CONFIG_DIR, PLUGINS)
        self.addCleanup(self.gw.stop)

    async def test_key_required(self) -> None:
        response = await treq.get(self.gw.url("/orders"), headers=Headers({"Host": ["partners.example.com"]}))
        self.assertEqual(response.code, 401)
        self.assertEqual(await response.content(), b"API key is missing")

    async def test_good_key(self) -> None:
        response = await treq.get(self.gw.url("/orders"),
                                  headers=Headers({"Host": ["partners.example.com"], "X-Api-Key": ["acme-key-1234"]}))
        self.assertEqual(response.code, 200)
        self.assertEqual(await response.content(), b"hello partner\n")


class RecordedBackendTests(unittest.TestCase):
    """The configuration given as data, forwarding to a recording backend:
    what the backend received is the assertion."""

    def setUp(self) -> None:
        self.backend = start_recording_backend(BackendResponse(200, b"orders", {"content-type": "text/plain"}))
        self.addCleanup(self.backend.close)  # cleanups run last-in first-out: the gateway stops first
        self.gw = start_gateway(resources(), PLUGINS, backend=self.backend)
        self.addCleanup(self.gw.stop)

    async def test_the_key_is_not_forwarded(self) -> None:
        response = await treq.post(self.gw.url("/orders?page=2"), data=b"{}",
                                   headers=Headers({"Host": ["partners.example.com"], "X-Api-Key": ["acme-key-1234"]}))
        self.assertEqual((response.code, await response.content()), (200, b"orders"))
        seen = self.backend.last
        self.assertEqual((seen.method, seen.target, seen.body), ("POST", "/orders?page=2", b"{}"))
        self.assertIsNone(seen.header("x-api-key"))
        self.assertEqual(seen.header("x-forwarded-for"), "127.0.0.1")

    async def test_a_refused_request_never_reaches_the_backend(self) -> None:
        response = await treq.get(self.gw.url("/orders"),
                                  headers=Headers({"Host": ["partners.example.com"], "X-Api-Key": ["nope"]}))
        self.assertEqual(response.code, 403)
        await response.content()
        self.assertEqual(self.backend.requests, [])
