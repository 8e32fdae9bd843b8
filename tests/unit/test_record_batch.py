import struct

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.record_batch import (
    COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_NONE, COMPRESSION_SNAPPY, COMPRESSION_ZSTD,
    INT32_MAX, TIMESTAMP_TYPE_LOG_APPEND_TIME, CorruptRecord, Record, UnsupportedMagic, build_batch,
    crc_is_valid, decode_records, decompress, iter_batches, parse_header, patch_base_offset,
    patch_leader_epoch, set_log_append_time, snappy_xerial_compress, validate_crc,
)

CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]


def sample_records(n=20, t0=1_700_000_000_000):
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else f"key-{i}".encode()
        value = None if i % 11 == 5 else (b"value-%d-" % i) * (i % 5 + 1)
        headers = [("h", b"x"), ("trace", None)] if i % 3 == 0 else []
        out.append((key, value, headers, t0 + (i * 37) % 100 - 50))
    return out


def assert_same(records, decoded, base_offset):
    assert len(decoded) == len(records)
    for i, ((key, value, headers, ts), rec) in enumerate(zip(records, decoded)):
        assert rec == Record(base_offset + i, ts, key, value, list(headers))


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_each_compression(codec):
    records = sample_records()
    blob = build_batch(records, base_offset=100, compression=codec, producer_id=7, producer_epoch=2,
                       base_sequence=40, partition_leader_epoch=5)
    (header,) = list(iter_batches(blob))
    validate_crc(header)
    assert header.base_offset == 100 and header.last_offset == 119 and header.record_count == 20
    assert header.size_bytes == len(blob) and header.offset_in_buf == 0
    assert header.compression == codec and header.magic == 2
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 40)
    assert header.last_sequence == 59 and header.partition_leader_epoch == 5
    assert not header.is_transactional and not header.is_control and header.timestamp_type == 0
    assert header.max_timestamp == max(r[3] for r in records)
    assert_same(records, decode_records(header), 100)


def test_snappy_xerial_round_trip_multiple_blocks():
    records = [(b"k%d" % i, bytes(range(256)) * 40, [], 1000 + i) for i in range(10)]  # > 32 KiB
    blob = build_batch(records, compression=COMPRESSION_SNAPPY, snappy_xerial=True)
    (header,) = list(iter_batches(blob))
    payload = memoryview(blob)[61:]
    assert bytes(payload[:8]) == b"\x82SNAPPY\x00"
    assert struct.unpack_from(">i", payload, 16)[0] > 0  # first block length
    assert_same(records, decode_records(header), 0)


def test_snappy_xerial_hand_framed():
    data = b"hello kafka " * 5000
    framed = snappy_xerial_compress(data, block_bytes=1000)
    assert framed.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    assert bytes(decompress(COMPRESSION_SNAPPY, framed)) == data
    with pytest.raises(CorruptRecord):
        decompress(COMPRESSION_SNAPPY, framed[:-3])


def test_flags_and_log_append_time_type():
    blob = build_batch([(b"k", b"v", [], 5)], is_transactional=True, producer_id=1, producer_epoch=0,
                       base_sequence=0, timestamp_type=TIMESTAMP_TYPE_LOG_APPEND_TIME)
    h = parse_header(memoryview(blob))
    assert h.is_transactional and h.timestamp_type == 1 and not h.is_control
    control = parse_header(memoryview(build_batch([(b"\x00\x00\x00\x00", b"", [], 5)], is_control=True)))
    assert control.is_control


def test_crc_flip_detected():
    blob = bytearray(build_batch(sample_records(), compression=COMPRESSION_LZ4))
    for pos in (21, 30, 61, len(blob) - 1):
        mutated = bytearray(blob)
        mutated[pos] ^= 0x01
        header = parse_header(memoryview(mutated))
        assert not crc_is_valid(header)
        with pytest.raises(CorruptRecord):
            validate_crc(header)
    mutated = bytearray(blob)
    mutated[17] ^= 0x80  # the stored CRC itself
    with pytest.raises(CorruptRecord):
        validate_crc(parse_header(memoryview(mutated)))


def test_patching_offsets_keeps_crc_valid():
    first = build_batch(sample_records(3))
    second = build_batch(sample_records(4), compression=COMPRESSION_ZSTD)
    buf = bytearray(first + second)
    patch_base_offset(buf, 0, 1_000_000)
    patch_leader_epoch(buf, 0, 9)
    patch_base_offset(memoryview(buf), len(first), 1_000_003)
    patch_leader_epoch(memoryview(buf), len(first), 9)
    h1, h2 = list(iter_batches(buf))
    for h in (h1, h2):
        validate_crc(h)
        assert h.partition_leader_epoch == 9
    assert (h1.base_offset, h1.last_offset, h2.base_offset, h2.last_offset) == (
        1_000_000, 1_000_002, 1_000_003, 1_000_006)
    assert decode_records(h2)[0].offset == 1_000_003


def test_set_log_append_time_recomputes_crc():
    records = sample_records(5)
    buf = bytearray(build_batch(records, compression=COMPRESSION_GZIP))
    set_log_append_time(buf, 0, 42_000)
    h = parse_header(memoryview(buf))
    validate_crc(h)
    assert h.timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME and h.max_timestamp == 42_000
    assert all(r.timestamp_ms == 42_000 for r in decode_records(h))


def test_truncated_input_raises_corrupt_record_at_every_length():
    blob = build_batch(sample_records(5)) + build_batch(sample_records(2))
    for cut in range(1, len(blob)):
        if cut == len(build_batch(sample_records(5))):
            continue  # a clean batch boundary
        with pytest.raises(CorruptRecord):
            list(iter_batches(blob[:cut]))
    assert list(iter_batches(b"")) == []


