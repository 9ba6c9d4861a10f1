"""``passThroughAuth.http``'s ``tlsConfig`` and ``connectionPool`` (Gloo's
``PassThroughHttpTLSConfig`` and ``PassThroughHttp.ConnectionPool``), read
into the :class:`~twistgw_authtypes._http.ClientSettings` of the client
that calls the service.

::

    tlsConfig:
      secretRef: {name: auth-client, namespace: gloo-system}  # ca.crt; tls.crt + tls.key for mutual TLS
      sslParams: {minimumProtocolVersion: TLSv1_3, maximumProtocolVersion: TLSv1_3}
    connectionPool: {maxConns: 10, idleTimeout: 30s}

The Secret's keys are those of an Upstream's ``sslConfig.secretRef`` (the
same reader, :func:`twistgw.config.upstreamtls.read_pems`): ``ca.crt`` the
CAs trusted for the service (absent: the system trust store), ``tls.crt``
and ``tls.key`` the client certificate sent for mutual TLS.
"""

from __future__ import annotations

from typing import Any, Mapping

from twistgw.sdk import Path, Problems, TLSSettingsError, read_pems
from twistgw_extauth import ConfigScope

from twistgw_authtypes._http import ClientSettings

_TLS = ("secretRef", "sslParams")
_SSL_PARAMS = ("minimumProtocolVersion", "maximumProtocolVersion")
#: Gloo's extauth SslParameters.ProtocolVersion (no TLS 1.0 there)
_VERSIONS = ("TLS_AUTO", "TLSv1_1", "TLSv1_2", "TLSv1_3")
_POOL = ("maxConns", "idleTimeout")
#: Gloo's default maxConns
DEFAULT_MAX_CONNS = 100


def _version(problems: Problems, params: Mapping[str, Any], key: str, path: Path) -> str | None:
    if params.get(key) is None:
        return None
    value = problems.string(params[key], path + (key,))
    if value not in _VERSIONS:
        raise problems.fail(path + (key,), f"unknown TLS version {value!r} (expected one of: {', '.join(_VERSIONS)})")
    return None if value == "TLS_AUTO" else value


def secret_pems(problems: Problems, raw: Any, path: Path,
                scope: ConfigScope) -> tuple[bytes | None, bytes | None, bytes | None]:
    """A ``tlsConfig.secretRef`` (pass-through HTTP and gRPC): its
    (``tls.crt``, ``tls.key``, ``ca.crt``), read as Upstreams read theirs."""
    name, namespace = problems.reference(raw, path, scope.namespace)
    ref = (namespace, name)
    try:
        secret = scope.secret(ref[1], ref[0])
    except (KeyError, LookupError) as exc:
        raise problems.fail(path, f"dangling reference: {exc.args[0]}") from None
    try:
        return read_pems(ref, None, {ref: secret}, "")
    except (LookupError, ValueError) as exc:
        raise problems.fail(path, str(exc).removeprefix("sslConfig.secretRef: ")) from None


def read_tls(raw: Any, https: bool, scope: ConfigScope, problems: Problems) -> dict[str, Any]:
    """``tlsConfig``: the TLS keyword arguments of :class:`ClientSettings`."""
    path: Path = ("http", "tlsConfig")
    if raw is None:
        return {}
    tls = problems.mapping(raw, path, _TLS)
    if not https:
        raise problems.fail(path, "needs an https:// url (an http:// url is never TLS)")
    out: dict[str, Any] = {}
    if tls.get("secretRef") is not None:
        with problems.check():
            out["cert_pem"], out["key_pem"], out["ca_pem"] = secret_pems(problems, tls["secretRef"],
                                                                         path + ("secretRef",), scope)
    if tls.get("sslParams") is not None:
        p = path + ("sslParams",)
        params = problems.mapping(tls["sslParams"], p, _SSL_PARAMS)
        with problems.check():
            out["min_version"] = _version(problems, params, "minimumProtocolVersion", p)
        with problems.check():
            out["max_version"] = _version(problems, params, "maximumProtocolVersion", p)
    problems.raise_if_any()
    try:  # PEMs or versions OpenSSL refuses are told here, not at the first request
        ClientSettings(**out).check_tls()
    except TLSSettingsError as exc:
        raise problems.fail(path, str(exc)) from None
    return out


def read_pool(problems: Problems, raw: Any) -> dict[str, Any]:
    """``connectionPool``: ``max_conns`` (Gloo's default 100) and
    ``idle_timeout`` (0 or absent: no expiry, Gloo's default)."""
    path: Path = ("http", "connectionPool")
    pool = problems.mapping(raw, path, _POOL, optional=True)
    max_conns = pool.get("maxConns")
    if max_conns is None or max_conns == 0:
        max_conns = DEFAULT_MAX_CONNS  # proto3: 0 is unset
    elif isinstance(max_conns, bool) or not isinstance(max_conns, int) or not 1 <= max_conns <= 10000:
        raise problems.fail(path + ("maxConns",), f"must be a whole number from 1 to 10000, got {max_conns!r}")
    idle = 0.0
    if pool.get("idleTimeout") is not None:
        idle = problems.duration(pool["idleTimeout"], path + ("idleTimeout",), lo=0.0, hi=86400.0)
    return {"max_conns": max_conns, "idle_timeout": idle}
