"""A tiny echo upstream for the shipped demo (development only).

Enabled by ``Settings.spec.gateway.echoServer.listen`` (loopback addresses
only). It answers every request with JSON describing what it received, so a
newcomer can see exactly what the gateway forwarded.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.endpoints import serverFromString
from twisted.logger import Logger
from twisted.web import resource

from twistgw.config.names import is_loopback_endpoint
from twistgw.runtime.admin import quiet_site

_log = Logger(namespace="twistgw.devecho")


class _Echo(resource.Resource):
    isLeaf = True

    def render(self, request: Any) -> bytes:
        body = request.content.read()
        request.setHeader(b"content-type", b"application/json")
        doc = {
            "echo": "twistgw demo upstream",
            "method": request.method.decode("latin-1"),
            "path": request.uri.decode("latin-1"),
            "headers": {k.decode("latin-1"): [v.decode("latin-1") for v in vs]
                        for k, vs in request.requestHeaders.getAllRawHeaders()},
            "body_bytes": len(body),
        }
        return (json.dumps(doc, indent=2) + "\n").encode()


def start_echo(reactor: Any, description: str) -> Any:
    """Listen; returns a Deferred firing with the IListeningPort."""
    if not is_loopback_endpoint(description):
        raise ValueError(f"echoServer.listen must be a loopback endpoint such as"
                         f" 'tcp:8081:interface=127.0.0.1', got {description!r}")
    site = quiet_site(_Echo())
    _log.warn("Starting the DEVELOPMENT echo upstream on {where} (Settings.spec.gateway.echoServer);"
              " do not enable it in production", where=description)
    return serverFromString(reactor, description).listen(site)
