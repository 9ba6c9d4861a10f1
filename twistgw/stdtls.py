"""TLS client settings for the standard library's :mod:`ssl` (the engine's
upstream connections, :mod:`twistgw.engine.upstream.memtls`), with the
rules of :mod:`twistgw.tls`: the same settings are accepted and refused
(they are checked by building :func:`~twistgw.tls.client_tls`'s context
first), the same cipher suites offered, and the peer's name checked by the
same function, with the same words::

    context = client_context(ca_pem=ca, min_version="TLSv1_2", alpn=("http/1.1",))  # kept per settings
    sni, names = server_names("backend.example.org")                                # per connection
    tls = context.wrap_bio(incoming, outgoing, server_hostname=sni)
    ...handshake...
    problem = peer_problem(tls.getpeercert(True), names)   # None, or why it is refused

The standard library has no verify callback: the chain is verified by
OpenSSL during the handshake, the name right after it (before the caller
sends any application data).
"""

from __future__ import annotations

import functools
import os
import secrets
import ssl as stdssl
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from twistgw.tls import (X509_ERRORS, PeerRefused, TLSSettingsError, check_names, client_tls, is_ip, name_problem,
                         sni_bytes, tls12_suites)

if TYPE_CHECKING:
    from twistgw.api.upstreampolicy import UpstreamTls

__all__ = ["client_context", "peer_problem", "server_names", "untrusted", "upstream_context"]


#: the standard library's names of the TLS versions
_STD_VERSIONS = {
    "TLSv1_0": stdssl.TLSVersion.TLSv1,
    "TLSv1_1": stdssl.TLSVersion.TLSv1_1,
    "TLSv1_2": stdssl.TLSVersion.TLSv1_2,
    "TLSv1_3": stdssl.TLSVersion.TLSv1_3,
}


def server_names(server_name: str, verify_names: Sequence[str] = ()) -> tuple[str, tuple[str, ...]]:
    """``(server_hostname, names)`` of a connection to ``server_name``: the
    standard library's ``server_hostname`` (the name sent as SNI, IDNA-encoded
    as :func:`client_tls` sends it; an IP address as it is, for which no SNI
    is sent), and the names one of which the certificate must carry, as
    :func:`client_tls` checks them.

    :raises TLSSettingsError: for a name that cannot be used.
    """
    names = check_names(server_name, verify_names)
    hostname = server_name if is_ip(server_name) else sni_bytes(server_name).decode("ascii")
    return hostname, tuple(names)


def peer_problem(der: bytes | None, names: Sequence[str]) -> str | None:
    """None when the peer's certificate (DER, as ``SSLObject.getpeercert(True)``
    gives it) names one of ``names``, else why it is refused: the same check
    and the same words as :func:`client_tls`'s."""
    if not der:
        return "the peer's certificate is refused: it sent none"
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError as exc:
        return f"the peer's certificate could not be checked (ValueError: {exc})"
    problem = name_problem(cert, names)
    return None if problem is None else f"the peer's certificate is refused: {problem}"


#: OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH
_NAME_MISMATCH = (62, 64)


def untrusted(exc: stdssl.SSLCertVerificationError, names: Sequence[str]) -> PeerRefused:
    """The :class:`PeerRefused` of a certificate the standard library's
    handshake refused, in :func:`client_tls`'s words (the depth and subject
    of the refused certificate are not reported by the standard library):
    its chain, or (``check_hostname`` contexts) its name."""
    code = exc.verify_code
    if code in _NAME_MISMATCH:
        return PeerRefused(f"the peer's certificate is refused: it does not name {' or '.join(names)}"
                           f" (checked by OpenSSL during the handshake, before the client certificate is sent)")
    reason = X509_ERRORS.get(code) or exc.verify_message or f"X.509 verification error {code}"
    return PeerRefused(f"the peer's certificate chain is not trusted: {reason}")


