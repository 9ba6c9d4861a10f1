"""Name, address and file-name rules shared by the configuration readers (pure)."""

from __future__ import annotations

import ipaddress
import re

from twistgw.api.options import loopback_problem

#: RFC 3986 ``unreserved`` (lower-cased): what a reg-name or IPv4 address may
#: hold here. Percent-encoding and ``sub-delims`` (``!$&'()*+,;=``) are valid
#: in a reg-name but in no DNS name: they only serve to build ambiguities.
_REG_NAME = re.compile(r"[a-z0-9._~-]+")
_PORT = re.compile(r"[0-9]{0,5}")


#: Ask a backend to run another method than the one authorization judged
#: (never forwarded: see core/headers.py).
METHOD_OVERRIDE = frozenset({b"x-http-method-override", b"x-method-override", b"x-http-method"})

#: Forwarding facts only the gateway may state (a client's are lies or noise;
#: never forwarded, and never matched by a route).
FORWARDING = frozenset({
    b"forwarded", b"x-real-ip", b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host",
    b"x-forwarded-port", b"x-forwarded-prefix", b"x-forwarded-server", b"x-forwarded-ssl",
    b"x-forwarded-scheme",
})


def host_without_port(host: str) -> str:
    """A configured domain, lower-cased, without its port (an IPv6 literal
    keeps its brackets) and without a trailing dot."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end != -1 else host
    colon = host.rfind(":")
    if colon != -1 and host.count(":") == 1:
        host = host[:colon]
    return host.rstrip(".")


def parse_host(value: bytes) -> str | None:
    """The host of a ``Host`` value or a target's authority (RFC 3986
    ``uri-host [ ":" port ]``), lower-cased, without its port and without
    one trailing dot (``Api.Example.com.:80`` → ``api.example.com``); an
    IPv6 literal keeps its brackets. ``None`` when the value is not one:
    userinfo (``u@h``), lists (``a,b``), paths, quotes, backslashes, spaces,
    percent-escapes, sub-delims, empty labels, a port that is not 0-65535,
    a malformed IPv6 literal, non-ASCII, and the empty value (no host to
    route by: RFC 9110 §4.2.1 has recipients reject an empty http host)."""
    try:
        text = value.decode("ascii").lower()
    except UnicodeDecodeError:
        return None
    if text.startswith("["):
        end = text.find("]")
        if end == -1 or "%" in text:  # no zone identifier: RFC 9110 does not allow one
            return None
        host, rest = text[: end + 1], text[end + 1:]
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return None
        if rest and (rest[0] != ":" or not _valid_port(rest[1:])):
            return None
        return host
    host, colon, port = text.rpartition(":")
    if not colon:
        host = port
    elif not _valid_port(port):
        return None
    if host.endswith("."):
        host = host[:-1]
    if not _REG_NAME.fullmatch(host) or ".." in host or host.startswith(".") or host.endswith("."):
        return None  # an empty label (``a..b``, ``.a``, ``a..``): no DNS name has one
    return host


def _valid_port(port: str) -> bool:
    return _PORT.fullmatch(port) is not None and (not port or int(port) <= 65535)


#: Server endpoint types whose Twisted parser takes ``backlog=``.
_BACKLOG_TYPES = ("tcp", "tcp6", "ssl", "tls", "unix")
_HAS_BACKLOG = re.compile(r"(?<!\\):backlog=")


def with_backlog(description: str, backlog: int) -> str:
    """A server endpoint string with ``backlog=`` added when its type takes
    one and it does not set it already (an explicit ``backlog=`` wins):
    ``tcp:8080`` → ``tcp:8080:backlog=1024``. Other types are unchanged."""
    kind = description.split(":", 1)[0]
    if kind not in _BACKLOG_TYPES or _HAS_BACKLOG.search(description):
        return description
    return f"{description}:backlog={backlog}"


def is_loopback_endpoint(description: str) -> bool:
    """Whether a Twisted server endpoint string listens on loopback only
    (``tcp:PORT:interface=127.0.0.1`` or ``::1``)."""
    return loopback_problem(description, allow_unix=False) is None


def is_yaml_file(name: str) -> bool:
    """Whether a directory entry is read as configuration: ``*.yaml`` or
    ``*.yml``, not hidden (editors' and ConfigMaps' ``.name`` files)."""
    return name.endswith((".yaml", ".yml")) and not name.startswith(".")
