"""The layers of the control plane (docs/architecture.md): the domain apps own models and
services and never reach up into the three that translate requests, sockets and pages.

Imports are read with ``ast``, so an import inside a function counts as much as one at the
top; a string naming a page's or an endpoint's URL (``reverse("web:host")``) counts too, since
it ties the domain to a layer above it without an import.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOMAIN = ("lib", "fleet", "telemetry", "alerts", "tuning", "audit", "accounts")
ABOVE = ("controlplane.api", "controlplane.web", "controlplane.realtime")
# Where the application is put together: it may import every layer.
ASSEMBLY = ("devstack",)
URL_NAME = re.compile(r"^(web|api):[\w-]+$")


def imported(path: Path, root: Path = ROOT) -> set[str]:
    """Every module ``path`` imports, absolute, wherever the import statement stands."""
    package = ".".join(path.relative_to(root).parent.parts)
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names.add(base)
            # ``from controlplane import web`` imports a module too.
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def url_names(path: Path) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and URL_NAME.match(node.value)}


def _above(name: str) -> bool:
    return any(name == layer or name.startswith(layer + ".") for layer in ABOVE)


def domain_files() -> list[Path]:
    return sorted(p for app in DOMAIN for p in (ROOT / "controlplane" / app).rglob("*.py"))


def test_every_domain_app_is_checked():
    apps = {p.name for p in (ROOT / "controlplane").iterdir()
            if p.is_dir() and (p / "__init__.py").exists()}
    # A new package is a domain app (add it to DOMAIN), a layer above (ABOVE) or assembly.
    assert apps - set(DOMAIN) - {layer.rpartition(".")[2] for layer in ABOVE} <= set(ASSEMBLY)


def test_domain_apps_do_not_import_api_web_or_realtime():
    offenders = {str(p.relative_to(ROOT)): sorted(n for n in imported(p) if _above(n))
                 for p in domain_files()}
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_api_and_the_pages_do_not_import_one_another():
    """What both hand out (links from evidence to pages) lives where the application is put
    together: controlplane/evidence_links.py."""
    offenders = {}
    for layer, other in (("api", "controlplane.web"), ("web", "controlplane.api")):
        for p in sorted((ROOT / "controlplane" / layer).rglob("*.py")):
            names = sorted(n for n in imported(p) if n == other or n.startswith(other + "."))
            if names:
                offenders[str(p.relative_to(ROOT))] = names
    assert offenders == {}


def test_domain_apps_do_not_name_pages_or_endpoints():
    offenders = {str(p.relative_to(ROOT)): sorted(url_names(p)) for p in domain_files()
                 if url_names(p)}
    assert offenders == {}


def test_the_import_reader_sees_what_the_rule_is_about(tmp_path):
    """The check itself: function-local, relative and package-level imports are all seen."""
    package = tmp_path / "controlplane" / "tuning"
    package.mkdir(parents=True)
    module = package / "probe.py"
    module.write_text("from controlplane import web\n"
                      "def later():\n"
                      "    from ..realtime.publisher import Publisher\n"
                      "    import controlplane.api.urls\n"
                      "    return reverse('web:engine')\n")
    assert sorted(n for n in imported(module, tmp_path) if _above(n)) == [
        "controlplane.api.urls", "controlplane.realtime.publisher",
        "controlplane.realtime.publisher.Publisher", "controlplane.web"]
    assert url_names(module) == {"web:engine"}
