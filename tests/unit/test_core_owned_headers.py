"""A plugin's owned request headers (sdk.OwnsRequestHeaders), in memory,
with a third-party plugin written only against the public API: the client's
copies are gone before routing and before any plugin runs, on every route of
every virtual service, including routes that turn the plugin off and a
virtual host whose options no route runs; bad declarations are refused."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from twistgw import sdk
from twistgw.config.loader import ConfigError
from twistgw.sdk.testing import ChainTester
from support.http import vs_yaml

from support.trial import TestCase


@attrs.frozen
class Compiled:
    header: str
    owned_request_headers: tuple[Any, ...]


class Tenant:
    """Sets ``X-Tenant`` itself; records what each request looked like when it ran."""

    def __init__(self, owned: Any = None) -> None:
        self.owned = owned
        self.seen: list[Any] = []

    @sdk.hookimpl
    def twistgw_compile_options(self, options: Any, scope: Any) -> Compiled:
        header = options.get("header", "X-Tenant")
        return Compiled(header, (header,) if self.owned is None else self.owned)

    @sdk.hookimpl
    def twistgw_authenticate(self, ctx: sdk.RequestContext, options: Compiled) -> None:
        self.seen.append(ctx.header_values(options.header))
        ctx.headers.setRawHeaders(options.header, ["acme"])


class Watcher:
    """Owns nothing; records the X-Tenant values it sees (it runs first)."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    @sdk.hookimpl
    def twistgw_plugin_info(self) -> sdk.PluginInfo:
        return sdk.PluginInfo(order=1)

    @sdk.hookimpl
    def twistgw_authenticate(self, ctx: sdk.RequestContext, options: Any) -> None:
        self.seen.append(ctx.header_values("x-tenant"))


def direct(prefix: str, options: str = "", status: int = 200, header: str = "") -> str:
    """A direct-response route (YAML, indented for vs_yaml); with ``header``
    it matches only ``header: evil`` and answers 418."""
    matchers = f"{{prefix: {prefix}" + (f", headers: [{{name: {header}, value: evil}}]}}" if header else "}")
    text = (f"    - matchers: [{matchers}]\n"
            f"      directResponseAction: {{status: {418 if header else status}, body: {'forged' if header else 'ok'}}}\n")
    return text + (f"      options: {options}\n" if options else "")


def config(host_options: str = "{tenant: {}, watch: {}}", **route_options: str) -> str:
    """``a.example.com`` with ``host_options`` (and a route per
    ``route_options`` entry, prefix → options), then a route matching a
    forged X-Tenant; ``b.example.com`` configures no plugin."""
    extra = "".join(direct(prefix, opts) for prefix, opts in route_options.items())
    forged_then_ok = direct("/", header="X-Tenant") + direct("/")
    return (vs_yaml("a", domains=["a.example.com"], options=host_options, routes=extra + forged_then_ok)
            + "---\n" + vs_yaml("b", domains=["b.example.com"], routes=forged_then_ok))


def make(text: str, tenant: Tenant, watcher: Watcher | None = None) -> ChainTester:
    plugins: list[tuple[str, object]] = [("tenant", tenant), ("watch", watcher or Watcher())]
    return ChainTester.from_yaml(text, plugins=plugins, load_entry_points=False)


FORGED = [("X-Tenant", "evil"), ("x-tenant", "evil"), ("X-Other", "kept")]


class OwnedHeadersTests(TestCase):
    async def test_no_plugin_and_no_route_matcher_sees_a_forged_copy(self) -> None:
        tenant, watcher = Tenant(), Watcher()
        t = make(config(**{"/off": "{tenant: {disable: true}}"}), tenant, watcher)
        on = await t.request("GET", "http://a.example.com/x", FORGED)
        assert (on.status, on.body) == (200, b"ok")  # not the route matching X-Tenant: evil
        assert watcher.seen == [[]] and tenant.seen == [[]]  # the first plugin and the owner saw none
        assert on.forwarded_headers.getRawHeaders(b"x-tenant") == [b"acme"]
        assert on.forwarded_headers.getRawHeaders(b"x-other") == [b"kept"]
        for url in ("http://a.example.com/off", "http://b.example.com/x"):
            result = await t.request("GET", url, FORGED)
            assert (result.status, result.body) == (200, b"ok"), url
            assert result.forwarded_headers.getRawHeaders(b"x-tenant") is None, url
            assert result.forwarded_headers.getRawHeaders(b"x-other") == [b"kept"], url
        assert len(tenant.seen) == 1  # the plugin never ran on those

    async def test_without_the_plugin_configured_the_header_is_the_clients(self) -> None:
        t = make(config("{watch: {}}"), Tenant())
        result = await t.request("GET", "http://a.example.com/x", [("X-Tenant", "evil")])
        assert result.status == 418  # nobody owns X-Tenant: routes may match it as sent

    async def test_host_options_that_every_route_turns_off_still_own_their_headers(self) -> None:
        off = "{tenant: {disable: true}}"
        text = vs_yaml("a", options="{tenant: {header: X-Org}}",
                       routes=direct("/", off, header="X-Org") + direct("/", off))
        tenant = Tenant()
        result = await make(text, tenant).request("GET", "http://a.example.com/x", [("X-Org", "evil")])
        assert (result.status, tenant.seen) == (200, [])  # no route runs the plugin, yet X-Org is its own

    @pytest.mark.parametrize("owned,reason", [
        (("X Tenant",), "not an HTTP header name"),
        (("Host",), "may not name Host"),
        ((7,), "not a header name"),
        ("X-Tenant", "must be a collection of header names"),
    ])
    def test_bad_declarations_are_configuration_errors(self, owned: Any, reason: str) -> None:
        with pytest.raises(ConfigError) as info:
            make(config(), Tenant(owned))
        # named plainly (the header it declared), not as a ValueError(...) repr
        assert any("plugin 'tenant' declares its owned request headers wrongly: " in str(i) and reason in str(i)
                   and "ValueError" not in str(i) for i in info.value.issues), info.value.issues

    def test_the_protocol_is_public(self) -> None:
        assert isinstance(Compiled("X-Tenant", ("X-Tenant",)), sdk.OwnsRequestHeaders)
        assert not isinstance(object(), sdk.OwnsRequestHeaders)
