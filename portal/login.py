"""Sign-in throttling (issue 16 item 4), on django-axes.

Every password sign-in over HTTP (the portal's ``/login/`` and the admin's
``/admin/login/``; both call ``authenticate(request, ...)``) is counted by
account and by address: ``MWP_LOGIN_FAILURE_LIMIT`` failures within
``MWP_LOGIN_COOLOFF_MINUTES`` lock that user name (from every address) and
that address (for every user name) until the cool-off has passed since the
last counted failure. While locked, even the right password is refused, and
the page says so: "too many failed sign-ins; try again in N minutes" (HTTP
429 with ``Retry-After``). Attempts made during a lockout do not extend it.

A successful sign-in clears the failures of that account from that address,
and nothing else: clearing by address as well (axes' own reset) would let
someone interleave sign-ins to an account of their own to keep guessing at
others from the same address.

The address is the connection's (``REMOTE_ADDR``), never a header the client
writes; behind the documented proxy, daphne runs with ``--proxy-headers`` so
that the connection's address is the one the proxy saw.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_client_username, get_cool_off, get_failure_limit
from axes.models import AccessAttempt
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone


class SignInThrottle(AxesStandaloneBackend):  # type: ignore[misc]  # axes ships no type hints
    """Refuses every sign-in of a locked account or address, before any
    password is checked (the backends after it then never run).

    ``authenticate()`` without a request is not a sign-in over HTTP (the test
    client's ``login()``, a shell): there is no address to count, so it is
    left to the next backend instead of failing. Every HTTP sign-in path of
    this project passes the request (Django's LoginView and the admin's
    AuthenticationForm do); the throttle tests drive both forms.
    """

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> None:
        if request is None:
            return None
        super().authenticate(request, username=username, password=password, **kwargs)
        return None


def client_address(request: HttpRequest) -> str | None:
    """The address a sign-in is counted under: the connection's own.

    Set as ``AXES_CLIENT_IP_CALLABLE`` so that installing django-ipware later
    cannot switch the count to the client-written ``X-Forwarded-For``.
    """
    return request.META.get("REMOTE_ADDR") or None


def locked_until(request: HttpRequest, credentials: dict[str, Any] | None) -> datetime | None:
    """When the lockout of this request's account or address ends (None: not locked).

    Axes counts a failure as long as the attempt row that holds it was last
    touched within the cool-off. For each lockout parameter (the account,
    the address) the lockout lasts while the most recent rows still add up
    to the limit: it ends a cool-off after the row at which they reach it.
    """
    cool_off = get_cool_off(request)
    if cool_off is None:
        return None
    limit = get_failure_limit(request, credentials)
    ends: list[datetime] = []
    handler = AxesProxyHandler.get_implementation()
    for attempts in handler.get_user_attempts(request, credentials):
        total = 0
        for failures, attempt_time in attempts.order_by("-attempt_time").values_list(
            "failures_since_start", "attempt_time"
        ):
            total += failures
            if total >= limit:
                ends.append(attempt_time + cool_off)
                break
    return max(ends) if ends else None


def lockout_response(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE``: the sign-in page again, with the refusal.

    Axes calls it with ``(request, original_response, credentials)`` on a
    synchronous stack and ``(request, credentials)`` on an asynchronous one
    (daphne), so the credentials are read from the request, where axes put
    them in both cases.
    """
    credentials = getattr(request, "axes_credentials", None)
    now = timezone.now()
    until = locked_until(request, credentials) or now + (get_cool_off(request) or timedelta(minutes=1))
    seconds = max(1, math.ceil((until - now).total_seconds()))
    minutes = math.ceil(seconds / 60)
    username = get_client_username(request, credentials) or ""
    form = AuthenticationForm(request, initial={"username": username})
    response = render(
        request,
        "portal/login.html",
        {
            "form": form,
            "next": request.POST.get("next", request.GET.get("next", "")),
            "locked_minutes": minutes,
        },
        status=429,
    )
    response["Retry-After"] = str(seconds)
    return response


def clear_failures_on_sign_in(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    """``user_logged_in``: the account's failures from this address are forgiven.

    Only (account, address): see the module docstring for why not the
    address's failures against other accounts.
    """
    if request is None:
        return
    AccessAttempt.objects.filter(username=user.get_username(), ip_address=client_address(request)).delete()
