"""A private Redis Cluster for tests: real ``redis-server`` processes in
cluster mode on loopback (3 primaries with one replica each by default),
joined with ``redis-cli --cluster create``, stopped by pid.

::

    from support.rediscluster import RedisClusterServers
    cluster = RedisClusterServers(tmp_path).start()   # blocks until every node says cluster_state:ok
    cluster.seed                                       # "127.0.0.1:PORT" of one node
    cluster.keyslot("k"); cluster.owner(slot)         # CLUSTER KEYSLOT; the primary serving a slot
    cluster.kill(node); cluster.revive(node)          # SIGKILL by pid; start again (it rejoins as a replica)
    cluster.failover(replica)                         # CLUSTER FAILOVER on a replica (no write lost)
    cluster.migrate_slot(slot, source, target, during=fn)   # SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE
    cluster.reshard(slot, source, target)             # redis-cli --cluster reshard, for one slot
    cluster.heal()                                     # every node up, every slot served, cluster_state:ok

Nodes are :class:`support.redis.RedisServer` objects (``node.port``,
``node.command(...)``, ``node.pid``). A missing ``redis-server`` or
``redis-cli`` fails the suite (it never skips).

These helpers block: use them in plain tests and fixtures, never inside a
test that runs on the reactor (run them in a thread from there).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

import hiredis

from support.ports import free_port
from support.redis import INSTALL_HINT, RedisMissing, RedisServer

__all__ = ["RedisClusterServers", "find_redis_cli"]

SLOTS = 16384


def _printed(reply: Any) -> str:
    """A reply as redis-cli prints it (without quotes or numbering)."""
    if isinstance(reply, list):
        return "\n".join(_printed(r) for r in reply)
    if isinstance(reply, bytes):
        return reply.decode("utf-8", "replace").strip()
    if reply is None:
        return ""
    return str(reply)



async def result(cluster: Any, *command: Any) -> Any:
    """A cluster client's reply to ``command``, or the exception it failed
    with (for tests that look at either)."""
    try:
        return await cluster.execute(*command)
    except Exception as exc:  # noqa: BLE001 (the test looks at it)
        return exc

def find_redis_cli() -> str:
    for candidate in (shutil.which("redis-cli"), "/usr/bin/redis-cli"):
        if candidate and Path(candidate).exists():
            return candidate
    raise RedisMissing(f"redis-cli not found; the Redis Cluster tests need it: {INSTALL_HINT}")


class RedisClusterServers:
    """``primaries`` × (1 + ``replicas``) nodes of one cluster, ``--cluster-node-timeout``
    ``node_timeout`` ms (how soon a dead primary is replaced); ``args`` go to every node
    (a password: also give ``password`` so the helpers can log in). ``tls`` (certificate,
    key, CA) adds a TLS port to each node and puts the bus in TLS, whose connections need
    a client certificate (``tls_client``: certificate and key)."""

    def __init__(self, directory: Path, primaries: int = 3, replicas: int = 1, node_timeout: int = 1000,
                 args: tuple[str, ...] = (), password: str | None = None, tls: tuple[Path, Path, Path] | None = None,
                 tls_client: tuple[Path, Path] | None = None) -> None:
        self.cli = find_redis_cli()
        self.directory = Path(directory)
        self.primaries, self.replicas = primaries, replicas
        self.password = password
        self.tls = tls
        self.nodes: list[RedisServer] = []
        self._connections: dict[int, socket.socket] = {}
        self._readers: dict[int, Any] = {}
        self._lock = threading.RLock()  # tests call the helpers from threads too
        for i in range(primaries * (1 + replicas)):
            port, bus = free_port(), free_port()
            extra = ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                     "--cluster-node-timeout", str(node_timeout), "--cluster-port", str(bus),
                     "--cluster-replica-validity-factor", "0",
                     # a replica's full sync starts at once (Redis 7 waits 5 s for more replicas
                     # to share a diskless transfer): each start, heal and revive is 5 s shorter
                     "--repl-diskless-sync-delay", "0", *args]
            if tls is not None:  # a TLS port beside the plain one (the helpers'); the bus and replication in TLS
                extra += ["--tls-cluster", "yes", "--tls-replication", "yes"]
                if tls_client is not None:  # the bus checks its peers' client certificates, always
                    extra += ["--tls-client-cert-file", str(tls_client[0]), "--tls-client-key-file",
                              str(tls_client[1])]
            node = RedisServer(self.directory / f"node{i}", port=port, args=extra, tls=tls)
            self.nodes.append(node)

    # -- talking to nodes ------------------------------------------------------------------------

    def cli_args(self) -> list[str]:
        out = ["--no-auth-warning", "-a", self.password] if self.password is not None else []
        return out

    def run(self, node: RedisServer, *args: str, timeout: float = 10) -> str:
        """One command on ``node``, its reply as ``redis-cli`` prints it (an array one element a
        line, an error reply as its text); over a kept connection (a redis-cli process per
        command costs tens of milliseconds on a busy machine). ``--cluster ...`` runs redis-cli."""
        if args and args[0] == "--cluster":
            out = subprocess.run([self.cli, "-h", "127.0.0.1", "-p", str(node.port), *self.cli_args(), *args],
                                 capture_output=True, text=True, timeout=timeout, check=True)
            return out.stdout.strip()
        with self._lock:
            return self._command(node, args, timeout)

    def _command(self, node: RedisServer, args: tuple[str, ...], timeout: float) -> str:
        for attempt in (0, 1):
            conn = self._connection(node, timeout)
            try:
                conn.sendall(hiredis.pack_command(args))
                reader = self._readers[node.port]
                while (reply := reader.gets()) is False:
                    data = conn.recv(65536)
                    if not data:
                        raise ConnectionError(f"{node.address} closed the connection")
                    reader.feed(data)
                return _printed(reply)
            except OSError:
                self._drop(node)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _connection(self, node: RedisServer, timeout: float) -> socket.socket:
        conn = self._connections.get(node.port)
        if conn is None:
            conn = socket.create_connection(("127.0.0.1", node.port), timeout=timeout)
            self._connections[node.port] = conn
            self._readers[node.port] = hiredis.Reader()
            if self.password is not None:
                conn.sendall(hiredis.pack_command(("AUTH", self.password)))
                reader = self._readers[node.port]
                while reader.gets() is False:
                    reader.feed(conn.recv(65536))
        conn.settimeout(timeout)
        return conn

    def _drop(self, node: RedisServer) -> None:
        conn = self._connections.pop(node.port, None)
        self._readers.pop(node.port, None)
        if conn is not None:
            conn.close()

    @property
    def seed(self) -> str:
        """The address of a live node (``127.0.0.1:PORT``)."""
        return next(n.address for n in self.nodes if n.process is not None)

    def keyslot(self, key: str) -> int:
        return int(self.run(self._any(), "CLUSTER", "KEYSLOT", key))

    def node_id(self, node: RedisServer) -> str:
        return self.run(node, "CLUSTER", "MYID")

    def role(self, node: RedisServer) -> str:
        return self.run(node, "ROLE").split("\n")[0]

    def live(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]

    def _any(self) -> RedisServer:
        return self.live()[0]

    def _nodes_view(self, via: RedisServer) -> list[list[str]]:
        return [line.split() for line in self.run(via, "CLUSTER", "NODES").splitlines() if line.strip()]

    def owners(self, timeout: float = 10.0) -> list[RedisServer | None]:
        """Each slot's primary now (None: nobody serves it), once every live node sees the same."""
        by_id = {self.node_id(n): n for n in self.live()}
        deadline = time.monotonic() + timeout
        while True:
            views = [self._owners_seen_by(n, by_id) for n in self.live()]
            if all(v == views[0] for v in views) or time.monotonic() > deadline:
                return views[0]
            time.sleep(0.05)

    def _owners_seen_by(self, node: RedisServer, by_id: dict[str, RedisServer]) -> list[RedisServer | None]:
        out: list[RedisServer | None] = [None] * SLOTS
        for fields in self._nodes_view(node):
            if "master" not in fields[2] or "fail" in fields[2] or fields[0] not in by_id:
                continue
            for part in fields[8:]:
                if part.startswith("["):
                    continue
                low, _, high = part.partition("-")
                out[int(low):int(high or low) + 1] = [by_id[fields[0]]] * (int(high or low) - int(low) + 1)
        return out

    def owner(self, slot: int) -> RedisServer:
        """The primary serving ``slot`` now, as a live node sees it."""
        found = self.owners()[slot]
        if found is None:
            raise AssertionError(f"no primary serves slot {slot}")
        return found

    def first_slot(self, primary: RedisServer) -> int:
        """The lowest slot ``primary`` serves (``redis-cli --cluster reshard`` moves those first)."""
        return self.owners().index(primary)

    def replica_of(self, primary: RedisServer) -> RedisServer:
        pid = self.node_id(primary)
        by_id = {self.node_id(n): n for n in self.live()}
        for fields in self._nodes_view(primary):
            if fields[3] == pid and "slave" in fields[2] and fields[0] in by_id:
                return by_id[fields[0]]
        raise AssertionError(f"no live replica of {primary.address}")

    def other_primary(self, than: RedisServer) -> RedisServer:
        for node in self.live():
            if node is not than and self.role(node) == "master":
                return node
        raise AssertionError("no other primary")

    # -- life cycle ------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> "RedisClusterServers":
        for node in self.nodes:
            node.start()
        self.run(self.nodes[0], "--cluster", "create", *[n.address for n in self.nodes],
                 "--cluster-replicas", str(self.replicas), "--cluster-yes", timeout=timeout)
        self.wait_ok(timeout)
        return self

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every live node says ``cluster_state:ok`` and agrees on the primaries and replicas."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                states = [self.run(n, "CLUSTER", "INFO") for n in self.live()]
                if all("cluster_state:ok" in s for s in states):
                    views = {n.port: self._nodes_view(n) for n in self.live()}
                    if all(len(v) == len(self.nodes) and not any("fail" in f[2] or f[7] != "connected" for f in v)
                           for v in views.values()) and self._agree(views) and self._replicating():
                        return
                last = states[0] if states else "no live node"
            except (subprocess.SubprocessError, OSError, IndexError) as exc:
                last = str(exc)
            time.sleep(0.1)
        raise AssertionError(f"the cluster is not ok after {timeout}s: {last}")

    def _replicating(self) -> bool:
        """Every live replica's link to its primary is up (it can take over), and there are
        ``primaries`` primaries."""
        roles = {n.port: self.run(n, "INFO", "replication") for n in self.live()}
        primaries = [r for r in roles.values() if "role:master" in r]
        replicas = [r for r in roles.values() if "role:slave" in r]
        return len(primaries) == self.primaries and all("master_link_status:up" in r for r in replicas)

    @staticmethod
    def _agree(views: dict[int, list[list[str]]]) -> bool:
        def shape(view: list[list[str]]) -> set[tuple[str, str, tuple[str, ...]]]:
            return {(f[0], f[2].replace("myself,", ""), tuple(f[8:])) for f in view}
        shapes = [shape(v) for v in views.values()]
        return all(s == shapes[0] for s in shapes)

    def kill(self, node: RedisServer) -> None:
        """SIGKILL ``node`` by its pid: a crash (no goodbye on the cluster bus)."""
        process = node.process
        assert process is not None
        process.kill()
        process.wait(10)
        node.process = None
        self._drop(node)

    def revive(self, node: RedisServer) -> None:
        """Start ``node`` again on its port with its nodes file: it rejoins (as a replica, if replaced)."""
        node.start()

    def failover(self, replica: RedisServer, timeout: float = 20.0) -> None:
        """``CLUSTER FAILOVER`` on ``replica``: it catches up with its primary, then takes over its slots."""
        assert self.run(replica, "CLUSTER", "FAILOVER") == "OK"
        deadline = time.monotonic() + timeout
        while self.role(replica) != "master":
            if time.monotonic() > deadline:
                raise AssertionError(f"{replica.address} did not become a primary")
            time.sleep(0.05)
        self.wait_ok(timeout)  # every node knows it (owner() asks one of them)

    def wait_primary(self, node: RedisServer, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.role(node) == "master":
                    return
            except (subprocess.SubprocessError, OSError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{node.address} did not become a primary within {timeout}s")
            time.sleep(0.05)

    def migrate_slot(self, slot: int, source: RedisServer, target: RedisServer,
                     during: Callable[[], None] = lambda: None, batch: int = 10) -> None:
        """Move ``slot`` by hand, as ``redis-cli --cluster reshard`` does: IMPORTING on the
        target, MIGRATING on the source, ``during()`` (while the slot is half-moved: new keys
        are ASK-redirected), MIGRATE of its keys ``batch`` at a time, then SETSLOT NODE on
        both (clients get MOVED)."""
        sid, tid = self.node_id(source), self.node_id(target)
        self.run(target, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", sid)
        self.run(source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", tid)
        during()
        auth = ["AUTH", self.password] if self.password is not None else []
        while True:
            keys = self.run(source, "CLUSTER", "GETKEYSINSLOT", str(slot), str(batch)).split()
            if not keys:
                break
            self.run(source, "MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", *auth, "KEYS", *keys)
        for node in (target, source):
            self.run(node, "CLUSTER", "SETSLOT", str(slot), "NODE", tid)
        for node in self.live():  # the other primaries learn it by the bus; telling them is quicker
            if node not in (source, target) and self.role(node) == "master":
                self.run(node, "CLUSTER", "SETSLOT", str(slot), "NODE", tid)

    def reshard(self, slot: int, source: RedisServer, target: RedisServer) -> None:
        """``redis-cli --cluster reshard`` of one slot, as an operator runs it."""
        del slot  # redis-cli picks the slots itself: it moves the source's first one(s)
        self.run(self._any(), "--cluster", "reshard", self._any().address, "--cluster-from", self.node_id(source),
                 "--cluster-to", self.node_id(target), "--cluster-slots", "1", "--cluster-yes", timeout=60)

    def flush(self) -> None:
        """FLUSHALL on every primary (tests begin with empty counters)."""
        for node in self.live():
            if self.role(node) == "master":
                self.run(node, "FLUSHALL")

    def heal(self, timeout: float = 60.0) -> None:
        """Every node running again, no slot left half-migrated, and the cluster ok (after a
        test killed or moved things)."""
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                node.process = None
                node.start()
        for node in self.live():
            mine = next((f for f in self._nodes_view(node) if "myself" in f[2]), [])
            for part in mine[8:]:
                if part.startswith("["):  # [slot->-id] migrating, [slot-<-id] importing
                    self.run(node, "CLUSTER", "SETSLOT", part[1:].split("-")[0], "STABLE")
        self.wait_ok(timeout)

    def stop(self) -> None:
        for node in self.nodes:
            self._drop(node)
            node.stop()

    def __enter__(self) -> "RedisClusterServers":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
