"""``start_gateway(...).stop()`` leaves a clean reactor: trial's own check
(its janitor fails a test that leaves connections or timers behind) is the
assertion here, under trial and under pytest alike."""

from __future__ import annotations

import os
import shutil
import tempfile

import treq
from twisted.internet import defer, reactor
from twisted.internet.error import ConnectionClosed
from twisted.trial import unittest
from twisted.web import resource, server
from twisted.web.client import ResponseFailed, ResponseNeverReceived

from support.http import static_upstream_yaml, vs_yaml
from twistgw.sdk.testing import start_gateway


class _Hang(resource.Resource):
    """A backend that never answers (a request stays in flight)."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.arrived: defer.Deferred = defer.Deferred()
        self.requests: list = []

    def render(self, request):
        self.requests.append(request)
        if not self.arrived.called:
            self.arrived.callback(None)
        return server.NOT_DONE_YET


class StopTests(unittest.TestCase):
    def setUp(self) -> None:
        self.hang = _Hang()
        site = server.Site(self.hang)
        site.log = lambda request: None
        self.backend = reactor.listenTCP(0, site, interface="127.0.0.1")
        self.addCleanup(self.backend.stopListening)
        directory = tempfile.mkdtemp(prefix="twistgw-test-")
        self.addCleanup(shutil.rmtree, directory, True)
        routes = ("    - matchers: [{prefix: /direct}]\n"
                  "      directResponseAction: {status: 200, body: direct}\n"
                  "    - matchers: [{prefix: /}]\n"
                  "      routeAction: {single: {upstream: {name: hang}}}\n")
        with open(os.path.join(directory, "gw.yaml"), "w") as f:
            f.write(vs_yaml(routes=routes) + "---\n" + static_upstream_yaml("hang", [self.backend.getHost().port]))
        self.gw = start_gateway(directory, [])

    async def test_idle_keep_alive_connections_of_treqs_default_pool(self) -> None:
        for _ in range(3):
            response = await treq.get(self.gw.url("/direct"))
            self.assertEqual(await response.content(), b"direct")
        self.assertEqual(len(self.gw.service.factory.connections), 1)  # kept alive, idle
        await self.gw.stop()
        self.assertEqual(self.gw.service.factory.connections, set())

    async def test_a_request_in_flight(self) -> None:
        pending = treq.get(self.gw.url("/slow"))
        await self.hang.arrived
        upstream_gone = self.hang.requests[0].notifyFinish()
        await self.gw.stop()
        with self.assertRaises((ResponseNeverReceived, ResponseFailed)):  # the gateway closed it
            await pending
        self.assertEqual(self.gw.service.factory.connections, set())
        with self.assertRaises(ConnectionClosed):  # and the gateway's upstream request was abandoned
            await upstream_gone
