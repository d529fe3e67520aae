from django.apps import AppConfig


class MissionsConfig(AppConfig):
    name = "missions"
    verbose_name = "Missions and Groups"

    def ready(self) -> None:
        # Handlers register themselves per command type on import.
        from . import handlers  # noqa: F401
