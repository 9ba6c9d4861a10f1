"""Server endpoint strings (``--listen``, ``--admin``, ``twistgw echo
--listen``, the development servers' ``listen`` in Settings), checked before
Twisted parses them, so that a malformed one is
refused in the endpoint's own words (issue 32, item 17): ``port must be a
number from 0 to 65535, got 'notaport'``, never ``invalid literal for
int() with base 10``.

The grammar is Twisted's (``twisted.internet.endpoints.serverFromString``):
``TYPE:ARG:...:NAME=VALUE:...``, a backslash escaping the next character,
positional arguments in the order of the type's parameters. The types
twistgw documents are checked here (:data:`FORMS`); any other type is left
to Twisted (an endpoint plugin may add one). What needs files (``ssl:``'s
key and certificate) is checked by the runtime, which reads them.
"""

from __future__ import annotations

#: The types twistgw documents: their parameters in Twisted's positional
#: order (the first is the port, or the path of a ``unix:`` socket).
FORMS: dict[str, tuple[str, ...]] = {
    "tcp": ("port", "interface", "backlog"),
    "tcp6": ("port", "interface", "backlog"),
    "tls": ("port", "interface", "backlog"),
    "ssl": ("port", "privateKey", "certKey", "sslmethod", "interface", "backlog", "extraCertChain",
            "dhParameters"),
    "unix": ("address", "mode", "backlog", "lockfile"),
}

#: How each type is written, for the messages.
SHAPES = {
    "tcp": "tcp:PORT[:interface=ADDRESS][:backlog=N]",
    "tcp6": "tcp6:PORT[:interface=ADDRESS][:backlog=N]",
    "tls": "tls:PORT[:interface=ADDRESS][:backlog=N]",
    "ssl": "ssl:PORT:privateKey=KEY.pem:certKey=CERT.pem[:interface=ADDRESS][:backlog=N]",
    "unix": "unix:PATH[:mode=OCTAL][:backlog=N][:lockfile=0|1]",
}

KNOWN = "tcp:PORT, tcp6:PORT, ssl:PORT:privateKey=KEY:certKey=CERT, tls:PORT or unix:PATH"


def split_endpoint(description: str) -> tuple[str, list[str], list[tuple[str, str]]]:
    """``(type, positional arguments, NAME=VALUE options in order)``, as
    Twisted splits it: ``:`` separates, the first ``=`` of a part names it,
    a backslash escapes the next character."""
    parts: list[list[str]] = [[""]]
    chars = iter(description)
    for char in chars:
        if char == "\\":
            parts[-1][-1] += next(chars, "")
        elif char == ":":
            parts.append([""])
        elif char == "=" and len(parts[-1]) == 1:
            parts[-1].append("")
        else:
            parts[-1][-1] += char
    kind = "=".join(parts[0])
    args = [p[0] for p in parts[1:] if len(p) == 1]
    options = [(p[0], p[1]) for p in parts[1:] if len(p) == 2]
    return kind, args, options


def syntax_problem(description: str) -> str | None:
    """Why ``description`` is not a well-formed endpoint of a documented
    type, in its own words; None when it is, or when its type is not one of
    :data:`FORMS` (Twisted decides those)."""
    if not description.strip():
        return f"it is empty; give one such as tcp:8080 ({KNOWN})"
    kind, args, options = split_endpoint(description)
    if kind.isdigit():
        return f"it has no type; did you mean tcp:{description}? ({KNOWN})"
    params = FORMS.get(kind)
    if params is None:
        return None
    shape = SHAPES[kind]
    if len(args) > len(params):
        return f"too many values between its colons; {kind}: is written {shape}"
    values = dict(zip(params, args, strict=False))
    for name, value in options:
        if name not in params:
            takes = ", ".join(f"{p}=" for p in params[1:])
            return f"unknown option {name!r}; {kind}: takes {takes} ({shape})"
        if name in values:
            return f"{name} is given twice"
        values[name] = value
    return _unix_problem(values, shape) if kind == "unix" else _port_problem(kind, values, shape)


def _port_problem(kind: str, values: dict[str, str], shape: str) -> str | None:
    port = values.get("port")
    if port is None or port == "":
        return f"the port is missing; {kind}: is written {shape}, e.g. {kind}:8080"
    if not port.isdigit() or not port.isascii() or int(port) > 65535:
        return f"port must be a number from 0 to 65535, got {port!r}"
    return _backlog_problem(values)


def _unix_problem(values: dict[str, str], shape: str) -> str | None:
    if not values.get("address"):
        return f"the socket path is missing; unix: is written {shape}, e.g. unix:/run/twistgw.sock"
    mode = values.get("mode")
    if mode is not None and (not mode or any(c not in "01234567" for c in mode)):
        return f"mode must be an octal number such as 660, got {mode!r}"
    lockfile = values.get("lockfile")
    if lockfile is not None and lockfile not in ("0", "1"):
        return f"lockfile must be 0 or 1, got {lockfile!r}"
    return _backlog_problem(values)


def _backlog_problem(values: dict[str, str]) -> str | None:
    backlog = values.get("backlog")
    if backlog is not None and not (backlog.isdigit() and backlog.isascii() and 1 <= int(backlog) <= 65535):
        return f"backlog must be a whole number from 1 to 65535, got {backlog!r}"
    return None


__all__ = ["FORMS", "KNOWN", "SHAPES", "split_endpoint", "syntax_problem"]
