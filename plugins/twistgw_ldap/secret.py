"""The credentials Secret for an LDAP service account.

Used by ``twistgw create secret authcredentials``::

    twistgw create secret authcredentials --name ldap-sa --namespace default \\
        --username cn=admin,dc=example,dc=org --password s3cret
"""

from __future__ import annotations

import base64
import re

import yaml

from twistgw_ldap._dn import InvalidDN, parse_dn
from twistgw_ldap._options import SECRET_TYPE

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")

__all__ = ["SECRET_TYPE", "secret_yaml"]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def secret_yaml(name: str, namespace: str, username: str, password: str) -> str:
    """A ``v1`` Secret of type ``extauth.vendor.io/accountcredentials`` as YAML.

    :param username: the service account's DN, e.g. ``cn=admin,dc=example,dc=org``.
    :raise ValueError: with a message for the command line when an argument
        is unusable (a bad Kubernetes name, a user name that is not a DN, an
        empty password -- which many directories treat as an anonymous bind).
    """
    for label, value in (("name", name), ("namespace", namespace)):
        if not _NAME.match(value or "") or len(value) > 253:
            raise ValueError(f"--{label} {value!r} is not a valid Kubernetes name"
                             " (lower-case letters, digits, '-', '.')")
    try:
        if not parse_dn(username):
            raise InvalidDN("empty")
    except InvalidDN:
        raise ValueError(f"--username must be the service account's DN, e.g."
                         f" cn=admin,dc=example,dc=org; got {username!r}") from None
    if not password:
        raise ValueError("--password must not be empty (an empty password is an anonymous bind)")
    doc = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": SECRET_TYPE,
        "data": {"username": _b64(username), "password": _b64(password)},
    }
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
