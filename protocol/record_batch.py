"""Kafka RecordBatch v2 (magic 2): cheap header views, CRC, in-place patching, codecs, encoder.

Batch layout (big-endian)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32
    | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64
    | producerId int64 | producerEpoch int16 | baseSequence int32 | recordsCount int32 | records...

The CRC (CRC-32C) covers attributes..end, so baseOffset and partitionLeaderEpoch can be patched
in place without touching it; maxTimestamp/attributes (LogAppendTime) cannot.

Header parsing is one ``struct.unpack_from`` on the 61-byte header; record bodies are only touched
by :func:`decode_records` (tests, tools, share groups) and :func:`build_batch`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator, Sequence

import cramjam
from crc32c import crc32c

# --- layout -------------------------------------------------------------------------------------

LOG_OVERHEAD_BYTES = 12          # baseOffset + batchLength: bytes not counted by batchLength
HEADER_UP_TO_MAGIC_BYTES = 17    # enough to read the magic byte of any message format
BATCH_OVERHEAD_BYTES = 61        # full v2 header, i.e. the size of a batch with no records
MIN_BATCH_LENGTH = BATCH_OVERHEAD_BYTES - LOG_OVERHEAD_BYTES  # 49

LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21              # CRC coverage starts here
LAST_OFFSET_DELTA_POS = 23
MAX_TIMESTAMP_POS = 35
RECORDS_POS = 61

MAGIC_V2 = 2

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qiib")     # baseOffset, batchLength, partitionLeaderEpoch, magic
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
assert _HEADER.size == BATCH_OVERHEAD_BYTES

# attributes
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

TIMESTAMP_TYPE_CREATE_TIME = 0
TIMESTAMP_TYPE_LOG_APPEND_TIME = 1

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
NO_PARTITION_LEADER_EPOCH = -1
INT32_MAX = 2**31 - 1

# --- limits -------------------------------------------------------------------------------------

DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024   # per batch, guards against compression bombs
_FIRST_DECOMPRESS_GUESS_RATIO = 8                    # first output buffer = ratio * compressed size
_MIN_DECOMPRESS_BUFFER_BYTES = 64 * 1024
_DECOMPRESS_GROWTH_FACTOR = 4
XERIAL_BLOCK_BYTES = 32 * 1024                       # snappy-java's default block size


class CorruptRecord(ValueError):
    """The bytes are not a well-formed v2 record batch (truncated, bad length, CRC, body)."""


class UnsupportedMagic(CorruptRecord):
    """A batch with magic 0/1 (or garbage magic). Kafka 4 only accepts magic 2 from producers."""

    def __init__(self, magic: int, position: int):
        super().__init__(f"unsupported record batch magic {magic} at position {position}")
        self.magic = magic


class BatchHeader:
    """A parsed 61-byte batch header plus where it sits in ``buf`` (no record bodies touched)."""

    __slots__ = (
        "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
        "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
        "base_sequence", "records_count", "offset_in_buf", "buf",
    )

    def __init__(self, fields: tuple, offset_in_buf: int, buf):
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic, self.crc,
         self.attributes, self.last_offset_delta, self.base_timestamp, self.max_timestamp,
         self.producer_id, self.producer_epoch, self.base_sequence, self.records_count) = fields
        self.offset_in_buf = offset_in_buf
        self.buf = buf

    @property
    def size_bytes(self) -> int:
        return LOG_OVERHEAD_BYTES + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def record_count(self) -> int:
        return self.records_count

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap from INT32_MAX to 0 like Kafka's."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (INT32_MAX + 1)

    def __repr__(self) -> str:
        return (f"BatchHeader(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"size_bytes={self.size_bytes}, records={self.records_count}, "
                f"compression={self.compression}, producer_id={self.producer_id}, "
                f"epoch={self.producer_epoch}, base_sequence={self.base_sequence})")


def parse_header(buf, pos: int = 0, *, whole: bool = True) -> BatchHeader:
    """Parse the batch header at ``pos``. With ``whole`` the full batch must lie inside ``buf``."""
    available = len(buf) - pos
    if available < HEADER_UP_TO_MAGIC_BYTES:
        raise CorruptRecord(f"truncated batch header at position {pos} ({available} bytes left)")
    magic = buf[pos + MAGIC_POS]
    if magic != MAGIC_V2:
        raise UnsupportedMagic(magic if magic < 128 else magic - 256, pos)
    if available < BATCH_OVERHEAD_BYTES:
        raise CorruptRecord(f"truncated batch header at position {pos} ({available} bytes left)")
    fields = _HEADER.unpack_from(buf, pos)
    batch_length = fields[1]
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecord(f"batch length {batch_length} < {MIN_BATCH_LENGTH} at position {pos}")
    if whole and LOG_OVERHEAD_BYTES + batch_length > available:
        raise CorruptRecord(
            f"truncated batch at position {pos}: needs {LOG_OVERHEAD_BYTES + batch_length} bytes, "
            f"{available} available")
    return BatchHeader(fields, pos, buf)


def iter_batches(buf) -> Iterator[BatchHeader]:
    """Yield a header view for every batch in a records blob; raise CorruptRecord on bad framing."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    pos, end = 0, len(mv)
    while pos < end:
        header = parse_header(mv, pos)
        yield header
        pos += header.size_bytes


