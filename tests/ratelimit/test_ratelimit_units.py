"""The rate-limit plugins in memory: options refused with their field,
descriptor and action semantics of Gloo's guides, the local token bucket,
where the plugins sit in the chain. No sockets (Redis-backed behaviour is
in test_ratelimit_redis.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from rl_helpers import PLUGINS, UPSTREAM, WITH_AUTH, config, per, rate_limit_config, route

from twistgw import ConfigError, RequestContext
from twistgw.api.headers import Headers
from twistgw.options import Problems
from twistgw.testing import ChainTester

from support.trial import TestCase
from twistgw_ratelimit._actions import cluster_name, parse_rate_limits
from twistgw_ratelimit._descriptors import parse_descriptor_set, resolve
from twistgw_ratelimit._limits import RateLimit
from twistgw_ratelimit._local import BucketSpec, TokenBucket

VH = "spec.virtualHost.options"


def issues(text: str, plugins: Any = PLUGINS) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        ChainTester.from_yaml(text, plugins)
    return [(i.field, i.reason) for i in info.value.issues]


def domain(descriptors: Any = None, set_descriptors: Any = None) -> Any:
    problems = Problems()
    found = parse_descriptor_set("settings", descriptors, set_descriptors, (), problems)
    problems.raise_if_any()
    return found


def actions(raw: Any) -> Any:
    problems = Problems()
    found = parse_rate_limits(raw, ("rateLimits",), problems)
    problems.raise_if_any()
    return found


def ctx(headers: dict[str, str] | None = None, method: str = "GET", address: str = "10.0.0.1",
        claims: dict[str, Any] | None = None, upstream: str = "") -> RequestContext:
    h = Headers()
    for k, v in (headers or {}).items():
        h.setRawHeaders(k.encode(), [v.encode()])
    c = RequestContext(method, "/p", b"", h, "example.com", address)
    c.claims = claims
    c.upstream = upstream
    return c


def hits_of(rules: Any, raw_actions: Any, request: RequestContext) -> list[tuple[str, int]]:
    """(rule label, limit) of every rule the request counts against."""
    ordered, sets = [], []
    for entry in actions(raw_actions):
        tup = entry.ordered(request)
        if tup is not None:
            ordered.append(tup)
        members = entry.as_set(request)
        if members is not None:
            sets.append(members)
    return [(h.label, h.limit.requests_per_unit) for h in resolve(rules, ordered, sets)]


TYPE_AND_NUMBER = [{"actions": [{"requestHeaders": {"descriptorKey": "type", "headerName": "x-type"}}]},
                   {"actions": [{"requestHeaders": {"descriptorKey": "type", "headerName": "x-type"}},
                                {"requestHeaders": {"descriptorKey": "number", "headerName": "x-number"}}]}]


class DescriptorTests(TestCase):
    """The Envoy API guide's descriptors, matched as its text says."""

    def test_generic_key(self) -> None:
        rules = domain([{"key": "generic_key", "value": "per-second", "rateLimit": per(2, "SECOND")}])
        assert hits_of(rules, [{"actions": [{"genericKey": {"descriptorValue": "per-second"}}]}], ctx()) == [
            ("settings:generic_key=per-second", 2)]
        assert hits_of(rules, [{"actions": [{"genericKey": {"descriptorValue": "other"}}]}], ctx()) == []

    def test_header_value_any_and_exact(self) -> None:
        spec = [{"actions": [{"requestHeaders": {"descriptorKey": "type", "headerName": "x-type"}}]}]
        anyvalue = domain([{"key": "type", "rateLimit": per(2, "MINUTE")}])
        assert hits_of(anyvalue, spec, ctx({"x-type": "a"})) == [("settings:type", 2)]
        assert hits_of(anyvalue, spec, ctx()) == []  # no header: no descriptor
        exact = domain([{"key": "type", "value": "example", "rateLimit": per(2, "MINUTE")}])
        assert hits_of(exact, spec, ctx({"x-type": "other"})) == []
        assert hits_of(exact, spec, ctx({"x-type": "example"})) == [("settings:type=example", 2)]

    def test_each_value_is_its_own_counter(self) -> None:
        rules = domain([{"key": "type", "rateLimit": per(2, "MINUTE")}])
        (entry,) = actions([{"actions": [{"requestHeaders": {"descriptorKey": "type", "headerName": "x-type"}}]}])
        a = rules.match(entry.ordered(ctx({"x-type": "a"})))
        b = rules.match(entry.ordered(ctx({"x-type": "b"})))
        assert a.key != b.key and a.label == b.label

    def test_tuple_order_matters(self) -> None:
        rules = domain([{"key": "type", "descriptors": [{"key": "number", "rateLimit": per(1, "MINUTE")}]}])
        both = {"x-type": "a", "x-number": "1"}
        assert hits_of(rules, TYPE_AND_NUMBER[1:], ctx(both)) == [("settings:type.number", 1)]
        reversed_actions = [{"actions": list(reversed(TYPE_AND_NUMBER[1]["actions"]))}]
        assert hits_of(rules, reversed_actions, ctx(both)) == []
        assert hits_of(rules, TYPE_AND_NUMBER[:1], ctx(both)) == []  # the 'type' node has no limit

    def test_nested_limits_both_count(self) -> None:
        rules = domain([{"key": "type", "rateLimit": per(1, "MINUTE"),
                         "descriptors": [{"key": "number", "rateLimit": per(1, "MINUTE")}]}])
        assert hits_of(rules, TYPE_AND_NUMBER, ctx({"x-type": "a", "x-number": "1"})) == [
            ("settings:type", 1), ("settings:type.number", 1)]

    def test_weight_keeps_only_the_heaviest(self) -> None:
        rules = domain([{"key": "type", "rateLimit": per(1, "MINUTE"),
                         "descriptors": [{"key": "number", "weight": 1, "rateLimit": per(10, "MINUTE")}]}])
        assert hits_of(rules, TYPE_AND_NUMBER, ctx({"x-type": "a", "x-number": "1"})) == [
            ("settings:type.number", 10)]
        assert hits_of(rules, TYPE_AND_NUMBER, ctx({"x-type": "a"})) == [("settings:type", 1)]

    def test_always_apply_overrides_weight(self) -> None:
        rules = domain([{"key": "type", "alwaysApply": True, "rateLimit": per(1, "MINUTE"),
                         "descriptors": [{"key": "number", "weight": 1, "rateLimit": per(10, "MINUTE")}]}])
        assert hits_of(rules, TYPE_AND_NUMBER, ctx({"x-type": "a", "x-number": "1"})) == [
            ("settings:type", 1), ("settings:type.number", 10)]

    def test_per_minute_and_per_second_by_address(self) -> None:
        rules = domain([
            {"key": "generic_key", "value": "per-minute",
             "descriptors": [{"key": "remote_address", "rateLimit": per(20, "MINUTE")}]},
            {"key": "generic_key", "value": "per-second",
             "descriptors": [{"key": "remote_address", "rateLimit": per(2, "SECOND")}]}])
        spec = [{"actions": [{"genericKey": {"descriptorValue": v}}, {"remoteAddress": {}}]}
                for v in ("per-minute", "per-second")]
        assert hits_of(rules, spec, ctx()) == [("settings:generic_key=per-minute.remote_address", 20),
                                               ("settings:generic_key=per-second.remote_address", 2)]

    def test_method_pseudo_header(self) -> None:
        rules = domain([{"key": "remote_address", "rateLimit": per(5, "MINUTE")},
                        {"key": "method", "value": "GET",
                         "descriptors": [{"key": "remote_address", "rateLimit": per(2, "MINUTE")}]}])
        spec = [{"actions": [{"remoteAddress": {}}]},
                {"actions": [{"requestHeaders": {"descriptorKey": "method", "headerName": ":method"}},
                             {"remoteAddress": {}}]}]
        assert hits_of(rules, spec, ctx(method="GET")) == [("settings:remote_address", 5),
                                                          ("settings:method=GET.remote_address", 2)]
        assert hits_of(rules, spec, ctx(method="POST")) == [("settings:remote_address", 5)]

    def test_set_descriptors_ignore_order_and_extra_keys(self) -> None:
        rules = domain(set_descriptors=[{"simpleDescriptors": [{"key": "type", "value": "a"},
                                                               {"key": "number", "value": "one"}],
                                         "rateLimit": per(1, "MINUTE")}])
        spec = [{"setActions": [{"requestHeaders": {"descriptorKey": k, "headerName": f"x-{k}"}}
                                for k in ("number", "type", "color")]}]
        assert hits_of(rules, spec, ctx({"x-type": "a", "x-number": "one", "x-color": "blue"})) == [
            ("settings:set[0]", 1)]
        assert hits_of(rules, spec[:1], ctx({"x-type": "a", "x-color": "blue"})) == []

    def test_set_rule_priority_and_always_apply(self) -> None:
        first = {"simpleDescriptors": [{"key": "type"}, {"key": "number"}], "rateLimit": per(10, "MINUTE")}
        second = {"simpleDescriptors": [{"key": "type"}], "rateLimit": per(5, "MINUTE")}
        spec = [{"setActions": [{"requestHeaders": {"descriptorKey": k, "headerName": f"x-{k}"}}
                                for k in ("type", "number")]}]
        both = ctx({"x-type": "a", "x-number": "1"})
        assert hits_of(domain(set_descriptors=[first, second]), spec, both) == [("settings:set[0]", 10)]
        always = dict(second, alwaysApply=True)
        assert hits_of(domain(set_descriptors=[first, always]), spec, both) == [
            ("settings:set[0]", 10), ("settings:set[1]", 5)]

    def test_all_encompassing_set_rule(self) -> None:
        rules = domain(set_descriptors=[{"rateLimit": per(10, "MINUTE")}])
        spec = [{"setActions": [{"genericKey": {"descriptorValue": "x"}}]}]
        assert hits_of(rules, spec, ctx()) == [("settings:set[0]", 10)]


