"""The machinery of :mod:`twistgw.sdk.testing` (import it from there):
helpers for testing plugins and configurations in memory (no sockets).

Example::

    from twistgw.sdk.testing import ChainTester

    tester = ChainTester.from_yaml(CONFIG_YAML, plugins=[("apikey", my_plugin)])
    result = await tester.request("GET", "http://api.example.com/pets",
                                  headers={"X-Api-Key": "secret"})
    assert result.status == 200            # the request would be forwarded
    assert result.forwarded_headers.getRawHeaders(b"x-api-key") is None

``result.status`` is the status the gateway would answer with when a plugin
or routing decides (401, 403, 404, ...), or ``200`` standing for "forwarded
to the upstream".
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Iterable, Mapping, Sequence, Union

import attrs

from twisted.internet.defer import Deferred

from twistgw.api.headers import Headers
from twistgw.api.types import RequestContext
from twistgw.config.defaults import BACKLOG
from twistgw.config.names import parse_host
from twistgw.config.loader import load_directory, load_text
from twistgw.core.pipeline import Pipeline, RequestHead, split_target
from twistgw.core.plan import Forward, LocalResponse, Plan
from twistgw.core.plugins import GatewayInfo, PluginHost
from twistgw.core.routeruntime import RouteRuntime
from twistgw.core.snapshot import Snapshot, build_snapshot

from twistgw._recording import (BackendResponse, RecordedRequest, RecordingBackend, close_treq_idle_connections,
                                start_recording_backend)

__all__ = ["BackendResponse", "ChainResult", "ChainTester", "RecordedRequest", "RecordingBackend", "Resources",
           "RunningGateway", "make_headers", "resolve_plugins", "resources_yaml", "start_gateway",
           "start_recording_backend", "trial_tests_first"]

#: Resources as Python data: YAML text (one or more ``---``-separated
#: documents), or a sequence whose items are resource mappings or YAML texts.
Resources = Union[str, Sequence[Union[Mapping[str, Any], str]]]


def resources_yaml(resources: Resources, backend: RecordingBackend | None = None) -> str:
    """The YAML text of ``resources`` (see :data:`Resources`); with
    ``backend``, a static ``Upstream`` named ``backend`` in namespace
    ``default`` that sends to it is added (:meth:`RecordingBackend.upstream`)."""
    import yaml

    items: list[Mapping[str, Any] | str] = [resources] if isinstance(resources, str) else list(resources)
    if backend is not None:
        items.append(backend.upstream())
    texts = []
    for item in items:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, Mapping):
            texts.append(yaml.safe_dump(dict(item), sort_keys=False))
        else:
            raise TypeError(f"a resource is a mapping or YAML text, not {type(item).__name__}")
    return "\n---\n".join(t.strip("\n") for t in texts) + "\n"


def make_headers(headers: Mapping[str, str | Sequence[str]] | Iterable[tuple[str, str]] | None) -> Headers:
    out = Headers()
    if headers is None:
        return out
    items = headers.items() if isinstance(headers, Mapping) else headers
    for name, value in items:
        values = [value] if isinstance(value, (str, bytes)) else list(value)
        for v in values:
            out.addRawHeader(name.encode("latin-1"), v.encode("latin-1") if isinstance(v, str) else v)
    return out


@attrs.define
class ChainResult:
    """What the gateway would do with a request: the plan of
    :meth:`twistgw.core.pipeline.Pipeline.handle`, the same the server carries out.

    :ivar status: the status of the gateway's own answer, or ``200``
        standing for "forwarded to the upstream".
    :ivar deny: the gateway's answer when the request is refused (by
        routing or a plugin; it has ``status``, ``body``, ``headers``,
        ``content_type`` and ``reason``), else None.
    :ivar plan: the plan itself (:class:`~twistgw.core.plan.Forward` or
        :class:`~twistgw.core.plan.LocalResponse`).
    """

    status: int
    body: bytes
    response_headers: tuple[tuple[bytes, bytes], ...]
    decided_by: str | None
    ctx: RequestContext | None
    runtime: RouteRuntime | None
    trace: list[tuple[str, str, Any]]
    deny: LocalResponse | None
    plan: Plan | None = None

    @property
    def forwarded(self) -> bool:
        """Whether the request is admitted: sent to the upstream, or
        answered by its route's direct response (not refused)."""
        return self.deny is None

    @property
    def forwarded_headers(self) -> Headers:
        """The headers the upstream gets (``X-Forwarded-For`` and
        ``X-Forwarded-Proto`` included); for a refused request, the headers
        as the plugins left them."""
        if isinstance(self.plan, Forward):
            return self.plan.headers
        assert self.ctx is not None
        return self.ctx.headers

    @property
    def forwarded_target(self) -> str | None:
        """The path and query the upstream gets (after ``prefixRewrite``),
        or None when the request is not forwarded."""
        if isinstance(self.plan, Forward):
            return self.plan.target.decode("latin-1")
        return None


