"""Distinguished names: parsing for comparison, and cleaning user names.

Pure functions, no I/O. ldaptor's ``DistinguishedName`` is not used for
comparison because its ``__eq__`` (case-insensitive) and ``__hash__``
(case-sensitive) disagree, and its unescaping mishandles upper-case and
multi-byte hex escapes (``\\C3\\A9``).
"""

from __future__ import annotations

import re
from typing import Callable

#: A normalised DN: a tuple of RDNs, each a sorted tuple of (type, value).
NormalDN = tuple[tuple[tuple[str, str], ...], ...]

#: Characters removed from a user name before it goes into the DN template:
#: every character special in a DN (RFC 4514: ``, + " \\ < > ; =`` and a
#: leading ``#``) -- ``#`` removed everywhere for simplicity -- plus the
#: filter specials ``* ( )`` (RFC 4515) and every control character.
_REMOVE = re.compile(r'[,+"\\<>;=#*()\x00-\x1f\x7f]')

#: Common attribute type OIDs, so ``2.5.4.3=admins`` equals ``cn=admins``.
_OID_NAMES = {
    "2.5.4.3": "cn",
    "2.5.4.6": "c",
    "2.5.4.7": "l",
    "2.5.4.8": "st",
    "2.5.4.10": "o",
    "2.5.4.11": "ou",
    "0.9.2342.19200300.100.1.1": "uid",
    "0.9.2342.19200300.100.1.25": "dc",
}

_HEX = "0123456789abcdefABCDEF"
_SPECIAL_AFTER_BACKSLASH = ' "#+,;<=>\\'


#: The names Active Directory also accepts in a simple bind: DOMAIN\\name (the
#: down-level logon name) and name@realm (the user principal name).
_AD_LOGON_NAME = re.compile(r"^[^\\@\s=,]+\\[^\\@\s]+$|^[^\\@\s=,]+@[^\\@\s]+\.[^\\@\s]+$")


def is_ad_logon_name(text: str) -> bool:
    """``CORP\\svc-reader`` or ``svc-reader@corp.example.org``: a bind name
    Active Directory takes besides a DN."""
    return _AD_LOGON_NAME.match(text) is not None


class InvalidDN(ValueError):
    """The text is not a distinguished name (RFC 4514)."""


def clean_username(name: str) -> str:
    """Remove, not escape, everything that could change a DN's structure.

    ``al,ice`` becomes ``alice``; leading and trailing spaces go too. The
    result may be empty: the caller must refuse an empty name.
    """
    return _REMOVE.sub("", name).strip(" ")


def _normal_value_full(value: str) -> str:
    # caseIgnoreMatch with insignificant-space handling (RFC 4518 §2.6.1):
    # case folded, leading/trailing spaces dropped, inner runs made one.
    return " ".join(part for part in value.split(" ") if part).casefold()


def parse_dn(text: str) -> NormalDN:
    """Parse an RFC 4514 DN into a normalised, hashable form.

    Attribute types are case-insensitive (and well-known OIDs mapped to
    names), values compared case-insensitively with spaces around separators
    and runs of inner spaces ignored, escapes (``\\,`` and ``\\2C``, UTF-8
    byte escapes) decoded, and the AVAs of a multi-valued RDN sorted.

    :raise InvalidDN: when the text is not a DN.
    """
    return _parse(text, _normal_value_full)


def first_value(text: str) -> str:
    """The value of a DN's first RDN, unescaped, case kept: ``managers`` for
    ``cn=managers,ou=groups,dc=example,dc=org`` (a group's name).

    :raise InvalidDN: when the text is not a DN or is empty.
    """
    dn = _parse(text, lambda value: value.strip(" "))
    if not dn:
        raise InvalidDN("an empty DN has no name")
    return dn[0][0][1]


def _parse(text: str, normal: Callable[[str], str]) -> NormalDN:
    if not isinstance(text, str):
        raise InvalidDN("a DN must be text")
    rdns: list[tuple[tuple[str, str], ...]] = []
    avas: list[tuple[str, str]] = []
    i, n = 0, len(text)
    if not text.strip():
        return ()
    while True:
        atype, i = _attribute_type(text, i)
        value, i = _attribute_value(text, i, normal)
        avas.append((atype, value))
        if i >= n:
            rdns.append(tuple(sorted(avas)))
            break
        sep = text[i]
        i += 1
        if sep in ",;":
            rdns.append(tuple(sorted(avas)))
            avas = []
        if i >= n:
            raise InvalidDN(f"{text!r} ends with a separator")
    return tuple(rdns)


def _skip_spaces(text: str, i: int) -> int:
    while i < len(text) and text[i] == " ":
        i += 1
    return i


def _attribute_type(text: str, i: int) -> tuple[str, int]:
    """The normalised attribute type at ``i`` and the index after its ``=``."""
    n = len(text)
    start = i = _skip_spaces(text, i)
    while i < n and text[i] not in "=,+;":
        i += 1
    if i >= n or text[i] != "=":
        raise InvalidDN(f"expected 'type=value' at position {start} in {text!r}")
    atype = text[start:i].strip().lower()
    if atype.startswith("oid."):
        atype = atype[4:]
    if not atype or not re.fullmatch(r"[a-z][a-z0-9-]*|[0-9]+(\.[0-9]+)*", atype):
        raise InvalidDN(f"invalid attribute type {text[start:i]!r} in {text!r}")
    return _OID_NAMES.get(atype, atype), i + 1


def _attribute_value(text: str, i: int, normal: Callable[[str], str]) -> tuple[str, int]:
    """The normalised attribute value at ``i`` and the index of what ends it."""
    n = len(text)
    i = _skip_spaces(text, i)
    if i < n and text[i] == "#":
        start = i
        i += 1
        while i < n and text[i] in _HEX:
            i += 1
        if (i - start - 1) % 2 or i == start + 1:
            raise InvalidDN(f"invalid hex value in {text!r}")
        return text[start:i].lower(), _skip_spaces(text, i)
    raw = bytearray()
    while i < n and text[i] not in ",+;":
        c = text[i]
        if c == "\\":
            if i + 1 >= n:
                raise InvalidDN(f"dangling escape at the end of {text!r}")
            if text[i + 1] in _HEX and i + 2 < n and text[i + 2] in _HEX:
                raw.append(int(text[i + 1: i + 3], 16))
                i += 3
                continue
            if text[i + 1] in _SPECIAL_AFTER_BACKSLASH:
                raw.extend(text[i + 1].encode("utf-8"))
                i += 2
                continue
            raise InvalidDN(f"invalid escape '\\{text[i + 1]}' in {text!r}")
        if c in '"<>\x00':
            raise InvalidDN(f"character {c!r} must be escaped in {text!r}")
        raw.extend(c.encode("utf-8"))
        i += 1
    try:
        return normal(raw.decode("utf-8")), i
    except UnicodeDecodeError:
        raise InvalidDN(f"escaped bytes are not UTF-8 in {text!r}") from None


def format_dn(dn: NormalDN) -> str:
    """A readable text form of a normalised DN (for logs and messages)."""
    def esc(v: str) -> str:
        out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in v)
        if out.startswith(("#", " ")):
            out = "\\" + out
        return out
    return ",".join("+".join(f"{t}={esc(v)}" for t, v in rdn) for rdn in dn)
