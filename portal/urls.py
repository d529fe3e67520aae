"""Portal URLs (issue 7). Every Mission URL names its Group; a person who is
not a member gets 404 there."""

from django.contrib.auth import views as auth_views
from django.urls import path

from . import audit, owner, signing, views

app_name = "portal"

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(template_name="portal/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("approvals/", views.approvals, name="approvals"),
    path("policy/", views.policy, name="policy"),
    path("keys/", owner.keys, name="keys"),
    path("policy-log/", audit.policy_log, name="policy-log"),
    path("keys/enrol", signing.enrol, name="enrol"),
    path("missions/new/", owner.new_mission, name="new-mission"),
    path("missions/<str:group_id>/", views.mission, name="mission"),
    path("missions/<str:group_id>/live", views.mission_live, name="mission-live"),
    path("missions/<str:group_id>/final/", views.final, name="final"),
    path("missions/<str:group_id>/artifacts/<str:sha256>", views.artifact, name="artifact"),
    path("missions/<str:group_id>/workitems/<str:item_id>/", views.review, name="review"),
]
