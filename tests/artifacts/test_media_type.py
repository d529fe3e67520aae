"""Upload media types (issue 16 item 6): RFC 6838 tokens, at most the column's 200 characters.

On PostgreSQL a media type over ``Blob.media_type``'s 200 characters (or one
holding a NUL) was a 500 from the database; SQLite stored it. Both backends
now answer 400 SCHEMA_VALIDATION_FAILED before a byte is stored, on the single and the
resumable upload. Run on PostgreSQL too::

    MWP_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test MWP_TEST_DATABASE_NAME=test_artifacts \\
      .venv/bin/python -m pytest -q tests/artifacts/test_media_type.py
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from artifacts.models import Blob
from artifacts.store import MEDIA_TYPE_MAX, check_media_type
from mwportal.protocol import ErrorCode, ProtocolError
from mwportal.protocol.ids import urn
from tests.api.support import error_of, malformed_naming, show
from tests.artifacts.conftest import Artifacts

UPLOADS = "/api/v0.1/artifacts/uploads"
FIRST = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
REST = FIRST + "!#$&^_.+-"
restricted_names = st.builds(lambda a, b: a + b, st.sampled_from(FIRST), st.text(REST, max_size=126))
media_types = st.builds(lambda t, s: f"{t}/{s}", restricted_names, restricted_names)


def test_the_bound_is_the_model_fields_length() -> None:
    assert MEDIA_TYPE_MAX == Blob._meta.get_field("media_type").max_length == 200


@given(media_types)
def test_it_accepts_an_rfc_6838_media_type_exactly_when_it_fits_the_column(value: str) -> None:
    if len(value) <= MEDIA_TYPE_MAX:
        assert check_media_type(value) == value
    else:
        with pytest.raises(ProtocolError) as info:
            check_media_type(value)
        assert info.value.code == ErrorCode.SCHEMA_VALIDATION_FAILED and "200" in info.value.message


@given(media_types, st.integers(min_value=0, max_value=300), st.characters(exclude_characters=REST))
def test_it_refuses_any_character_outside_the_tokens(value: str, at: int, bad: str) -> None:
    """Whatever else the value is: a NUL, a space, a second slash, a parameter, non-ASCII."""
    at = min(at, len(value))
    with pytest.raises(ProtocolError) as info:
        check_media_type(value[:at] + bad + value[at:])
    assert info.value.code == ErrorCode.SCHEMA_VALIDATION_FAILED
    assert info.value.details == {"field": "Content-Type"}


def post_single(art: Artifacts, media_type: str) -> Any:
    client, auth = art.client(art.worker)
    return client.post(f"/api/v0.1/artifacts?groupId={urn(art.group)}", data=b"bytes", content_type=media_type, **auth)


def post_resumable(art: Artifacts, media_type: str) -> Any:
    client, auth = art.client(art.worker)
    return client.post(f"{UPLOADS}?groupId={urn(art.group)}", content_type=media_type, HTTP_UPLOAD_LENGTH="5", **auth)


LONG = "x" * 100 + "/" + "y" * 100  # 201 characters, each name within RFC 6838's 127
TOO_LONG_NAME = "a/" + "b" * 128  # a subtype over RFC 6838's 127


@pytest.mark.parametrize("post", [post_single, post_resumable], ids=["single", "resumable"])
@pytest.mark.parametrize("media_type", [LONG, TOO_LONG_NAME, "text/plain\x00", "text /plain", "text"])
def test_it_answers_400_for_a_bad_media_type_on_every_backend_issue_16_item_6(
    art: Artifacts, post: Callable[[Artifacts, str], Any], media_type: str
) -> None:
    response = post(art, media_type)
    malformed_naming(response, "Content-Type")
    assert not Blob.objects.exists()


@pytest.mark.parametrize("post", [post_single, post_resumable], ids=["single", "resumable"])
def test_it_stores_a_media_type_of_exactly_200_characters(
    art: Artifacts, post: Callable[[Artifacts, str], Any]
) -> None:
    media_type = LONG[:-1]
    response = post(art, media_type)
    assert response.status_code == 201, show(response)
    if post is post_single:
        assert Blob.objects.get().media_type == media_type


def test_parameters_are_dropped_and_the_type_kept(art: Artifacts) -> None:
    response = post_single(art, "text/csv; charset=utf-8")
    assert response.status_code == 201 and response.json()["mediaType"] == "text/csv"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(st.characters(codec="latin-1"), max_size=300))
def test_no_content_type_answers_500(art: Artifacts, media_type: str) -> None:
    """Any header text a client can send (HTTP headers are latin-1): 201 or 400, never 5xx."""
    for post in (post_single, post_resumable):
        response = post(art, media_type)
        if response.status_code != 201:
            error_of(response, 400, "SCHEMA_VALIDATION_FAILED")
