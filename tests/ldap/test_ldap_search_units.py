"""Pure parts of search-then-bind and group search: validation of the new
fields (every problem reported, each located), the filter templates against
ldaptor, header values."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import given, settings, strategies as st
from ldap_helpers import ldap_config, ldap_configs, make_tester
from twistgw_ldap._ldaptor import parse_filter, pureldap

from twistgw import ConfigError
from twistgw_ldap import _ber
from twistgw_ldap._dn import InvalidDN, first_value
from twistgw_ldap._filter import compile_filter
from twistgw_ldap._answers import header_text

from support.trial import TestCase

ADDR = "ldap://127.0.0.1:1"
#: each problem is located in the AuthConfig itself (its file, line and field)
AC = "AuthConfig default/ldap: spec.configs[0].ldap"
SEARCH = {"baseDn": "dc=example,dc=org", "filter": "(uid=%s)"}
GROUPS = {"baseDn": "ou=groups,dc=example,dc=org"}


def problems(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        make_tester(text)
    return str(info.value)


# ---------------------------------------------------------------------------
# Filter templates: what ldaptor encodes for the escaped filter text
# ---------------------------------------------------------------------------

TEMPLATES = ["(uid=%s)", "(&(objectClass=user)(sAMAccountName=%s))", "(cn=*%s*)", "(mail=%s@example.org)",
             "(member:1.2.840.113556.1.4.1941:=%s)", "(!(uid=%s))", "(|(uid=x)(&(cn=y)(sn>=%s)))", "(cn~=%s)",
             "(member=%s)"]
# Never empty (refused before any search), and no TAB: ldaptor's parser
# (pyparsing) expands a TAB in the filter text into spaces, where RFC 4515
# keeps it; the template keeps it too (user names lose control characters
# to the cleaning anyway).
values = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\t"),
                 min_size=1, max_size=60)


class LdapSearchUnitsTests(TestCase):
    @pytest.mark.parametrize("fields,where,reason", [
        ({"userSearch": SEARCH, "userDnTemplate": "uid=%s,dc=org"}, "userDnTemplate", "exactly one of userDnTemplate"),
        ({"userSearch": {"filter": "(uid=%s)"}}, "userSearch.baseDn", "is required"),
        ({"userSearch": {"baseDn": "dc=org"}}, "userSearch.filter", "is required"),
        ({"userSearch": {**SEARCH, "baseDn": "example"}}, "userSearch.baseDn", "not a valid DN"),
        ({"userSearch": {**SEARCH, "filter": "(uid=alice)"}}, "userSearch.filter", "exactly one %s"),
        ({"userSearch": {**SEARCH, "filter": "(|(uid=%s)(mail=%s))"}}, "userSearch.filter", "exactly one %s"),
        ({"userSearch": {**SEARCH, "filter": "uid=%s"}}, "userSearch.filter", "in parentheses"),
        ({"userSearch": {**SEARCH, "filter": "(&(uid=%s)"}}, "userSearch.filter", "not a valid LDAP filter"),
        ({"userSearch": {**SEARCH, "filter": "(%s=alice)"}}, "userSearch.filter", "inside an assertion value"),
        ({"userSearch": {**SEARCH, "filter": "(%s=*)"}}, "userSearch.filter", "inside an assertion value"),
        ({"userSearch": {**SEARCH, "scope": "base"}}, "userSearch.scope", "must be one"),
        ({"userSearch": {**SEARCH, "credentialsSecretRef": {"name": "nope"}}}, "userSearch.credentialsSecretRef",
         "dangling reference: no Secret default/nope"),
        ({"userSearch": {**SEARCH, "bindDn": "x"}}, "userSearch.bindDn", "unknown field"),
        ({"userSearch": "uid=%s"}, "userSearch", "must be a mapping"),
        ({"groupSearch": {}}, "groupSearch.baseDn", "is required"),
        ({"groupSearch": {**GROUPS, "filter": "(member=x)"}}, "groupSearch.filter", "exactly one %s"),
        ({"groupSearch": {**GROUPS, "nameAttribute": "common name"}}, "groupSearch.nameAttribute", "not an attribute"),
        ({"groupSearch": {**GROUPS, "nested": "yes"}}, "groupSearch.nested", "true or false"),
        ({"groupSearch": {**GROUPS, "maxDepth": 3}}, "groupSearch.maxDepth", "only with nested: true"),
        ({"groupSearch": {**GROUPS, "nested": True, "maxDepth": 0}}, "groupSearch.maxDepth", "between 1 and 64"),
        ({"groupSearch": GROUPS, "membershipAttributeName": "memberOf"}, "membershipAttributeName",
         "applies only to the membership-attribute lookup"),
        ({"groupSearch": GROUPS, "searchFilter": "(uid=*)"}, "searchFilter", "applies only to the membership"),
        ({"groupSearch": GROUPS, "disableGroupChecking": True, "allowedGroups": []}, "groupSearch", "is never used"),
        ({"groupsHeader": "Authorization"}, "groupsHeader", "pick another"),
        ({"userHeader": "X-Forwarded-For"}, "userHeader", "pick another"),
        ({"groupsHeader": "X Groups"}, "groupsHeader", "not a valid HTTP header name"),
        ({"groupsHeader": ""}, "groupsHeader", "must not be empty"),
        ({"groupsHeader": "X-Who", "userHeader": "x-who"}, "userHeader", "must differ from groupsHeader"),
        ({"keepCredentials": "no"}, "keepCredentials", "true or false"),
    ])
    def test_invalid_search_fields(self, fields: dict[str, Any], where: str, reason: str) -> None:
        text = problems(ldap_config(ADDR, **fields))
        assert f"{AC}.{where}: " in text and reason in text, text

    def test_neither_template_nor_search(self) -> None:
        text = ldap_config(ADDR).replace('"userDnTemplate": "uid=%s,ou=people,dc=example,dc=org", ', "")
        assert "userDnTemplate: is required (e.g. uid=%s,ou=people,dc=example,dc=org), or set userSearch" \
            in problems(text)

    def test_every_problem_is_reported_at_once(self) -> None:
        text = problems(ldap_config(ADDR, {"keepCredentials": 1}, userSearch={"baseDn": "x", "filter": "(uid=x)",
                                                                            "scope": "all"},
                                    groupSearch={"nested": False, "maxDepth": 2}, groupsHeader="Host",
                                    requestTimeout="soon"))
        for where in ("configs[0].ldap.userSearch.baseDn: is not a valid DN",
                      "configs[0].ldap.userSearch.filter: must contain exactly one %s",
                      "configs[0].ldap.userSearch.scope: must be one",
                      "configs[0].ldap.groupSearch.baseDn: is required",
                      "configs[0].ldap.groupSearch.maxDepth: applies only with nested: true",
                      "configs[0].ldap.groupsHeader: 'Host' is a header",
                      "configs[0].ldap.requestTimeout: must be a duration",
                      "configs[1].ldap.keepCredentials: must be true or false"):
            assert where in text, (where, text)

    def test_defaults_of_the_new_fields(self) -> None:
        tester = make_tester(ldap_config(ADDR, userSearch=SEARCH, groupSearch=GROUPS))
        (compiled,) = tester.snapshot.plugin_compiled["extauth"]
        (cfg,) = tuple(e.checker.cfg for e in compiled.entries)
        assert cfg.user_dn_template == "" and cfg.user_search.scope == _ber.SCOPE_SUB
        assert cfg.user_search.account is None
        gs = cfg.group_search
        assert (gs.filter.text, gs.name_attribute, gs.nested, gs.max_depth) == ("(member=%s)", "cn", False, 8)
        assert (cfg.groups_header, cfg.user_header, cfg.keep_credentials) == (b"", b"", False)
        assert compiled.credential_headers == (b"authorization",)

    def test_credentials_are_kept_only_when_every_config_keeps_them(self) -> None:
        one = make_tester(ldap_config(ADDR, keepCredentials=True)).snapshot.plugin_compiled["extauth"][0]
        assert one.credential_headers == ()
        two = make_tester(ldap_config(ADDR, {"keepCredentials": False}, keepCredentials=True))
        assert two.snapshot.plugin_compiled["extauth"][0].credential_headers == (b"authorization",)

    def test_a_changed_search_is_another_cache(self) -> None:
        a = ldap_configs(make_tester(ldap_config(ADDR, userSearch=SEARCH)))[0]
        b = ldap_configs(make_tester(ldap_config(ADDR, userSearch=SEARCH)))[0]
        c = ldap_configs(make_tester(ldap_config(ADDR, userSearch={**SEARCH, "filter": "(cn=%s)"})))[0]
        assert a == b and hash(a) == hash(b)
        assert a != c

    @settings(max_examples=300, deadline=None)
    @given(st.sampled_from(TEMPLATES), values)
    def test_filled_template_is_what_ldaptor_encodes_for_the_escaped_text(self, text: str, value: str) -> None:
        template = compile_filter(text)
        assert template.show(value) == text.replace("%s", pureldap.escape(value))
        assert template.encode(value) == parse_filter(template.show(value)).toWire()

    @settings(max_examples=100, deadline=None)
    @given(st.sampled_from(TEMPLATES), st.lists(values, min_size=1, max_size=5))
    def test_any_of_several_values_is_an_or_filter(self, text: str, several: list[str]) -> None:
        template = compile_filter(text)
        expected = template.show(several[0]) if len(several) == 1 else \
            "(|" + "".join(template.show(v) for v in several) + ")"
        assert template.encode_any(several) == parse_filter(expected).toWire()

    @settings(max_examples=200, deadline=None)
    @given(st.integers(min_value=1, max_value=_ber.MAX_ID), st.binary(max_size=100),
           st.sampled_from([_ber.SCOPE_BASE, _ber.SCOPE_ONE, _ber.SCOPE_SUB]), st.integers(0, 2**31 - 1),
           st.lists(st.binary(min_size=1, max_size=20), max_size=3))
    def test_search_request_with_a_scope_is_what_ldaptor_sends(self, msg_id: int, base: bytes, scope: int, size: int,
                                                               attrs: list[bytes]) -> None:
        flt = parse_filter("(uid=x)")
        ours = _ber.search_request(msg_id, base, flt.toWire(), attrs, size, 3, scope=scope)
        theirs = pureldap.LDAPMessage(pureldap.LDAPSearchRequest(
            baseObject=base, scope=scope, derefAliases=pureldap.LDAP_DEREF_neverDerefAliases, sizeLimit=size,
            timeLimit=3, typesOnly=0, filter=flt, attributes=attrs), id=msg_id).toWire()
        assert ours == theirs

    def test_template_marker_must_sit_in_a_value(self) -> None:
        encoded = parse_filter("(uid=MARK)").toWire()
        assert _ber.FilterTemplate(encoded, b"MARK").encode(b"*") == parse_filter("(uid=\\2a)").toWire()
        for text in ("(MARK=x)", "(MARK=*)", "(uid:MARK:=x)", "(uid=x)"):
            with pytest.raises(ValueError):
                _ber.FilterTemplate(parse_filter(text).toWire(), b"MARK")

    # ---------------------------------------------------------------------------
    # Header values and group names
    # ---------------------------------------------------------------------------


    @pytest.mark.parametrize("name,encoded", [
        ("managers", b"managers"),
        ("Domain Admins", b"Domain Admins"),
        ("admins,root", b"admins%2Croot"),
        ("100%", b"100%25"),
        ("caf\u00e9", b"caf%C3%A9"),
        ("a\r\nX-Evil: 1", b"a%0D%0AX-Evil: 1"),
        (" padded ", b"%20padded%20"),
    ])
    def test_header_text(self, name: str, encoded: bytes) -> None:
        assert header_text(name) == encoded
        assert unquote(encoded.decode("ascii")) == name

    @settings(deadline=None)
    @given(st.text(max_size=40))
    def test_header_text_never_splits_or_breaks_a_header(self, name: str) -> None:
        data = header_text(name)
        assert b"," not in data and all(0x20 <= b < 0x7F for b in data)
        assert data == data.strip(b" ")
        assert unquote(data.decode("ascii")) == name

    @pytest.mark.parametrize("dn,name", [
        ("cn=managers,ou=groups,dc=example,dc=org", "managers"),
        ("CN=Domain Admins,CN=Users,DC=corp,DC=example,DC=com", "Domain Admins"),
        ("cn=a\\,b,dc=org", "a,b"),
        ("cn=caf\\C3\\A9,dc=org", "caf\u00e9"),
    ])
    def test_group_name_is_the_first_rdn_value(self, dn: str, name: str) -> None:
        assert first_value(dn) == name

    def test_group_name_of_no_dn(self) -> None:
        with pytest.raises(InvalidDN):
            first_value("")

    def test_check_counts_and_locates_each_problem_of_an_auth_config_once(self, tmp_path: Any) -> None:
        """``twistgw check``: N problems of one AuthConfig are N problems, each
    at its own line and field of the AuthConfig, not repeated for a second
    virtual service referring to it."""
        import copy
        import re
        import subprocess
        import sys

        import yaml

        text = ldap_config("http://x:1", {"pool": {"maxSize": 0}}, groupsHeader="Host", requestTimeout="soon",
                           userSearch={"baseDn": "x", "filter": "(uid=x)"})
        docs = list(yaml.safe_load_all(text))
        second = copy.deepcopy(next(d for d in docs if d["kind"] == "VirtualService"))
        second["metadata"]["name"], second["spec"]["virtualHost"]["domains"] = "vs2", ["two.example.com"]
        (tmp_path / "config.yaml").write_text(yaml.safe_dump_all(docs + [second], default_flow_style=False))
        out = subprocess.run([sys.executable, "-m", "twistgw", "check", str(tmp_path)], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 1, out.stdout + out.stderr
        lines = [x for x in out.stdout.splitlines() if x.startswith("  ")]
        fields = ["address", "userSearch.baseDn", "userSearch.filter", "groupsHeader", "requestTimeout"]
        expected = [f"spec.configs[0].ldap.{f}" for f in fields] + [f"spec.configs[1].ldap.{f}" for f in fields] \
            + ["spec.configs[1].ldap.pool.maxSize"]
        assert f"INVALID, {len(expected)} problem(s):" in out.stdout, out.stdout
        found = [re.search(r"AuthConfig default/ldap: (\S+): ", x).group(1) for x in lines]
        assert sorted(found) == sorted(expected), out.stdout
        numbers = [int(re.search(r", line (\d+):", x).group(1)) for x in lines]
        assert len(set(numbers)) == len(numbers)  # each at its own line
