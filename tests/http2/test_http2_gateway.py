"""HTTP/2 on Gloo ``Gateway`` listeners and VirtualService certificates
(issue 33, item 1): ``httpConnectionManagerSettings.codecType`` (``AUTO``:
HTTP/2 beside HTTP/1.1; ``HTTP1``: HTTP/1.1 only; ``HTTP2`` refused by
name), ``http2ProtocolOptions`` (``maxConcurrentStreams``,
``initialStreamWindowSize``, ``initialConnectionWindowSize`` advertised and
applied; ``overrideStreamErrorOnInvalidHttpMessage: true`` refused), a
VirtualService's ``sslConfig.alpnProtocols`` as Gloo's ssl.proto reads it
(empty: ``[h2, http/1.1]``; ``[allow_empty]``: no ALPN), ``ssl: true``
Gateways picking the certificate by SNI, and the PROXY protocol in front
of h2c and of ALPN ``h2``.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from h2.events import RemoteSettingsChanged
from h2.settings import SettingCodes

from h2support import Backend, H2Client, curl, self_signed
from support.process import TwistGateway, free_port

from twistgw.config.loader import ConfigError, load_text

NS = "gloo-system"


@pytest.fixture(scope="module")
def backend() -> Any:
    b = Backend()
    yield b
    b.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: Any) -> tuple[bytes, bytes]:
    key, cert = self_signed(tmp_path_factory.mktemp("gwcerts"))
    return cert.read_bytes(), key.read_bytes()


def gateway(name: str, port: int, ssl_on: bool = False, hcm: dict[str, Any] | None = None,
            **spec: Any) -> dict[str, Any]:
    options = {"httpConnectionManagerSettings": hcm} if hcm is not None else {}
    return {"apiVersion": "gateway.solo.io/v1", "kind": "Gateway", "metadata": {"name": name, "namespace": NS},
            "spec": {"bindAddress": "127.0.0.1", "bindPort": port, "ssl": ssl_on,
                     "httpGateway": {"options": options} if options else {}, **spec}}


def resources(backend_port: int, *docs: dict[str, Any], ssl_config: dict[str, Any] | None = None,
              certs: tuple[bytes, bytes] | None = None) -> list[dict[str, Any]]:
    vs: dict[str, Any] = {"virtualHost": {"domains": ["*"], "routes": [
        {"matchers": [{"prefix": "/"}], "routeAction": {"single": {"upstream": {"name": "echo", "namespace": NS}}}}]}}
    out = [{"apiVersion": "gloo.solo.io/v1", "kind": "Upstream", "metadata": {"name": "echo", "namespace": NS},
            "spec": {"static": {"hosts": [{"addr": "127.0.0.1", "port": backend_port}]}}},
           {"apiVersion": "gateway.solo.io/v1", "kind": "VirtualService", "metadata": {"name": "vs", "namespace": NS},
            "spec": {**({"sslConfig": ssl_config} if ssl_config is not None else {}), **vs}}]
    if certs is not None:
        cert, key = certs
        out.append({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                    "metadata": {"name": "tls", "namespace": NS},
                    "data": {"tls.crt": base64.b64encode(cert).decode(), "tls.key": base64.b64encode(key).decode()}})
    return out + list(docs)


def write(directory: Path, docs: list[dict[str, Any]]) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump_all(docs))
    return str(directory)


def started(tmp: Path, docs: list[dict[str, Any]], port: int, *args: str) -> TwistGateway:
    """A twist process serving ``docs``; its ``port`` is the Gateway's."""
    gw = TwistGateway(tmp, write(tmp / "cfg", docs), args=args)
    gw.port = port  # the Gateway's listener, not --listen
    return gw


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


def tls_client(port: int, alpn: list[str] | None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    if alpn is not None:
        ctx.set_alpn_protocols(alpn)
    return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname="localhost")


# -- reading the fields ------------------------------------------------------------------------