def resolve_plugins(plugins: Iterable[tuple[str, object] | str]) -> list[tuple[str, object]]:
    """``(name, plugin)`` pairs for :class:`ChainTester` and :func:`start_gateway`.

    A bare string names an installed plugin (its ``twistgw.plugins`` entry
    point, e.g. ``"jwt"``); a pair registers that object under that name.
    Raises ``ValueError`` for a name no installed package provides.
    """
    from importlib.metadata import entry_points

    from twistgw.core.plugins import ENTRY_POINT_GROUP

    out: list[tuple[str, object]] = []
    for item in plugins:
        if isinstance(item, str):
            found = list(entry_points(group=ENTRY_POINT_GROUP, name=item))
            if not found:
                installed = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
                raise ValueError(f"no installed twistgw plugin is named {item!r}"
                                 f" (installed: {', '.join(installed) or 'none'})")
            out.append((item, found[0].load()))
        else:
            name, plugin = item
            out.append((name, plugin))
    return out


def _chosen_host(plugins: Iterable[tuple[str, object] | str], load_entry_points: bool, whose: str) -> PluginHost:
    """A host of the given plugins; a configuration naming an installed
    plugin left out of them is told so (``PluginHost.selection``)."""
    chosen = resolve_plugins(plugins)
    host = PluginHost.create(extra=chosen, load_entry_points=load_entry_points)
    if not load_entry_points:
        host.selection = f"{whose} plugins=[{', '.join(repr(name) for name, _ in chosen)}]"
    return host


def _configured_host(plugins: Iterable[tuple[str, object] | str], load_entry_points: bool, reactor: Any,
                     dry_run: bool = False, may_listen: bool = True) -> PluginHost:
    from prometheus_client import REGISTRY
    from twisted.logger import Logger

    if reactor is None:
        from twisted.internet import reactor as default_reactor

        reactor = default_reactor
    host = _chosen_host(plugins, load_entry_points, "this ChainTester's")
    host.configure(GatewayInfo(reactor, REGISTRY, Logger(namespace="twistgw.testing"),
                               dry_run=dry_run, may_listen=may_listen))
    return host