def compute_crc(buf, pos: int, size_bytes: int) -> int:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return crc32c(mv[pos + ATTRIBUTES_POS: pos + size_bytes])


def crc_is_valid(header: BatchHeader) -> bool:
    return compute_crc(header.buf, header.offset_in_buf, header.size_bytes) == header.crc


def validate_crc(header: BatchHeader) -> None:
    actual = compute_crc(header.buf, header.offset_in_buf, header.size_bytes)
    if actual != header.crc:
        raise CorruptRecord(
            f"CRC mismatch for batch at position {header.offset_in_buf}: "
            f"stored {header.crc:#010x}, computed {actual:#010x}")


# --- in-place patching (buf must be writable: bytearray or writable memoryview) ----------------

def patch_base_offset(buf, pos: int, base_offset: int) -> None:
    _INT64.pack_into(buf, pos, base_offset)


def patch_leader_epoch(buf, pos: int, leader_epoch: int) -> None:
    _INT32.pack_into(buf, pos + LEADER_EPOCH_POS, leader_epoch)


def rewrite_crc(buf, pos: int) -> int:
    size_bytes = LOG_OVERHEAD_BYTES + _INT32.unpack_from(buf, pos + 8)[0]
    crc = compute_crc(buf, pos, size_bytes)
    _UINT32.pack_into(buf, pos + CRC_POS, crc)
    return crc


def set_log_append_time(buf, pos: int, now_ms: int) -> None:
    """Stamp LogAppendTime: timestampType bit + maxTimestamp = now_ms, then recompute the CRC.

    Readers then report every record's timestamp as the batch maxTimestamp (Kafka semantics)."""
    attributes = _INT16.unpack_from(buf, pos + ATTRIBUTES_POS)[0]
    _INT16.pack_into(buf, pos + ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_POS, now_ms)
    rewrite_crc(buf, pos)


# --- compression --------------------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_BYTES = 16  # magic + int32 version + int32 min-compatible version
_OVERFLOW_MESSAGE = "failed to write whole buffer"
_STREAM_CODECS = {
    COMPRESSION_GZIP: cramjam.gzip,
    COMPRESSION_LZ4: cramjam.lz4,
    COMPRESSION_ZSTD: cramjam.zstd,
}


def _decompress_bounded(codec_module, data, max_decompressed_bytes: int):
    size = min(max_decompressed_bytes + 1,
               max(_MIN_DECOMPRESS_BUFFER_BYTES, _FIRST_DECOMPRESS_GUESS_RATIO * len(data)))
    while True:
        out = bytearray(size)
        try:
            written = codec_module.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if _OVERFLOW_MESSAGE in str(exc) and size <= max_decompressed_bytes:
                size = min(max_decompressed_bytes + 1, size * _DECOMPRESS_GROWTH_FACTOR)
                continue
            if _OVERFLOW_MESSAGE in str(exc):
                raise CorruptRecord(
                    f"decompressed batch exceeds {max_decompressed_bytes} bytes") from None
            raise CorruptRecord(f"cannot decompress batch: {exc}") from None
        if written > max_decompressed_bytes:
            raise CorruptRecord(f"decompressed batch exceeds {max_decompressed_bytes} bytes")
        return memoryview(out)[:written]


def _snappy_raw_block(block, budget_bytes: int) -> bytes:
    try:
        length = cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as exc:
        raise CorruptRecord(f"cannot decompress snappy block: {exc}") from None
    if length > budget_bytes:
        raise CorruptRecord(f"decompressed batch exceeds the decompression limit ({length} bytes)")
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as exc:
        raise CorruptRecord(f"cannot decompress snappy block: {exc}") from None