def problems(hcm: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load_text(yaml.safe_dump(gateway("gw", 8080, hcm=hcm)), "gw.yaml")
    return {issue.field: issue.reason for issue in info.value.issues}


def test_codec_type_http2_is_refused_by_name() -> None:
    found = problems({"codecType": "HTTP2", "http2ProtocolOptions": {"overrideStreamErrorOnInvalidHttpMessage": "x"}})
    base = "spec.httpGateway.options.httpConnectionManagerSettings"
    assert "never HTTP/2 only" in found[f"{base}.codecType"]
    assert "true or false" in found[f"{base}.http2ProtocolOptions.overrideStreamErrorOnInvalidHttpMessage"]
    assert "unknown value 'H3'" in problems({"codecType": "H3"})[f"{base}.codecType"]


@pytest.mark.parametrize("field, value", [("maxConcurrentStreams", 0), ("initialStreamWindowSize", 65534),
                                          ("initialConnectionWindowSize", 2**31), ("maxConcurrentStreams", "ten")])
def test_http2_protocol_options_out_of_glooss_ranges_are_refused(field: str, value: Any) -> None:
    found = problems({"http2ProtocolOptions": {field: value}})
    assert f"spec.httpGateway.options.httpConnectionManagerSettings.http2ProtocolOptions.{field}" in found


def test_http2_protocol_options_and_codec_type_are_read() -> None:
    config = load_text(yaml.safe_dump_all([
        gateway("auto", 8080, hcm={"http2ProtocolOptions": {"maxConcurrentStreams": 7,
                                                            "initialStreamWindowSize": 131072,
                                                            "initialConnectionWindowSize": 2097152,
                                                            "overrideStreamErrorOnInvalidHttpMessage": True}}),
        gateway("h1", 8081, hcm={"codecType": "HTTP1"}),
        gateway("default", 8082)]), "gw.yaml")
    gws = {gw.name: gw for gw in config.of_kind("Gateway").values()}
    h2 = gws["auto"].hcm.http2
    assert (h2.max_concurrent_streams, h2.initial_stream_window, h2.initial_connection_window) == (7, 131072, 2097152)
    assert h2.stream_error_on_invalid and not gws["default"].hcm.http2.stream_error_on_invalid
    assert gws["h1"].hcm.http2 is None
    assert gws["default"].hcm.http2.max_concurrent_streams == 100


# -- on the wire -----------------------------------------------------------------------------------


def test_http2_protocol_options_are_what_the_client_is_told(tmp_path: Path, backend: Backend) -> None:
    port = free_port()
    hcm = {"http2ProtocolOptions": {"maxConcurrentStreams": 7, "initialStreamWindowSize": 131072,
                                    "initialConnectionWindowSize": 2097152}}
    with started(tmp_path, resources(backend.port, gateway("gw", port, hcm=hcm)), port):
        wait_listening(port)
        c = H2Client(port)
        c.read(lambda events: any(isinstance(e, RemoteSettingsChanged) for e in events))
        (settings,) = [e for e in c.events if isinstance(e, RemoteSettingsChanged)]
        got = {code: s.new_value for code, s in settings.changed_settings.items()}
        assert got[SettingCodes.MAX_CONCURRENT_STREAMS] == 7
        assert got[SettingCodes.INITIAL_WINDOW_SIZE] == 131072
        assert c.conn.outbound_flow_control_window == 2097152
        assert c.get("/via-gateway")[0] == 200
        slow = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"gw.test"), (b":path", b"/slow?s=1")]
        from hyperframe.frame import HeadersFrame
        c.raw(b"".join(HeadersFrame(sid, c.conn.encoder.encode(slow), flags={"END_HEADERS", "END_STREAM"}).serialize()
                       for sid in range(3, 21, 2)))  # 9 more streams: over 7
        c.read(lambda _: c.goaway() is not None, parse=False)
        assert c.goaway() is not None and c.goaway().error_code == 1


