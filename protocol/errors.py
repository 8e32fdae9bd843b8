"""Exceptions of the protocol layer, and Kafka's error codes (re-exported from the generated `error_codes`)."""

from protocol.error_codes import ErrorCode

__all__ = ["ErrorCode", "MalformedMessage", "UnknownApiKey", "UnsupportedVersion", "FrameTooLarge", "MalformedFrame"]


class MalformedMessage(ValueError):
    """Bytes that do not decode as the expected message (truncated, bad length, bad varint, null where not nullable...)."""


class UnknownApiKey(MalformedMessage):
    """A request header names an API key we do not know; the fields read so far are kept for the caller."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int):
        super().__init__(f"unknown api key {api_key} (version {api_version}, correlation id {correlation_id})")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class UnsupportedVersion(ValueError):
    """A message class was asked to decode or encode a version outside its validVersions."""


class MalformedFrame(ValueError):
    """A frame size prefix that cannot be valid (negative)."""


class FrameTooLarge(MalformedFrame):
    """A frame size prefix larger than the configured maximum."""

    def __init__(self, size_bytes: int, frame_bytes_max: int):
        super().__init__(f"frame of {size_bytes} bytes exceeds the maximum of {frame_bytes_max} bytes")
        self.size_bytes = size_bytes
        self.frame_bytes_max = frame_bytes_max
