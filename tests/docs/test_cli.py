"""The ``twistgw`` command as a newcomer uses it: check, explain, token, keys,
create secret, plugins, --help; exit codes 0 / 1 / 2."""

from __future__ import annotations

import base64
import json
import pathlib
import shutil
import socket
import subprocess
import sys

import jwt
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
ETC = ROOT / "etc"
PRIVATE = ETC / "demo-keys" / "jwt-private.pem"
PUBLIC = ETC / "demo-keys" / "jwt-public.pem"


def run(*args: str, cwd: str = "/") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twistgw", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_help_everywhere():
    for args in ([], ["check"], ["explain"], ["token"], ["keys"], ["create", "secret", "authcredentials"],
                 ["create", "secret", "apikey"], ["create", "secret", "oauth"], ["create", "secret", "encryptionkey"]):
        out = run(*args, "--help")
        assert out.returncode == 0, (args, out.stderr)
        assert "usage: twistgw" in out.stdout
    assert run().returncode == 2  # no command: usage error


GLOO_APIKEY_GUIDE = """apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {name: apikey-auth, namespace: gloo-system}
spec:
  configs:
  - apiKeyAuth:
      headerName: api-key
      labelSelector:
        team: infrastructure
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: auth-tutorial, namespace: gloo-system}
spec:
  virtualHost:
    domains: ['foo']
    routes:
    - matchers: [{prefix: /}]
      directResponseAction: {status: 200, body: ok}
    options:
      extauth: {configRef: {name: apikey-auth, namespace: gloo-system}}
"""


def test_create_secret_apikey_as_glooctl(tmp_path):
    """Gloo's API-key guide runs ``glooctl create secret apikey infra-apikey
    --apikey N2Yw... --apikey-labels team=infrastructure``; the same flags
    write the Secret the guide shows (its base64 value included), and the
    guide's AuthConfig selects it."""
    key = "N2YwMDIxZTEtNGUzNS1jNzgzLTRkYjAtYjE2YzRkZGVmNjcy"
    out = run("create", "secret", "apikey", "infra-apikey", "--namespace", "gloo-system", "--apikey", key,
              "--apikey-labels", "team=infrastructure", "-o", str(tmp_path / "secret.yaml"))
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load((tmp_path / "secret.yaml").read_text())
    assert doc["type"] == "extauth.solo.io/apikey"
    assert doc["metadata"] == {"name": "infra-apikey", "namespace": "gloo-system",
                               "labels": {"team": "infrastructure"}}
    assert doc["data"] == {"api-key": "TjJZd01ESXhaVEV0TkdVek5TMWpOemd6TFRSa1lqQXRZakUyWXpSa1pHVm1OamN5"}
    assert "labelSelector: {team: infrastructure}" in out.stderr
    (tmp_path / "guide.yaml").write_text(GLOO_APIKEY_GUIDE)
    checked = run("explain", str(tmp_path), "GET", "http://foo/posts/1", "-H", f"api-key: {key}")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert run("explain", str(tmp_path), "GET", "http://foo/posts/1", "-H", "api-key: nope").returncode == 1
    generated = run("create", "secret", "apikey", "--name", "gen", "--apikey-generate")
    assert generated.returncode == 0, generated.stderr
    made = base64.b64decode(yaml.safe_load(generated.stdout)["data"]["api-key"]).decode()
    assert f"the generated key is: {made}" in generated.stderr
    for bad in (["x"], ["x", "--apikey", "k", "--apikey-generate"], ["x", "--apikey", "k", "--apikey-labels", "team"],
                ["Bad_Name", "--apikey", "k"]):
        refused = run("create", "secret", "apikey", *bad)
        assert refused.returncode == 2 and refused.stderr.startswith("twistgw: "), (bad, refused.stderr)