@functools.lru_cache(maxsize=64)
def client_context(
    *,
    ca_pem: bytes | None = None,
    client_cert_pem: bytes | None = None,
    client_key_pem: bytes | None = None,
    min_version: str | None = None,
    max_version: str | None = None,
    ciphers: tuple[str, ...] = (),
    alpn: tuple[str, ...] = (),
    check_hostname: bool = False,
) -> stdssl.SSLContext:
    """The standard library's client context for the settings of
    :func:`client_tls` (the same arguments; ``ciphers`` a tuple): the chain is
    verified by OpenSSL during the handshake against ``ca_pem`` (None: the
    system's store); the name is checked by the caller with
    :func:`peer_problem` once the handshake is done, before any application
    data is sent (the standard library has no verify callback). With
    ``check_hostname`` OpenSSL also checks the ``server_hostname`` during the
    handshake (subjectAltName only, never the common name): for mutual TLS,
    so that the client certificate is never sent to a server of the wrong
    name (``verifySubjectAltName`` names, which are not the SNI name, cannot
    be checked so). The TLS 1.2 cipher suites are
    exactly those Twisted's context would offer (Twisted's defaults when
    ``ciphers`` is empty); session tickets are not asked for, as Twisted
    does not. Contexts are kept (the same settings give the same context).

    OpenSSL loads a client certificate only from a file: the key is written,
    encrypted with a one-time password kept in memory, with the certificate
    chain to a private (0600) temporary file, which is removed as soon as it
    is loaded.

    :raises TLSSettingsError: for settings that cannot be used, with
        :func:`client_tls`'s messages.
    """
    creator = client_tls("settings.check", ca_pem=ca_pem, client_cert_pem=client_cert_pem,
                         client_key_pem=client_key_pem, min_version=min_version, max_version=max_version,
                         ciphers=ciphers or None)
    suites = tls12_suites(creator)
    try:
        context = stdssl.SSLContext(stdssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = check_hostname  # always checked by peer_problem too, as client_tls does
        context.hostname_checks_common_name = False
        context.verify_mode = stdssl.CERT_REQUIRED
        context.options |= stdssl.OP_NO_TICKET | stdssl.OP_NO_COMPRESSION
        if ca_pem is None:
            context.set_default_verify_paths()  # honours SSL_CERT_FILE and SSL_CERT_DIR
        else:
            context.load_verify_locations(cadata=ca_pem.decode("ascii"))
        context.minimum_version = _STD_VERSIONS[min_version] if min_version in _STD_VERSIONS \
            else stdssl.TLSVersion.TLSv1_2  # Twisted's default minimum
        if max_version in _STD_VERSIONS:
            context.maximum_version = _STD_VERSIONS[max_version]
        context.set_ciphers(":".join(suites))
        if alpn:
            context.set_alpn_protocols(list(alpn))
        if client_cert_pem is not None and client_key_pem is not None:
            _load_identity(context, client_cert_pem, client_key_pem)
    except (stdssl.SSLError, ValueError, UnicodeDecodeError) as exc:
        raise TLSSettingsError(f"TLS settings refused by OpenSSL: {exc}") from None
    return context


def upstream_context(tls: "UpstreamTls", alpn: tuple[str, ...] = ("http/1.1",)) -> stdssl.SSLContext:
    """:func:`client_context` for an Upstream's ``sslConfig``, ALPN
    ``http/1.1`` (``h2`` for an HTTP/2 upstream), the name also checked
    during the handshake when a client certificate is sent and the name is
    the SNI name: the configuration's check builds it, the engine's first
    connection reuses it."""
    return client_context(ca_pem=tls.ca_pem, client_cert_pem=tls.cert_pem, client_key_pem=tls.key_pem,
                          min_version=tls.min_version, max_version=tls.max_version, ciphers=tls.ciphers,
                          alpn=alpn, check_hostname=tls.cert_pem is not None and not tls.verify_names)


def _load_identity(context: stdssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """``load_cert_chain`` from a private temporary file holding the chain and
    the key encrypted with a one-time password; the file is gone on return."""
    key = serialization.load_pem_private_key(key_pem, password=None)
    password = secrets.token_bytes(32)
    sealed = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.BestAvailableEncryption(password))
    try:
        fd, path = tempfile.mkstemp(prefix="twistgw-client-", suffix=".pem")  # 0600, created here
    except OSError as exc:  # e.g. a read-only file system without a writable TMPDIR
        raise TLSSettingsError(f"the client certificate needs a temporary file (set TMPDIR to a writable"
                               f" directory): {exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cert_pem + b"\n" + sealed)
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)
