"""The Organization priority policy document (set by ``org.set_priority_policy``).

Workers read it from the administrative Group's log and weight their
cross-Group Scheduler with it (spec 11.1; MWP-WRK-009/010)::

    {
      "classes": {"critical": 8, "high": 4, "normal": 2, "low": 1},
      "default_class": "normal",
      "groups": {"<group id>": {"class": "high", "quota": 2}},
      "aging_seconds": 300
    }

``classes`` maps a priority class to its fair-share weight; ``groups`` gives a
Group its class and, optionally, a per-Group concurrency quota;
``aging_seconds`` is how long a waiting item takes to gain one step of age;
``archive_after_seconds`` (optional) is the Organization's retention delay
before a finished Mission's Group is archived (§7.4; default
``MWP_ARCHIVE_AFTER_SECONDS``).
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from mwportal.protocol import malformed

POLICY_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["classes", "default_class"],
    "properties": {
        "classes": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": "^[a-z][a-z0-9_-]{0,39}$"},
            "additionalProperties": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000},
        },
        "default_class": {"type": "string"},
        "groups": {
            "type": "object",
            "propertyNames": {"format": "uuid", "pattern": "^[0-9a-f-]{36}$"},
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "class": {"type": "string"},
                    "quota": {"type": "integer", "minimum": 1, "maximum": 1000},
                },
            },
        },
        "aging_seconds": {"type": "number", "exclusiveMinimum": 0},
        # Archival (§7.4): how long a finished Mission's Group stays quiet before it is archived.
        "archive_after_seconds": {"type": "integer", "minimum": 0},
    },
}

DEFAULT_POLICY: dict[str, Any] = {
    "classes": {"critical": 8, "high": 4, "normal": 2, "low": 1},
    "default_class": "normal",
    "groups": {},
    "aging_seconds": 300,
}

_validator = Draft202012Validator(POLICY_SCHEMA)


def check_policy(policy: Any) -> dict[str, Any]:
    """The policy if it is valid, else SCHEMA_VALIDATION_FAILED naming the first bad field."""
    errors = sorted(_validator.iter_errors(policy), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        path = "".join(f"/{p}" for p in err.absolute_path)
        raise malformed("/payload/policy" + path, err.message)
    classes = policy["classes"]
    if policy["default_class"] not in classes:
        raise malformed("/payload/policy/default_class", "must name one of the classes")
    for group_id, entry in policy.get("groups", {}).items():
        if "class" in entry and entry["class"] not in classes:
            raise malformed(f"/payload/policy/groups/{group_id}/class", "must name one of the classes")
    return dict(policy)
