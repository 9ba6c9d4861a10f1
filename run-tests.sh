#!/usr/bin/env bash
# Set up .venv with twistgw installed as users get it (pip install, not
# editable), check lint and types, and run the whole test suite.
#   ./run-tests.sh                  ruff, mypy, then pytest (on 4 pytest-xdist workers; set
#                                   TWISTGW_TEST_WORKERS=0 for one process) beside the
#                                   in-memory suite under trial
#   ./run-tests.sh tests/unit -x    pytest only, with these arguments, serially (a subset
#                                   while you work; add -n 3 to spread it over workers)
#   ./run-tests.sh --lint           ruff and mypy only
set -euo pipefail
cd "$(dirname "$0")"

# Every system tool the suite runs, checked here at the start, each as
# "command:Debian package". The packages are the one apt-get line below;
# .ci/run's PACKAGES and the README's list are the same list
# (tests/docs/test_system_tools.py checks the three agree).
TOOLS="slapd:slapd ldapadd:ldap-utils samba-tool:samba smbclient:smbclient ldbsearch:ldb-tools ip:iproute2
  redis-server:redis-server nginx:nginx haproxy:haproxy wrk:wrk chromium:chromium chromedriver:chromium-driver
  htpasswd:apache2-utils ps:procps curl:curl openssl:openssl h2load:nghttp2-client"
PACKAGES="slapd ldap-utils samba smbclient ldb-tools iproute2 redis-server nginx haproxy wrk chromium chromium-driver
  apache2-utils python3-venv procps curl openssl nghttp2-client"
PYTHON=${PYTHON:-python3}
# where the tools are looked for: PATH and the sbin directories a user's PATH
# often lacks (tests/docs/test_system_tools.py points it at a directory of its own)
TOOL_PATH=${TWISTGW_TOOL_PATH:-$PATH:/usr/local/sbin:/usr/sbin:/sbin}

missing_tools() {
  # "command (package)" for each tool that is not installed
  local tool
  for tool in $TOOLS; do
    if ! PATH="$TOOL_PATH" command -v "${tool%%:*}" >/dev/null 2>&1; then
      echo "${tool%%:*} (${tool##*:})"
    fi
  done
  # python3-venv: what "python3 -m venv" needs on Debian (ensurepip)
  if [ ! -x .venv/bin/python ] && ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    echo "$PYTHON -m venv (python3-venv)"
  fi
}

missing=$(missing_tools)
if [ -n "$missing" ]; then
  echo "run-tests: the suite runs these real tools, and they are missing: $(echo $missing | sed 's/) /), /g')" >&2
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "run-tests: installing them with apt-get" >&2
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $PACKAGES >/dev/null
    missing=$(missing_tools)
  fi
  if [ -n "$missing" ]; then
    # shellcheck disable=SC2086
    echo "run-tests: install everything the suite needs with: sudo apt-get install" $PACKAGES >&2
    exit 1
  fi
fi

# The OIDC tests (tests/oidc) run a real OpenID provider (oidc-provider) under
# Node.js: not in the apt-get line, as NodeSource's nodejs (which carries its
# own npm) conflicts with Debian's npm.
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/bin/$tool" ]; then
    echo "run-tests: $tool is required by the OIDC tests: install Node.js with npm" \
      "(Debian: sudo apt-get install nodejs npm)" >&2
    exit 1
  fi
done
if [ ! -d tests/oidc/idp/node_modules/oidc-provider ]; then
  echo "run-tests: installing the test OpenID provider (npm ci in tests/oidc/idp)" >&2
  (cd tests/oidc/idp && npm ci --no-audit --no-fund --loglevel=error)
fi

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
# setuptools' build/ directory keeps modules that were moved or deleted in
# the source; a stale copy would be installed (and imported) with the rest.
rm -rf build
# TWISTGW_COMPILE=1: the hot modules compiled by mypyc (setup.py, twistgw/compiled.py;
# opt-in for now, docs/contributing.md). --no-build-isolation: mypyc type-checks
# against the venv's Twisted, attrs, h2... (an isolated build has only mypy).
TWISTGW_COMPILE=0 .venv/bin/python -m pip install -q --disable-pip-version-check '.[test]'
if [ "${TWISTGW_COMPILE:-0}" = 1 ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check --force-reinstall --no-deps --no-build-isolation .
  export TWISTGW_EXPECT_COMPILED=1  # tests/unit/test_compiled.py holds the install to it
else
  # the install users get (docs/quickstart.md's step one; tests/docs/test_quickstart.py)
  .venv/bin/python -m pip install -q --disable-pip-version-check --force-reinstall --no-deps .
  export TWISTGW_EXPECT_COMPILED=0
fi
# xds-protos (Envoy's generated messages: passThroughAuth.grpc's ext_authz) ships an old copy of
# OpenTelemetry's .proto modules at the same paths as opentelemetry-proto (what the tests' OTLP
# receiver decodes with): whichever pip wrote last wins. opentelemetry-proto's, written again, last.
otel=$(.venv/bin/python -m pip show opentelemetry-proto 2>/dev/null | sed -n 's/^Version: //p')
.venv/bin/python -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "opentelemetry-proto==$otel"
echo "run-tests: $(.venv/bin/twistgw --version)"
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
# The in-memory suite under trial too: its modules are trial TestCases and
# must pass under both runners (tests/docs/test_runners.py compares the
# counts). It runs beside pytest (mostly waiting on processes and
# timeouts, the suite leaves the cores idle), its output kept in a file and
# shown after; the run fails if either fails. trial's scratch directory is
# _trial_temp/ (ignored by git).
trial_log=$(mktemp "${TMPDIR:-/tmp}/twistgw-trial.XXXXXX")
trap 'rm -f "$trial_log"' EXIT
echo "run-tests: the in-memory suite under trial (tests/inmemory.py), beside pytest"
.venv/bin/trial tests/inmemory.py >"$trial_log" 2>&1 &
trial_pid=$!
# pytest on TWISTGW_TEST_WORKERS pytest-xdist workers (4: the suite mostly
# waits, so 4 beat 3 on two cores; docs/decisions.md), a module that starts
# a real part once kept on one worker (--dist loadgroup, tests/conftest.py).
# TWISTGW_TEST_WORKERS=0 runs it in this process, serially.
pytest_status=0
.venv/bin/pytest -n "${TWISTGW_TEST_WORKERS:-4}" --dist loadgroup || pytest_status=$?
trial_status=0
wait "$trial_pid" || trial_status=$?
echo "run-tests: trial tests/inmemory.py (exit status $trial_status):"
cat "$trial_log"
if [ "$pytest_status" != 0 ] || [ "$trial_status" != 0 ]; then
  echo "run-tests: FAILED: pytest exit status $pytest_status, trial exit status $trial_status" >&2
  exit 1
fi
