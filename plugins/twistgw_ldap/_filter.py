"""Search filters with a ``%s`` placeholder: ``(uid=%s)``, ``(member=%s)``.

Compiled once per configuration with ldaptor's parser; per request the value
goes into the encoded filter as raw bytes (:class:`_ber.FilterTemplate`),
which is exactly the filter text with the value escaped as an RFC 4515
filter value (``pureldap.escape``) -- so ``*``, ``(``, ``)``, ``\\`` and NUL
in a value match themselves and can never widen the search.
"""

from __future__ import annotations

import os

import attrs
from ldaptor import ldapfilter
from ldaptor.protocols import pureldap

from twistgw_ldap._ber import FilterTemplate


@attrs.frozen
class SearchFilter:
    """A validated filter template. Equal when the text is equal."""

    text: str
    template: FilterTemplate = attrs.field(eq=False, repr=False)

    def encode(self, value: str) -> bytes:
        return self.template.encode(value.encode("utf-8"))

    def encode_any(self, values: list[str]) -> bytes:
        return self.template.encode_any([v.encode("utf-8") for v in values])

    def show(self, value: str) -> str:
        """The filter as text with ``value`` escaped, for logs and ``explain``."""
        return self.text.replace("%s", pureldap.escape(value))


def compile_filter(text: str) -> SearchFilter:
    """:raise ValueError: with a reason for a person."""
    text = text.strip()
    if text.count("%s") != 1:
        raise ValueError(f"must contain exactly one %s (where the value goes), got {text!r}")
    if not (text.startswith("(") and text.endswith(")")):
        raise ValueError(f"must be an LDAP filter in parentheses, e.g. (uid=%s); got {text!r}")
    marker = "twistgw" + os.urandom(8).hex()
    try:
        parsed = ldapfilter.parseFilter(text.replace("%s", marker))
    except Exception as exc:
        raise ValueError(f"is not a valid LDAP filter (RFC 4515): {text!r} ({type(exc).__name__})") from None
    try:
        template = FilterTemplate(parsed.toWire(), marker.encode("ascii"))
    except ValueError as exc:
        raise ValueError(f"{exc}: {text!r}") from None
    return SearchFilter(text, template)
