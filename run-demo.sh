#!/usr/bin/env bash
# Set up .venv with twistgw installed and run the gateway on the shipped demo
# configuration in etc/ (proxy on :8080, admin on 127.0.0.1:9901).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check --force-reinstall --no-deps .
.venv/bin/python -m pip install -q --disable-pip-version-check .
exec .venv/bin/twist --log-format=text twistgw --config etc/ "$@"
