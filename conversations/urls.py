"""The Conversations routes under ``/api/v0.1/`` (``mwportal/urls.py`` mounts them)."""

from django.urls import path

from . import views

urlpatterns = [
    path("groups/<str:groupId>/conversations", views.GroupConversationsView.as_view(), name="group-conversations"),
]
