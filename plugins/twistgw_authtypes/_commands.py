"""``twistgw create secret apikey``: an API-key Secret as ``glooctl create
secret apikey`` writes it (type ``extauth.solo.io/apikey``, the key under
``api-key``), so that Gloo's API-key guide can be followed with twistgw::

    twistgw create secret apikey infra-apikey --namespace gloo-system \\
        --apikey N2YwMDIxZTEtNGUzNS1jNzgzLTRkYjAtYjE2YzRkZGVmNjcy \\
        --apikey-labels team=infrastructure -o infra-apikey.yaml
"""

from __future__ import annotations

import argparse
import base64
import sys
import uuid

from twistgw.sdk import Commands
from twistgw.sdk import EXIT_USAGE, write_secret

from twistgw_authtypes.apikey import APIKEY_TYPE

__all__ = ["add_commands"]


def _labels(entries: list[str]) -> dict[str, str] | None:
    """``k=v`` entries, comma-separated or repeated (glooctl's ``--apikey-labels``)."""
    labels = {}
    for entry in (e for item in entries for e in item.split(",") if e):
        key, sep, value = entry.partition("=")
        if not sep or not key:
            return None
        labels[key] = value
    return labels


def cmd_apikey(args: argparse.Namespace) -> int:
    name = args.name or args.name_flag
    if not name:
        sys.stderr.write("twistgw: give the Secret's name (NAME or --name)\n")
        return EXIT_USAGE
    if bool(args.apikey) == bool(args.apikey_generate):
        sys.stderr.write("twistgw: give exactly one of --apikey KEY and --apikey-generate\n")
        return EXIT_USAGE
    labels = _labels(args.apikey_labels)
    if labels is None:
        sys.stderr.write("twistgw: --apikey-labels takes key=value entries, comma-separated\n")
        return EXIT_USAGE
    # glooctl generates a random UUID and stores its base64 text as the key
    key = args.apikey or base64.b64encode(str(uuid.uuid4()).encode("ascii")).decode("ascii")
    code = write_secret(name, args.namespace, APIKEY_TYPE, {"api-key": key}, labels=labels, output=args.output,
                        reference="an apiKeySecretRefs entry")
    if code == 0 and labels:
        selector = ", ".join(f"{k}: {v}" for k, v in labels.items())
        print(f"or select it (with every API-key Secret so labelled) as labelSelector: {{{selector}}}",
              file=sys.stderr)
    if code == 0 and args.apikey_generate:
        print(f"the generated key is: {key}", file=sys.stderr)
    return code


def add_commands(commands: Commands) -> None:
    a = commands.add("create", "secret", "apikey", help="an API key for apiKeyAuth (as glooctl create secret apikey)",
                     description=f"Write a v1 Secret of type {APIKEY_TYPE} holding one API key (data: api-key),"
                                 " for apiKeyAuth's labelSelector or apiKeySecretRefs.")
    a.add_argument("name", nargs="?", help="the Secret's name")
    a.add_argument("--name", dest="name_flag", help="the Secret's name (instead of NAME)")
    a.add_argument("--namespace", default=None, help="the Secret's namespace (default: default; glooctl's is"
                                                     " gloo-system)")
    a.add_argument("--apikey", help="the API key to store")
    a.add_argument("--apikey-generate", action="store_true", help="generate a random key (printed on stderr)")
    a.add_argument("--apikey-labels", action="append", default=[], metavar="KEY=VALUE[,...]",
                   help="labels of the Secret, for labelSelector")
    a.add_argument("-o", "--output", help="write to this file instead of stdout")
    a.set_defaults(func=cmd_apikey)
