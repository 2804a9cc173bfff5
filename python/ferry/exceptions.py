"""ferry's exceptions: one class per meaning of ferry-store's `Error`.

Every exception raised for a failed request is a `ferry.Error`, carrying the server's
`request_id`, its error `code` (`NoSuchKey`, `SlowDown`, ...) and the HTTP `status` when
the server answered. Two also subclass the builtin that code already catches:
`NotFound` is a `FileNotFoundError` and `Auth` a `PermissionError`. `Transport` is a
`ConnectionError`, and `ConfigError` (bad settings) a `ValueError`. A URL that is not
`s3://bucket/key` raises a plain `ValueError` before anything is sent.
"""

from __future__ import annotations

__all__ = [
    "Error",
    "NotFound",
    "Precondition",
    "Throttled",
    "Auth",
    "Transport",
    "Protocol",
    "Integrity",
    "ServiceError",
    "ConfigError",
]


class Error(Exception):
    """A failed object-store operation."""

    #: The provider's request id (``x-amz-request-id``), when the server answered.
    request_id: str | None = None
    #: The provider's error code (``NoSuchKey``, ``SlowDown``, ...), when it sent one.
    code: str | None = None
    #: The HTTP status, when the server answered.
    status: int | None = None


class NotFound(Error, FileNotFoundError):
    """The object, bucket or upload does not exist (404)."""


class Precondition(Error):
    """A condition failed (412, 304), or the object changed while it was being read."""


class Throttled(Error):
    """The service kept asking to slow down (503 SlowDown, 429) after the retries."""


class Auth(Error, PermissionError):
    """Not authorised: access denied, a wrong signature or key, expired credentials."""


class Transport(Error, ConnectionError):
    """The connection failed (connect, TLS, reset, time-out) after the retries."""


class Protocol(Error):
    """The server's answer could not be understood (bad XML, missing headers)."""


class Integrity(Error):
    """A length or checksum did not match: the bytes were not the object's."""


class ServiceError(Error):
    """Any other error the service answered with."""


class ConfigError(Error, ValueError):
    """Bad settings: the endpoint URL, credentials files, parameters."""
