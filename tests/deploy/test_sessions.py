"""Portal sessions are stored under a hash of their key (issue 16 item 8).

The review found ``django_session`` keys in clear: a reader of the database
file or a backup could paste one into a cookie and be signed in.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.test import Client

from missions.commands import register_principal
from mwportal.sessions import stored_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in(org: dict[str, str]) -> tuple[Client, str]:
    get_user_model().objects.create_user("sam", password="pw-sam-long-enough")
    register_principal("acme", "Sam", "person", ["mission_owner"], None, user="sam")
    client = Client()
    response = client.post("/login/", {"username": "sam", "password": "pw-sam-long-enough"})
    assert response.status_code == 302, response.content[:300]
    return client, client.cookies[settings.SESSION_COOKIE_NAME].value


def test_it_keeps_no_session_key_in_clear(signed_in: tuple[Client, str]) -> None:
    """issue 16 item 8: the row holds only the digest of the cookie's key."""
    _, cookie = signed_in
    keys = list(Session.objects.values_list("session_key", flat=True))
    assert keys == [stored_key(cookie)]
    assert cookie not in keys
    assert len(keys[0]) == 40 and cookie not in Session.objects.get().session_data


def test_it_does_not_sign_in_with_a_key_read_from_the_database(signed_in: tuple[Client, str]) -> None:
    """issue 16 item 8: the attack itself: copy the stored key into a cookie."""
    client, cookie = signed_in
    assert client.get("/").status_code == 200  # the real cookie works

    thief = Client()
    thief.cookies[settings.SESSION_COOKIE_NAME] = Session.objects.get().session_key
    response = thief.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_it_deletes_the_stored_session_on_sign_out(signed_in: tuple[Client, str]) -> None:
    client, _ = signed_in
    assert client.post("/logout/").status_code == 302
    assert not Session.objects.exists()
