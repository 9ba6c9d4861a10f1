"""TLS client connections that always check the peer by name.

Every TLS client in the gateway (LDAP ``ldaps://`` and StartTLS, key-set and
discovery fetches, Redis, pass-through auth) builds its connection creator
here; upstream connections use the standard library's ``ssl`` with the same
settings and the same name check (:mod:`twistgw.stdtls`)::

    from twistgw.tls import client_tls, describe_tls_failure

    creator = client_tls("ldap.example.org", ca_pem=pem_bytes)   # or ca_pem=None: system trust
    endpoint = wrapClientTLS(creator, TCP4ClientEndpoint(reactor, host, 636))
    # StartTLS: transport.startTLS(creator); HTTP: twistgw.api.http.HttpClient (which uses client_tls)
    # an Agent for URLs of many hosts: Agent(reactor, contextFactory=verifying_https_policy(ca_pem=...))

The creator refuses, and fails the connection before any application data is
sent, when the peer's chain does not lead to a trusted CA, or its certificate
does not name the server by subjectAltName (a DNS name, or an IP address when
the server is given as one). A certificate with **no** subjectAltName is
refused too: the subject's common name is never used (RFC 9525 §6.3; RFC 6125
before it). Twisted's own ``optionsForClientTLS`` lets that case through:
its verify callback catches only ``VerificationError``, while
service-identity raises ``CertificateError`` for a certificate without DNS or
IP names, and the catch-all logs it and completes the handshake.

The connection then fails with :class:`PeerRefused` (its message says why);
:func:`describe_tls_failure` turns that, and OpenSSL's own handshake errors,
into one line for a log. Settings that cannot work (a PEM that holds no
certificate, an unknown TLS version or cipher) raise :class:`TLSSettingsError`
when the creator is built, so configuration checks can call
:func:`client_tls` to validate.
"""

from __future__ import annotations

import ipaddress
import ssl as stdssl
from collections.abc import Callable, Sequence

import idna
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from OpenSSL import SSL, crypto
from service_identity import CertificateError, VerificationError
from service_identity.cryptography import verify_certificate_hostname, verify_certificate_ip_address
from twisted.internet import ssl
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.protocols.tls import TLSMemoryBIOProtocol
from twisted.python.failure import Failure
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

__all__ = [
    "TLS_VERSIONS",
    "PeerRefused",
    "TLSSettingsError",
    "X509_ERRORS",
    "acceptable_ciphers",
    "check_names",
    "client_tls",
    "common_name",
    "describe_tls_failure",
    "https_policy",
    "identity_options",
    "is_ip",
    "name_problem",
    "pem_certificates",
    "sni_bytes",
    "tls12_suites",
    "version_options",
    "verifying_https_policy",
]

#: Gloo's ``minimumProtocolVersion`` / ``maximumProtocolVersion`` names.
TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLSv1_0": ssl.TLSVersion.TLSv1_0,
    "TLSv1_1": ssl.TLSVersion.TLSv1_1,
    "TLSv1_2": ssl.TLSVersion.TLSv1_2,
    "TLSv1_3": ssl.TLSVersion.TLSv1_3,
}
_VERSION_ORDER = list(TLS_VERSIONS)

#: OpenSSL's X509_V_ERR codes seen most often, for readable log lines.
X509_ERRORS = {
    9: "certificate is not yet valid",
    10: "certificate has expired",
    18: "self-signed certificate not issued by a trusted CA",
    19: "self-signed certificate in the chain",
    20: "issuer certificate not found among the trusted CAs",
    21: "unable to verify the first certificate",
    24: "invalid CA certificate",
    26: "certificate not meant for this purpose",
}


class TLSSettingsError(ValueError):
    """TLS client settings that cannot be used (bad PEM, version, ciphers)."""


class PeerRefused(Exception):
    """The TLS peer's certificate was refused; the message says why."""


def pem_certificates(pem: bytes, what: str) -> list[x509.Certificate]:
    try:
        found = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise TLSSettingsError(f"{what}: no PEM certificate could be read ({exc})") from None
    if not found:
        raise TLSSettingsError(f"{what}: holds no PEM certificate")
    return found


def _version(name: str | None, which: str) -> ssl.TLSVersion | None:
    if name is None or name == "TLS_AUTO":
        return None
    if name not in TLS_VERSIONS:
        raise TLSSettingsError(f"{which} TLS version {name!r} is not one of"
                               f" {', '.join(['TLS_AUTO', *TLS_VERSIONS])}")
    return TLS_VERSIONS[name]