class ChainTester:
    """A compiled configuration and the plugins you name, to run requests through.

    Only the plugins you pass take part: a test of one plugin does not
    pick up whatever else is installed. Build one with :meth:`from_yaml` or
    :meth:`from_directory`; both raise :class:`twistgw.sdk.testing.ConfigError` (its
    ``issues`` list every problem, with file, line and field) when the
    configuration is rejected.
    """

    def __init__(self, snapshot: Snapshot, host: PluginHost, reactor: Any = None,
                 dry_run: bool = False) -> None:
        self.snapshot = snapshot
        self.host = host
        self.reactor = reactor
        self.dry_run = dry_run
        self.pipeline = Pipeline(host, reactor, dry_run=dry_run)
        host.config_loaded(snapshot.plugin_compiled, snapshot.config.settings)

    @classmethod
    def from_yaml(cls, text: str, plugins: Iterable[tuple[str, object] | str], *,
                  load_entry_points: bool = False, reactor: Any = None,
                  dry_run: bool = False) -> "ChainTester":
        """Compile YAML text (one or more ``---``-separated documents).

        :param plugins: the plugins to load: ``(name, module)`` pairs (the
            name is the options key, as an entry point's name would be) or
            names of installed plugins (``"jwt"``). ``[]`` for none.
        :param load_entry_points: also load every installed plugin, as the
            gateway does (``twistgw explain``).
        :param reactor: for plugins that do I/O (default: the global reactor).
        :param dry_run: tell the plugins to contact nothing (see
            :meth:`from_directory`), e.g. to test compiled options alone.
        :raises twistgw.sdk.testing.ConfigError: the configuration is rejected.
        """
        host = _configured_host(plugins, load_entry_points, reactor, dry_run)
        config = load_text(text, keep_going=True, merges=host.option_merges())
        return cls(build_snapshot(config, host), host, reactor, dry_run)

    @classmethod
    def from_resources(cls, resources: Resources, plugins: Iterable[tuple[str, object] | str], *,
                       load_entry_points: bool = False, reactor: Any = None,
                       dry_run: bool = False) -> "ChainTester":
        """Compile resources given as Python data (:data:`Resources`: a list
        of mappings and YAML texts); otherwise as :meth:`from_yaml`."""
        return cls.from_yaml(resources_yaml(resources), plugins, load_entry_points=load_entry_points,
                             reactor=reactor, dry_run=dry_run)

    @classmethod
    def from_directory(cls, directory: str, plugins: Iterable[tuple[str, object] | str], *,
                       load_entry_points: bool = False, reactor: Any = None,
                       dry_run: bool = False, may_listen: bool = True) -> "ChainTester":
        """Compile a configuration directory, as the gateway reads it.

        Arguments as :meth:`from_yaml`. With ``dry_run`` the plugins are told
        (``GatewayInfo.dry_run``) to contact nothing, and answer
        :class:`sdk.NotChecked` where they would need to; with
        ``may_listen=False`` they start no server of their own (such as the
        development LDAP directory). ``twistgw explain`` passes both;
        ``--live`` only the second.
        """
        host = _configured_host(plugins, load_entry_points, reactor, dry_run, may_listen)
        config = load_directory(directory, keep_going=True, merges=host.option_merges())
        return cls(build_snapshot(config, host), host, reactor, dry_run)

    async def request(self, method: str, url: str, headers: Any = None,
                      client_address: str = "127.0.0.1", protocol: str = "HTTP/1.1") -> ChainResult:
        """Run a request (``url`` absolute: its host is the Host header; an
        ``https://`` one is routed as on a TLS listener, the host being the
        server name the client asked for: see docs/tls.md). ``protocol``:
        what the client speaks (``HTTP/1.1``, ``HTTP/1.0``, ``HTTP/2``)."""
        hdrs = make_headers(headers)
        target = url.encode("latin-1")
        authority, path, query = split_target(target)
        if authority is not None and not hdrs.hasHeader(b"host"):
            hdrs.setRawHeaders(b"host", [authority])
            target = path + (b"?" + query if query else b"")
        trace: list[tuple[str, str, Any]] = []
        head = RequestHead(method.encode("latin-1"), target, hdrs, client_address,
                           version=protocol.encode("ascii"))
        if url[:8].lower() == "https://" and authority is not None:
            # as on a TLS listener with its own certificate, SNI = the URL's host (docs/tls.md)
            head.scheme = "https"
            chain = self.snapshot.tls.select(parse_host(authority))
            head.hosts = chain.hosts if chain is not None else None
        plan = self.pipeline.handle(head, self.snapshot, lambda p, ph, d: trace.append((p, ph, d)))
        if isinstance(plan, Deferred):
            plan = await plan
        ctx, runtime = head.ctx, head.runtime
        if isinstance(plan, Forward):
            return ChainResult(200, b"", (), None, ctx, runtime, trace, None, plan)
        if runtime is not None and (plan is runtime.answer or plan.answer):  # a direct response, a redirect...
            return ChainResult(plan.status, plan.body, plan.headers, None, ctx, runtime, trace, None, plan)
        return ChainResult(plan.status, plan.body, plan.headers, ctx.decided_by if ctx else None,
                           ctx, runtime, trace, plan, plan)


class RunningGateway:
    """A gateway serving on loopback in this process (see :func:`start_gateway`)."""

    def __init__(self, service: Any, port: Any, admin_port: Any, config_dir: str, temporary: bool = False) -> None:
        self.service = service
        #: the configuration directory it serves (a temporary one, removed
        #: by :meth:`stop`, when :func:`start_gateway` was given resources)
        self.config_dir = config_dir
        self._temporary = temporary
        self._port = port
        self._admin_port = admin_port
        self.port: int = port.getHost().port
        self.admin_port: int | None = admin_port.getHost().port if admin_port else None

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def admin_url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.admin_port}{path}"

    def reload(self) -> bool:
        """Reload the configuration directory now; True when it was accepted."""
        return self.service.reload("test")

    async def stop(self) -> None:
        from twisted.internet.defer import gatherResults, maybeDeferred

        self.service.gateway.draining = True
        self.service.stop_polling()
        ports = [p for p in (self._port, self._admin_port) if p is not None]
        await gatherResults([maybeDeferred(p.stopListening) for p in ports])
        await self.service.factory.close_connections()
        await close_treq_idle_connections()
        await self.service.gateway.forwarder.close()
        await self.service.plugins.unconfigure()
        if self.service.gateway.access_log is not None:
            self.service.gateway.access_log.close()
        if self._temporary:
            shutil.rmtree(self.config_dir, ignore_errors=True)


