"""The admin endpoint (``/healthz``, ``/readyz``, ``/metrics``) and the quiet
``Site`` it and the development servers are served with."""

from __future__ import annotations

from typing import Any

from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from twisted.web import resource, server


def quiet_site(root: resource.Resource) -> server.Site:
    """A Site for the admin endpoint and development servers: no access-log
    line per request and no tracebacks in responses."""
    site = server.Site(root)
    site.displayTracebacks = False
    site.log = lambda request: None  # type: ignore[method-assign]
    return site


class TextLeaf(resource.Resource):
    """A leaf answering ``fn() -> (status, content type, body)`` to GET and HEAD."""

    isLeaf = True

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def render_GET(self, request: Any) -> bytes:
        status, ctype, body = self.fn()
        request.setResponseCode(status)
        request.setHeader(b"content-type", ctype)
        return body

    render_HEAD = render_GET


class AdminRoot(resource.Resource):
    def __init__(self, svc: Any) -> None:
        super().__init__()
        self.svc = svc
        self.putChild(b"healthz", TextLeaf(self._healthy))
        self.putChild(b"readyz", TextLeaf(self._ready))
        self.putChild(b"metrics", TextLeaf(lambda: (200, CONTENT_TYPE_LATEST.encode(),
                                                 generate_latest(svc.metrics.registry))))
        self.putChild(b"", TextLeaf(lambda: (200, b"text/plain", b"twistgw admin: /healthz /readyz /metrics\n")))

    def _healthy(self) -> tuple[int, bytes, bytes]:
        """200 while the process runs, unless an endpoint failed to listen."""
        failed = [listener for listener in self.svc.not_listening() if listener.problem]
        if failed:
            return 503, b"text/plain", "".join(f"{listener.line()}\n" for listener in failed).encode()
        return 200, b"text/plain", b"ok\n"

    def getChild(self, path: bytes, request: Any) -> resource.Resource:
        # Not Twisted's default NoResource (deprecated, and an HTML page).
        return TextLeaf(lambda: (404, b"text/plain", b"not found; try /healthz /readyz /metrics\n"))

    def _ready(self) -> tuple[int, bytes, bytes]:
        """200 only while a configuration is loaded and every endpoint listens."""
        if self.svc.gateway.draining:
            return 503, b"text/plain", b"draining\n"
        snap = self.svc.snapshot
        if snap is None:
            return 503, b"text/plain", b"no configuration loaded\n"
        idle = self.svc.not_listening()
        if idle:
            lines = "".join(f"not listening: {one.option} {one.description}"
                            f"{': ' + one.problem if one.problem else ''}\n" for one in idle)
            return 503, b"text/plain", lines.encode()
        body = f"ready: configuration generation {snap.generation}\n"
        if self.svc.last_error is not None:
            body += f"last change rejected: {len(self.svc.last_error.issues)} problem(s); see the log\n"
        return 200, b"text/plain", body.encode()
