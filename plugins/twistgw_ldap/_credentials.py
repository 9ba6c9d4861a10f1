"""Basic credentials: reading ``Authorization``, the user name as each way
of finding the user needs it, and the password's keyed digest (the
decision cache never holds a password)."""

from __future__ import annotations

import hashlib
import os
import re

from twistgw.sdk import RequestContext, read_basic_credentials
from twistgw_extauth import AuthDeny

from twistgw_ldap._answers import unauthorized
from twistgw_ldap._dn import clean_username

#: Longer credentials are refused (401) without asking the directory.
MAX_USERNAME = 256
MAX_PASSWORD = 1024
#: Base64 of user:password can be no longer than this.
MAX_TOKEN = 4 * ((MAX_USERNAME * 4 + MAX_PASSWORD + 1 + 2) // 3) + 4
#: Never part of a user name: control characters.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

#: Per-process secret for the cache key; never leaves memory, never logged.
_SALT = os.urandom(32)


def password_digest(password: bytes) -> bytes:
    """A keyed hash (BLAKE2b in its keyed MAC mode, under the per-process
    random key): the cache never holds a password. 0.5 µs where
    HMAC-SHA256 took 2 µs of every cached request."""
    return hashlib.blake2b(password, key=_SALT, digest_size=32).digest()


def value_digest(value: bytes) -> bytes:
    """The same keyed hash of a whole ``Authorization`` value (it holds the
    password): the key of :class:`twistgw_ldap._cache.CredentialsMemo`."""
    return hashlib.blake2b(value, key=_SALT, digest_size=32).digest()


def read_basic(ctx: RequestContext) -> tuple[str, bytes] | str:
    """(user name, password bytes) from ``Authorization: Basic``, or a reason
    (for logs; never containing the password) why there are none: the
    gateway's one reading of Basic (:func:`twistgw.read_basic_credentials`)."""
    return read_basic_credentials(ctx.headers.getRawHeaders(b"authorization"), MAX_TOKEN)


def user_name(raw: str, for_template: bool) -> str:
    """The name as the directory gets it. A DN template needs every
    character special in a DN or filter removed (:func:`clean_username`);
    a user search escapes the value in its filter, so only spaces around it
    go (``qa(lead)`` and ``ops#1`` are legal Active Directory names). An
    empty result, or control characters in a searched name, refuse it."""
    if for_template:
        return clean_username(raw)
    name = raw.strip(" ")
    return "" if _CONTROL.search(name) else name


def credentials(ctx: RequestContext, realm: str, for_template: bool) -> tuple[str, bytes] | AuthDeny:
    """The user name (see :func:`user_name`) and the password, or the 401
    refusing them without asking the directory."""
    creds = read_basic(ctx)
    if isinstance(creds, str):
        return unauthorized(realm, creds)
    raw_user, password = creds
    user = user_name(raw_user, for_template)
    if not user:
        why = "empty user name" if for_template or not _CONTROL.search(raw_user) else \
            "a user name with control characters"
        return unauthorized(realm, f"{why} (refused without binding)")
    if not password:
        return unauthorized(realm, f"empty password for {user!r} (refused without binding)")
    if len(user) > MAX_USERNAME:
        return unauthorized(realm, f"user name longer than {MAX_USERNAME} characters")
    if len(password) > MAX_PASSWORD:
        return unauthorized(realm, f"password longer than {MAX_PASSWORD} bytes")
    return user, password
