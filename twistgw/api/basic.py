"""``Authorization: Basic`` read the way every shipped plugin reads it
(RFC 7617), for plugins that check user names and passwords."""

from __future__ import annotations

from typing import Sequence

from twistgw.api.b64 import b64decode_strict

__all__ = ["read_basic_credentials"]


def read_basic_credentials(values: Sequence[bytes] | None, max_token: int = 4096) -> tuple[str, bytes] | str:
    """``(user name, password)`` from the ``Authorization`` header's values
    (``ctx.headers.getRawHeaders(b"authorization")``), or the reason why
    there are none, for a log line (it never contains the password).

    One header only; scheme ``Basic`` in any case; strict base64 (:mod:`twistgw.api.b64`: padded, canonical) of at most
    ``max_token`` bytes; the password is everything after the *first* colon
    (so it may hold ``:``); both parts UTF-8.
    """
    if not values:
        return "no Authorization header"
    if len(values) > 1:
        return "more than one Authorization header"
    scheme, _, token = values[0].strip().partition(b" ")
    if scheme.lower() != b"basic":
        return "Authorization scheme is not Basic"
    token = token.strip()
    if not token:
        return "Basic credentials are empty"
    if len(token) > max_token:
        return f"Basic credentials longer than {max_token} bytes"
    try:
        decoded = b64decode_strict(token, urlsafe=False, padded=True)
    except ValueError:
        return "Basic credentials are not valid base64"
    user_raw, colon, password = decoded.partition(b":")
    if not colon:
        return "Basic credentials have no ':' between user and password"
    try:
        user = user_raw.decode("utf-8")
        password.decode("utf-8")
    except UnicodeDecodeError:
        return "Basic credentials are not UTF-8"
    return user, password
