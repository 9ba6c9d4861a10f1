"""The ``twistgw`` command: check, explain, plugins, and the commands the
installed plugins add (``twistgw_add_commands``: the shipped ones add
``token``, ``keys`` and ``create secret authcredentials``).

Exit codes (every subcommand): 0 success; 1 the thing checked is invalid or
the request would be refused (``explain``); 2 usage error (bad flags, missing
files).
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from typing import Any, Sequence

from twistgw.api.commands import EXIT_INVALID, EXIT_OK, EXIT_USAGE, Commands
from twistgw.api.types import ConfigWarning


def _err(message: str) -> None:
    sys.stderr.write(f"twistgw: {message}\n")


# ---------------------------------------------------------------------------
# check
# ---------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    from twistgw.config.loader import ConfigError, load_directory
    from twistgw.core.plugins import PluginError, PluginHost
    from twistgw.core.snapshot import build_snapshot

    try:
        host = PluginHost.create()
        config = load_directory(args.directory, keep_going=True, merges=host.option_merges())
        for note in config.skipped:
            print(f"note: {note}", file=sys.stderr)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConfigWarning)
            snapshot = build_snapshot(config, host)
        for warning in _config_warnings(caught):
            print(f"warning: {warning}")
    except ConfigError as exc:
        print(f"{args.directory}: INVALID, {len(exc.issues)} problem(s):")
        for issue in exc.issues:
            print(f"  {issue}")
        return EXIT_INVALID
    except PluginError as exc:
        _err(str(exc))
        return EXIT_INVALID
    vs = snapshot.config.virtual_services
    from twistgw.core.gateways import gateway_notes

    for note in gateway_notes(snapshot.config):
        print(f"note: {note}", file=sys.stderr)
    for v in vs:
        if not v.routes:
            print(f"note: VirtualService {v.key} has no routes: it serves nothing (Gloo accepts such"
                  " partial resources)", file=sys.stderr)
    print(f"{args.directory}: OK: {len(vs)} virtual service(s), {len(snapshot.routes)} route(s),"
          f" {len(snapshot.config.upstreams)} upstream(s)")
    if args.verbose:
        for key, view in sorted(snapshot.gateways.items()):
            gw = view.gateway
            print(f"  Gateway {key} listens on {gw.bind_address} port {gw.bind_port}{' (TLS)' if gw.ssl else ''};"
                  f" serves"
                  f" {', '.join(v.key for v in view.virtual_services) or '(no virtual service)'}")
        for v in vs:
            print(f"  VirtualService {v.key} domains={list(v.domains)}")
            for route in v.routes:
                rt = snapshot.runtime(v, route)
                chain = " -> ".join(s.label for s in rt.chain) or "(no auth)"
                print(f"    {route.name}: {_describe_matchers(route)} chain: {chain}")
    return EXIT_OK


def _config_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    """The texts of the ConfigWarnings plugins gave (``sdk.ConfigWarning``),
    each once; other warnings are shown as Python shows them."""
    texts: list[str] = []
    for w in caught:
        if issubclass(w.category, ConfigWarning):
            if str(w.message) not in texts:
                texts.append(str(w.message))
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return texts


def _describe_matchers(route: Any) -> str:
    return " or ".join(m.describe() for m in route.matchers)


# ---------------------------------------------------------------------------
# explain
# ---------------------------------------------------------------------------


def cmd_explain(args: argparse.Namespace) -> int:
    from twisted.internet import task

    holder: dict[str, int] = {}

    async def main(reactor: Any) -> None:
        holder["rc"] = await _explain(args, reactor)

    def run(reactor: Any) -> Any:
        from twisted.internet.defer import Deferred

        return Deferred.fromCoroutine(main(reactor))

    try:
        task.react(run)
    except SystemExit as exc:
        if exc.code not in (0, None):
            return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    return holder.get("rc", EXIT_USAGE)


async def _explain(args: argparse.Namespace, reactor: Any) -> int:
    from twistgw.api.headers import canonical_name, is_token
    from twistgw.config.loader import ConfigError
    from twistgw._testing import ChainTester

    headers = []
    for h in args.header or []:
        if ":" not in h:
            _err(f"-H {h!r}: expected 'Name: value'")
            return EXIT_USAGE
        name, value = h.split(":", 1)
        headers.append((name.strip(), value.strip()))
    if not re.match(r"^https?://", args.url):
        _err(f"URL must be absolute (http://host/path), got {args.url!r}")
        return EXIT_USAGE
    protocol = "HTTP/2" if args.http2 else "HTTP/1.1"
    if args.http2:
        converted = _as_http2(args, headers)
        if converted is None:
            return EXIT_INVALID
        headers = converted
    try:
        tester = ChainTester.from_directory(args.directory, [], load_entry_points=True, reactor=reactor,
                                            dry_run=not args.live, may_listen=False)
    except ConfigError as exc:
        print(f"The configuration in {args.directory} is invalid:")
        for issue in exc.issues:
            print(f"  {issue}")
        return EXIT_INVALID
    result = await tester.request(args.method, args.url, headers, protocol=protocol)
    print(f"Request: {args.method} {args.url}"
          + ("" if args.live else "  (dry run: nothing contacted; --live asks directories and key sets)"))
    print(f"Protocol: {protocol}" + (" (h2c with prior knowledge, or ALPN h2 on TLS)" if args.http2 else ""))
    if result.ctx is None:
        print(f"Routing: {result.deny.reason if result.deny else 'n/a'}")
        print(f"Result: {result.status} (no plugin ran)")
        _print_grpc(result.plan, headers)
        return EXIT_INVALID
    ctx, rt = result.ctx, result.runtime
    assert rt is not None  # a request context comes with its route
    print(f"Normalised path: {ctx.path}")
    print(f"Virtual service: {ctx.virtual_service} (host {ctx.host!r})")
    print(f"Route: {ctx.route} ({_describe_matchers(rt.route)})")
    print("Plugin chain: " + (" -> ".join(s.label for s in rt.chain) or "(none)"))
    owned = set(tester.snapshot.owned_headers)
    removed = sorted({canonical_name(name).decode("latin-1") for name, _ in headers
                      if is_token(name) and canonical_name(name) in owned})
    if removed:
        print("Removed from the request (set only by plugins): " + ", ".join(removed))
    unchecked = _print_trace(result.trace)
    if result.deny is not None:
        print(f"Result: {result.status}, refused by {result.decided_by or 'routing'}"
              + (f" ({result.deny.reason})" if result.decided_by is None and result.deny.reason else ""))
        _print_grpc(result.plan, headers)
        return EXIT_INVALID
    if unchecked:
        print(f"Unless {' or '.join(dict.fromkeys(unchecked))} refuses it (not checked in a dry run):")
    _print_plan(result)
    _print_grpc(result.plan, headers)
    return EXIT_OK


def _as_http2(args: argparse.Namespace, headers: list[tuple[str, str]]) -> list[tuple[str, str]] | None:
    """The request's headers as the gateway reads them from an HTTP/2
    client, or None after printing why such a request is refused."""
    refused = _http2_refusal(headers)
    if refused is not None:
        print(f"Request: {args.method} {args.url} over HTTP/2")
        print(f"Result: the connection is refused (GOAWAY PROTOCOL_ERROR): {refused}")
        return None
    try:
        return _http2_headers(args.method, args.url, headers)
    except ValueError as exc:
        print(f"Request: {args.method} {args.url} over HTTP/2")
        print(f"Result: {exc}")
        return None


def _http2_refusal(headers: list[tuple[str, str]]) -> str | None:
    """Why an HTTP/2 request with these fields is malformed (RFC 9113
    §8.2.2: connection-specific fields; ``te`` other than ``trailers``)."""
    from twistgw.engine.http2.headers import CONNECTION_SPECIFIC

    for name, value in headers:
        lname = name.lower()
        if lname == "te" and value.strip().lower() == "trailers":
            continue
        if lname.encode("latin-1") in CONNECTION_SPECIFIC:
            return f"{name} is a connection-specific header field, malformed in HTTP/2 (RFC 9113 §8.2.2)"
    return None


def _http2_headers(method: str, url: str, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers the gateway makes of an HTTP/2 request (as the engine
    does: ``:authority`` is Host, ``cookie`` crumbs joined with ``; ``)."""
    from urllib.parse import urlsplit

    from twistgw.engine.http2.headers import Malformed, TooLarge, request_fields

    cookies = [v for n, v in headers if n.lower() == "cookie"]
    parts = urlsplit(url)
    path = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    fields = [(b":method", method.encode("latin-1")), (b":scheme", (parts.scheme or "http").encode("latin-1")),
              (b":authority", parts.netloc.encode("latin-1")), (b":path", path.encode("latin-1"))]
    fields += [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in headers
               if n.lower() not in ("cookie", "host")]
    if cookies:
        fields.append((b"cookie", "; ".join(cookies).encode("latin-1")))
    try:
        converted = request_fields(fields).headers
    except TooLarge as exc:
        raise ValueError(f"{exc.status}: the request head is over the gateway's limits") from None
    except Malformed as exc:
        raise ValueError(f"the stream is refused (RST_STREAM PROTOCOL_ERROR): {exc}") from None
    return [(name.decode("latin-1"), value.decode("latin-1"))
            for name, values in converted.getAllRawHeaders() for value in values]