class ActionTests(TestCase):
    def test_header_value_match(self) -> None:
        rules = domain([{"key": "header_match", "value": "no-auth", "rateLimit": per(1, "MINUTE")}])
        spec = [{"actions": [{"headerValueMatch": {"descriptorValue": "no-auth", "expectMatch": False,
                                                   "headers": [{"name": "x-key", "presentMatch": True}]}}]}]
        assert hits_of(rules, spec, ctx()) == [("settings:header_match=no-auth", 1)]
        assert hits_of(rules, spec, ctx({"x-key": "k"})) == []

    @pytest.mark.parametrize("matcher,value,expected", [
        ({"exactMatch": "a"}, "a", True), ({"exactMatch": "a"}, "A", False),
        ({"prefixMatch": "ab"}, "abc", True), ({"suffixMatch": "bc"}, "abc", True),
        ({"regexMatch": r"\d{3}"}, "123", True), ({"regexMatch": r"\d{3}"}, "1234", False),
        ({"rangeMatch": {"start": -10, "end": 0}}, "-1", True), ({"rangeMatch": {"start": -10, "end": 0}}, "0", False),
        ({"rangeMatch": {"start": 0, "end": 10}}, "1.5", False),
        ({"exactMatch": "a", "invertMatch": True}, "a", False),
    ])
    def test_header_matchers(self, matcher: dict[str, Any], value: str, expected: bool) -> None:
        rules = domain([{"key": "header_match", "value": "m", "rateLimit": per(1, "MINUTE")}])
        spec = [{"actions": [{"headerValueMatch": {"descriptorValue": "m",
                                                   "headers": [dict(name="x-h", **matcher)]}}]}]
        assert bool(hits_of(rules, spec, ctx({"x-h": value}))) is expected

    def test_destination_cluster_is_glooish(self) -> None:
        assert cluster_name("gloo-system/echo-1") == "echo-1_gloo-system"
        rules = domain([{"key": "destination_cluster", "value": "echo-1_gloo-system", "rateLimit": per(3, "MINUTE")}])
        spec = [{"actions": [{"destinationCluster": {}}]}]
        assert hits_of(rules, spec, ctx(upstream="gloo-system/echo-1")) == [
            ("settings:destination_cluster=echo-1_gloo-system", 3)]
        assert hits_of(rules, spec, ctx(upstream="")) == []

    def test_claims_of_a_verified_token(self) -> None:
        rules = domain([{"key": "userid", "rateLimit": per(3, "MINUTE")}])
        spec = [{"actions": [{"metadata": {"descriptorKey": "userid", "metadataKey": {
            "key": "envoy.filters.http.jwt_authn", "path": [{"key": "principal"}, {"key": "sub"}]}}}]}]
        assert hits_of(rules, spec, ctx(claims={"sub": "alice"})) == [("settings:userid", 3)]
        assert hits_of(rules, spec, ctx(claims=None)) == []
        assert hits_of(rules, spec, ctx(claims={"sub": 7})) == []  # not a string: no descriptor
        spec[0]["actions"][0]["metadata"]["defaultValue"] = "anonymous"
        assert hits_of(rules, spec, ctx(claims=None)) == [("settings:userid", 3)]

    def test_values_cannot_forge_another_bucket(self) -> None:
        rules = domain([{"key": "a", "descriptors": [{"key": "b", "rateLimit": per(1, "MINUTE")}]}])
        spec = [{"actions": [{"requestHeaders": {"descriptorKey": "a", "headerName": "x-a"}},
                             {"requestHeaders": {"descriptorKey": "b", "headerName": "x-b"}}]}]
        (one,) = actions(spec)
        k1 = rules.match(one.ordered(ctx({"x-a": "1|b=2", "x-b": "3"}))).key
        k2 = rules.match(one.ordered(ctx({"x-a": "1", "x-b": "2|b=3"}))).key
        assert k1 != k2


