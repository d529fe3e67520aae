"""``missions/ws_limits.py`` without a server: origins, token buckets, settings (issue 16 item 8).

The same rules are exercised end to end against a real daphne in
``test_ws_hardening.py``; here their edges, with no event loop.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from missions.ws_limits import Limits, TokenBucket, allowed_origins, origin_allowed, own_origin, parse_origin


def scope(host: str | None, *extra: tuple[bytes, bytes], scheme: str = "ws") -> dict[str, Any]:
    headers = [(b"host", host.encode())] if host is not None else []
    return {"type": "websocket", "scheme": scheme, "headers": [*headers, *extra]}


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("http://Portal.Example", ("http", "portal.example", 80)),
        ("https://portal.example", ("https", "portal.example", 443)),
        ("https://portal.example:8443/", ("https", "portal.example", 8443)),
        ("http://[::1]:8000", ("http", "::1", 8000)),
        ("null", None),
        ("ws://portal.example", None),
        ("https://user@portal.example", None),
        ("https://portal.example/app", None),
        ("https://portal.example:99999", None),
        ("https://", None),
    ],
)
def test_it_parses_an_origin_or_refuses_it(value: str, parsed: tuple[str, str, int] | None) -> None:
    assert parse_origin(value) == parsed


@given(st.text(max_size=60))
def test_it_never_fails_on_any_origin_header(value: str) -> None:
    parsed = parse_origin(value)
    assert parsed is None or (parsed[0] in ("http", "https") and 0 <= parsed[2] <= 65535 and parsed[1])


@given(
    st.sampled_from(["http", "https"]),
    st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z]{2,6}){0,2}", fullmatch=True),
    st.none() | st.integers(1, 65535),
)
def test_it_reads_back_every_origin_it_is_given(scheme: str, host: str, port: int | None) -> None:
    value = f"{scheme}://{host}" + (f":{port}" if port is not None else "")
    assert parse_origin(value) == (scheme, host, port if port is not None else {"http": 80, "https": 443}[scheme])


@override_settings(ALLOWED_HOSTS=["portal.example", "[::1]"], SECURE_PROXY_SSL_HEADER=None)
def test_it_takes_the_portals_origin_from_the_request() -> None:
    assert own_origin(scope("portal.example:8000")) == ("http", "portal.example", 8000)
    assert own_origin(scope("portal.example", scheme="wss")) == ("https", "portal.example", 443)
    assert own_origin(scope("[::1]:9000")) == ("http", "::1", 9000)
    # A Host outside ALLOWED_HOSTS has no origin of ours (DNS rebinding).
    assert own_origin(scope("evil.example")) is None
    assert own_origin(scope(None)) is None


@override_settings(
    ALLOWED_HOSTS=["portal.example"],
    SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"),
    MWP_WS_ALLOWED_ORIGINS=[],
)
def test_it_trusts_the_proxys_scheme_header_as_django_does() -> None:
    behind_tls = scope("portal.example", (b"x-forwarded-proto", b"https"))
    assert origin_allowed(behind_tls, "https://portal.example")
    # Without the header the page must have been plain http.
    assert not origin_allowed(scope("portal.example"), "https://portal.example")
    assert origin_allowed(scope("portal.example"), "http://portal.example")


@override_settings(MWP_WS_ALLOWED_ORIGINS=["https://portal.example", "portal.example"])
def test_it_refuses_a_setting_that_is_not_an_origin() -> None:
    with pytest.raises(ImproperlyConfigured, match="portal.example"):
        allowed_origins()


@pytest.mark.parametrize("value", [0, -1, float("nan"), "10", True])
def test_it_refuses_a_limit_that_is_not_a_positive_number(value: object) -> None:
    with override_settings(MWP_WS_HELLO_TIMEOUT_SECONDS=value), pytest.raises(ImproperlyConfigured):
        Limits.from_settings()


def test_it_lets_a_burst_through_then_says_how_long_to_wait() -> None:
    bucket = TokenBucket(rate=2, burst=3, now=100.0)
    assert [bucket.take(100.0) for _ in range(3)] == [0, 0, 0]
    assert bucket.take(100.0) == 500
    assert bucket.take(100.25) == 250
    assert bucket.take(100.5) == 0
    # A clock that goes back neither refills nor drains the bucket.
    assert bucket.take(99.0) == 500


@given(st.lists(st.floats(0, 5, allow_nan=False), max_size=200), st.integers(1, 10), st.floats(0.1, 50))
def test_it_never_admits_more_than_the_burst_plus_the_rate(steps: list[float], burst: int, rate: float) -> None:
    bucket = TokenBucket(rate=rate, burst=burst, now=0.0)
    now, admitted = 0.0, 0
    for step in steps:
        now += step
        wait = bucket.take(now)
        admitted += wait == 0
        assert wait >= 0
    assert admitted <= burst + rate * now + 1e-6
