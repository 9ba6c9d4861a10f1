"""examples/extauth (the configuration docs/extauth.md shows): it loads, and
each route answers as the page says."""

from __future__ import annotations

import pathlib

import pytest

from twistgw.sdk.testing import ChainTester
from twistgw_authtypes import AuthTypesPlugin
from twistgw_extauth import ExtAuthPlugin

from support.trial import TestCase

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "extauth"
KEY = "N2YwMDIxZTEtNGUzNS1jNzgzLTRkYjAtYjE2YzRkZGVmNjcy"


class ExampleTests(TestCase):
    def setUp(self) -> None:
        self.tester = ChainTester.from_directory(str(EXAMPLE), [("extauth", ExtAuthPlugin),
                                                                 ("authtypes", AuthTypesPlugin)])

    @pytest.mark.parametrize("method, path, headers, status", [
        ("GET", "/partners", [("api-key", KEY)], 200),
        ("GET", "/partners", [("api-key", "nope")], 401),
        ("GET", "/staff", [("Authorization", "Basic dXNlcjpwYXNzd29yZA==")], 200),
        ("GET", "/staff", [], 401),
        ("GET", "/api/pets", [], 200),
        ("DELETE", "/api/pets/1", [], 403),
        ("DELETE", "/api/pets/2", [], 200),
    ])
    async def test_routes(self, method: str, path: str, headers: list, status: int) -> None:
        result = await self.tester.request(method, f"http://petstore.example.com{path}", headers=headers)
        self.assertEqual(result.status, status)

    async def test_metadata_header_reaches_the_backend(self) -> None:
        result = await self.tester.request("GET", "http://petstore.example.com/partners", headers=[("api-key", KEY)])
        self.assertEqual((result.ctx.principal, result.forwarded_headers.getRawHeaders(b"x-user-email")),
                         ("alice", [b"alice@example.com"]))
