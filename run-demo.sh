#!/usr/bin/env bash
# Set up .venv with twistgw installed and run the gateway on the shipped demo
# configuration in etc/ (proxy on :8080, admin on 127.0.0.1:9901).
#
# pip runs only when .venv is missing or the project changed since the last
# install (a stamp of pyproject.toml and the package sources, kept in
# .venv/twistgw-demo.stamp), so later starts need no network.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
STAMP=.venv/twistgw-demo.stamp

project_hash() {
    # Every file that ends up in the installed package, plus the Python.
    {
        "$PYTHON" --version 2>&1
        find pyproject.toml twistgw plugins twisted -type f \
            \( -name '*.py' -o -name '*.toml' -o -name 'py.typed' \) -print0 | LC_ALL=C sort -z \
            | xargs -0 sha256sum
    } | sha256sum | cut -d' ' -f1
}

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
want=$(project_hash)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
    echo "run-demo.sh: installing twistgw into .venv (first start, or the project changed)" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check .
    # the version number does not change between edits: reinstall the code itself
    .venv/bin/python -m pip install -q --disable-pip-version-check --force-reinstall --no-deps .
    echo "$want" > "$STAMP"
fi
exec .venv/bin/twist --log-format=text twistgw --config etc/ "$@"
