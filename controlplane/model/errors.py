"""Domain errors of the control plane. The API maps them to HTTP in one place
(``controlplane.api.problems``); the reconciler uses the retry types."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldProblem:
    field: str  # dotted path into the spec, e.g. "metadata.instance", "processor_params[0]"
    message: str
    fix: str = ""


class ControlPlaneError(Exception):
    """Base of the errors the API turns into problem+json."""

    status = 400
    title = "Bad request"
    code = "InvalidParameter"  # the API's ``Code``: Alibaba Cloud's common codes, EAS's own


class InvalidSpec(ControlPlaneError):
    status = 422
    title = "Invalid service spec"
    code = "InvalidParameter"

    def __init__(self, problems: list[FieldProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{p.field}: {p.message}" for p in problems))


class TokenInUse(InvalidSpec):
    """Tokens are unique per cluster: the gateway's gRPC door selects a service by its
    token alone."""

    status = 409
    title = "Token already in use"
    code = "InvalidToken.Duplicate"

    def __init__(self) -> None:
        super().__init__(
            [
                FieldProblem(
                    "token",
                    "another service in this cluster already uses this token "
                    "(tokens are unique per cluster)",
                    "pick another token, or omit it to get a generated one",
                )
            ]
        )


class ServiceNotFound(ControlPlaneError):
    status = 404
    title = "Service not found"
    code = "InvalidService.NotFound"


class GroupNotFound(ControlPlaneError):
    status = 404
    title = "Group not found"
    code = "InvalidGroup.NotFound"


class ServiceExists(ControlPlaneError):
    status = 409
    title = "Service already exists"
    code = "InvalidService.AlreadyExists"


class Conflict(ControlPlaneError):
    """The service changed since the caller read it (If-Match mismatch) or is being deleted."""

    status = 409
    title = "Conflict"
    code = "Conflict"


class PreconditionFailed(ControlPlaneError):
    status = 412
    title = "Precondition failed"
    code = "PreconditionFailed"


class Refused(ControlPlaneError):
    """A request whose credential is missing, wrong or short of the right: ``code`` is
    Alibaba Cloud's (``SignatureDoesNotMatch``, ``Forbidden``...), ``principal`` who the
    request claimed to be, for the audit trail."""

    def __init__(self, status: int, code: str, message: str, principal: str = "anonymous") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.title = "Forbidden" if status == 403 else "Unauthorized"
        self.principal = principal
