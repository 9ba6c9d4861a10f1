"""Gloo's route option ``upgrades: [{websocket: {enabled: bool}}]`` (issue
23, item 4): read and checked by the loader, carried out by the engine (a
WebSocket upgrade on a route that disables it is forwarded as a plain
request, and the connection closes after the answer). In memory, under
pytest and trial.
"""

from __future__ import annotations

from twisted.trial.unittest import TestCase

from twistgw.config.loader import ConfigError, load_text

from test_engine_phases import SWITCH, WS, Playbook

UPSTREAM = """
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: up, namespace: default}
spec:
  static:
    hosts: [{addr: 127.0.0.1, port: 9}]
"""


def config(route_options: str, vh_options: str = "") -> str:
    vh = f"    options: {vh_options}\n" if vh_options else ""
    return UPSTREAM + f"""---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: mem, namespace: default}}
spec:
  virtualHost:
    domains: ["*"]
{vh}    routes:
    - matchers: [{{prefix: /}}]
      routeAction: {{single: {{upstream: {{name: up, namespace: default}}}}}}
      options: {route_options}
"""


class LoadTests(TestCase):
    def route(self, options: str) -> object:
        return load_text(config(options)).virtual_services[0].routes[0]

    def test_enabled_by_default(self) -> None:
        self.assertTrue(self.route("{}").websocket)  # type: ignore[attr-defined]
        self.assertTrue(self.route("{upgrades: [{websocket: {}}]}").websocket)  # type: ignore[attr-defined]

    def test_disabled(self) -> None:
        self.assertFalse(self.route("{upgrades: [{websocket: {enabled: false}}]}").websocket)  # type: ignore

    def test_bad_values_are_refused_with_their_place(self) -> None:
        for options, where, why in [
            ("{upgrades: [{websocket: {enabled: maybe}}]}", "upgrades[0].websocket.enabled", "must be"),
            ("{upgrades: [{connect: {}}]}", "upgrades[0].connect", "CONNECT is not proxied"),
            ("{upgrades: [{h2c: {}}]}", "upgrades[0].h2c", "unknown field"),
            ("{upgrades: [{websocket: {}}, {websocket: {enabled: false}}]}", "upgrades[1]", "twice"),
            ("{upgrades: websocket}", "upgrades", "must be"),
        ]:
            with self.assertRaises(ConfigError) as caught:
                self.route(options)
            text = str(caught.exception)
            self.assertIn(where, text, options)
            self.assertIn(why, text, options)

    def test_a_virtual_host_option_is_refused(self) -> None:
        with self.assertRaises(ConfigError) as caught:
            load_text(config("{}", vh_options="{upgrades: [{websocket: {enabled: false}}]}"))
        self.assertIn("is a route option", str(caught.exception))


class EngineTests(TestCase):
    def test_a_route_that_disables_websocket_forwards_the_request_plain_and_closes(self) -> None:
        book = Playbook(self, config("{upgrades: [{websocket: {enabled: false}}]}"))
        book.proto.dataReceived(WS + b"GET /after HTTP/1.1\r\nHost: h\r\n\r\n")
        conn, sent = book.up(0)
        self.assertNotIn(b"upgrade", sent.value().lower())
        conn.dataReceived(SWITCH)  # a backend that switches anyway: never spliced
        out = book.t.value()
        self.assertTrue(out.startswith(b"HTTP/1.1 502 "), out)
        self.assertTrue(book.t.disconnecting)
        self.assertNotIn(b"/after", sent.value())

    def test_a_route_that_enables_websocket_splices(self) -> None:
        book = Playbook(self, config("{upgrades: [{websocket: {enabled: true}}]}"))
        book.proto.dataReceived(WS)
        conn, sent = book.up(0)
        self.assertIn(b"Upgrade: websocket", sent.value())
        conn.dataReceived(SWITCH)
        self.assertTrue(book.t.value().startswith(b"HTTP/1.1 101 "))
        self.assertFalse(book.t.disconnecting)
