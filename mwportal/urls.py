from django.contrib import admin
from django.urls import include, path

from missions.api.openapi import ProtocolSchemaView
from missions.views import methods_only
from workitems.views import work_contract_schema

# The REST binding of MWP 0.1 (DESIGN §5), a project extension: one prefix,
# /api/v0.1/, and no other API version (issue 18 item 8: /api/v1 is gone).
API = "api/v0.1/"

urlpatterns = [
    path("admin/", admin.site.urls),
    path(f"{API}schema/", ProtocolSchemaView.as_view(), name="schema"),
    path(f"{API}schema/work-contract.json", methods_only(work_contract_schema, "GET"), name="work-contract-schema"),
    path(API, include("missions.urls")),
    path(API, include("artifacts.urls")),
    path(API, include("conversations.urls")),
    path("", include("portal.urls")),
]

# An exception that escapes a view: under /api/ the INTERNAL_ERROR document
# (issue 16 item 10), elsewhere the portal's page (missions/views.py).
handler500 = "missions.views.server_error"
# An unknown path under /api/ (an old /api/v1 one included) gets the
# PROTOCOL_VIOLATION (404) document, elsewhere the portal's 404 page.
handler404 = "missions.views.page_not_found"