def _snappy_decompress(data, max_decompressed_bytes: int) -> bytes:
    """Raw snappy (librdkafka) or xerial framing (snappy-java / the Java producer)."""
    if bytes(data[:len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        return _snappy_raw_block(data, max_decompressed_bytes)
    pos, end, parts, total = _XERIAL_HEADER_BYTES, len(data), [], 0
    if end < _XERIAL_HEADER_BYTES:
        raise CorruptRecord("truncated xerial snappy header")
    while pos < end:
        if end - pos < 4:
            raise CorruptRecord("truncated xerial snappy block length")
        block_len = _INT32.unpack_from(data, pos)[0]
        pos += 4
        if block_len < 0 or block_len > end - pos:
            raise CorruptRecord(f"bad xerial snappy block length {block_len}")
        part = _snappy_raw_block(data[pos:pos + block_len], max_decompressed_bytes - total)
        total += len(part)
        parts.append(part)
        pos += block_len
    return b"".join(parts)


def decompress(compression: int, data, *, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES):
    """Decompress a batch's records section; CorruptRecord on bad data or beyond the limit."""
    if compression == COMPRESSION_NONE:
        return data
    if compression == COMPRESSION_SNAPPY:
        return _snappy_decompress(data, max_decompressed_bytes)
    module = _STREAM_CODECS.get(compression)
    if module is None:
        raise CorruptRecord(f"unknown compression type {compression}")
    return _decompress_bounded(module, data, max_decompressed_bytes)


def snappy_xerial_compress(data: bytes, *, block_bytes: int = XERIAL_BLOCK_BYTES) -> bytes:
    """Frame like snappy-java's SnappyOutputStream (what the Java producer writes)."""
    out = [_XERIAL_MAGIC, _INT32.pack(1), _INT32.pack(1)]
    for start in range(0, len(data), block_bytes):
        block = bytes(cramjam.snappy.compress_raw(data[start:start + block_bytes]))
        out.append(_INT32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def compress(compression: int, data: bytes, level: int | None = None) -> bytes:
    """`data` compressed with `compression`, at `level` (gzip, lz4, zstd; None: Kafka's defaults, 6, 9 and 3)."""
    if compression == COMPRESSION_NONE:
        return bytes(data)
    if compression == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data, level=6 if level is None or level < 0 else level))
    if compression == COMPRESSION_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))   # raw, like librdkafka
    if compression == COMPRESSION_LZ4:
        # Kafka's Java reader decodes every LZ4 frame block on its own: blocks must be independent.
        compressor = cramjam.lz4.Compressor(level=9 if level is None else level, content_checksum=False,
                                            block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if compression == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3 if level is None else level))
    raise ValueError(f"unknown compression type {compression}")


# --- records ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list


_VARINT_MAX_SHIFT = 28     # int32 varints take at most 5 bytes
_VARLONG_MAX_SHIFT = 63    # int64 varlongs take at most 10 bytes


