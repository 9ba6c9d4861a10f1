"""The gateway-wide rate-limit settings (pure, no I/O).

``Settings.spec.ratelimitServer`` (Gloo's ``ratelimit.options.gloo.solo.io.Settings``
plus where the counters live)::

    ratelimitServer:
      rateLimitBeforeAuth: false    # true: count before authentication
      denyOnFail: false             # true: refuse (500) when Redis fails
      requestTimeout: 100ms         # how long a request waits for Redis
      enableXRatelimitHeaders: false
      shadowMode: false             # count and log, never refuse (twistgw)
      redis:                        # twistgw: the counters' Redis
        address: 127.0.0.1:6379     # with clustered: any node of the cluster (a seed)
        clustered: false            # true: a Redis Cluster (db must then be 0)
        db: 0
        authSecretRef: {name: redis-auth, namespace: gloo-system}   # data.password (+ data.username: ACL)
        tls: {caSecretRef: {name: redis-ca}}                        # or caFile: path, or {}: system trust

``Settings.spec.ratelimit`` (Gloo's ``ServiceSettings``): ``descriptors``
and ``setDescriptors``, the rules the ``ratelimit`` actions count against.
"""

from __future__ import annotations

from pathlib import Path as FilePath
from typing import Any, Mapping

import attrs

from twistgw.api.types import OptionsError
from twistgw.options import Path, Problems, parse_duration, type_name
from twistgw.redis import RedisConfig
from twistgw.tls import TLSSettingsError, client_tls

from twistgw_ratelimit import _fields
from twistgw_ratelimit._descriptors import DescriptorSet, parse_descriptor_set

#: the Settings section of the server settings (a plugin of its own name)
SERVER_SECTION = "ratelimitServer"
#: the Settings section of the descriptors (the ``ratelimit`` plugin's own)
DESCRIPTORS_SECTION = "ratelimit"

SERVER_FIELDS = ("rateLimitBeforeAuth", "denyOnFail", "requestTimeout", "enableXRatelimitHeaders",
                 "shadowMode", "redis", "ratelimitServerRef", "grpcService")
REDIS_FIELDS = ("address", "db", "authSecretRef", "tls", "clustered")
TLS_FIELDS = ("caSecretRef", "caFile")
SECRET_REF_FIELDS = ("name", "namespace")
SERVICE_FIELDS = ("descriptors", "setDescriptors")
DEFAULT_TIMEOUT = 0.1
#: plugins that authenticate or authorize: rateLimitBeforeAuth runs before them
AUTH_PLUGINS = ("extauth", "jwt", "rbac")


@attrs.frozen
class ServerSettings:
    before_auth: bool = False
    deny_on_fail: bool = False
    timeout: float = DEFAULT_TIMEOUT
    headers: bool = False
    shadow: bool = False
    redis: RedisConfig | None = None


def _bool(raw: Mapping[str, Any], name: str, problems: Problems) -> bool:
    value = raw.get(name, False)
    if not isinstance(value, bool):
        problems.add((name,), f"must be true or false, got {type_name(value)}")
        return False
    return value


def _redis(raw: Any, problems: Problems, resources: Any) -> RedisConfig | None:
    path: Path = ("redis",)
    if not isinstance(raw, Mapping):
        problems.add(path, f"must be a mapping {{address: host:port, db: 0}}, got {type_name(raw)}")
        return None
    _fields.check(raw, REDIS_FIELDS, path, problems)
    clustered = raw.get("clustered", False)
    if not isinstance(clustered, bool):
        problems.add(path + ("clustered",), f"must be true or false, got {type_name(clustered)}")
        clustered = False
    address = raw.get("address")
    if not isinstance(address, str):
        address = ""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() for c in host):
        problems.add(path + ("address",), f"must be host:port (e.g. 127.0.0.1:6379), got {address!r}")
        return None
    db = raw.get("db", 0)
    if isinstance(db, bool) or not isinstance(db, int) or not 0 <= db < 16384:
        problems.add(path + ("db",), f"must be a database number from 0, got {db!r}")
        return None
    if clustered and db != 0:
        problems.add(path + ("db",), f"must be 0 with clustered: true (a Redis Cluster has only database 0 and"
                     f" refuses SELECT), got {db}")
        return None
    username = password = None
    if "authSecretRef" in raw:
        data = _secret(raw["authSecretRef"], path + ("authSecretRef",), problems, resources)
        if data is not None:
            if not data.get("password"):
                problems.add(path + ("authSecretRef",), "the Secret has no non-empty data.password")
            password = data.get("password", b"").decode("utf-8", "replace")
            username = data["username"].decode("utf-8", "replace") if data.get("username") else None
    tls, ca = False, None
    if "tls" in raw:
        tls = True
        ca = _tls_ca(raw["tls"], path + ("tls",), problems, resources)
        if ca is not None or not problems:
            try:
                client_tls(host.strip("[]"), ca_pem=ca)
            except TLSSettingsError as exc:
                problems.add(path + ("tls",), str(exc))
    return RedisConfig(host.strip("[]"), int(port), db, username, password, tls, ca, clustered)


