"""AMQP reply codes and the errors that carry them.

Raise an :class:`AMQPError` subclass anywhere in the broker; the connection turns it into
``Channel.Close`` (a :class:`SoftError`) or ``Connection.Close`` (a :class:`HardError`) in one
place (``amqp_server.connection.Connection._fail``). The scope is the class's, not the
code's: reply code 504 is named CHANNEL_ERROR but is a *connection* error, and 403
ACCESS_REFUSED is soft on a channel (:class:`AccessRefused`) but hard when a login is
refused (:class:`ConnectionAccessRefused`); so the scopes are called soft/hard, as pamqp and
the spec's constants table do.

Source: AMQP 0-9-1 spec section 1.3 (constants) and RabbitMQ's
``rabbit_binary_generator:map_exception/3``.
"""

from __future__ import annotations

from enum import IntEnum


class ReplyCode(IntEnum):
    """AMQP 0-9-1 reply codes (spec 1.3), named as the spec names them."""

    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541


class AMQPError(Exception):
    """An error that closes a channel or a connection with a reply code.

    Args:
        explanation: the text after ``"CODE_NAME - "``, e.g. ``"no queue 'q' in vhost '/'"``.
        class_id, method_id: the failing method's ids (0 when not known); the connection fills
            them in from the method being handled when left at 0.

    ``reply_text`` is ``"NOT_FOUND - no queue 'q' in vhost '/'"``; a longer one than 255 bytes
    is cut to 252 and ends with ``...``, as RabbitMQ writes it.
    """

    code: ReplyCode = ReplyCode.INTERNAL_ERROR
    #: True when the error closes only the channel (a :class:`SoftError`).
    is_soft: bool = False

    def __init__(self, explanation: str, class_id: int = 0, method_id: int = 0) -> None:
        super().__init__(explanation)
        self.explanation = explanation
        self.class_id = class_id
        self.method_id = method_id

    @property
    def reply_text(self) -> str:
        text = f"{self.code.name} - {self.explanation}"
        raw = text.encode("utf-8")
        if len(raw) > 255:  # RabbitMQ: 252 bytes and "..."
            text = raw[:252].decode("utf-8", "ignore") + "..."
        return text


class SoftError(AMQPError):
    """Base of the errors that close a channel (spec: soft errors, codes 311-313 and
    403-406)."""

    is_soft = True


class HardError(AMQPError):
    """Base of the errors that close the connection (spec: hard errors, codes 320, 402,
    501-506, 530, 540, 541; and 403 for a refused login)."""


class AccessRefused(SoftError):
    code = ReplyCode.ACCESS_REFUSED


class NotFound(SoftError):
    code = ReplyCode.NOT_FOUND


class ResourceLocked(SoftError):
    code = ReplyCode.RESOURCE_LOCKED


class PreconditionFailed(SoftError):
    code = ReplyCode.PRECONDITION_FAILED


class FrameError(HardError):
    code = ReplyCode.FRAME_ERROR


class SyntaxError_(HardError):
    code = ReplyCode.SYNTAX_ERROR


class CommandInvalid(HardError):
    code = ReplyCode.COMMAND_INVALID


class ChannelError(HardError):
    code = ReplyCode.CHANNEL_ERROR


class UnexpectedFrame(HardError):
    code = ReplyCode.UNEXPECTED_FRAME


class NotAllowed(HardError):
    code = ReplyCode.NOT_ALLOWED


class NotImplemented_(HardError):
    code = ReplyCode.NOT_IMPLEMENTED


class InternalError(HardError):
    code = ReplyCode.INTERNAL_ERROR


class ConnectionAccessRefused(HardError):
    """403 ACCESS_REFUSED on the connection (login refused): a hard error, unlike 403 on a
    channel (:class:`AccessRefused`). The connection closes with reply class/method 0, or
    closes the socket without a Connection.Close when the client did not announce the
    ``authentication_failure_close`` capability (RabbitMQ's behaviour)."""

    code = ReplyCode.ACCESS_REFUSED


def rs(kind: str, name: str, vhost: str) -> str:
    """RabbitMQ's resource wording: ``rs('queue', 'q', '/')`` -> ``"queue 'q' in vhost '/'"``."""
    return f"{kind} '{name}' in vhost '{vhost}'"
