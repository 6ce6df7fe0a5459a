"""A real OpenID Connect provider for the single sign-on tests: npm's certified
``oidc-provider`` run by Node (tests/support/oidc_provider.mjs) on a free port.

``make install`` installs it (``npm ci``: package.json's devDependencies). Its users live in a
JSON file that it reads at every sign-in: ``set_user`` changes a user's groups as an
administrator would in the identity provider.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tests.support.live import ROOT, Process, free_port
from tests.support.polling import wait_until

SCRIPT = ROOT / "tests" / "support" / "oidc_provider.mjs"
CLIENT_ID = "pitwall"
CLIENT_SECRET = "pitwall-test-client-secret"


class OidcProvider:
    """The provider on ``http://localhost:<port>`` (another site than the server at
    127.0.0.1, as an identity provider is) with one static client for ``redirect_uri``."""

    def __init__(self, workdir: Path, redirect_uri: str) -> None:
        self.port = free_port()
        self.issuer = f"http://localhost:{self.port}"
        self.workdir = workdir
        self.users_file = workdir / "oidc-users.json"
        self.redirect_uri = redirect_uri
        self.process: Process | None = None
        self._users: dict[str, dict] = {}

    def set_user(self, username: str, password: str, groups: list[str]) -> None:
        """Create or change a user; the next sign-in sees it."""
        self._users[username] = {"password": password, "email": f"{username}@example.test",
                                 "groups": groups}
        staging = self.users_file.with_suffix(".tmp")
        staging.write_text(json.dumps(self._users))
        os.replace(staging, self.users_file)  # never half a file for a sign-in to read

    def start(self) -> OidcProvider:
        node = shutil.which("node")
        if node is None:
            raise AssertionError("node is missing: apt-get install nodejs npm")
        if not (ROOT / "node_modules" / "oidc-provider").is_dir():
            raise AssertionError("node_modules/oidc-provider is missing: make install")
        if not self.users_file.exists():
            self.set_user("nobody", "unused", [])
        config = self.workdir / "oidc-provider.json"
        config.write_text(json.dumps({
            "issuer": self.issuer, "port": self.port, "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET, "redirect_uri": self.redirect_uri,
            "users": str(self.users_file)}))
        log = self.workdir / "oidc-provider.log"
        self.process = Process([node, str(SCRIPT), str(config)], log=log)
        wait_until(self._ready, 30, lambda: f"the OIDC provider did not start:\n{self.output()}")
        return self

    def _ready(self) -> bool:
        if self.process is not None and self.process.proc.poll() is not None:
            raise AssertionError(f"the OIDC provider exited:\n{self.output()}")
        return "listening" in self.output()

    def output(self) -> str:
        return self.process.output() if self.process else ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def server_env(self) -> dict[str, str]:
        """The Pitwall settings that point a server at this provider."""
        return {
            "PITWALL_OIDC_ISSUER": self.issuer,
            "PITWALL_OIDC_CLIENT_ID": CLIENT_ID,
            "PITWALL_OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "PITWALL_OIDC_AUTHORIZATION_URL": f"{self.issuer}/auth",
            "PITWALL_OIDC_TOKEN_URL": f"{self.issuer}/token",
            "PITWALL_OIDC_USERINFO_URL": f"{self.issuer}/me",
            "PITWALL_OIDC_JWKS_URL": f"{self.issuer}/jwks",
            "PITWALL_OIDC_PROVIDER_NAME": "Test IdP",
        }
