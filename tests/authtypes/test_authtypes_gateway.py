"""The config types in a real gateway on loopback: API keys rotated by
writing Secret files while it serves, and passThroughAuth / customAuth
asking a real HTTP authorization service (admit, refuse with a body and
headers, too slow, down) in front of a real backend."""

from __future__ import annotations

import io
import json
import pathlib
import shutil
import tempfile
from typing import Any

from twisted.internet import reactor
from twisted.logger import formatEvent, globalLogPublisher
from twistgw.runtime.logs import buffered_access_log
from twistgw.sdk.testing import start_gateway
from twistgw_authtypes import AuthTypesPlugin
from twistgw_extauth import ExtAuthPlugin

from support.http import http_request, raw_exchange, sleep, start_backend
from support.recorder import Recorded, start_recorder
from support.trial import TestCase
from test_services_loopback import _closed_port, reply

PLUGINS = [("extauth", ExtAuthPlugin), ("authtypes", AuthTypesPlugin)]


def vs(upstream_port: int, options: str) -> str:
    return f"""apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: backend, namespace: gloo-system}}
spec:
  static: {{hosts: [{{addr: 127.0.0.1, port: {upstream_port}}}]}}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: petstore, namespace: gloo-system}}
spec:
  virtualHost:
    domains: ["*"]
    options:
{options}
    routes:
    - matchers: [{{prefix: /}}]
      routeAction: {{single: {{upstream: {{name: backend, namespace: gloo-system}}}}}}
"""


def key_secret(name: str, key: str, team: str = "infra") -> str:
    return f"""apiVersion: v1
kind: Secret
type: extauth.solo.io/apikey
metadata: {{name: {name}, namespace: gloo-system, labels: {{team: {team}}}}}
stringData: {{api-key: {key}}}
"""


class _GatewayTest(TestCase):
    def setUp(self) -> None:
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="twistgw-authtypes-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.backend = start_backend("backend")
        self.addCleanup(self.backend.close)

    def serve(self) -> Any:
        gw = start_gateway(str(self.dir), PLUGINS)
        self.addCleanup(gw.stop)
        self.gw = gw
        return gw

    async def get(self, path: str = "/pets", **headers: str) -> Any:
        return await http_request("GET", self.gw.url(path), headers={k.replace("_", "-"): v
                                                                      for k, v in headers.items()})


def keys_auth_config(*refs: str) -> str:
    listed = ", ".join(f"{{name: {r}}}" for r in refs)
    return f"""apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: keys, namespace: gloo-system}}
spec:
  configs:
  - apiKeyAuth: {{apiKeySecretRefs: [{listed}]}}
"""


class KeyRotationTests(_GatewayTest):
    async def test_secrets_added_changed_and_deleted_while_serving(self) -> None:
        (self.dir / "vs.yaml").write_text(vs(self.backend.port, "      extauth: {configRef: {name: keys}}"))
        (self.dir / "auth.yaml").write_text(keys_auth_config("k1"))
        (self.dir / "k1.yaml").write_text(key_secret("k1", "first-key-111"))
        self.serve()
        self.assertEqual((await self.get(api_key="first-key-111")).status, 200)
        self.assertIsNone(self.backend.requests[-1].header(b"api-key"))
        self.assertEqual((await self.get(api_key="second-key-222")).status, 401)

        (self.dir / "k2.yaml").write_text(key_secret("k2", "second-key-222"))  # added
        (self.dir / "auth.yaml").write_text(keys_auth_config("k1", "k2"))
        self.assertTrue(self.gw.reload())
        self.assertEqual((await self.get(api_key="second-key-222")).status, 200)

        (self.dir / "k1.yaml").write_text(key_secret("k1", "rotated-key-333"))  # changed
        self.assertTrue(self.gw.reload())
        self.assertEqual((await self.get(api_key="first-key-111")).status, 401)
        self.assertEqual((await self.get(api_key="rotated-key-333")).status, 200)

        (self.dir / "k2.yaml").unlink()  # deleted while still referenced: refused, the last good one serves
        self.assertFalse(self.gw.reload())
        self.assertEqual((await self.get(api_key="second-key-222")).status, 200)
        (self.dir / "auth.yaml").write_text(keys_auth_config("k1"))  # and the reference with it
        self.assertTrue(self.gw.reload())
        self.assertEqual((await self.get(api_key="second-key-222")).status, 401)
        self.assertEqual((await self.get(api_key="rotated-key-333")).status, 200)

        (self.dir / "k1.yaml").write_text(key_secret("k1", "rotated-key-333").replace("extauth.solo.io/apikey",
                                                                                         "Opaque"))
        self.assertFalse(self.gw.reload())  # a Secret of another type never holds a key


