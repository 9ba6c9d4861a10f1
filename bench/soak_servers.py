"""The soak's auxiliary servers, each its own process so the soak can kill
and restart it: ``backend PORT`` (200 ``ok`` for anything, with a body the
size of ``?size=N``) and ``jwks PORT FILE`` (serves FILE as the key set).

Run: ``python bench/soak_servers.py backend 18081`` (loopback only).
"""

from __future__ import annotations

import sys
from urllib.parse import parse_qs

from twisted.internet import reactor
from twisted.web import resource, server


class Backend(resource.Resource):
    isLeaf = True

    def render(self, request: server.Request) -> bytes:
        query = parse_qs(request.uri.partition(b"?")[2])
        size = int(query.get(b"size", [b"3"])[0])
        request.setHeader(b"content-type", b"text/plain")
        return b"ok\n" if size == 3 else b"x" * min(size, 1 << 20)


class KeySet(resource.Resource):
    isLeaf = True

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def render_GET(self, request: server.Request) -> bytes:
        with open(self.path, "rb") as f:
            body = f.read()
        request.setHeader(b"content-type", b"application/json")
        return body


def main(argv: list[str]) -> None:
    role, port = argv[0], int(argv[1])
    root = Backend() if role == "backend" else KeySet(argv[2])
    site = server.Site(root)
    site.log = lambda request: None  # type: ignore[method-assign]
    reactor.listenTCP(port, site, interface="127.0.0.1", backlog=128)
    reactor.run()


if __name__ == "__main__":
    main(sys.argv[1:])
