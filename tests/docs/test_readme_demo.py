"""The README's demo lines work exactly as printed against the shipped etc/.

Starts ``twist twistgw --config etc/`` (the installed dropin) as the README
says, then runs every line of the README's demo block in one bash session
and checks the outcome written in its ``# expect:`` comment.
"""

from __future__ import annotations

import os
import pathlib
import re
import socket
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
DEMO_PORTS = (8080, 9901, 8081, 3389)


def demo_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- demo:start -->", 1)[1].split("<!-- demo:end -->", 1)[0]
    body = block.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in body.splitlines() if line.strip()]


def _port_busy(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def twist_command() -> tuple[list[str], str]:
    """`twist twistgw` from the installed package; an editable install does
    not expose the dropin, so fall back to `python -m twisted` in the repo."""
    twist = BIN / "twist"
    probe = subprocess.run([str(twist), "twistgw", "--help"], capture_output=True, cwd="/", timeout=60)
    if probe.returncode == 0:
        return [str(twist)], str(ROOT)
    return [sys.executable, "-m", "twisted"], str(ROOT)


@pytest.fixture(scope="module")
def demo():
    busy = [p for p in DEMO_PORTS if _port_busy(p)]
    assert not busy, f"the demo needs ports {DEMO_PORTS} free on 127.0.0.1; busy: {busy}"
    cmd, cwd = twist_command()
    log = open(ROOT / ".demo-test.log", "wb")
    proc = subprocess.Popen([*cmd, "--log-format=text", "twistgw", "--config", "etc/"], cwd=cwd,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not (_port_busy(8080) and _port_busy(3389) and _port_busy(8081)):
            assert proc.poll() is None, (ROOT / ".demo-test.log").read_text()
            assert time.monotonic() < deadline, "the demo gateway did not start in 30 s"
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        (ROOT / ".demo-test.log").unlink(missing_ok=True)


def test_demo_block_has_every_outcome():
    expects = " ".join(line.split("# expect:", 1)[1] for line in demo_lines() if "# expect:" in line)
    for status in ("200", "401", "403"):
        assert status in expects
    assert "Jwt is missing" in expects and "RBAC: access denied" in expects


def test_readme_demo_lines(demo):
    lines = demo_lines()
    script = ["set -u"]
    checks = []
    for i, line in enumerate(lines):
        if "# expect:" in line:
            expect = line.split("# expect:", 1)[1].strip()
            script.append(f"echo '@@@{i}'")
            checks.append((i, line, expect))
        script.append(line)
    script.append("echo '@@@end'")
    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    out = subprocess.run(["bash", "-c", "\n".join(script)], cwd=str(ROOT), env=env,
                         capture_output=True, text=True, timeout=120)
    sections = dict(re.findall(r"@@@(\d+)\n(.*?)(?=@@@)", out.stdout + "@@@", re.S))
    for i, line, expect in checks:
        got = sections.get(str(i), "")
        status, _, text = expect.partition(" ")
        first = got.splitlines()[0] if got else ""
        assert first.startswith(f"HTTP/1.1 {status} "), f"{line}\n  expected {status}, got:\n{got[:500]}\n{out.stderr}"
        if text:
            assert text.strip() in got, f"{line}\n  expected {text!r} in:\n{got[:800]}"