class WindowTests(TestCase):
    def test_windows_align_to_the_unit(self) -> None:
        minute = RateLimit(10, "MINUTE")
        assert minute.window(1_000_000_059.9) == 1_000_000_020
        assert minute.window(1_000_000_080) == 1_000_000_080
        assert minute.reset_after(1_000_000_059.9) == 21
        day = RateLimit(1, "DAY")
        assert day.window(86400 * 3 + 5) == 86400 * 3
        assert RateLimit(1, "SECOND").reset_after(5.5) == 1


class TokenBucketTests(TestCase):
    def test_fills_whole_intervals_up_to_max(self) -> None:
        bucket = TokenBucket(BucketSpec(3, 2, 1.0), now=100.0)
        assert [bucket.take(100.0) for _ in range(4)] == [True, True, True, False]
        assert not bucket.take(100.9)
        assert [bucket.take(101.0) for _ in range(3)] == [True, True, False]
        assert [bucket.take(110.0) for _ in range(4)] == [True, True, True, False]  # capped at maxTokens

    def test_same_answers_as_the_refill_computed_on_every_take(self) -> None:
        """take() looks at the refill only near the next fill time; it must
        answer exactly as the bucket that computes the refill on every
        request, at and around interval boundaries too (times that are
        exact sums of intervals, and a float's worth either side)."""
        import math
        import random

        class EveryTake:  # the bucket as first written: the refill on every take
            def __init__(self, spec: BucketSpec, now: float) -> None:
                self.spec, self.tokens, self.last = spec, spec.max_tokens, now

            def take(self, now: float) -> bool:
                spec = self.spec
                if self.tokens < spec.max_tokens:
                    fills = int((now - self.last) / spec.fill_interval)
                    if fills > 0:
                        self.tokens = min(spec.max_tokens, self.tokens + fills * spec.tokens_per_fill)
                        self.last += fills * spec.fill_interval
                else:
                    self.last = now - (now - self.last) % spec.fill_interval
                if self.tokens > 0:
                    self.tokens -= 1
                    return True
                return False

        rng = random.Random(27)
        for spec in (BucketSpec(3, 1, 0.1), BucketSpec(5, 2, 0.05), BucketSpec(1, 1, 1.0), BucketSpec(4, 3, 0.3)):
            start = 12345.678
            fast, reference = TokenBucket(spec, start), EveryTake(spec, start)
            now, answers = start, []
            for _ in range(5000):
                step = rng.choice((0.0, spec.fill_interval / 7, spec.fill_interval, 2.5 * spec.fill_interval))
                now += step
                if rng.random() < 0.2:  # right at, or a float's worth around, a boundary
                    now = rng.choice((math.nextafter(now, 0), now, math.nextafter(now, math.inf)))
                got, expected = fast.take(now), reference.take(now)
                answers.append(got)
                assert got == expected, (spec, now)
                assert fast.tokens == reference.tokens, (spec, now)
            assert True in answers and False in answers  # both answers were exercised


