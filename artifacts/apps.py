from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    name = "artifacts"
    verbose_name = "Artifacts and Evidence"

    def ready(self) -> None:
        # Handlers register themselves per command type on import.
        from . import archive, context, coordinator, handlers, review_handlers  # noqa: F401
