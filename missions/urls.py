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

from artifacts import views as artifact_views  # noqa: E402

urlpatterns += [
    path("artifacts", artifact_views.ArtifactUploadView.as_view(), name="artifact-upload"),
    path("artifacts/uploads", artifact_views.ResumableUploadCreateView.as_view(), name="artifact-uploads"),
    path(
        "artifacts/uploads/<str:upload_id>", artifact_views.ResumableUploadView.as_view(), name="artifact-upload-chunk"
    ),
    path(
        "artifacts/uploads/<str:upload_id>/complete",
        artifact_views.ResumableUploadCompleteView.as_view(),
        name="artifact-upload-complete",
    ),
    path("artifacts/<str:sha256>", artifact_views.ArtifactDownloadView.as_view(), name="artifact-download"),
]
