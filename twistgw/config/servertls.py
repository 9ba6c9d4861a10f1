"""A VirtualService's ``sslConfig`` (Gloo's ``SslConfig``): the certificate
TLS listeners present for it, chosen by the server name a client asks for
(SNI), and the client certificates they verify. See docs/tls.md.

Read into a :class:`ServerSslSpec` (references unresolved), resolved
against the Secrets and files into a :class:`ServerTls`; the virtual
services are then grouped as Gloo groups them (:func:`tls_chains`): those
whose ``sslConfig`` differs only by ``sniDomains`` share one certificate
(Envoy's filter chain), whose server names are all their ``sniDomains``
(none: every name). The Secret and file reading is the Upstreams'
(:mod:`twistgw.config.upstreamtls`).
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Iterable, Mapping

import attrs

from twistgw.api.fields import FieldReader, Path
from twistgw.api.types import SecretInfo
from twistgw.config.upstreamtls import read_names, read_parameters, read_pem_source, read_pems

__all__ = ["ServerSslSpec", "ServerTls", "TlsChainSpec", "read_server_ssl_config", "resolve_server_tls",
           "server_name_problem", "tls_chains"]

_NOT_SUPPORTED = {
    "sds": "secret discovery (SDS) is not supported: use secretRef or sslFiles (a reload picks up a changed"
           " Secret or file)",
    "transportSocketConnectTimeout": "the handshake is bounded by --head-timeout",
    "ocspStaplePolicy": "OCSP stapling is not supported",
}
_FIELDS = {"secretRef", "sslFiles", "sniDomains", "verifySubjectAltName", "parameters", "alpnProtocols",
           "oneWayTls", "disableTlsSessionResumption"}
_NAME = re.compile(r"(\*\.)?([a-z0-9_-]+\.)*[a-z0-9_-]+")


@attrs.frozen
class ServerSslSpec:
    """``sslConfig`` as written: the Secret or the files, not yet read."""

    secret: tuple[str, str] | None
    #: (tlsCert, tlsKey, rootCa) as written ("" when absent)
    files: tuple[str, str, str] | None
    sni_domains: tuple[str, ...] = ()
    verify_names: tuple[str, ...] = ()
    min_version: str | None = None
    max_version: str | None = None
    ciphers: tuple[str, ...] = ()
    one_way: bool = False


@attrs.frozen(cache_hash=True)
class ServerTls:
    """A virtual service's certificate and client verification, resolved
    (PEM bytes). Equal values present the same certificate the same way."""

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes | None = None
    verify_names: tuple[str, ...] = ()
    min_version: str | None = None
    max_version: str | None = None
    ciphers: tuple[str, ...] = ()
    one_way: bool = False
    #: ``sniDomains``; () matches every server name
    sni_domains: tuple[str, ...] = ()
    #: the ``sslFiles`` read (absolute paths): a change to one reloads
    files: tuple[str, ...] = attrs.field(default=(), eq=False)

    def context(self) -> Any:
        """Its OpenSSL context (``OpenSSL.SSL.Context``; Any: the
        configuration layer imports no TLS library at module level)."""
        from twistgw.servertls import server_context

        return server_context(self.cert_pem, self.key_pem, ca_pem=self.ca_pem, one_way=self.one_way,
                              verify_names=self.verify_names, min_version=self.min_version,
                              max_version=self.max_version, ciphers=self.ciphers)


def server_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an ``sniDomains`` entry, or None."""
    if name == "*":
        return "'*' is not a server name: leave sniDomains out to match every server name"
    if not _NAME.fullmatch(name):
        return f"{name!r} is not a host name or a '*.' wildcard (no port, no other '*')"
    return None


def read_server_ssl_config(r: FieldReader, value: Any, path: Path, ns: str) -> ServerSslSpec:
    """A VirtualService's ``spec.sslConfig``."""
    m = dict(r.mapping(value, path))
    for key, why in _NOT_SUPPORTED.items():
        if m.pop(key, None) is not None:
            r.issue(path + (key,), f"is not supported by twistgw: {why}")
    m = r.mapping(m, path, _FIELDS)
    secret, files = read_pem_source(r, m, path, ns, "OCSP stapling is not supported")
    if secret is None and files is None:
        raise r.fail(path, "needs secretRef (a kubernetes.io/tls Secret) or sslFiles: the certificate to present")
    if files is not None and not files[0]:
        raise r.fail(path + ("sslFiles",), "a virtual service's certificate needs tlsCert and tlsKey")
    sni: list[str] = []
    for i, name in enumerate(read_names(r, m.get("sniDomains"), path + ("sniDomains",))):
        name = name.strip().lower().rstrip(".")
        problem = server_name_problem(name)
        if problem is not None:
            r.issue(path + ("sniDomains", i), problem)
        elif name not in sni:
            sni.append(name)
    names = read_names(r, m.get("verifySubjectAltName"), path + ("verifySubjectAltName",))
    lo = hi = None
    ciphers: tuple[str, ...] = ()
    if m.get("parameters") is not None:
        lo, hi, ciphers = read_parameters(r, m["parameters"], path + ("parameters",))
    _alpn(r, m.get("alpnProtocols"), path + ("alpnProtocols",))
    one_way = r.boolean(m["oneWayTls"], path + ("oneWayTls",)) if m.get("oneWayTls") is not None else False
    if m.get("disableTlsSessionResumption") is not None and \
            not r.boolean(m["disableTlsSessionResumption"], path + ("disableTlsSessionResumption",)):
        r.issue(path + ("disableTlsSessionResumption",), "twistgw never resumes TLS sessions: set it to true"
                " or leave it out")
    return ServerSslSpec(secret, files, tuple(sni), names, lo, hi, ciphers, one_way)


