"""Request/response headers and whole-frame encoding.

Request header v1: api_key int16, api_version int16, correlation_id int32, client_id nullable int16-length string.
Request header v2 (flexible API versions) adds a tagged-field section; client_id stays a non-compact string.
Response header v0: correlation_id int32; v1 (flexible API versions) adds a tagged-field section -- except that
ApiVersions responses always use v0, so a client can read them before knowing the broker's versions.

Headers of unknown API keys cannot be sized (v1 or v2 depends on the API), so ``decode_request_header`` raises
``UnknownApiKey`` carrying key, version and correlation id; the caller decides whether to answer or close.
"""

import struct
from dataclasses import dataclass

from protocol import primitives as p
from protocol.apis import API_BY_KEY
from protocol.errors import MalformedMessage, UnknownApiKey

API_VERSIONS_KEY = 18
_REQUEST_FIXED = struct.Struct(">hhi")
_RESPONSE_FIXED = struct.Struct(">ii")  # size prefix, correlation id
_EMPTY_TAGGED_FIELDS = b"\x00"
_read_client_id = p.string_reader(compact=False, nullable=True)
_write_client_id = p.string_writer(compact=False, nullable=True)


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None
    tagged_fields: tuple[tuple[int, bytes], ...] = ()  # header v2 defines no tags: all are kept raw


def _is_flexible(api_key: int, api_version: int) -> bool:
    spec = API_BY_KEY.get(api_key)
    if spec is None:
        raise UnknownApiKey(api_key, api_version, -1)
    return spec.is_flexible(api_version)


def request_header_version(api_key: int, api_version: int) -> int:
    return 2 if _is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    return 1 if api_key != API_VERSIONS_KEY and _is_flexible(api_key, api_version) else 0


def decode_request_header(buf) -> tuple[RequestHeader, int]:
    """Decode the header at the start of a request frame body; returns it and the offset of the message body."""
    buf = memoryview(buf)
    try:
        api_key, api_version, correlation_id = _REQUEST_FIXED.unpack_from(buf, 0)
        spec = API_BY_KEY.get(api_key)
        if spec is None:
            raise UnknownApiKey(api_key, api_version, correlation_id)
        client_id, pos = _read_client_id(buf, _REQUEST_FIXED.size)
        header = RequestHeader(api_key, api_version, correlation_id, client_id)
        if spec.is_flexible(api_version):
            tagged, pos = p.read_tagged_fields(buf, pos)
            header.tagged_fields = tuple((tag, bytes(data)) for tag, data in tagged)
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise MalformedMessage(f"request header: {e}") from None
    return header, pos


def request_client_id(buf) -> str | None:
    """The client id in a request frame body's header, without decoding the rest; None if it has none or it cannot
    be read (decode_request_header then says why)."""
    try:
        return _read_client_id(memoryview(buf), _REQUEST_FIXED.size)[0]
    except (struct.error, IndexError, UnicodeDecodeError, ValueError):
        return None


def decode_response_header(buf, api_key: int, api_version: int) -> tuple[int, int]:
    """Decode a response header (client side); returns the correlation id and the offset of the message body."""
    buf = memoryview(buf)
    try:
        correlation_id = p.INT32.unpack_from(buf, 0)[0]
        pos = 4
        if response_header_version(api_key, api_version) == 1:
            pos = p.read_tagged_fields(buf, pos)[1]
    except (struct.error, IndexError) as e:
        raise MalformedMessage(f"response header: {e}") from None
    return correlation_id, pos


def encode_request(header: RequestHeader, body) -> bytes:
    """A whole request frame (size prefix included); ``body`` is bytes-like or a list of bytes-like chunks."""
    out = [b"", _REQUEST_FIXED.pack(header.api_key, header.api_version, header.correlation_id)]
    _write_client_id(out, header.client_id)
    if request_header_version(header.api_key, header.api_version) == 2:
        p.write_tagged_fields(out, sorted(header.tagged_fields))
    _append_body(out, body)
    out[0] = p.INT32.pack(sum(map(p.size_bytes, out)))
    return b"".join(out)


def encode_response(api_key: int, api_version: int, correlation_id: int, body) -> bytes:
    """A whole response frame (size prefix included); ``body`` is bytes-like or a list of bytes-like chunks."""
    return b"".join(encode_response_chunks(api_key, api_version, correlation_id, body))


def encode_response_chunks(api_key: int, api_version: int, correlation_id: int, body) -> list:
    """``encode_response`` as a list of chunks, the body's chunks uncopied: a chunk may be any
    object with a length that its writer knows how to send (the gateway's file regions)."""
    tagged = _EMPTY_TAGGED_FIELDS if response_header_version(api_key, api_version) == 1 else b""
    size_bytes = 4 + len(tagged) + p.size_bytes(body)
    out = [_RESPONSE_FIXED.pack(size_bytes, correlation_id), tagged]
    _append_body(out, body)
    return out


def _append_body(out: list, body) -> None:
    if isinstance(body, (list, tuple)):
        out.extend(body)
    else:
        out.append(body)
