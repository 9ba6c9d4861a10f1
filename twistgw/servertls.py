"""TLS on the gateway's own listeners: the server side of :mod:`twistgw.tls`.

Two pieces, both free of any listener or configuration object:

* :func:`server_context` builds the OpenSSL context of one certificate (a
  VirtualService's ``sslConfig``): its certificate chain and key, the TLS
  versions and ciphers it accepts and, when it has a root CA, the
  verification of client certificates (required unless ``one_way``; one of
  ``verify_names`` must be among a client certificate's subjectAltNames).
  Contexts are cached by their settings, so a reload that changes nothing
  builds nothing, and the configuration check and the listener share one.
* :class:`ClientHelloProbe` reads the server name a client asks for (SNI)
  from the first bytes of a connection, before any certificate is chosen,
  as Envoy's ``tls_inspector`` does: the real handshake then starts with
  the chosen context, so every setting (versions, ciphers, client
  verification) applies from the first byte. OpenSSL parses the ClientHello
  (a throwaway connection with no certificate), not hand-written code.

Settings that cannot work raise :class:`twistgw.tls.TLSSettingsError` with
the reason (a key that is not the certificate's, a PEM without a
certificate, an unknown version or cipher).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from functools import lru_cache

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from OpenSSL import SSL, crypto
from twisted.internet import ssl

from twistgw.tls import TLSSettingsError, acceptable_ciphers, identity_options, pem_certificates, version_options

__all__ = ["ClientHelloProbe", "HTTP11", "MAX_CLIENT_HELLO", "client_verifier", "server_context"]

#: what the listener offers by ALPN: twistgw serves HTTP/1.1
HTTP11 = b"http/1.1"
#: a ClientHello (all its records) larger than this is refused
MAX_CLIENT_HELLO = 64 * 1024


def server_context(cert_pem: bytes, key_pem: bytes, *, ca_pem: bytes | None = None, one_way: bool = False,
                   verify_names: Sequence[str] = (), min_version: str | None = None,
                   max_version: str | None = None, ciphers: Sequence[str] = ()) -> SSL.Context:
    """The context of one server certificate; the same one for the same
    settings (cached). Do not change what it returns.

    :param cert_pem: the certificate, then its intermediates (PEM).
    :param key_pem: its private key (PEM, unencrypted).
    :param ca_pem: the CAs client certificates must chain to; None: client
        certificates are not asked for.
    :param one_way: with ``ca_pem``, a client may send no certificate (one it
        sends is still verified).
    :param verify_names: one of these must be a subjectAltName of the
        client's certificate (needs ``ca_pem``).
    :param min_version: ``TLSv1_0`` ... ``TLSv1_3``; default TLS 1.2.
    :param max_version: the same; default the highest OpenSSL knows.
    :param ciphers: cipher names (TLS 1.2 and below); default Twisted's.
    :raises TLSSettingsError: settings that cannot be used.
    """
    return _cached_context(cert_pem, key_pem, ca_pem, one_way, tuple(verify_names), min_version, max_version,
                           tuple(ciphers))


@lru_cache(maxsize=256)
def _cached_context(cert_pem: bytes, key_pem: bytes, ca_pem: bytes | None, one_way: bool,
                    verify_names: tuple[str, ...], min_version: str | None, max_version: str | None,
                    ciphers: tuple[str, ...]) -> SSL.Context:
    if verify_names and ca_pem is None:
        raise TLSSettingsError("verifySubjectAltName needs a root CA to verify client certificates with")
    options = {**identity_options(cert_pem, key_pem, "server"), **version_options(min_version, max_version)}
    _check_key_matches(cert_pem, key_pem)
    cas: list[x509.Certificate] = []
    if ca_pem is not None:
        cas = pem_certificates(ca_pem, "root CA")
        options.update(verify=True, requireCertificate=not one_way,
                       caCerts=[crypto.X509.from_cryptography(c) for c in cas])
    accepted = acceptable_ciphers(ciphers or None)
    if accepted is not None:
        options["acceptableCiphers"] = accepted
    options["acceptableProtocols"] = [HTTP11]
    try:
        context = ssl.CertificateOptions(**options).getContext()  # type: ignore[arg-type]
    except (SSL.Error, crypto.Error, ValueError) as exc:
        raise TLSSettingsError(f"TLS settings refused by OpenSSL: {exc}") from None
    if cas:
        mode = SSL.VERIFY_PEER if one_way else SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT
        context.set_verify(mode, client_verifier(verify_names))
        for ca in cas:  # the CA names a client is told to choose its certificate by
            context.add_client_ca(ca)
    return context


def _check_key_matches(cert_pem: bytes, key_pem: bytes) -> None:
    cert = pem_certificates(cert_pem, "server certificate")[0]
    key = serialization.load_pem_private_key(key_pem, password=None)
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki):
        raise TLSSettingsError("the private key does not belong to the certificate (the first one in the PEM)")


def client_verifier(names: Sequence[str]) -> Callable[[SSL.Connection, crypto.X509, int, int, int], bool]:
    """OpenSSL's verify callback for client certificates: the chain as
    OpenSSL judged it, and, when ``names`` are given, one of them among the
    leaf's subjectAltNames (Envoy's ``verify_subject_alt_name``: DNS names,
    with a certificate's ``*.`` wildcard matching one label, URIs, e-mail
    addresses and IP addresses, compared exactly; the subject's common name
    is never used). Never raises: an error refuses the certificate."""
    wanted = tuple(names)

    def verify(conn: SSL.Connection, cert: crypto.X509, errno: int, depth: int, ok: int) -> bool:
        if not ok:
            return False
        if depth != 0 or not wanted:
            return True
        try:
            return _san_matches(cert.to_cryptography(), wanted)
        except Exception:
            return False

    return verify


def _san_matches(cert: x509.Certificate, wanted: tuple[str, ...]) -> bool:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    dns = [n.lower() for n in sans.get_values_for_type(x509.DNSName)]
    exact = {*sans.get_values_for_type(x509.UniformResourceIdentifier), *sans.get_values_for_type(x509.RFC822Name),
             *(str(ip) for ip in sans.get_values_for_type(x509.IPAddress))}
    for name in wanted:
        if name in exact or _ip_text(name) in exact:
            return True
        lowered = name.lower()
        for san in dns:
            if san == lowered or (san.startswith("*.") and "." in lowered
                                  and lowered.split(".", 1)[1] == san[2:] and lowered.split(".", 1)[0]):
                return True
    return False


def _ip_text(name: str) -> str:
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


def _probe_context() -> SSL.Context:
    context = SSL.Context(SSL.TLS_SERVER_METHOD)
    context.set_min_proto_version(SSL.TLS1_VERSION)

    def heard(conn: SSL.Connection) -> None:
        conn.set_app_data((conn.get_servername(),))

    context.set_tlsext_servername_callback(heard)
    return context


_PROBE_CONTEXT: list[SSL.Context] = []


class ClientHelloProbe:
    """Learns the server name of a TLS connection from its first bytes.

    Feed it what the client sent with :meth:`feed` until it returns True;
    then :attr:`server_name` is the name asked for (lower-cased, no trailing
    dot) or None (no SNI, or not a ClientHello at all: the real handshake
    then fails on the same bytes). Nothing is ever sent to the client."""

    __slots__ = ("_conn", "_size", "server_name")

    def __init__(self) -> None:
        if not _PROBE_CONTEXT:
            _PROBE_CONTEXT.append(_probe_context())
        self._conn: SSL.Connection | None = SSL.Connection(_PROBE_CONTEXT[0], None)
        self._conn.set_accept_state()
        self._size = 0
        self.server_name: str | None = None

    def feed(self, data: bytes) -> bool:
        """True once the server name is known (or never will be)."""
        conn = self._conn
        if conn is None:
            return True
        self._size += len(data)
        conn.bio_write(data)
        try:
            conn.do_handshake()
        except SSL.WantReadError:
            if conn.get_app_data() is None and self._size <= MAX_CLIENT_HELLO:
                return False
        except SSL.Error:
            pass
        heard = conn.get_app_data()
        self._conn = None
        if heard is not None and heard[0]:
            self.server_name = _name_text(heard[0])
        return True


def _name_text(raw: bytes) -> str | None:
    try:
        return raw.decode("ascii").lower().rstrip(".") or None
    except UnicodeDecodeError:
        return None
