"""docs/quickstart.md works verbatim: its commands run as written, as real
processes (the echo backend, openssl, ``twistgw token``/``check``/
``explain``, ``twist twistgw``, curl), in a fresh directory, and every
outcome the page states happens.

Step 1 (``python3 -m venv .venv && .venv/bin/pip install .`` from the
checkout) is the one not re-run: it is what ``./run-tests.sh`` itself just
did, and the steps after it run on the PATH of that installation.
"""

from __future__ import annotations

import os
import pathlib
import re
import sys


from doc_shell import check_outcomes, fixed_ports, port_busy, run_lines, shell_lines

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quickstart.md"
BIN = pathlib.Path(sys.executable).parent
PORTS = (8080, 9000, 9901)  # the gateway, the echo backend, the admin endpoint


def page() -> str:
    return PAGE.read_text()


def saved_file() -> tuple[str, str]:
    """The file the page asks you to save: (path, contents)."""
    m = re.search(r"<!-- save-as: (\S+) -->\n```yaml\n(.*?)```", page(), re.S)
    assert m, "docs/quickstart.md has no '<!-- save-as: PATH -->' yaml block"
    return m.group(1), m.group(2)


def background_port(line: str) -> int:
    """The port a backgrounded command of the page listens on."""
    m = re.search(r"--listen tcp:(\d+)", line)
    if m:
        return int(m.group(1))
    assert line.startswith("twist --log-format=text twistgw"), f"which port does {line!r} open?"
    return 8080


def test_step_one_is_the_install_this_suite_uses():
    install = re.search(r"## 1\. Install\n\n```sh\n(.*?)```", page(), re.S).group(1)
    assert "python3 -m venv .venv && .venv/bin/pip install ." in install
    assert ". .venv/bin/activate" in install
    assert "pip install -q --disable-pip-version-check --force-reinstall --no-deps ." in (
        ROOT / "run-tests.sh").read_text()


def test_page_states_every_outcome():
    expects = [line.split("# expect:", 1)[1].strip()
               for line in shell_lines(page()) if "# expect:" in line]
    statuses = [e.split(" ", 1)[0] for e in expects]
    # the open route, no token, a viewer's read, a viewer's write, an admin's write
    assert statuses.count("200") >= 3 and "401" in statuses and "403" in statuses
    assert any("POST" in line and "$ADMIN" in line and "expect: 200" in line for line in shell_lines(page()))


def test_quickstart_as_written(tmp_path):
    with fixed_ports(PORTS):
        quickstart_as_written(tmp_path)


def quickstart_as_written(tmp_path):
    lines = shell_lines(page(), "<!-- quickstart:start -->", "<!-- quickstart:end -->")
    # Saving the YAML block is the one step done by hand on the page: do it
    # when the page gets to it (after the keys exist, before `check`).
    path, contents = saved_file()
    at = next(i for i, line in enumerate(lines) if line.startswith("twistgw check"))
    save = f"cat > {path} <<'__QUICKSTART_YAML__'\n{contents}__QUICKSTART_YAML__"
    lines = lines[:at] + [save] + lines[at:]
    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    env.pop("PYTHONPATH", None)
    outcomes, log = run_lines(lines, str(tmp_path), env, background_port)
    assert len(outcomes) == len([line for line in lines if "# expect:" in line])
    check_outcomes(outcomes, log)
    assert "Traceback" not in log, log[-3000:]
    # issue 32, item 16: the log the page shows is readable text, not JSON lines
    gateway_log = (tmp_path / "gateway.log").read_text()
    assert "[twistgw.access#info]" in gateway_log and "\x1e" not in gateway_log, gateway_log[-2000:]
    for p in PORTS:  # nothing left running
        assert not port_busy(p), f"port {p} still open after the quickstart test"