def acceptable_ciphers(ciphers: str | Sequence[str] | None) -> ssl.AcceptableCiphers | None:
    if ciphers is None:
        return None
    names = [ciphers] if isinstance(ciphers, str) else list(ciphers)
    # Envoy (BoringSSL) writes equal-preference groups as "[A|B]"; OpenSSL has
    # no such groups, so their members are listed in order instead
    text = ":".join(n.strip().removeprefix("[").removesuffix("]").replace("|", ":") for n in names)
    # never a suite without a server certificate: nothing to verify by name
    text += ":!aNULL:!eNULL:!PSK:!SRP"
    try:
        accepted: ssl.AcceptableCiphers = ssl.AcceptableCiphers.fromOpenSSLCipherString(text)  # unannotated
    except Exception as exc:  # OpenSSL.SSL.Error: no suite of the list is known to this OpenSSL
        raise TLSSettingsError(f"cipher suites {names!r} refused by OpenSSL: {exc}") from None
    return accepted


def check_names(server_name: str, verify_names: Sequence[str]) -> list[str]:
    names = list(verify_names) or [server_name]
    for name in [server_name, *verify_names]:
        if not name or any(c.isspace() for c in name):
            raise TLSSettingsError(f"server name {name!r} is empty or has spaces")
    if not is_ip(server_name):
        sni_bytes(server_name)
    return names


