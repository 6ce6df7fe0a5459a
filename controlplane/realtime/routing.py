"""WebSocket routes. Consumers arrive with the live dashboard; until then sockets are refused."""

from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator

websocket_urlpatterns: list = []

websocket_app = AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
