"""What the pipeline decides for a request (see :mod:`twistgw.core.pipeline`)."""

from __future__ import annotations

from typing import Any, Sequence

from twistgw.api.headers import Headers
from twistgw.api.types import Deny, Endpoint, UpstreamInfo

__all__ = ["Forward", "LocalResponse", "Plan"]


class LocalResponse:
    """The gateway answers the request itself.

    :ivar status: the HTTP status.
    :ivar body: the body (``content-length`` is set from it, except on 204/304).
    :ivar headers: extra response headers, ``((b"name", b"value"), ...)``.
    :ivar content_type: sent with a non-empty body.
    :ivar reason: why, for logs and ``twistgw explain``; never sent.
    :ivar answer: the route's own answer (a direct response, a redirect, a
        CORS preflight), not a refusal.
    """

    __slots__ = ("status", "body", "headers", "content_type", "reason", "answer")

    def __init__(self, status: int, body: bytes = b"", headers: tuple[tuple[bytes, bytes], ...] = (),
                 content_type: bytes = b"text/plain", reason: str = "", answer: bool = False) -> None:
        self.status = status
        self.body = body
        self.headers = headers
        self.content_type = content_type
        self.reason = reason
        self.answer = answer

    @classmethod
    def refusal(cls, deny: Deny) -> "LocalResponse":
        """The answer to a plugin's :class:`~sdk.Deny`."""
        return cls(deny.status, deny.body, deny.headers, deny.content_type, deny.reason)

    def __repr__(self) -> str:
        return f"LocalResponse({self.status}, {self.body!r}, reason={self.reason!r})"


class Forward:
    """Send the request to an upstream endpoint.

    :ivar endpoint: where to (one address of ``upstream``, picked round robin).
    :ivar method: the request method, as received.
    :ivar target: the origin-form target sent upstream (``/path?query``,
        after ``prefixRewrite`` and any query change by a plugin).
    :ivar headers: the request headers sent upstream (end-to-end headers,
        plugins' changes, ``X-Forwarded-For``, ``X-Forwarded-Proto`` and
        ``X-Real-IP``; see :mod:`twistgw.core.headers` for what is dropped).
    :ivar timeout: seconds to wait for the response head once the request
        body is sent (the route's ``timeout``, else the gateway's).
    :ivar upstream: the upstream ``endpoint`` belongs to.
    :ivar response_edit: what to change in the upstream's response head
        (``headerManipulation``'s response headers, CORS headers for an
        allowed origin, then the headers plugins added with
        ``ctx.add_response_header``): a
        :class:`twistgw.core.traffic.ResponseEdit`, or None (the plain route).
    :ivar grpc_deadline: ``timeout`` is the gRPC client's own deadline
        (``grpc-timeout``, shorter than the route's): when it passes the
        client gets ``DEADLINE_EXCEEDED`` (4), as from Envoy, not the 504's 14.
    :ivar watch: a :class:`twistgw.core.outlier.UpstreamWatch` the engine
        reports the request's start, response statuses and end to (an
        upstream with ``leastRequest`` or ``outlierDetection``), else None.
        The engine applies ``response_edit.apply_to_lines`` to the end-to-end
        header lines of the response head.
    """

    __slots__ = ("endpoint", "method", "target", "headers", "timeout", "upstream", "response_edit", "watch",
                 "grpc_deadline")

    def __init__(self, endpoint: Endpoint, method: bytes, target: bytes, headers: Headers,
                 timeout: float, upstream: UpstreamInfo) -> None:
        self.endpoint = endpoint
        self.method = method
        self.target = target
        self.headers = headers
        self.timeout = timeout
        self.grpc_deadline = False
        self.upstream = upstream
        self.response_edit: Any = None  # a core.traffic.ResponseEdit (core.traffic imports this module)
        #: what the engine reports this request to: a
        #: core.outlier.UpstreamWatch (leastRequest, outlierDetection), else None
        self.watch: Any = None

    #: the route's ``retries`` (a :class:`twistgw.config.retries.Retries`):
    #: None here, a slot of :class:`RetryingForward`; so a plan without
    #: retries stores nothing for it
    retry: Any = None
    #: the copy of this request a route's ``shadowing`` sends (a Forward to
    #: the shadow upstream): None here, a slot of :class:`RetryingForward`
    mirror: Any = None

    def __repr__(self) -> str:
        return f"Forward({self.method!r} {self.target!r} to {self.endpoint.host}:{self.endpoint.port})"


class RetryingForward(Forward):
    """A :class:`Forward` on a route with ``retries`` or ``shadowing``
    (``retry`` and ``mirror`` may each be None).

    :ivar balancer: what picked ``endpoint``; a retry asks it for the next
        try's (:meth:`retry_endpoint`).
    :ivar request_hash: the request's hash (``lbHash``), or None.
    :ivar auto_host: ``Host`` is the endpoint's address (``autoHostRewrite``):
        a try on another endpoint sends that one's.
    """

    __slots__ = ("retry", "mirror", "balancer", "request_hash", "auto_host")

    def __init__(self, endpoint: Endpoint, method: bytes, target: bytes, headers: Headers,
                 timeout: float, upstream: UpstreamInfo, retry: Any, mirror: Any = None,
                 balancer: Any = None, request_hash: int | None = None) -> None:
        # Forward.__init__'s assignments, without the call (once per request)
        self.endpoint = endpoint
        self.method = method
        self.target = target
        self.headers = headers
        self.timeout = timeout
        self.grpc_deadline = False
        self.upstream = upstream
        self.response_edit = None
        self.watch = None
        self.retry = retry
        self.mirror = mirror
        self.balancer = balancer
        self.request_hash = request_hash
        self.auto_host = False

    def retry_endpoint(self, tried: Sequence[Endpoint]) -> Endpoint | None:
        """The endpoint of a retry: the balancer's pick among the endpoints
        taking traffic now (health checks, ejections, panic), other than
        those ``tried`` (Envoy's ``previous_hosts`` retry predicate); one of
        them again only when every one was tried. None: none takes traffic."""
        if self.balancer is None:
            return self.endpoint
        found: Endpoint | None = self.balancer.pick_retry(tried, self.request_hash)
        return found

    def move_to(self, endpoint: Endpoint) -> None:
        """The next try goes to ``endpoint``."""
        if self.auto_host and endpoint.host != self.endpoint.host:
            self.headers.raw[b"Host"] = [endpoint.host.encode("ascii")]
        self.endpoint = endpoint


Plan = LocalResponse | Forward
