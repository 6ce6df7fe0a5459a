"""Pitwall settings: everything comes from environment variables (see README, "Configuration").

A bad value stops the process at start with a message naming the variable.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from csp.constants import NONCE, NONE, SELF

from controlplane.accounts.sso.mapping import parse_group_roles
from controlplane.lib.env import (
    ConfigError,
    database_from_url,
    envbool,
    envfloat,
    envint,
    envlist,
    envsecret,
    envstr,
)

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = envbool("DEBUG", False)
# No default outside DEBUG: a production deployment must bring its own secret.
SECRET_KEY = envsecret("SECRET_KEY", "insecure-dev-only-key" if DEBUG else None)
# Tokens are stored as HMACs keyed with this; rotate SECRET_KEY without invalidating them.
TOKEN_HASH_KEY = envsecret("PITWALL_TOKEN_HASH_KEY", SECRET_KEY)
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "axes",
    "controlplane.fleet",
    "controlplane.telemetry",
    "controlplane.alerts",
    "controlplane.tuning",
    "controlplane.audit",
    # After the apps whose permissions its roles hold (it syncs the groups after migrate).
    "controlplane.accounts",
    "controlplane.accounts.sso",
    "controlplane.api",
    "controlplane.realtime",
    "controlplane.web",
    "controlplane.devstack",
]

# Kept short on purpose: every entry costs CPU on every page and API request
# (docs/architecture.md, "A bare ASGI ingest").
# The ingest endpoint does not pass through it at all (controlplane/asgi.py).
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "controlplane.audit.middleware.AuditActorMiddleware",
    # Last, as its documentation asks: it answers a locked-out login with 429.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
ASGI_APPLICATION = "controlplane.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# A connection pool per process (psycopg_pool), not persistent connections: under ASGI every
# request runs in a thread of its own, and CONN_MAX_AGE kept one idle connection per thread
# (a host page sends ~20 series requests; a few open tabs ran PostgreSQL out of clients).
# The ingest writer keeps its own connection outside Django.
_DATABASE = database_from_url(envstr("DATABASE_URL", "postgres://127.0.0.1:5432/pitwall"))
DATABASE_POOL_MAX = envint("DATABASE_POOL_MAX", 8, minimum=1)
DATABASES = {
    "default": {
        **_DATABASE,
        # Django's backend, but the pool never hands out a connection PostgreSQL closed (a
        # restart, a failover): controlplane/lib/postgresql/base.py.
        "ENGINE": "controlplane.lib.postgresql",
        "CONN_MAX_AGE": 0,
        "OPTIONS": {**_DATABASE["OPTIONS"],
                    "pool": {"min_size": 1, "max_size": DATABASE_POOL_MAX, "timeout": 10,
                             "reconnect_timeout": 10}},
    }
}
# reconnect_timeout: psycopg_pool retries a lost connection with a delay that doubles (1, 2,
# 4 ... s) for reconnect_timeout, 5 minutes by default: after a 75-second outage its next try
# was a minute away, and pages, API and ingest token lookups failed 40 s longer than
# PostgreSQL did. Given up after 10 s, the slot is opened anew by the next request that waits
# for one: tries stay a few seconds apart however long the outage.

# Reads from a streaming standby (docs/standby.md): off unless PITWALL_STANDBY_DATABASE_URL is
# set, and then GET and HEAD requests read there while it is at most STANDBY_MAX_LAG_S behind
# (checked at most every STANDBY_CHECK_INTERVAL_S per process); writes, sign-in, tokens and
# alert state stay on the primary, and so does everything outside a request (ingest, Celery,
# the alert evaluator). "primary" is the primary again, under a name a request reading from
# the standby (whose "default" is then the standby's connection) still reaches it by.
STANDBY_DATABASE_URL = envstr("PITWALL_STANDBY_DATABASE_URL", "")
STANDBY_MAX_LAG_S = envfloat("PITWALL_STANDBY_MAX_LAG_S", 5.0, minimum=0)
STANDBY_CHECK_INTERVAL_S = envfloat("PITWALL_STANDBY_CHECK_INTERVAL_S", 1.0, minimum=0.1)
if STANDBY_DATABASE_URL:
    _STANDBY = database_from_url(STANDBY_DATABASE_URL, "PITWALL_STANDBY_DATABASE_URL")
    DATABASES["standby"] = {
        **DATABASES["default"], **_STANDBY, "ENGINE": DATABASES["default"]["ENGINE"],
        "OPTIONS": {**_STANDBY["OPTIONS"], "pool": DATABASES["default"]["OPTIONS"]["pool"]},
        "TEST": {"MIRROR": "default"}}
    DATABASES["primary"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}
    DATABASE_ROUTERS = ["controlplane.lib.standby.router.StandbyRouter"]
    MIDDLEWARE.append("controlplane.lib.standby.middleware.ReadFromStandby")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = envstr("REDIS_URL", "redis://127.0.0.1:6379/0")
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL]},
    }
}

CELERY_BROKER_URL = envstr("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A broker (Redis) outage of any length: the worker and beat keep reconnecting instead of
# exiting after Celery's default 100 attempts (RELIABILITY.md, Redis down).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_TIMEZONE = "UTC"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Login throttling (django-axes), on the sign-in page and /admin/ alike: after
# AXES_FAILURE_LIMIT wrong passwords for one user from one address, that pair is locked out
# for AXES_COOLOFF_MINUTES (429), even with the right password. A success resets the count.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # Django's ModelBackend, refusing passwords while PITWALL_LOCAL_LOGIN is off (below).
    "controlplane.accounts.sso.backends.LocalPasswordBackend",
]
AXES_FAILURE_LIMIT = envint("PITWALL_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=envint("PITWALL_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "controlplane.audit.actor.client_address"
AXES_VERBOSE = False
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# Only passwords are counted: a refused single sign-on (no password) counted as a failure of
# no user from its address, and five of them locked everyone behind that address out of it.
AXES_WHITELIST_CALLABLE = "controlplane.accounts.sso.policy.not_a_password_attempt"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "web:fleet"
LOGOUT_REDIRECT_URL = "login"

# Single sign-on (docs/security.md, "Single sign-on"): OpenID Connect through
# mozilla-django-oidc, on when PITWALL_OIDC_CLIENT_ID is set. Users are found by the provider's
# subject, created at their first sign-in, and given the role their groups map to at every one.
# PITWALL_LOCAL_LOGIN=off refuses passwords to all but PITWALL_BREAK_GLASS_USERS.
_OIDC = envstr("PITWALL_OIDC_CLIENT_ID", "") != ""
PITWALL_SSO = {
    "ENABLED": _OIDC,
    "LOCAL_LOGIN": envbool("PITWALL_LOCAL_LOGIN", True),
    "BREAK_GLASS_USERS": envlist("PITWALL_BREAK_GLASS_USERS", []),
    "ISSUER": envstr("PITWALL_OIDC_ISSUER", None) if _OIDC else "",
    "PROVIDER_NAME": envstr("PITWALL_OIDC_PROVIDER_NAME", "single sign-on"),
    "USERNAME_CLAIM": envstr("PITWALL_OIDC_USERNAME_CLAIM", "preferred_username"),
    "GROUPS_CLAIM": envstr("PITWALL_OIDC_GROUPS_CLAIM", "groups"),
    "GROUP_ROLES": parse_group_roles(envstr("PITWALL_OIDC_GROUP_ROLES", "")),
}
if _OIDC:
    # None: required once single sign-on is on (the process stops naming the one missing).
    AUTHENTICATION_BACKENDS.append("controlplane.accounts.sso.backends.OidcBackend")
    OIDC_RP_CLIENT_ID = envstr("PITWALL_OIDC_CLIENT_ID", None)
    OIDC_RP_CLIENT_SECRET = envsecret("PITWALL_OIDC_CLIENT_SECRET", None)
    OIDC_OP_AUTHORIZATION_ENDPOINT = envstr("PITWALL_OIDC_AUTHORIZATION_URL", None)
    OIDC_OP_TOKEN_ENDPOINT = envstr("PITWALL_OIDC_TOKEN_URL", None)
    OIDC_OP_USER_ENDPOINT = envstr("PITWALL_OIDC_USERINFO_URL", None)
    OIDC_OP_JWKS_ENDPOINT = envstr("PITWALL_OIDC_JWKS_URL", None)
    OIDC_RP_SIGN_ALGO = envstr("PITWALL_OIDC_SIGN_ALGO", "RS256")
    OIDC_RP_SCOPES = envstr("PITWALL_OIDC_SCOPES", "openid email profile groups")
    OIDC_USE_PKCE = True
    OIDC_TIMEOUT = 10  # seconds per request to the provider: a hung one must not hold a worker
elif not PITWALL_SSO["LOCAL_LOGIN"]:
    raise ConfigError("PITWALL_LOCAL_LOGIN=off needs single sign-on: set PITWALL_OIDC_CLIENT_ID "
                      "and the other PITWALL_OIDC_* settings (docs/security.md)")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(envstr("STATIC_ROOT", str(BASE_DIR / "var" / "static")))
# uPlot comes from npm (`npm ci` in the build, package-lock.json): served as "vendor/uplot/".
STATICFILES_DIRS = [("vendor/uplot", BASE_DIR / "node_modules" / "uplot" / "dist")]
# WhiteNoise serves from STATIC_ROOT (filled by collectstatic); in development and tests it can
# read the app and node_modules folders directly instead, so no collectstatic is needed.
WHITENOISE_USE_FINDERS = envbool("PITWALL_STATIC_FINDERS", DEBUG)
WHITENOISE_AUTOREFRESH = DEBUG
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Security: production defaults; `manage.py check --deploy` is clean with DEBUG off.
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", not DEBUG)
# X-Forwarded-Proto is believed only behind a proxy that sets it (and strips a client's own):
# otherwise any client could claim HTTPS.
BEHIND_PROXY = envbool("PITWALL_BEHIND_PROXY", False)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if BEHIND_PROXY else None
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
# Off unless asked for: "preload" asks browsers to ship the domain as HTTPS-only, for every
# subdomain, in their builds, and leaving the list takes months. Operators deploy Pitwall on
# their own domains; that commitment is theirs to make (docs/configuration.md). Django's deploy
# check warns about it being off (security.W021): silenced, as decided here.
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = ["security.W021"]
# A load balancer's health check may come over plain HTTP. (Ingest never reaches Django's
# middleware: controlplane/asgi.py routes it around Django.)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", not DEBUG)
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (django-csp): scripts from this site only, the one inline import map
# by nonce; style attributes stay allowed (bar widths); live updates over this site's WebSocket.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, "'unsafe-inline'"],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

# Outgoing mail (e-mail channels): the SMTP server and how to reach it.
EMAIL_HOST = envstr("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = envsecret("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)  # STARTTLS, usually port 587
EMAIL_USE_SSL = envbool("EMAIL_USE_SSL", False)  # implicit TLS, usually port 465
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "pitwall@localhost")
SERVER_EMAIL = DEFAULT_FROM_EMAIL
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ConfigError("EMAIL_USE_TLS and EMAIL_USE_SSL exclude each other: set one of them")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "controlplane.api.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "controlplane.api.pagination.BoundedPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Pitwall API",
    "DESCRIPTION": "Fleet telemetry for vLLM inference servers.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SCHEMA_PATH_PREFIX": "/api/v1",
    # Choice sets that share a field name ("state", "kind") get a name each in the schema.
    "ENUM_NAME_OVERRIDES": {
        "AlertStateEnum": "controlplane.alerts.models.AlertState",
        "DeliveryStateEnum": "controlplane.alerts.delivery.models.DeliveryState",
        "RuleKindEnum": "controlplane.alerts.models.RuleKind",
        "TokenStateEnum": "controlplane.fleet.models.TokenState",
        "ScalingModeEnum": "controlplane.fleet.models.ScalingMode",
        "ChannelKindEnum": "controlplane.alerts.transports.TRANSPORT_CHOICES",
    },
}

# Pitwall's own knobs.
PITWALL = {
    # Ingest: the largest request body accepted (after gzip decoding), in bytes.
    "INGEST_MAX_BODY_BYTES": envint("PITWALL_INGEST_MAX_BODY_BYTES", 8 * 1024 * 1024, minimum=1024),
    # Ingest's reply asks each agent to hold its samples this long and send them as one batch
    # (docs/agent.md, "Holding samples"): a batch costs the server per batch, not per value, so
    # five 1-s samples a batch cost 0.6x the CPU per value of one. While a page watches the
    # host (or one of its engines) the reply asks for 0: each sample is sent as it is taken.
    # At most 5 s: uvicorn's default keep-alive is 5 s, and alerts see a sample this much later.
    "AGENT_HOLD_S": envfloat("PITWALL_AGENT_HOLD_S", 5.0, minimum=0.0, maximum=5.0),
    # Ingest: a flush writes when this many rows wait or this many ms passed since the first.
    # A flush has fixed costs (a dozen round trips): at 1,000 batches/s, 100 ms instead of 25
    # cut server CPU per value by a fifth and PostgreSQL's by two fifths, for +50 ms of p50
    # (BENCHMARKS.md §1).
    "INGEST_FLUSH_ROWS": envint("PITWALL_INGEST_FLUSH_ROWS", 4000, minimum=1),
    "INGEST_FLUSH_MS": envint("PITWALL_INGEST_FLUSH_MS", 100, minimum=0),
    # Ingest under faults (RELIABILITY.md): a flush that has not committed
    # after INGEST_FLUSH_TIMEOUT_S is abandoned (its connection dropped, its batches answered
    # 503: a stalled PostgreSQL must not hold requests forever); past INGEST_MAX_QUEUED_ROWS
    # rows waiting for the writer, or INGEST_MAX_REQUESTS_IN_FLIGHT requests being handled,
    # new requests are shed at once with 503 and Retry-After: INGEST_RETRY_AFTER_S (agents add
    # jitter), before memory grows with the backlog.
    "INGEST_FLUSH_TIMEOUT_S": envint("PITWALL_INGEST_FLUSH_TIMEOUT_S", 10, minimum=1),
    "INGEST_MAX_QUEUED_ROWS": envint("PITWALL_INGEST_MAX_QUEUED_ROWS", 40_000, minimum=100),
    "INGEST_MAX_REQUESTS_IN_FLIGHT": envint("PITWALL_INGEST_MAX_REQUESTS_IN_FLIGHT", 256,
                                            minimum=1),
    "INGEST_RETRY_AFTER_S": envint("PITWALL_INGEST_RETRY_AFTER_S", 5, minimum=1),
    # Ingest against one agent token holding requests open (docs/security.md): a body must
    # arrive within INGEST_BODY_TIMEOUT_S (else 408); a host may have
    # INGEST_MAX_REQUESTS_PER_HOST requests open (else 429; an agent sends one at a time);
    # at most INGEST_MAX_BODIES_READING bodies arrive at once (else 503). Only requests whose
    # bodies arrived count against INGEST_MAX_REQUESTS_IN_FLIGHT.
    "INGEST_BODY_TIMEOUT_S": envint("PITWALL_INGEST_BODY_TIMEOUT_S", 30, minimum=1),
    "INGEST_MAX_REQUESTS_PER_HOST": envint("PITWALL_INGEST_MAX_REQUESTS_PER_HOST", 4,
                                           minimum=1),
    "INGEST_MAX_BODIES_READING": envint("PITWALL_INGEST_MAX_BODIES_READING", 512, minimum=1),
    # Ingest: a body (after gzip) may hold one JSON array or object per this many bytes (plus
    # 1,024): agents write one per 74-230 bytes; denser bodies cost their decoder up to 6x as
    # much CPU per byte, on the event loop, and are refused before decoding (docs/security.md).
    "INGEST_JSON_BYTES_PER_CONTAINER": envint("PITWALL_INGEST_JSON_BYTES_PER_CONTAINER", 24,
                                              minimum=1),
    # A host, GPU or engine is online when it reported within this many seconds.
    "ONLINE_WINDOW_S": envint("PITWALL_ONLINE_WINDOW_S", 30, minimum=1),
    # Samples further in the future than this (clock skew) are refused.
    "MAX_CLOCK_SKEW_S": envint("PITWALL_MAX_CLOCK_SKEW_S", 300, minimum=1),
    # Daily partitions created ahead of time.
    "PARTITIONS_AHEAD_DAYS": envint("PITWALL_PARTITIONS_AHEAD_DAYS", 3, minimum=1),
    # Distinct histogram bucket layouts one host may register (each takes a 16-bit layout id
    # that alerting and tuning load): more is refused with a 400 naming the histogram.
    "MAX_HISTOGRAM_LAYOUTS_PER_HOST": envint("PITWALL_MAX_HISTOGRAM_LAYOUTS_PER_HOST", 64,
                                             minimum=4),
    # Raw samples are kept this many days (and ingest refuses older samples); whole daily
    # partitions are dropped after.
    "RAW_RETENTION_DAYS": envint("PITWALL_RAW_RETENTION_DAYS", 14, minimum=1),
    # Rollups (docs/history.md): 1-minute ones kept this many days (daily partitions), 1-hour
    # ones this many (monthly partitions); the rollup task runs every ROLLUP_INTERVAL_S and
    # rolls up a minute once it ended ROLLUP_SETTLE_S ago.
    "ROLLUP_1M_RETENTION_DAYS": envint("PITWALL_ROLLUP_1M_RETENTION_DAYS", 90, minimum=1),
    "ROLLUP_1H_RETENTION_DAYS": envint("PITWALL_ROLLUP_1H_RETENTION_DAYS", 730, minimum=1),
    "ROLLUP_INTERVAL_S": envint("PITWALL_ROLLUP_INTERVAL_S", 60, minimum=1),
    "ROLLUP_SETTLE_S": envint("PITWALL_ROLLUP_SETTLE_S", 30, minimum=2),
    # Packed history (docs/history.md): a day's raw rows are packed into per-minute arrays
    # once the day ended PACK_AFTER_S ago (at least two hours: alert rules read the last hour of
    # raw rows, and half of it is left for clock skew); the packing task runs every
    # PACK_INTERVAL_S.
    "PACK_AFTER_S": envint("PITWALL_PACK_AFTER_S", 7200, minimum=7200),
    "PACK_INTERVAL_S": envint("PITWALL_PACK_INTERVAL_S", 300, minimum=1),
    # Live push: the fleet summary goes out at most this often per ingest process, and the
    # ingest process re-reads which groups browsers watch this often (docs/live.md).
    "LIVE_FLEET_INTERVAL_MS": envint("PITWALL_LIVE_FLEET_INTERVAL_MS", 1000, minimum=0),
    "LIVE_INTEREST_REFRESH_MS": envint("PITWALL_LIVE_INTEREST_REFRESH_MS", 1000, minimum=10),
    # A live socket re-checks its session and its user's fleet.view_host at every ping and,
    # when the last check is older than this, before forwarding an event (a client that stops
    # pinging after losing its role is closed all the same).
    "LIVE_RECHECK_S": envint("PITWALL_LIVE_RECHECK_S", 20, minimum=0),
    # The fleet exposition (/api/v1/export/prometheus, docs/prometheus.md) with
    # histograms=window: each engine latency histogram sums the raw bucket deltas of this many
    # recent seconds (a scrape may ask for 5-300 with ?histogram_window_s=); about the scrape
    # interval or a little more. The default, histograms=minute, reads the 1-minute rollups.
    "EXPORT_HISTOGRAM_WINDOW_S": envint("PITWALL_EXPORT_HISTOGRAM_WINDOW_S", 60, minimum=5),
    # Alerts (docs/alerts.md): rules are evaluated every ALERT_EVAL_INTERVAL_S; the default
    # pack's TTFT p99 rule fires above ALERT_TTFT_P99_OBJECTIVE_MS (read when the pack loads).
    "ALERT_EVAL_INTERVAL_S": envint("PITWALL_ALERT_EVAL_INTERVAL_S", 10, minimum=1),
    # Connections one evaluation cycle runs on side by side, each over a shard of the hosts
    # (host id mod lanes, alerts/shards.py): about the cores PostgreSQL can give it.
    "ALERT_EVAL_LANES": envint("PITWALL_ALERT_EVAL_LANES", 2, minimum=1),
    # Evaluator shards (alerts/leases.py): 1, the whole fleet in one evaluating process; n > 1
    # cuts it by host id mod n over the workers, each shard held by one worker for a lease
    # renewed every cycle (0: 1.5 evaluation intervals) and taken over when that lapses.
    "ALERT_EVAL_SHARDS": envint("PITWALL_ALERT_EVAL_SHARDS", 1, minimum=1),
    "ALERT_EVAL_LEASE_S": envint("PITWALL_ALERT_EVAL_LEASE_S", 0, minimum=0),
    # Beat's dispatch_notifications and deliver_due ticks.
    "ALERT_DISPATCH_INTERVAL_S": envint("PITWALL_ALERT_DISPATCH_INTERVAL_S", 5, minimum=1),
    "ALERT_TTFT_P99_OBJECTIVE_MS": envint("PITWALL_ALERT_TTFT_P99_OBJECTIVE_MS", 2000, minimum=1),
    # Webhooks to private, loopback and link-local addresses are refused unless this is on
    # (docs/webhooks.md): a rule's receiver must not become a way into the internal network.
    "ALERT_ALLOW_PRIVATE_WEBHOOKS": envbool("PITWALL_ALERT_ALLOW_PRIVATE_WEBHOOKS", False),
    # One delivery attempt (an HTTP request, an SMTP conversation) gives up after this many
    # seconds; a receiver that takes 10 s per request is slow, not down. The claim's lease (a
    # worker killed mid-attempt leaves its row this long) must outlast it by 10 s: 0 means
    # max(120 s, 4 timeouts) (alerts/delivery/service.lease_s).
    "ALERT_DELIVERY_TIMEOUT_S": envint("PITWALL_ALERT_DELIVERY_TIMEOUT_S", 30, minimum=1),
    "ALERT_DELIVERY_LEASE_S": envint("PITWALL_ALERT_DELIVERY_LEASE_S", 0, minimum=0),
    # A silence lasts at most this many days after it starts (longer: a 400 naming ends_at).
    "ALERT_SILENCE_MAX_DAYS": envint("PITWALL_ALERT_SILENCE_MAX_DAYS", 90, minimum=1),
    # Every active silence is matched against every alert of the alert list and of each
    # notification pass: matchers per silence, silences active or pending, and the regex bytes
    # they hold in all are bounded (over: a 400 naming the setting; docs/security.md).
    "ALERT_SILENCE_MAX_MATCHERS": envint("PITWALL_ALERT_SILENCE_MAX_MATCHERS", 32, minimum=1),
    "ALERT_SILENCES_MAX_ACTIVE": envint("PITWALL_ALERT_SILENCES_MAX_ACTIVE", 500, minimum=1),
    "ALERT_SILENCES_MAX_PATTERN_BYTES": envint("PITWALL_ALERT_SILENCES_MAX_PATTERN_BYTES",
                                               65536, minimum=1024),
    # Each statement of a rule preview or a series read is cancelled after this many seconds
    # (503 that says so): a user's query must not hold a connection for everyone.
    "QUERY_TIMEOUT_S": envint("PITWALL_QUERY_TIMEOUT_S", 5, minimum=1),
    # entity= values one series read may name (each is looked up): over, a 400 naming it.
    "SERIES_MAX_ENTITIES": envint("PITWALL_SERIES_MAX_ENTITIES", 100, minimum=1),
    # /metrics (docs/prometheus.md) answers a scraper on loopback, or a user API token with
    # read rights; on, it answers anyone who reaches it (a trusted private network only).
    "METRICS_OPEN": envbool("PITWALL_METRICS_OPEN", False),
    # Links in notifications point here (the address users reach Pitwall at).
    "ALERT_EXTERNAL_URL": envstr("PITWALL_ALERT_EXTERNAL_URL", ""),
    # Tuning (docs/tuning.md): every TUNING_INTERVAL_S each deployment is diagnosed from the
    # 1-min rollups of the last TUNING_WINDOW_S (over-provisioning: TUNING_IDLE_WINDOW_S);
    # an accepted change is verified on windows of TUNING_VERIFY_WINDOW_S before and after,
    # the after window starting TUNING_SETTLE_S after the agent reports it running.
    "TUNING_INTERVAL_S": envint("PITWALL_TUNING_INTERVAL_S", 60, minimum=1),
    "TUNING_WINDOW_S": envint("PITWALL_TUNING_WINDOW_S", 600, minimum=60),
    "TUNING_IDLE_WINDOW_S": envint("PITWALL_TUNING_IDLE_WINDOW_S", 3600, minimum=60),
    "TUNING_VERIFY_WINDOW_S": envint("PITWALL_TUNING_VERIFY_WINDOW_S", 600, minimum=60),
    "TUNING_SETTLE_S": envint("PITWALL_TUNING_SETTLE_S", 60, minimum=0),
    # Loader variables (LD_PRELOAD, PYTHONPATH, ...; agents/vllm_args_catalog.py LOADER_ENV) in a
    # deployment's env are refused unless this is on, and then only for holders of
    # fleet.deploy_code (docs/security.md).
    "DEPLOY_ALLOW_LOADER_ENV": envbool("PITWALL_DEPLOY_ALLOW_LOADER_ENV", False),
    # API tokens made through the API or the tokens page: valid this many days unless asked
    # otherwise, and never longer than the maximum (docs/security.md).
    "API_TOKEN_DEFAULT_DAYS": envint("PITWALL_API_TOKEN_DEFAULT_DAYS", 90, minimum=1),
    "API_TOKEN_MAX_DAYS": envint("PITWALL_API_TOKEN_MAX_DAYS", 365, minimum=1),
    "TUNING_ITL_P99_OBJECTIVE_MS": envint("PITWALL_TUNING_ITL_P99_OBJECTIVE_MS", 100, minimum=1),
    # An engine with requests running or waiting but no generated token and no finished request
    # for this long is stalled (vLLM's /health keeps answering 200 while wedged): the default
    # pack's alert and the "stalled" state on the fleet and engine pages.
    "ENGINE_STALL_S": envint("PITWALL_ENGINE_STALL_S", 120, minimum=10),
    # Services (docs/services.md): the controller (rotation, healing, rollouts) runs every
    # SERVICE_TICK_S; a replica whose engine holds requests but made no progress for
    # SERVICE_STALL_S leaves its router's rotation (sooner than the pages' ENGINE_STALL_S: a
    # router keeps sending a wedged replica requests); a rollout checks each changed replica
    # for ROLLOUT_CHECK_S against the unchanged ones; a replica whose host is offline for
    # HEAL_OFFLINE_S is replaced on another host.
    "SERVICE_TICK_S": envint("PITWALL_SERVICE_TICK_S", 2, minimum=1),
    "SERVICE_STALL_S": envint("PITWALL_SERVICE_STALL_S", 10, minimum=3),
    "ROLLOUT_CHECK_S": envint("PITWALL_ROLLOUT_CHECK_S", 30, minimum=0),
    "ROLLOUT_SETTLE_S": envint("PITWALL_ROLLOUT_SETTLE_S", 15, minimum=0),
    # How much longer (a share: 0.5 = half as long again) a changed replica's TTFT or ITL p99
    # may read than the unchanged replicas' before its check counts a regression; the tuning
    # verifier's guard by default. Wider where replicas share noisy hosts (vLLM's CPU build).
    "ROLLOUT_LATENCY_GUARD": envfloat("PITWALL_ROLLOUT_LATENCY_GUARD", 0.5, minimum=0.05,
                                      maximum=100.0),
    "ROLLOUT_READY_MIN_S": envint("PITWALL_ROLLOUT_READY_MIN_S", 300, minimum=10),
    "HEAL_OFFLINE_S": envint("PITWALL_HEAL_OFFLINE_S", 60, minimum=0),
    # Objectives (docs/efficiency.md): a request meets them when its TTFT is under
    # ALERT_TTFT_P99_OBJECTIVE_MS and its ITL under TUNING_ITL_P99_OBJECTIVE_MS; OBJECTIVE_TARGET is
    # the share that must, so the error budget is 1 - OBJECTIVE_TARGET.
    "OBJECTIVE_TARGET": envfloat("PITWALL_OBJECTIVE_TARGET", 0.99, minimum=0.5, maximum=0.99999),
    # The price of one GPU-hour, for cost per million tokens (0: unknown, no cost shown).
    "GPU_HOUR_PRICE": envfloat("PITWALL_GPU_HOUR_PRICE", 0.0, minimum=0.0),
    "GPU_HOUR_PRICE_CURRENCY": envstr("PITWALL_GPU_HOUR_PRICE_CURRENCY", "USD"),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}
