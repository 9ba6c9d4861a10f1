"""``twistgw create secret oauth`` and ``twistgw create secret encryptionkey``:
the Secrets of Gloo's OIDC guides, as ``glooctl create secret oauth`` and
``glooctl create secret encryptionkey`` write them::

    twistgw create secret oauth google --namespace gloo-system --client-secret "$CLIENT_SECRET"
    twistgw create secret encryptionkey session-key --generate
"""

from __future__ import annotations

import argparse
import secrets
import string
import sys

from twistgw.sdk import Commands
from twistgw.sdk import EXIT_USAGE, write_secret

from twistgw_oidc._options import ENCRYPTION_SECRET_KEY, OAUTH_SECRET_KEY

__all__ = ["add_commands"]

OAUTH_TYPE = "extauth.solo.io/oauth"
KEY_LENGTH = 32


def _name(args: argparse.Namespace) -> str | None:
    name = args.name or args.name_flag
    if not name:
        sys.stderr.write("twistgw: give the Secret's name (NAME or --name)\n")
    return name


def cmd_oauth(args: argparse.Namespace) -> int:
    name = _name(args)
    if not name:
        return EXIT_USAGE
    if not args.client_secret:
        sys.stderr.write("twistgw: --client-secret must not be empty\n")
        return EXIT_USAGE
    return write_secret(name, args.namespace, OAUTH_TYPE, {OAUTH_SECRET_KEY: args.client_secret},
                        output=args.output, reference="clientSecretRef")


def cmd_encryption_key(args: argparse.Namespace) -> int:
    name = _name(args)
    if not name:
        return EXIT_USAGE
    if bool(args.key) == bool(args.generate):
        sys.stderr.write("twistgw: give exactly one of --key KEY and --generate\n")
        return EXIT_USAGE
    alphabet = string.ascii_letters + string.digits
    key = args.key or "".join(secrets.choice(alphabet) for _ in range(KEY_LENGTH))
    if len(key.encode("utf-8")) != KEY_LENGTH:
        sys.stderr.write(f"twistgw: --key must be exactly {KEY_LENGTH} bytes (AES-256), got"
                         f" {len(key.encode('utf-8'))}\n")
        return EXIT_USAGE
    return write_secret(name, args.namespace, "Opaque", {ENCRYPTION_SECRET_KEY: key}, output=args.output,
                        reference="session.cipherConfig.keyRef")


def _common(a: argparse.ArgumentParser) -> None:
    a.add_argument("name", nargs="?", help="the Secret's name")
    a.add_argument("--name", dest="name_flag", help="the Secret's name (instead of NAME)")
    a.add_argument("--namespace", default=None, help="the Secret's namespace (default: default; glooctl's is"
                                                     " gloo-system)")
    a.add_argument("-o", "--output", help="write to this file instead of stdout")


def add_commands(commands: Commands) -> None:
    a = commands.add("create", "secret", "oauth", help="an OIDC client secret (as glooctl create secret oauth)",
                     description=f"Write a v1 Secret of type {OAUTH_TYPE} (data: {OAUTH_SECRET_KEY}) for an"
                                 " oauth2 AuthConfig's clientSecretRef.")
    _common(a)
    a.add_argument("--client-secret", required=True, help="the client secret the identity provider gave")
    a.set_defaults(func=cmd_oauth)
    e = commands.add("create", "secret", "encryptionkey",
                     help="a 32-byte session key (as glooctl create secret encryptionkey)",
                     description=f"Write a v1 Secret (data: {ENCRYPTION_SECRET_KEY}, {KEY_LENGTH} bytes) for an"
                                 " oauth2 session's cipherConfig.keyRef: the key that encrypts and authenticates"
                                 " session cookies.")
    _common(e)
    e.add_argument("--key", help=f"the key, exactly {KEY_LENGTH} bytes")
    e.add_argument("--generate", action="store_true", help=f"generate a random key of {KEY_LENGTH} characters")
    e.set_defaults(func=cmd_encryption_key)
