"""twistgw.testing's recording backend and ``start_gateway`` from resources
given as Python data, end to end on loopback (trial style: runs under trial
and pytest; trial's janitor also checks that ``close()``/``stop()`` leave a
clean reactor)."""

from __future__ import annotations

import os
import tempfile

import treq
from twisted.trial import unittest
from twisted.web.http_headers import Headers

from twistgw.sdk import testing as sdk_testing
from twistgw.sdk.testing import (BackendResponse, ChainTester, RecordedRequest, resources_yaml, start_gateway,
                             start_recording_backend)

VS = {
    "apiVersion": "gateway.vendor.io/v1", "kind": "VirtualService",
    "metadata": {"name": "shop", "namespace": "default"},
    "spec": {"virtualHost": {"domains": ["shop.example.com"], "routes": [
        {"matchers": [{"prefix": "/api/"}], "options": {"prefixRewrite": "/v2/"},
         "routeAction": {"single": {"upstream": {"name": "backend"}}}},
        {"matchers": [{"prefix": "/"}], "routeAction": {"single": {"upstream": {"name": "backend"}}}},
    ]}},
}


class RecordingBackendTests(unittest.TestCase):
    def setUp(self) -> None:
        self.backend = start_recording_backend()
        self.addCleanup(self.backend.close)

    async def test_records_what_it_receives_and_answers_the_default(self) -> None:
        response = await treq.post(self.backend.url("/a?b=1"), data=b"payload",
                                   headers=Headers({"X-Two": ["1", "2"], "X-One": ["x"]}))
        self.assertEqual((response.code, await response.content()), (200, b"ok"))
        self.assertEqual(response.headers.getRawHeaders("content-type"), ["text/plain"])
        seen = self.backend.last
        self.assertEqual((seen.method, seen.target, seen.path, seen.body), ("POST", "/a?b=1", "/a", b"payload"))
        self.assertEqual(seen.header_values("x-two"), ["1", "2"])
        self.assertEqual(seen.header("X-ONE"), "x")
        self.assertIsNone(seen.header("x-absent"))
        self.assertIn(("x-two", "1"), seen.headers)  # names lower-cased, each value its own pair

    async def test_configurable_answers(self) -> None:
        self.backend.respond = BackendResponse(201, b"made", {"x-id": "7"})
        response = await treq.get(self.backend.url("/"))
        self.assertEqual((response.code, await response.content()), (201, b"made"))
        self.assertEqual(response.headers.getRawHeaders("x-id"), ["7"])

        def by_path(request: RecordedRequest) -> BackendResponse:
            return BackendResponse(404 if request.path == "/missing" else 200, request.path.encode())

        self.backend.respond = by_path
        missing = await treq.get(self.backend.url("/missing"))
        self.assertEqual((missing.code, await missing.content()), (404, b"/missing"))
        self.assertEqual(len(self.backend.requests), 2)

    def test_upstream_resource(self) -> None:
        upstream = self.backend.upstream("orders", "shop")
        self.assertEqual(upstream["metadata"], {"name": "orders", "namespace": "shop"})
        self.assertEqual(upstream["spec"]["static"]["hosts"], [{"addr": "127.0.0.1", "port": self.backend.port}])


class GatewayFromDataTests(unittest.TestCase):
    def setUp(self) -> None:
        self.backend = start_recording_backend()
        self.addCleanup(self.backend.close)

    async def _start(self, resources, **kw):
        gw = start_gateway(resources, [], **kw)
        self.addCleanup(gw.stop)
        return gw

    async def test_mappings_and_the_backend_port_filled_in(self) -> None:
        gw = await self._start([VS], backend=self.backend)
        response = await treq.get(gw.url("/api/items?x=1"), headers=Headers({"Host": ["shop.example.com"]}))
        self.assertEqual((response.code, await response.content()), (200, b"ok"))
        seen = self.backend.last
        self.assertEqual((seen.method, seen.target), ("GET", "/v2/items?x=1"))  # prefixRewrite applied
        self.assertEqual(seen.header("x-forwarded-proto"), "http")
        self.assertEqual(seen.header("host"), "shop.example.com")

    async def test_yaml_text_and_temporary_directory_removed_on_stop(self) -> None:
        text = resources_yaml([VS, self.backend.upstream()])
        gw = start_gateway(text, [])
        directory = gw.config_dir
        self.assertTrue(os.path.isfile(os.path.join(directory, "resources.yaml")))
        response = await treq.get(gw.url("/"), headers=Headers({"Host": ["shop.example.com"]}))
        self.assertEqual(response.code, 200)
        await response.content()
        await gw.stop()
        self.assertFalse(os.path.exists(directory))

    async def test_a_directory_is_still_a_directory(self) -> None:
        first = await self._start([VS], backend=self.backend)
        second = await self._start(first.config_dir)  # the same files, served again
        self.assertEqual(second.config_dir, first.config_dir)
        response = await treq.get(second.url("/"), headers=Headers({"Host": ["shop.example.com"]}))
        self.assertEqual(response.code, 200)
        await response.content()
        self.assertEqual(len(self.backend.requests), 1)

    def test_backend_with_a_directory_is_refused(self) -> None:
        with self.assertRaises(TypeError):
            start_gateway("/nonexistent", [], backend=self.backend)

    async def test_bad_resources_are_a_config_error_and_leave_no_directory(self) -> None:
        bad = dict(VS, spec={"virtualHost": {"domains": ["*"], "routes": [
            {"matchers": [{"prefix": "/"}], "routeAction": {"single": {"upstream": {"name": "nowhere"}}}}]}})
        private = os.path.abspath(self.mktemp())  # temporary directories go here, seen by this test alone
        os.makedirs(private)
        self.patch(tempfile, "tempdir", private)
        with self.assertRaises(sdk_testing.ConfigError) as caught:
            start_gateway([bad], [])
        self.assertIn("nowhere", str(caught.exception))
        self.assertEqual(os.listdir(private), [])
        gw = start_gateway([VS], [], backend=self.backend)  # the control: data is written there
        self.assertEqual(os.path.dirname(gw.config_dir), private)
        await gw.stop()
        self.assertEqual(os.listdir(private), [])

    def test_a_resource_of_another_type_is_refused(self) -> None:
        with self.assertRaises(TypeError) as caught:
            resources_yaml([VS, 42])  # type: ignore[list-item]
        self.assertIn("not int", str(caught.exception))


class ChainTesterFromDataTests(unittest.TestCase):
    async def test_from_resources(self) -> None:
        direct = dict(VS, spec={"virtualHost": {"domains": ["*"], "routes": [
            {"matchers": [{"prefix": "/"}], "directResponseAction": {"status": 200, "body": "hi"}}]}})
        tester = ChainTester.from_resources([direct, "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"], [])
        result = await tester.request("GET", "http://any/x")
        self.assertEqual((result.status, result.body), (200, b"hi"))

