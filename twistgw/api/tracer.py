"""What a plugin sees of tracing: ``ctx.tracer``, on which it times what it
waits for (a key-set fetch, an LDAP bind, a token call) as child spans of
the request's span.

::

    span = ctx.tracer.child("ldap.bind", server="ldap://127.0.0.1:3389")
    try:
        result = await bind(...)
    except Exception as exc:
        span.end(error=exc)
        raise
    span.end()

When the request is not sampled (or tracing is not configured) ``ctx.tracer``
is :data:`NO_TRACER`, whose ``child`` returns one shared handle whose methods
do nothing: the cost is two calls. The handle is carried explicitly, on the
request's context, never through context variables (a Twisted callback runs
in whichever context the reactor has).
"""

from __future__ import annotations

__all__ = ["NO_SPAN", "NO_TRACER", "SpanHandle", "Tracer"]

#: what a span attribute may hold (OpenTelemetry's primitive values)
AttributeValue = str | int | float | bool


class SpanHandle:
    """One child span being timed. :meth:`set` adds an attribute (never a
    credential, a password or a token: spans leave the gateway);
    :meth:`end` records it, once (a second call does nothing). This base
    class is the no-op one a request that is not sampled gets."""

    __slots__ = ()

    def set(self, key: str, value: AttributeValue) -> None:
        """Add (or replace) the attribute ``key``."""

    def end(self, error: BaseException | str | None = None) -> None:
        """The span ends now; ``error`` (an exception or a reason) makes its
        status ERROR, with the exception's class name or the reason as the
        message."""


class Tracer:
    """The request's tracer (``ctx.tracer``). This base class is
    :data:`NO_TRACER`'s: ``sampled`` is False and :meth:`child` returns
    :data:`NO_SPAN`."""

    __slots__ = ()

    #: whether the request's span is recorded and exported
    sampled = False

    def child(self, name: str, **attributes: AttributeValue) -> SpanHandle:
        """A child span of the request's span named ``name`` (e.g.
        ``"jwt.jwks_fetch"``, ``"ldap.bind"``), started now, with
        ``attributes``; end it with :meth:`SpanHandle.end`."""
        return NO_SPAN


#: the handle of a span that is not recorded
NO_SPAN = SpanHandle()
#: the tracer of a request that is not sampled
NO_TRACER = Tracer()
