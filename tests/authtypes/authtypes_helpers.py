"""Helpers of the config-type tests: scopes over real snapshot objects,
requests, and hashes made by the real tools (``htpasswd``, ``openssl``)."""

from __future__ import annotations

import base64
import subprocess
from typing import Any, Mapping, Sequence

from twistgw.sdk import Headers, OptionsScope, RequestContext
from twistgw_extauth import ConfigScope
from twistgw.api.types import AuthConfigInfo, ResourceView, SecretInfo, UpstreamInfo
from twistgw.config.configmaps import ConfigMapInfo


def Resources(secrets: Sequence[SecretInfo] = (), config_maps: Sequence[ConfigMapInfo] = (),  # noqa: N802
              upstreams: Sequence[UpstreamInfo] = (), settings: Mapping[str, Any] | None = None) -> ResourceView:
    """The snapshot's own lookups (``ResourceView``) over these resources."""
    return ResourceView({(u.namespace, u.name): u for u in upstreams},
                        {(s.namespace, s.name): s for s in secrets}, {}, None, settings=settings,
                        resources={"ConfigMap": {(m.namespace, m.name): m for m in config_maps}})


def scope(resources: ResourceView | None = None, namespace: str = "gloo-system",
          type_name: str = "apiKeyAuth", inline: bool = False) -> ConfigScope:
    resources = resources or Resources()
    options = OptionsScope("default", "default/vs", None, resources)
    if inline:
        return ConfigScope(options, "default", None, type_name, 0, None, (type_name,))
    ac = AuthConfigInfo(namespace, "auth", ())
    return ConfigScope(options, namespace, ac, "config_0", 0, ("AuthConfig", namespace, "auth"),
                       ("spec", "configs", 0, type_name))


def apikey_secret(name: str, key: str, namespace: str = "gloo-system", **extra: str) -> SecretInfo:
    data = {"api-key": key.encode(), **{k.replace("_", "-"): v.encode() for k, v in extra.items()}}
    return SecretInfo(namespace, name, "extauth.solo.io/apikey", data)


def request(method: str = "GET", path: str = "/", headers: Any = (), query: bytes = b"",
            host: str = "api.example.com") -> RequestContext:
    h = Headers()
    for name, value in headers:
        h.addRawHeader(name, value)
    return RequestContext(method, path, query, h, host=host, client_address="127.0.0.1")


def basic(user: str, password: str) -> tuple[str, bytes]:
    return ("Authorization", b"Basic " + base64.b64encode(f"{user}:{password}".encode()))


def htpasswd(user: str, password: str) -> tuple[str, str]:
    """(salt, hashedPassword) of ``htpasswd -nbm`` (apache2-utils)."""
    line = subprocess.run(["htpasswd", "-nbm", user, password], check=True, capture_output=True,
                          text=True).stdout.strip()
    _, _, rest = line.partition(":$apr1$")
    salt, _, hashed = rest.partition("$")
    return salt, hashed


def openssl_apr1(password: str) -> tuple[str, str]:
    """(salt, hashedPassword) of ``openssl passwd -apr1``."""
    line = subprocess.run(["openssl", "passwd", "-apr1", password], check=True, capture_output=True,
                          text=True).stdout.strip()
    _, _, rest = line.partition("$apr1$")
    salt, _, hashed = rest.partition("$")
    return salt, hashed