class LocalRatelimitTests(TestCase):
    """localRatelimit through the chain, with no Redis configured at all."""

    def make_tester(self, options: dict[str, Any], routes: Any = None) -> ChainTester:
        tester = ChainTester.from_yaml(config(options, routes, redis=None), PLUGINS)
        # buckets were made at compile time on the real clock: go on from half a second later
        self.clock = [time.monotonic() + 0.5]
        tester.host.plugin("localRatelimit").now = lambda: self.clock[0]
        return tester

    async def test_bucket_refuses_with_envoys_answer(self) -> None:
        tester = self.make_tester({"localRatelimit": {"maxTokens": 2, "tokensPerFill": 1, "fillInterval": "1s"}})
        statuses = [(await tester.request("GET", "http://a.example/")).status for _ in range(3)]
        assert statuses == [200, 200, 429]
        refused = await tester.request("GET", "http://a.example/")
        assert (refused.status, refused.body, refused.decided_by) == (429, b"local_rate_limited", "localRatelimit")
        assert (b"x-envoy-ratelimited", b"true") in refused.response_headers
        self.clock[0] += 1.0
        assert (await tester.request("GET", "http://a.example/")).status == 200
        assert (await tester.request("GET", "http://a.example/")).status == 429

    async def test_route_has_its_own_bucket(self) -> None:
        tester = self.make_tester({"localRatelimit": {"maxTokens": 1}},
                             [route("/own", {"localRatelimit": {"maxTokens": 2}}), route("/")])
        assert [(await tester.request("GET", "http://a/own")).status for _ in range(3)] == [200, 200, 429]
        assert [(await tester.request("GET", "http://a/x")).status for _ in range(2)] == [200, 429]

    async def test_gloos_nested_shape_ratelimit_local_ratelimit(self) -> None:
        """Gloo's local rate limiting guide writes the bucket inside the
        rate-limit extension (RateLimitVhostExtension / RateLimitRouteExtension
        .localRatelimit): the same bucket, no Redis needed."""
        tester = self.make_tester(
            {"ratelimit": {"localRatelimit": {"maxTokens": 1, "tokensPerFill": 1, "fillInterval": "100s"}}},
            [route("/headers", {"ratelimit": {"localRatelimit": {"maxTokens": 3, "tokensPerFill": 3,
                                                                  "fillInterval": "30s"}}}),
             route("/status/200"), route("/ip")])
        assert [(await tester.request("GET", "http://a/headers")).status for _ in range(4)] == [200, 200, 200, 429]
        refused = await tester.request("GET", "http://a/headers")
        assert (refused.body, refused.decided_by) == (b"local_rate_limited", "localRatelimit")
        # /status/200 and /ip share the virtual host's bucket of one token
        assert (await tester.request("GET", "http://a/status/200")).status == 200
        assert (await tester.request("GET", "http://a/ip")).status == 429


