"""``twist twistgw``: command-line options and the service they build."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from twisted.application.service import IService
from twisted.python import usage

from twistgw.api.commands import EXIT_USAGE
from twistgw.config.defaults import BACKLOG, TIMINGS, keyword
from twistgw.config.loader import ConfigError
from twistgw.config.names import with_backlog
from twistgw.runtime.listeners import EXIT_CANNOT_LISTEN, endpoint_problem


class Options(usage.Options):
    synopsis = "[options]"
    longdesc = (
        "Run the twistgw HTTP gateway on the resources (VirtualService, Upstream,"
        " AuthConfig, Secret, Service, Endpoints, Settings) in a configuration directory."
        " Edits to the directory apply live; SIGHUP reloads at once."
    )
    optParameters = [
        ["config", "c", "etc", "Configuration directory (every *.yaml / *.yml file, multi-document)."],
        ["admin", None, "tcp:9901:interface=127.0.0.1",
         "Admin endpoint (/healthz, /readyz, /metrics); 'none' to disable."],
        *([flag, None, f"{default:g}", text] for flag, default, text in TIMINGS),
        ["backlog", None, str(BACKLOG), "listen(2) backlog of each --listen endpoint that sets no 'backlog='"
         " of its own (the kernel caps it at net.core.somaxconn)."],
        ["workers", "w", "1", "Worker processes sharing the listening sockets ('auto': one per core)."
         " With more than 1, only tcp:/tcp6: --listen endpoints are supported."],
    ]
    optFlags = [
        ["no-access-log", None, "Do not log one line per request."],
    ]

    def __init__(self) -> None:
        super().__init__()
        self["listen"] = []

    def opt_listen(self, endpoint: str) -> None:
        """Listen on a Twisted endpoint string (repeatable): tcp:8080; TLS with its own certificate,
        ssl:8443:privateKey=KEY:certKey=CERT; or TLS with only the VirtualServices' certificates
        (sslConfig, picked by SNI), tls:8443. Default: tcp:8080, or none when the configuration has
        Gateway resources (they say where to listen)"""
        self["listen"].append(endpoint)

    opt_l = opt_listen

    def parseOptions(self, options: Sequence[str] | None = None) -> None:
        """A usage error is one line on stderr and exit status 2 (``twist``
        itself would print the whole help and exit 64)."""
        try:
            super().parseOptions(options)
        except usage.UsageError as exc:
            sys.stderr.write(f"twist twistgw: {exc}\n(twist twistgw --help lists the options)\n")
            sys.stderr.flush()
            raise SystemExit(EXIT_USAGE) from None

    def postOptions(self) -> None:
        #: no --listen given: tcp:8080, unless the configuration has Gateways
        self["listen_defaulted"] = not self["listen"]
        if not self["listen"]:
            self["listen"] = ["tcp:8080"]
        from twistgw.runtime.workers import parse_workers

        try:
            self["workers"] = parse_workers(str(self["workers"]))
        except ValueError as exc:
            raise usage.UsageError(str(exc)) from None
        for name, _, _ in TIMINGS:
            try:
                self[name] = float(self[name])
            except ValueError:
                raise usage.UsageError(f"--{name} must be a number of seconds, got {self[name]!r}") from None
        try:
            self["backlog"] = int(self["backlog"])
        except ValueError:
            self["backlog"] = 0
        if not 1 <= self["backlog"] <= 65535:
            raise usage.UsageError("--backlog must be a whole number from 1 to 65535")
        for description in self["listen"]:
            check_endpoint("--listen", with_backlog(description, self["backlog"]), description)
        if self["admin"] not in ("none", ""):
            check_endpoint("--admin", self["admin"], self["admin"])


def check_endpoint(option: str, description: str, given: str) -> None:
    """A usage error naming the option if Twisted cannot parse the endpoint."""
    problem = endpoint_problem(description)
    if problem is not None:
        raise usage.UsageError(f"{option} {given!r} is not a valid endpoint: {problem}")


def makeService(options: Options) -> IService:
    from twistgw.runtime.logs import startup_errors, twist_access_log
    from twistgw.runtime.service import GatewayService, freeze_startup_heap

    admin = None if options["admin"] in ("none", "") else options["admin"]
    if options["workers"] > 1:
        return _workers_service(options, admin)
    svc = GatewayService(
        options["config"],
        listen=options["listen"],
        admin=admin,
        access_log=twist_access_log(options, options["no-access-log"]),
        backlog=options["backlog"],
        **{keyword(flag): options[flag] for flag, _, _ in TIMINGS},
    )
    # twist's log begins once the service is built: what went wrong before
    # (a development server that cannot listen) is said before exiting
    with startup_errors() as errors:
        try:
            svc.load_initial()
        except ConfigError as exc:
            _refuse(options, exc, errors)
        if options["listen_defaulted"] and svc.gateways.listeners():
            svc.listeners.clear()  # the Gateways say where to listen
        # Freeze first: once the endpoints listen, clients queue until the reactor runs.
        freeze_startup_heap()
        _cannot_listen(svc.open_listeners(), errors)
    return svc


def _said_before(errors: Sequence[str]) -> None:
    """The errors logged while the service was built, one line each."""
    for line in errors:
        sys.stderr.write(f"twistgw: {line}\n")


def _cannot_listen(problems: list[str], errors: Sequence[str] = ()) -> None:
    """An endpoint that cannot listen: one line each on stderr, then exit 3,
    before the reactor runs (never a half-up gateway)."""
    if not problems:
        return
    _said_before(errors)
    for line in problems:
        sys.stderr.write(f"twistgw: {line}\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_CANNOT_LISTEN)


def _refuse(options: Options, exc: ConfigError, errors: Sequence[str] = ()) -> None:
    """Every problem of an invalid configuration on stderr, then exit 1."""
    _said_before(errors)
    sys.stderr.write(
        f"twistgw: the configuration in {options['config']!r} is invalid;"
        f" refusing to start. {len(exc.issues)} problem(s):\n"
    )
    for issue in exc.issues:
        sys.stderr.write(f"  {issue}\n")
    sys.stderr.flush()
    raise SystemExit(1)


def _workers_service(options: Options, admin: str | None) -> IService:
    """Validate once here (refuse to start on errors), then supervise workers."""
    from twistgw.config.loader import load_directory
    from twistgw.core.plugins import PluginHost
    from twistgw.core.snapshot import build_snapshot
    from twistgw.runtime.logs import twist_access_log, twist_options
    from twistgw.runtime.workers import WorkersService

    try:
        snapshot = build_snapshot(load_directory(options["config"], keep_going=True), PluginHost.create())
    except ConfigError as exc:
        _refuse(options, exc)
    if snapshot.gateways:
        sys.stderr.write("twist twistgw: Gateway resources are not supported with --workers yet (each worker"
                         " would have to open and close their listeners); use --listen, or one process\n")
        raise SystemExit(EXIT_USAGE)
    for description in options["listen"]:
        if not description.startswith(("tcp:", "tcp6:")):
            sys.stderr.write(f"twist twistgw: --listen {description!r}: with --workers only tcp: and tcp6:"
                             " endpoints are supported\n")
            raise SystemExit(EXIT_USAGE)
    args = ["--config", options["config"]]
    for name, _, _ in TIMINGS:
        args += [f"--{name}", str(options[name])]
    if twist_access_log(options, options["no-access-log"]) is False:
        args.append("--no-access-log")
    args += ["--log-format", twist_options(options).get("logFormat", "text")]
    # The supervisor opens the listening sockets: the backlog is its business.
    svc = WorkersService(options["workers"], options["listen"], admin, args, backlog=options["backlog"])
    _cannot_listen(svc.open_listeners())
    return svc
