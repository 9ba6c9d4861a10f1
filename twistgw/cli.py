"""The ``twistgw`` command: check, explain, token, keys, create secret, plugins.

Exit codes (every subcommand): 0 success; 1 the thing checked is invalid or
the request would be refused (``explain``); 2 usage error (bad flags, missing
files).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, Sequence

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


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
        config = load_directory(args.directory, keep_going=True)
        for note in config.skipped:
            print(f"note: {note}", file=sys.stderr)
        snapshot = build_snapshot(config, host)
    except ConfigError as exc:
        print(f"{args.directory}: INVALID, {len(exc.issues)} problem(s):")
        for issue in exc.issues:
            print(f"  {issue}")
        return EXIT_INVALID
    except PluginError as exc:
        _err(str(exc))
        return EXIT_INVALID
    vs = snapshot.config.virtual_services
    print(f"{args.directory}: OK: {len(vs)} virtual service(s), {len(snapshot.routes)} route(s),"
          f" {len(snapshot.config.upstreams)} upstream(s)")
    if args.verbose:
        for v in vs:
            print(f"  VirtualService {v.key} domains={list(v.domains)}")
            for route in v.routes:
                rt = snapshot.runtime(v, route)
                chain = " -> ".join(s.label for s in rt.chain) or "(no auth)"
                print(f"    {route.name}: {_describe_matchers(route)} chain: {chain}")
    return EXIT_OK


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
    from twistgw.api.types import Allow, Deny
    from twistgw.config.loader import ConfigError
    from twistgw.testing import ChainTester

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
    try:
        tester = ChainTester.from_directory(args.directory, reactor=reactor)
    except ConfigError as exc:
        print(f"The configuration in {args.directory} is invalid:")
        for issue in exc.issues:
            print(f"  {issue}")
        return EXIT_INVALID
    result = await tester.request(args.method, args.url, headers)
    print(f"Request: {args.method} {args.url}")
    if result.ctx is None:
        print(f"Routing: {result.deny.reason if result.deny else 'n/a'}")
        print(f"Result: {result.status} (no plugin ran)")
        return EXIT_INVALID
    ctx, rt = result.ctx, result.runtime
    print(f"Normalised path: {ctx.path}")
    print(f"Virtual service: {ctx.virtual_service} (host {ctx.host!r})")
    print(f"Route: {ctx.route} ({_describe_matchers(rt.route)})")
    print("Plugin chain: " + (" -> ".join(s.label for s in rt.chain) or "(none)"))
    for plugin, phase, decision in result.trace:
        if isinstance(decision, Deny):
            verdict = f"DENY {decision.status}"
            if decision.body:
                verdict += f" {decision.body.decode('utf-8', 'replace')!r}"
            reason = decision.reason
        elif isinstance(decision, Allow):
            verdict, reason = "allow", decision.reason
        else:
            verdict, reason = "pass", ""
        print(f"  {plugin}.{phase}: {verdict}" + (f" — {reason}" if reason else ""))
    if result.deny is not None:
        print(f"Result: {result.status}, refused by {result.decided_by or 'routing'}")
        return EXIT_INVALID
    if rt.direct is not None:
        print(f"Result: direct response {rt.direct.status}")
    else:
        ups = rt.balancer.upstream if rt.balancer else None
        where = ", ".join(f"{e.host}:{e.port}" for e in ups.endpoints) if ups else "?"
        print(f"Result: forwarded to upstream {ups.namespace}/{ups.name} ({where or 'no endpoints: 503'})"
              f" as {ctx.path}{'?' + ctx.query.decode('latin-1') if ctx.query else ''}")
    return EXIT_OK


# ---------------------------------------------------------------------------
# token / keys / create secret
# ---------------------------------------------------------------------------

_TTL = re.compile(r"^(\d+)([smhd]?)$")


def _parse_ttl(text: str) -> int:
    m = _TTL.match(text.strip())
    if not m:
        raise ValueError(f"--ttl must look like 3600, 90s, 15m, 1h or 7d; got {text!r}")
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def _claim_value(raw: str) -> Any:
    """``k=v``: v is JSON when it parses as JSON (numbers, true, lists), else a string."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def cmd_token(args: argparse.Namespace) -> int:
    from twistgw_jwt.tools import mint_token

    try:
        with open(args.key, "rb") as f:
            pem = f.read()
        ttl = _parse_ttl(args.ttl)
        claims = {}
        for item in args.claim or []:
            if "=" not in item:
                raise ValueError(f"--claim {item!r}: expected name=value")
            k, v = item.split("=", 1)
            claims[k] = _claim_value(v)
        if args.aud:
            claims["aud"] = args.aud
        token = mint_token(pem, args.iss, args.sub, claims, ttl, kid=args.kid, algorithm=args.alg)
    except (OSError, ValueError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    print(token)
    return EXIT_OK


def cmd_keys(args: argparse.Namespace) -> int:
    from twistgw_jwt.tools import jwks_from_public_key

    try:
        with open(args.public, "rb") as f:
            pem = f.read()
        doc = jwks_from_public_key(pem, kid=args.kid)
    except (OSError, ValueError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    print(json.dumps(doc, indent=2))
    return EXIT_OK


def cmd_create_secret(args: argparse.Namespace) -> int:
    from twistgw_ldap.secret import secret_yaml

    args.namespace_defaulted = args.namespace is None
    if args.namespace is None:
        args.namespace = "default"
    try:
        text = secret_yaml(args.name, args.namespace, args.username, args.password)
    except ValueError as exc:
        _err(str(exc))
        return EXIT_USAGE
    if args.output:
        try:
            with open(args.output, "w") as f:
                f.write(text)
        except OSError as exc:
            _err(f"cannot write {args.output}: {exc.strerror}")
            return EXIT_USAGE
    else:
        sys.stdout.write(text)
    # stderr, so the YAML on stdout stays clean: where the Secret went, and how to use it
    defaulted = " (the default; pass --namespace to change it)" if args.namespace_defaulted else ""
    print(f"wrote Secret {args.name} in namespace {args.namespace}{defaulted} to"
          f" {args.output or 'stdout'}; reference it from the AuthConfig as"
          f" credentialsSecretRef: {{name: {args.name}, namespace: {args.namespace}}}", file=sys.stderr)
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
        print(f"{name:12} order={info.order:<5} {info.description}")
    return EXIT_OK


# ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="twistgw",
        description="Tools for the twistgw gateway. To run the gateway itself: twist twistgw --config DIR",
        epilog="Exit codes: 0 ok; 1 invalid config or refused request; 2 usage error.",
    )
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
                       " run in which order, and each one's decision and reason. Nothing is forwarded;"
                       " plugins that need a directory or key set do contact it.")
    e.add_argument("directory")
    e.add_argument("method", help="e.g. GET")
    e.add_argument("url", help="absolute URL; its host is the Host header, e.g. http://api.example.com/pets")
    e.add_argument("-H", "--header", action="append", help="request header 'Name: value' (repeatable)")
    e.set_defaults(func=cmd_explain)

    t = sub.add_parser("token", help="mint a signed JWT for local testing")
    t.add_argument("--key", required=True, help="private key PEM (RSA, EC or Ed25519)")
    t.add_argument("--iss", required=True, help="issuer (must equal the provider's issuer)")
    t.add_argument("--sub", required=True, help="subject")
    t.add_argument("--aud", help="audience")
    t.add_argument("--claim", action="append", help="extra claim name=value; JSON values allowed (repeatable)")
    t.add_argument("--ttl", default="1h", help="lifetime: 3600, 90s, 15m, 1h, 7d (default 1h)")
    t.add_argument("--kid", help="key id to put in the header")
    t.add_argument("--alg", help="algorithm (default: from the key type, e.g. RS256, ES256, EdDSA)")
    t.set_defaults(func=cmd_token)

    k = sub.add_parser("keys", help="turn a public key PEM into a JWKS document")
    k.add_argument("--public", required=True, help="public key PEM")
    k.add_argument("--kid", help="key id (default: the key's RFC 7638 thumbprint)")
    k.set_defaults(func=cmd_keys)

    cr = sub.add_parser("create", help="create resources")
    crs = cr.add_subparsers(dest="what", metavar="WHAT")
    crs.required = True
    s = crs.add_parser("secret", help="create a Secret")
    ss = s.add_subparsers(dest="secret_type", metavar="TYPE")
    ss.required = True
    a = ss.add_parser("authcredentials", help="LDAP service-account credentials for an AuthConfig",
                      description="Write a v1 Secret of type extauth.vendor.io/accountcredentials"
                      " (data: username, password) for groupLookupSettings.credentialsSecretRef.")
    a.add_argument("--name", required=True)
    a.add_argument("--namespace", default=None,
                   help="the Secret's namespace (default: default; glooctl's is gloo-system)")
    a.add_argument("--username", required=True, help="the service account's DN")
    a.add_argument("--password", required=True)
    a.add_argument("-o", "--output", help="write to this file instead of stdout")
    a.set_defaults(func=cmd_create_secret)

    pl = sub.add_parser("plugins", help="list installed plugins and their default order")
    pl.set_defaults(func=cmd_plugins)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
