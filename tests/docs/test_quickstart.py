"""docs/quickstart.md: its configuration, with a freshly made key, checks and
behaves as the page says (through the real jwt and rbac plugins)."""

from __future__ import annotations

import pathlib
import re
import textwrap

import pytest_twisted
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from twistgw.testing import ChainTester
from twistgw_jwt.tools import mint_token

ROOT = pathlib.Path(__file__).resolve().parents[2]


def quickstart_config() -> tuple[str, bytes]:
    text = (ROOT / "docs" / "quickstart.md").read_text()
    yaml_text = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    placeholder = re.search(r"( *)-----BEGIN PUBLIC KEY-----\n.*?-----END PUBLIC KEY-----\n", yaml_text, re.S)
    indent = placeholder.group(1)
    yaml_text = yaml_text.replace(placeholder.group(0), textwrap.indent(public, indent))
    return yaml_text, private


@pytest_twisted.ensureDeferred
async def test_quickstart_behaves_as_documented():
    config, private = quickstart_config()
    tester = ChainTester.from_yaml(config)

    def token(role: str) -> str:
        return mint_token(private, "https://issuer.example", "alice", {"role": role}, 3600)

    public = await tester.request("GET", "http://localhost/public/")
    assert public.status == 200 and public.forwarded
    missing = await tester.request("GET", "http://localhost/orders")
    assert (missing.status, missing.body) == (401, b"Jwt is missing")
    viewer_post = await tester.request("POST", "http://localhost/orders",
                                       headers={"Authorization": f"Bearer {token('viewer')}"})
    assert (viewer_post.status, viewer_post.body) == (403, b"RBAC: access denied")
    viewer_get = await tester.request("GET", "http://localhost/orders",
                                      headers={"Authorization": f"Bearer {token('viewer')}"})
    assert viewer_get.status == 200 and viewer_get.forwarded
    admin_post = await tester.request("POST", "http://localhost/orders",
                                      headers={"Authorization": f"Bearer {token('admin')}"})
    assert admin_post.status == 200 and admin_post.forwarded
