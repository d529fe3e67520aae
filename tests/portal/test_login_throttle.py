"""Sign-in throttling by account and by address (issue 16 item 4).

The review sent 30 wrong passwords in 8 s and then the right one, which
worked. These tests drive the real sign-in forms (the portal's ``/login/``
and the admin's ``/admin/login/``) through the Django test client, each
client with its own connection address, and move the clock with
time_machine.
"""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.test import Client
from django.utils import timezone

from tests.delivery.conftest import Daphne, daphne, daphne_env, head_poll_seconds  # noqa: F401 (fixtures)
from tests.portal.conftest import Person, make_person

LOGIN = "/login/"
ADMIN_LOGIN = "/admin/login/"
LIMIT: int = settings.AXES_FAILURE_LIMIT
COOL_OFF: timedelta = settings.AXES_COOLOFF_TIME


def from_address(address: str) -> Client:
    return Client(REMOTE_ADDR=address)


def sign_in(client: Client, username: str, password: str, url: str = LOGIN) -> Any:
    return client.post(url, {"username": username, "password": password})


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def fail(client: Client, username: str, times: int, url: str = LOGIN) -> Any:
    response = None
    for _ in range(times):
        response = sign_in(client, username, "not-the-password", url)
    assert not signed_in(client)
    return response


def assert_locked_out(response: Any, minutes: int) -> None:
    assert response.status_code == 429, response.status_code
    page = response.content.decode()
    unit = "minute" if minutes == 1 else "minutes"
    assert f"Too many failed sign-ins; try again in {minutes} {unit}." in page, page
    assert 0 < int(response["Retry-After"]) <= minutes * 60
    assert 'name="password"' in page  # the sign-in form is still there


@pytest.fixture(autouse=True)
def _fast_hashing(settings: Any) -> None:
    # Dozens of sign-ins per test: the production hasher's work factor is
    # not what these tests are about.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def bea(org: dict[str, str]) -> Person:
    return make_person("bea", ["coordinator"])


