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
