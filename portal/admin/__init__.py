"""The Django admin of every app, read-only, whose actions issue Commands.

The admin is a portal page: it needs the portal's action helpers
(``actions.py``, ``adminkit.py``), so the admins of the lower apps live here,
in the top app, and the lower apps never import ``portal`` (DESIGN §2).
``admin.autodiscover()`` imports this package, which registers them all.
"""

from . import missions, workitems

__all__ = ["missions", "workitems"]
