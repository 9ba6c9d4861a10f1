"""One worker process of ``--workers N`` (started by twistgw.runtime.workers).

Adopts the listening sockets it inherited, then runs a GatewayService with no
listeners and no admin endpoint of its own.
"""

from __future__ import annotations

import argparse
import socket
import sys

from twisted.logger import globalLogBeginner, textFileLogObserver


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="twistgw-worker")
    p.add_argument("--config", required=True)
    p.add_argument("--fd", action="append", default=[], help="FD:4|6 (inherited listening socket)")
    p.add_argument("--poll-interval", type=float, default=1.0)
    p.add_argument("--upstream-timeout", type=float, default=15.0)
    p.add_argument("--idle-timeout", type=float, default=60.0)
    p.add_argument("--head-timeout", type=float, default=10.0)
    p.add_argument("--drain-timeout", type=float, default=10.0)
    p.add_argument("--no-access-log", action="store_true")
    args = p.parse_args(argv)

    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stdout)], redirectStandardIO=False)
    from twisted.internet import reactor

    from twistgw.config.loader import ConfigError
    from twistgw.runtime.service import GatewayService

    svc = GatewayService(args.config, listen=(), admin=None, reactor=reactor,
                         poll_interval=args.poll_interval, access_log=not args.no_access_log,
                         upstream_timeout=args.upstream_timeout, idle_timeout=args.idle_timeout,
                         head_timeout=args.head_timeout, drain_timeout=args.drain_timeout)
    try:
        svc.load_initial()
    except ConfigError as exc:
        sys.stderr.write(f"twistgw worker: invalid configuration:\n{exc}\n")
        raise SystemExit(1)
    ports = []
    for spec in args.fd:
        fd, _, family = spec.partition(":")
        af = socket.AF_INET6 if family == "6" else socket.AF_INET
        ports.append(reactor.adoptStreamPort(int(fd), af, svc.factory))

    def stop() -> object:
        for port in ports:
            port.stopListening()
        return svc.stopService()

    reactor.callWhenRunning(svc.startService)
    reactor.addSystemEventTrigger("before", "shutdown", stop)
    reactor.run()


if __name__ == "__main__":
    main()
