from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from workitems.views import work_contract_schema

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/v1/schema/work-contract.json", work_contract_schema, name="work-contract-schema"),
    path("api/v1/", include("missions.urls")),
    path("api/v1/", include("artifacts.urls")),
    path("", include("portal.urls")),
]

# An exception that escapes a view: under /api/ the INTERNAL_ERROR document
# (issue 16 item 10), elsewhere the portal's page (missions/views.py).
handler500 = "missions.views.server_error"
# An unknown path under /api/ gets the PROTOCOL_VIOLATION (404) document, elsewhere the portal's 404 page.
handler404 = "missions.views.page_not_found"
