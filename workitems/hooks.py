"""Hooks through which apps above workitems take part in its transitions (the pattern of ``missions.registry``).

``acceptance_checks``: called by ``work.accept_offer`` inside its transaction
with the handler context and the locked WorkItem, before ownership changes;
each raises ``ProtocolError`` to refuse (the conversations app refuses a
WorkItem whose contract an essential ambiguity names, §10.1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

AcceptanceCheck = Callable[[Any, Any], None]
acceptance_checks: list[AcceptanceCheck] = []