class OptionsTests(TestCase):
    @pytest.mark.parametrize("options,field,reason", [
        ({"ratelimitBasic": {"anonymousLimits": per(1, "WEEK")}}, ".ratelimitBasic.anonymousLimits.unit",
         "must be one of SECOND, MINUTE, HOUR, DAY; got 'WEEK'"),
        ({"ratelimitBasic": {"anonymousLimits": per(-1, "MINUTE")}},
         ".ratelimitBasic.anonymousLimits.requestsPerUnit", "must be a whole number from 0"),
        ({"ratelimitBasic": {}}, ".ratelimitBasic", "set anonymousLimits, authorizedLimits or both"),
        ({"ratelimitBasic": {"anonymous": per(1, "MINUTE")}}, ".ratelimitBasic.anonymous", "unknown field"),
        ({"ratelimit": {"rateLimits": [{"actions": [{"sourceCluster": {}}]}]}},
         ".ratelimit.rateLimits[0].actions[0].sourceCluster", "not part of a service mesh"),
        ({"ratelimit": {"rateLimits": [{"actions": [{"genericKey": {}}]}]}},
         ".ratelimit.rateLimits[0].actions[0].genericKey.descriptorValue", "is required"),
        ({"ratelimit": {"rateLimits": [{"actions": [{"headerValueMatch": {"descriptorValue": "v", "headers": [
            {"name": "x", "regexMatch": "(a)\\1"}]}}]}]}},
         ".ratelimit.rateLimits[0].actions[0].headerValueMatch.headers[0].regexMatch", "not a safe regular"),
        ({"ratelimit": {"rateLimits": [{"actions": [{"metadata": {"descriptorKey": "k", "metadataKey": {
            "key": "io.solo.foo", "path": [{"key": "x"}]}}}]}]}},
         ".ratelimit.rateLimits[0].actions[0].metadata.metadataKey", "verified JWT claims only"),
        ({"ratelimit": {"includeVhRateLimits": True, "rateLimits": []}}, ".ratelimit.includeVhRateLimits",
         "unknown field"),
        ({"ratelimit": {"rateLimits": [{"actions": [{"metadata": {"descriptorKey": "k", "source": "ROUTE_ENTRY",
            "metadataKey": {"key": "envoy.filters.http.jwt_authn", "path": [{"key": "principal"}, {"key": "sub"}]}}}]}]}},
         ".ratelimit.rateLimits[0].actions[0].metadata.source", "only DYNAMIC metadata"),
        ({"ratelimit": {"rateLimits": [{}]}}, ".ratelimit.rateLimits[0]", "needs actions or setActions"),
        ({"localRatelimit": {"maxTokens": 0}}, ".localRatelimit.maxTokens", "at least 1"),
        ({"localRatelimit": {"maxTokens": 1, "fillInterval": "10ms"}}, ".localRatelimit.fillInterval",
         "at least 50ms"),
        ({"ratelimitServer": {}}, ".ratelimitServer", "is a Settings section"),
        ({"rateLimitConfigs": {"refs": []}}, ".rateLimitConfigs.refs", "non-empty list"),
    ])
    def test_refused_with_field(self, options: dict[str, Any], field: str, reason: str) -> None:
        settings = {"ratelimit": {"descriptors": [{"key": "k", "rateLimit": per(1, "MINUTE")}]}}
        found = issues(config(options, settings=settings))
        assert len(found) == 1, found
        assert found[0][0] == VH + field and reason in found[0][1], found

    def test_nested_local_bucket_problems_are_located_where_written(self) -> None:
        found = issues(config({"ratelimit": {"localRatelimit": {"maxTokens": 0}}}, redis=None))
        assert found == [(VH + ".ratelimit.localRatelimit.maxTokens", found[0][1])] and "at least 1" in found[0][1]
        # beside rateLimits, the rest still goes to the counted plugin (which needs Redis)
        (found,) = issues(config({"ratelimit": {"localRatelimit": {"maxTokens": 1},
                                                "rateLimits": [{"actions": [{"genericKey": {"descriptorValue": "x"}}]}]}},
                                 redis=None))
        assert found[0] == VH + ".ratelimit" and "Settings spec.ratelimitServer.redis.address" in found[1]
        # a field the virtual host's extension does not have is not dropped with the bucket
        (found,) = issues(config({"ratelimit": {"localRatelimit": {"maxTokens": 1}, "includeVhRateLimits": True}},
                                 redis=None))
        assert found[0] == VH + ".ratelimit.includeVhRateLimits" and "unknown field" in found[1]

    def test_one_local_bucket_per_options(self) -> None:
        (found,) = issues(config({"localRatelimit": {"maxTokens": 1},
                                  "ratelimitEarly": {"localRatelimit": {"maxTokens": 2}}}, redis=None))
        assert found[0] == VH + ".ratelimitEarly.localRatelimit"
        assert "a second local token bucket" in found[1] and "localRatelimit is the first" in found[1]

    def test_counted_limits_need_redis(self) -> None:
        (found,) = issues(config({"ratelimitBasic": {"anonymousLimits": per(1, "MINUTE")}}, redis=None))
        assert found[0] == VH + ".ratelimitBasic"
        assert "Settings spec.ratelimitServer.redis.address" in found[1]

    def test_settings_are_read_once_per_load(self, monkeypatch) -> None:
        """Settings spec.ratelimitServer and spec.ratelimit are read once per
        load, not for each route (issue 34: they were read twice per route and
        five more times per load)."""
        import twistgw_ratelimit._settings as rl_settings

        made: list[object] = []
        real = rl_settings.ServerSettings
        monkeypatch.setattr(rl_settings, "ServerSettings", lambda *a, **k: made.append(a) or real(*a, **k))
        descriptors: list[object] = []
        real_set = rl_settings.parse_descriptor_set
        monkeypatch.setattr(rl_settings, "parse_descriptor_set",
                            lambda *a, **k: descriptors.append(a) or real_set(*a, **k))
        routes = [route(f"/r{i}", {"ratelimitBasic": {"anonymousLimits": per(1, "MINUTE")},
                                   "ratelimit": {"rateLimits": [{"actions": [{"remoteAddress": {}}]}]},
                                   "localRatelimit": {"maxTokens": 5}}) for i in range(10)]
        text = config(routes=routes, settings={"ratelimit": {"descriptors": [
            {"key": "remote_address", "rateLimit": per(1, "MINUTE")}]}})
        ChainTester.from_yaml(text, PLUGINS)
        assert len(made) == 2  # the Settings check (twistgw_default_options), and the load's one reading
        assert len(descriptors) == 2  # the same for Settings spec.ratelimit

    def test_broken_server_settings_reported_once(self) -> None:
        text = config({"ratelimitBasic": {"anonymousLimits": per(1, "MINUTE")}},
                      settings={"ratelimitServer": {"requestTimeout": "soon", "redis": {"address": "127.0.0.1:1"}}},
                      redis=None)
        assert [f for f, _ in issues(text)] == ["spec.ratelimitServer.requestTimeout"]
        text = config({"ratelimit": {"rateLimits": [{"actions": [{"remoteAddress": {}}]}]}},
                      settings={"ratelimit": {"descriptors": [{"key": "remote_address", "rateLimit": per(1, "WEEK")}]}})
        assert [f for f, _ in issues(text)] == ["spec.ratelimit.descriptors[0].rateLimit.unit"]

    def test_actions_need_descriptors(self) -> None:
        (found,) = issues(config({"ratelimit": {"rateLimits": [{"actions": [{"remoteAddress": {}}]}]}}))
        assert found == (VH + ".ratelimit.rateLimits", found[1]) and "Settings spec.ratelimit" in found[1]

    def test_settings_problems_all_at_once(self) -> None:
        text = config(settings={
            "ratelimitServer": {"denyOnFail": "yes", "requestTimeout": "forever", "ratelimitServerRef": {},
                                "redis": {"address": "nohost"}},
            "ratelimit": {"descriptors": [{"key": "a"}, {"key": "a"}, {"value": "x"}],
                          "setDescriptors": [{"simpleDescriptors": [{"key": "t"}]}]}}, redis=None)
        found = dict(issues(text))
        assert set(found) == {
            "spec.ratelimitServer.denyOnFail", "spec.ratelimitServer.requestTimeout",
            "spec.ratelimitServer.ratelimitServerRef", "spec.ratelimitServer.redis.address",
            "spec.ratelimit.descriptors[1]", "spec.ratelimit.descriptors[2].key",
            "spec.ratelimit.setDescriptors[0].rateLimit"}, found