def metadata_secret(name: str, key: str, user: str, email: str) -> str:
    return key_secret(name, key).replace(f"stringData: {{api-key: {key}}}",
                                         f"stringData: {{api-key: {key}, user: {user}, email: {email}}}")


METADATA_AUTH = """apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {name: keys, namespace: gloo-system}
spec:
  configs:
  - apiKeyAuth:
      labelSelector: {team: infra}
      headersFromMetadataEntry: {x-email: {name: email, required: true}}
"""


class KeyAnswersTests(_GatewayTest):
    """The answers an apiKeyAuth makes when the configuration loads (one per
    key, one per kind of refusal), seen from a client on loopback."""

    async def test_an_owner_and_metadata_changed_on_reload_take_effect(self) -> None:
        (self.dir / "vs.yaml").write_text(vs(self.backend.port, "      extauth: {configRef: {name: keys}}"))
        (self.dir / "auth.yaml").write_text(METADATA_AUTH)
        (self.dir / "k1.yaml").write_text(metadata_secret("k1", "first-key-111", "alice", "a@example.com"))
        self.serve()
        self.assertEqual((await self.get(api_key="first-key-111", x_email="forged@example.com")).status, 200)
        self.assertEqual(self.backend.requests[-1].header(b"x-email"), [b"a@example.com"])

        (self.dir / "k1.yaml").write_text(metadata_secret("k1", "first-key-111", "bob", "b@example.com"))
        self.assertTrue(self.gw.reload())
        self.assertEqual((await self.get(api_key="first-key-111")).status, 200)
        self.assertEqual(self.backend.requests[-1].header(b"x-email"), [b"b@example.com"])

        (self.dir / "k1.yaml").write_text(key_secret("k1", "first-key-111"))  # the required entry gone
        self.assertTrue(self.gw.reload())
        self.assertEqual((await self.get(api_key="first-key-111")).status, 401)

    async def test_keys_never_reach_a_log_and_duplicates_in_any_case_are_refused(self) -> None:
        (self.dir / "vs.yaml").write_text(vs(self.backend.port, "      extauth: {configRef: {name: keys}}"))
        (self.dir / "auth.yaml").write_text(METADATA_AUTH)
        (self.dir / "k1.yaml").write_text(metadata_secret("k1", "first-key-111", "alice", "a@example.com"))
        (self.dir / "k2.yaml").write_text(key_secret("k2", "second-key-222"))  # no email: refused
        events: list[str] = []

        def observe(event: dict) -> None:
            events.append(f"{formatEvent(event)} {event!r}")

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)
        out = io.StringIO()
        gw = start_gateway(str(self.dir), PLUGINS, access_log=buffered_access_log(out, "json", reactor))
        self.gw = gw
        self.assertEqual((await self.get(api_key="first-key-111")).status, 200)
        self.assertEqual((await self.get(api_key="first-key-112")).status, 401)
        self.assertEqual((await self.get(api_key="second-key-222")).status, 401)
        for spellings in ((b"api-key", b"API-KEY"), (b"Api-Key", b"api-key"), (b"api-key", b"api-key")):
            head = b"GET /pets HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + b"".join(
                name + b": first-key-111\r\n" for name in spellings) + b"\r\n"
            raw = await raw_exchange(gw.port, head)
            self.assertTrue(raw.data.startswith(b"HTTP/1.1 401 "), raw.data[:80])
        await gw.stop()  # writes the buffered access lines
        lines = [line for line in out.getvalue().split("\n") if line]  # JSON records: "\x1e{...}\n"
        self.assertEqual(len(lines), 6)
        self.assertIn('"principal": "alice"', lines[0])
        logged = "\n".join(lines + events)
        for key in ("first-key-111", "first-key-112", "second-key-222"):
            self.assertNotIn(key, logged)


