"""MissionWeave Portal: the Group Authority and management portal.

The Celery app lives in ``mwportal.celery`` (``celery -A mwportal.celery``); it
is not imported here, so the framework-free ``mwportal.protocol`` kernel can be
imported by the Worker runtime without loading Celery or Django.
"""
