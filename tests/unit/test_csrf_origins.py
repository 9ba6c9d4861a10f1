"""``csrf``: the source origin is parsed before it is matched (issue 32).

Envoy's CSRF filter compares the *host and port* of ``Origin`` (else
``Referer``) with the request's ``Host``, and matches ``additionalOrigins``
against that ``host[:port]``. Before this, twistgw matched the whole header
value, so ``Referer: https://evil.com/a.trusted.example`` passed
``suffix: .trusted.example`` and Gloo's own guide, ``exact: partner.example``,
refused ``Origin: https://partner.example``. Here: a table of hostile and
honest values through the pipeline (the plan the server carries out), a
hypothesis property against an independent URL parser, the parser's own
rules (``twistgw.core.origins``), ``shadowEnabled`` counted as Envoy's
statistics, and the patterns the loader refuses because they can never
match. End to end: tests/integration/test_csrf_e2e.py.
"""

from __future__ import annotations

import re
import textwrap
import urllib.parse
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from twistgw.core.origins import source_origin, target_origin
from twistgw.core.traffic import CSRF_REQUESTS
from twistgw.testing import ChainTester

from support.trial import TestCase
from test_traffic import TO_BLUE, problems, vs

SUFFIX = ".trusted.example"


def make_tester(origins: str = f"[{{suffix: {SUFFIX}}}, {{exact: partner.example}}]", key: str = "filterEnabled",
           percent: int = 100) -> ChainTester:
    return ChainTester.from_yaml(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n", f"""\
        csrf:
          {key}: {{defaultValue: {{numerator: {percent}, denominator: HUNDRED}}}}
          additionalOrigins: {origins}
        """), [])


_CSRF = make_tester()


async def status(headers: dict[str, str], url: str = "http://api.example.com/x", t: ChainTester = _CSRF) -> int:
    r = await t.request("POST", url, headers)
    return r.status


#: (headers, status): every refusal is a value whose host is not trusted, or
#: that is no http(s) origin at all
TABLE: list[tuple[dict[str, str], int]] = [
    # the bypasses: the trusted name in the path, the query, the fragment
    ({"referer": "https://evil.com/a.trusted.example"}, 403),
    ({"referer": "https://evil.com?x=.trusted.example"}, 403),
    ({"referer": "https://evil.com#.trusted.example"}, 403),
    ({"referer": "https://evil.com/?next=https://a.trusted.example"}, 403),
    # Gloo's CSRF guide: exact partner.example admits the partner's origin
    ({"origin": "https://partner.example"}, 200),
    ({"origin": "http://partner.example"}, 200),
    ({"origin": "https://PARTNER.example"}, 200),  # hosts are case-insensitive: compared lower-cased
    ({"origin": "https://partner.example:443"}, 200),  # the scheme's default port is no port
    ({"origin": "https://partner.example:8443"}, 403),  # another port is another host[:port]
    ({"origin": "https://partner.example.evil.com"}, 403),
    ({"origin": "https://evilpartner.example"}, 403),
    ({"origin": "https://app.trusted.example"}, 200),
    ({"referer": "https://app.trusted.example/page?q=1#top"}, 200),
    ({"origin": "https://trusted.example"}, 403),  # the suffix starts with a dot
    ({"origin": "https://app.trusted.example.evil.com"}, 403),
    ({"origin": "https://app.trusted.example:8443"}, 403),  # suffix matched against host:port, as Envoy does
    # userinfo: the host is what follows the @ (and no browser sends one)
    ({"origin": "https://trusted.example@evil.com"}, 403),
    ({"origin": "https://a.trusted.example@evil.com"}, 403),
    ({"referer": "https://a.trusted.example:x@evil.com/"}, 403),
    ({"referer": "https://evil.com\\@a.trusted.example/"}, 403),
    ({"referer": "https://evil.com\\.trusted.example/"}, 403),
    # trailing dots: kept, so never the host of the dotless pattern
    ({"origin": "https://partner.example."}, 403),
    ({"origin": "https://app.trusted.example."}, 403),
    # IPv6 literals and numeric hosts
    ({"origin": "https://[::1]"}, 403),
    ({"origin": "https://[::1%25eth0]"}, 403),
    ({"origin": "https://[::1"}, 403),
    ({"origin": "https://0x7f.1"}, 403),
    ({"origin": "https://127.1"}, 403),
    # not an origin: refused whatever additionalOrigins says
    ({"origin": "null"}, 403),
    ({"origin": "null", "referer": "https://app.trusted.example/"}, 403),  # Origin present: Referer not read
    ({"origin": "app.trusted.example"}, 403),  # no scheme
    ({"origin": "//app.trusted.example"}, 403),
    ({"origin": "https:/app.trusted.example"}, 403),
    ({"origin": "https:app.trusted.example"}, 403),
    ({"origin": "https:///app.trusted.example"}, 403),
    ({"origin": "file://app.trusted.example"}, 403),
    ({"origin": "chrome-extension://app.trusted.example"}, 403),
    ({"origin": "ws://app.trusted.example"}, 403),
    ({"referer": "data:text/html,app.trusted.example"}, 403),
    ({"referer": "about:blank"}, 403),
    ({"origin": "https://app.trusted.example/"}, 403),  # an Origin has no path
    ({"origin": "https://app.trusted.example:"}, 403),
    ({"origin": "https://app.trusted.example:0"}, 403),
    ({"origin": "https://app.trusted.example:0443"}, 403),
    ({"origin": "https://app.trusted.example:+443"}, 403),
    ({"origin": "https://app.trusted.example:65536"}, 403),
    ({"origin": "https://app%2etrusted.example"}, 403),
    ({"origin": "https://app.trusted.example https://evil.com"}, 403),
    ({"origin": "https://app..trusted.example"}, 403),
    ({"origin": "https://-app.trusted.example"}, 403),
    ({"origin": ""}, 403),  # empty: absent, and no Referer
    ({"origin": "", "referer": "https://app.trusted.example/"}, 200),  # Envoy reads an empty Origin as none
    ({}, 403),
    # the request's own host, with its port
    ({"origin": "http://api.example.com"}, 200),
    ({"referer": "http://api.example.com/form"}, 200),
    ({"origin": "http://api.example.com:80"}, 200),
    ({"origin": "http://api.example.com:8080"}, 403),
    ({"origin": "http://API.example.com"}, 200),
]


class CsrfOriginTests(TestCase):
    @pytest.mark.parametrize("headers, expected", TABLE, ids=[str(i) for i in range(len(TABLE))])
    async def test_hostile_and_honest_values(self, headers: dict[str, str], expected: int) -> None:
        assert await status(headers) == expected, headers

    @pytest.mark.parametrize("url, origin, expected", [
        ("http://api.example.com:8080/x", "http://api.example.com:8080", 200),  # refused before: the port
        ("http://api.example.com:8080/x", "http://api.example.com", 403),
        ("http://[::1]:8080/x", "http://[0::1]:8080", 200),
        ("http://api.example.com./x", "http://api.example.com.", 200),
    ])
    async def test_the_destination_is_the_host_with_its_port(self, url: str, origin: str, expected: int) -> None:
        assert await status({"origin": origin}, url=url) == expected

    async def test_two_origin_headers_are_refused(self) -> None:
        r = await _CSRF.request("POST", "http://api.example.com/x",
                                [("origin", "https://partner.example"), ("origin", "https://partner.example")])
        assert r.status == 403

    async def test_ignore_case_and_regex_match_the_host(self) -> None:
        t = make_tester("[{exact: One.Example, ignoreCase: true}, {prefix: two.}, "
                   "{safeRegex: {regex: 'three[0-9]+\\.example(:[0-9]+)?'}}]")
        for origin, expected in (("https://one.example", 200), ("https://ONE.EXAMPLE", 200),
                                 ("https://two.example", 200), ("https://two.example@evil.com", 403),
                                 ("https://three42.example:8443", 200), ("https://three.example", 403),
                                 ("https://evil.com/three1.example", 403)):
            assert await status({"origin": origin}, t=t) == expected, origin

    async def test_shadow_evaluates_counts_and_admits(self) -> None:
        t = make_tester(key="shadowEnabled")

        def count(result: str) -> int:
            return int(CSRF_REQUESTS.labels("shadow", result).value)

        before = {k: count(k) for k in ("request_valid", "request_invalid", "missing_source_origin")}
        assert await status({"referer": "https://evil.com/a.trusted.example"}, t=t) == 200
        assert await status({}, t=t) == 200
        assert await status({"origin": "https://partner.example"}, t=t) == 200
        after = {k: count(k) for k in before}
        assert {k: after[k] - before[k] for k in after} == {
            "request_valid": 1, "request_invalid": 2, "missing_source_origin": 1}

    async def test_a_safe_method_is_not_evaluated(self) -> None:
        before = CSRF_REQUESTS.labels("enforced", "request_invalid").value
        r = await _CSRF.request("GET", "http://api.example.com/x", {"origin": "https://evil.com"})
        assert r.status == 200 and CSRF_REQUESTS.labels("enforced", "request_invalid").value == before


class OriginParserTests(TestCase):
    @pytest.mark.parametrize("value, expected", [
        ("https://App.Example", "app.example"),
        ("https://app.example:443", "app.example"),
        ("http://app.example:443", "app.example:443"),
        ("https://app.example:80", "app.example:80"),
        ("https://[0:0:0:0:0:0:0:1]:8443", "[::1]:8443"),
        ("https://[::FFFF:1.2.3.4]", "[::ffff:102:304]"),
        ("https://10.0.0.1:8080", "10.0.0.1:8080"),
        ("https://010.0.0.1", None),
        ("https://1.2.3.256", None),
        ("https://a_b.internal", "a_b.internal"),
        ("https://" + "a" * 64 + ".example", None),
        ("https://app.example\x00", None),
        ("https://app.éxample", None),
        ("https://xn--xample-9ua.example", "xn--xample-9ua.example"),
    ])
    def test_origin_values(self, value: str, expected: str | None) -> None:
        assert source_origin([value.encode("utf-8")], None) == expected

    def test_referer_keeps_only_the_authority(self) -> None:
        assert source_origin(None, [b"https://a.example:8443/p/a.th?q=.x#f"]) == "a.example:8443"
        assert source_origin(None, [b"https://a.example?q"]) == "a.example"
        assert source_origin(None, [b"https://a.example/x", b"https://a.example/y"]) is None

    def test_target(self) -> None:
        assert target_origin([b"api.example.com:443"], "https") == "api.example.com"
        assert target_origin([b"api.example.com:443"], "http") == "api.example.com:443"
        assert target_origin([b"API.example.com"], "http") == "api.example.com"
        assert target_origin(None, "http") is None
        assert target_origin([b"a.example", b"b.example"], "http") is None


# -- a property: whatever the value, an admitted one's real host is trusted --

_hosts = st.sampled_from(["a.trusted.example", "trusted.example", "evil.com", "a.trusted.example.evil.com",
                          "A.Trusted.Example", "evil.com.", "[::1]", "127.0.0.1", "partner.example"])
_noise = st.sampled_from(["", "/", "/a.trusted.example", "?x=.trusted.example", "#.trusted.example", "\\",
                          "@a.trusted.example", ":443", ":8443", ":", ":0", "%2e", ".", "@", " ", "\t",
                          "/@a.trusted.example", "\\@a.trusted.example"])
_schemes = st.sampled_from(["https://", "http://", "HTTPS://", "ftp://", "", "//", "https:", "https:/",
                            "https:///", "null", "data:"])


@st.composite
def values(draw: Any) -> str:
    parts = [draw(_schemes)]
    if draw(st.booleans()):
        parts.append(draw(_hosts) + "@")
    parts.append(draw(_hosts))
    parts.extend(draw(st.lists(_noise, max_size=3)))
    return "".join(parts)


def _trusted_by_an_independent_parser(value: str) -> bool:
    """Python's urllib (a different parser) agrees the host is trusted."""
    try:
        split = urllib.parse.urlsplit(value)
        port = split.port
    except ValueError:
        return False
    host = split.hostname or ""
    return (split.scheme in ("http", "https") and split.username is None and "\\" not in split.netloc
            and port in (None, 80, 443) and (host.endswith(SUFFIX) or host == "partner.example"))


class OriginPropertyTests(TestCase):
    @settings(max_examples=400, deadline=None)
    @given(values(), st.booleans())
    @example("https://evil.com/a.trusted.example", False)
    @example("https://a.trusted.example@evil.com", True)
    def test_an_admitted_value_has_a_trusted_host(self, value: str, as_referer: bool) -> None:
        raw = [value.encode("utf-8")]
        origin = source_origin(None, raw) if as_referer else source_origin(raw, None)
        admitted = origin is not None and (origin.endswith(SUFFIX) or origin == "partner.example")
        if admitted:
            assert _trusted_by_an_independent_parser(value), (value, origin)
            assert "@" not in re.split(r"[/?#]", value.split("://", 1)[1], maxsplit=1)[0], value


class CsrfPatternTests(TestCase):
    @pytest.mark.parametrize("matcher, words", [
        ("{exact: 'https://partner.example'}", "never its scheme or a path"),
        ("{prefix: 'https://'}", "never its scheme or a path"),
        ("{suffix: '.trusted.example/'}", "never its scheme or a path"),
        ("{exact: Partner.Example}", "compared in lower case"),
        ("{safeRegex: {regex: 'https://.*'}}", "never its scheme or a path"),
        ("{safeRegex: {regex: 'a.example'}, ignoreCase: true}", "has no effect on safeRegex"),
    ])
    def test_a_pattern_that_can_never_match_is_refused(self, matcher: str, words: str) -> None:
        found = problems(vs(f"- matchers: [{{prefix: /}}]\n  {TO_BLUE}\n", textwrap.dedent(f"""\
            csrf:
              filterEnabled: {{defaultValue: {{numerator: 100}}}}
              additionalOrigins: [{matcher}]
            """)))
        assert len(found) == 1 and found[0][0].startswith("spec.virtualHost.options.csrf.additionalOrigins[0]")
        assert words in found[0][1], found