def test_create_secret_oauth_and_encryptionkey_as_glooctl(tmp_path):
    """Gloo's OIDC guides run ``glooctl create secret oauth --client-secret``
    (and ``encryptionkey`` for cipherConfig); an AuthConfig naming both loads."""
    out = run("create", "secret", "oauth", "google", "--namespace", "gloo-system", "--client-secret", "s3:cr/et",
              "-o", str(tmp_path / "oauth.yaml"))
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load((tmp_path / "oauth.yaml").read_text())
    assert (doc["type"], base64.b64decode(doc["data"]["client-secret"])) == ("extauth.solo.io/oauth", b"s3:cr/et")
    assert "clientSecretRef: {name: google, namespace: gloo-system}" in out.stderr
    out = run("create", "secret", "encryptionkey", "session-key", "--namespace", "gloo-system", "--generate",
              "-o", str(tmp_path / "key.yaml"))
    assert out.returncode == 0, out.stderr
    assert len(base64.b64decode(yaml.safe_load((tmp_path / "key.yaml").read_text())["data"]["key"])) == 32
    (tmp_path / "ac.yaml").write_text("""apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {name: google-oidc, namespace: gloo-system}
spec:
  configs:
  - oauth2:
      oidcAuthorizationCode:
        appUrl: http://localhost:8080
        callbackPath: /callback
        clientId: my-client
        clientSecretRef: {name: google, namespace: gloo-system}
        issuerUrl: https://accounts.google.com
        session: {cipherConfig: {keyRef: {name: session-key, namespace: gloo-system}}}
""")
    checked = run("check", str(tmp_path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    short = run("create", "secret", "encryptionkey", "k", "--key", "too-short")
    assert short.returncode == 2 and "exactly 32 bytes" in short.stderr
    assert run("create", "secret", "oauth", "google", "--client-secret", "").returncode == 2


def test_check_ok_and_verbose():
    out = run("check", str(ETC), "-v")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "OK: 1 virtual service(s), 3 route(s)" in out.stdout
    assert "jwt: prefix /jwt chain: jwt -> rbac" in out.stdout
    assert "ldap: prefix /ldap chain: extauth" in out.stdout


def test_check_reports_file_line_resource_field(tmp_path):
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: gateway.vendor.io/v1\nkind: VirtualService\nmetadata: {name: x}\n"
        "spec:\n  virtualHost:\n    routes:\n    - matchers: [{prefix: api}]\n"
        "      directResponseAction: {status: 200}\n")
    out = run("check", str(tmp_path))
    assert out.returncode == 1
    assert (f"{tmp_path}/bad.yaml: document 1, line 7: VirtualService default/x: "
            "spec.virtualHost.routes[0].matchers[0].prefix: must start with '/'") in out.stdout


def test_check_missing_directory_is_invalid(tmp_path):
    out = run("check", str(tmp_path / "nope"))
    assert out.returncode == 1
    assert "cannot read the configuration directory" in out.stdout


def test_token_and_keys_round_trip(tmp_path):
    out = run("token", "--key", str(PRIVATE), "--iss", "https://demo.twistgw.local", "--sub", "alice",
              "--claim", "role=admin", "--claim", "level=3", "--claim", 'groups=["a","b"]', "--ttl", "15m")
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    keys = run("keys", "--public", str(PUBLIC))
    assert keys.returncode == 0, keys.stderr
    jwks = json.loads(keys.stdout)
    (key,) = jwks["keys"]
    assert key["kty"] == "RSA" and key["kid"] == jwt.get_unverified_header(token)["kid"]
    claims = jwt.decode(token, jwt.PyJWK(key).key, algorithms=["RS256"], issuer="https://demo.twistgw.local")
    assert claims["sub"] == "alice" and claims["role"] == "admin"
    assert claims["level"] == 3 and claims["groups"] == ["a", "b"]
    assert 14 * 60 <= claims["exp"] - claims["iat"] <= 15 * 60


@pytest.mark.parametrize("args", [
    ["--key", "/nonexistent.pem", "--iss", "i", "--sub", "s"],
    ["--key", str(PRIVATE), "--iss", "i", "--sub", "s", "--ttl", "soon"],
    ["--key", str(PRIVATE), "--iss", "i", "--sub", "s", "--claim", "novalue"],
])
def test_token_usage_errors(args):
    out = run("token", *args)
    assert out.returncode == 2
    assert out.stderr.startswith("twistgw: ") and "Traceback" not in out.stderr


def test_create_secret_authcredentials_loads_as_a_secret(tmp_path):
    out = run("create", "secret", "authcredentials", "--name", "ldap-sa", "--namespace", "auth",
              "--username", "cn=admin,dc=example,dc=org", "--password", "p:a:ss")
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load(out.stdout)
    assert doc["type"] == "extauth.vendor.io/accountcredentials"
    assert doc["metadata"] == {"name": "ldap-sa", "namespace": "auth"}
    assert base64.b64decode(doc["data"]["password"]) == b"p:a:ss"
    # it says where the Secret went, on stderr (stdout is the YAML alone)
    assert out.stderr == ("wrote Secret ldap-sa in namespace auth to stdout; reference it from the"
                          " AuthConfig as credentialsSecretRef: {name: ldap-sa, namespace: auth}\n")
    target = tmp_path / "sa.yaml"
    out = run("create", "secret", "authcredentials", "--name", "ldap-sa", "--username",
              "cn=admin,dc=example,dc=org", "--password", "pw", "-o", str(target))
    assert out.returncode == 0 and target.exists()
    assert yaml.safe_load(target.read_text())["metadata"]["namespace"] == "default"
    # a defaulted namespace is named as such (glooctl's default is gloo-system)
    assert "in namespace default (the default; pass --namespace to change it) to " + str(target) in out.stderr
    assert "credentialsSecretRef: {name: ldap-sa, namespace: default}" in out.stderr
    bad = run("create", "secret", "authcredentials", "--name", "Bad_Name", "--username", "x", "--password", "p")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_plugins_lists_the_shipped_three_in_order():
    out = run("plugins")
    assert out.returncode == 0
    names = [line.split()[0] for line in out.stdout.splitlines()]
    # in chain order: localRatelimit and ratelimitEarly run first, the counted rate limits after rbac
    assert [n for n in names if n in ("extauth", "jwt", "rbac")] == ["extauth", "jwt", "rbac"]
    assert names.index("localRatelimit") < names.index("extauth") < names.index("rbac") < names.index("ratelimit")


def test_explain_jwt_rbac_without_secrets():
    viewer = run("token", "--key", str(PRIVATE), "--iss", "https://demo.twistgw.local", "--sub", "bob",
                 "--claim", "role=viewer").stdout.strip()
    out = run("explain", str(ETC), "GET", "http://localhost/jwt/pets", "-H", f"Authorization: Bearer {viewer}")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Route: jwt (prefix /jwt)" in out.stdout
    assert "Plugin chain: jwt -> rbac" in out.stdout
    assert "rbac.authorize: DENY 403 'RBAC: access denied'" in out.stdout
    assert "admins" in out.stdout  # names the policy that did not match
    assert viewer not in out.stdout and viewer.split(".")[2] not in out.stdout
    missing = run("explain", str(ETC), "GET", "http://localhost/jwt/pets")
    assert missing.returncode == 1 and "DENY 401 'Jwt is missing'" in missing.stdout


def test_explain_open_route_and_404():
    ok = run("explain", str(ETC), "GET", "http://localhost/hello?x=1")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "forwarded to upstream default/echo (127.0.0.1:8081) as /hello?x=1" in ok.stdout
    bad = run("explain", str(ETC), "GET", "/relative")
    assert bad.returncode == 2


def test_explain_ldap_says_what_it_would_ask_without_the_password():
    auth = base64.b64encode(b"alice:sup3r-s3cret").decode()
    out = run("explain", str(ETC), "GET", "http://localhost/ldap/", "-H", f"Authorization: Basic {auth}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert ("extauth.authenticate: NOT CHECKED — AuthConfig default/demo-ldap: spec.configs[0].ldap would"
            " bind as 'uid=alice,ou=people,dc=example,dc=org' at ldap://127.0.0.1:3389") in out.stdout
    assert "sup3r-s3cret" not in out.stdout and auth not in out.stdout


def test_explain_live_ldap_names_the_failing_step_without_the_password(tmp_path):
    # --live, and no directory is running at the address: the step that
    # failed is the directory itself (and explain never starts the demo's)
    etc = tmp_path / "etc"
    shutil.copytree(ETC, etc)
    (etc / "gateway.yaml").write_text((etc / "gateway.yaml").read_text().replace("3389", str(_unused_port())))
    auth = base64.b64encode(b"alice:sup3r-s3cret").decode()
    out = run("explain", str(etc), "GET", "http://localhost/ldap/", "-H", f"Authorization: Basic {auth}",
              "--live")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "extauth.authenticate: DENY 503" in out.stdout and "connection refused" in out.stdout
    assert "sup3r-s3cret" not in out.stdout and auth not in out.stdout


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_echo_with_a_malformed_or_taken_endpoint_says_so_in_one_line():
    bad = run("echo", "--listen", "tcp:notaport:interface=127.0.0.1")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    assert bad.stderr.splitlines()[0] == ("twistgw: --listen 'tcp:notaport:interface=127.0.0.1' is not a valid"
                                          " endpoint: port must be a number from 0 to 65535, got 'notaport'")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        out = run("echo", "--listen", f"tcp:{port}:interface=127.0.0.1")
    assert out.returncode == 3 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip() == (f"twistgw: cannot listen on --listen tcp:{port}:interface=127.0.0.1:"
                                  " address already in use")


def test_explain_lists_the_headers_added_to_the_response(tmp_path):
    (tmp_path / "vs.yaml").write_text("""\
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: app}
spec: {static: {hosts: [{addr: 127.0.0.1, port: 9}]}}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: vs}
spec:
  virtualHost:
    domains: ["*"]
    routes:
    - matchers: [{prefix: /}]
      routeAction: {single: {upstream: {name: app}}}
      options:
        headerManipulation:
          responseHeadersToAdd:
          - {header: {key: x-served-by, value: twistgw}}
          - {header: {key: set-cookie, value: "tracking=s3cr3t"}}
""")
    out = run("explain", str(tmp_path), "GET", "http://localhost/x")
    assert out.returncode == 0, out.stdout + out.stderr
    added = out.stdout.split("Headers added to the response:")[1]
    assert "X-Served-By: twistgw" in added
    assert "Set-Cookie: (redacted)" in added and "s3cr3t" not in out.stdout
    plain = run("explain", str(ETC), "GET", "http://localhost/hello")
    assert "Headers added to the response" not in plain.stdout
