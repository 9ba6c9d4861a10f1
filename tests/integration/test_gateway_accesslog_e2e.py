"""A Gateway's ``options.accessLoggingService`` through a real
``twist twistgw`` on loopback: the file's lines for real requests (text
and JSON, Envoy's operators), a status filter, a reload that changes the
format and the file, a file that cannot be opened at start (exit 3) and on
a reload (rejected; the last good configuration keeps logging), and a
``--listen`` endpoint, which never writes a Gateway's log.

Blocking helpers (processes, threads): plain synchronous tests.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from support.process import free_port, twist_command
from twistgw.runtime.listeners import EXIT_CANNOT_LISTEN

from test_gateway_kind_e2e import backend  # noqa: F401  (the fixture)
from test_gateway_kind_e2e import NS, eventually, gateway, gateway_process, request, upstream, vs, write


def logging_gateway(port: int, *sinks: dict[str, Any]) -> dict[str, Any]:
    return gateway("gw", port, options={"accessLoggingService": {"accessLog": list(sinks)}})


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_text_and_json_lines_for_real_requests(tmp_path: Path, backend: int) -> None:  # noqa: F811
    port = free_port()
    text, js = tmp_path / "access.log", tmp_path / "access.json"
    docs = [upstream(backend), vs("a", ["a.example"]), vs("d", ["d.example"], body="direct"),
            logging_gateway(port,
                            {"fileSink": {"path": str(text), "stringFormat":
                                          '[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%'
                                          ' %PROTOCOL%" %RESPONSE_CODE% "%REQ(USER-AGENT)%" "%REQ(:AUTHORITY)%"'
                                          ' "%UPSTREAM_HOST%" %UPSTREAM_CLUSTER%\n'}},
                            {"fileSink": {"path": str(js), "jsonFormat": {
                                "method": "%REQ(:METHOD)%", "path": "%REQ(:PATH)%", "code": "%RESPONSE_CODE%",
                                "duration": "%DURATION%", "client": "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%",
                                "upstream": {"host": "%UPSTREAM_HOST%", "cluster": "%UPSTREAM_CLUSTER%"}}}})]
    with gateway_process(tmp_path, write(tmp_path / "config", docs)) as gw:
        assert request(port, "a.example", {"User-Agent": "curl/8.5"}, "/pets?id=1")[0] == 200
        assert request(port, "d.example", path="/x")[2] == b"direct"
        assert request(port, "nowhere.example")[0] == 404
        eventually(lambda: len(lines(text)) == 3 and len(lines(js)) == 3)
        first, second, third = lines(text)
        assert first.startswith("[20") and first[24:26] == "Z]", first
        assert first[27:] == (f'"GET /pets?id=1 HTTP/1.1" 200 "curl/8.5" "a.example" "127.0.0.1:{backend}"'
                              f" echo_{NS}")
        assert second.endswith('"GET /x HTTP/1.1" 200 "-" "d.example" "-" -')
        assert third.endswith('"GET / HTTP/1.1" 404 "-" "nowhere.example" "-" -')
        records = [json.loads(line) for line in lines(js)]
        assert records[0]["method"] == "GET" and records[0]["path"] == "/pets?id=1" and records[0]["code"] == 200
        assert records[0]["client"] == "127.0.0.1" and isinstance(records[0]["duration"], int)
        assert records[0]["upstream"] == {"host": f"127.0.0.1:{backend}", "cluster": f"echo_{NS}"}
        assert records[1]["upstream"] == {"host": None, "cluster": None} and records[2]["code"] == 404
        # --listen serves every virtual service with twistgw's own rules: not the Gateway's log
        assert request(gw.port, "a.example")[0] == 200
        assert request(port, "a.example", path="/last")[0] == 200
        eventually(lambda: len(lines(text)) == 4)
        assert '"GET /last HTTP/1.1"' in lines(text)[3]


def test_status_filter_and_a_reload_that_changes_the_log(tmp_path: Path, backend: int) -> None:  # noqa: F811
    port = free_port()
    one, two = tmp_path / "one.log", tmp_path / "two.log"
    d = tmp_path / "config"
    base = [upstream(backend), vs("a", ["a.example"])]
    errors = {"fileSink": {"path": str(one), "stringFormat": "%RESPONSE_CODE% %REQ(:PATH)%\n"},
              "filter": {"statusCodeFilter": {"comparison": {"op": "GE", "value": {"defaultValue": 400}}}}}
    with gateway_process(tmp_path, write(d, base + [logging_gateway(port, errors)])):
        assert request(port, "a.example", path="/fine")[0] == 200
        assert request(port, "b.example", path="/missing")[0] == 404
        eventually(lambda: lines(one) == ["404 /missing"])
        write(d, base + [logging_gateway(port, {"fileSink": {"path": str(two), "jsonFormat": {"p": "%REQ(:PATH)%"}}})])

        def reloaded() -> bool:
            request(port, "a.example", path="/probe")
            return bool(lines(two))
        eventually(reloaded)
        assert json.loads(lines(two)[-1]) == {"p": "/probe"}
        assert lines(one) == ["404 /missing"]  # closed: the new configuration does not name it


def test_a_file_that_cannot_be_opened(tmp_path: Path, backend: int) -> None:  # noqa: F811
    port = free_port()
    blocked = tmp_path / "no-such-dir" / "access.log"
    sink = {"fileSink": {"path": str(blocked), "stringFormat": "%RESPONSE_CODE%\n"}}
    directory = write(tmp_path / "config", [upstream(backend), vs("a", ["*"]), logging_gateway(port, sink)])
    cmd, cwd = twist_command(tmp_path)
    out = subprocess.run(cmd + ["--config", directory, "--admin", "none"], cwd=cwd, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == EXIT_CANNOT_LISTEN, out
    assert [line for line in out.stderr.splitlines() if line.strip()] == [
        f"twistgw: cannot open the access log {blocked}: No such file or directory"]

    good = tmp_path / "good.log"
    d = tmp_path / "config2"
    base = [upstream(backend), vs("a", ["*"])]
    ok = {"fileSink": {"path": str(good), "stringFormat": "%REQ(:PATH)%\n"}}
    with gateway_process(tmp_path, write(d, base + [logging_gateway(port, ok)])) as gw:
        write(d, base + [logging_gateway(port, ok, sink)])
        text = gw.wait_log("Configuration change rejected")
        assert f"cannot open the access log {blocked}: No such file or directory" in text
        assert request(port, path="/still")[0] == 200
        eventually(lambda: lines(good) == ["/still"])


def test_health_check_path_and_not_health_check_filter(tmp_path: Path, backend: int) -> None:  # noqa: F811
    """Gloo's health-check guide's Gateway, with an access log that leaves
    the health checks out."""
    port = free_port()
    log = tmp_path / "access.log"
    gw_doc = gateway("gw", port, {"options": {"healthCheck": {"path": "/any-path-you-want"}}}, options={
        "accessLoggingService": {"accessLog": [{"fileSink": {"path": str(log), "stringFormat": "%REQ(:PATH)%\n"},
                                                "filter": {"notHealthCheckFilter": {}}}]}})
    docs = [upstream(backend), vs("a", ["a.example"]), gw_doc]
    with gateway_process(tmp_path, write(tmp_path / "config", docs)):
        status, _, body = request(port, "anything.example", path="/any-path-you-want")
        assert (status, body) == (200, b"")
        assert request(port, "a.example", path="/any-path-you-want?q=1")[0] == 200  # routed to the backend
        assert request(port, "nothing.example", path="/other")[0] == 404
        eventually(lambda: lines(log) == ["/any-path-you-want?q=1", "/other"])
