from django.apps import AppConfig


class WorkitemsConfig(AppConfig):
    name = "workitems"
    verbose_name = "WorkItems"

    def ready(self) -> None:
        # Handlers register themselves per catalogue kind on import; the
        # snapshot contributors add the WorkItems to a Group snapshot's state.
        from . import handlers, obligations, snapshot  # noqa: F401
