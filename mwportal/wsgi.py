"""WSGI entry point, for management tooling; the portal itself runs on daphne (ASGI)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mwportal.settings")
application = get_wsgi_application()
