"""The apikey plugin's tests in pytest-twisted style: plain functions.

Run them with ``pytest`` (from ``examples/apikey-plugin``); ``trial`` does
not collect module-level functions, so it is pointed at
``test_apikey_trial.py`` only. ``conftest.py`` runs trial classes first
when both styles share one pytest session (see docs/plugins.md).
"""

from __future__ import annotations

import pytest
import pytest_twisted
import treq

from twistgw.sdk.testing import ChainTester, ConfigError, start_gateway, start_recording_backend

from tests.apikey_support import CONFIG_DIR, HOST, PLUGINS, resources


@pytest.fixture
def tester() -> ChainTester:
    return ChainTester.from_directory(CONFIG_DIR, PLUGINS)


@pytest.mark.parametrize("headers,status,body", [
    ({}, 401, b"API key is missing"),
    ({"X-Api-Key": "nope"}, 403, b"API key is not valid"),
    ({"X-Api-Key": "acme-key-1234"}, 200, b"hello partner\n"),
])
@pytest_twisted.ensureDeferred
async def test_in_memory(tester, headers, status, body):
    result = await tester.request("GET", f"{HOST}/orders", headers=headers)
    assert (result.status, result.body) == (status, body)


def test_bad_options_are_a_config_error():
    with pytest.raises(ConfigError, match="options.apikey.keysSecretRef: is required"):
        ChainTester.from_yaml(
            "apiVersion: gateway.vendor.io/v1\nkind: VirtualService\nmetadata: {name: p}\nspec:\n"
            "  virtualHost:\n    domains: ['*']\n    options: {apikey: {}}\n"
            "    routes: [{matchers: [{prefix: /}], directResponseAction: {status: 200}}]\n", PLUGINS)


@pytest_twisted.async_yield_fixture
async def gateway():
    gw = start_gateway(CONFIG_DIR, PLUGINS)
    yield gw
    await gw.stop()


@pytest_twisted.ensureDeferred
async def test_end_to_end(gateway):
    response = await treq.get(gateway.url("/orders"),
                              headers={"Host": "partners.example.com", "X-Api-Key": "globex-key-5678"})
    assert response.code == 200
    assert await response.content() == b"hello partner\n"


@pytest_twisted.async_yield_fixture
async def backend():
    recorder = start_recording_backend()
    yield recorder
    await recorder.close()


@pytest_twisted.async_yield_fixture
async def gateway_to_backend(backend):
    gw = start_gateway(resources(header="X-Partner-Key"), PLUGINS, backend=backend)
    yield gw
    await gw.stop()


@pytest_twisted.ensureDeferred
async def test_backend_gets_the_request_without_the_key(gateway_to_backend, backend):
    response = await treq.get(gateway_to_backend.url("/orders"),
                              headers={"Host": "partners.example.com", "X-Partner-Key": "acme-key-1234"})
    assert (response.code, await response.content()) == (200, b"ok")
    assert (backend.last.method, backend.last.path) == ("GET", "/orders")
    assert backend.last.header("x-partner-key") is None
