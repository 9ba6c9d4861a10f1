"""A private Samba Active Directory domain controller for tests (Debian's
``samba``: ``apt-get install -y samba smbclient ldb-tools``).

Samba listens on the fixed LDAP ports (389, 636, 3268, 3269), so it runs in
a network namespace of its own: whatever talks to it (the gateway under
test) runs in the same namespace. :func:`main` does both: run this file as
``unshare --net python tests/ldap/samba_ad.py DIR`` and it brings up the
loopback interface, provisions the domain in DIR, adds the users and groups
below, starts ``samba``, runs :mod:`ad_checks` against it, prints their JSON
report on stdout, and stops samba. ``tests/ldap/test_ldap_active_directory.py``
does exactly that and checks the report.

The domain: realm ``CORP.EXAMPLE.TEST``, NetBIOS domain ``CORP``, DC ``dc1``.
Users (in ``CN=Users``): alice (in staff), bob (in no group), ``qa(lead)``
and ``ops#1`` (in staff: legal AD names with filter specials), and the
service account svc-reader; in ``OU=Staff``, jdoe, whose DN names him
``CN=John Doe`` as AD usually does (in staff). Groups: staff, and engineering whose member is
the group staff (nested). Samba's defaults as shipped: simple binds on
plain ``ldap://`` are refused with strongAuthRequired, the LDAPS
certificate it makes itself has no subjectAltName.

Samba starts twice. First with the certificate it makes itself at its first
start (no subjectAltName), which the gateway must refuse; then, after
:func:`use_test_ca`, with a certificate from a test CA that names the DC as
``dc1.corp.example.test`` and 127.0.0.1, which the gateway verifies like any
other (``tls.caFile``) for the rest of the checks.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REALM = "CORP.EXAMPLE.TEST"
DOMAIN = "CORP"
BASE = "DC=corp,DC=example,DC=test"
USERS_DN = f"CN=Users,{BASE}"
ADMIN_PW = "Adm1n-Passw0rd!"
PASSWORDS = {"alice": "Alice-Passw0rd!", "bob": "Bob-Passw0rd!", "qa(lead)": "Qa-Passw0rd!",
             "ops#1": "Ops-Passw0rd!", "svc-reader": "Svc-Passw0rd!", "jdoe": "Jdoe-Passw0rd!"}
GROUPS = {"staff": ["alice", "qa(lead)", "ops#1"]}
DC_NAME = f"dc1.{REALM.lower()}"
#: Where :func:`use_test_ca` writes the test CA (``ca.pem``) and the DC's key and certificate.
TEST_TLS = "test-tls"
INSTALL_HINT = "apt-get install -y samba smbclient ldb-tools"


class SambaMissing(RuntimeError):
    pass


def find_samba() -> tuple[str, str]:
    samba, tool = shutil.which("samba") or "/usr/sbin/samba", shutil.which("samba-tool")
    if not os.access(samba, os.X_OK) or not tool:
        raise SambaMissing(f"samba (an Active Directory DC) not found; the AD tests need it: {INSTALL_HINT}")
    return samba, tool


def _run(*args: str, log: Path) -> None:
    with log.open("a") as out:
        out.write("$ " + " ".join(args) + "\n")
        out.flush()
        subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, check=True, timeout=180)


def provision(directory: Path) -> None:
    """A new domain in ``directory``, its users and groups written offline."""
    _samba, tool = find_samba()
    log = directory / "provision.log"
    _run(tool, "domain", "provision", f"--realm={REALM}", f"--domain={DOMAIN}", "--server-role=dc",
         "--dns-backend=NONE", "--use-rfc2307", "--host-name=dc1", f"--targetdir={directory}",
         f"--adminpass={ADMIN_PW}", "--option=interfaces=lo", "--option=bind interfaces only=yes", log=log)
    conf = directory / "etc" / "smb.conf"
    # only the LDAP server, and its logs in DIR (not /var/log/samba: the test may run unprivileged)
    lines = [line for line in conf.read_text().splitlines()
             if not line.strip().startswith(("server services", "log file"))]
    conf.write_text("\n".join(lines).replace(
        "[global]", f"[global]\n\tserver services = ldap\n\tlog file = {directory}/log.%m", 1) + "\n")
    sam = f"--URL={directory / 'private' / 'sam.ldb'}"
    for user, password in PASSWORDS.items():
        if user != "jdoe":  # below, in OU=Staff
            _run(tool, "user", "create", user, password, sam, f"--configfile={conf}", log=log)
    for group, members in GROUPS.items():
        _run(tool, "group", "add", group, sam, f"--configfile={conf}", log=log)
        _run(tool, "group", "addmembers", group, ",".join(members), sam, f"--configfile={conf}", log=log)
    # a user as AD usually has them: named by sAMAccountName, CN his full name, in an OU of its own
    _run(tool, "ou", "create", f"OU=Staff,{BASE}", sam, f"--configfile={conf}", log=log)
    _run(tool, "user", "create", "jdoe", PASSWORDS["jdoe"], "--given-name=John", "--surname=Doe", "--userou=OU=Staff",
         sam, f"--configfile={conf}", log=log)
    _run(tool, "group", "addmembers", "staff", "jdoe", sam, f"--configfile={conf}", log=log)
    _run(tool, "group", "add", "engineering", sam, f"--configfile={conf}", log=log)
    _run(tool, "group", "addmembers", "engineering", "staff", sam, f"--configfile={conf}", log=log)


def use_test_ca(directory: Path) -> Path:
    """Make Samba serve a certificate from a new test CA, with the DC's DNS
    name and 127.0.0.1 as subjectAltName (smb.conf ``tls keyfile``,
    ``tls certfile``, ``tls cafile``; Samba refuses a key file others may
    read). Takes effect at the next :func:`start`; returns the CA's file."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from support.pki import TestCA

    tls = directory / TEST_TLS
    tls.mkdir(mode=0o700)
    ca = TestCA("twistgw AD test CA")
    cert, key = ca.issue(DC_NAME, dns=[DC_NAME], ips=["127.0.0.1"]).write(tls, "dc1")
    key.chmod(0o600)
    (tls / "ca.pem").write_bytes(ca.pem)
    conf = directory / "etc" / "smb.conf"
    conf.write_text(conf.read_text().replace(
        "[global]", f"[global]\n\ttls enabled = yes\n\ttls keyfile = {key}\n\ttls certfile = {cert}"
        f"\n\ttls cafile = {tls / 'ca.pem'}", 1))
    return tls / "ca.pem"


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start(directory: Path, timeout: float = 120.0) -> subprocess.Popen[bytes]:
    samba, _tool = find_samba()
    log = (directory / "samba.log").open("ab")
    proc = subprocess.Popen([samba, "-i", "-s", str(directory / "etc" / "smb.conf")], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while not (_listening(389) and _listening(636)):
        if proc.poll() is not None:
            raise RuntimeError(f"samba exited ({proc.returncode}); see {directory / 'samba.log'}")
        if time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"samba did not listen on 389 and 636 within {timeout:g}s")
        time.sleep(0.2)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to samba's process group (it forks), SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


def main(directory: Path) -> int:
    """In a fresh network namespace: bring up lo, provision, start, check
    Samba's own certificate, restart with the test CA's, check the rest."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    started = time.monotonic()
    provision(directory)
    proc = start(directory)  # with the certificate Samba makes itself
    ready = time.monotonic() - started
    restart = 0.0

    def restart_with_test_ca() -> None:
        nonlocal proc, restart
        began = time.monotonic()
        stop(proc)
        deadline = time.monotonic() + 30
        while (_listening(389) or _listening(636)) and time.monotonic() < deadline:
            time.sleep(0.2)  # a forked child may hold the ports a moment longer
        use_test_ca(directory)
        proc = start(directory)
        restart = time.monotonic() - began

    try:
        sys.path.insert(0, str(Path(__file__).parent))
        import ad_checks

        report = ad_checks.run(directory, restart_with_test_ca)
    finally:
        stop(proc)
    report["_timing"] = {"ready_s": round(ready, 1), "restart_s": round(restart, 1),
                         "total_s": round(time.monotonic() - started, 1)}
    print(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