def test_it_refuses_the_right_password_once_the_account_is_locked(nick: Person) -> None:
    client = from_address("198.51.100.1")
    for _ in range(LIMIT - 1):
        assert sign_in(client, "nick", "wrong").status_code == 200
    cool_off_minutes = int(COOL_OFF.total_seconds() // 60)
    assert_locked_out(sign_in(client, "nick", "wrong"), cool_off_minutes)
    response = sign_in(client, "nick", "pw-nick")
    assert_locked_out(response, cool_off_minutes)
    assert not signed_in(client)
    # The portal stays closed to that client: no session was made.
    assert client.get("/").status_code == 302


def test_it_locks_the_account_from_every_address(nick: Person) -> None:
    """Spread over many addresses, guesses at one account still count."""
    for i in range(LIMIT):
        fail(from_address(f"203.0.113.{i + 1}"), "nick", 1)
    fresh = from_address("192.0.2.77")
    assert_locked_out(sign_in(fresh, "nick", "pw-nick"), int(COOL_OFF.total_seconds() // 60))
    assert not signed_in(fresh)


def test_it_locks_the_address_for_every_account(nick: Person, bea: Person) -> None:
    """Guesses at many accounts from one address lock that address, and only it."""
    attacker = from_address("198.51.100.9")
    for i in range(LIMIT):
        fail(attacker, f"guess{i}", 1)
    assert_locked_out(sign_in(attacker, "bea", "pw-bea"), int(COOL_OFF.total_seconds() // 60))
    # The same accounts from another address are unaffected.
    elsewhere = from_address("192.0.2.10")
    assert sign_in(elsewhere, "bea", "pw-bea").status_code == 302 and signed_in(elsewhere)


def test_it_leaves_other_accounts_and_addresses_alone(nick: Person, bea: Person) -> None:
    fail(from_address("198.51.100.2"), "nick", LIMIT)
    other = from_address("192.0.2.20")
    assert sign_in(other, "bea", "pw-bea").status_code == 302
    assert signed_in(other)


def test_it_opens_again_after_the_cool_off(nick: Person) -> None:
    client = from_address("198.51.100.3")
    with time_machine.travel(timezone.now(), tick=False) as clock:
        fail(client, "nick", LIMIT)
        clock.shift(COOL_OFF - timedelta(seconds=30))
        assert_locked_out(sign_in(client, "nick", "pw-nick"), 1)
        # That refused attempt did not extend the lockout.
        clock.shift(timedelta(seconds=31))
        assert sign_in(client, "nick", "pw-nick").status_code == 302
        assert signed_in(client)


def test_it_resets_the_account_on_success(nick: Person) -> None:
    client = from_address("198.51.100.4")
    fail(client, "nick", LIMIT - 1)
    assert sign_in(client, "nick", "pw-nick").status_code == 302
    client.post("/logout/")
    fail(client, "nick", LIMIT - 1)
    assert sign_in(client, "nick", "pw-nick").status_code == 302
    assert signed_in(client)


def test_it_does_not_let_a_sign_in_of_ones_own_reset_the_count_against_others(nick: Person, bea: Person) -> None:
    """Signing in to an account of one's own between guesses forgives only
    that account: the guesses at another account and from this address stay."""
    attacker = from_address("198.51.100.5")
    fail(attacker, "nick", LIMIT - 1)
    assert sign_in(attacker, "bea", "pw-bea").status_code == 302  # the attacker's own account
    attacker.post("/logout/")
    assert_locked_out(sign_in(attacker, "nick", "wrong"), int(COOL_OFF.total_seconds() // 60))
    assert_locked_out(sign_in(from_address("192.0.2.30"), "nick", "pw-nick"), int(COOL_OFF.total_seconds() // 60))


def test_it_throttles_the_admin_login_too(nick: Person, settings: Any) -> None:
    client = from_address("198.51.100.6")
    fail(client, "nick", LIMIT, ADMIN_LOGIN)
    response = sign_in(client, "nick", "pw-nick", ADMIN_LOGIN)
    assert_locked_out(response, int(COOL_OFF.total_seconds() // 60))
    assert not signed_in(client)
    # One count across both forms: the portal's refuses that account too.
    assert_locked_out(sign_in(from_address("192.0.2.40"), "nick", "pw-nick"), int(COOL_OFF.total_seconds() // 60))


def test_it_counts_the_connection_address_not_a_forwarded_header(nick: Person) -> None:
    """X-Forwarded-For is the client's to write: it neither spreads one
    client's guesses over many addresses nor locks out someone else's."""
    client = from_address("198.51.100.7")
    for i in range(LIMIT):
        client.post(LOGIN, {"username": f"guess{i}", "password": "x"}, HTTP_X_FORWARDED_FOR=f"10.9.{i}.1")
    assert_locked_out(
        client.post(LOGIN, {"username": "nick", "password": "pw-nick"}, HTTP_X_FORWARDED_FOR="10.99.0.1"),
        int(COOL_OFF.total_seconds() // 60),
    )


@pytest.mark.django_db(transaction=True)
def test_it_locks_out_on_a_real_daphne(daphne: Daphne, org: dict[str, str], settings: Any) -> None:  # noqa: F811
    """Under ASGI axes takes its asynchronous path, which calls the lockout
    page differently; a real daphne shows the same refusal."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]  # what daphne verifies
    make_person("dora", ["coordinator"])
    base = f"http://127.0.0.1:{daphne.port}"
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))

    def post(username: str, password: str) -> tuple[int, str, dict[str, str]]:
        page = opener.open(base + LOGIN, timeout=30).read().decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert token is not None, page
        data = urllib.parse.urlencode(
            {"username": username, "password": password, "csrfmiddlewaretoken": token.group(1)}
        ).encode()
        # http:// to the daphne this test started, never a caller's URL.
        request = urllib.request.Request(base + LOGIN, data=data, headers={"Referer": base + LOGIN})  # noqa: S310
        try:
            with opener.open(request, timeout=30) as response:
                return response.status, response.read().decode(), dict(response.headers)
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(), dict(error.headers)

    for _ in range(LIMIT - 1):
        assert post("dora", "wrong")[0] == 200
    status, page, headers = post("dora", "pw-dora")
    assert status == 200 and "Sign out" in page  # signed in: the count was below the limit
    jar.clear()  # a new browser: no session, and the success cleared the account's count
    for _ in range(LIMIT):
        status, page, headers = post("dora", "wrong")
    minutes = int(COOL_OFF.total_seconds() // 60)
    assert status == 429, (status, page[:500])
    assert f"Too many failed sign-ins; try again in {minutes} minutes." in page
    status, page, headers = post("dora", "pw-dora")
    assert status == 429 and f"try again in {minutes} minutes" in page
    assert 0 < int(headers["Retry-After"]) <= minutes * 60
