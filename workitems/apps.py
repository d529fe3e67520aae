from django.apps import AppConfig


class WorkitemsConfig(AppConfig):
    name = "workitems"
    verbose_name = "WorkItems"

    def ready(self) -> None:
        # Handlers register themselves per command type on import.
        from . import handlers  # noqa: F401
