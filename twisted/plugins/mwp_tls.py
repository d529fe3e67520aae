"""The ``tls13:`` server endpoint for daphne (``mwportal/tls.py``).

Twisted loads every module of a ``twisted/plugins`` directory on ``sys.path``
when it looks up an endpoint type it does not know; this directory has no
``__init__.py`` on purpose, so the installed Twisted package stays the one
imported and this directory only adds plugins to it.
"""

from mwportal.tls import PARSER

__all__ = ["PARSER"]
