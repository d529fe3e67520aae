"""Organization governance of Missions (PROTOCOL §9.1, §18, §20): the Policy Log,
Cooperation Override Grants, runaway controls and Extension Profiles."""

from django.apps import AppConfig


class GovernanceConfig(AppConfig):
    name = "governance"
    verbose_name = "Governance"

    def ready(self) -> None:
        # Handlers register per catalogue kind on import, with the override checks accept() runs.
        from . import extensions, handlers  # noqa: F401