class ChainOrderTests(TestCase):
    def order(self, options: dict[str, Any], settings: dict[str, Any] | None = None) -> list[str]:
        settings = dict(settings or {})
        settings["ratelimit"] = {"descriptors": [{"key": "remote_address", "rateLimit": per(1, "MINUTE")}]}
        tester = ChainTester.from_yaml(config(options, settings=settings), WITH_AUTH)
        (runtime,) = tester.snapshot.routes.values()
        return [step.plugin for step in runtime.chain]

    OPTIONS = {"jwt": {}, "ratelimitBasic": {"anonymousLimits": per(1, "MINUTE")},
               "ratelimit": {"rateLimits": [{"actions": [{"remoteAddress": {}}]}]},
               "ratelimitEarly": {"rateLimits": [{"actions": [{"remoteAddress": {}}]}]},
               "localRatelimit": {"maxTokens": 5}}

    def test_counted_after_auth_by_default(self) -> None:
        assert self.order(self.OPTIONS) == ["localRatelimit", "ratelimitEarly", "jwt", "ratelimit", "ratelimitBasic"]

    def test_rate_limit_before_auth(self) -> None:
        order = self.order(self.OPTIONS, {"ratelimitServer": {"rateLimitBeforeAuth": True}})
        assert order.index("ratelimit") < order.index("jwt") and order.index("ratelimitBasic") < order.index("jwt")

    async def test_dry_run_contacts_nothing(self) -> None:
        settings = {"ratelimit": {"descriptors": [{"key": "remote_address", "rateLimit": per(1, "MINUTE")}]}}
        tester = ChainTester.from_yaml(config(self.OPTIONS, settings=settings), WITH_AUTH, dry_run=True)
        result = await tester.request("GET", "http://a/")
        shown = [str(d) for _, _, d in result.trace]
        assert result.status == 200
        assert any("would count settings:remote_address (1/MINUTE) in Redis at 127.0.0.1:1" in s for s in shown)


