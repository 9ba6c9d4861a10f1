"""The engine's entry points, as the runtime and tests import them.

The engine itself is in: :mod:`.connection` (a client connection and its
states), :mod:`.request` (reading a request head), :mod:`.exchange` (one
request and its response), :mod:`.body`, :mod:`.framing` (HTTP/1 syntax
and limits), :mod:`.gateway` (pipeline glue and accounting),
:mod:`.seams` (the interfaces between the client and the upstream side)
and the :mod:`.upstream` package. See ``docs/engine.md``.
"""

from __future__ import annotations

from twistgw.engine.connection import GatewayProtocol
from twistgw.engine.exchange import Exchange
from twistgw.engine.framing import MAX_HEAD_BYTES, MAX_HEADERS, MAX_PIPELINE, MAX_TARGET
from twistgw.engine.gateway import Gateway, GatewayFactory
from twistgw.engine.states import ConnState, Phase

__all__ = ["ConnState", "Exchange", "Gateway", "GatewayFactory", "GatewayProtocol", "MAX_HEADERS",
           "MAX_HEAD_BYTES", "MAX_PIPELINE", "MAX_TARGET", "Phase"]
