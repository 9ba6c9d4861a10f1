"""The gateway's timing defaults, in one place.

``twist twistgw`` takes each as ``--NAME SECONDS``; worker processes get the
same flags; :class:`~twistgw.runtime.service.GatewayService` takes them as
keyword arguments (``upstream_timeout=...``).
"""

from __future__ import annotations

POLL_INTERVAL = 1.0
UPSTREAM_TIMEOUT = 15.0
IDLE_TIMEOUT = 60.0
HEAD_TIMEOUT = 10.0
DRAIN_TIMEOUT = 10.0
#: an upgraded (WebSocket) connection with no byte either way is closed
#: (Envoy's stream idle timeout default; nginx's proxy_read_timeout is 60 s)
TUNNEL_IDLE_TIMEOUT = 300.0
#: connecting to an upstream (not a command-line option)
CONNECT_TIMEOUT = 5.0
#: listen(2) backlog of every listener whose endpoint string sets none
#: (``--backlog``; Twisted's own default, 50, drops bursts of connects).
#: Linux caps it at ``net.core.somaxconn`` (4096 on kernels since 5.4).
BACKLOG = 1024

#: ``(flag, default, help)`` for every timing option of the command line.
TIMINGS: tuple[tuple[str, float, str], ...] = (
    ("poll-interval", POLL_INTERVAL,
     "Seconds between checks of the config directory for changes (0: only SIGHUP)."),
    ("upstream-timeout", UPSTREAM_TIMEOUT,
     "Seconds to wait for an upstream's response head (route option 'timeout' overrides)."),
    ("idle-timeout", IDLE_TIMEOUT, "Seconds an idle client connection is kept open."),
    ("head-timeout", HEAD_TIMEOUT, "Seconds a client has to send a complete request head (slowloris guard)."),
    ("drain-timeout", DRAIN_TIMEOUT, "Seconds to let in-flight requests finish on SIGTERM."),
    ("tunnel-idle-timeout", TUNNEL_IDLE_TIMEOUT,
     "Seconds an upgraded (WebSocket) connection may pass no byte either way before it is closed (0: never)."),
)


def keyword(flag: str) -> str:
    """``"upstream-timeout"`` → ``"upstream_timeout"`` (the service's keyword)."""
    return flag.replace("-", "_")