class RouteOptionsTests(TestCase):
    def test_include_vh_rate_limits(self) -> None:
        settings = {"ratelimit": {"descriptors": [
            {"key": "generic_key", "value": "vh", "rateLimit": per(1, "MINUTE")},
            {"key": "generic_key", "value": "route", "rateLimit": per(1, "MINUTE")}]}}
        own = [{"actions": [{"genericKey": {"descriptorValue": "route"}}]}]
        for key in ("ratelimit", "ratelimitRegular", "ratelimitEarly"):  # the same for Gloo's two stages
            vh = {key: {"rateLimits": [{"actions": [{"genericKey": {"descriptorValue": "vh"}}]}]}}
            routes = [route("/with", {key: {"includeVhRateLimits": True, "rateLimits": own}}, name="with"),
                      route("/without", {key: {"includeVhRateLimits": False, "rateLimits": own}}, name="without"),
                      route("/", name="plain")]
            tester = ChainTester.from_yaml(config(vh, routes, settings=settings), PLUGINS)
            labels = {}
            for runtime in tester.snapshot.routes.values():
                (step,) = runtime.chain
                assert step.options.plugin == key
                labels[runtime.route.name] = sorted(h.label for h in step.options.hits(ctx()))
            assert labels == {"with": ["settings:generic_key=route", "settings:generic_key=vh"],
                              "without": ["settings:generic_key=route"], "plain": ["settings:generic_key=vh"]}, key

    async def test_include_vh_rate_limits_with_nothing_to_include_counts_nothing(self) -> None:
        """A route's includeVhRateLimits: true, no rateLimits of its own and none
        on its virtual host: Gloo accepts it and counts nothing; so does twistgw
        (no Redis, no descriptors needed). A local bucket beside it still limits."""
        for key in ("ratelimit", "ratelimitRegular", "ratelimitEarly"):
            routes = [route("/only", {key: {"includeVhRateLimits": True}}, name="only"),
                      route("/empty", {key: {"includeVhRateLimits": True, "rateLimits": []}}, name="empty"),
                      route("/local", {key: {"includeVhRateLimits": True, "localRatelimit": {"maxTokens": 1}}},
                            name="local")]
            tester = ChainTester.from_yaml(config(routes=routes, redis=None), PLUGINS)
            for path in ("/only", "/empty"):
                runtime = next(r for r in tester.snapshot.routes.values() if r.route.name == path[1:])
                (step,) = runtime.chain
                assert step.options.plugin == key and step.options.hits(ctx()) == []
                for _ in range(3):
                    assert (await tester.request("GET", f"http://a{path}")).status == 200, (key, path)
            statuses = [(await tester.request("GET", "http://a/local")).status for _ in range(2)]
            assert statuses == [200, 429], key
        # with rules on the virtual host, the route still adds them (needs Redis and descriptors)
        found = issues(config({"ratelimit": {"rateLimits": [{"actions": [{"remoteAddress": {}}]}]}},
                              [route("/", {"ratelimit": {"includeVhRateLimits": True}})], redis=None))
        assert any("Redis" in reason for _, reason in found), found

    async def test_upstream_on_the_context(self) -> None:
        tester = ChainTester.from_yaml(config(routes=[route("/", upstream="gloo-system/echo-1")], redis=None,
                                              extra=[UPSTREAM]), PLUGINS)
        result = await tester.request("GET", "http://a/")
        assert result.ctx.upstream == "gloo-system/echo-1"


