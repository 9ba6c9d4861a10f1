"""Credentials and who checks them: ``v1 Secret`` and Gloo's ``AuthConfig``."""

from __future__ import annotations

import base64
import binascii

from twistgw.api.fields import FieldReader, type_name
from twistgw.api.types import AuthConfigInfo, SecretInfo
from twistgw.config.envelope import Envelope

__all__ = ["read_auth_config", "read_secret"]


def read_secret(r: FieldReader, res: Envelope) -> SecretInfo:
    """A ``v1 Secret``: ``data`` (base64) and ``stringData``, merged."""
    ns, name, data = res.namespace, res.name, res.data
    values: dict[str, bytes] = {}
    raw = data.get("data") or {}
    r.mapping(raw, ("data",))
    for key, value in raw.items():
        if not isinstance(value, str):
            raise r.fail(("data", key), f"must be a base64 string, got {type_name(value)}")
        try:
            values[key] = base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise r.fail(("data", key), "is not valid base64 (use stringData for plain text)") from None
    sd = data.get("stringData") or {}
    r.mapping(sd, ("stringData",))
    for key, value in sd.items():
        values[key] = r.string(value, ("stringData", key), nonempty=False).encode("utf-8")
    stype = data.get("type", "Opaque")
    r.string(stype, ("type",))
    return SecretInfo(ns, name, stype, values, dict(res.labels))


def read_auth_config(r: FieldReader, res: Envelope) -> AuthConfigInfo:
    """An ``AuthConfig``: its ``configs`` are checked by the plugin that
    serves them (``extauth``), here only their shape."""
    ns, name = res.namespace, res.name
    spec = r.mapping(res.spec, ("spec",), {"configs", "booleanExpr", "failOnRedirect"}, required=("configs",))
    configs = r.sequence(spec["configs"], ("spec", "configs"), nonempty=True)
    for i, c in enumerate(configs):
        c = r.mapping(c, ("spec", "configs", i))
        if not c:
            raise r.fail(("spec", "configs", i), "an auth config entry must name its kind (e.g. ldap)")
    expr = r.string(spec["booleanExpr"], ("spec", "booleanExpr")) if "booleanExpr" in spec else None
    redirect = spec.get("failOnRedirect")
    if redirect is not None and not isinstance(redirect, bool):
        raise r.fail(("spec", "failOnRedirect"), f"must be true or false, got {redirect!r}")
    return AuthConfigInfo(ns, name, tuple(configs), expr, redirect)