def _print_grpc(plan: Any, headers: list[tuple[str, str]]) -> None:
    """A gRPC request (its content-type) refused or answered by the gateway
    itself: the answer in gRPC's form (:func:`twistgw.core.grpc.local_reply`)."""
    from twistgw.core.grpc import grpc_kind, local_reply
    from twistgw.core.plan import LocalResponse

    content_type = next((v for n, v in headers if n.lower() == "content-type"), None)
    kind = grpc_kind(content_type.encode("latin-1") if content_type is not None else None)
    if kind is None or not isinstance(plan, LocalResponse):
        return
    answer = local_reply(plan, content_type.encode("latin-1") if content_type else None)
    fields = dict(answer.headers)
    status = int(fields[b"grpc-status"])
    print(f"gRPC answer ({kind.decode()}): HTTP 200, grpc-status {status} ({_GRPC_NAMES.get(status, '?')})"
          + (f", grpc-message {fields[b'grpc-message'].decode('latin-1')!r}" if b"grpc-message" in fields else "")
          + ", trailers-only")


_GRPC_NAMES = {0: "OK", 2: "UNKNOWN", 7: "PERMISSION_DENIED", 12: "UNIMPLEMENTED", 13: "INTERNAL",
               14: "UNAVAILABLE", 16: "UNAUTHENTICATED"}