GLOBAL_LIMIT = {"descriptors": [{"key": "generic_key", "value": "count", "rateLimit": per(4, "MINUTE")}],
                "rateLimits": [{"actions": [{"genericKey": {"descriptorValue": "count"}}]}]}


class RateLimitConfigTests(TestCase):
    def make(self, refs: list[dict[str, Any]], *configs: dict[str, Any], namespace: str = "default") -> str:
        return config({"rateLimitConfigs": {"refs": refs}}, extra=list(configs), namespace=namespace)

    def test_referenced_config_compiles_into_its_own_domain(self) -> None:
        text = self.make([{"name": "global-limit", "namespace": "gloo-system"}],
                         rate_limit_config("global-limit", GLOBAL_LIMIT))
        tester = ChainTester.from_yaml(text, PLUGINS)
        (runtime,) = tester.snapshot.routes.values()
        (step,) = runtime.chain
        (hit,) = step.options.hits(ctx())
        assert (hit.label, hit.limit.requests_per_unit) == ("config.gloo-system.global-limit:generic_key=count", 4)

    def test_namespace_defaults_to_the_virtual_services(self) -> None:
        text = self.make([{"name": "global-limit"}], rate_limit_config("global-limit", GLOBAL_LIMIT, "team"),
                         namespace="team")
        ChainTester.from_yaml(text, PLUGINS)  # found in namespace team

    def test_dangling_reference(self) -> None:
        (found,) = issues(self.make([{"name": "nope", "namespace": "gloo-system"}]))
        assert found == (VH + ".rateLimitConfigs.refs[0].name",
                         "dangling reference: no RateLimitConfig gloo-system/nope")

    def test_problems_inside_a_config_are_reported_in_it(self) -> None:
        bad = {"descriptors": [{"key": "generic_key", "rateLimit": per(4, "FORTNIGHT")}],
               "rateLimits": [{"actions": [{"genericKey": {"descriptorValue": "count"}}]}]}
        with pytest.raises(ConfigError) as info:
            ChainTester.from_yaml(self.make([{"name": "bad", "namespace": "gloo-system"}],
                                            rate_limit_config("bad", bad)), PLUGINS)
        (issue,) = info.value.issues
        assert (issue.resource, issue.field) == ("RateLimitConfig gloo-system/bad",
                                                 "spec.raw.descriptors[0].rateLimit.unit")
        assert issue.line is not None

    def test_a_config_of_the_wrong_shape_is_reported_once(self) -> None:
        broken = {"apiVersion": "ratelimit.solo.io/v1alpha1", "kind": "RateLimitConfig",
                  "metadata": {"name": "broken", "namespace": "gloo-system"},
                  "spec": {"raw": {"descriptors": {}, "rateLimit": []}}}
        found = issues(self.make([{"name": "broken", "namespace": "gloo-system"}], broken))
        assert found == [("spec.raw.descriptors", "must be a list, got a mapping"),
                         ("spec.raw.rateLimit", "unknown field 'rateLimit'; expected one of: descriptors,"
                                                " rateLimits, setDescriptors")]

    def test_ours_and_gloos_api_group(self) -> None:
        ours = dict(rate_limit_config("global-limit", GLOBAL_LIMIT), apiVersion="ratelimit.vendor.io/v1alpha1")
        ChainTester.from_yaml(self.make([{"name": "global-limit", "namespace": "gloo-system"}], ours), PLUGINS)