def _secret(ref: Any, path: Path, problems: Problems, resources: Any) -> Mapping[str, bytes] | None:
    """The data of the Secret ``ref`` names ({name, namespace}); None when
    it does not resolve (reported), or when there are no resources to look in."""
    if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str) or \
            not isinstance(ref.get("namespace", "gloo-system"), str):
        problems.add(path, "must be a Secret reference {name: ..., namespace: ...}")
        return None
    before = len(problems.errors)
    _fields.check(ref, SECRET_REF_FIELDS, path, problems)
    if len(problems.errors) > before:
        return None
    if resources is None:
        return None
    namespace = ref.get("namespace", "gloo-system")
    try:
        return dict(resources.secret(ref["name"], namespace).data)
    except KeyError:
        problems.add(path, f"no Secret {namespace}/{ref['name']}")
        return None


def _tls_ca(raw: Any, path: Path, problems: Problems, resources: Any) -> bytes | None:
    """``tls: {}`` (the system's CAs), ``{caSecretRef}`` (its data ca.crt) or ``{caFile}``."""
    if not isinstance(raw, Mapping):
        problems.add(path, "must be a mapping: {} (the system's CAs), {caSecretRef: ...} or {caFile: path}")
        return None
    _fields.check(raw, TLS_FIELDS, path, problems)
    if "caSecretRef" in raw and "caFile" in raw:
        problems.add(path, "set caSecretRef or caFile, not both")
    if "caSecretRef" in raw:
        data = _secret(raw["caSecretRef"], path + ("caSecretRef",), problems, resources)
        if data is not None and not data.get("ca.crt"):
            problems.add(path + ("caSecretRef",), "the Secret has no data ca.crt (PEM CA certificates)")
        return data.get("ca.crt") if data else None
    if "caFile" in raw:
        name = raw["caFile"]
        if not isinstance(name, str) or not name:
            problems.add(path + ("caFile",), "must be the path of a PEM file of CA certificates")
            return None
        base = FilePath(getattr(resources, "config_dir", "") or ".")
        try:
            return (base / name).read_bytes()
        except OSError as exc:
            problems.add(path + ("caFile",), f"cannot read {name}: {exc.strerror or exc}")
    return None


def parse_server_settings(raw: Mapping[str, Any], resources: Any = None) -> ServerSettings:
    """``Settings.spec.ratelimitServer``; OptionsError paths are below it.
    Secrets are looked up in ``resources`` (a ResourceView; without it only
    the references' shapes are checked)."""
    problems = Problems()
    if not isinstance(raw, Mapping):
        raise OptionsError((), f"must be a mapping, got {type_name(raw)}")
    _fields.check(raw, SERVER_FIELDS, (), problems)
    for key in ("ratelimitServerRef", "grpcService"):
        if key in raw:
            problems.add((key,), "twistgw is its own rate-limit server: say where its counters"
                         " live with redis: {address: host:port}")
    timeout = DEFAULT_TIMEOUT
    if "requestTimeout" in raw:
        parsed = parse_duration(raw["requestTimeout"])
        if parsed is None or not 0 < parsed <= 60:
            problems.add(("requestTimeout",), f"must be a duration from 1ms to 60s (e.g. 100ms), got"
                         f" {raw['requestTimeout']!r}")
        else:
            timeout = parsed
    redis = _redis(raw["redis"], problems, resources) if "redis" in raw else None
    settings = ServerSettings(_bool(raw, "rateLimitBeforeAuth", problems), _bool(raw, "denyOnFail", problems),
                              timeout, _bool(raw, "enableXRatelimitHeaders", problems),
                              _bool(raw, "shadowMode", problems), redis)
    problems.raise_if_any()
    return settings


def server_settings(resources: Any) -> ServerSettings:
    """The server settings of a configuration (defaults when absent; a
    broken section reads as the defaults: it is reported on its own)."""
    try:
        return parse_server_settings(resources.settings(SERVER_SECTION) or {}, resources)
    except OptionsError:
        return ServerSettings()


def parse_service_settings(raw: Mapping[str, Any]) -> DescriptorSet:
    """``Settings.spec.ratelimit``: ``{descriptors, setDescriptors}``."""
    if not isinstance(raw, Mapping):
        raise OptionsError((), f"must be a mapping, got {type_name(raw)}")
    problems = Problems()
    _fields.check(raw, SERVICE_FIELDS, (), problems)
    found = parse_descriptor_set("settings", raw.get("descriptors"), raw.get("setDescriptors"), (), problems)
    problems.raise_if_any()
    return found
