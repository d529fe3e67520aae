"""The project's own validators for the 21 MWP 0.1 objects on the bundle's documents.

Agreement with the normative schemas themselves is test_schemas_agree.py;
here the verdicts are the bundle's: the structural manifest's ``valid``, the
cryptography manifest's expected stage (§6.4 stage 2 is the schema stage).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from mwportal.protocol import schemas
from mwportal.protocol.schemas import NAMES, SchemaError, is_valid, json_schema, validate

from .bundle import bundle_root

# §6.4: the stages in order; a reject at a stage after "schema" passed the schema.
STAGES = ["parse", "schema", "signature-envelope", "key-resolution", "canonicalization", "signature", "complete"]


def _stem(schema_path: str) -> str:
    return schema_path.rsplit("/", 1)[-1].removesuffix(".schema.json")


def _signed_evaluations(root: Path) -> list[dict[str, Any]]:
    manifest = json.loads((root / "cryptography" / "manifest.json").read_text())
    return [e for case in manifest["cases"] for e in case["evaluations"] if "profileId" in e]


def test_it_names_the_21_normative_objects() -> None:
    root = bundle_root()
    stems = {p.name.removesuffix(".schema.json") for p in (root / "schemas").glob("*.schema.json")}
    assert set(NAMES) == stems - {"common"}
    assert len(NAMES) == 21


def test_every_structural_vector_gets_the_manifests_verdict() -> None:
    root = bundle_root()
    manifest = json.loads((root / "conformance" / "manifest.json").read_text())
    assert len(manifest) == 58
    wrong = []
    for vector in manifest:
        document = json.loads((root / vector["instance"]).read_text())
        if is_valid(_stem(vector["schema"]), document) is not vector["valid"]:
            wrong.append(vector["name"])
    assert wrong == []


def test_the_valid_signed_documents_validate() -> None:
    root = bundle_root()
    evaluations = [e for e in _signed_evaluations(root) if e["expect"]["stage"] == "complete"]
    assert {e["profileId"] for e in evaluations} == set(schemas.signed.SIGNED_PROFILES)
    for e in evaluations:
        validate(e["profileId"], json.loads((root / e["document"]).read_bytes()))


def test_schema_stage_rejects_are_refused_PROTOCOL_6_4_stage_2() -> None:
    root = bundle_root()
    rejects = [e for e in _signed_evaluations(root) if e["expect"]["stage"] == "schema"]
    assert len(rejects) == 5  # padded signature, leap second, -00:00, year 0000, unsupported algorithm
    for e in rejects:
        with pytest.raises(SchemaError) as raised:
            validate(e["profileId"], json.loads((root / e["document"]).read_bytes()))
        assert raised.value.errors, e["document"]


def test_rejects_at_later_stages_pass_the_schema_PROTOCOL_6_4() -> None:
    # A fault the bundle places at stage 3 or later (a +00:00 protected time, nonzero pad
    # bits, 1e400, an unpaired surrogate, ...) must not be caught early by the schema, or
    # the wire code would be wrong.
    root = bundle_root()
    later = [e for e in _signed_evaluations(root) if STAGES.index(e["expect"]["stage"]) > STAGES.index("schema")]
    assert len(later) > 40
    for e in later:
        document = json.loads((root / e["document"]).read_bytes())
        assert is_valid(e["profileId"], document), e["document"]


def test_the_admission_records_of_the_bundle_validate() -> None:
    root = bundle_root()
    records = sorted((root / "admission" / "records" / "valid").glob("*.json"))
    assert len(records) == 9
    for path in records:
        validate("first-admission-record", json.loads(path.read_text()))


def _golden_command() -> dict[str, Any]:
    root = bundle_root()
    document: dict[str, Any] = json.loads(
        (root / "cryptography" / "vectors" / "signed-documents" / "valid" / "command.json").read_text()
    )
    return document


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("issuedAt", "2026-07-15T02:00:60Z"),  # leap second
        ("issuedAt", "0000-07-15T02:00:00Z"),
        ("issuedAt", "2026-07-15T02:00:00-00:00"),
        ("issuedAt", "2026-02-29T02:00:00Z"),
        ("actionId", "relative/reference"),
        ("actionId", "urn:uuid:1\n"),
        ("actionId", "urn:caf\u00e9"),
        ("actionId", "urn:x%zz"),
        ("correlationId", "urn:" + "x" * 509),  # 513 characters
    ],
)
def test_formats_are_asserted_PROTOCOL_2(member: str, value: str) -> None:
    document = _golden_command()
    document[member] = value
    assert not is_valid("command", document)


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("issuedAt", "2026-07-15t02:00:00.1000001+23:59"),
        ("actionId", "urn:"),
        ("actionId", "urn:x%C3%A9"),
        ("correlationId", "urn:" + "x" * 508),  # 512 characters
    ],
)
def test_what_the_formats_admit_PROTOCOL_2(member: str, value: str) -> None:
    document = _golden_command()
    document[member] = value
    validate("command", document)


def test_an_error_names_the_member_and_the_rule() -> None:
    document = _golden_command()
    del document["signature"]
    document["issuedAt"] = "2026-07-15T02:00:60Z"
    with pytest.raises(SchemaError) as raised:
        validate("command", document)
    errors = raised.value.errors
    assert any("signature" in e for e in errors)
    assert any(e.startswith("/issuedAt:") for e in errors)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize("value", [None, [], "x", 1, {1: "not a member name"}])
def test_it_refuses_what_is_not_an_object_without_crashing(value: Any) -> None:
    assert not is_valid("command", value)
    with pytest.raises(SchemaError):
        validate("command", value)


def test_values_outside_the_data_model_are_left_to_stage_5_PROTOCOL_6_4() -> None:
    # Strict JSON keeps 1e400 as inf and a lone surrogate as such; the schema admits them
    # where any value is allowed, and canonicalization (stage 5) refuses them.
    document = _golden_command()
    document["payload"] = {"n": float("inf"), "s": "\ud800", "big": 10**400}
    validate("command", document)


def test_unknown_names_are_a_programming_error() -> None:
    with pytest.raises(KeyError):
        validate("no-such-object", {})
    with pytest.raises(KeyError):
        json_schema("no-such-object")


def test_json_schema_is_our_own_2020_12_document_and_a_copy() -> None:
    command = json_schema("command")
    assert command["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert command["$id"] == schemas.schema_id("command")
    assert command["$id"].startswith("https://missionweave.example/")
    command["properties"].clear()
    assert json_schema("command")["properties"]
    common = json_schema("common")
    assert "id" in common["$defs"]


def test_no_schema_text_is_copied_from_the_bundle() -> None:
    # Titles, descriptions and comments are the bundle's prose; ours carry none, and every
    # $id and $ref is in our own namespace.
    root = bundle_root()
    normative_ids = {json.loads(p.read_text())["$id"] for p in (root / "schemas").glob("*.schema.json")}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            # As annotations these are strings; members named "title" or "description" are schemas.
            assert not any(isinstance(node.get(k), str) for k in ("title", "description", "$comment"))
            for key in ("$id", "$ref"):
                if key in node:
                    assert not any(node[key].startswith(i.rsplit("/", 1)[0]) for i in normative_ids), node[key]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for name in (*NAMES, "common"):
        walk(json_schema(name))


def test_validation_does_not_mutate_the_document() -> None:
    document = _golden_command()
    before = copy.deepcopy(document)
    validate("command", document)
    assert document == before
