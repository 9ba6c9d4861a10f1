"""A private OpenLDAP ``slapd`` for tests: config and LDIF written to a temp
directory, served on a free loopback port, stopped by pid.

Reusable outside this directory::

    from tests.ldap.slapd import Slapd
    server = Slapd(tmp_path, permissive=True).start()
    ... server.url, server.port, server.bind_count() ...
    server.stop()

The directory (suffix ``dc=example,dc=org``):

* ``ou=people``: inetOrgPerson users ``alice`` (managers, developers),
  ``bob`` (developers), ``carol`` (no group), ``eve`` (password with colons,
  managers); every password is ``<uid>-pw`` except eve's ``pa:ss:wd``.
* ``SPECIAL_USERS`` in ``ou=people``: ``qa(lead)``, ``ops#1`` and ``x,y=z``
  (legal names with filter and DN specials; passwords as listed there; in
  no group).
* ``ou=contractors``: ``dave`` (contractors) and a second ``sam``; ``sam``
  is also in ``ou=people``, so a search over both OUs finds two entries.
* ``ou=groups``: groupOfNames ``managers``, ``developers``, ``contractors``;
  nested: ``engineering`` (members: the groups developers and contractors),
  ``all-staff`` (member: engineering); a cycle ``loop-a`` (bob, loop-b) ⇄
  ``loop-b`` (loop-a). The ``memberof`` overlay gives users ``memberOf``
  (direct groups only).
* ``cn=reader,ou=services,dc=example,dc=org`` / ``reader-pw``: the service
  account, allowed to read ``memberOf`` under the strict ACL.

``permissive=True`` accepts unauthenticated binds (``allow bind_anon_dn``:
a DN with an empty password binds anonymously) and lets everyone read
everything but passwords. ``permissive=False`` hides ``memberOf`` from
everyone but the service account, and ``ou=contractors`` from anonymous
searches (the service account and bound users see it).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from support.ports import free_port

SUFFIX = "dc=example,dc=org"
ROOT_DN = f"cn=admin,{SUFFIX}"
ROOT_PW = "admin-secret"
SERVICE_DN = f"cn=reader,ou=services,{SUFFIX}"
SERVICE_PW = "reader-pw"
MANAGERS = f"cn=managers,ou=groups,{SUFFIX}"
DEVELOPERS = f"cn=developers,ou=groups,{SUFFIX}"
ENGINEERING = f"cn=engineering,ou=groups,{SUFFIX}"
ALL_STAFF = f"cn=all-staff,ou=groups,{SUFFIX}"
LOOP_A = f"cn=loop-a,ou=groups,{SUFFIX}"
LOOP_B = f"cn=loop-b,ou=groups,{SUFFIX}"

USERS = {
    # uid: (password, groups)
    "alice": ("alice-pw", ("managers", "developers")),
    "bob": ("bob-pw", ("developers",)),
    "carol": ("carol-pw", ()),
    "eve": ("pa:ss:wd", ("managers",)),
    "sam": ("sam-pw", ()),
}
#: users of ou=people whose legal names hold filter or DN specials (no group)
SPECIAL_USERS = {"qa(lead)": "qa-pw", "ops#1": "ops-pw", "x,y=z": "xyz-pw"}
#: users of ou=contractors: uid: (password, groups)
CONTRACTORS = {
    "dave": ("dave-pw", ("contractors",)),
    "sam": ("sam-contractor-pw", ()),
}
#: groups whose members are groups (nested), and the cycle; written after the users' groups
NESTED_GROUPS = {
    "engineering": (DEVELOPERS, f"cn=contractors,ou=groups,{SUFFIX}"),
    "all-staff": (ENGINEERING,),
    "loop-a": (f"uid=bob,ou=people,{SUFFIX}",),
    "loop-b": (LOOP_A,),
}

INSTALL_HINT = "apt-get install slapd ldap-utils"


class SlapdMissing(RuntimeError):
    pass


def find_slapd() -> str:
    for candidate in (shutil.which("slapd"), "/usr/sbin/slapd"):
        if candidate and os.access(candidate, os.X_OK):
            if not shutil.which("ldapadd"):
                raise SlapdMissing(f"ldapadd not found; install OpenLDAP's tools: {INSTALL_HINT}")
            return candidate
    raise SlapdMissing(f"slapd (OpenLDAP) not found; the LDAP tests need it: {INSTALL_HINT}")




def _ldif_people() -> str:
    out = [f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n",
           f"dn: ou=people,{SUFFIX}\nobjectClass: organizationalUnit\nou: people\n",
           f"dn: ou=groups,{SUFFIX}\nobjectClass: organizationalUnit\nou: groups\n",
           f"dn: ou=services,{SUFFIX}\nobjectClass: organizationalUnit\nou: services\n",
           f"dn: ou=contractors,{SUFFIX}\nobjectClass: organizationalUnit\nou: contractors\n",
           f"dn: {SERVICE_DN}\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\n"
           f"cn: reader\nuserPassword: {SERVICE_PW}\n"]
    for ou, users in (("people", USERS), ("contractors", CONTRACTORS)):
        for uid, (pw, _) in users.items():
            out.append(f"dn: uid={uid},ou={ou},{SUFFIX}\nobjectClass: inetOrgPerson\nuid: {uid}\n"
                       f"cn: {uid.title()}\nsn: {uid.title()}\nuserPassword: {pw}\n")
    for uid, pw in SPECIAL_USERS.items():
        rdn = uid.replace(",", "\\,").replace("=", "\\=")
        out.append(f"dn: uid={rdn},ou=people,{SUFFIX}\nobjectClass: inetOrgPerson\nuid: {uid}\n"
                   f"cn: special\nsn: special\nuserPassword: {pw}\n")
    return "\n".join(out)


def _group(name: str, members: list[str]) -> str:
    lines = [f"dn: cn={name},ou=groups,{SUFFIX}", "objectClass: groupOfNames", f"cn: {name}"]
    return "\n".join(lines + [f"member: {m}" for m in members]) + "\n"


def _ldif_groups() -> str:
    out = []
    for group in ("managers", "developers", "contractors"):
        members = [f"uid={uid},ou={ou},{SUFFIX}" for ou, users in (("people", USERS), ("contractors", CONTRACTORS))
                   for uid, (_, groups) in users.items() if group in groups]
        out.append(_group(group, members))
    out += [_group(name, list(members)) for name, members in NESTED_GROUPS.items()]
    # close the cycle: loop-a also lists loop-b (which lists loop-a)
    out.append(f"dn: {LOOP_A}\nchangetype: modify\nadd: member\nmember: {LOOP_B}\n")
    return "\n".join(out)


def write_tls_files(directory: Path, hostname: str = "localhost", san: bool = True) -> None:
    """A CA (``ca.pem``) and a server certificate for ``hostname`` and
    127.0.0.1 (``server.pem`` / ``server-key.pem``); with ``san=False`` the
    certificate names ``hostname`` only as its subject's CN (no
    subjectAltName), as some directories' self-made certificates do."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "twistgw test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)]))
               .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=2)))
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName(hostname), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    (directory / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "server-key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()))


def _config(directory: Path, permissive: bool, tls: bool = False) -> str:
    schema = "/etc/ldap/schema"
    tls_lines = (f"TLSCACertificateFile {directory}/ca.pem\nTLSCertificateFile {directory}/server.pem\n"
                 f"TLSCertificateKeyFile {directory}/server-key.pem\n") if tls else ""
    acl_memberof = ("" if permissive else
                    f'access to attrs=memberOf\n  by dn.exact="{SERVICE_DN}" read\n  by * none\n'
                    f'access to dn.subtree="ou=contractors,{SUFFIX}"\n  by dn.exact="{SERVICE_DN}" read\n'
                    f'  by users read\n  by * none\n')
    return f"""\
include {schema}/core.schema
include {schema}/cosine.schema
include {schema}/inetorgperson.schema
pidfile {directory}/slapd.pid
argsfile {directory}/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb
moduleload memberof
{"allow bind_anon_dn" if permissive else ""}
{tls_lines}
database mdb
maxsize 16777216
suffix "{SUFFIX}"
rootdn "{ROOT_DN}"
rootpw {ROOT_PW}
directory {directory}/db
overlay memberof

access to attrs=userPassword
  by self write
  by anonymous auth
  by * none
{acl_memberof}access to *
  by * read
"""


class Slapd:
    """One slapd process and its files."""

    def __init__(self, directory: Path, permissive: bool = True, port: int | None = None,
                 tls: bool = False, san: bool = True) -> None:
        self.slapd = find_slapd()
        self.directory = Path(directory)
        self.permissive = permissive
        self.port = port or free_port()
        #: with tls=True: also ldaps:// on this port, StartTLS on ``port``; CA in ``ca.pem``
        self.tls_port = free_port() if tls else None
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.directory / "slapd.log"
        self._populated = False
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "db").mkdir(exist_ok=True)
        if tls:
            write_tls_files(self.directory, san=san)
        (self.directory / "slapd.conf").write_text(_config(self.directory, permissive, tls))
        (self.directory / "people.ldif").write_text(_ldif_people())
        (self.directory / "groups.ldif").write_text(_ldif_groups())

    @property
    def url(self) -> str:
        return f"ldap://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _urls(self) -> str:
        urls = f"{self.url}/"
        if self.tls_port:
            urls += f" ldaps://127.0.0.1:{self.tls_port}/"
        return urls

    def start(self, timeout: float = 10.0) -> "Slapd":
        """Start in the foreground (``-d 256``: stats log, which records every BIND)."""
        if self.process is not None and self.process.poll() is None:
            return self
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [self.slapd, "-f", str(self.directory / "slapd.conf"), "-h", self._urls(), "-d", "256"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"slapd exited with {self.process.returncode}; log:\n{self.log_text()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"slapd did not listen on {self.port} within {timeout}s") from None
                time.sleep(0.02)
        if not self._populated:
            for name in ("people.ldif", "groups.ldif"):
                done = subprocess.run(["ldapadd", "-x", "-H", self.url, "-D", ROOT_DN, "-w", ROOT_PW,
                                       "-f", str(self.directory / name)], capture_output=True, text=True)
                if done.returncode != 0:
                    self.stop()
                    raise RuntimeError(f"ldapadd {name} failed ({done.returncode}): {done.stderr}")
            self._populated = True
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM by pid, then SIGKILL if it lingers."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL by pid: connections reset, no goodbye."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(5)

    def pause(self) -> None:
        """SIGSTOP: connections stay open, nothing answers (a hung directory).
        Returns once the process is stopped (on a loaded machine the signal
        can take a moment, and slapd would still answer meanwhile)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                stat = Path(f"/proc/{self.process.pid}/stat").read_text()
            except OSError:
                return  # no /proc: nothing to wait on
            if stat.rsplit(")", 1)[1].split()[0] in ("T", "t"):
                return
            time.sleep(0.005)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def binds(self) -> list[str]:
        """Every bind DN the server logged (``""`` for anonymous binds)."""
        return re.findall(r'BIND dn="([^"]*)" method=', self.log_text())

    def bind_count(self) -> int:
        return len(self.binds())


def stop_all(servers: list["Slapd"]) -> None:
    """Stop every server a test started, resuming any it left paused (SIGSTOP)
    first so that it can exit."""
    for server in servers:
        if server.process is not None:
            try:
                server.resume()
            except Exception:
                pass
        server.stop()
