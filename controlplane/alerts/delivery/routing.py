"""Which routes an alert takes and which group of a route it joins."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property

from django.core.exceptions import ValidationError

from controlplane.alerts.compiled import Compiled, compile_matchers, matches_all
from controlplane.alerts.delivery.models import Channel, Route
from controlplane.alerts.models import Severity
from controlplane.alerts.patterns import PatternError
from controlplane.alerts.silences import validate_matchers


def validate_route(route: Route) -> None:
    severities = route.severities or []
    if not isinstance(severities, list) or set(severities) - set(Severity.values):
        raise ValidationError({"severities": f"a list of {', '.join(Severity.values)}"})
    if route.matchers:
        validate_matchers(route.matchers)
    if not isinstance(route.group_by, list) or not all(isinstance(g, str) for g in route.group_by):
        raise ValidationError({"group_by": "a list of label names"})


@dataclass
class Plan:
    """One route as dispatch sees it; ``route`` None is the default route."""

    route: Route | None
    channels: list[Channel]
    group_by: list[str] = field(default_factory=lambda: ["alertname"])
    group_wait_s: int = 30
    group_interval_s: int = 300
    repeat_interval_s: int = 4 * 3600

    @property
    def name(self) -> str:
        return self.route.name if self.route else "default"

    @property
    def route_id(self) -> int | None:
        return self.route.id if self.route else None

    def matches(self, labels: dict[str, str]) -> bool:
        if self.route is None:
            return True
        severities = self.route.severities or []
        if severities and labels.get("severity") not in severities:
            return False
        return self.compiled is not None and matches_all(self.compiled, labels)

    @cached_property
    def compiled(self) -> Compiled | None:
        """The route's matchers, compiled once per pass (not once per alert); None: a stored
        regex RE2 refuses, so the route takes nothing (the default route may)."""
        try:
            return compile_matchers((self.route.matchers or []) if self.route else [])
        except PatternError:
            return None

    def group_labels(self, labels: dict[str, str]) -> dict[str, str]:
        return {name: str(labels.get(name, "")) for name in self.group_by}

    def group_key(self, group_labels: dict[str, str]) -> str:
        route = str(self.route.id) if self.route else "default"
        return f"{route}:{json.dumps(group_labels, sort_keys=True, separators=(',', ':'))}"


def load_plans() -> tuple[list[Plan], Plan]:
    """The enabled routes with their enabled channels, and the default route."""
    plans = []
    for route in Route.objects.filter(enabled=True).prefetch_related("channels"):
        channels = [c for c in route.channels.all() if c.enabled]
        plans.append(Plan(route, channels, list(route.group_by), route.group_wait_s,
                          route.group_interval_s, route.repeat_interval_s))
    default = Plan(None, list(Channel.objects.filter(enabled=True)))
    return plans, default


def plans_for(labels: dict[str, str], plans: list[Plan], default: Plan) -> list[Plan]:
    """Every enabled route that matches; the default route when none does."""
    return [p for p in plans if p.matches(labels)] or [default]
