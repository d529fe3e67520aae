"""One mapping of protocol error codes to plain words."""

from __future__ import annotations

from mwportal.protocol import ErrorCode, ProtocolError
from portal.errors import PLAIN_WORDS, explain
from tests.protocol.normative import normative_problems, require_bundle


def test_every_error_code_has_plain_words() -> None:
    assert set(PLAIN_WORDS) == set(ErrorCode)


def test_revision_conflict_says_reload() -> None:
    text = explain(ProtocolError(ErrorCode.REVISION_CONFLICT, "expected revision 3, the aggregate is at 4"))
    assert text == "REVISION_CONFLICT: someone changed this item; reload (expected revision 3, the aggregate is at 4)"


def test_a_reason_has_words_of_its_own() -> None:
    err = ProtocolError(ErrorCode.INVALID_COMMAND, "a cycle", details={"reason": "dependency_cycle"})
    assert explain(err) == "INVALID_COMMAND: these dependencies would go round in a circle (a cycle)"


def test_the_words_carry_the_normative_error_documents_code_and_message_spec_19() -> None:
    require_bundle()
    err = ProtocolError(ErrorCode.REVISION_CONFLICT, "x" * 5000)
    document = err.document()
    assert normative_problems("error", document) == []
    text = explain(err)
    assert text.startswith("REVISION_CONFLICT: someone changed this item; reload (")
    assert text.endswith(f"({document['message']})") and len(document["message"]) < 5000
