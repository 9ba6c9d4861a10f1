"""The upstream side of the engine: a small package.

* :mod:`.pool` — idle keep-alive connections per endpoint; where a
  forwarded request starts (:meth:`UpstreamPool.forward`);
* :mod:`.request` — one forwarded request: connection, response deadline,
  one retry, its outcome reported through :class:`~twistgw.engine.seams.Downstream`;
* :mod:`.connection` — the HTTP/1.1 client protocol and its :class:`State`;
* :mod:`.policy` — which failure gets which answer, when to send again;
* :mod:`.tunnel` — the splice after a ``101``, with its idle timeout.

See ``docs/engine.md``.
"""

from twistgw.engine.upstream.connection import State, UpstreamConnection
from twistgw.engine.upstream.policy import connect_failure
from twistgw.engine.upstream.pool import UpstreamPool
from twistgw.engine.upstream.request import UpstreamRequest
from twistgw.engine.upstream.tunnel import TUNNEL_IDLE_TIMEOUT, Tunnel

__all__ = ["TUNNEL_IDLE_TIMEOUT", "State", "Tunnel", "UpstreamConnection", "UpstreamPool", "UpstreamRequest",
           "connect_failure"]
