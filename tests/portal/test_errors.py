"""One mapping of protocol error codes to plain words."""

from __future__ import annotations

from mwportal.protocol import ErrorCode, ProtocolError
from portal.errors import PLAIN_WORDS, explain


def test_every_error_code_has_plain_words() -> None:
    assert set(PLAIN_WORDS) == set(ErrorCode)


def test_revision_conflict_says_reload() -> None:
    text = explain(ProtocolError(ErrorCode.REVISION_CONFLICT, "expected revision 3, the aggregate is at 4"))
    assert text == "REVISION_CONFLICT: someone changed this item; reload (expected revision 3, the aggregate is at 4)"


def test_a_reason_has_words_of_its_own() -> None:
    err = ProtocolError(ErrorCode.INVALID_COMMAND, "a cycle", details={"reason": "dependency_cycle"})
    assert explain(err) == "INVALID_COMMAND: these dependencies would go round in a circle (a cycle)"
