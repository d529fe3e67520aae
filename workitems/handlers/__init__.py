"""Handlers of the WorkItem Commands (PROTOCOL §10-§14), one room per concern, keyed by
the catalogue's Command kinds (``mwportal.protocol.catalogue``).

Importing the package registers every kind: each submodule's ``@command``
decorators and hooks run on import (``WorkitemsConfig.ready`` imports this).
``common`` holds what the rooms share; the names other apps use are
re-exported here.
"""

from . import cards, delegation, execution, expiry, lifecycle, offers, outcomes, results
from .common import check_lease, item_ref, lease_document, load_item, token_digest

__all__ = [
    "cards",
    "check_lease",
    "delegation",
    "execution",
    "expiry",
    "item_ref",
    "lease_document",
    "lifecycle",
    "load_item",
    "offers",
    "outcomes",
    "results",
    "token_digest",
]
