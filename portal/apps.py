from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "MissionWeave portal"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from .login import clear_failures_on_sign_in

        # A sign-in forgives its account's failures from its address (issue 16 item 4).
        user_logged_in.connect(clear_failures_on_sign_in, dispatch_uid="portal.login.clear_failures_on_sign_in")
