"""Production serves ``wss`` with TLS 1.3 only (DESIGN §5; issue 18 item 5).

A real daphne, started as docs/deploy.md starts it on its own TLS endpoint
(``-e tls13:...``, ``mwportal/tls.py``), with a certificate made for the
test: a client that speaks TLS 1.3 gets HTTP answers and completes a
WebSocket upgrade; a client that goes no higher than TLS 1.2 is refused in
the handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import http.client
import ipaddress
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from websockets.asyncio.client import connect

from missions.models import Group, GroupEvent
from tests.conftest import AgentKey, group_revision
from tests.delivery.conftest import Client, Daphne, daphne_process_env, in_db_thread
from tests.deploy.conftest import PRODUCTION_ENV

pytestmark = pytest.mark.django_db(transaction=True)


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A P-256 key and a one-day certificate for ``localhost`` and 127.0.0.1: ``(key.pem, cert.pem)``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_file, cert_file = directory / "key.pem", directory / "cert.pem"
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_file, cert_file


def client_context(cert: Path, maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    """A client context that trusts only the test certificate, optionally capped at ``maximum``."""
    context = ssl.create_default_context(cafile=str(cert))
    # Python's default floor is TLS 1.2; the 1.2-capped client must really offer 1.2.
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if maximum is not None:
        context.maximum_version = maximum
    return context


def agent_socket_path() -> str:
    """The Agents' WebSocket route (the first fixed path of missions/routing.py)."""
    from missions.routing import websocket_urlpatterns

    fixed = [str(p.pattern) for p in websocket_urlpatterns if str(p.pattern) and "<" not in str(p.pattern)]
    assert fixed, "missions/routing.py has no fixed WebSocket route"
    return "/" + fixed[0].lstrip("^").rstrip("$")


@contextlib.contextmanager
def tls_daphne_running(settings: Any, directory: Path, extra: dict[str, str | None]) -> Iterator[tuple[Daphne, Path]]:
    key, cert = self_signed(directory)
    server = Daphne(daphne_process_env(settings, 0.2, extra), tls=(key, cert))
    server.start()
    try:
        yield server, cert
    finally:
        server.kill()


@pytest.fixture
def tls_daphne(settings: Any, tmp_path: Path) -> Iterator[tuple[Daphne, Path]]:
    with tls_daphne_running(settings, tmp_path, {}) as running:
        yield running


def get(server: Daphne, cert: Path, path: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPSConnection("localhost", server.port, timeout=30, context=client_context(cert))
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response
    finally:
        conn.close()


def test_it_answers_https_and_upgrades_wss_for_a_tls_1_3_client(tls_daphne: tuple[Daphne, Path]) -> None:
    server, cert = tls_daphne
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        client_context(cert).wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.version() == "TLSv1.3"

    response = get(server, cert, "/")
    # An anonymous visitor of the portal is sent to the sign-in page.
    assert response.status == 302
    assert response.getheader("Location", "").startswith("/login/")

    async def upgrade() -> str:
        url = f"wss://localhost:{server.port}{agent_socket_path()}"
        async with connect(url, ssl=client_context(cert), open_timeout=10) as ws:
            assert ws.response is not None and ws.response.status_code == 101
            version = ws.transport.get_extra_info("ssl_object").version()
            return str(version)

    assert asyncio.run(upgrade()) == "TLSv1.3"


def test_it_delivers_replayed_and_live_events_over_wss(
    tls_daphne: tuple[Daphne, Path],
    mission: dict[str, str],
    owner: AgentKey,
    worker: AgentKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The live path writes framed Events straight to the transport
    (missions/direct_send.py); on the TLS endpoint that transport encrypts,
    so subscribers get the same Events as over plain TCP."""
    server, cert = tls_daphne
    # The suite's socket client builds the default context, which trusts SSL_CERT_FILE.
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    g = mission["group"]

    def change_roles() -> int:
        owner.send("membership.change", g, {"principal": worker.actor, "roles": ["reviewer", "worker"]},
                   expected_revision=group_revision(g))  # fmt: skip
        return Group.objects.get(id=g).last_sequence

    async def scenario() -> tuple[str, list[dict[str, Any]]]:
        client = await Client.open(server, worker)  # the four-phase HELLO (§6.3) over wss
        version = str(client.ws.transport.get_extra_info("ssl_object").version())
        await client.subscribe(g, 0)
        got = await client.events(g, await in_db_thread(lambda: Group.objects.get(id=g).last_sequence))
        got += await client.events(g, await in_db_thread(change_roles))
        await client.close()
        return version, got

    version, got = asyncio.run(scenario())
    assert version == "TLSv1.3"
    assert got == [e.as_wire() for e in GroupEvent.objects.filter(group_id=g).order_by("sequence")]


def test_it_refuses_a_client_limited_to_tls_1_2(tls_daphne: tuple[Daphne, Path]) -> None:
    server, cert = tls_daphne
    capped = client_context(cert, maximum=ssl.TLSVersion.TLSv1_2)
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        pytest.raises(ssl.SSLError, match="PROTOCOL_VERSION"),
    ):
        capped.wrap_socket(raw, server_hostname="localhost")

    async def upgrade() -> None:
        async with connect(f"wss://localhost:{server.port}{agent_socket_path()}", ssl=capped, open_timeout=10):
            pass

    with pytest.raises(ssl.SSLError, match="PROTOCOL_VERSION"):
        asyncio.run(upgrade())

    # The refusal is the handshake's, not a server that stopped: a 1.3 client still gets in.
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        client_context(cert).wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.version() == "TLSv1.3"


def test_it_treats_a_request_on_the_tls_endpoint_as_secure_with_mwp_production(settings: Any, tmp_path: Path) -> None:
    """docs/deploy.md: without a proxy, ``MWP_PRODUCTION=1`` needs no
    ``X-Forwarded-Proto``; the TLS connection itself makes the request secure
    (no redirect to HTTPS, and HSTS, which Django sends on secure requests only)."""
    env: dict[str, str | None] = {**PRODUCTION_ENV, "MWP_ALLOWED_HOSTS": "localhost"}
    with tls_daphne_running(settings, tmp_path, env) as (server, cert):
        response = get(server, cert, "/")
    assert response.status == 302
    assert response.getheader("Location", "").startswith("/login/")
    assert "max-age=" in response.getheader("Strict-Transport-Security", "")
