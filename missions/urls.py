"""The REST binding's routes under ``/api/v0.1/`` (DESIGN §5); ``mwportal/urls.py`` mounts them."""

from django.urls import path

from .api import cards, commands, directory, groups, performance, policylog, sessions

urlpatterns = [
    path("sessions/challenge", sessions.SessionChallengeView.as_view(), name="session-challenge"),
    path("sessions", sessions.SessionsView.as_view(), name="sessions"),
    path("commands", commands.CommandsView.as_view(), name="commands"),
    path("groups/<str:groupId>/events", groups.GroupEventsView.as_view(), name="group-events"),
    path("groups/<str:groupId>/snapshots/<int:sequence>", groups.GroupSnapshotView.as_view(), name="group-snapshot"),
    path("keys/<str:keyId>", directory.KeyView.as_view(), name="key"),
    path("agents/<str:agentId>/card", cards.AgentCardView.as_view(), name="agent-card"),
    path("agents/<str:agentId>/performance", performance.AgentPerformanceView.as_view(), name="agent-performance"),
    path("memberships", directory.MembershipsView.as_view(), name="memberships"),
    path("catalogue", directory.CatalogueView.as_view(), name="catalogue"),
    path("policy-log", policylog.PolicyLogView.as_view(), name="policy-log"),
]
