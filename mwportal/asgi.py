"""ASGI entry point: HTTP through Django, WebSockets through Channels routing."""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mwportal.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402  (needs Django set up first)
from django.conf import settings  # noqa: E402

from missions.backpressure import BackpressureASGI  # noqa: E402
from missions.routing import websocket_urlpatterns  # noqa: E402

http_app = django_asgi_app
if settings.MWP_SERVE_STATIC:
    # The embedded default serves the portal's and the admin's static files
    # itself, as runserver would, debug or not; production (MWP_PRODUCTION=1)
    # puts them behind the proxy (docs/deploy.md).
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    http_app = ASGIStaticFilesHandler(django_asgi_app)

# BackpressureASGI: past the bound on Commands in flight, shed before Django,
# with no thread and no request object (missions/backpressure.py; issue 16 item 9).
application = ProtocolTypeRouter({"http": BackpressureASGI(http_app), "websocket": URLRouter(websocket_urlpatterns)})

# What the serving process has loaded so far (Django, the apps, Twisted,
# autobahn: hundreds of thousands of objects that live as long as it does)
# leaves the collector's generations: a full collection would otherwise walk
# all of it, stopping the event loop, and with it every subscriber's
# delivery, for 60-80 ms on the reference machine (bench/fanout.py).
gc.collect()
gc.freeze()

# daphne's own WebSocket size limit must sit above the protocol's 1 MiB frame
# limit, so an oversized frame reaches the consumer and is answered with an
# error frame instead of a closed connection (DESIGN §4). Run daphne with
# --websocket-max-message-size and --websocket-max-frame-size of this value.
TRANSPORT_MAX_FRAME_BYTES = 16 * 1024 * 1024
