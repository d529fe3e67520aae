"""One mapping of protocol error codes to plain words."""

from __future__ import annotations

from mwportal.protocol import ErrorCode, ProtocolError
from portal.errors import PLAIN_WORDS, explain


def test_every_error_code_has_plain_words() -> None:
    assert set(PLAIN_WORDS) == set(ErrorCode)


def test_revision_mismatch_says_reload() -> None:
    text = explain(ProtocolError(ErrorCode.REVISION_MISMATCH, "expected revision 3, the aggregate is at 4"))
    assert text == "REVISION_MISMATCH: someone changed this item; reload (expected revision 3, the aggregate is at 4)"
