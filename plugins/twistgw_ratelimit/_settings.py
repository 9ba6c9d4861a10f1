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

from twistgw.sdk import OptionsError, Path, Problems, RedisConfig, TLSSettingsError, client_tls, type_name

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


def _redis(raw: Any, problems: Problems, resources: Any, found: Problems) -> RedisConfig | None:
    path: Path = ("redis",)
    if not isinstance(raw, Mapping):
        problems.add(path, f"must be a mapping {{address: host:port, db: 0}}, got {type_name(raw)}")
        return None
    raw = problems.mapping(raw, path, REDIS_FIELDS)
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
        data = _secret(raw["authSecretRef"], path + ("authSecretRef",), problems, resources, found)
        if data is not None:
            if not data.get("password"):
                found.add(path + ("authSecretRef",), "the Secret has no non-empty data.password")
            password = data.get("password", b"").decode("utf-8", "replace")
            username = data["username"].decode("utf-8", "replace") if data.get("username") else None
    tls, ca = False, None
    if "tls" in raw:
        tls = True
        ca = _tls_ca(raw["tls"], path + ("tls",), problems, resources, found)
        if ca is not None or not (problems or found):
            try:
                client_tls(host.strip("[]"), ca_pem=ca)
            except TLSSettingsError as exc:
                (found if ca is not None else problems).add(path + ("tls",), str(exc))
    return RedisConfig(host.strip("[]"), int(port), db, username, password, tls, ca, clustered)


def _secret(ref: Any, path: Path, problems: Problems, resources: Any, found: Problems) -> Mapping[str, bytes] | None:
    """The data of the Secret ``ref`` names ({name, namespace}); None when
    it does not resolve (recorded on ``found``: a problem only a
    configuration's resources show), or when there are no resources to look in."""
    if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str) or \
            not isinstance(ref.get("namespace", "gloo-system"), str):
        problems.add(path, "must be a Secret reference {name: ..., namespace: ...}")
        return None
    before = len(problems.errors)
    ref = problems.mapping(ref, path, SECRET_REF_FIELDS)
    if len(problems.errors) > before:
        return None
    if resources is None:
        return None
    namespace = ref.get("namespace", "gloo-system")
    try:
        return dict(resources.secret(ref["name"], namespace).data)
    except KeyError:
        found.add(path, f"no Secret {namespace}/{ref['name']}")
        return None


def _tls_ca(raw: Any, path: Path, problems: Problems, resources: Any, found: Problems) -> bytes | None:
    """``tls: {}`` (the system's CAs), ``{caSecretRef}`` (its data ca.crt) or ``{caFile}``."""
    if not isinstance(raw, Mapping):
        problems.add(path, "must be a mapping: {} (the system's CAs), {caSecretRef: ...} or {caFile: path}")
        return None
    raw = problems.mapping(raw, path, TLS_FIELDS)
    if "caSecretRef" in raw and "caFile" in raw:
        problems.add(path, "set caSecretRef or caFile, not both")
    if "caSecretRef" in raw:
        data = _secret(raw["caSecretRef"], path + ("caSecretRef",), problems, resources, found)
        if data is not None and not data.get("ca.crt"):
            found.add(path + ("caSecretRef",), "the Secret has no data ca.crt (PEM CA certificates)")
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


def read_server_settings(raw: Mapping[str, Any], resources: Any = None) -> tuple[ServerSettings, Problems, Problems]:
    """``Settings.spec.ratelimitServer`` read: (the settings, the problems of
    the section itself, the problems only ``resources`` show: the Secrets
    it names), every path below the section."""
    problems, found = Problems(), Problems()
    f = problems.fields(raw, (), SERVER_FIELDS)
    for key in ("ratelimitServerRef", "grpcService"):
        if key in f:
            f.issue(key, "twistgw is its own rate-limit server: say where its counters"
                    " live with redis: {address: host:port}")
    timeout = f.duration("requestTimeout", DEFAULT_TIMEOUT, hi=60)
    redis = _redis(f["redis"], problems, resources, found) if "redis" in f else None
    settings = ServerSettings(f.boolean("rateLimitBeforeAuth", False), f.boolean("denyOnFail", False), timeout,
                              f.boolean("enableXRatelimitHeaders", False), f.boolean("shadowMode", False), redis)
    return settings, problems, found


def parse_server_settings(raw: Mapping[str, Any], resources: Any = None) -> ServerSettings:
    """``Settings.spec.ratelimitServer``; OptionsError paths are below it.
    Secrets are looked up in ``resources`` (a ResourceView; without it only
    the references' shapes are checked)."""
    settings, problems, found = read_server_settings(raw, resources)
    problems.errors.extend(found.errors)
    problems.raise_if_any()
    return settings


#: (the resources, what their Settings section read): the last configuration's
_last_read: list[tuple[Any, tuple[ServerSettings, Problems, Problems]]] = []


def server_settings_read(resources: Any) -> tuple[ServerSettings, Problems, Problems]:
    """:func:`read_server_settings` of a configuration's section, read once
    per load: the resources (:class:`~twistgw.api.resources.ResourceView`,
    immutable) are one object for every route of a load; a new load reads
    again."""
    if _last_read and _last_read[0][0] is resources:
        return _last_read[0][1]
    found = read_server_settings(resources.settings(SERVER_SECTION) or {}, resources)
    _last_read[:] = [(resources, found)]
    return found


def server_settings(resources: Any) -> ServerSettings:
    """The server settings of a configuration (defaults when absent; a
    broken section reads as the defaults: it is reported on its own)."""
    settings, problems, found = server_settings_read(resources)
    return ServerSettings() if problems or found else settings


def parse_service_settings(raw: Mapping[str, Any]) -> DescriptorSet:
    """``Settings.spec.ratelimit``: ``{descriptors, setDescriptors}``."""
    problems = Problems()
    f = problems.fields(raw, (), SERVICE_FIELDS)
    found = parse_descriptor_set("settings", f.get("descriptors"), f.get("setDescriptors"), (), problems)
    problems.raise_if_any()
    return found


#: (the resources, the descriptors of their Settings or the OptionsError reading them): the last configuration's
_last_descriptors: list[tuple[Any, DescriptorSet | OptionsError]] = []


def service_settings(resources: Any) -> DescriptorSet:
    """:func:`parse_service_settings` of a configuration's section, read
    once per load (as :func:`server_settings_read`)."""
    if not _last_descriptors or _last_descriptors[0][0] is not resources:
        try:
            found: DescriptorSet | OptionsError = parse_service_settings(resources.settings(DESCRIPTORS_SECTION) or {})
        except OptionsError as exc:
            found = exc
        _last_descriptors[:] = [(resources, found)]
    read = _last_descriptors[0][1]
    if isinstance(read, OptionsError):
        raise OptionsError.several(read.problems)
    return read
