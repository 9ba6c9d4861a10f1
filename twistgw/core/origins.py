"""The origin of a request as Envoy's CSRF filter compares it: the host and
port of its ``Origin`` header (else its ``Referer``), and of its ``Host``.

Envoy parses each value as an absolute ``http``/``https`` URL (Chromium's
GURL) and compares ``host[:port]``: the host lower-cased, the port only
when it is not the scheme's default (``https://App.Example:443/x`` is
``app.example``; ``http://app.example:8080`` is ``app.example:8080``); the
scheme, userinfo, path, query and fragment never take part.
``csrf.additionalOrigins`` is matched against that same ``host[:port]``.

Where Envoy compares a value it cannot parse as it is (so
``Referer: evil.com/a.trusted.example`` ends with ``.trusted.example``),
twistgw refuses it: a value that is not an http(s) origin or URL has no
origin to allow. Refused as well, because no browser sends them and each
only serves to make two parsers disagree about the host: userinfo
(``https://trusted.example@evil.com``), a backslash, percent-escapes or
other characters no host name holds, an empty or zero port, a port with a
leading zero or over 65535, an IPv6 zone, a numeric host that is not a
dotted-quad IPv4 address (``0x7f.1``, ``127.1``), a path on an ``Origin``,
and any byte outside visible ASCII (browsers send the ASCII serialisation:
IDNA hosts as ``xn--``). A trailing dot is kept (``a.example.`` is not
``a.example``, as in Envoy), IPv6 literals are compared in their canonical
form (``[::1]``).

Pure functions, no I/O (docs/traffic.md, "csrf").
"""

from __future__ import annotations

import ipaddress
import re

__all__ = ["host_and_port", "source_origin", "target_origin"]

_DEFAULT_PORTS = {"http": "80", "https": "443"}
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
#: what a host name may hold here (lower-cased): DNS labels, and ``_`` as
#: some internal names have it
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_PORT = re.compile(r"[1-9][0-9]{0,4}")
#: visible ASCII only (no space, no control, nothing over 0x7E)
_VISIBLE = re.compile(rb"[\x21-\x7e]+")
#: WHATWG URL's "ends in a number": such a host is an IPv4 address or nothing
_NUMERIC = re.compile(r"(?:[0-9]+|0[xX][0-9a-fA-F]*)")


def host_and_port(authority: str, scheme: str) -> str | None:
    """``authority`` (``host[:port]``) canonical: the host lower-cased, an
    IPv6 literal compressed, the port dropped when it is ``scheme``'s
    default. None when it is not one (see the module's rules)."""
    if authority.startswith("["):
        end = authority.find("]")
        if end == -1 or "%" in authority:
            return None
        try:
            host = "[%s]" % ipaddress.IPv6Address(authority[1:end]).compressed
        except ValueError:
            return None
        rest = authority[end + 1:]
        if rest and rest[0] != ":":
            return None
        port = rest[1:] if rest else None
    else:
        name, colon, port_text = authority.partition(":")
        port = port_text if colon else None
        checked = _host_name(name.lower())
        if checked is None:
            return None
        host = checked
    if port is None:
        return host
    if not _PORT.fullmatch(port) or int(port) > 65535:
        return None
    return host if port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"


def _host_name(name: str) -> str | None:
    """A registered name or a dotted-quad IPv4 address, or None."""
    labels = name[:-1].split(".") if name.endswith(".") else name.split(".")
    if len(name) > 254 or not all(_LABEL.fullmatch(label) for label in labels):
        return None
    if _NUMERIC.fullmatch(labels[-1]):
        # WHATWG reads such a host as an IPv4 address in any of its odd
        # forms (0x7f.1, 127.1, 017.0.0.1): only the plain one is accepted
        if name.endswith("."):
            return None
        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            return None
    return name


def _url_origin(value: bytes, whole_url: bool) -> str | None:
    if not _VISIBLE.fullmatch(value):
        return None
    text = value.decode("ascii")
    scheme, sep, rest = text.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):
        return None
    scheme = scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        return None  # null, data:, file:, about:, extension schemes: no http(s) origin
    end = len(rest)
    for stop in "/?#":
        at = rest.find(stop)
        if at != -1 and at < end:
            end = at
    if end != len(rest) and not whole_url:
        return None  # an Origin is scheme://host[:port], nothing after (RFC 6454 §7)
    authority = rest[:end]
    if not authority or "@" in authority or "\\" in authority:
        return None
    return host_and_port(authority, scheme)


def source_origin(origins: list[bytes] | None, referers: list[bytes] | None) -> str | None:
    """The request's source origin as ``host[:port]``: its ``Origin``, or,
    when it has none (or an empty one, as Envoy reads it), its ``Referer``.
    None when there is neither, or the value is not an http(s) origin (or
    URL, for ``Referer``), or the header is repeated."""
    if origins and (len(origins) > 1 or origins[0]):
        return _url_origin(origins[0], False) if len(origins) == 1 else None
    if referers and (len(referers) > 1 or referers[0]):
        return _url_origin(referers[0], True) if len(referers) == 1 else None
    return None


def target_origin(hosts: list[bytes] | None, scheme: str) -> str | None:
    """The origin the request goes to: its ``Host`` as ``host[:port]`` (the
    port dropped when it is ``scheme``'s default), None without a valid one."""
    if not hosts or len(hosts) != 1 or not _VISIBLE.fullmatch(hosts[0]):
        return None
    return host_and_port(hosts[0].decode("ascii"), scheme if scheme in _DEFAULT_PORTS else "http")
