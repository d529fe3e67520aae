"""What a WebSocket may do before and after it authenticates (issue 16 item 8, PROTOCOL §17.3).

- ``SameOrigin``: an ASGI middleware that refuses, at the handshake, a
  browser's cross-site connection. A browser sends ``Origin``; it must be the
  portal's own origin (the scheme the request came in by, ``ws`` as ``http``
  and ``wss`` as ``https``, and the ``Host`` header's host and port, the host
  among ``ALLOWED_HOSTS``) or one of ``MWP_WS_ALLOWED_ORIGINS``. Channels'
  ``AllowedHostsOriginValidator`` matched the host only, so
  ``http://portal:8080`` or a plain-``http`` page could open the ``https``
  portal's stream with its visitor's cookie. ``require=True`` (the browser's
  route) refuses a missing ``Origin`` too; the Agents' route admits none
  (a non-browser client sends none) but refuses a foreign one, since a page
  holding a bearer token in JavaScript is as exposed as a cookie.
- ``Limits``: the settings below, read and checked once per connection.
- ``TokenBucket``: a per-connection rate, with no clock of its own.
- ``Unauthenticated``: the per-process count of connections that have not
  completed the HELLO handshake yet, by client address.

Settings (``mwportal/settings.py``, from the environment)::

    MWP_WS_ALLOWED_ORIGINS                 more origins a browser may open sockets from
    MWP_WS_HELLO_TIMEOUT_SECONDS           close a connection not past HELLO after this (10)
    MWP_WS_MAX_UNAUTHENTICATED_PER_ADDRESS connections before HELLO, per address and daphne process (32)
    MWP_WS_MAX_SUBSCRIPTIONS               Groups one connection may follow at once (1024)
    MWP_WS_SUBSCRIBE_PER_SECOND            SUBSCRIBE frames per second (50)
    MWP_WS_SUBSCRIBE_BURST                 ... of which at once (1024)
    MWP_WS_PRESENCE_PER_MINUTE             PING frames per minute (300)
    MWP_WS_PRESENCE_BURST                  ... of which at once (30)
    MWP_WS_GROUP_WINDOW                    Events of one Group sent and not acknowledged
                                           before that Group is paused (BACKPRESSURE, §17.3) (1000)
    MWP_WS_BACKPRESSURE_RETRY_MS           the retryAfterMs of a pause: when it is lifted without
                                           an ACK if the connection has taken what was sent (500)

Each is read from the settings, else from the environment of that name
(so a daphne started with it set uses it), else the default.

The address is the one daphne puts in the scope: behind the documented proxy,
run daphne with ``--proxy-headers`` so it is the client's, not the proxy's.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http.request import split_domain_port, validate_host

# How long a client should wait after an INTERNAL_ERROR before it retries
# the same frame (spec §19): long enough for a pool or a failover to recover.
INTERNAL_ERROR_RETRY_AFTER_MS = 1000

Origin = tuple[str, str, int]  # (scheme, host, port), scheme "http" or "https"
_DEFAULT_PORT = {"http": 80, "https": 443}


def parse_origin(value: str) -> Origin | None:
    """``scheme://host[:port]`` as a comparable triple; None for anything else
    (``null``, a path, userinfo, a scheme other than http and https)."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORT or not parts.hostname or parts.username is not None:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    return scheme, parts.hostname.lower(), port if port is not None else _DEFAULT_PORT[scheme]


def allowed_origins() -> list[Origin]:
    """``MWP_WS_ALLOWED_ORIGINS`` parsed; a value that is not an origin is a configuration error."""
    parsed = []
    for value in getattr(settings, "MWP_WS_ALLOWED_ORIGINS", []):
        origin = parse_origin(value)
        if origin is None:
            raise ImproperlyConfigured(f"MWP_WS_ALLOWED_ORIGINS: {value!r} is not an origin like https://host[:port]")
        parsed.append(origin)
    return parsed


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value).decode("latin1")
    return None


def _secure(scope: dict[str, Any]) -> bool:
    """Whether the client reached us over TLS: a ``wss`` scope, or the proxy's
    header that Django's ``SECURE_PROXY_SSL_HEADER`` trusts for HTTP."""
    if scope.get("scheme") == "wss":
        return True
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if not proxy:
        return False
    name, expected = proxy
    header = name.removeprefix("HTTP_").replace("_", "-").lower().encode("latin1")
    value = _header(scope, header)
    return value is not None and value.split(",")[0].strip() == expected


