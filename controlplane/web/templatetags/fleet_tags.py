from django import template

from controlplane.fleet.queries import is_online

register = template.Library()


@register.filter
def online(last_seen) -> bool:
    return is_online(last_seen)
