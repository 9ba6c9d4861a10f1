"""ldaptor, imported (and its filter parser called) without its warnings.

ldaptor's last release (2021) builds its LDAP filter grammar with
pyparsing's camelCase names, which pyparsing 3 deprecates: importing it
emits about sixty ``DeprecationWarning``\\ s, and parsing a filter more.
They are about ldaptor's code, not the gateway's nor a plugin author's, so
the plugin silences them here, at the one place it imports ldaptor, rather
than asking everyone who runs tests to filter them in their own
configuration. Every other module of the plugin imports ldaptor from here.
"""

from __future__ import annotations

import warnings
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from ldaptor import inmemory, interfaces, ldapfilter
    from ldaptor.protocols import pureber, pureldap
    from ldaptor.protocols.ldap.ldapclient import LDAPClient
    from ldaptor.protocols.ldap.ldapserver import LDAPServer

__all__ = ["LDAPClient", "LDAPServer", "inmemory", "interfaces", "parse_filter", "pureber", "pureldap"]


def parse_filter(text: str) -> Any:
    """``ldapfilter.parseFilter`` (raises ``ldapfilter.InvalidLDAPFilter``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return ldapfilter.parseFilter(text)

