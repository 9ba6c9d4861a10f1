"""Layer 3: the HTTP wire: the server protocol, the upstream client and its
pool, timers and flow control. The only place that may touch Twisted's HTTP
internals. See ``docs/architecture.md``.
"""
