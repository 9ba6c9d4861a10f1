"""Shadow mode (evaluate, log and count, never deny) and the linear-time regex."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from rbac_helpers import claims_headers, config, make_tester, policy, route
from twisted.logger import Logger, formatEvent

import twistgw_rbac
from twistgw.regex import SafeRegex, UnsafePattern

from support.trial import TestCase


def count(name: str, decision: str) -> float:
    return REGISTRY.get_sample_value(name, {"decision": decision}) or 0.0


SAFE_PATTERNS = [
    r"a(b|c)*\d", r"[^x-z]+", r"(ab|a)(bc|c)?", r"a{2,4}b?", r"(?:ab){1,3}", r".*b.*",
    r"[\w-]+@[\w.]+", r"\s*\S+", r"x|y|", r"(a*?)b+?", r"[a\-z.]{0,3}", r"\D\W?",
    r"system:serviceaccount:[a-z0-9-]+:(builder|deployer)",
]


class RbacShadowRegexTests(TestCase):
    async def test_shadow_mode_counts_and_logs_but_never_denies(self, monkeypatch: Any) -> None:
        events: list[dict[str, Any]] = []
        monkeypatch.setattr(twistgw_rbac, "_log", Logger(observer=events.append))
        t = make_tester(config({"shadow": True, "policies": {"p": policy({"sub": "alice"}, methods=["GET"])}}))
        name = "twistgw_rbac_shadow_decisions_total"
        allow0, deny0 = count(name, "allow"), count(name, "deny")
        enforced0 = count("twistgw_rbac_decisions_total", "deny")

        r = await t.request("GET", "http://gw.test/x", headers=claims_headers({"sub": "bob"}))
        assert r.status == 200 and r.deny is None
        assert r.trace[-1][2].reason.startswith("shadow mode, not enforced; would deny: no policy matched")
        r = await t.request("POST", "http://gw.test/x", headers=claims_headers({"sub": "alice"}))
        assert r.status == 200
        r = await t.request("GET", "http://gw.test/x")  # no claims at all
        assert r.status == 200
        r = await t.request("GET", "http://gw.test/x", headers=claims_headers({"sub": "alice"}))
        assert r.status == 200
        assert r.trace[-1][2].reason == "shadow mode, not enforced; would allow: policy 'p' principals[0] matched"

        assert count(name, "deny") - deny0 == 3
        assert count(name, "allow") - allow0 == 1
        assert count("twistgw_rbac_decisions_total", "deny") == enforced0  # nothing enforced
        texts = [formatEvent(e) for e in events]
        assert len(texts) == 4
        assert texts[0].startswith("RBAC shadow mode: would deny GET /x (virtual service default/vs")
        assert texts[3].startswith("RBAC shadow mode: would allow GET /x")
        assert "bob" not in " ".join(texts)

    async def test_shadow_on_one_route_does_not_weaken_another(self) -> None:
        t = make_tester(config({"policies": {"p": policy({"sub": "alice"})}}, routes=[
            route("/try", {"rbac": {"shadow": True, "policies": {"n": policy({"sub": "root"})}}}),
            route("/"),
        ]))
        bob = claims_headers({"sub": "bob"})
        assert (await t.request("GET", "http://gw.test/try", headers=bob)).status == 200
        assert (await t.request("GET", "http://gw.test/x", headers=bob)).status == 403

    async def test_enforced_decisions_are_counted(self) -> None:
        t = make_tester(config({"policies": {"p": policy({"sub": "alice"})}}))
        a0, d0 = count("twistgw_rbac_decisions_total", "allow"), count("twistgw_rbac_decisions_total", "deny")
        await t.request("GET", "http://gw.test/x", headers=claims_headers({"sub": "alice"}))
        await t.request("GET", "http://gw.test/x", headers=claims_headers({"sub": "eve"}))
        await t.request("GET", "http://gw.test/x", headers=claims_headers({"sub": "eve"}))
        assert count("twistgw_rbac_decisions_total", "allow") - a0 == 1
        assert count("twistgw_rbac_decisions_total", "deny") - d0 == 2

    # -- SafeRegex --------------------------------------------------------------------


    @pytest.mark.parametrize("pattern,reason", [
        (r"(a)\1", "backreferences"),
        (r"(?P<x>a)(?P=x)", "backreferences"),
        (r"(?=a)a", "lookahead"),
        (r"(?!a)b", "lookahead"),
        (r"(?<=a)b", "lookahead"),
        (r"(a)?(?(1)b|c)", "conditional"),
        (r"(?>a+)", "atomic"),
        (r"a*+", "possessive"),
        (r"(?:(?:a{100}){100})", "invalid repetition size"),
        (r"a{1001}", "invalid repetition size"),
        ("x" * 1001, "program size is 1005, over the limit of 100"),
        (r"[0-9a-f]{64}", "too complex"),
        (r"[", "invalid regular expression"),
    ])
    def test_unsafe_or_invalid_patterns_are_refused(self, pattern: str, reason: str) -> None:
        with pytest.raises(UnsafePattern, match=re.escape(reason)):
            SafeRegex(pattern)

    @pytest.mark.parametrize("pattern", [
        r"(a+)+", r"(a|a)*", r"(a|aa)+", r".*.*.*.*.*", r"(a*)*", r"(?:a?){10}a{10}", r"(\w+\s?)*",
    ])
    def test_catastrophic_patterns_run_in_linear_time(self, pattern: str) -> None:
        rx = SafeRegex(pattern + "!")
        subject = "a" * 65536
        start = time.perf_counter()
        assert rx.fullmatch(subject) is False
        # any length: no cut-off (only the bounded repeat cannot absorb 64 KiB)
        assert rx.fullmatch(subject + "!") is (pattern != r"(?:a?){10}a{10}")
        assert time.perf_counter() - start < 0.5

    def test_anchors_and_flags_are_re2s(self) -> None:
        for p in (r"^abc$", r"\Aabc\z", r"^abc", r"abc$", r"^abc$|^xyz$", r"(?i)ABC"):
            rx = SafeRegex(p)
            assert rx.fullmatch("abc") and not rx.fullmatch("abc\n") and not rx.fullmatch("xabc")
        assert SafeRegex(r"a\bb|a\b").fullmatch("a") and not SafeRegex(r"a\bb").fullmatch("ab")

    def test_a_long_subject_is_matched_not_cut_off(self) -> None:
        rx = SafeRegex(r"[a-z]*[0-9]")
        assert rx.fullmatch("a" * 100_000 + "1") is True
        assert rx.fullmatch("ab" + "\u4e00" + "1") is False

    @settings(max_examples=400, deadline=None)
    @given(pattern=st.sampled_from(SAFE_PATTERNS),
           subject=st.text(alphabet="abcxyz0123 -_@.:\n\u00e9\u0663", max_size=12))
    def test_matches_exactly_like_python_re(self, pattern: str, subject: str) -> None:
        # RE2's \d, \w and \s are ASCII classes: Python's re.ASCII
        assert SafeRegex(pattern).fullmatch(subject) == bool(re.fullmatch(pattern, subject, re.ASCII))

    @pytest.mark.parametrize("subject", [
        "system:serviceaccount:ci:builder", "system:serviceaccount:ci:deployer", "ab", "abc", "abbbc",
    ])
    def test_matches_like_python_re_on_fixed_cases(self, subject: str) -> None:
        for pattern in SAFE_PATTERNS:
            assert SafeRegex(pattern).fullmatch(subject) == bool(re.fullmatch(pattern, subject, re.ASCII)), pattern
