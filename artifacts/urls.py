"""Artifact uploads and downloads, review and Context Package reads (``artifacts/views.py``).

The upload routes come before ``artifacts/<sha256>``: ``uploads`` is not a hash."""

from django.urls import path

from . import views

urlpatterns = [
    path("artifacts", views.ArtifactUploadView.as_view(), name="artifact-upload"),
    path("artifacts/uploads", views.ResumableUploadCreateView.as_view(), name="artifact-uploads"),
    path("artifacts/uploads/<str:upload_id>", views.ResumableUploadView.as_view(), name="artifact-upload-chunk"),
    path(
        "artifacts/uploads/<str:upload_id>/complete",
        views.ResumableUploadCompleteView.as_view(),
        name="artifact-upload-complete",
    ),
    path("artifacts/<str:sha256>", views.ArtifactDownloadView.as_view(), name="artifact-download"),
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
