"""TLS to upstreams: an Upstream's ``sslConfig`` (Gloo's UpstreamSslConfig)
and ``static.useTls`` / per-host ``sniAddr``, read into an
:class:`SslSpec` (references unresolved), then resolved against the
Secrets and files into the :class:`~twistgw.api.types.UpstreamTls` the
engine uses. Every peer is verified by name (see docs/traffic.md).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import attrs

from twistgw.api.fields import FieldReader, Path
from twistgw.api.types import SecretInfo
from twistgw.api.upstreampolicy import UpstreamTls

__all__ = ["SslSpec", "read_names", "read_parameters", "read_pem_source", "read_pems", "read_secret_ref",
           "read_ssl_config", "read_ssl_files", "resolve_tls"]

#: Gloo's protocol version names (twistgw.tls.TLS_VERSIONS, and TLS_AUTO);
#: the config layer imports no Twisted, so twistgw.tls is imported where a
#: creator is built to check the settings
_VERSIONS = ("TLS_AUTO", "TLSv1_0", "TLSv1_1", "TLSv1_2", "TLSv1_3")
_NOT_SUPPORTED = {
    "sds": "secret discovery (SDS) is not supported: use secretRef or sslFiles",
    "alpnProtocols": "ALPN to upstreams is not supported (twistgw speaks HTTP/1.1 to upstreams)",
    "allowRenegotiation": "TLS renegotiation is not supported",
    "oneWayTls": "oneWayTls is not supported (a client certificate is sent when one is configured)",
}


@attrs.frozen
class SslSpec:
    """``sslConfig`` as written: the Secret or the files, not yet read."""

    secret: tuple[str, str] | None = None
    #: (tlsCert, tlsKey, rootCa) paths as written ("" when absent)
    files: tuple[str, str, str] | None = None
    sni: str = ""
    verify_names: tuple[str, ...] = ()
    min_version: str | None = None
    max_version: str | None = None
    ciphers: tuple[str, ...] = ()
    host_sni: tuple[tuple[str, str], ...] = ()


def _version(r: FieldReader, m: Mapping[str, Any], key: str, path: Path) -> str | None:
    if m.get(key) is None:
        return None
    v = r.string(m[key], path + (key,))
    if v not in _VERSIONS:
        raise r.fail(path + (key,), f"unknown TLS version {v!r} (expected one of: {', '.join(_VERSIONS)})")
    return None if v == "TLS_AUTO" else v


def read_secret_ref(r: FieldReader, value: Any, path: Path, ns: str) -> tuple[str, str]:
    """``sslConfig.secretRef``: (namespace, name); the namespace defaults to
    the resource's own. Shared by Upstreams and VirtualServices."""
    ref = r.mapping(value, path, {"name", "namespace"}, required=("name",))
    return (r.string(ref.get("namespace", ns), path + ("namespace",)), r.string(ref["name"], path + ("name",)))


def read_ssl_files(r: FieldReader, value: Any, path: Path, ocsp_reason: str) -> tuple[str, str, str]:
    """``sslConfig.sslFiles``: (tlsCert, tlsKey, rootCa) as written, "" when
    absent; a certificate needs its key and a key its certificate."""
    f = dict(r.mapping(value, path))
    if f.pop("ocspStaple", None) is not None:
        r.issue(path + ("ocspStaple",), f"is not supported by twistgw: {ocsp_reason}")
    f = r.mapping(f, path, {"tlsCert", "tlsKey", "rootCa"})
    cert, key, ca = (r.string(f[k], path + (k,)) if k in f else "" for k in ("tlsCert", "tlsKey", "rootCa"))
    if bool(cert) != bool(key):
        raise r.fail(path, "a certificate (tlsCert) needs its key (tlsKey), and a key its certificate")
    return cert, key, ca


def read_pem_source(r: FieldReader, m: Mapping[str, Any], path: Path, ns: str, ocsp_reason: str
                    ) -> tuple[tuple[str, str] | None, tuple[str, str, str] | None]:
    """``sslConfig``'s ``secretRef`` or ``sslFiles`` (one of them, or
    neither): (the Secret's namespace and name, the files as written)."""
    if "secretRef" in m and "sslFiles" in m:
        raise r.fail(path, "set secretRef or sslFiles, not both")
    secret = files = None
    if m.get("secretRef") is not None:
        secret = read_secret_ref(r, m["secretRef"], path + ("secretRef",), ns)
    elif m.get("sslFiles") is not None:
        files = read_ssl_files(r, m["sslFiles"], path + ("sslFiles",), ocsp_reason)
    return secret, files


def read_parameters(r: FieldReader, value: Any, path: Path) -> tuple[str | None, str | None, tuple[str, ...]]:
    """``sslConfig.parameters``: (minimum, maximum TLS version or None for
    TLS_AUTO, cipher suites)."""
    p = dict(r.mapping(value, path))
    if p.pop("ecdhCurves", None):
        r.issue(path + ("ecdhCurves",), "is not supported by twistgw: OpenSSL's default curves are used")
    p = r.mapping(p, path, {"minimumProtocolVersion", "maximumProtocolVersion", "cipherSuites"})
    lo, hi = _version(r, p, "minimumProtocolVersion", path), _version(r, p, "maximumProtocolVersion", path)
    ciphers = tuple(r.string(c, path + ("cipherSuites", i))
                    for i, c in enumerate(r.sequence(p.get("cipherSuites") or [], path + ("cipherSuites",))))
    return lo, hi, ciphers


