"""The runner's own fixture-structure checks agree with the bundle's fixture schemas.

The cryptography README requires fixture structure to be validated against
the manifest's ``fixtureSchemas`` before a case runs. The runner states
those shapes itself (mwportal/protocol/conformance/fixtures.py); here the
bundle's schemas, loaded from the bundle, are the oracle: every fixture of
the bundle, and documents hypothesis derives from them by mutation, get the
same verdict from both.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mwportal.protocol.conformance.fixtures import registry_fixture_errors, signing_key_fixture_errors

from .bundle import bundle_root


@functools.cache
def _schema(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((bundle_root() / "cryptography" / name).read_text())
    return jsonschema.Draft202012Validator(schema)


def _fixtures(prefix: str) -> list[Path]:
    return sorted((bundle_root() / "cryptography" / "keys").glob(f"{prefix}-*.json")) + (
        sorted((bundle_root() / "admission" / "registries").glob(f"{prefix}-*.json")) if prefix == "registry" else []
    )


def test_it_finds_every_bundle_registry_fixture_well_formed() -> None:
    validator = _schema("registry-fixture.schema.json")
    paths = _fixtures("registry")
    assert len(paths) >= 23
    for path in paths:
        doc = json.loads(path.read_text())
        assert validator.is_valid(doc), path
        assert registry_fixture_errors(doc) == [], path


def test_it_finds_every_bundle_signing_key_fixture_well_formed() -> None:
    validator = _schema("signing-key-fixture.schema.json")
    paths = _fixtures("signing")
    assert len(paths) == 7
    for path in paths:
        doc = json.loads(path.read_text())
        assert validator.is_valid(doc), path
        assert signing_key_fixture_errors(doc) == [], path


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda d: d.pop("organizationId"), "missing organizationId"),
        (lambda d: d.update(extra=1), "unexpected member"),
        (lambda d: d.update(bindings=[]), "0 bindings"),
        (lambda d: d["bindings"][0].update(principal={"type": "robot", "id": "x"}), "not one of"),
        (lambda d: d["bindings"][0].update(keyId=""), "length 0"),
        (lambda d: d["bindings"][0].update(publicKey="A" * 4097), "length 4097"),
        (lambda d: d["bindings"][0]["validityHistory"].append({"sequence": 0, "recordedAt": "x"}), "outside 1"),
        (lambda d: d["bindings"][0]["validityHistory"].append({"sequence": True, "recordedAt": "x"}), "not an integer"),
        (lambda d: d["bindings"][0]["validityHistory"].append({"sequence": 1}), "missing recordedAt"),
    ],
)
def test_it_names_what_is_wrong_with_a_registry_fixture(change: Any, why: str) -> None:
    doc = json.loads((bundle_root() / "cryptography/keys/registry-valid.json").read_text())
    change(doc)
    errors = registry_fixture_errors(doc)
    assert any(why in e for e in errors), errors
    assert not _schema("registry-fixture.schema.json").is_valid(doc)


def test_it_keeps_semantically_bad_but_readable_registry_values_for_stage_4() -> None:
    # A relative organizationId, a keyId ending in a line feed and a padded
    # key are the bundle's stage-4 faults: structurally they must pass.
    doc = json.loads((bundle_root() / "cryptography/keys/registry-valid.json").read_text())
    doc["organizationId"] = "organization/acme"
    doc["bindings"][0]["keyId"] += "\n"
    doc["bindings"][0]["publicKey"] += "="
    assert registry_fixture_errors(doc) == []


# --- hypothesis: mutated fixtures get the schema's verdict ----------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=2**53 + 2),
    st.floats(allow_nan=False, allow_infinity=False),
    st.just(1.0),
    st.text(max_size=5),
    st.text(min_size=126, max_size=130),
    st.text(min_size=510, max_size=514),
    st.sampled_from(["agent", "human", "service", "Ed25519", "urn:x:y", "a" * 43, "A" * 4097]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["type", "id", "x"]), inner, max_size=3)
    ),
    max_leaves=6,
)
_names = st.sampled_from(
    [
        "organizationId",
        "bindings",
        "keyId",
        "principal",
        "algorithm",
        "publicKey",
        "validFrom",
        "validityHistory",
        "sequence",
        "recordedAt",
        "validUntil",
        "revokedAt",
        "type",
        "id",
        "testOnly",
        "seed",
        "other",
    ]
)


def _containers(value: Any, out: list[Any]) -> list[Any]:
    if isinstance(value, (dict, list)):
        out.append(value)
        for child in value.values() if isinstance(value, dict) else value:
            _containers(child, out)
    return out


def _near(value: Any) -> st.SearchStrategy[Any]:
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.integers(min_value=-1, max_value=3) | st.sampled_from([2**53 - 1, 2**53, 2.0, 2.5])
    if isinstance(value, str):
        lengths = st.sampled_from([0, 1, 2, 42, 43, 44, 64, 65, 128, 129, 512, 513])
        return (
            lengths.map(lambda n: "u" * n)
            | st.just(value + "\n")
            | st.text(alphabet="AZaz09-_+.:/ \né", min_size=0, max_size=50)
        )
    if isinstance(value, list) and value:
        return st.sampled_from(value).map(lambda v: [*value, json.loads(json.dumps(v))]) | st.just(value[:-1])
    return st.just(value)


@st.composite
def _mutated(draw: st.DrawFn, base: Any) -> Any:
    doc = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(min_value=1, max_value=2))):
        target = draw(st.sampled_from(_containers(doc, [])))
        op = draw(st.sampled_from(["set", "delete", "add", "near", "near"]))
        if op == "near" and target:
            # A value of the same JSON type, around the length and range
            # bounds, or a copy of a sibling: mutants that are often valid.
            key = draw(st.sampled_from(sorted(target) if isinstance(target, dict) else range(len(target))))
            target[key] = draw(_near(target[key]))
        elif isinstance(target, dict):
            if op == "delete" and target:
                target.pop(draw(st.sampled_from(sorted(target))))
            elif op == "set" and target:
                target[draw(st.sampled_from(sorted(target)))] = draw(_values)
            else:
                target[draw(_names)] = draw(_values)
        elif target and op != "add":
            index = draw(st.integers(min_value=0, max_value=len(target) - 1))
            if op == "delete":
                target.pop(index)
            else:
                target[index] = draw(_values)
        else:
            target.append(draw(_values) if draw(st.booleans()) else json.loads(json.dumps(base)))
    return doc


@pytest.fixture(scope="module")
def signing_base() -> Any:
    return json.loads((bundle_root() / "cryptography/keys/signing-coordinator.json").read_text())


def _registry_base() -> Any:
    # The richest fixture: a history with validUntil and revokedAt statuses.
    path = bundle_root() / "admission/registries/registry-later-revocation.json"
    return json.loads(path.read_text())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_it_agrees_with_the_registry_fixture_schema_on_mutated_fixtures(data: st.DataObject) -> None:
    base = _registry_base()
    doc = data.draw(_mutated(base))
    assert (registry_fixture_errors(doc) == []) == _schema("registry-fixture.schema.json").is_valid(doc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_it_agrees_with_the_signing_key_fixture_schema_on_mutated_fixtures(
    data: st.DataObject, signing_base: Any
) -> None:
    doc = data.draw(_mutated(signing_base))
    assert (signing_key_fixture_errors(doc) == []) == _schema("signing-key-fixture.schema.json").is_valid(doc)
