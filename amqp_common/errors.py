"""AMQP reply codes and the errors that carry them.

Raise an :class:`AMQPError` subclass anywhere in the broker; the connection turns it into
``Channel.Close`` (a :class:`SoftError`) or ``Connection.Close`` (a :class:`HardError`) in one
place (:func:`close_for`). Reply code 504 is named CHANNEL_ERROR but is a *connection* error,
so the scopes are called soft/hard, as pamqp and the spec's constants table do.

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


#: Codes that close only the channel (spec: "soft errors"); every other error code closes the
#: connection.
SOFT_CODES = frozenset(
    {
        ReplyCode.CONTENT_TOO_LARGE,
        ReplyCode.NO_ROUTE,
        ReplyCode.NO_CONSUMERS,
        ReplyCode.ACCESS_REFUSED,
        ReplyCode.NOT_FOUND,
        ReplyCode.RESOURCE_LOCKED,
        ReplyCode.PRECONDITION_FAILED,
    }
)


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

    def __init__(self, explanation: str, class_id: int = 0, method_id: int = 0) -> None:
        super().__init__(explanation)
        self.explanation = explanation
        self.class_id = class_id
        self.method_id = method_id

    @property
    def is_soft(self) -> bool:
        """True when the error closes only the channel."""
        return self.code in SOFT_CODES

    @property
    def reply_text(self) -> str:
        text = f"{self.code.name} - {self.explanation}"
        raw = text.encode("utf-8")
        if len(raw) > 255:  # RabbitMQ: 252 bytes and "..."
            text = raw[:252].decode("utf-8", "ignore") + "..."
        return text


class SoftError(AMQPError):
    """Base of the errors that close a channel (spec: soft errors)."""


class HardError(AMQPError):
    """Base of the errors that close the connection (spec: hard errors)."""


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
    """403 ACCESS_REFUSED on the connection (login refused), which is hard, unlike its soft
    use on channels."""

    code = ReplyCode.ACCESS_REFUSED


def rs(kind: str, name: str, vhost: str) -> str:
    """RabbitMQ's resource wording: ``rs('queue', 'q', '/')`` -> ``"queue 'q' in vhost '/'"``."""
    return f"{kind} '{name}' in vhost '{vhost}'"
