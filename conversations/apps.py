from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    name = "conversations"
    verbose_name = "Conversations"

    def ready(self) -> None:
        # The message.* handlers register themselves per catalogue kind on import,
        # and the essential-ambiguity check joins work.accept_offer (workitems.hooks).
        from . import handlers  # noqa: F401
