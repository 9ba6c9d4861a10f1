"""twistgw.BoundedBody, the size-bounded body collector plugins read side
calls with, through treq's own collect over an in-memory server
(treq.testing.StubTreq). Runs under trial and pytest (tests/inmemory.py)."""

from __future__ import annotations

import treq
from treq.testing import StubTreq
from twisted.trial import unittest
from twisted.web.resource import Resource

from twistgw import sdk


class _Chunks(Resource):
    isLeaf = True

    def __init__(self, *chunks: bytes) -> None:
        super().__init__()
        self.chunks = chunks

    def render_GET(self, request):  # noqa: N802  (twisted.web's name)
        for chunk in self.chunks:
            request.write(chunk)
        return b""


class _Mine(Exception):
    pass


class BoundedBodyTests(unittest.TestCase):
    def collect(self, body: sdk.BoundedBody, *chunks: bytes):
        stub = StubTreq(_Chunks(*chunks))
        response = self.successResultOf(stub.get("http://side.example/doc"))
        return treq.collect(response, body)

    def test_collects_up_to_the_limit(self) -> None:
        body = sdk.BoundedBody(10)
        self.successResultOf(self.collect(body, b"12345", b"67890"))
        self.assertEqual((body.value(), body.size), (b"1234567890", 10))

    def test_one_byte_more_fails_with_body_too_large(self) -> None:
        body = sdk.BoundedBody(10)
        failure = self.failureResultOf(self.collect(body, b"12345", b"678901"), sdk.BodyTooLarge)
        self.assertEqual((failure.value.limit, str(failure.value)), (10, "body larger than 10 bytes"))
        self.assertEqual(body.value(), b"12345")  # the chunk past the limit is not kept

    def test_the_callers_own_error(self) -> None:
        body = sdk.BoundedBody(4, lambda limit: _Mine(f"key set larger than {limit} bytes"))
        failure = self.failureResultOf(self.collect(body, b"too long"), _Mine)
        self.assertEqual(str(failure.value), "key set larger than 4 bytes")
