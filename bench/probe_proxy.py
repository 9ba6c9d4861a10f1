"""The floor of the engine's design: Twisted protocols + httptools, nothing else.

The ~100-line probe that issue 13 measured before the engine was written:
a Twisted ``Protocol`` per client connection parsing requests with
httptools, a list of idle upstream connections parsing responses with
httptools, each request head re-sent upstream with its headers as they came
and each response relayed as it came. No routing, no header policy, no
plugins, no access log, no metrics, no timeouts, no limits, no pipelining,
no request bodies (the benchmark sends only GETs). It is not a proxy anyone
should run; it is how cheap a Python proxy on Twisted's reactor can be, so
``bench/run`` shows how much of twistgw's cost is the reactor and the kernel
and how much is twistgw's own work.

Usage: probe_proxy.py LISTEN_PORT UPSTREAM_HOST:PORT
"""

import sys

import httptools
from twisted.internet import reactor
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.protocol import Factory, Protocol

HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"content-length"}


class Upstream(Protocol):
    def __init__(self, pool):
        self.pool = pool
        self.client = None
        self.parser = httptools.HttpResponseParser(self)

    def dataReceived(self, data):
        self.parser.feed_data(data)

    def on_status(self, reason):
        self.reason = reason

    def on_header(self, name, value):
        if name.lower() not in HOP:
            self.lines.append(b"%s: %s\r\n" % (name, value))
        elif name.lower() == b"content-length":
            self.length = value

    def on_headers_complete(self):
        self.lines.insert(0, b"HTTP/1.1 %d %s\r\n" % (self.parser.get_status_code(), self.reason))
        self.lines.append(b"Content-Length: %s\r\n\r\n" % self.length)

    def on_body(self, data):
        self.lines.append(data)

    def on_message_complete(self):
        client, self.client = self.client, None
        client.transport.write(b"".join(self.lines))
        self.pool.append(self)

    def send(self, client, head):
        self.client, self.lines, self.reason, self.length = client, [], b"", b"0"
        self.transport.write(head)


class Client(Protocol):
    def __init__(self, factory):
        self.factory = factory
        self.parser = httptools.HttpRequestParser(self)

    def dataReceived(self, data):
        self.parser.feed_data(data)

    def on_message_begin(self):
        self.url, self.headers = b"", []

    def on_url(self, url):
        self.url += url

    def on_header(self, name, value):
        if name.lower() not in HOP:
            self.headers.append(b"%s: %s\r\n" % (name, value))

    def on_message_complete(self):
        head = b"%s %s HTTP/1.1\r\n%s\r\n" % (self.parser.get_method(), self.url, b"".join(self.headers))
        pool = self.factory.pool
        if pool:
            pool.pop().send(self, head)
        else:
            up = Upstream(pool)
            self.factory.endpoint.connect(Factory.forProtocol(lambda: up)).addCallback(
                lambda _: up.send(self, head))


def main():
    port, upstream = int(sys.argv[1]), sys.argv[2]
    host, up_port = upstream.rsplit(":", 1)
    factory = Factory()
    factory.protocol = lambda: Client(factory)
    factory.buildProtocol = lambda addr: Client(factory)
    factory.pool = []
    factory.endpoint = TCP4ClientEndpoint(reactor, host, int(up_port))
    TCP4ServerEndpoint(reactor, port, interface="127.0.0.1").listen(factory)
    reactor.run()


if __name__ == "__main__":
    main()