def own_origin(scope: dict[str, Any]) -> Origin | None:
    """The portal's origin as this request addressed it, or None when its
    ``Host`` is missing or not in ``ALLOWED_HOSTS``."""
    host = _header(scope, b"host")
    if not host:
        return None
    domain, port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    scheme = "https" if _secure(scope) else "http"
    return scheme, domain.strip("[]"), int(port) if port else _DEFAULT_PORT[scheme]


def origin_allowed(scope: dict[str, Any], origin: str) -> bool:
    parsed = parse_origin(origin)
    if parsed is None:
        return False
    return parsed == own_origin(scope) or parsed in allowed_origins()


class SameOrigin:
    """Refuse the handshake (daphne answers 403) of a WebSocket whose
    ``Origin`` is not the portal's own; ``require``: refuse one without."""

    def __init__(self, app: Any, *, require: bool):
        self.app, self.require = app, require

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket":
            origin = _header(scope, b"origin")
            if (origin is None and self.require) or (origin is not None and not origin_allowed(scope, origin)):
                # Closing before accepting refuses the upgrade itself.
                await send({"type": "websocket.close"})
                return None
        return await self.app(scope, receive, send)


def _positive(name: str, default: float) -> float:
    value: Any = getattr(settings, name, None)
    if value is None:
        text = os.environ.get(name)
        try:
            value = default if text is None else float(text)
        except ValueError:
            value = text
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or not math.isfinite(value):
        raise ImproperlyConfigured(f"{name}: must be a positive number, not {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Limits:
    hello_timeout: float
    max_unauthenticated: int
    max_subscriptions: int
    subscribe_rate: float
    subscribe_burst: int
    presence_rate: float
    presence_burst: int
    group_window: int = 1000
    backpressure_retry_ms: int = 500

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(
            hello_timeout=_positive("MWP_WS_HELLO_TIMEOUT_SECONDS", 10),
            max_unauthenticated=int(_positive("MWP_WS_MAX_UNAUTHENTICATED_PER_ADDRESS", 32)),
            max_subscriptions=int(_positive("MWP_WS_MAX_SUBSCRIPTIONS", 1024)),
            subscribe_rate=_positive("MWP_WS_SUBSCRIBE_PER_SECOND", 50),
            subscribe_burst=int(_positive("MWP_WS_SUBSCRIBE_BURST", 1024)),
            presence_rate=_positive("MWP_WS_PRESENCE_PER_MINUTE", 300) / 60,
            presence_burst=int(_positive("MWP_WS_PRESENCE_BURST", 30)),
            group_window=int(_positive("MWP_WS_GROUP_WINDOW", 1000)),
            backpressure_retry_ms=int(_positive("MWP_WS_BACKPRESSURE_RETRY_MS", 500)),
        )


class TokenBucket:
    """``rate`` tokens a second up to ``burst``; the caller passes the time, so
    the bucket is a pure function of its calls (testable with no clock)."""

    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, rate: float, burst: int, now: float):
        if not rate > 0 or burst < 1:
            raise ValueError("a token bucket needs a positive rate and a burst of at least 1")
        self.rate, self.burst = rate, float(burst)
        self.tokens, self.stamp = float(burst), now

    def take(self, now: float) -> int:
        """Take a token: 0 when one was there, else the milliseconds until one will be (at least 1)."""
        # A clock that went back refills nothing and drains nothing.
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.stamp) * self.rate)
        self.stamp = max(self.stamp, now)
        if self.tokens >= 1:
            self.tokens -= 1
            return 0
        return max(1, math.ceil((1 - self.tokens) / self.rate * 1000))


class Unauthenticated:
    """Connections not yet past ``hello``, by client address, in this process.

    The consumers of one daphne process share its event loop, so the counts
    need no lock; several processes each hold their own (the cap is per
    process)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def admit(self, address: str, cap: int) -> bool:
        if self.counts[address] >= cap:
            return False
        self.counts[address] += 1
        return True

    def release(self, address: str) -> None:
        self.counts[address] -= 1
        if self.counts[address] <= 0:
            del self.counts[address]


unauthenticated = Unauthenticated()


def client_address(scope: dict[str, Any]) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"
