"""``bench/soak_ws.py`` (the issue 13 soak: WebSocket and HTTP mixed) kept
honest: a few seconds of it through a real gateway process must echo every
message exactly, refuse every token-less upgrade with 401, see clients
vanish without a close frame, and leave the gateway with no traceback and
its file descriptors back near where they started. The 5-minute run and its
RSS verdict are in docs/performance.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_short_soak_through_a_real_gateway(tmp_path: Path) -> None:
    report_path = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "soak_ws.py"), "--duration", "4", "--warmup", "2",
         "--sample", "1", "--json", str(report_path)],
        capture_output=True, text=True, timeout=180)
    assert report_path.exists(), proc.stdout + proc.stderr
    report = json.loads(report_path.read_text())
    ws = report["ws"]
    assert ws["messages"] > 100, report
    assert ws["wrong"] == 0, report
    assert ws["denied"] > 0 and ws["denied_wrong"] == 0, report
    assert ws["vanished"] > 0 and ws["closed"] > 0, report
    assert not ws["errors"], report
    assert report["tracebacks"] == 0, report
    # every WebSocket connection (client and backend side) was closed; what
    # may be left is the pool's idle keep-alive connections to the backend
    # after the HTTP load (wrk -c16, when wrk is installed)
    idle = 16 if report["http"] else 0
    assert report["fds"]["end"] <= report["fds"]["before_load"] + idle + 2, report
    assert report["samples"], report
