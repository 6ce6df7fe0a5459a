"""Users and their roles, for admins. Users are deactivated, never deleted: the audit log and
the revisions they authored keep naming them."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.accounts import users
from controlplane.accounts.roles import ORDER, role_of
from controlplane.api.permissions import needs
from controlplane.api.views.alerts import ERRORS

ROLE_CHOICES = [(r, r) for r in ORDER]


class UserSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = get_user_model()
        fields = ["id", "username", "email", "role", "is_active", "is_superuser", "last_login",
                  "date_joined"]
        read_only_fields = fields

    @extend_schema_field(serializers.ChoiceField(choices=ROLE_CHOICES, allow_null=True))
    def get_role(self, user) -> str | None:
        return role_of(user)


class NewUserSerializer(serializers.Serializer):
    username = serializers.RegexField(r"^[\w.@+-]{1,150}$", help_text="letters, digits, @.+-_")
    email = serializers.EmailField(required=False, default="")
    password = serializers.CharField(write_only=True, max_length=256)
    role = serializers.ChoiceField(choices=ROLE_CHOICES, allow_null=True, default=None)

    def validate_username(self, name: str) -> str:
        if get_user_model().objects.filter(username=name).exists():
            raise serializers.ValidationError("a user with this name exists")
        return name


class UserChangeSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=ROLE_CHOICES, allow_null=True, required=False)
    is_active = serializers.BooleanField(required=False)
    password = serializers.CharField(write_only=True, max_length=256, required=False)


def _refused(do):
    try:
        do()
    except users.Refused as exc:
        raise PermissionDenied(str(exc)) from None
    except DjangoValidationError as exc:
        raise ValidationError({"password": exc.messages}) from None


class UserViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = UserSerializer
    permission_classes = [needs("auth.view_user", "auth.change_user", "CanManageUsers")]
    lookup_value_converter = "int"
    queryset = get_user_model().objects.prefetch_related("groups").order_by("username")

    @extend_schema(summary="Create a user with a role (the password must pass the validators)",
                   request=NewUserSerializer, responses={201: UserSerializer, 400: ERRORS})
    def create(self, request: Request) -> Response:
        body = NewUserSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        made = []
        _refused(lambda: made.append(users.create_user(
            request.user, data["username"], data["password"], data["role"], data["email"])))
        return Response(UserSerializer(made[0]).data, status=status.HTTP_201_CREATED)

    @extend_schema(summary="Change a user's role, whether they may sign in, or their password",
                   request=UserChangeSerializer, responses={200: UserSerializer, 400: ERRORS})
    def partial_update(self, request: Request, pk=None) -> Response:
        user = self.get_object()
        body = UserChangeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if "role" in data:
            _refused(lambda: users.set_role(request.user, user, data["role"]))
        if "is_active" in data:
            _refused(lambda: users.set_active(request.user, user, data["is_active"]))
        if "password" in data:
            _refused(lambda: users.set_password(request.user, user, data["password"]))
        return Response(UserSerializer(self.get_queryset().get(pk=user.pk)).data)
