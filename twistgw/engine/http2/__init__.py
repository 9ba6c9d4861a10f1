"""HTTP/2 towards clients (RFC 9113): ALPN ``h2`` on TLS listeners and h2c
with prior knowledge on plain ones, beside HTTP/1.1 on the same port.

``h2`` (hyper-h2, the sans-I/O HTTP/2 state machine) is the codec; this
package drives it:

* :mod:`.connection`: :class:`~.connection.H2ServerConnection`, one client
  connection (its :class:`~twistgw.engine.states.H2State`, flow control
  both ways, the bounds on what a client may make it do, timers);
* :mod:`.stream`: :class:`~.stream.H2Stream`, one request and its response,
  handed to the same ``Gateway.handle`` as an HTTP/1.1 ``Exchange`` (a
  :class:`~twistgw.engine.seams.Downstream`);
* :mod:`.headers`: header lists at the edge, both ways;
* :mod:`.frames`: the bounds ``h2`` does not keep, read on frame headers.

See docs/http2.md.
"""

from twistgw.engine.http2.connection import H2ServerConnection
from twistgw.engine.http2.frames import PREFACE
from twistgw.engine.http2.stream import H2Stream

__all__ = ["H2ServerConnection", "H2Stream", "PREFACE"]