def _print_trace(trace: Any) -> list[str]:
    """One line per plugin step; the plugins that did not check (dry run)."""
    from twistgw.api.types import Allow, Deny, NotChecked

    unchecked: list[str] = []
    for plugin, phase, decision in trace:
        if isinstance(decision, Deny):
            verdict = f"DENY {decision.status}"
            if decision.body:
                verdict += f" {decision.body.decode('utf-8', 'replace')!r}"
            reason = decision.reason
        elif isinstance(decision, Allow):
            verdict, reason = "allow", decision.reason
        elif isinstance(decision, NotChecked):
            verdict, reason = "NOT CHECKED", decision.reason
            unchecked.append(plugin)
        else:
            verdict, reason = "pass", ""
        print(f"  {plugin}.{phase}: {verdict}" + (f" — {reason}" if reason else ""))
    return unchecked


def _print_plan(result: Any) -> None:
    from twistgw.core.policyplan import subset_text
    from twistgw.core.plan import Forward

    plan = result.plan
    if not isinstance(plan, Forward):
        assert plan is not None
        what = "direct response" if plan.reason in ("", "direct response") else plan.reason
        print(f"Result: {what} {result.status}")
        for name, value in plan.headers:
            print(f"  {name.decode('latin-1')}: {value.decode('latin-1')}")
        return
    ups = plan.upstream
    chosen = f", subset {subset_text(ups.subset)}" if ups.subset else ""
    print(f"Result: forwarded to upstream {ups.namespace}/{ups.name}{chosen}"
          f" ({plan.endpoint.host}:{plan.endpoint.port}) as {plan.target.decode('latin-1')}")
    print("Headers sent upstream:")
    for name, values in plan.headers.getAllRawHeaders():
        for value in values:
            print(f"  {name.decode('latin-1')}: {_shown(name, value)}")
    edit = plan.response_edit
    if edit is not None and edit.adds:
        print("Headers added to the response:")
        for name, value in edit.adds:
            print(f"  {name.decode('latin-1')}: {_shown(name, value)}")
    policy = result.runtime.policy if result.runtime is not None else None
    if policy is not None and policy.shadow is not None:
        up = policy.shadow.balancer.upstream
        copied = "this request included" if plan.mirror is not None else "not this request"
        print(f"Shadowed: {policy.shadow.percentage:g}% of requests copied to upstream {up.namespace}/{up.name}"
              f" with the Host suffixed -shadow, the answer discarded ({copied})")


#: Headers whose values ``explain`` does not print (credentials).
_SECRET_HEADERS = frozenset({b"authorization", b"proxy-authorization", b"cookie", b"x-api-key", b"set-cookie"})


def _shown(name: bytes, value: bytes) -> str:
    text = value.decode("latin-1")
    if name.lower() not in _SECRET_HEADERS:
        return text
    scheme, _, rest = text.partition(" ")
    return f"{scheme} (redacted)" if rest else "(redacted)"


