"""What both test modules share. It sits beside them in the ``tests``
package and is imported as ``tests.apikey_support``: that works under
``python -m twisted.trial tests`` and under ``pytest`` alike (a bare
``import apikey_support`` fails under trial, which does not put a test
file's directory on ``sys.path``)."""

from __future__ import annotations

import os

import twistgw_apikey

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "example-config")
PLUGINS = [("apikey", twistgw_apikey)]  # only this plugin takes part, whatever else is installed
HOST = "http://partners.example.com"


def resources(header: str = "X-Api-Key") -> list[dict]:
    """The configuration as Python data, for ``start_gateway(resources(),
    PLUGINS, backend=backend)``: a route to the recording backend (the
    Upstream ``backend`` that ``backend=`` adds) and the keys' Secret."""
    return [
        {"apiVersion": "gateway.vendor.io/v1", "kind": "VirtualService", "metadata": {"name": "partners"},
         "spec": {"virtualHost": {
             "domains": ["partners.example.com"],
             "options": {"apikey": {"header": header, "keysSecretRef": {"name": "partner-keys"}}},
             "routes": [{"matchers": [{"prefix": "/"}], "routeAction": {"single": {"upstream": {"name": "backend"}}}}],
         }}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "partner-keys"}, "type": "Opaque",
         "stringData": {"acme": "acme-key-1234"}},
    ]
