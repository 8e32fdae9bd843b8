"""Kafka wire primitives.

Readers take ``(buf, pos)`` -- ``buf`` a byte ``memoryview`` (or ``bytes``), ``pos`` an offset -- and return
``(value, new_pos)``. Writers append bytes-like parts to a list ``out``; the caller joins once. Readers check every
length against the bytes left before slicing or allocating and raise ``MalformedMessage``; a short fixed-width read
surfaces as ``struct.error``/``IndexError``, which the message codec converts at its entry points.
"""

import struct
from uuid import UUID

from protocol.errors import MalformedMessage

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")

FIXED_FORMATS = {"int8": "b", "int16": "h", "int32": "i", "int64": "q",
                 "uint16": "H", "uint32": "I", "float64": "d", "bool": "?"}

ZERO_UUID = UUID(int=0)
UUID_SIZE_BYTES = 16

_UVARINT_1BYTE = tuple(bytes((i,)) for i in range(0x80))


# ---- varints -----------------------------------------------------------------------------------------------------

def _read_varbits(buf, pos: int, max_bytes: int) -> tuple[int, int]:
    value = shift = 0
    limit = 7 * max_bytes
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift >= limit:
            raise MalformedMessage(f"varint longer than {max_bytes} bytes")


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """Unsigned varint of at most 5 bytes (Kafka's 32-bit unsigned varint)."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    return _read_varbits(buf, pos, 5)


def read_uvarlong(buf, pos: int) -> tuple[int, int]:
    return _read_varbits(buf, pos, 10)


def read_varint(buf, pos: int) -> tuple[int, int]:
    """Zigzag-encoded signed 32-bit varint."""
    v, pos = _read_varbits(buf, pos, 5)
    return (v >> 1) ^ -(v & 1), pos


def read_varlong(buf, pos: int) -> tuple[int, int]:
    """Zigzag-encoded signed 64-bit varint."""
    v, pos = _read_varbits(buf, pos, 10)
    return (v >> 1) ^ -(v & 1), pos


def write_uvarint(n: int) -> bytes:
    if 0 <= n < 0x80:
        return _UVARINT_1BYTE[n]
    if n < 0:
        raise ValueError(f"unsigned varint of negative value {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def write_varint(n: int) -> bytes:
    return write_uvarint((n << 1) ^ (n >> 31))


def write_varlong(n: int) -> bytes:
    return write_uvarint((n << 1) ^ (n >> 63))


# ---- length prefixes: a negative result is "null" (only -1 is produced) -----------------------------------------

def _read_len16(buf, pos: int) -> tuple[int, int]:
    return INT16.unpack_from(buf, pos)[0], pos + 2


def _read_len32(buf, pos: int) -> tuple[int, int]:
    return INT32.unpack_from(buf, pos)[0], pos + 4


def _read_compact_len(buf, pos: int) -> tuple[int, int]:
    n, pos = read_uvarint(buf, pos)
    return n - 1, pos


def _compact_len(n: int) -> bytes:
    return write_uvarint(n + 1)


def length_codec(compact: bool, wide: bool):
    """(read, pack) of a length prefix: uvarint N+1 when compact, else int32 (wide) or int16; -1 / 0 means null."""
    if compact:
        return _read_compact_len, _compact_len
    return (_read_len32, INT32.pack) if wide else (_read_len16, INT16.pack)


def null_length(n: int, nullable: bool, what: str):
    """Return None for a legal null length, else raise."""
    if n == -1 and nullable:
        return None
    raise MalformedMessage(f"{what}: length {n}" if n != -1 else f"{what}: null but not nullable")


def past_end(what: str, n: int, buf, pos: int) -> MalformedMessage:
    return MalformedMessage(f"{what}: length {n} exceeds the {len(buf) - pos} bytes left")


# ---- strings and bytes -----------------------------------------------------------------------------------------

def string_reader(compact: bool, nullable: bool):
    read_len = length_codec(compact, False)[0]

    def read_string(buf, pos):
        n, pos = read_len(buf, pos)
        if n < 0:
            return null_length(n, nullable, "string"), pos
        end = pos + n
        if end > len(buf):
            raise past_end("string", n, buf, pos)
        return str(buf[pos:end], "utf-8"), end
    return read_string


def string_writer(compact: bool, nullable: bool):
    pack_len = length_codec(compact, False)[1]
    null = pack_len(-1)

    def write_string(out, s):
        if s is None:
            if not nullable:
                raise ValueError("None for a non-nullable string")
            out.append(null)
            return
        data = s.encode()
        out.append(pack_len(len(data)))
        out.append(data)
    return write_string


def bytes_reader(compact: bool, nullable: bool):
    """Reads bytes as a zero-copy memoryview slice of ``buf``."""
    read_len = length_codec(compact, True)[0]

    def read_bytes(buf, pos):
        n, pos = read_len(buf, pos)
        if n < 0:
            return null_length(n, nullable, "bytes"), pos
        end = pos + n
        if end > len(buf):
            raise past_end("bytes", n, buf, pos)
        return buf[pos:end], end
    return read_bytes


def size_bytes(value) -> int:
    """Byte length of a bytes-like object or of a list/tuple of bytes-like chunks."""
    if isinstance(value, (list, tuple)):
        return sum(c.nbytes if type(c) is memoryview else len(c) for c in value)
    return value.nbytes if type(value) is memoryview else len(value)


def bytes_writer(compact: bool, nullable: bool):
    """Writes bytes, bytearray, memoryview, or a list/tuple of such chunks (concatenated), without copying them."""
    pack_len = length_codec(compact, True)[1]
    null = pack_len(-1)

    def write_bytes(out, value):
        if value is None:
            if not nullable:
                raise ValueError("None for non-nullable bytes")
            out.append(null)
        elif isinstance(value, (list, tuple)):
            out.append(pack_len(size_bytes(value)))
            out.extend(value)
        else:
            out.append(pack_len(size_bytes(value)))
            out.append(value)
    return write_bytes


# ---- uuid ------------------------------------------------------------------------------------------------------

def read_uuid(buf, pos: int) -> tuple[UUID, int]:
    end = pos + UUID_SIZE_BYTES
    if end > len(buf):
        raise MalformedMessage("uuid: truncated")
    n = int.from_bytes(buf[pos:end], "big")
    return (UUID(int=n) if n else ZERO_UUID), end


def write_uuid(out, value: UUID) -> None:
    out.append(value.bytes)


# ---- tagged fields -----------------------------------------------------------------------------------------------

def read_tagged_fields(buf, pos: int) -> tuple[list, int]:
    """A tagged-field section: uvarint count, then (uvarint tag, uvarint size, bytes) each; data as memoryview slices."""
    count, pos = read_uvarint(buf, pos)
    if count > len(buf) - pos:
        raise past_end("tagged fields", count, buf, pos)
    fields = []
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise past_end(f"tagged field {tag}", size, buf, pos)
        fields.append((tag, buf[pos:end]))
        pos = end
    return fields, pos


def write_tagged_fields(out, fields) -> None:
    """``fields``: (tag, bytes-like) pairs in ascending tag order."""
    out.append(write_uvarint(len(fields)))
    for tag, data in fields:
        out.append(write_uvarint(tag))
        out.append(write_uvarint(len(data)))
        out.append(data)
