"""Pure parts of the LDAP plugin: DNs, user-name cleaning, Basic parsing,
options validation, the decision cache, the Secret writer."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from ldap_helpers import PLUGINS, SA_SETTINGS, basic, ldap_config, ldap_configs, make_tester

from twistgw import RequestContext
from twistgw import ConfigError
from twistgw.config.loader import load_text
from twistgw.testing import ChainTester, make_headers
from twistgw_ldap._devdir import DevDirectoryError, check_loopback, read_settings
from twistgw_ldap._dn import InvalidDN, clean_username, format_dn, parse_dn
from twistgw_ldap._cache import DecisionCache
from twistgw_ldap._credentials import password_digest, read_basic
from twistgw_ldap._options import parse_address
from twistgw.options import parse_duration
from twistgw_ldap.secret import SECRET_TYPE, secret_yaml

from support.trial import TestCase


# ---------------------------------------------------------------------------
# Basic credentials
# ---------------------------------------------------------------------------


def ctx_with(headers: Any) -> RequestContext:
    return RequestContext("GET", "/", headers=make_headers(headers))


# ---------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------


def config_error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        make_tester(text)
    assert len(info.value.issues) == 1, str(info.value)
    return str(info.value)


ADDR = "ldap://127.0.0.1:1"
#: each problem is located in the AuthConfig itself (its file, line and field)
AC = "AuthConfig default/ldap: spec.configs[0].ldap"


# ---------------------------------------------------------------------------
# allowedGroups written as in SPEC.md: an unquoted DN in a YAML flow list
# ---------------------------------------------------------------------------


def _groups_of(groups_yaml: str) -> Any:
    text = ldap_config(ADDR).replace(
        '"allowedGroups": ["cn=managers,ou=groups,dc=example,dc=org"]', '"allowedGroups": ' + groups_yaml)
    return text


class LdapUnitsTests(TestCase):
    # ---------------------------------------------------------------------------
    # DNs
    # ---------------------------------------------------------------------------


    @pytest.mark.parametrize("a,b", [
        ("cn=Managers,ou=Groups,dc=example,dc=org", "CN=managers,OU=groups,DC=EXAMPLE,DC=org"),
        ("cn=managers, ou=groups , dc=example,dc=org", "cn=managers,ou=groups,dc=example,dc=org"),
        ("cn=a  b,dc=org", "cn=a b,dc=org"),
        ("cn=a\\,b,dc=org", "cn=a\\2Cb,dc=org"),
        ("cn=a\\,b,dc=org", "cn=a\\2cb,dc=org"),
        ("cn=caf\\C3\\A9,dc=org", "cn=café,dc=org"),
        ("cn=x+uid=y,dc=org", "UID=y+CN=x,dc=org"),
        ("2.5.4.3=x,0.9.2342.19200300.100.1.25=org", "cn=x,dc=org"),
        ("oid.2.5.4.11=x,dc=org", "ou=x,dc=org"),
    ])
    def test_equal_dns(self, a: str, b: str) -> None:
        assert parse_dn(a) == parse_dn(b)
        assert hash(parse_dn(a)) == hash(parse_dn(b))

    @pytest.mark.parametrize("a,b", [
        ("cn=managers,ou=groups,dc=example,dc=org", "cn=managers,ou=groups,dc=example"),
        ("cn=a\\,b,dc=org", "cn=a,cn=b,dc=org"),
        ("cn=a+cn=b,dc=org", "cn=a,cn=b,dc=org"),
        ("cn=ab,dc=org", "cn=a b,dc=org"),
    ])
    def test_different_dns(self, a: str, b: str) -> None:
        assert parse_dn(a) != parse_dn(b)

    @pytest.mark.parametrize("text", ["cn", "cn=a,", "=a", "cn=a\\", "cn=a\\zz", 'cn=a"b', "cn=a,dc", "c n=a",
                                      "cn=\\ff,dc=o", "cn=#abc"])
    def test_invalid_dns(self, text: str) -> None:
        with pytest.raises(InvalidDN):
            parse_dn(text)

    def test_format_round_trips(self) -> None:
        dn = parse_dn("cn=a\\,b+uid=\\#x,dc=org")
        assert parse_dn(format_dn(dn)) == dn

    @settings(deadline=None)
    @given(st.text(max_size=40))
    def test_cleaned_names_never_change_the_dn_structure(self, name: str) -> None:
        cleaned = clean_username(name)
        if not cleaned:
            return
        dn = parse_dn(f"uid={cleaned},ou=people,dc=example,dc=org")
        assert len(dn) == 4 and dn[0][0][0] == "uid" and len(dn[0]) == 1
        assert dn[1:] == parse_dn("ou=people,dc=example,dc=org")
        assert not any(c in cleaned for c in ',+"\\<>;=#*()\x00')
        assert cleaned == cleaned.strip(" ")

    @pytest.mark.parametrize("raw,cleaned", [
        ("al,ice", "alice"), (" alice ", "alice"), ("#alice", "alice"), ("a*l(i)c=e", "alice"),
        ("al\x00ice\n", "alice"), ("Jane Doe", "Jane Doe"), ("jörg", "jörg"), (",,,", ""),
    ])
    def test_clean_username(self, raw: str, cleaned: str) -> None:
        assert clean_username(raw) == cleaned

    def test_read_basic(self) -> None:
        assert read_basic(ctx_with(basic("alice", "a:b:c"))) == ("alice", b"a:b:c")
        assert read_basic(ctx_with(basic("", ""))) == ("", b"")
        assert read_basic(ctx_with({"Authorization": "  basic   " + base64.b64encode(b"u:p").decode() + " "})) \
            == ("u", b"p")
        for bad in ({}, {"Authorization": "Basic"}, {"Authorization": "Digest x"},
                    {"Authorization": "Basic ===="}, {"Authorization": "Basic dXNlcg=="},
                    {"Authorization": "Basic " + "A" * 5000}):
            reason = read_basic(ctx_with(bad))
            assert isinstance(reason, str), bad

    @pytest.mark.parametrize("fields,where,reason", [
        ({"address": "http://x:1"}, "address", "scheme must be ldap:// or ldaps://"),
        ({"address": "ldap://x:99999"}, "address", "invalid port"),
        ({"address": "ldap://h:389/dc=example"}, "address", "give only scheme, host and port"),
        ({"userDnTemplate": "uid=alice,dc=org"}, "userDnTemplate", "exactly one %s"),
        ({"userDnTemplate": "uid=%s,cn=%s"}, "userDnTemplate", "exactly one %s"),
        ({"userDnTemplate": "%s=x,dc=org"}, "userDnTemplate", "not a valid DN"),
        ({"userDnTemplate": "%s"}, "userDnTemplate", "not a valid DN"),
        ({"userDnTemplate": "uid=%s,,dc=org"}, "userDnTemplate", "not a valid DN"),
        ({"allowedGroups": []}, "allowedGroups", "at least one group DN"),
        ({"allowedGroups": ["managers"]}, "allowedGroups[0]", "not a valid DN"),
        ({"allowedGroups": "cn=x"}, "allowedGroups", "must be a list"),
        ({"searchFilter": "uid=*"}, "searchFilter", "in parentheses"),
        ({"searchFilter": "(uid=*"}, "searchFilter", "in parentheses"),
        ({"searchFilter": "(&(uid=*)"}, "searchFilter", "not a valid LDAP filter"),
        ({"membershipAttributeName": "member of"}, "membershipAttributeName", "not an attribute name"),
        ({"disableGroupChecking": "yes"}, "disableGroupChecking", "true or false"),
        ({"pool": {"maxSize": 0}}, "pool.maxSize", "between 1 and 1000"),
        ({"pool": {"maxSize": 2, "initialSize": 3}}, "pool.initialSize", "between 0 and 2"),
        ({"pool": {"size": 2}}, "pool.size", "unknown field"),
        ({"requestTimeout": "soon"}, "requestTimeout", "must be a duration"),
        ({"cacheTtl": "2h"}, "cacheTtl", "a duration from 0s to 3600s"),
        ({"startTLS": True, "address": "ldaps://h"}, "startTLS", "already TLS"),
        ({"tls": {"serverName": "ldap.example.org"}}, "tls", "need an ldaps:// address or startTLS"),
        # TLS peers are verified by name, always: no way to turn it off, whatever the value
        ({"tls": {"insecureSkipVerify": True}, "startTLS": True}, "tls.insecureSkipVerify",
         "always verifies the directory's certificate by name: give the CA with tls.caFile or tls.caPem"),
        ({"tls": {"insecureSkipVerify": False}, "address": "ldaps://h"}, "tls.insecureSkipVerify",
         "and tls.serverName if the address is not the certificate's name"),
        ({"tls": {"caFile": "/nonexistent/ca.pem"}, "startTLS": True}, "tls.caFile", "cannot read"),
        ({"tls": {"caPem": "garbage"}, "startTLS": True}, "tls", "no PEM certificate"),
        ({"groupLookupSettings": {"checkGroupsWithServiceAccount": True}},
         "groupLookupSettings.credentialsSecretRef", "is required"),
        ({"groupLookupSettings": {"checkGroupsWithServiceAccount": True,
                                  "credentialsSecretRef": {"name": "missing"}}},
         "groupLookupSettings.credentialsSecretRef", "dangling reference: no Secret default/missing"),
        ({"groupLookupSettings": {"checkGroupsWithServiceAccount": False,
                                  "credentialsSecretRef": {"name": "ldap-sa"}}},
         "groupLookupSettings.credentialsSecretRef", "is used only with checkGroupsWithServiceAccount: true"),
        ({"groupLookupSettings": {"credentialsSecretRef": {"name": "ldap-sa"}}},
         "groupLookupSettings.credentialsSecretRef", "is used only with checkGroupsWithServiceAccount: true"),
        ({"realm": 'a"b'}, "realm", "no quote"),
        ({"adress": "x"}, "adress", "unknown field"),
    ])
    def test_invalid_ldap_fields(self, fields: dict[str, Any], where: str, reason: str) -> None:
        text = config_error(ldap_config(fields.pop("address", ADDR), **fields))
        assert f"{AC}.{where}: " in text and reason in text, text

    def test_insecure_skip_verify_is_refused_beside_the_other_tls_problems(self) -> None:
        with pytest.raises(ConfigError) as info:
            make_tester(ldap_config(ADDR, startTLS=True,
                                    tls={"insecureSkipVerify": True, "caFile": "/nonexistent/ca.pem"}))
        assert [(i.field, i.reason.split(";")[0].split(":")[0]) for i in info.value.issues] == [
            ("spec.configs[0].ldap.tls.insecureSkipVerify", "is not supported by twistgw"),
            ("spec.configs[0].ldap.tls.caFile", "cannot read /nonexistent/ca.pem")], str(info.value)

    def test_missing_required_fields(self) -> None:
        text = ldap_config(ADDR).replace('"userDnTemplate": "uid=%s,ou=people,dc=example,dc=org", ', "")
        assert "userDnTemplate: is required" in config_error(text)
        text = ldap_config(ADDR).replace('"address": "ldap://127.0.0.1:1", ', "")
        assert "address: is required" in config_error(text)

    def test_every_config_is_validated(self) -> None:
        text = config_error(ldap_config(ADDR, {"allowedGroups": ["nope"]}))
        assert "AuthConfig default/ldap: spec.configs[1].ldap.allowedGroups[0]: is not a valid DN" in text

    def test_dangling_configref_and_bad_options(self) -> None:
        text = ldap_config(ADDR).replace("configRef: {name: ldap,", "configRef: {name: other,")
        assert "extauth.configRef: dangling reference: no AuthConfig default/other" in config_error(text)
        text = ldap_config(ADDR).replace("extauth: {configRef: {name: ldap, namespace: default}}",
                                         "extauth: {configref: {name: ldap}}")
        assert "extauth.configref: unknown field" in config_error(text)

    def test_non_ldap_config_kind_is_refused(self) -> None:
        text = ldap_config(ADDR).replace('configs: [{"ldap":', 'configs: [{"apiKeyAuth":')
        # the extauth plugin knows config types only through the hook: here only ldap is installed
        assert ("spec.configs[0].apiKeyAuth: 'apiKeyAuth' is not an AuthConfig config type any installed plugin"
                " provides (installed: ldap)") in config_error(text)

    def test_service_account_secret_must_have_both_keys(self) -> None:
        text = ldap_config(ADDR, groupLookupSettings=SA_SETTINGS)
        no_pw = text.replace('"password": ', '"passwort": ')
        assert "has no non-empty data.password" in config_error(no_pw)
        not_dn = text.replace(base64.b64encode(b"cn=reader,ou=services,dc=example,dc=org").decode(),
                              base64.b64encode(b"reader").decode())
        assert "data.username must be the service account's DN" in config_error(not_dn)

    def test_defaults(self) -> None:
        # A dry run: the compiled options only, no connection to ldap.example.org.
        tester = ChainTester.from_yaml(ldap_config("ldaps://ldap.example.org"), PLUGINS, dry_run=True)
        (compiled,) = tester.snapshot.plugin_compiled["extauth"]
        (cfg,) = tuple(e.checker.cfg for e in compiled.entries)
        assert (cfg.target.scheme, cfg.target.host, cfg.target.port) == ("ldaps", "ldap.example.org", 636)
        assert cfg.membership_attribute == "memberOf" and cfg.search_filter == "(objectClass=*)"
        assert (cfg.pool_max, cfg.pool_initial, cfg.cache_ttl, cfg.realm) == (5, 2, 60.0, "twistgw")
        assert cfg.service_account is None and not cfg.disable_group_checking
        assert "reader-pw" not in repr(cfg)

    def test_ca_file_relative_to_config_dir(self, tmp_path: Any) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        import datetime

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "test CA")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                .sign(key, hashes.SHA256()))
        (tmp_path / "ca.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (tmp_path / "c.yaml").write_text(ldap_config("ldap://127.0.0.1:1", startTLS=True,
                                                     tls={"caFile": "ca.pem", "serverName": "ldap.local"}))
        from twistgw.testing import ChainTester
        import twistgw_ldap

        tester = ChainTester.from_directory(str(tmp_path), plugins=[("extauth", twistgw_ldap.ExtAuthPlugin)],
                                            load_entry_points=False)
        (cfg,) = ldap_configs(tester)
        assert cfg.target.start_tls and cfg.target.ca_pem and cfg.target.server_name == "ldap.local"

    @pytest.mark.parametrize("text,expected", [
        ("ldap://h:1389", ("ldap", "h", 1389)), ("ldap://h", ("ldap", "h", 389)), ("h:10389", ("ldap", "h", 10389)),
        ("ldaps://h", ("ldaps", "h", 636)), ("LDAPS://H:1636/", ("ldaps", "h", 1636)),
        ("ldap://[::1]:389", ("ldap", "::1", 389)), ("127.0.0.1", ("ldap", "127.0.0.1", 389)),
    ])
    def test_parse_address(self, text: str, expected: tuple[str, str, int]) -> None:
        assert parse_address(text) == expected

    def test_parse_duration(self) -> None:
        assert parse_duration("3s") == 3 and parse_duration("500ms") == 0.5 and parse_duration(2) == 2
        assert parse_duration("1m") == 60 and parse_duration(0) == 0
        assert parse_duration("-1s") is None and parse_duration(True) is None and parse_duration("1d") is None

    # ---------------------------------------------------------------------------
    # Decision cache
    # ---------------------------------------------------------------------------


    def test_decision_cache_expiry_and_keys(self) -> None:
        now = [100.0]
        cache = DecisionCache(60, clock=lambda: now[0])
        key = ("alice", password_digest(b"pw"))
        assert cache.get(key) is None
        cache.put(key, "allowed")
        assert cache.get(key) == "allowed"
        assert cache.get(("alice", password_digest(b"pw2"))) is None
        now[0] += 59.9
        assert cache.get(key) == "allowed"
        now[0] += 0.2
        assert cache.get(key) is None and len(cache) == 0
        off = DecisionCache(0)
        off.put(key, "allowed")
        assert off.get(key) is None and len(off) == 0

    def test_password_digest_is_salted_hmac(self) -> None:
        import hashlib

        assert password_digest(b"pw") == password_digest(b"pw")
        assert password_digest(b"pw") != hashlib.sha256(b"pw").digest()

    # ---------------------------------------------------------------------------
    # Dev directory settings
    # ---------------------------------------------------------------------------


    @pytest.mark.parametrize("listen", ["tcp:3389:interface=127.0.0.1", "tcp:0:interface=127.0.0.5",
                                        "tcp6:3389:interface=\\:\\:1", "tcp:1:interface=localhost",
                                        "unix:/tmp/ldap.sock"])
    def test_loopback_listen_accepted(self, listen: str) -> None:
        check_loopback(listen)

    @pytest.mark.parametrize("listen", ["tcp:3389", "tcp:3389:interface=0.0.0.0", "tcp:1:interface=10.0.0.1",
                                        "ssl:636", "tcp6:3389:interface=\\:\\:"])
    def test_non_loopback_listen_refused(self, listen: str) -> None:
        with pytest.raises(DevDirectoryError):
            check_loopback(listen)

    def test_dev_directory_settings(self) -> None:
        assert read_settings({}, "/etc/gw") is None
        assert read_settings({"devDirectory": {"ldif": "u.ldif"}}, "/etc/gw") == \
            ("/etc/gw/u.ldif", "tcp:3389:interface=127.0.0.1")
        with pytest.raises(DevDirectoryError, match="relative"):
            read_settings({"devDirectory": {"ldif": "u.ldif"}}, "")
        with pytest.raises(DevDirectoryError, match="unknown field"):
            read_settings({"devDirectory": {"ldif": "/u.ldif", "port": 1}}, "")

    # ---------------------------------------------------------------------------
    # The credentials Secret
    # ---------------------------------------------------------------------------


    def test_secret_yaml_round_trips_through_the_loader(self) -> None:
        text = secret_yaml("ldap-sa", "auth", "cn=admin,dc=example,dc=org", "pa:ss wörd")
        doc = yaml.safe_load(text)
        assert doc["type"] == SECRET_TYPE == "extauth.vendor.io/accountcredentials"
        assert doc["metadata"] == {"name": "ldap-sa", "namespace": "auth"}
        assert "pa:ss" not in text  # base64 in data, not stringData
        config = load_text(text)
        secret = config.secrets[("auth", "ldap-sa")]
        assert secret.type == SECRET_TYPE
        assert secret.data == {"username": b"cn=admin,dc=example,dc=org", "password": "pa:ss wörd".encode()}

    def test_secret_yaml_is_usable_by_the_plugin(self) -> None:
        text = ldap_config(ADDR, groupLookupSettings=SA_SETTINGS)
        docs = text.split("---\n")
        docs[-1] = secret_yaml("ldap-sa", "default", "cn=svc,dc=example,dc=org", "s3cret")
        tester = make_tester("---\n".join(docs))
        (cfg,) = ldap_configs(tester)
        assert cfg.service_account.dn == "cn=svc,dc=example,dc=org" and cfg.service_account.password == b"s3cret"

    @pytest.mark.parametrize("args,message", [
        (("Bad_Name", "default", "cn=a,dc=b", "pw"), "--name"),
        (("ok", "", "cn=a,dc=b", "pw"), "--namespace"),
        (("ok", "default", "admin", "pw"), "--username"),
        (("ok", "default", "", "pw"), "--username"),
        (("ok", "default", "cn=a,dc=b", ""), "--password"),
    ])
    def test_secret_yaml_refuses_bad_arguments(self, args: tuple[str, str, str, str], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            secret_yaml(*args)

    def test_json_is_valid_yaml_for_helpers(self) -> None:
        # the helper writes AuthConfig configs as JSON flow YAML
        assert yaml.safe_load(json.dumps({"a": ["b"]})) == {"a": ["b"]}

    def test_unquoted_dn_in_flow_list_is_one_group(self) -> None:
        text = _groups_of("[cn=managers,ou=groups,dc=example,dc=org]")
        assert yaml.safe_load_all(text)  # YAML itself splits it into four items
        (cfg,) = ldap_configs(make_tester(text))
        assert cfg.allowed_groups == {parse_dn("cn=managers,ou=groups,dc=example,dc=org")}

    @pytest.mark.parametrize("groups_yaml,reason", [
        ("[cn=a,ou=groups,dc=example,dc=org, cn=b,ou=groups,dc=example,dc=org]", "several unquoted DNs"),
        ('["cn=a,ou=groups,dc=example,dc=org", ou=groups]', "is a single RDN"),
    ])
    def test_ambiguous_flow_lists_are_refused(self, groups_yaml: str, reason: str) -> None:
        text = config_error(_groups_of(groups_yaml))
        assert reason in text and "quote each DN" in text

    def test_quoted_dns_in_flow_list(self) -> None:
        text = _groups_of('["cn=a,ou=groups,dc=example,dc=org", "cn=b,ou=groups,dc=example,dc=org"]')
        (cfg,) = ldap_configs(make_tester(text))
        assert len(cfg.allowed_groups) == 2
