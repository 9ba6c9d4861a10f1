#!/usr/bin/env bash
# Set up .venv with twistgw installed as users get it (pip install, not
# editable), check lint and types, and run the whole test suite.
#   ./run-tests.sh                  ruff, mypy, then pytest, then the in-memory suite under trial
#   ./run-tests.sh tests/unit -x    pytest only, with these arguments (a subset while you work)
#   ./run-tests.sh --lint           ruff and mypy only
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v slapd >/dev/null 2>&1 && [ ! -x /usr/sbin/slapd ]; then
  echo "run-tests: OpenLDAP slapd is required: the LDAP tests run a real directory." >&2
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "run-tests: installing slapd and ldap-utils with apt-get" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slapd ldap-utils >/dev/null
  else
    echo "run-tests: install it with: sudo apt-get install slapd ldap-utils" >&2
    exit 1
  fi
fi

if ! command -v curl >/dev/null 2>&1; then
  echo "run-tests: curl is required: the TLS listener tests run the real curl binary." >&2
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null
  else
    echo "run-tests: install it with: sudo apt-get install curl" >&2
    exit 1
  fi
fi

if ! command -v h2load >/dev/null 2>&1; then
  echo "run-tests: h2load (nghttp2-client) is required: the HTTP/2 tests drive the gateway with it." >&2
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nghttp2-client >/dev/null
  else
    echo "run-tests: install it with: sudo apt-get install nghttp2-client" >&2
    exit 1
  fi
fi

if ! command -v samba-tool >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; then
  echo "run-tests: Samba's AD DC is required: the LDAP tests run a real Active Directory." >&2
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq samba smbclient ldb-tools iproute2 >/dev/null
  else
    echo "run-tests: install it with: sudo apt-get install samba smbclient ldb-tools iproute2" >&2
    exit 1
  fi
fi

if ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/bin/redis-server ]; then
  echo "run-tests: redis-server is required: the rate-limit tests count in a real Redis." >&2
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "run-tests: installing redis-server with apt-get" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  else
    echo "run-tests: install it with: sudo apt-get install redis-server" >&2
    exit 1
  fi
fi

# The OIDC tests (tests/oidc) run a real OpenID provider (oidc-provider under
# Node.js), a real Redis (checked above) and headless Chromium: missing, they fail the suite.
for tool in node:nodejs npm:npm chromium:chromium chromedriver:chromium-driver; do
  if ! command -v "${tool%%:*}" >/dev/null 2>&1 && [ ! -x "/usr/bin/${tool%%:*}" ]; then
    echo "run-tests: ${tool%%:*} is required by the OIDC tests: sudo apt-get install ${tool##*:}" >&2
    exit 1
  fi
done
if [ ! -d tests/oidc/idp/node_modules/oidc-provider ]; then
  echo "run-tests: installing the test OpenID provider (npm ci in tests/oidc/idp)" >&2
  (cd tests/oidc/idp && npm ci --no-audit --no-fund --loglevel=error)
fi

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
# setuptools' build/ directory keeps modules that were moved or deleted in
# the source; a stale copy would be installed (and imported) with the rest.
rm -rf build
.venv/bin/python -m pip install -q --disable-pip-version-check --force-reinstall --no-deps .
.venv/bin/python -m pip install -q --disable-pip-version-check '.[test]'
lint() {
  # Settings in pyproject.toml: ruff lints everything (tests and bench
  # included); mypy checks twistgw/, plugins/ and examples/, strictly on
  # api/, core/, config/ and tls.py. Any problem fails the run.
  echo "run-tests: ruff check"
  .venv/bin/ruff check --quiet .
  echo "run-tests: mypy"
  .venv/bin/mypy
}
if [ "${1:-}" = "--lint" ]; then
  lint
  exit 0
fi
# Run from the installed package (pytest, not "python -m pytest", keeps the
# source tree off sys.path).
if [ "$#" -gt 0 ]; then
  exec .venv/bin/pytest "$@"
fi
lint
.venv/bin/pytest
# The in-memory suite again, under trial: its modules are trial TestCases
# and must pass under both runners (tests/docs/test_runners.py compares the
# counts). trial's scratch directory is _trial_temp/ (ignored by git).
echo "run-tests: the in-memory suite under trial (tests/inmemory.py)"
exec .venv/bin/trial tests/inmemory.py
