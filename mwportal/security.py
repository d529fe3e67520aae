"""The deployment's own defences (issue 16 items 2, 3 and 8).

- ``private_dir`` / ``private_file`` / ``installation_secret`` /
  ``write_private_json``: ``var/`` is
  mode 0700, and what the server keeps there (the SQLite database, the
  per-installation ``SECRET_KEY``) is mode 0600, also when an older
  installation created them world-readable.
- ``ContentSecurityPolicyMiddleware``: every response that does not set its
  own policy (the Artifact byte-serving views send ``sandbox``) gets the
  portal's policy: scripts, styles and connections from this origin only, no
  inline code except a per-request nonce, no plugins, no framing.
- ``csp_nonce``: the template context processor that hands that nonce to
  templates (``<script nonce="{{ csp_nonce }}">``).
- ``OneLineClientErrors``: a logging filter that turns a 4xx's traceback
  (``django.request`` and ``django.security`` attach ``exc_info``) into one
  line; a 5xx keeps its traceback.

This module is imported by ``mwportal/settings.py``, so it reads Django's
settings only inside the middleware, never at import time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils.deprecation import MiddlewareMixin

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """``path`` as a directory that is the server user's alone.

    Each missing level is created 0700 (``Path.mkdir(parents=True)`` would
    give the parents the default mode, listable by every user); an existing
    ``path`` an older installation left open is tightened to 0700.
    """
    missing = []
    level = path
    while not level.exists():
        missing.append(level)
        level = level.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # a concurrent process made it first
            directory.mkdir(mode=PRIVATE_DIR_MODE)
    if not missing and stat.S_IMODE(path.stat().st_mode) != PRIVATE_DIR_MODE:
        path.chmod(PRIVATE_DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Create ``path`` empty if absent, and make it mode 0600 either way.

    SQLite gives its ``-wal``, ``-shm`` and ``-journal`` files the mode of the
    database file, so a database created here stays private with its siblings.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != PRIVATE_FILE_MODE:
            os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm", "-journal"):
        sibling = path.with_name(path.name + suffix)
        if sibling.exists() and stat.S_IMODE(sibling.stat().st_mode) != PRIVATE_FILE_MODE:
            sibling.chmod(PRIVATE_FILE_MODE)
    return path


def write_private_json(path: Path, content: Any) -> None:
    """Write ``content`` as JSON readable by the owner only (mode 0600).

    The file is created with 0600 from the start (never world-readable, not
    even for an instant) and replaced atomically: a reader sees the old
    content or the new, never half of it. (Agent key files, the demo's
    logins, resumable-upload metadata.)
    """
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
        with os.fdopen(fd, "w") as fh:
            json.dump(content, fh, indent=2)
            fh.write("\n")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def installation_secret(path: Path) -> str:
    """The per-installation secret in ``path``, generated on first use.

    The key is written to a private temporary file and linked into place, so
    two processes starting at once (two daphnes, Celery) agree on one key and
    none ever reads a half-written file.
    """
    try:
        key = path.read_text().strip()
    except FileNotFoundError:
        key = ""
    if key:
        if stat.S_IMODE(path.stat().st_mode) != PRIVATE_FILE_MODE:
            path.chmod(PRIVATE_FILE_MODE)
        return key
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".secret-")  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(48) + "\n")
        # If another process won the race, its key is the installation's.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)
    return path.read_text().strip()


# --- Content Security Policy ---------------------------------------------------


def content_security_policy(request: HttpRequest, nonce: str) -> str:
    """The portal's policy for ``request``.

    ``connect-src`` names the WebSocket origin explicitly: CSP Level 3 lets
    ``'self'`` cover ws(s) of the same host, older browsers do not, and the
    Mission page's live timeline connects there.
    """
    ws = ("wss://" if request.is_secure() else "ws://") + request.get_host()
    return "; ".join([
        "default-src 'self'",
        f"script-src 'self' 'nonce-{nonce}'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        f"connect-src 'self' {ws}",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ])  # fmt: skip


class ContentSecurityPolicyMiddleware(MiddlewareMixin):
    """Set the portal's Content-Security-Policy on responses that set none.

    A ``MiddlewareMixin`` so that it is async-capable: under ASGI a chain of
    async-capable middleware runs on the event loop, and one sync-only
    middleware would move every request through a thread hop of its own.
    """

    def process_request(self, request: HttpRequest) -> None:
        request.csp_nonce = secrets.token_urlsafe(16)  # type: ignore[attr-defined]

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        from django.conf import settings

        if "Content-Security-Policy" in response.headers:
            return response  # a view's own policy (Artifacts: sandbox) stands
        if settings.DEBUG and response.status_code >= 400:
            # Django's technical error pages (MWP_DEBUG=1 only) are inline
            # styles and scripts; a policy would only make them unreadable.
            return response
        nonce = getattr(request, "csp_nonce", None) or secrets.token_urlsafe(16)
        response.headers["Content-Security-Policy"] = content_security_policy(request, nonce)
        return response


def csp_nonce(request: HttpRequest) -> dict[str, str]:
    """Template context: ``csp_nonce``, for the rare inline ``<script>``."""
    return {"csp_nonce": getattr(request, "csp_nonce", "")}


# --- logging ----------------------------------------------------------------------


class OneLineClientErrors(logging.Filter):
    """A client error is the client's mistake, not the server's: log it as one
    line (message and exception), not as a traceback. Server errors (5xx, and
    records without a status) keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info:
            return True
        status: Any = getattr(record, "status_code", None)
        client_error = isinstance(status, int) and 400 <= status < 500
        if not client_error and not record.name.startswith("django.security"):
            return True
        exc = record.exc_info[1]
        message = record.getMessage()
        if exc is not None and str(exc) and str(exc) not in message:
            message = f"{message} ({type(exc).__name__}: {exc})"
        record.msg, record.args = message, None
        record.exc_info, record.exc_text = None, None
        return True
