"""A log directory that can't be written (a full disk) is said once per directory and cause, with
what to do (actors/storage_errors.py); a full disk leaves a segment's index files whole
(actors/partition/segment.py: a partial write is taken back; the log's batches are kept)."""
import errno
import logging
import os

from actors import storage_errors
from actors.partition.segment import Segment


def test_said_once_per_directory_and_cause_then_again_after_a_while(caplog):
    full = OSError(errno.ENOSPC, "No space left on device")
    with caplog.at_level(logging.ERROR, logger="kray.storage"):
        said = [storage_errors.write_failed("/disk-a/broker-0", full, now_s=t) for t in (1000.0, 1001.0, 1500.0)]
        said.append(storage_errors.write_failed("/disk-b/broker-0", full, now_s=1501.0))
        said.append(storage_errors.write_failed("/disk-a/broker-0", OSError(errno.EROFS, "Read-only file system"),
                                                now_s=1502.0))
        said.append(storage_errors.write_failed("/disk-a/broker-0", full, now_s=1000.0 + 601))
    assert said == [True, False, False, True, True, True]
    assert caplog.records[0].getMessage() == (
        "cannot write to the log directory /disk-a/broker-0: [Errno 28] No space left on device: free space there "
        "(or lower retention.ms / retention.bytes of the largest topics, or move log.dirs to a larger disk); until "
        "then produce requests to its partitions are answered KAFKA_STORAGE_ERROR")
    assert "read-only" in caplog.records[2].getMessage()


def test_an_index_write_that_fails_leaves_whole_entries_and_the_log_keeps_its_batches(tmp_path, monkeypatch):
    from protocol.record_batch import build_batch
    segment = Segment(tmp_path, 0, index_interval_bytes=1, max_index_bytes=1 << 20)
    batch = bytes(build_batch([(None, b"x" * 100, [], 1)]))
    segment.append(memoryview(batch), [(0, 0, 0, 1, len(batch))])
    real_write = os.write

    def half_then_full(fd, data):  # the disk fills in the middle of the index entries
        if fd == segment.offset_index.fd:
            real_write(fd, bytes(data)[:5])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)
    monkeypatch.setattr(os, "write", half_then_full)
    second = bytes(build_batch([(None, b"y" * 100, [], 2)]))
    segment.append(memoryview(second), [(0, 1, 1, 2, len(second))])  # its batch is written: no error
    entry = segment.offset_index.entry.size
    assert os.path.getsize(segment.offset_index.path) % entry == 0  # the 5 bytes were taken back
    monkeypatch.setattr(os, "write", real_write)
    third = bytes(build_batch([(None, b"z" * 100, [], 3)]))
    segment.append(memoryview(third), [(0, 2, 2, 3, len(third))])  # room again: the pending entries go whole
    assert os.path.getsize(segment.offset_index.path) == len(segment.offset_index) * entry
    assert segment.next_offset == 3 and segment.size_bytes == len(batch) + len(second) + len(third)
    segment.close()
