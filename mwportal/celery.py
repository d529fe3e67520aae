"""The Celery app. Tasks build Commands and call ``accept()`` as the system actor.

Embedded default: the filesystem broker under ``var/celery``; ``./mw serve``
runs the worker and beat as two processes of its supervised tree
(``mwportal/supervise.py``), never the worker's embedded ``-B`` (issue 16
item 11). With ``MWP_REDIS_URL`` set, Redis is the broker. In production beat
is its own supervised service, exactly one per deployment.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mwportal.settings")

app = Celery("mwportal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
