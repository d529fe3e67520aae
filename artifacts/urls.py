"""Artifact, review and Context Package reads (``artifacts/views.py``); the
upload and download paths are in ``missions/urls.py``."""

from django.urls import path

from . import views

urlpatterns = [
    path("artifacts/<str:sha256>/provenance", views.ArtifactProvenanceView.as_view(), name="artifact-provenance"),
    path("workitems/<str:workitem_id>/review", views.WorkItemReviewView.as_view(), name="workitem-review"),
    path("groups/<str:group_id>/context-packages", views.ContextPackageListView.as_view(), name="context-package-list"),
    path(
        "groups/<str:group_id>/context-packages/<str:package_id>",
        views.ContextPackageView.as_view(),
        name="context-package",
    ),
    path(
        "groups/<str:group_id>/context-packages/<str:package_id>/events",
        views.ContextPackageEventsView.as_view(),
        name="context-package-events",
    ),
]
