"""The floor: a bare streaming reverse proxy on Twisted (Agent + persistent pool).

No routing, no plugins, no logging, no metrics. twistgw's plain route is
measured against this. Usage: bare_proxy.py LISTEN_PORT UPSTREAM_HOST:PORT
"""

import sys

from twisted.internet import reactor
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.protocol import Protocol
from twisted.web import client, http, server
from twisted.web.resource import Resource

HOP = {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer",
       b"transfer-encoding", b"upgrade", b"proxy-authorization", b"proxy-authenticate"}


class IPv4Endpoints:
    """Connect to the literal address: no per-request HostnameEndpoint/IDNA work (as twistgw)."""

    def endpointForURI(self, uri):
        return TCP4ClientEndpoint(reactor, uri.host.decode("ascii"), uri.port)


class Relay(Protocol):
    def __init__(self, request):
        self.request = request

    def connectionMade(self):
        self.request.registerProducer(self.transport, True)

    def dataReceived(self, data):
        self.request.write(data)

    def connectionLost(self, reason):
        self.request.unregisterProducer()
        if not self.request._disconnected:
            self.request.finish()


class Proxy(Resource):
    isLeaf = True

    def __init__(self, upstream, agent):
        super().__init__()
        self.base, self.agent = b"http://" + upstream.encode(), agent

    def render(self, request):
        headers = http.Headers({k: v for k, v in request.requestHeaders.getAllRawHeaders()
                                if k.lower() not in HOP})
        request.content.seek(0)
        body = client.FileBodyProducer(request.content) if request.getHeader(b"content-length") else None
        d = self.agent.request(request.method, self.base + request.uri, headers, body)
        d.addCallbacks(self.respond, self.fail, callbackArgs=(request,), errbackArgs=(request,))
        return server.NOT_DONE_YET

    def respond(self, response, request):
        request.setResponseCode(response.code, response.phrase)
        for k, v in response.headers.getAllRawHeaders():
            if k.lower() not in HOP:
                request.responseHeaders.setRawHeaders(k, v)
        response.deliverBody(Relay(request))

    def fail(self, failure, request):
        if not request._disconnected:
            request.setResponseCode(502)
            request.finish()


if __name__ == "__main__":
    pool = client.HTTPConnectionPool(reactor, persistent=True)
    pool.maxPersistentPerHost = 64
    site = server.Site(Proxy(sys.argv[2], client.Agent.usingEndpointFactory(reactor, IPv4Endpoints(), pool=pool)))
    site.log = lambda request: None  # no access log, like twistgw --no-access-log
    reactor.listenTCP(int(sys.argv[1]), site, interface="127.0.0.1")
    reactor.run()
