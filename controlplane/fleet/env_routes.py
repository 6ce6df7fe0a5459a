"""Environment variables that decide where a vLLM process sends its credentials, or whom its
TLS trusts (docs/security.md, "Deployments").

A deployment's env holds secrets (``HF_TOKEN``, cloud keys) that only the host's agent reads.
Whoever sets ``HF_ENDPOINT=https://attacker`` next to them makes huggingface_hub send
``Authorization: Bearer <HF_TOKEN>`` there; a proxy variable or a CA bundle does the same for
every client; an OTLP endpoint takes the ``OTEL_EXPORTER_OTLP_HEADERS``. So setting or changing
one of these needs ``fleet.deploy_code``, like a loader variable; removing one (back to the
library's default) is open to every writer.

Names are matched by pattern as well as listed: a library that adds ``FOO_ENDPOINT`` tomorrow
is covered today. A false match costs only that a writer without ``fleet.deploy_code`` asks
someone who holds it. Lower-case names (``https_proxy``) cannot be set at all: env names are
``[A-Z_][A-Z0-9_]*``.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

# Known by name: read by huggingface_hub / transformers, ModelScope, requests, urllib, httpx,
# aiohttp, curl, OpenSSL, boto3, gRPC and OpenTelemetry.
NAMED = frozenset({
    "HF_ENDPOINT", "HF_HUB_ENDPOINT", "HF_INFERENCE_ENDPOINT", "HUGGINGFACE_CO_STAGING",
    "HUGGINGFACE_CO_RESOLVE_ENDPOINT", "MODELSCOPE_DOMAIN", "MODELSCOPE_URL_SCHEME",
    "VLLM_USE_MODELSCOPE", "VLLM_USAGE_STATS_SERVER",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "WS_PROXY", "WSS_PROXY",
    "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "AWS_CA_BUNDLE",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "HTTPLIB2_CA_CERTS", "NODE_EXTRA_CA_CERTS",
    "PYTHONHTTPSVERIFY", "SSLKEYLOGFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
    "STORAGE_EMULATOR_HOST", "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_CERTIFICATE",
})
# Known by shape: endpoints, proxies, base URLs, servers, trust stores.
PATTERNS = ("*ENDPOINT*", "*PROXY*", "*_URL", "*_URL_*", "*_URI", "*_DOMAIN", "*_SERVER",
            "*_HOST", "*CA_BUNDLE*", "*CA_CERTS*", "SSL_CERT_*", "*_CERTIFICATE*")


def routes_credentials(name: str) -> bool:
    """Whether the variable ``name`` decides where credentials go or whom TLS trusts."""
    return name in NAMED or any(fnmatchcase(name, pattern) for pattern in PATTERNS)


def credential_routes(env: dict) -> list[str]:
    """The variables of ``env`` that route credentials, sorted."""
    return sorted(name for name in env if isinstance(name, str) and routes_credentials(name))
