"""The API fuzzed from its own OpenAPI schema (schemathesis) on a real server, as every role
and as an agent: whatever the input, no answer is a server error (5xx).

Minutes of requests: marked schema_fuzz, deselected from `make test`, run by
`make test-schema` (and .ci/run). PITWALL_FUZZ_EXAMPLES bounds the examples per operation.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from urllib.request import Request, urlopen

import pytest
from django.utils import timezone

from controlplane.accounts.roles import DEPLOYER, ORDER
from controlplane.alerts.models import Alert, AlertRule, Silence
from controlplane.fleet.models import Deployment, Engine, Gpu, Host, TokenScope
from controlplane.fleet.tokens import issue_agent_token, issue_api_token
from tests.support.live import free_port, start_server
from tests.support.roles import user_with_role

pytestmark = pytest.mark.schema_fuzz
EXAMPLES = os.environ.get("PITWALL_FUZZ_EXAMPLES", "15")
# The read-only run looks for a write that gets through, which needs few examples per
# operation: the scope is checked before anything the input could change.
READ_ONLY_EXAMPLES = os.environ.get("PITWALL_FUZZ_READ_ONLY_EXAMPLES", "3")


@pytest.fixture(scope="module")
def fuzz_server(django_db_setup, django_db_blocker, tmp_path_factory):
    """One server on the test database, with objects for the detail endpoints to find."""
    with django_db_blocker.unblock():
        seed()
        tokens = {role: issue_api_token(user_with_role(f"fuzz-{role}", role).username,
                                        "fuzz") for role in ORDER}
        tokens["no role"] = issue_api_token(user_with_role("fuzz-none", None).username, "fuzz")
        tokens["agent"] = issue_agent_token("fuzz-agent-host")[0]
    log = tmp_path_factory.mktemp("fuzz") / "server.log"
    port = free_port()
    process = start_server(port, log)
    base = f"http://127.0.0.1:{port}"
    # Fetched once, as the admin: an agent token may not read it, and a role's own run may
    # revoke its token (POST /tokens/{id}/revoke/ is fuzzed too).
    schema = log.with_name("openapi.json")
    schema.write_bytes(urlopen(Request(f"{base}/api/v1/schema/?format=json", headers={
        "Authorization": f"Bearer {tokens['admin']}"})).read())
    yield base, schema, tokens, log
    process.stop()


def seed() -> None:
    host = Host.objects.create(hostname="fuzz-host-1")
    Gpu.objects.create(host=host, index=0, uuid="GPU-fuzz-0", name="simulated H100")
    Engine.objects.create(host=host, name="vllm:8000/0")
    Deployment.objects.create(host=host, name="llama", model="meta-llama/Llama-3.1-8B",
                              port=8000, gpu_indices=[0], vllm_version="0.32.0")
    rule = AlertRule.objects.create(name="fuzz rule", metric="gpu.temp_c", aggregation="max",
                                    window_s=30, op=">", threshold=85)
    Alert.objects.create(rule=rule, target=f"host:{host.id}", fingerprint="fuzz",
                         state="firing", host_id=host.id)
    now = timezone.now()
    Silence.objects.create(matchers=[{"label": "alertname", "op": "=", "value": "x"}],
                           starts_at=now, ends_at=now + timedelta(hours=1), author="fuzz",
                           comment="fuzz")


# Those whose writes are refused before a body is read, or whose few writes (an operator's
# acknowledgements and silences) parse bodies as the admin's do: the coverage phase's
# thousands of malformed bodies per operation are sent to their reads only.
WRITES_SEEN_ELSEWHERE = (*ORDER[:ORDER.index(DEPLOYER)], "no role")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("who", [*ORDER, "no role", "agent"])
def test_no_input_makes_a_server_error(fuzz_server, who, tmp_path: Path):
    base, schema, tokens, log = fuzz_server
    if who not in WRITES_SEEN_ELSEWHERE:
        done = fuzz(schema, base, tokens[who], EXAMPLES, ["not_a_server_error"], tmp_path)
        report(who, done, log)
        return
    done = fuzz(schema, base, tokens[who], EXAMPLES, ["not_a_server_error"], tmp_path,
                phases="examples,fuzzing")
    report(who, done, log)
    done = fuzz(schema, base, tokens[who], EXAMPLES, ["not_a_server_error"], tmp_path,
                phases="coverage", only=["--include-method-regex", "^GET$"])
    report(f"{who} (coverage of reads)", done, log)


@pytest.mark.django_db(transaction=True)
def test_a_read_only_token_writes_nothing_whatever_the_input(fuzz_server, tmp_path: Path):
    """An admin's read-only token: every unsafe operation is a 403 whatever the input, and
    nothing is a 5xx. Only the unsafe operations (the admin's own run reads the rest), and
    without the coverage phase's thousands of malformed bodies: the scope is checked before a
    body is read (tests/security/test_read_only_tokens.py walks every operation too). A user
    and token of its own: the admin's run may have revoked the others' tokens."""
    base, schema, _, log = fuzz_server
    user_with_role("fuzz-read-only", "admin")
    token = issue_api_token("fuzz-read-only", "fuzz", scope=TokenScope.READ)
    done = fuzz(schema, base, token, READ_ONLY_EXAMPLES,
                 ["not_a_server_error", "read_only_token_writes_nothing"], tmp_path,
                 hooks=Path(__file__).with_name("read_only_checks.py"),
                 phases="examples,fuzzing",
                 only=["--include-method-regex", "^(POST|PUT|PATCH|DELETE)$"])
    report("read-only admin", done, log)


def fuzz(schema: Path, base: str, token: str, examples: str, checks: list[str], cwd: Path,
         hooks: Path | None = None, phases: str = "examples,coverage,fuzzing",
         only: tuple | list = ()) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"SCHEMATHESIS_HOOKS": str(hooks)} if hooks else {})}
    return subprocess.run(
        [str(Path(sys.executable).with_name("schemathesis")), "run", str(schema),
         "--url", base, "--checks", ",".join(checks),
         "--phases", phases, "--max-examples", examples,
         "--workers", "2", "--request-timeout", "30", "--seed", "1",
         "--header", f"Authorization: Bearer {token}",
         "--exclude-path-regex", "^/api/v1/docs", *only],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=1200)


def report(who: str, done: subprocess.CompletedProcess, log: Path) -> None:
    summary = done.stdout[-6000:]
    # Each phase's tally ("✅ 60 passed") and the operations tested, for the CI log.
    print(f"{who}:", *[line.strip() for line in done.stdout.splitlines()
                       if "passed" in line or "Operations:" in line], sep="\n  ")
    assert done.returncode == 0, f"{who}:\n{summary}\n{done.stderr[-2000:]}\n" \
                                 f"server log:\n{log.read_text(errors='replace')[-4000:]}"
