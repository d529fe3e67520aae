"""The Django admin of every app, read-only: a person's Commands are signed in their browser on
the portal's pages (issue 19), never issued from the admin.

The admin is a portal page: it needs the portal's helpers (``adminkit.py``), so the admins of the lower apps live here,
in the top app, and the lower apps never import ``portal`` (DESIGN §2).
``admin.autodiscover()`` imports this package, which registers them all.
"""

from . import missions, workitems

__all__ = ["missions", "workitems"]
