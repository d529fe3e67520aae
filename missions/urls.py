from django.urls import path

from . import views

urlpatterns = [
    path("sessions", views.SessionsView.as_view(), name="sessions"),
    path("commands", views.CommandsView.as_view(), name="commands"),
    path("groups/<str:group_id>/events", views.GroupEventsView.as_view(), name="group-events"),
    path("groups/<str:group_id>/snapshots/<int:sequence>", views.GroupSnapshotView.as_view(), name="group-snapshot"),
    path("memberships", views.MembershipsView.as_view(), name="memberships"),
    path("server-key", views.ServerKeyView.as_view(), name="server-key"),
]
