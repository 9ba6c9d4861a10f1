"""Which log format ``twist twistgw`` writes, as docs/operations.md ("Log
format: text or JSON") and the quickstart say (issue 32, item 16): to a
file, JSON lines unless ``--log-format=text``; ``--log-format=json`` JSON
anywhere. Real ``twist`` processes, their stdout a file."""

from __future__ import annotations

import pathlib
import socket
import time

import pytest

from support.http import static_upstream_yaml, vs_yaml
from support.process import TwistGateway

ROOT = pathlib.Path(__file__).resolve().parents[2]
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()


def test_the_docs_say_how_to_pick_either():
    section = OPERATIONS.split("### Log format: text or JSON", 1)[1].split("\n## ", 1)[0]
    assert "--log-format=text" in section and "--log-format=json" in section
    assert "> gateway.log" in section
    quickstart = (ROOT / "docs" / "quickstart.md").read_text()
    assert "twist --log-format=text twistgw" in quickstart
    assert "operations.md#log-format-text-or-json" in quickstart


def _one_request(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /x HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n")
        while s.recv(65536):
            pass


@pytest.mark.parametrize("twist_args, json_lines", [((), True), (("--log-format=text",), False),
                                                     (("--log-format=json",), True)],
                         ids=["default", "text", "json"])
def test_the_format_written_to_a_file(tmp_path, twist_args, json_lines):
    config = tmp_path / "config"
    config.mkdir()
    (config / "gw.yaml").write_text(static_upstream_yaml("backend", [9]) + "---\n" + vs_yaml(domains=["*"]))
    with TwistGateway(tmp_path, str(config), twist_args=twist_args) as gw:
        _one_request(gw.port)
        text = gw.wait_log("GET /x" if not json_lines else '"path": "/x"')
        time.sleep(0.2)
        text = gw.log_text()
    lines = [line for line in text.split("\n") if line.strip()]  # (splitlines would split at \x1e too)
    assert lines
    if json_lines:
        assert all(line.startswith("\x1e{") for line in lines), text[:2000]
    else:
        assert not any("\x1e" in line for line in lines), text[:2000]
        assert any('[twistgw.access#info] 127.0.0.1 "GET /x"' in line for line in lines), text
