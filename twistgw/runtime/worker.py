"""One worker process of ``--workers N`` (started by twistgw.runtime.workers).

Adopts the listening sockets it inherited, then runs a GatewayService with no
listeners and no admin endpoint of its own.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any

from twisted.logger import globalLogBeginner, jsonFileLogObserver

from twistgw.config.defaults import TIMINGS, keyword


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="twistgw-worker")
    p.add_argument("--config", required=True)
    p.add_argument("--fd", action="append", default=[], help="FD:4|6 (inherited listening socket)")
    for flag, default, text in TIMINGS:
        p.add_argument(f"--{flag}", type=float, default=default, help=text)
    p.add_argument("--no-access-log", action="store_true")
    p.add_argument("--no-http2", action="store_true")
    p.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="the supervisor's (twist's) log format, for logs and access lines alike")
    args = p.parse_args(argv)

    from twistgw.runtime.logs import buffered_access_log, safe_text_file_observer

    observer = jsonFileLogObserver if args.log_format == "json" else safe_text_file_observer
    globalLogBeginner.beginLoggingTo([observer(sys.stdout)], redirectStandardIO=False)
    from twisted.internet import reactor as global_reactor

    # Any: the epoll reactor provides IReactorSocket (adoptStreamPort) and
    # IReactorCore; Twisted types the global as neither
    reactor: Any = global_reactor

    from twistgw.config.loader import ConfigError
    from twistgw.runtime.service import GatewayService, freeze_startup_heap

    access = False if args.no_access_log else buffered_access_log(sys.stdout, args.log_format, reactor)
    svc = GatewayService(args.config, listen=(), admin=None, reactor=reactor, access_log=access,
                         http2=not args.no_http2,
                         **{keyword(flag): getattr(args, keyword(flag)) for flag, _, _ in TIMINGS})
    try:
        svc.load_initial()
    except ConfigError as exc:
        sys.stderr.write(f"twistgw worker: invalid configuration:\n{exc}\n")
        raise SystemExit(1) from None
    freeze_startup_heap()
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