class LabelRotationTests(_GatewayTest):
    async def test_keys_selected_by_label_come_and_go_with_their_files(self) -> None:
        (self.dir / "vs.yaml").write_text(vs(self.backend.port, "      extauth: {configRef: {name: keys}}"))
        (self.dir / "auth.yaml").write_text("""apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {name: keys, namespace: gloo-system}
spec:
  configs:
  - apiKeyAuth: {labelSelector: {team: infra}}
""")
        (self.dir / "k1.yaml").write_text(key_secret("k1", "first-key-111"))
        self.serve()
        self.assertEqual((await self.get(api_key="first-key-111")).status, 200)
        (self.dir / "k2.yaml").write_text(key_secret("k2", "second-key-222"))  # added
        self.assertTrue(self.gw.reload())
        self.assertEqual((await self.get(api_key="second-key-222")).status, 200)
        (self.dir / "k1.yaml").write_text(key_secret("k1", "rotated-key-333"))  # changed
        self.assertTrue(self.gw.reload())
        self.assertEqual((await self.get(api_key="first-key-111")).status, 401)
        self.assertEqual((await self.get(api_key="rotated-key-333")).status, 200)
        (self.dir / "k2.yaml").unlink()  # deleted: revoked at once
        self.assertTrue(self.gw.reload())
        self.assertEqual((await self.get(api_key="second-key-222")).status, 401)
        (self.dir / "k3.yaml").write_text(key_secret("k3", "other-team-444", team="ops"))  # not selected
        self.assertTrue(self.gw.reload())
        self.assertEqual((await self.get(api_key="other-team-444")).status, 401)
        (self.dir / "k1.yaml").unlink()  # the last one: nothing admits, the configuration stays valid
        self.assertTrue(self.gw.reload())
        self.assertEqual((await self.get(api_key="rotated-key-333")).status, 401)


def policy_map(allowed_method: str) -> str:
    return f"""apiVersion: v1
kind: ConfigMap
metadata: {{name: policy, namespace: gloo-system}}
data:
  policy.rego: |
    package test

    default allow = false
    allow {{
        startswith(input.http_request.path, "/api/pets")
        input.http_request.method == "{allowed_method}"
    }}
"""


class OpaGatewayTests(_GatewayTest):
    async def test_policy_edited_while_serving(self) -> None:
        (self.dir / "vs.yaml").write_text(vs(self.backend.port, "      extauth: {configRef: {name: opa}}"))
        (self.dir / "auth.yaml").write_text("""apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {name: opa, namespace: gloo-system}
spec:
  configs:
  - opaAuth: {modules: [{name: policy}], query: "data.test.allow == true"}
""")
        (self.dir / "policy.yaml").write_text(policy_map("GET"))
        self.serve()
        self.assertEqual((await self.get("/api/pets/1")).status, 200)
        self.assertEqual((await self.get("/api/")).status, 403)
        (self.dir / "policy.yaml").write_text(policy_map("POST"))
        self.assertTrue(self.gw.reload())
        self.assertEqual((await self.get("/api/pets/1")).status, 403)
        test = 'startswith(input.http_request.path, "/api/pets")'
        (self.dir / "policy.yaml").write_text(policy_map("GET").replace(test, f"any([{test}])"))
        self.assertFalse(self.gw.reload())  # refused: the last good policy keeps serving
        self.assertEqual((await self.get("/api/pets/1")).status, 403)