def _read_varint(data: bytes, pos: int, end: int, max_shift: int = _VARINT_MAX_SHIFT):
    result = shift = 0
    while True:
        if pos >= end:
            raise CorruptRecord("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > max_shift:
            raise CorruptRecord("varint too long")


def _read_bytes(data: bytes, pos: int, end: int, what: str):
    length, pos = _read_varint(data, pos, end)
    if length == -1:
        return None, pos
    if length < 0 or pos + length > end:
        raise CorruptRecord(f"bad {what} length {length}")
    return data[pos:pos + length], pos + length


def _parse_records(header: BatchHeader, data: bytes) -> list[Record]:
    count = header.records_count
    if count < 0:
        raise CorruptRecord(f"negative record count {count}")
    log_append_time = header.timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME
    records: list[Record] = []
    pos, end = 0, len(data)
    for _ in range(count):
        length, pos = _read_varint(data, pos, end)
        record_end = pos + length
        if length < 0 or record_end > end:
            raise CorruptRecord(f"bad record length {length}")
        pos += 1  # record attributes (unused)
        ts_delta, pos = _read_varint(data, pos, record_end, _VARLONG_MAX_SHIFT)
        offset_delta, pos = _read_varint(data, pos, record_end)
        key, pos = _read_bytes(data, pos, record_end, "key")
        value, pos = _read_bytes(data, pos, record_end, "value")
        header_count, pos = _read_varint(data, pos, record_end)
        if header_count < 0:
            raise CorruptRecord(f"negative header count {header_count}")
        headers = []
        for _ in range(header_count):
            raw_key, pos = _read_bytes(data, pos, record_end, "header key")
            if raw_key is None:
                raise CorruptRecord("null header key")
            try:
                header_key = raw_key.decode("utf-8")
            except UnicodeDecodeError:
                header_key = raw_key
            header_value, pos = _read_bytes(data, pos, record_end, "header value")
            headers.append((header_key, header_value))
        if pos != record_end:
            raise CorruptRecord("record length does not match its contents")
        timestamp = header.max_timestamp if log_append_time else header.base_timestamp + ts_delta
        records.append(Record(header.base_offset + offset_delta, timestamp, key, value, headers))
    if pos != end:
        raise CorruptRecord(f"{end - pos} trailing bytes after {count} records")
    return records


def decode_records(header: BatchHeader, buf=None, *,
                   max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> list[Record]:
    """Decode (and decompress) all records of one batch. CorruptRecord on any malformation."""
    mv = memoryview(header.buf if buf is None else buf)
    start = header.offset_in_buf + RECORDS_POS
    end = header.offset_in_buf + header.size_bytes
    if end > len(mv):
        raise CorruptRecord("truncated batch")
    payload = decompress(header.compression, mv[start:end],
                         max_decompressed_bytes=max_decompressed_bytes)
    return _parse_records(header, bytes(payload))


def record_keys(header: BatchHeader, buf=None, *,
                max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> list[tuple[int, bytes | None]]:
    """(offset, key) of every record of one batch, decompressing it if it must, and reading no
    further into a record than its key (a share-partition leader with key ordering needs keys only).
    CorruptRecord on a malformed batch or record framing."""
    mv = memoryview(header.buf if buf is None else buf)
    start = header.offset_in_buf + RECORDS_POS
    end = header.offset_in_buf + header.size_bytes
    if end > len(mv):
        raise CorruptRecord("truncated batch")
    count = header.records_count
    if count < 0:
        raise CorruptRecord(f"negative record count {count}")
    data = bytes(decompress(header.compression, mv[start:end], max_decompressed_bytes=max_decompressed_bytes))
    base = header.base_offset
    out: list[tuple[int, bytes | None]] = []
    pos, end = 0, len(data)
    for _ in range(count):
        length, pos = _read_varint(data, pos, end)
        record_end = pos + length
        if length < 0 or record_end > end:
            raise CorruptRecord(f"bad record length {length}")
        _, pos = _read_varint(data, pos + 1, record_end, _VARLONG_MAX_SHIFT)   # attributes, timestamp delta
        offset_delta, pos = _read_varint(data, pos, record_end)
        key, _ = _read_bytes(data, pos, record_end, "key")
        out.append((base + offset_delta, key))
        pos = record_end
    if pos != end:
        raise CorruptRecord(f"{end - pos} trailing bytes after {count} records")
    return out


def _write_varint(out: bytearray, value: int) -> None:
    value = (value << 1) ^ (value >> 63)  # zigzag (64-bit covers int32 too)
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _write_bytes(out: bytearray, data) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


def _encode_record(offset_delta: int, timestamp_delta: int, key, value, headers) -> bytearray:
    body = bytearray(b"\x00")  # record attributes
    _write_varint(body, timestamp_delta)
    _write_varint(body, offset_delta)
    _write_bytes(body, key)
    _write_bytes(body, value)
    _write_varint(body, len(headers))
    for header_key, header_value in headers:
        _write_bytes(body, header_key.encode("utf-8") if isinstance(header_key, str) else header_key)
        _write_bytes(body, header_value)
    out = bytearray()
    _write_varint(out, len(body))
    out += body
    return out


def build_batch(records: Sequence[tuple], base_offset: int = 0, compression: int = COMPRESSION_NONE,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, *,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                is_transactional: bool = False, is_control: bool = False,
                timestamp_type: int = TIMESTAMP_TYPE_CREATE_TIME,
                snappy_xerial: bool = False, level: int | None = None) -> bytes:
    """Encode one v2 batch from ``(key, value, headers, timestamp_ms)`` tuples (`level`: see `compress`)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    timestamps = [r[3] for r in records]
    base_timestamp = timestamps[0]
    max_timestamp = max(timestamps)
    body = bytearray()
    for index, (key, value, headers, timestamp_ms) in enumerate(records):
        body += _encode_record(index, timestamp_ms - base_timestamp, key, value, headers or ())
    if compression == COMPRESSION_SNAPPY and snappy_xerial:
        payload = snappy_xerial_compress(bytes(body))
    else:
        payload = compress(compression, bytes(body), level)
    attributes = compression & COMPRESSION_MASK
    if timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    batch = bytearray(BATCH_OVERHEAD_BYTES + len(payload))
    _HEADER.pack_into(batch, 0, base_offset, len(batch) - LOG_OVERHEAD_BYTES, partition_leader_epoch,
                      MAGIC_V2, 0, attributes, len(records) - 1, base_timestamp, max_timestamp,
                      producer_id, producer_epoch, base_sequence, len(records))
    batch[RECORDS_POS:] = payload
    rewrite_crc(batch, 0)
    return bytes(batch)
