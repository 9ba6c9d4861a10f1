"""Protobuf's proto names (issue 32 item 6). Gloo reads its resources with
protobuf's JSON mapping, which takes a field's proto name
(``retriable_status_codes``) as well as its JSON name
(``retriableStatusCodes``); so does twistgw, in every Gloo resource and
option the core and the shipped plugins read, through the one field reader.

* Gloo's retry guide, verbatim, loads (its ``retriable_status_codes`` is
  read; what stays refused is refused by name, with the reason).
* The property: every field the field walk knows (tests/unit/test_field_walk.py),
  written with its proto name, loads the same model: the walk configuration
  with any set of its fields so renamed compiles to the same snapshot.
  Kubernetes' own objects (``metadata``, a Service, an Endpoints, a Pod, a
  Secret's or ConfigMap's data) and free-form mappings (labels, header names)
  keep their keys: nothing is renamed there.
"""

from __future__ import annotations

import textwrap

import pytest

from twistgw.config.loader import ConfigError, load_text

from support.trial import TestCase


RETRY_GUIDE = """\
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata:
  name: vs-with-retries
spec:
  virtualHost:
    domains:
      - nginx.example.com
    routes:
      - matchers:
          - prefix: /retries
        routeAction:
          single:
            upstream:
              name: nginx-upstream-basicroute
        options:
          retries:
            retryOn: "retriable-status-codes"
            retriable_status_codes:
               - 502
               - 503
               - 504
               - 429
            retryBackOff:
              baseInterval: "1s"
              maxInterval: "1s"
            rateLimitedRetryBackOff:
              maxInterval: "1s"
              resetHeaders:
                - name: "X-RateLimit-Reset"
                  format: UNIX_TIMESTAMP
                - name: "Retry-After"
                  format: SECONDS
"""

UPSTREAM = """\
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: nginx-upstream-basicroute}
spec: {static: {hosts: [{addr: 127.0.0.1, port: 9}]}}
"""


class RetryGuideTests(TestCase):
    """Gloo's retry guide (docs/content/guides/traffic_management/
    request_processing/retries), its second VirtualService verbatim."""

    def test_the_guide_loads_but_for_what_twistgw_refuses_by_name(self) -> None:
        with pytest.raises(ConfigError) as caught:
            load_text(RETRY_GUIDE + UPSTREAM)
        assert [(i.field, i.line) for i in caught.value.issues] == [
            ("spec.virtualHost.routes[0].options.retries.rateLimitedRetryBackOff", 28)]
        assert "is not supported by twistgw" in caught.value.issues[0].reason

    def test_its_retriable_status_codes_are_read(self) -> None:
        guide = RETRY_GUIDE.split("            rateLimitedRetryBackOff:")[0]
        retries = load_text(guide + UPSTREAM).virtual_services[0].routes[0].options["retries"]
        assert retries.statuses == frozenset({502, 503, 504, 429})
        assert retries.on == frozenset({"retriable-status-codes"}) and retries.base == retries.max == 1.0

    def test_both_spellings_of_one_field_are_refused_naming_both(self) -> None:
        guide = RETRY_GUIDE.split("            rateLimitedRetryBackOff:")[0]
        twice = guide.replace("            retryBackOff:", "            retriableStatusCodes: [500]\n"
                              "            retryBackOff:")
        with pytest.raises(ConfigError) as caught:
            load_text(twice + UPSTREAM)
        [issue] = caught.value.issues
        assert issue.field == "spec.virtualHost.routes[0].options.retries.retriableStatusCodes"
        assert "'retriable_status_codes' and 'retriableStatusCodes'" in issue.reason

    def test_kubernetes_fields_keep_one_spelling(self) -> None:
        text = textwrap.dedent("""\
            apiVersion: v1
            kind: Service
            metadata: {name: s}
            spec: {ports: [{port: 80, target_port: 8080}]}
            """)
        with pytest.raises(ConfigError) as caught:
            load_text(text)
        assert "unknown field 'target_port'" in str(caught.value)
