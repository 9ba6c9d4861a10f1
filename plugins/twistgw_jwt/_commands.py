"""``twistgw token`` and ``twistgw keys`` (added by ``twistgw_add_commands``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from twistgw.sdk import Commands
from twistgw.sdk import EXIT_OK, EXIT_USAGE
from twistgw.sdk import DURATION_UNITS, parse_duration

from twistgw_jwt.tools import jwks_from_public_key, mint_token

#: ``--ttl`` also takes days.
_TTL_UNITS = {**DURATION_UNITS, "d": 86400}


def _err(message: str) -> None:
    sys.stderr.write(f"twistgw: {message}\n")


def parse_ttl(text: str) -> int:
    seconds = parse_duration(text, _TTL_UNITS)
    if seconds is None or seconds < 1:
        raise ValueError(f"--ttl must look like 3600, 90s, 15m, 1h or 7d; got {text!r}")
    return int(seconds)


def _claim_value(raw: str) -> Any:
    """``k=v``: v is JSON when it parses as JSON (numbers, true, lists), else a string."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def cmd_token(args: argparse.Namespace) -> int:
    try:
        with open(args.key, "rb") as f:
            pem = f.read()
        ttl = parse_ttl(args.ttl)
        claims = {}
        for item in args.claim or []:
            if "=" not in item:
                raise ValueError(f"--claim {item!r}: expected name=value")
            k, v = item.split("=", 1)
            claims[k] = _claim_value(v)
        if args.aud:
            claims["aud"] = args.aud
        token = mint_token(pem, args.iss, args.sub, claims, ttl, kid=args.kid, algorithm=args.alg)
    except (OSError, ValueError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    print(token)
    return EXIT_OK


def cmd_keys(args: argparse.Namespace) -> int:
    try:
        with open(args.public, "rb") as f:
            pem = f.read()
        doc = jwks_from_public_key(pem, kid=args.kid)
    except (OSError, ValueError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    print(json.dumps(doc, indent=2))
    return EXIT_OK


def add_commands(commands: Commands) -> None:
    t = commands.add("token", help="mint a signed JWT for local testing")
    t.add_argument("--key", required=True, help="private key PEM (RSA, EC or Ed25519)")
    t.add_argument("--iss", required=True, help="issuer (must equal the provider's issuer)")
    t.add_argument("--sub", required=True, help="subject")
    t.add_argument("--aud", help="audience")
    t.add_argument("--claim", action="append", help="extra claim name=value; JSON values allowed (repeatable)")
    t.add_argument("--ttl", default="1h", help="lifetime: 3600, 90s, 15m, 1h, 7d (default 1h)")
    t.add_argument("--kid", help="key id to put in the header")
    t.add_argument("--alg", help="algorithm (default: from the key type, e.g. RS256, ES256, EdDSA)")
    t.set_defaults(func=cmd_token)

    k = commands.add("keys", help="turn a public key PEM into a JWKS document")
    k.add_argument("--public", required=True, help="public key PEM")
    k.add_argument("--kid", help="key id (default: the key's RFC 7638 thumbprint)")
    k.set_defaults(func=cmd_keys)
