"""The in-memory suite under trial: ``.venv/bin/trial tests/inmemory.py``.

Every module listed here is written as ``twisted.trial.unittest.TestCase``
classes (most through :class:`support.trial.TestCase`), so it runs under
``trial`` and under ``pytest`` with the same tests:
``tests/unit/test_runners.py`` checks that both runners count the same,
non-zero, number in each. The rest of the suite (real slapd, subprocesses,
end-to-end over sockets) is pytest-twisted style and runs under ``pytest``.

trial calls :func:`testSuite` (its hook for a module that builds its own
suite); it puts the test directories on ``sys.path`` as pytest does, so
that ``support`` and the ``*_helpers`` modules import under both runners.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

#: The modules, relative to ``tests/``.
MODULES = (
    "unit/test_access_log.py",
    "unit/test_bounded_body.py",
    "unit/test_check_every_resource.py",
    "unit/test_core_config.py",
    "unit/test_core_config_fuzz.py",
    "unit/test_core_inmemory.py",
    "unit/test_core_owned_headers.py",
    "unit/test_core_paths.py",
    "unit/test_core_plugins.py",
    "unit/test_core_yaml_limits.py",
    "unit/test_engine_inmemory.py",
    "unit/test_engine_body_prefix.py",
    "unit/test_engine_phases.py",
    "unit/test_http2_inmemory.py",
    "unit/test_http2_limits.py",
    "unit/test_engine_upgrades_option.py",
    "unit/test_retries_inmemory.py",
    "unit/test_retry_hosts.py",
    "unit/test_shadowing.py",
    "unit/test_engine_reactor.py",
    "unit/test_engine_timers.py",
    "unit/test_field_walk.py",
    "unit/test_field_reader.py",
    "unit/test_proto_names.py",
    "unit/test_vs_tls_config.py",
    "unit/test_gateway_kind.py",
    "unit/test_tracing.py",
    "unit/test_gloo_loader.py",
    "unit/test_header_policy.py",
    "unit/test_headers.py",
    "unit/test_layers.py",
    "unit/test_code_size.py",
    "unit/test_metrics.py",
    "unit/test_redis_slots.py",
    "unit/test_options_helpers.py",
    "unit/test_pipeline.py",
    "unit/test_proxy_header.py",
    "unit/test_route_matchers.py",
    "unit/test_route_tables.py",
    "unit/test_subsets.py",
    "unit/test_response_headers.py",
    "unit/test_csrf_origins.py",
    "unit/test_traffic.py",
    "unit/test_traffic_quick.py",
    "unit/test_upstream_policy.py",
    "unit/test_testing_api.py",
    "unit/test_sdk.py",
    "jwt/test_jwt_behaviour.py",
    "jwt/test_jwt_options.py",
    "jwt/test_jwt_security.py",
    "jwt/test_jwt_tools.py",
    "jwt/test_jwt_verify_api.py",
    "rbac/test_rbac_config.py",
    "rbac/test_rbac_semantics.py",
    "rbac/test_rbac_shadow_regex.py",
    "extauth/test_extauth_contract.py",
    "extauth/test_extauth_dispatcher.py",
    "authtypes/test_apikey_basic_units.py",
    "authtypes/test_opa_units.py",
    "authtypes/test_authtypes_chain.py",
    "authtypes/test_services_loopback.py",
    "authtypes/test_authtypes_gateway.py",
    "authtypes/test_examples_extauth.py",
    "authtypes/test_grpc_passthrough.py",
    "authtypes/test_body_gateway.py",
    "authtypes/test_passthrough_http_client.py",
    "oidc/test_oidc_units.py",
    "oidc/test_oidc_warm_paths.py",
    "oidc/test_oidc_fields.py",
    "ldap/test_ldap_ber.py",
    "ldap/test_ldap_search_units.py",
    "ldap/test_ldap_units.py",
    "ratelimit/test_ratelimit_units.py",
    "reliability/test_properties.py",
    "integration/test_testing_stop.py",
    "integration/test_testing_backend.py",
    "extauth/test_principal_owner.py",
)


def testSuite():  # noqa: N802  (trial's name)
    from twisted.trial.runner import TestLoader, filenameToModule

    for directory in sorted({os.path.dirname(m) for m in MODULES}, reverse=True) + [""]:
        path = os.path.join(HERE, directory)
        if path not in sys.path:
            sys.path.insert(0, path)
    loader = TestLoader()
    return loader.suiteFactory([loader.loadModule(filenameToModule(os.path.join(HERE, m))) for m in MODULES])
