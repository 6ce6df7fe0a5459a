from django.conf import settings
from django.db import models


class Identity(models.Model):
    """The user a provider's subject signs in as.

    Found by (issuer, subject), never by name or e-mail: an account at the provider named like
    a local one (``admin``) must not become it.
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="sso_identity")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"],
                                               name="sso_identity_issuer_subject")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