def read_names(r: FieldReader, value: Any, path: Path) -> tuple[str, ...]:
    """A list of strings (``verifySubjectAltName``, ``sniDomains``)."""
    return tuple(r.string(n, path + (i,)) for i, n in enumerate(r.sequence(value or [], path)))


def read_ssl_config(r: FieldReader, value: Any, path: Path, ns: str) -> SslSpec:
    """An Upstream's ``sslConfig``."""
    m = dict(r.mapping(value or {}, path))
    for key, why in _NOT_SUPPORTED.items():
        if m.pop(key, None) is not None:
            r.issue(path + (key,), f"is not supported by twistgw: {why}")
    m = r.mapping(m, path, {"secretRef", "sslFiles", "sni", "verifySubjectAltName", "parameters"})
    secret, files = read_pem_source(r, m, path, ns, "OCSP stapling is a server-side feature")
    sni = r.string(m["sni"], path + ("sni",)) if m.get("sni") is not None else ""
    names = read_names(r, m.get("verifySubjectAltName"), path + ("verifySubjectAltName",))
    lo = hi = None
    ciphers: tuple[str, ...] = ()
    if m.get("parameters") is not None:
        lo, hi, ciphers = read_parameters(r, m["parameters"], path + ("parameters",))
    spec = SslSpec(secret, files, sni, names, lo, hi, ciphers)
    from twistgw.tls import TLSSettingsError, client_tls

    try:  # settings that can never work are reported here, with their field
        client_tls(sni or "settings.check", min_version=lo, max_version=hi, ciphers=ciphers or None,
                   verify_names=names)
    except TLSSettingsError as exc:
        raise r.fail(path + ("parameters",) if m.get("parameters") is not None else path, str(exc)) from None
    return spec


def _read_file(base: str, name: str, what: str) -> bytes | None:
    if not name:
        return None
    full = name if os.path.isabs(name) else os.path.join(base, name)
    try:
        with open(full, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ValueError(f"sslFiles.{what}: cannot read {full}: {exc.strerror}") from None


def _present(value: bytes | None) -> bytes | None:
    """A Secret's PEM entry, or None when it is absent or empty (only
    whitespace): Kubernetes requires ``tls.crt`` and ``tls.key`` in a
    ``kubernetes.io/tls`` Secret, so ``glooctl create secret tls --rootca``
    writes them empty beside ``ca.crt``."""
    return value if value is not None and value.strip() else None


def read_pems(secret_ref: tuple[str, str] | None, files: tuple[str, str, str] | None,
              secrets: Mapping[tuple[str, str], SecretInfo],
              base: str) -> tuple[bytes | None, bytes | None, bytes | None]:
    """(certificate, key, CA) PEMs of an ``sslConfig``: from the Secret
    (``tls.crt``, ``tls.key``, ``ca.crt``: a ``kubernetes.io/tls`` Secret,
    or Gloo's with a root CA; an empty entry is an absent one) or the files
    (relative to ``base``, the configuration directory). Shared by
    Upstreams, VirtualServices and the pass-through auth clients.

    :raises LookupError: the Secret is not declared (a dangling reference).
    :raises ValueError: a file cannot be read, or the Secret lacks the keys.
    """
    if secret_ref is not None:
        secret = secrets.get(secret_ref)
        where = f"Secret {secret_ref[0]}/{secret_ref[1]}"
        if secret is None:
            raise LookupError(f"sslConfig.secretRef names no {where}")
        cert, key, ca = (_present(secret.data.get(k)) for k in ("tls.crt", "tls.key", "ca.crt"))
        if cert is None and key is None and ca is None:
            raise ValueError(f"sslConfig.secretRef: {where} has none of tls.crt, tls.key, ca.crt"
                             " (or only empty ones)")
        if (cert is None) != (key is None):
            raise ValueError(f"sslConfig.secretRef: {where} needs both tls.crt and tls.key (or neither;"
                             " an empty key counts as absent)")
        return cert, key, ca
    if files is not None:
        cert, key, ca = (_read_file(base, n, w) for n, w in zip(files, ("tlsCert", "tlsKey", "rootCa"), strict=True))
        return cert, key, ca
    return None, None, None


def resolve_tls(spec: SslSpec, secrets: Mapping[tuple[str, str], SecretInfo], base: str) -> UpstreamTls:
    """The PEMs of ``spec`` read (from the Secret, or files relative to
    ``base``, the configuration directory), checked by building a creator.

    :raises LookupError: the Secret is not declared (a dangling reference).
    :raises ValueError: a file cannot be read, the Secret lacks the keys, or
        the PEMs cannot be used (the message says why).
    """
    cert, key, ca = read_pems(spec.secret, spec.files, secrets, base)
    from twistgw.stdtls import upstream_context
    from twistgw.tls import TLSSettingsError, client_tls

    tls = UpstreamTls(spec.sni, ca, cert, key, spec.verify_names, spec.min_version, spec.max_version,
                      spec.ciphers, spec.host_sni)
    try:
        client_tls(spec.sni or "settings.check", ca_pem=ca, client_cert_pem=cert, client_key_pem=key,
                   min_version=spec.min_version, max_version=spec.max_version, ciphers=spec.ciphers or None,
                   verify_names=spec.verify_names)
        upstream_context(tls)  # what the engine's connections use (twistgw.engine.upstream.memtls)
    except TLSSettingsError as exc:
        raise ValueError(f"sslConfig: {exc}") from None
    return tls
