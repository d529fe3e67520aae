"""The Worker's few REST calls to the portal (DESIGN §5, under ``/api/v0.1/``):
``keys/{keyId}`` (the Group Authority's key bindings), ``memberships``,
``groups/{groupId}/events`` (a Group's head), snapshots, ``commands`` (an
in-doubt Command's receipt) and Artifact uploads, on a thread because the
stdlib client blocks.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from mwportal.protocol.ids import bare, urn

from .errors import Refused
from .protocol import error_reason


class _Http:
    """A few JSON calls to the portal, on a thread (the stdlib client blocks)."""

    def __init__(self, base: str):
        self.base = base.rstrip("/")
        self.chunk_max: int | None = None  # the portal's, once a resumable upload told it

    async def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        body: Any = None,
        data: bytes | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        return await asyncio.to_thread(self._call, method, path, token, body, data, content_type)

    def _call(
        self,
        method: str,
        path: str,
        token: str | None,
        body: Any,
        data: bytes | None,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        url = path if path.startswith(("http://", "https://")) else self.base + urllib.parse.quote(path, safe="/?=&")
        if body is not None:
            data = json.dumps(body).encode("utf-8")
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (the configured portal URL)
        if data is not None:
            request.add_header("Content-Type", content_type)
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, {"code": "HTTP", "message": raw[:200].decode("utf-8", "replace")}

    async def put_artifact(self, token: str | None, group: str, data: bytes, media_type: str) -> str:
        return await asyncio.to_thread(self.put_artifact_blocking, token, group, data, media_type)

    def put_artifact_blocking(self, token: str | None, group: str, data: bytes, media_type: str) -> str:
        """Upload ``data`` as an Artifact of ``group`` (a ``urn:uuid:``); its content hash ``sha256:<hex>``.

        Up to the portal's ``chunk_max`` (until known: ``SINGLE_UPLOAD_BYTES``)
        in one request; larger through the resumable upload, a chunk per
        request (under daphne a request body sits whole in the portal's
        memory), resuming from the portal's offset after a lost answer.
        """
        if len(data) <= (self.chunk_max or SINGLE_UPLOAD_BYTES):
            status, payload = self._call(
                "POST", f"/api/v0.1/artifacts?groupId={urn(bare(group, 'groupId'))}", token, None, data, media_type
            )
            if status != 201:
                raise _error_of(status, payload)
            return str(payload["contentHash"])
        sha = "sha256:" + hashlib.sha256(data).hexdigest()
        status, payload = self._call(
            "POST", f"/api/v0.1/artifacts/uploads?groupId={urn(bare(group, 'groupId'))}", token, None, b"",
            media_type, {"Upload-Length": str(len(data))},
        )  # fmt: skip
        if status != 201:
            raise _error_of(status, payload)
        self.chunk_max = chunk_max = int(payload["chunkMax"])
        url = f"/api/v0.1/artifacts/uploads/{payload['uploadId']}"
        offset, tries = 0, 0
        while offset < len(data):
            chunk = data[offset : offset + chunk_max]
            try:
                status, payload = self._call(
                    "PATCH", url, token, None, chunk, "application/offset+octet-stream", {"Upload-Offset": str(offset)}
                )
            except OSError:  # the answer was lost: ask the portal where to resume
                tries += 1
                if tries > UPLOAD_RETRIES:
                    raise
                status, payload = self._call("GET", url, token, None, None, "application/json")
                if status != 200:
                    raise _error_of(status, payload) from None
                offset = int(payload["offset"])
                continue
            if status == 204:
                offset += len(chunk)
            elif status == 409 and (resume := _resume_offset(payload)) is not None and resume != offset:
                offset = resume
            else:
                raise _error_of(status, payload)
        status, payload = self._call("POST", f"{url}/complete?contentHash={sha}", token, None, b"", "application/json")
        if status != 201:
            raise _error_of(status, payload)
        return str(payload["contentHash"])


SINGLE_UPLOAD_BYTES = 1024 * 1024  # one request up to this before the portal's chunk_max is known


UPLOAD_RETRIES = 5


def _resume_offset(payload: Any) -> int | None:
    details = payload.get("details") if isinstance(payload, dict) else None
    offset = details.get("offset") if isinstance(details, dict) else None
    return offset if isinstance(offset, int) else None


def _error_of(status: int, payload: Any) -> Refused:
    """The refusal an error document (the bare §19 document of every REST error) describes."""
    if isinstance(payload, dict) and isinstance(payload.get("code"), str):
        return Refused(payload["code"], str(payload.get("message", "")), error_reason(payload))
    return Refused("HTTP", f"status {status}")