def cmd_echo(args: argparse.Namespace) -> int:
    from twisted.internet import task
    from twisted.internet.defer import Deferred

    from twistgw.runtime.devecho import is_loopback_endpoint, start_echo
    from twistgw.runtime.listeners import EXIT_CANNOT_LISTEN, endpoint_problem, listen_problem

    problem = endpoint_problem(args.listen)
    if problem is not None:
        _err(f"--listen {args.listen!r} is not a valid endpoint: {problem}")
        return EXIT_USAGE

    if not is_loopback_endpoint(args.listen):
        _err(f"--listen must be a loopback endpoint such as tcp:9000:interface=127.0.0.1, got {args.listen!r}")
        return EXIT_USAGE

    async def run(reactor: Any) -> None:
        try:
            p = await start_echo(reactor, args.listen)
        except Exception as exc:
            _err(f"cannot listen on --listen {args.listen}: {listen_problem(exc)}")
            raise SystemExit(EXIT_CANNOT_LISTEN) from None
        print(f"twistgw echo: answering every request on {p.getHost().host}:{p.getHost().port} (Ctrl-C stops)",
              file=sys.stderr, flush=True)
        await Deferred()  # serve until interrupted

    try:
        task.react(run)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else EXIT_OK
    return EXIT_OK


def cmd_plugins(args: argparse.Namespace) -> int:
    from twistgw.core.plugins import PluginError, PluginHost

    try:
        host = PluginHost.create()
    except PluginError as exc:
        _err(str(exc))
        return EXIT_INVALID
    for name in host.default_order():
        info = host.infos[name]
        print(f"{name:16} order={info.order:<5} {info.description} [reads {host.reads(name)}]")
    return EXIT_OK


# ---------------------------------------------------------------------------


class _VersionAction(argparse.Action):
    """``--version``: twistgw's version and :func:`twistgw.compiled.summary`
    (computed when asked: it imports the hot modules)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from twistgw import __version__, compiled

        print(f"twistgw {__version__}: {compiled.summary()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="twistgw",
        description="Tools for the twistgw gateway. To run the gateway itself: twist twistgw --config DIR",
        epilog="Exit codes: 0 ok; 1 invalid config or refused request; 2 usage error.",
    )
    p.add_argument("--version", action=_VersionAction,
                   help="print the version and which hot modules run compiled by mypyc, then exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    c = sub.add_parser("check", help="validate a configuration directory",
                       description="Load and compile a configuration directory exactly as the gateway"
                       " would; print every problem with file, document, line, resource and field.")
    c.add_argument("directory")
    c.add_argument("-v", "--verbose", action="store_true", help="list virtual services, routes and chains")
    c.set_defaults(func=cmd_check)

    e = sub.add_parser("explain", help="dry-run a request against a configuration",
                       description="Show which virtual service and route a request matches, which plugins"
                       " run in which order, and each one's decision and reason. A dry run: nothing is"
                       " forwarded, nothing listens, and no directory or key-set server is contacted;"
                       " plugins that would need one say what they would do (NOT CHECKED).")
    e.add_argument("directory")
    e.add_argument("method", help="e.g. GET")
    e.add_argument("url", help="absolute URL; its host is the Host header, e.g. http://api.example.com/pets")
    e.add_argument("-H", "--header", action="append", help="request header 'Name: value' (repeatable)")
    e.add_argument("--http2", action="store_true",
                   help="as an HTTP/2 client sends it (h2c or ALPN h2): :authority as Host, cookies joined,"
                        " connection-specific headers refused (RFC 9113 §8.2)")
    e.add_argument("--live", action="store_true",
                   help="let plugins contact directories and key-set servers to decide (still forwards"
                        " nothing and listens on nothing)")
    e.set_defaults(func=cmd_explain)

    ec = sub.add_parser("echo", help="run the development echo upstream (a backend for trying things)",
                        description="A development HTTP upstream on loopback that answers every method"
                        " on every path with 200 and JSON describing the request it received (method,"
                        " path, headers, body size). The demo's backend; never for production.")
    ec.add_argument("--listen", default="tcp:9000:interface=127.0.0.1",
                    help="loopback endpoint (default tcp:9000:interface=127.0.0.1)")
    ec.set_defaults(func=cmd_echo)

    pl = sub.add_parser("plugins", help="list installed plugins, their default order and what each reads",
                        description="Each installed plugin in the default chain order, with its description and"
                        " the options keys and Settings sections it reads (its PluginInfo).")
    pl.set_defaults(func=cmd_plugins)
    _add_plugin_commands(Commands(sub))
    return p


def _add_plugin_commands(commands: Commands) -> None:
    """Each installed plugin's sub-commands (``twistgw_add_commands``),
    in the plugins' default chain order."""
    from twistgw.core.plugins import PluginError, PluginHost

    try:
        host = PluginHost.create()
    except PluginError as exc:
        _err(f"{exc}; the plugins' commands are not available")
        return
    for name in host.default_order():
        fn = host.impl(name, "twistgw_add_commands")
        if fn is not None:
            fn(commands=commands)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