def test_bad_length_and_magic():
    blob = bytearray(build_batch(sample_records(1)))
    short = bytearray(blob)
    struct.pack_into(">i", short, 8, 48)
    with pytest.raises(CorruptRecord, match="batch length"):
        list(iter_batches(short))
    for magic in (0, 1, 3):
        legacy = bytearray(blob)
        legacy[16] = magic
        with pytest.raises(UnsupportedMagic) as info:
            list(iter_batches(legacy))
        assert info.value.magic == magic and isinstance(info.value, CorruptRecord)


@pytest.mark.parametrize("codec", [COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD])
def test_decompression_limit(codec):
    records = [(None, b"\x00" * 1_000_000, [], 0)]
    blob = build_batch(records, compression=codec)
    assert len(blob) < 100_000
    (h,) = list(iter_batches(blob))
    with pytest.raises(CorruptRecord, match="exceeds"):
        decode_records(h, max_decompressed_bytes=500_000)
    assert decode_records(h, max_decompressed_bytes=2_000_000)[0].value == records[0][1]


def test_unknown_codec_and_garbage_payload():
    blob = bytearray(build_batch(sample_records(3), compression=COMPRESSION_GZIP))
    blob[22] = (blob[22] & 0xF8) | 6
    with pytest.raises(CorruptRecord, match="unknown compression"):
        decode_records(parse_header(memoryview(blob)))
    for codec in (COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD):
        with pytest.raises(CorruptRecord):
            decompress(codec, b"\x01\x02\x03 not compressed at all")


def test_sequence_wraps_at_int32_max():
    blob = build_batch(sample_records(4), producer_id=1, producer_epoch=0, base_sequence=INT32_MAX - 1)
    h = parse_header(memoryview(blob))
    assert h.last_sequence == 1  # MAX-1, MAX, 0, 1


def test_iter_batches_accepts_readonly_and_numpy_like_views():
    blob = build_batch(sample_records(3))
    assert [h.record_count for h in iter_batches(memoryview(blob))] == [3]
    assert [h.record_count for h in iter_batches(bytearray(blob))] == [3]


# --- interoperability with an independent implementation (kafka-python) -------------------------

kp_records = pytest.importorskip("kafka.record.default_records")


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_builds_we_decode(codec):
    from kafka import codec as kp_codec
    if codec == COMPRESSION_SNAPPY and not kp_codec.has_snappy():
        pytest.skip("python-snappy missing")
    if codec == COMPRESSION_ZSTD and not kp_codec.has_zstd():
        pytest.skip("zstandard missing")
    builder = kp_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 20)
    records = sample_records(50)
    for i, (key, value, headers, ts) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=list(headers))
    blob = bytes(builder.build())
    (h,) = list(iter_batches(blob))
    validate_crc(h)
    assert_same(records, decode_records(h), 0)


@pytest.mark.parametrize("codec", CODECS)
def test_we_build_kafka_python_decodes(codec):
    from kafka import codec as kp_codec
    if codec == COMPRESSION_SNAPPY and not kp_codec.has_snappy():
        pytest.skip("python-snappy missing")
    if codec == COMPRESSION_ZSTD and not kp_codec.has_zstd():
        pytest.skip("zstandard missing")
    records = sample_records(50)
    for xerial in ((False, True) if codec == COMPRESSION_SNAPPY else (False,)):
        blob = build_batch(records, base_offset=10, compression=codec, snappy_xerial=xerial)
        batch = kp_records.DefaultRecordBatch(blob)
        assert batch.validate_crc()
        got = [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in batch]
        want = [(10 + i, ts, key, value, list(headers)) for i, (key, value, headers, ts) in enumerate(records)]
        assert got == want


# --- fuzzing --------------------------------------------------------------------------------------

_SEEDS = [build_batch(sample_records(6), compression=c, producer_id=3, producer_epoch=1, base_sequence=0)
          for c in CODECS]


def _exercise(blob: bytes) -> None:
    for header in iter_batches(blob):
        crc_is_valid(header)
        decode_records(header, max_decompressed_bytes=1 << 20)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(_SEEDS), data=st.data())
def test_mutations_only_raise_corrupt_record(seed, data):
    blob = bytearray(seed)
    for _ in range(data.draw(st.integers(1, 6))):
        kind = data.draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        if not blob:
            break
        pos = data.draw(st.integers(0, len(blob) - 1))
        if kind == "flip":
            blob[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "set":
            blob[pos] = data.draw(st.integers(0, 255))
        elif kind == "truncate":
            del blob[pos:]
        elif kind == "insert":
            blob[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        else:
            del blob[pos:pos + data.draw(st.integers(1, 8))]
    try:
        _exercise(bytes(blob))
    except CorruptRecord:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_corrupt_record(raw):
    try:
        _exercise(raw)
    except CorruptRecord:
        pass


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.none() | st.binary(max_size=50), st.none() | st.binary(max_size=200),
                          st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)),
                                   max_size=3),
                          st.integers(0, 2**40)), min_size=1, max_size=20),
       st.sampled_from(CODECS))
def test_build_decode_property(records, codec):
    blob = build_batch(records, base_offset=5, compression=codec)
    (h,) = list(iter_batches(blob))
    validate_crc(h)
    assert_same(records, decode_records(h), 5)


def test_cramjam_available():
    assert cramjam.snappy.decompress_raw_len(cramjam.snappy.compress_raw(b"abc")) == 3