def sni_bytes(name: str) -> bytes:
    """The server name as SNI sends it: ASCII as it is (``my_service`` too),
    other names IDNA-encoded."""
    if name.isascii():
        return name.lower().encode("ascii")
    try:
        return idna.encode(name, uts46=True)
    except idna.IDNAError as exc:
        raise TLSSettingsError(f"server name {name!r} is not a valid host name: {exc}") from None


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _sans(cert: x509.Certificate) -> list[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [*ext.get_values_for_type(x509.DNSName), *(str(ip) for ip in ext.get_values_for_type(x509.IPAddress))]


def name_problem(cert: x509.Certificate, names: Sequence[str]) -> str | None:
    """None when the certificate names one of ``names``; else why not."""
    for name in names:
        try:
            if is_ip(name):
                verify_certificate_ip_address(cert, name)
            else:
                verify_certificate_hostname(cert, name)
            return None
        except (VerificationError, CertificateError):
            continue
        except Exception as exc:  # anything else is a refusal too, never a pass
            return f"its names could not be checked ({type(exc).__name__}: {exc})"
    wanted = " or ".join(names)
    sans = _sans(cert)
    if not sans:
        return (f"it has no DNS or IP subjectAltName (the subject's common name is never used);"
                f" expected {wanted}")
    return f"it names {', '.join(sans)}, not {wanted}"


@implementer(IOpenSSLClientConnectionCreator)
class _VerifyingCreator:
    """Makes client TLS connections that verify the chain and the name in
    OpenSSL's verify callback: a refusal stops the handshake with an alert
    and fails the connection with :class:`PeerRefused`."""

    def __init__(self, context: SSL.Context, server_name: str, names: Sequence[str]) -> None:
        self._context = context
        self._names = tuple(names)
        self._sni = None if is_ip(server_name) else sni_bytes(server_name)

    def clientConnectionForTLS(self, tlsProtocol: TLSMemoryBIOProtocol) -> SSL.Connection:
        connection = SSL.Connection(self._context, None)
        connection.set_app_data(tlsProtocol)
        if self._sni is not None:
            connection.set_tlsext_host_name(self._sni)
        connection.set_verify(SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT, self._callback(tlsProtocol))
        return connection

    def _callback(self, protocol: TLSMemoryBIOProtocol) -> Callable[[SSL.Connection, crypto.X509, int, int, int],
                                                                    bool]:
        names = self._names
        holder: list[TLSMemoryBIOProtocol] = [protocol]  # dropped once decided: no cycle

        def refuse(why: str) -> bool:
            if holder:
                holder.pop().failVerification(Failure(PeerRefused(why)))
            return False

        def verify(conn: SSL.Connection, cert: crypto.X509, errno: int, depth: int, ok: int) -> bool:
            try:
                if not ok:
                    reason = X509_ERRORS.get(errno, f"X.509 verification error {errno}")
                    subject = common_name(cert.to_cryptography()) or "(no common name)"
                    return refuse(f"the peer's certificate chain is not trusted: {reason}"
                                  f" (at depth {depth}, subject CN {subject})")
                if depth != 0:
                    return True
                problem = name_problem(cert.to_cryptography(), names)
                if problem is not None:
                    return refuse(f"the peer's certificate is refused: {problem}")
                holder.clear()
                return True
            except BaseException as exc:  # never let an error in here pass a peer
                return refuse(f"the peer's certificate could not be checked ({type(exc).__name__}: {exc})")

        return verify


def _trust_options(ca_pem: bytes | None) -> dict[str, object]:
    if ca_pem is None:
        return {"trustRoot": ssl.platformTrust()}
    cas = pem_certificates(ca_pem, "CA certificates")
    return {"trustRoot": ssl.trustRootFromCertificates(
        [ssl.Certificate(crypto.X509.from_cryptography(c)) for c in cas])}


def identity_options(cert_pem: bytes | None, key_pem: bytes | None, what: str = "client") -> dict[str, object]:
    """``CertificateOptions`` arguments for a certificate (then its
    intermediates) and its key, PEM: a client's (mutual TLS) or, with
    ``what="server"``, a listener's."""
    if (cert_pem is None) != (key_pem is None):
        raise TLSSettingsError(f"a {what} certificate needs its private key, and a key its certificate")
    if cert_pem is None or key_pem is None:
        return {}
    chain = pem_certificates(cert_pem, f"{what} certificate")
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise TLSSettingsError(f"{what} key: not an unencrypted PEM private key ({exc})") from None
    # cryptography's objects, as pyOpenSSL (24.3+) takes them: its own
    # X509 and PKey are deprecated there (Twisted only hands these on to
    # use_certificate, use_privatekey and add_extra_chain_cert)
    return {"privateKey": key, "certificate": chain[0], "extraCertChain": list(chain[1:])}


def common_name(cert: x509.Certificate) -> str | None:
    """The subject's first common name, for log lines (never for a decision)."""
    names = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    value = names[0].value if names else None
    return value.decode("latin-1") if isinstance(value, bytes) else value


def version_options(min_version: str | None, max_version: str | None) -> dict[str, object]:
    low, high = _version(min_version, "minimum"), _version(max_version, "maximum")
    if low is not None and high is not None and \
            _VERSION_ORDER.index(min_version or "") > _VERSION_ORDER.index(max_version or ""):
        raise TLSSettingsError(f"minimum TLS version {min_version} is above the maximum {max_version}")
    options: dict[str, object] = {}
    if low is not None:
        options["insecurelyLowerMinimumTo" if low in (ssl.TLSVersion.TLSv1_0, ssl.TLSVersion.TLSv1_1)
                else "raiseMinimumTo"] = low
    if high is not None:
        options["lowerMaximumSecurityTo"] = high
    return options


def client_tls(
    server_name: str,
    *,
    ca_pem: bytes | None = None,
    client_cert_pem: bytes | None = None,
    client_key_pem: bytes | None = None,
    min_version: str | None = None,
    max_version: str | None = None,
    ciphers: str | Sequence[str] | None = None,
    alpn: Sequence[bytes] = (),
    verify_names: Sequence[str] = (),
) -> IOpenSSLClientConnectionCreator:
    """A client connection creator that verifies the peer by name, always.

    :param server_name: the name sent as SNI (not for an IP address) and,
        unless ``verify_names`` is given, the name the certificate must carry
        as a DNS (or, for an IP address, IP) subjectAltName.
    :param ca_pem: the trusted CA certificates (one or more PEM blocks); None
        trusts the system's store (OpenSSL's default paths, which honour
        ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``).
    :param client_cert_pem: the client certificate (then intermediates) for
        mutual TLS; needs ``client_key_pem``.
    :param client_key_pem: its private key (PEM, unencrypted).
    :param min_version: ``TLSv1_0`` ... ``TLSv1_3`` or ``TLS_AUTO``; the
        default is Twisted's (TLS 1.2).
    :param max_version: the same names; the default is the highest known.
    :param ciphers: an OpenSSL cipher string, or a list of cipher names
        (Gloo's ``cipherSuites``); TLS 1.3 suites are OpenSSL's defaults.
    :param alpn: protocols to offer by ALPN, e.g. ``(b"http/1.1",)``.
    :param verify_names: names one of which the certificate must carry instead
        of ``server_name`` (Gloo's ``verifySubjectAltName``).
    :raises TLSSettingsError: for settings that cannot be used.
    """
    names = check_names(server_name, verify_names)
    options: dict[str, object] = {
        **_trust_options(ca_pem),
        **identity_options(client_cert_pem, client_key_pem),
        **version_options(min_version, max_version),
    }
    accepted = acceptable_ciphers(ciphers)
    if accepted is not None:
        options["acceptableCiphers"] = accepted
    if alpn:
        options["acceptableProtocols"] = list(alpn)
    try:
        context = ssl.CertificateOptions(**options).getContext()  # type: ignore[arg-type]
    except (SSL.Error, crypto.Error, ValueError) as exc:  # e.g. a cipher list naming no usable cipher
        raise TLSSettingsError(f"TLS settings refused by OpenSSL: {exc}") from None
    return _VerifyingCreator(context, server_name, names)


def tls12_suites(creator: IOpenSSLClientConnectionCreator) -> list[str]:
    """The TLS 1.2 (and older) cipher suites a creator of :func:`client_tls`
    offers, by OpenSSL name, in order (TLS 1.3's are OpenSSL's own)."""
    assert isinstance(creator, _VerifyingCreator)
    return [name for name in SSL.Connection(creator._context, None).get_cipher_list()
            if not name.startswith("TLS_")]


@implementer(IPolicyForHTTPS)
class _Policy:
    def __init__(self, creator: IOpenSSLClientConnectionCreator) -> None:
        self._creator = creator

    def creatorForNetloc(self, hostname: bytes, port: int) -> IOpenSSLClientConnectionCreator:
        return self._creator


def https_policy(creator: IOpenSSLClientConnectionCreator) -> IPolicyForHTTPS:
    """An ``Agent`` ``contextFactory`` that uses ``creator`` for every
    ``https`` URL (whatever host the URL names: the creator's server name is
    what is verified)."""
    return _Policy(creator)


@implementer(IPolicyForHTTPS)
class _PerHostPolicy:
    def __init__(self, make: Callable[[str], IOpenSSLClientConnectionCreator]) -> None:
        self._make = make
        self._creators: dict[str, IOpenSSLClientConnectionCreator] = {}

    def creatorForNetloc(self, hostname: bytes, port: int) -> IOpenSSLClientConnectionCreator:
        name = hostname.decode("ascii")
        creator = self._creators.get(name)
        if creator is None:
            creator = self._creators[name] = self._make(name)
        return creator


def verifying_https_policy(*, ca_pem: bytes | None = None, client_cert_pem: bytes | None = None,
                           client_key_pem: bytes | None = None, min_version: str | None = None,
                           max_version: str | None = None) -> IPolicyForHTTPS:
    """An ``Agent`` ``contextFactory`` for URLs of any host: each host's
    certificate is checked against that host's name with :func:`client_tls`
    (one creator per host name, kept). Use it in place of Twisted's default
    ``BrowserLikePolicyForHTTPS``, which accepts a certificate without
    subjectAltName. Bad settings raise :class:`TLSSettingsError` here."""

    def make(name: str) -> IOpenSSLClientConnectionCreator:
        return client_tls(name, ca_pem=ca_pem, client_cert_pem=client_cert_pem, client_key_pem=client_key_pem,
                          min_version=min_version, max_version=max_version)

    make("settings.check")
    return _PerHostPolicy(make)


def describe_tls_failure(exc: BaseException) -> str | None:
    """One line for a log when ``exc`` is a TLS failure, else None."""
    if isinstance(exc, PeerRefused):
        return f"TLS peer refused: {exc}"
    if isinstance(exc, stdssl.SSLError):  # the standard library's (upstream connections)
        text = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
        text = text.rpartition("] ")[2].split(" (_ssl.c:")[0]  # "[SSL: X] tlsv1 alert ... (_ssl.c:N)"
        return "TLS handshake failed: " + (text or type(exc).__name__)
    if isinstance(exc, SSL.Error):
        details = [part for arg in exc.args for part in (arg if isinstance(arg, list) else [arg])]
        reasons = [str(d[2]) if isinstance(d, tuple) and len(d) == 3 else str(d) for d in details]
        return "TLS handshake failed: " + ("; ".join(r for r in reasons if r) or type(exc).__name__)
    return None
