"""The portal's own error pages, and one log line per refused request, against
a real daphne with ``MWP_DEBUG`` unset (issue 16 items 3 and 8).

The review sent an unauthenticated request with a bad Host header and got
Django's technical page with ``DATABASE_URL`` and its password; every refused
request also logged a 35-line traceback.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import path

from tests.delivery.conftest import Daphne, database_url

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def daphne_env() -> dict[str, str | None]:
    # What ./mw serve and a production daphne run with: no MWP_DEBUG at all.
    return {"MWP_DEBUG": None, "MWP_LOG_LEVEL": "INFO"}


def request(server: Daphne, method: str, url: str, headers: dict[str, str]) -> tuple[int, str, dict[str, str]]:
    status, got, body = server.http(method, url, headers=headers, timeout=10)
    return status, body.decode(), got


def secrets_of_this_server() -> list[str]:
    return [database_url(), str(settings.DATABASES["default"]["NAME"]), settings.SECRET_KEY, "DATABASE_URL",
            "SECRET_KEY", "Traceback", "settings.py"]  # fmt: skip


def test_it_answers_a_bad_host_with_the_portals_400_page_and_leaks_nothing(daphne: Daphne) -> None:
    """issue 16 item 3: the review's request, unauthenticated, with a Host not in ALLOWED_HOSTS."""
    status, body, headers = request(daphne, "GET", "/", {"Host": "attacker.example"})
    assert status == 400
    assert 'data-status="400"' in body and "PROTOCOL_VIOLATION: the portal could not read this request." in body
    assert headers["content-type"].startswith("text/html")
    for secret in secrets_of_this_server():
        assert secret not in body, secret
    assert "attacker.example" not in body  # not even the header is echoed


def test_it_answers_an_unknown_path_with_the_portals_404_page(daphne: Daphne) -> None:
    """issue 16 item 3: no technical 404 listing the URL patterns."""
    status, body, _ = request(daphne, "GET", "/no/such/page", {"Host": "localhost"})
    assert status == 404
    assert 'data-status="404"' in body and "GROUP_NOT_FOUND" in body
    assert "api/v0.1/" not in body and "URLconf" not in body


def test_it_logs_a_refused_request_as_one_line(daphne: Daphne) -> None:
    """issue 16 item 8: a bad Host (django.security) and a PermissionDenied
    (django.request) each log one line, with the reason, and no traceback."""
    get_user_model().objects.create_user("nobody", password="pw-nobody-long-enough")
    client = Client()
    assert client.login(username="nobody", password="pw-nobody-long-enough")
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    before = daphne.log.stat().st_size

    assert request(daphne, "GET", "/", {"Host": "attacker.example"})[0] == 400
    status, body, _ = request(daphne, "GET", "/", {"Host": "localhost", "Cookie": cookie})
    assert status == 403 and 'data-status="403"' in body  # signed in, but no Agent: the portal's 403 page
    assert 400 <= request(daphne, "GET", "/api/v0.1/groups/x/events", {"Host": "localhost"})[0] < 500  # DRF

    log = daphne.log.read_bytes()[before:].decode()
    assert "Traceback" not in log, log
    lines = [line for line in log.splitlines() if "django." in line]
    assert any("django.security.DisallowedHost" in line and "Invalid HTTP_HOST header: 'attacker.example'" in line
               for line in lines), log  # fmt: skip
    assert any("Forbidden (Permission denied): /" in line and "no Agent" in line for line in lines), log
    assert all('File "' not in line for line in log.splitlines()), log


def boom(request: Any) -> Any:
    raise RuntimeError("db password is hunter2")


urlpatterns = [path("boom", boom)]


@pytest.mark.urls("tests.deploy.test_errors")
def test_it_answers_a_crash_with_the_portals_500_page(settings: Any) -> None:
    """issue 16 item 3: a server error is the portal's page; the exception's text stays in the log."""
    settings.DEBUG = False
    response = Client(raise_request_exception=False).get("/boom")
    assert response.status_code == 500
    body = response.content.decode()
    assert 'data-status="500"' in body and "INTERNAL_ERROR" in body
    assert "hunter2" not in body and "Traceback" not in body
