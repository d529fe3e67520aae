"""Artifact uploads and downloads, review results and Context Package reads (``artifacts/views.py``),
under ``/api/v0.1/`` (``mwportal/urls.py``). Path members are named as on the wire.

The upload routes come before ``artifacts/<contentHash>``: ``uploads`` is not a hash."""

from django.urls import path

from . import views

urlpatterns = [
    path("artifacts", views.ArtifactUploadView.as_view(), name="artifact-upload"),
    path("artifacts/uploads", views.ResumableUploadCreateView.as_view(), name="artifact-uploads"),
    path("artifacts/uploads/<str:uploadId>", views.ResumableUploadView.as_view(), name="artifact-upload-chunk"),
    path(
        "artifacts/uploads/<str:uploadId>/complete",
        views.ResumableUploadCompleteView.as_view(),
        name="artifact-upload-complete",
    ),
    path("artifacts/<str:contentHash>", views.ArtifactDownloadView.as_view(), name="artifact-download"),
    path("artifacts/<str:contentHash>/provenance", views.ArtifactProvenanceView.as_view(), name="artifact-provenance"),
    path("work-items/<str:workItemId>/review", views.WorkItemReviewView.as_view(), name="workitem-review"),
    path("groups/<str:groupId>/context-packages", views.ContextPackageListView.as_view(), name="context-package-list"),
    path(
        "groups/<str:groupId>/context-packages/<str:contextPackageId>",
        views.ContextPackageView.as_view(),
        name="context-package",
    ),
    path(
        "groups/<str:groupId>/context-packages/<str:contextPackageId>/events",
        views.ContextPackageEventsView.as_view(),
        name="context-package-events",
    ),
]
