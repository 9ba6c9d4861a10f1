"""The forwarding policy: which failure gets which answer, and when a
request may be sent again.

This is the place the traffic policy grows (retry policies, outlier
detection, circuit breakers): :class:`~.request.UpstreamRequest` asks
:func:`may_retry` after a failure and answers with :func:`connect_failure`
or one of the fixed answers below.
"""

from __future__ import annotations

from twisted.internet import error as ierror
from twisted.python.failure import Failure

__all__ = ["IDEMPOTENT", "MALFORMED", "NO_HEALTHY", "RESET", "TIMEOUT", "TLS_FAILURE", "Answer", "connect_failure",
           "may_retry"]

#: (status, body, short reason for the log and the access line)
Answer = tuple[int, bytes, str]

#: RFC 9110 §9.2.2: requests that may be sent again after a failure.
IDEMPOTENT = frozenset({b"GET", b"HEAD", b"OPTIONS", b"TRACE", b"PUT", b"DELETE"})

_BEFORE_HEADERS = b"upstream connect error or disconnect/reset before headers. reset reason: "
RESET: Answer = (503, _BEFORE_HEADERS + b"connection termination", "reset")
REFUSED: Answer = (503, _BEFORE_HEADERS + b"connection failure", "refused")
CONNECT_TIMEOUT: Answer = (503, _BEFORE_HEADERS + b"connection timeout", "connect timeout")
#: Envoy's answer when the upstream's TLS handshake fails (an untrusted or
#: misnamed certificate, a refused client certificate).
TLS_FAILURE: Answer = (503, _BEFORE_HEADERS + b"connection failure, transport failure reason: TLS error:"
                       b" CERTIFICATE_VERIFY_FAILED", "TLS failure")
#: Envoy's answer when a circuit breaker overflows (with ``x-envoy-overloaded: true``).
OVERFLOW: Answer = (503, _BEFORE_HEADERS + b"overflow", "overflow")
OVERLOADED = ((b"X-Envoy-Overloaded", b"true"),)
TIMEOUT: Answer = (504, b"upstream request timeout", "timeout")
#: with TIMEOUT when the deadline was the gRPC client's own (``grpc-timeout``):
#: its gRPC status is DEADLINE_EXCEEDED, as Envoy answers a stream past it
DEADLINE_EXCEEDED = ((b"grpc-status", b"4"),)
#: Envoy's answer when no endpoint takes traffic (a retry's, when health
#: checks took every endpoint out and ``healthyPanicThreshold`` is 0)
NO_HEALTHY: Answer = (503, b"no healthy upstream", "no healthy upstream")
MALFORMED: Answer = (502, b"upstream sent a malformed response", "malformed response")


def connect_failure(failure: Failure) -> Answer:
    """Map a failure to connect to Envoy's answer."""
    error = failure.value
    if isinstance(error, ierror.TimeoutError):
        return CONNECT_TIMEOUT
    if isinstance(error, (ierror.ConnectError, ierror.ConnectionLost, ierror.ConnectionClosed,
                          ierror.DNSLookupError)):
        return REFUSED
    return 502, b"upstream error", f"unexpected: {type(failure.value).__name__}"


def may_retry(method: bytes, has_body: bool, retried: bool) -> bool:
    """A pooled connection died before any byte of an answer: send again
    once, on a new connection, when that cannot repeat a side effect (Envoy
    retries only with a retry policy; Twisted's pool retried idempotent
    requests and we keep that)."""
    return not retried and not has_body and method in IDEMPOTENT
