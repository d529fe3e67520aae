"""Handlers of the WorkItem commands (spec 10, 11.3-11.5; DESIGN §4a), one room per concern.

Importing the package registers every kind: each submodule's ``@command``
decorators and hooks run on import (``WorkitemsConfig.ready`` imports this).
``common`` holds what the rooms share; the names other apps use are
re-exported here.
"""

from . import execution, expiry, offers, outcomes, results
from .common import check_lease, item_ref, load_item, token_digest

__all__ = [
    "check_lease",
    "execution",
    "expiry",
    "item_ref",
    "load_item",
    "offers",
    "outcomes",
    "results",
    "token_digest",
]
