"""The credentials Secret for an LDAP service account, and the command that
writes it: ``twistgw create secret authcredentials`` (the plugin adds it
through ``twistgw_add_commands``)::

    twistgw create secret authcredentials --name ldap-sa --namespace default \\
        --username cn=admin,dc=example,dc=org --password s3cret
"""

from __future__ import annotations

import argparse
import base64
import sys

import yaml
from twistgw.sdk import Commands
from twistgw.sdk import EXIT_USAGE, write_secret
from twistgw.sdk import is_kubernetes_name

from twistgw_ldap._dn import InvalidDN, is_ad_logon_name, parse_dn
from twistgw_ldap._model import SECRET_TYPE

__all__ = ["SECRET_TYPE", "secret_yaml"]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def secret_yaml(name: str, namespace: str, username: str, password: str) -> str:
    """A ``v1`` Secret of type ``extauth.vendor.io/accountcredentials`` as YAML.

    :param username: the service account's DN, e.g. ``cn=admin,dc=example,dc=org``
        (Active Directory also takes ``CORP\\svc-reader`` and ``svc-reader@corp.example.org``).
    :raise ValueError: with a message for the command line when an argument
        is unusable (a bad Kubernetes name, a user name that is not a DN, an
        empty password -- which many directories treat as an anonymous bind).
    """
    for label, value in (("name", name), ("namespace", namespace)):
        if not is_kubernetes_name(value or ""):
            raise ValueError(f"--{label} {value!r} is not a valid Kubernetes name"
                             " (lower-case letters, digits, '-', '.')")
    try:
        if not is_ad_logon_name(username) and not parse_dn(username):
            raise InvalidDN("empty")
    except InvalidDN:
        raise ValueError(f"--username must be the service account's DN, e.g."
                         f" cn=admin,dc=example,dc=org (or for Active Directory DOMAIN\\name or name@realm);"
                         f" got {username!r}") from None
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


def cmd_create_secret(args: argparse.Namespace) -> int:
    try:  # the checks of secret_yaml (a DN, a password); the writing is the core's
        secret_yaml(args.name, args.namespace or "default", args.username, args.password)
    except ValueError as exc:
        sys.stderr.write(f"twistgw: {exc}\n")
        return EXIT_USAGE
    return write_secret(args.name, args.namespace, SECRET_TYPE,
                        {"username": args.username, "password": args.password}, output=args.output,
                        reference="credentialsSecretRef")


def add_commands(commands: Commands) -> None:
    a = commands.add("create", "secret", "authcredentials",
                     help="LDAP service-account credentials for an AuthConfig",
                     description="Write a v1 Secret of type extauth.vendor.io/accountcredentials"
                     " (data: username, password) for groupLookupSettings.credentialsSecretRef.")
    a.add_argument("--name", required=True)
    a.add_argument("--namespace", default=None,
                   help="the Secret's namespace (default: default; glooctl's is gloo-system)")
    a.add_argument("--username", required=True, help="the service account's DN")
    a.add_argument("--password", required=True)
    a.add_argument("-o", "--output", help="write to this file instead of stdout")
    a.set_defaults(func=cmd_create_secret)
