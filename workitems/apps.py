from django.apps import AppConfig


class WorkitemsConfig(AppConfig):
    name = "workitems"
    verbose_name = "WorkItems"
