"""The README's demo lines work exactly as printed against the shipped etc/.

Starts ``twist twistgw --config etc/`` (the installed dropin) as the README
says, then runs every line of the README's demo block in one bash session
and checks the outcome written in its ``# expect:`` comment.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest

from doc_shell import check_outcomes, fixed_ports, port_busy, run_lines, shell_lines

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
DEMO_PORTS = (8080, 9901, 8081, 3389)


def demo_lines() -> list[str]:
    return shell_lines((ROOT / "README.md").read_text(), "<!-- demo:start -->", "<!-- demo:end -->")


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
    with fixed_ports(DEMO_PORTS):
        yield from run_demo()


def run_demo():
    cmd, cwd = twist_command()
    log = open(ROOT / ".demo-test.log", "wb")
    proc = subprocess.Popen([*cmd, "--log-format=text", "twistgw", "--config", "etc/"], cwd=cwd,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not (port_busy(8080) and port_busy(3389) and port_busy(8081)):
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
    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    outcomes, log = run_lines(demo_lines(), str(ROOT), env, timeout=120)
    assert outcomes
    check_outcomes(outcomes, log)


AUDIT = """
import sys
opened = []
def audit(event, args):
    if event in ("socket.bind", "socket.connect", "socket.sendto", "socket.sendmsg"):
        opened.append((event, repr(args[1:])))
    elif event == "socket.__new__" and args[1] in (2, 10):  # AF_INET, AF_INET6
        opened.append((event, repr(args[1:])))
sys.addaudithook(audit)
from twistgw.cli import main
rc = main(sys.argv[1:])
sys.stdout.flush()
print("NETWORK:", opened, file=sys.stderr)
sys.exit(rc)
"""


@pytest.mark.parametrize("args,expect", [
    (["GET", "http://localhost/ldap/", "-H", "Authorization: Basic YWxpY2U6YWxpY2UtcGFzc3dvcmQ="],
     "extauth.authenticate: NOT CHECKED — AuthConfig default/demo-ldap: spec.configs[0].ldap would bind"
     " as 'uid=alice,ou=people,dc=example,dc=org' at ldap://127.0.0.1:3389"),
    (["GET", "http://localhost/ldap/"], "extauth.authenticate: DENY 401"),
    (["GET", "http://localhost/hello"], "Result: forwarded to upstream default/echo"),
])
def test_explain_with_the_demo_running_is_a_dry_run(demo, args, expect):
    """The demo listens on 3389 (its development directory), 8080, 8081 and
    9901: explain starts none of them again, binds and connects nothing,
    and says what it would have asked the directory."""
    out = subprocess.run([sys.executable, "-c", AUDIT, "explain", "etc", *args], cwd=str(ROOT),
                         capture_output=True, text=True, timeout=60)
    assert "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr
    assert "NETWORK: []" in out.stderr, out.stderr
    assert expect in out.stdout, out.stdout
    assert "(dry run: nothing contacted" in out.stdout


def test_explain_live_asks_the_running_directory_and_listens_on_nothing(demo):
    out = subprocess.run([sys.executable, "-c", AUDIT, "explain", "etc", "GET", "http://localhost/ldap/",
                          "-H", "Authorization: Basic YWxpY2U6YWxpY2UtcGFzc3dvcmQ=", "--live"],
                         cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr
    assert "extauth.authenticate: allow" in out.stdout and "NOT CHECKED" not in out.stdout
    network = out.stderr.split("NETWORK:", 1)[1]
    assert "socket.connect" in network and "3389" in network  # the demo's directory
    assert "socket.bind" not in network


def test_a_second_demo_says_in_one_line_each_what_cannot_listen_and_exits_3(demo):
    """Issue 32, item 12: the README's command run while the demo already
    runs. Every endpoint it cannot take (the development directory and echo
    server from etc/settings.yaml, --listen and --admin) is one line naming
    it and the reason; no traceback; exit status 3."""
    cmd, cwd = twist_command()
    out = subprocess.run([*cmd, "--log-format=text", "twistgw", "--config", "etc/"], cwd=cwd,
                         capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr
    assert out.returncode == 3, text
    assert "Traceback" not in text and "Unhandled Error" not in text, text
    busy = "address already in use"
    expected = [
        f"twistgw: Development LDAP directory not started: cannot listen on tcp:3389:interface=127.0.0.1"
        f" (Settings spec.extauth.devDirectory.listen): {busy}",
        f"twistgw: Development echo server not started: cannot listen on tcp:8081:interface=127.0.0.1"
        f" (Settings spec.gateway.echoServer.listen): {busy}",
        f"twistgw: cannot listen on --listen tcp:8080: {busy}",
        f"twistgw: cannot listen on --admin tcp:9901:interface=127.0.0.1: {busy}",
    ]
    # on stderr, in this order, and nothing else there
    assert out.stderr.splitlines() == expected, out.stderr
    assert demo.poll() is None  # the first demo still runs


def _upstream_header_names(explain_output: str) -> set[str]:
    block = explain_output.split("Headers sent upstream:\n", 1)[1]
    return {line.split(":", 1)[0].strip().lower() for line in block.splitlines() if line.startswith("  ")}


def test_explain_dry_run_shows_the_headers_the_live_gateway_forwards(demo):
    """Issue 32, item 13: on the LDAP route the live gateway strips the
    Basic credentials; the dry run shows the same request going upstream
    (all but the directory's X-Auth-* headers, which only --live knows),
    and the backend indeed gets no Authorization."""
    import base64
    import json
    import urllib.request

    basic = "Basic " + base64.b64encode(b"alice:alice-password").decode()
    args = [sys.executable, "-m", "twistgw", "explain", "etc", "GET", "http://localhost/ldap/", "-H",
            f"Authorization: {basic}"]
    dry = subprocess.run(args, cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    live = subprocess.run([*args, "--live"], cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert "NOT CHECKED" in dry.stdout and "extauth.authenticate: allow" in live.stdout, dry.stdout + live.stdout
    dry_names, live_names = _upstream_header_names(dry.stdout), _upstream_header_names(live.stdout)
    assert "authorization" not in dry_names and "authorization" not in live_names, dry.stdout
    assert live_names - dry_names == {"x-auth-user", "x-auth-groups"}, (dry.stdout, live.stdout)
    assert dry_names <= live_names
    request = urllib.request.Request("http://127.0.0.1:8080/ldap/", headers={"Authorization": basic,
                                                                            "Host": "localhost"})
    with urllib.request.urlopen(request, timeout=30) as response:
        received = {name.lower() for name in json.load(response)["headers"]}
    assert "authorization" not in received and "x-auth-user" in received, received
