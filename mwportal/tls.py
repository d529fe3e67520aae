"""daphne's own TLS endpoint, TLS 1.3 only (DESIGN §5: production serves ``wss`` with TLS 1.3 only).

    daphne -e tls13:8443:privateKey=/etc/mwp/tls/key.pem:certKey=/etc/mwp/tls/cert.pem mwportal.asgi:application

Twisted's own ``ssl:`` endpoint string cannot say "TLS 1.3 only": its parser
(``twisted.internet.endpoints._parseSSL``) builds ``CertificateOptions`` with
Twisted's default minimum, TLS 1.2, and its one version knob, ``sslmethod``,
names a pyOpenSSL method constant, of which there is none for TLS 1.3 alone.
So this module gives daphne a ``tls13:`` endpoint type whose context is
``CertificateOptions(raiseMinimumTo=TLSv1_3)``: OpenSSL refuses every
ClientHello that cannot speak 1.3 with a ``protocol_version`` alert, before
any byte reaches the application.

Twisted finds endpoint types as plugins of ``twisted.plugins`` on
``sys.path``; ``twisted/plugins/mwp_tls.py`` in the checkout is the plugin
that names :data:`PARSER`. daphne puts its working directory on ``sys.path``
before it reads its endpoints, so daphne started from the checkout (as it
must be anyway, to import ``mwportal.asgi``) has ``tls13:``.

Arguments, Twisted-style (``:`` separated, ``\\:`` for a literal colon):
``PORT``, ``privateKey`` (PEM), ``certKey`` (PEM certificate, default the key
file), ``extraCertChain`` (PEM intermediates), ``interface`` (default all
IPv4 addresses) and ``backlog`` (50).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from twisted.internet.endpoints import SSL4ServerEndpoint
from twisted.internet.interfaces import IStreamServerEndpointStringParser
from twisted.internet.ssl import Certificate, CertificateOptions, PrivateCertificate, TLSVersion
from twisted.plugin import IPlugin
from zope.interface import implementer

PREFIX = "tls13"
_PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


def tls13_options(
    private_key: str | Path, certificate: str | Path, chain: str | Path | None = None
) -> CertificateOptions:
    """A server context from PEM files that speaks TLS 1.3 and nothing older
    (the files are read as Twisted's ``ssl:`` endpoint reads them)."""
    both = Path(certificate).read_bytes() + b"\n" + Path(private_key).read_bytes()
    pair = PrivateCertificate.loadPEM(both)  # type: ignore[no-untyped-call]  # Twisted leaves it unannotated
    extra = None
    if chain is not None:
        extra = [Certificate.loadPEM(pem).original for pem in _PEM_CERTIFICATE.findall(Path(chain).read_bytes())]
        if not extra:
            raise ValueError(f"{chain} holds no PEM certificate")
    return CertificateOptions(
        privateKey=pair.privateKey.original,
        certificate=pair.original,
        extraCertChain=extra,
        raiseMinimumTo=TLSVersion.TLSv1_3,
    )


@implementer(IPlugin, IStreamServerEndpointStringParser)
class TLS13ServerParser:
    """``tls13:PORT:privateKey=...:certKey=...``: a TCP/IPv4 listener whose TLS is 1.3 only."""

    prefix = PREFIX

    def parseStreamServer(
        self,
        reactor: Any,
        port: str,
        privateKey: str | None = None,
        certKey: str | None = None,
        extraCertChain: str | None = None,
        interface: str = "",
        backlog: str = "50",
    ) -> SSL4ServerEndpoint:
        if privateKey is None:
            raise ValueError("tls13: needs privateKey=PATH (and certKey=PATH unless the key holds the certificate)")
        options = tls13_options(privateKey, certKey or privateKey, extraCertChain)
        # Twisted leaves the constructor unannotated.
        return SSL4ServerEndpoint(reactor, int(port), options, backlog=int(backlog), interface=interface)  # type: ignore[no-untyped-call]


PARSER = TLS13ServerParser()
