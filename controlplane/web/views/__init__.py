"""Server-rendered pages, one module per page; the browser draws the charts (static/web/)."""

from controlplane.web.views.engine import engine
from controlplane.web.views.fleet import fleet
from controlplane.web.views.gpu import gpu
from controlplane.web.views.health import healthz
from controlplane.web.views.host import host

__all__ = ["engine", "fleet", "gpu", "healthz", "host"]
