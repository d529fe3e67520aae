"""The Organization's cooperation policy document (PROTOCOL §20), set by
``ext.mwportal.governance.cooperation_policy_set``::

    {
      "message_rate": {"windowSeconds": 60, "soft": 40, "hard": 60},
      "proposal_rate": {"windowSeconds": 60, "soft": 20, "hard": 30},
      "clarification_rounds": {"soft": 2, "hard": 3},
      "active_work_items": {"soft": 40, "hard": 50},
      "queued_work_items": {"soft": 80, "hard": 100},
      "delegation_depth": {"soft": 3, "hard": 4},
      "duplicate_decomposition": {"hard": 1},
      "circular_decomposition": {"hard": 0}
    }

Each limit is named by the catalogue's cooperation policy names. ``hard`` is
the most a count may reach (one more is ``RATE_LIMITED``); reaching ``soft``
notifies the Coordinator. Rates count per actor and Group over
``windowSeconds``; WorkItem counts are per Mission; depth counts WorkItem
levels below the Mission; ``duplicate_decomposition`` is how many WorkItems or
proposals under one parent may share a contract goal, and
``circular_decomposition`` how many ancestors may (0: none). A limit left out
keeps its default: the defaults are generous, not low protocol ceilings.
"""

from __future__ import annotations

import copy
from typing import Any

from jsonschema import Draft202012Validator

from mwportal.protocol import malformed

from .models import CooperationPolicy

RATES = ("message_rate", "proposal_rate")
NAMES = (
    "message_rate",
    "proposal_rate",
    "clarification_rounds",
    "delegation_depth",
    "queued_work_items",
    "active_work_items",
    "duplicate_decomposition",
    "circular_decomposition",
)

_COUNT = {"type": "integer", "minimum": 0, "maximum": 1_000_000}
_LIMIT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["hard"],
    "properties": {
        "hard": _COUNT,
        "soft": _COUNT,
        "windowSeconds": {"type": "integer", "minimum": 1, "maximum": 86400},
    },
}
POLICY_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "properties": {name: _LIMIT for name in NAMES},
}

DEFAULTS: dict[str, dict[str, int]] = {
    "message_rate": {"windowSeconds": 60, "soft": 40, "hard": 60},
    "proposal_rate": {"windowSeconds": 60, "soft": 20, "hard": 30},
    "clarification_rounds": {"soft": 2, "hard": 3},
    "active_work_items": {"soft": 40, "hard": 50},
    "queued_work_items": {"soft": 80, "hard": 100},
    "delegation_depth": {"soft": 3, "hard": 4},
    "duplicate_decomposition": {"hard": 1},
    "circular_decomposition": {"hard": 0},
}

_validator = Draft202012Validator(POLICY_SCHEMA)


def check_policy(policy: Any) -> dict[str, Any]:
    """The policy if valid, else SCHEMA_VALIDATION_FAILED naming the first bad member."""
    errors = sorted(_validator.iter_errors(policy), key=lambda e: list(e.absolute_path))
    if errors:
        path = "".join(f"/{p}" for p in errors[0].absolute_path)
        raise malformed("/payload/policy" + path, errors[0].message)
    for name, limit in policy.items():
        if limit.get("soft", 0) > limit["hard"]:
            raise malformed(f"/payload/policy/{name}/soft", "a soft threshold is at most the hard limit")
        if name in RATES and "windowSeconds" not in limit:
            raise malformed(f"/payload/policy/{name}/windowSeconds", "a rate needs its window")
    return dict(policy)


def limits(organization_id: str) -> dict[str, dict[str, int]]:
    """The Organization's limits now: its policy over the defaults."""
    merged = copy.deepcopy(DEFAULTS)
    row = CooperationPolicy.objects.filter(organization_id=organization_id).values_list("policy", flat=True).first()
    merged.update(row or {})
    return merged