class PassThroughGatewayTests(_GatewayTest):
    def config(self, service_port: int, extra: str = "") -> None:
        (self.dir / "vs.yaml").write_text(vs(self.backend.port, "      extauth: {configRef: {name: pt}}"))
        (self.dir / "auth.yaml").write_text(f"""apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: pt, namespace: gloo-system}}
spec:
  configs:
  - passThroughAuth:
      http:
        url: http://127.0.0.1:{service_port}/auth
        connectionTimeout: 200ms
        request: {{allowedHeaders: [authorization]}}
        response:
          allowedUpstreamHeaders: [x-user-id]
          allowedClientHeadersOnDenied: [www-authenticate]
{extra}""")

    async def test_admit_deny_timeout_down(self) -> None:
        def respond(r: Recorded) -> Any:
            token = (r.headers(b"authorization") or [b""])[0]
            if token == b"authorize me":
                return reply(200, (("x-user-id", "42"),))
            if token == b"slow":
                return None
            return reply(401, (("WWW-Authenticate", 'Bearer realm="pets"'), ("x-secret", "s")), b"go away")

        service = start_recorder(respond)
        self.addCleanup(service.close)
        self.config(service.port)
        self.serve()
        ok = await self.get(authorization="authorize me", x_user_id="forged")
        self.assertEqual(ok.status, 200)
        self.assertEqual(self.backend.requests[-1].header(b"x-user-id"), [b"42"])
        denied = await self.get(authorization="nope")
        self.assertEqual((denied.status, denied.body), (401, b""))
        self.assertEqual(denied.headers.getRawHeaders(b"www-authenticate"), [b'Bearer realm="pets"'])
        self.assertIsNone(denied.headers.getRawHeaders(b"x-secret"))
        slow = await self.get(authorization="slow")
        self.assertEqual(slow.status, 503)
        self.assertEqual(len(self.backend.requests), 1)

    async def test_client_headers_on_success_reach_the_client_not_the_backend(self) -> None:
        def respond(r: Recorded) -> Any:
            if (r.headers(b"authorization") or [b""])[0] == b"authorize me":
                return reply(200, (("x-user-id", "42"), ("x-ratelimit-remaining", "9"),
                                   ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"), ("x-secret", "s")))
            return reply(401, (("x-ratelimit-remaining", "0"),))

        service = start_recorder(respond)
        self.addCleanup(service.close)
        self.config(service.port, "          allowedClientHeadersOnSuccess: [x-ratelimit-remaining, set-cookie]\n")
        self.serve()
        ok = await self.get(authorization="authorize me")
        self.assertEqual(ok.status, 200)
        self.assertEqual(ok.headers.getRawHeaders(b"x-ratelimit-remaining"), [b"9"])
        self.assertEqual(ok.headers.getRawHeaders(b"set-cookie"), [b"a=1", b"b=2"])
        self.assertIsNone(ok.headers.getRawHeaders(b"x-secret"))
        self.assertIsNone(self.backend.requests[-1].header(b"x-ratelimit-remaining"))
        self.assertEqual(self.backend.requests[-1].header(b"x-user-id"), [b"42"])
        denied = await self.get(authorization="nope")  # only allowedClientHeadersOnDenied on a refusal
        self.assertEqual(denied.status, 401)
        self.assertIsNone(denied.headers.getRawHeaders(b"x-ratelimit-remaining"))

    async def test_down_with_and_without_failure_mode_allow(self) -> None:
        self.config(_closed_port())
        self.serve()
        self.assertEqual((await self.get()).status, 503)
        self.config(_closed_port(), "      failureModeAllow: true\n")
        self.assertTrue(self.gw.reload())
        self.assertEqual((await self.get()).status, 200)


class CustomAuthGatewayTests(_GatewayTest):
    async def test_gloo_custom_auth_guide(self) -> None:
        def respond(r: Recorded) -> bytes:
            if r.target.startswith(b"/api/pets/1"):
                return reply(200)
            return reply(401, (("x-server", "pythonauth"),), b"Not authorized")

        service = start_recorder(respond)
        self.addCleanup(service.close)
        (self.dir / "vs.yaml").write_text(vs(self.backend.port, "      extauth: {customAuth: {}}") + f"""---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: auth-server, namespace: gloo-system}}
spec:
  static: {{hosts: [{{addr: 127.0.0.1, port: {service.port}}}]}}
---
apiVersion: gateway.vendor.io/v1
kind: Settings
metadata: {{name: default}}
spec:
  extauth:
    extauthzServerRef: {{name: auth-server, namespace: gloo-system}}
    httpService: {{}}
    requestTimeout: 0.5s
""")
        self.serve()
        self.assertEqual((await self.get("/api/pets/1")).status, 200)
        denied = await self.get("/api/pets/2")
        self.assertEqual((denied.status, denied.body), (401, b"Not authorized"))
        self.assertEqual(denied.headers.getRawHeaders(b"x-server"), [b"pythonauth"])
        self.assertEqual(service.requests[1].target, b"/api/pets/2")



class SharedStateTests(_GatewayTest):
    async def test_a_keys_metadata_reaches_the_pass_through_service(self) -> None:
        service = start_recorder(lambda r: reply(200, (), b'{"state": {"tier": "gold"}}'))
        self.addCleanup(service.close)
        (self.dir / "vs.yaml").write_text(vs(self.backend.port, "      extauth: {configRef: {name: both}}"))
        (self.dir / "k1.yaml").write_text(key_secret("k1", "first-key-111").replace(
            "stringData: {api-key: first-key-111}", "stringData: {api-key: first-key-111, email: a@example.com}"))
        (self.dir / "auth.yaml").write_text(f"""apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: both, namespace: gloo-system}}
spec:
  configs:
  - apiKeyAuth:
      apiKeySecretRefs: [{{name: k1}}]
      headersFromMetadataEntry: {{x-email: {{name: email}}}}
  - passThroughAuth:
      http:
        url: http://127.0.0.1:{service.port}/check
        request: {{passThroughState: true}}
        response: {{readStateFromResponse: true}}
""")
        self.serve()
        self.assertEqual((await self.get(api_key="first-key-111")).status, 200)
        self.assertEqual(json.loads(service.requests[0].body), {"state": {"x-email": "a@example.com"}})
        self.assertEqual(self.backend.requests[-1].header(b"x-email"), [b"a@example.com"])


class WatchedRotationTests(_GatewayTest):
    """No reload call: the gateway watches its directory, as deployed."""

    async def test_a_secret_file_written_while_serving_takes_effect(self) -> None:
        (self.dir / "vs.yaml").write_text(vs(self.backend.port, "      extauth: {configRef: {name: keys}}"))
        (self.dir / "auth.yaml").write_text("""apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {name: keys, namespace: gloo-system}
spec:
  configs:
  - apiKeyAuth: {labelSelector: {team: infra}}
""")
        (self.dir / "k1.yaml").write_text(key_secret("k1", "first-key-111"))
        gw = start_gateway(str(self.dir), PLUGINS, poll_interval=0.05)
        self.addCleanup(gw.stop)
        self.gw = gw
        self.assertEqual((await self.get(api_key="first-key-111")).status, 200)
        statuses: list[int] = []

        async def status(key: str) -> int:
            statuses.append((await self.get(api_key=key)).status)
            return statuses[-1]

        (self.dir / "k2.yaml").write_text(key_secret("k2", "second-key-222"))
        for _ in range(100):
            if await status("second-key-222") == 200:
                break
            await sleep(0.05)
        self.assertEqual(statuses[-1], 200)
        (self.dir / "k1.yaml").unlink()
        for _ in range(100):
            if await status("first-key-111") == 401:
                break
            await sleep(0.05)
        self.assertEqual(statuses[-1], 401)
        self.assertEqual(await status("second-key-222"), 200)
