from django.contrib import admin

from controlplane.audit.models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """Read-only: the log is append-only, in the database too."""

    list_display = ("at", "actor", "action", "target_type", "target", "address")
    list_filter = ("action", "target_type")
    search_fields = ("actor", "target")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