def start_gateway(config: str | os.PathLike[str] | Resources, plugins: Iterable[tuple[str, object] | str], *,
                  backend: RecordingBackend | None = None, load_entry_points: bool = False, reactor: Any = None,
                  poll_interval: float = 0.0, **service_options: Any) -> RunningGateway:
    """Serve a configuration on a free loopback port (and an admin port).

    ``config`` is a configuration directory, or the resources themselves as
    Python data (:data:`Resources`: YAML text, or a list of mappings and
    YAML texts), which are written to a temporary directory
    (``gw.config_dir``, removed by ``stop()``). A string is YAML text when it
    holds a line break, else a directory. ``backend`` (a
    :class:`RecordingBackend`) adds a static ``Upstream`` named ``backend``
    in namespace ``default`` that sends to it, so routes can say
    ``routeAction: {single: {upstream: {name: backend}}}``.

    ``plugins`` as for :meth:`ChainTester.from_yaml`. Raises
    :class:`twistgw.sdk.testing.ConfigError` if the configuration is invalid. Call
    ``await gw.stop()`` when done: it stops listening, closes every client
    connection (idle keep-alive ones and any in flight) and their timers,
    the idle connections of treq's default pool, the upstream pool and the
    plugins' resources, so that trial finds a clean reactor.
    ``poll_interval`` > 0 watches the directory.
    """
    from twistgw.runtime.service import GatewayService

    if reactor is None:
        from twisted.internet import reactor as default_reactor

        reactor = default_reactor
    temporary = not isinstance(config, os.PathLike) and (not isinstance(config, str) or "\n" in config)
    if temporary:
        config_dir = _write_resources(resources_yaml(config, backend))  # type: ignore[arg-type]  # not a path: checked above
    elif backend is not None:
        raise TypeError("start_gateway(backend=...) needs the resources as data, not a directory:"
                        " add backend.upstream() to the directory's resources yourself")
    else:
        config_dir = os.fspath(config)  # type: ignore[arg-type]  # a path: checked above
    host = _chosen_host(plugins, load_entry_points, "start_gateway's")
    service_options.setdefault("access_log", False)
    try:
        svc = GatewayService(config_dir, listen=(), admin=None, reactor=reactor, plugins=host,
                             poll_interval=poll_interval, **service_options)
        svc.load_initial()
    except BaseException:
        if temporary:
            shutil.rmtree(config_dir, ignore_errors=True)
        raise
    port = reactor.listenTCP(0, svc.factory, backlog=BACKLOG, interface="127.0.0.1")
    from twistgw.runtime.admin import AdminRoot, quiet_site

    admin_port = reactor.listenTCP(0, quiet_site(AdminRoot(svc)), interface="127.0.0.1")
    if poll_interval:
        svc.start_polling(poll_interval)
    return RunningGateway(svc, port, admin_port, config_dir, temporary)


def _write_resources(text: str) -> str:
    """A new temporary configuration directory holding ``text`` as ``resources.yaml``."""
    directory = tempfile.mkdtemp(prefix="twistgw-test-")
    with open(os.path.join(directory, "resources.yaml"), "w", encoding="utf-8") as f:
        f.write(text)
    return directory


def trial_tests_first(items: list[Any]) -> None:
    """Reorder pytest items so that trial ``TestCase`` tests run first.

    For a ``conftest.py`` whose session holds both styles::

        from twistgw.sdk.testing import trial_tests_first

        def pytest_collection_modifyitems(items):
            trial_tests_first(items)

    A ``twisted.trial.unittest.TestCase`` spins the reactor itself for each
    test; pytest-twisted, from its first test on, keeps the reactor running
    in a greenlet for the rest of the session, and trial cannot spin it
    from there. Trial tests first, in their collected order, then the rest.
    """
    from twisted.trial.unittest import TestCase

    def is_trial(item: Any) -> bool:
        cls = getattr(item, "cls", None)
        return isinstance(cls, type) and issubclass(cls, TestCase)

    items[:] = [i for i in items if is_trial(i)] + [i for i in items if not is_trial(i)]