def test_codec_type_http1_serves_http11_only_and_a_reload_switches_it(tmp_path: Path, backend: Backend) -> None:
    port = free_port()
    docs = resources(backend.port, gateway("gw", port, hcm={"codecType": "HTTP1"}))
    with started(tmp_path, docs, port, "--poll-interval", "0.2") as gw:
        wait_listening(port)
        out = curl("--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{port}/")
        assert out.stdout != "200"
        assert curl("--http1.1", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{port}/").stdout == "200"
        write(tmp_path / "cfg", resources(backend.port, gateway("gw", port, hcm={"codecType": "AUTO"})))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            out = curl("--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_code} %{http_version}",
                       f"http://127.0.0.1:{port}/")
            if out.stdout == "200 2":
                break
            time.sleep(0.3)
        assert out.stdout == "200 2", gw.log_text()[-2000:]


@pytest.mark.parametrize("alpn, offered, negotiated", [
    (None, ["h2", "http/1.1"], "h2"),                 # Gloo's default: [h2, http/1.1]
    ([], ["h2", "http/1.1"], "h2"),
    (["http/1.1"], ["h2", "http/1.1"], "http/1.1"),
    (["allow_empty"], ["h2", "http/1.1"], None),       # no ALPN at all
    (["h2"], ["h2"], "h2"),
], ids=["absent", "empty", "http11", "allow_empty", "h2-only"])
def test_an_ssl_gateway_offers_the_virtual_services_alpn_protocols(tmp_path: Path, backend: Backend,
                                                                    certs: tuple[bytes, bytes], alpn: Any,
                                                                    offered: list[str], negotiated: Any) -> None:
    port = free_port()
    ssl_config: dict[str, Any] = {"secretRef": {"name": "tls", "namespace": NS}}
    if alpn is not None:
        ssl_config["alpnProtocols"] = alpn
    with started(tmp_path, resources(backend.port, gateway("gw-ssl", port, ssl_on=True), ssl_config=ssl_config,
                                     certs=certs), port):
        wait_listening(port)
        with tls_client(port, offered) as s:
            assert s.selected_alpn_protocol() == negotiated
        out = curl("-k", "--http2", "-o", "/dev/null", "-w", "%{http_version}",
                   "--resolve", f"localhost:{port}:127.0.0.1", f"https://localhost:{port}/")
        assert out.stdout == ("2" if negotiated == "h2" else "1.1"), out.stderr
        if alpn == ["h2"]:  # a client offering only http/1.1 has no protocol in common (RFC 7301 §3.2)
            with pytest.raises(ssl.SSLError):
                tls_client(port, ["http/1.1"])


def test_an_ssl_gateway_with_codec_http1_never_offers_h2(tmp_path: Path, backend: Backend,
                                                          certs: tuple[bytes, bytes]) -> None:
    port = free_port()
    with started(tmp_path, resources(backend.port, gateway("gw-ssl", port, ssl_on=True, hcm={"codecType": "HTTP1"}),
                                     ssl_config={"secretRef": {"name": "tls", "namespace": NS}}, certs=certs), port):
        wait_listening(port)
        with tls_client(port, ["h2", "http/1.1"]) as s:
            assert s.selected_alpn_protocol() == "http/1.1"


def test_h2c_and_alpn_h2_behind_the_proxy_protocol(tmp_path: Path, backend: Backend,
                                                    certs: tuple[bytes, bytes]) -> None:
    plain, tls = free_port(), free_port()
    docs = resources(backend.port, gateway("gw", plain, useProxyProto=True),
                     gateway("gw-ssl", tls, ssl_on=True, useProxyProto=True),
                     ssl_config=None, certs=certs)
    # one VirtualService each: the plain Gateway serves those without sslConfig
    docs.append({"apiVersion": "gateway.solo.io/v1", "kind": "VirtualService",
                 "metadata": {"name": "vs-ssl", "namespace": NS},
                 "spec": {"sslConfig": {"secretRef": {"name": "tls", "namespace": NS}},
                          "virtualHost": {"domains": ["*"], "routes": [{"matchers": [{"prefix": "/"}], "routeAction": {
                              "single": {"upstream": {"name": "echo", "namespace": NS}}}}]}}})
    with started(tmp_path, docs, plain):
        wait_listening(plain)
        c = H2Client(plain, preface=False)
        c.sock.sendall(b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\n")
        c.conn.initiate_connection()
        status, _, body = c.get("/proxied")
        assert status == 200 and json.loads(body)["headers"]["X-Forwarded-For"] == "203.0.113.7"
        wait_listening(tls)
        raw = socket.create_connection(("127.0.0.1", tls), timeout=5)
        raw.sendall(b"PROXY TCP4 198.51.100.9 127.0.0.1 5555 443\r\n")
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        s = ctx.wrap_socket(raw, server_hostname="localhost")
        assert s.selected_alpn_protocol() == "h2"
        from h2.config import H2Configuration
        from h2.connection import H2Connection
        from h2.events import DataReceived, StreamEnded
        conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        conn.initiate_connection()
        conn.send_headers(1, [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"localhost"),
                              (b":path", b"/proxied-tls")], end_stream=True)
        s.sendall(conn.data_to_send())
        body, done = b"", False
        while not done:
            for e in conn.receive_data(s.recv(65536)):
                if isinstance(e, DataReceived):
                    body += e.data
                done = done or isinstance(e, StreamEnded)
            s.sendall(conn.data_to_send())
        assert json.loads(body)["headers"]["X-Forwarded-For"] == "198.51.100.9"
        s.close()


def test_a_gateways_envoy_access_log_names_the_protocol(tmp_path: Path, backend: Backend) -> None:
    port = free_port()
    log = tmp_path / "access.log"
    sink = {"fileSink": {"path": str(log), "stringFormat": "%PROTOCOL% %REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE%"
                                                           " %REQ(:AUTHORITY)%\n"}}
    gw_doc = gateway("gw", port)
    gw_doc["spec"]["options"] = {"accessLoggingService": {"accessLog": [sink]}}
    with started(tmp_path, resources(backend.port, gw_doc), port):
        wait_listening(port)
        assert curl("--http2-prior-knowledge", "-o", "/dev/null", f"http://127.0.0.1:{port}/logged").returncode == 0
        assert curl("--http1.1", "-o", "/dev/null", f"http://127.0.0.1:{port}/logged-1").returncode == 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "/logged-1" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.1)
    lines = log.read_text().splitlines()
    assert f"HTTP/2 GET /logged 200 127.0.0.1:{port}" in lines
    assert f"HTTP/1.1 GET /logged-1 200 127.0.0.1:{port}" in lines
