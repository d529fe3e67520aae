"""The Celery app. Tasks build Commands and call ``accept()`` as the system actor.

Embedded default: the filesystem broker under ``var/celery`` and beat run
inside the worker (``celery -A mwportal.celery worker -B``). With ``MWP_REDIS_URL``
set, Redis is the broker.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mwportal.settings")

app = Celery("mwportal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
