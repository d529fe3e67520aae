"""Portal sessions stored under a hash of their key (issue 16 item 8).

Django's database store keeps the session key, which *is* the browser's
session cookie, in ``django_session.session_key`` in clear: anyone who reads
the table or a backup signs in as whoever is signed in. This store is
Django's, with one change: every row is keyed by ``BLAKE2b-160(session key)``
(40 hex digits, the column's width). The cookie still carries the key; the
database only its digest, from which no cookie can be made. The key is 32
characters from a 36-letter alphabet (about 165 bits), so the digest needs no
salt or stretching.

``SESSION_ENGINE = "mwportal.sessions"``. Rows written by the plain store
before this one are never matched, so switching signs everyone out once.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.contrib.sessions.models import Session
from django.utils import timezone


def stored_key(session_key: str) -> str:
    """The column value for ``session_key``."""
    return hashlib.blake2b(session_key.encode(), digest_size=20).hexdigest()


class SessionStore(DatabaseSessionStore):
    def _get_session_from_db(self) -> Session | None:
        if self.session_key is None:
            return None
        try:
            return Session.objects.get(session_key=stored_key(self.session_key), expire_date__gt=timezone.now())
        except Session.DoesNotExist:
            self._session_key = None
            return None

    async def _aget_session_from_db(self) -> Session | None:
        if self.session_key is None:
            return None
        try:
            return await Session.objects.aget(session_key=stored_key(self.session_key), expire_date__gt=timezone.now())
        except Session.DoesNotExist:
            self._session_key = None
            return None

    def exists(self, session_key: str) -> bool:
        return Session.objects.filter(session_key=stored_key(session_key)).exists()

    async def aexists(self, session_key: str) -> bool:
        return await Session.objects.filter(session_key=stored_key(session_key)).aexists()

    # _get_or_create_session_key is Django's (base.py), missing from its type stubs.
    def create_model_instance(self, data: dict[str, Any]) -> Session:
        return Session(
            session_key=stored_key(self._get_or_create_session_key()),  # type: ignore[attr-defined]
            session_data=self.encode(data),
            expire_date=self.get_expiry_date(),
        )

    async def acreate_model_instance(self, data: dict[str, Any]) -> Session:
        return Session(
            session_key=stored_key(await self._aget_or_create_session_key()),  # type: ignore[attr-defined]
            session_data=self.encode(data),
            expire_date=await self.aget_expiry_date(),
        )

    def delete(self, session_key: str | None = None) -> None:
        key = self.session_key if session_key is None else session_key
        if key is not None:
            Session.objects.filter(session_key=stored_key(key)).delete()

    async def adelete(self, session_key: str | None = None) -> None:
        key = self.session_key if session_key is None else session_key
        if key is not None:
            await Session.objects.filter(session_key=stored_key(key)).adelete()
