"""Serializers of the read API, one module per resource."""
