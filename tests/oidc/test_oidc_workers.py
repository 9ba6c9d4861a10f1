"""``--workers 2``: a login may start on one worker and come back to the
other, and every worker serves every session (Redis, and the cookie store
with its shared key). Each request of the scripted browser is a new
connection, so the kernel spreads them over both workers."""

from __future__ import annotations

import subprocess
from typing import Any, Iterator

import pytest
from oidc_support import Browser, login, seen
from stack import Stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: Any) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("oidc-workers"), workers=2)
    yield s
    s.close()


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_sessions_are_served_by_every_worker(stack: Stack) -> None:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(stack.gateway.pid)], capture_output=True, text=True)
    workers = [int(x) for x in out.stdout.split()]
    assert len(workers) == 2, workers
    before = {w: cpu_ticks(w) for w in workers}
    for prefix in ("redis", "cookie") * 4:
        b = Browser()
        login(b, stack.url(f"/{prefix}/x"), stack.host)
        for i in range(10):
            assert seen(b.get(stack.url(f"/{prefix}/page{i}")))["x-user-email"] == ["alice@example.org"]
    assert all(cpu_ticks(w) > before[w] for w in workers), "one worker served nothing"
