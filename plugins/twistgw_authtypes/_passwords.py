"""Stored password checks for ``basicAuth``: the one place that touches
passlib (pinned in ``pyproject.toml``; the project is in maintenance mode,
so everything it is asked goes through these three functions and could be
moved to another library here alone).

* ``apr``: Apache's iterated MD5 (``$apr1$SALT$HASH``, as ``htpasswd -m`` and
  ``openssl passwd -apr1`` write them), verified by passlib's
  ``apr_md5_crypt``, which compares in constant time.
* ``sha1``: Gloo's salted SHA-1, the lower-case hex of ``SHA1(password +
  salt)`` (Gloo's guide: salt ``TYiryv0/``, password ``password`` →
  ``010eb058...``), compared with ``hmac.compare_digest``; the hex is
  case-insensitive, as Gloo documents.
"""

from __future__ import annotations

import hashlib
import hmac

from passlib.hash import apr_md5_crypt

#: A hash no password matches, checked for unknown users so that a wrong
#: user name takes as long as a wrong password.
_DUMMY_APR = apr_md5_crypt.using(salt="dummysal").hash("twistgw-no-such-user")


def apr_hash(salt: str, hashed: str) -> str:
    """The ``$apr1$`` string of Gloo's (salt, hashedPassword)."""
    return f"$apr1${salt}${hashed}"


def valid_apr(salt: str, hashed: str) -> bool:
    """Whether (salt, hashedPassword) is a well-formed apr1 hash."""
    try:
        apr_md5_crypt.from_string(apr_hash(salt, hashed))
    except (ValueError, TypeError):
        return False
    return True


def verify_apr(password: bytes, stored: str | None) -> bool:
    """``password`` against an ``$apr1$`` string; ``stored=None`` (unknown
    user) spends the same time and answers False."""
    try:
        ok = apr_md5_crypt.verify(password, stored or _DUMMY_APR)
    except (ValueError, TypeError):
        return False
    return bool(ok) and stored is not None


def valid_sha1(hashed: str) -> bool:
    return len(hashed) == 40 and all(ch in "0123456789abcdefABCDEF" for ch in hashed)


def verify_sha1(password: bytes, salt: str, hashed: str) -> bool:
    digest = hashlib.sha1(password + salt.encode("utf-8")).hexdigest()
    return hmac.compare_digest(digest.encode("ascii"), hashed.lower().encode("ascii"))
