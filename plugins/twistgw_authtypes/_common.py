"""Small pieces the config types share: field readers that raise located
:class:`twistgw.OptionsError`, header names, durations, Secret references,
and the ``Authorization: Basic`` reader."""

from __future__ import annotations

import hashlib
import re
from typing import Any, Iterable, Mapping, Sequence

from twistgw.sdk import OptionsError, RequestContext, read_basic_credentials
from twistgw.sdk import check_fields, parse_duration, type_name

Path = tuple[str | int, ...]

#: RFC 9110 token: what a header name may be.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")

#: Headers the gateway or HTTP itself owns: never set by an auth service.
RESERVED_HEADERS = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te",
    "trailer", "proxy-connection", "x-forwarded-for", "x-forwarded-proto", "x-real-ip",
})


def mapping(value: Any, path: Path, allowed: Iterable[str] | None = None) -> Mapping[str, Any]:
    """``value`` as a mapping (None counts as empty), its unknown keys refused."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise OptionsError(path, f"must be a mapping, got {type_name(value)}")
    if allowed is not None:
        check_fields(value, tuple(allowed), path)
    return value


def string(value: Any, path: Path, nonempty: bool = True) -> str:
    if not isinstance(value, str):
        raise OptionsError(path, f"must be a string, got {type_name(value)}")
    if nonempty and not value:
        raise OptionsError(path, "must not be empty")
    return value


def boolean(value: Any, path: Path) -> bool:
    if not isinstance(value, bool):
        raise OptionsError(path, f"must be true or false, got {type_name(value)}")
    return value


def sequence(value: Any, path: Path) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise OptionsError(path, f"must be a list, got {type_name(value)}")
    return value


def duration(value: Any, path: Path, default: float, lo: float = 0.001, hi: float = 300.0) -> float:
    """Seconds of a Gloo duration (``3s``, ``250ms``) within [lo, hi]."""
    if value is None:
        return default
    seconds = parse_duration(value)
    if seconds is None:
        raise OptionsError(path, f"must be a duration such as '3s' or '500ms', got {value!r}")
    if not lo <= seconds <= hi:
        raise OptionsError(path, f"must be between {lo:g}s and {hi:g}s, got {value!r}")
    return seconds


def is_token(name: str) -> bool:
    """Whether ``name`` is an RFC 9110 token (a valid header name)."""
    return _TOKEN.fullmatch(name) is not None


def header_name(value: Any, path: Path, settable: bool = False) -> bytes:
    """A header name, lower-cased bytes. ``settable``: the gateway will set
    it on forwarded requests, so HTTP's and the gateway's own are refused."""
    name = string(value, path)
    if not _TOKEN.fullmatch(name):
        raise OptionsError(path, f"{name!r} is not a valid HTTP header name")
    lowered = name.lower()
    if settable and (lowered in RESERVED_HEADERS or lowered == "authorization"):
        raise OptionsError(path, f"{name!r} is a header HTTP or the gateway owns; pick another name")
    return lowered.encode("ascii")


def header_names(value: Any, path: Path, settable: bool = False) -> tuple[bytes, ...]:
    names = [header_name(v, path + (i,), settable) for i, v in enumerate(sequence(value, path))]
    return tuple(dict.fromkeys(names))


def header_value(value: Any, path: Path) -> bytes:
    text = string(value, path, nonempty=False)
    try:
        raw = text.encode("latin-1")
    except UnicodeEncodeError:
        raise OptionsError(path, "header values must be Latin-1 text") from None
    if any(c in raw for c in b"\r\n\x00"):
        raise OptionsError(path, "header values may not contain CR, LF or NUL")
    return raw


def resource_ref(value: Any, path: Path, namespace: str) -> tuple[str, str]:
    """``{name, namespace}`` (Gloo's ResourceRef) as (namespace, name)."""
    ref = mapping(value, path, ("name", "namespace"))
    if "name" not in ref:
        raise OptionsError(path, "is required: {name: NAME, namespace: NAMESPACE}")
    return string(ref.get("namespace", namespace), path + ("namespace",)), string(ref["name"], path + ("name",))


def keyed_blake2b(key: bytes) -> Any:
    """A BLAKE2b-256 object keyed with ``key`` and fed nothing yet:
    ``h = k.copy(); h.update(v); h.digest()`` is
    ``hashlib.blake2b(v, key=key, digest_size=32).digest()`` (the same
    digest) without parsing the arguments and setting up the key block on
    every call: about 4,600 machine instructions instead of 6,500
    (callgrind, a 21-byte value). The object is never updated itself, only
    copied, so one may serve every request."""
    return hashlib.blake2b(key=key, digest_size=32)


def safe_header_bytes(value: bytes) -> bool:
    """Whether ``value`` may go in a header as it is (no CR, LF, NUL)."""
    return not any(c in value for c in b"\r\n\x00")


# --------------------------------------------------------------------------
# Authorization: Basic
# --------------------------------------------------------------------------

#: Longest base64 credentials read (user + password, encoded).
MAX_BASIC_TOKEN = 4096


def read_basic(values: Sequence[bytes] | None) -> tuple[str, bytes] | str:
    """(user name, password) from the ``Authorization`` header's values, or
    the reason (never containing the password) why there are none: the
    gateway's one reading of Basic (:func:`twistgw.read_basic_credentials`)."""
    return read_basic_credentials(values, MAX_BASIC_TOKEN)


# --------------------------------------------------------------------------
# The ext-auth state configs share
# --------------------------------------------------------------------------


def shared_state(ctx: RequestContext) -> dict[str, Any]:
    """The ext-auth state the configs that ran before this one left
    (``ctx.state["extauth"]["state"]``, by config name), as one object."""
    found = ctx.state.get("extauth")
    state = found.get("state") if isinstance(found, Mapping) else None
    merged: dict[str, Any] = {}
    if isinstance(state, Mapping):
        for value in state.values():
            if isinstance(value, Mapping):
                merged.update(value)
    return merged