def _alpn(r: FieldReader, value: Any, path: Path) -> None:
    """``alpnProtocols``: twistgw serves HTTP/1.1 and answers ALPN with it;
    a list saying just that is accepted, anything else refused."""
    if value is None:
        return
    for i, proto in enumerate(read_names(r, value, path)):
        if proto != "http/1.1":
            r.issue(path + (i,), f"{proto!r} is not served: twistgw answers ALPN with http/1.1 only"
                    " (no HTTP/2, no allow_empty)")


def resolve_server_tls(spec: ServerSslSpec, secrets: Mapping[tuple[str, str], SecretInfo],
                       base: str) -> ServerTls:
    """The PEMs of ``spec`` read and checked by building its context.

    :raises LookupError: the Secret is not declared.
    :raises ValueError: a file cannot be read, the Secret lacks a key, the
        PEMs or settings cannot be used (the message says why).
    """
    cert, key, ca = read_pems(spec.secret, spec.files, secrets, base)
    if cert is None or key is None:
        raise ValueError(f"sslConfig.secretRef: Secret {spec.secret[0]}/{spec.secret[1]} has no tls.crt and"
                         " tls.key (or empty ones, as a CA-only Secret has): a virtual service needs its"
                         " certificate" if spec.secret else
                         "sslConfig: no certificate")
    files = tuple(n if os.path.isabs(n) else os.path.join(base, n) for n in spec.files or () if n)
    tls = ServerTls(cert, key, ca, spec.verify_names, spec.min_version, spec.max_version, spec.ciphers,
                    spec.one_way, spec.sni_domains, files)
    from twistgw.tls import TLSSettingsError

    try:
        tls.context()
    except TLSSettingsError as exc:
        raise ValueError(_pem_problem(spec, str(exc))) from None
    return tls


#: the PEM each problem of :func:`twistgw.servertls.server_context` is about:
#: (its words, the Secret's key, the sslFiles field)
_PEMS = (("server key", "tls.key", "tlsKey"), ("private key", "tls.key", "tlsKey"),
         ("server certificate", "tls.crt", "tlsCert"), ("root CA", "ca.crt", "rootCa"))


def _pem_problem(spec: ServerSslSpec, reason: str) -> str:
    """``reason`` naming the Secret and its key (``Secret ns/a: tls.key:
    ...``) or the ``sslFiles`` field (``sslFiles.tlsKey: ...``)."""
    for words, key, field in _PEMS:
        if words in reason:
            if spec.secret is not None:
                return f"Secret {spec.secret[0]}/{spec.secret[1]}: {key}: {reason}"
            return f"sslFiles.{field}: {reason}"
    return reason


@attrs.frozen
class TlsChainSpec:
    """One certificate on TLS listeners (Envoy's filter chain): its
    settings without ``sniDomains``, the server names it answers (() for
    every name), and the virtual services (``namespace/name``) it serves."""

    tls: ServerTls
    names: tuple[str, ...]
    virtual_services: tuple[str, ...]


def tls_chains(services: Iterable[tuple[str, ServerTls]],
               conflict: Callable[[str, str, int | None], None] | None = None) -> list[TlsChainSpec]:
    """Virtual services (key, tls) grouped as Gloo groups them: one chain
    per ``sslConfig`` that differs only by ``sniDomains``; a chain matches
    every name when one of its virtual services has no ``sniDomains``.

    ``conflict(key, reason, index)`` is told of a virtual service whose
    server name (``sniDomains[index]``, or every name when ``index`` is
    None) another chain already answers: Envoy refuses two filter chains
    with the same match."""
    groups: dict[ServerTls, list[tuple[str, ServerTls]]] = {}
    for key, tls in services:
        groups.setdefault(attrs.evolve(tls, sni_domains=()), []).append((key, tls))
    chains: list[TlsChainSpec] = []
    owner: dict[str, str] = {}
    every: str | None = None
    for settings, members in groups.items():
        keys = {k for k, _ in members}
        names: tuple[str, ...] = ()
        if all(t.sni_domains for _, t in members):
            names = tuple(dict.fromkeys(n for _, t in members for n in t.sni_domains))
        for key, tls in members:
            if not tls.sni_domains:
                if every is not None and every not in keys and conflict is not None:
                    conflict(key, f"has no sniDomains, like VirtualService {every} whose"
                                  " sslConfig differs: only one certificate can answer every server name;"
                                  " list sniDomains", None)
                every = every or key
            for i, name in enumerate(tls.sni_domains if names else ()):
                other = owner.setdefault(name, key)
                if other not in keys and conflict is not None:
                    conflict(key, f"server name {name!r} already has another certificate, that of"
                                  f" VirtualService {other}", i)
        chains.append(TlsChainSpec(settings, names, tuple(k for k, _ in members)))
    return chains
