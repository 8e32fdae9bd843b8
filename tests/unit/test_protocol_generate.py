"""protocol/messages.py and protocol/coordinator_records.py are what protocol/schemas.toml's inputs generate:
Apache Kafka's schema files, read from Kafka's jars (Maven Central; ./dev test copies them into tests/kafka/lib),
each checked against its sha256; error_codes.py from the compiled Errors enum of kafka-clients."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from protocol import generate

def jars_reachable() -> bool:
    manifest = generate.Manifest.load()
    found = all(any((d / j.file_name).is_file() for d in generate.DEFAULT_JAR_DIRS) or
                generate.maven_local_path(j).is_file() for j in manifest.jars.values())
    return found or shutil.which("mvn") is not None


def test_committed_modules_are_what_the_manifest_generates():
    if not jars_reachable():
        if os.environ.get("CI"):
            pytest.fail("Kafka's jars are not here and mvn is not installed to fetch them")
        pytest.skip("Kafka's jars are not here and mvn is not installed to fetch them from Maven Central")
    assert generate.check(generate.Inputs(generate.Manifest.load())) == []
    assert generate.main(["--check"]) == 0


def test_manifest_round_trips_and_names_one_kafka_release():
    manifest = generate.Manifest.load()
    assert generate.Manifest.load(generate.MANIFEST) == manifest
    assert manifest.dump() == generate.MANIFEST.read_text()
    assert {jar.version for jar in manifest.jars.values()} == {manifest.kafka_version}
    for module in generate.MODULES:
        assert manifest.schemas[module]
        assert all(jar in manifest.jars and len(digest) == 64 for jar, digest in manifest.schemas[module].values())


def test_every_request_schema_has_its_response():
    files = set(generate.Manifest.load().schemas["messages"])
    assert {f.replace("Request.json", "Response.json") for f in files if f.endswith("Request.json")} <= files


def test_a_jar_with_another_sha256_is_refused(tmp_path):
    manifest = generate.Manifest.load()
    jar = manifest.jars["kafka-clients"]
    (tmp_path / jar.file_name).write_bytes(b"not kafka-clients")
    with pytest.raises(generate.InputError, match="sha256"):
        generate.find_jar(jar, (tmp_path,), fetch=False)


def test_a_schema_with_another_sha256_is_refused(monkeypatch):
    if not jars_reachable():
        pytest.skip("Kafka's jars are not here")
    manifest = generate.Manifest.load()
    name, (jar, _) = next(iter(manifest.schemas["records"].items()))
    bad = generate.Manifest(manifest.kafka_version, manifest.kafka_commit, manifest.jars,
                            manifest.schemas | {"records": {name: (jar, "0" * 64)}}, manifest.errors)
    with pytest.raises(generate.InputError, match=name):
        generate.Inputs(bad).schemas("records")


def test_a_stale_committed_module_is_named_with_its_classes(tmp_path, monkeypatch):
    if not jars_reachable():
        pytest.skip("Kafka's jars are not here")
    for name in ("messages.py", "coordinator_records.py", "error_codes.py"):
        text = (generate.PACKAGE_DIR / name).read_text()
        if name == "messages.py":
            text = text.replace("    MAX_VERSION = 13\n", "    MAX_VERSION = 12\n", 1)  # ProduceRequest's
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(generate, "PACKAGE_DIR", tmp_path)
    problems = generate.check(generate.Inputs(generate.Manifest.load()))
    assert len(problems) == 1 and "protocol/messages.py" in problems[0] and "ProduceRequest" in problems[0]


def test_error_codes_come_from_kafkas_errors_class():
    if not jars_reachable():
        pytest.skip("Kafka's jars are not here")
    from protocol.error_codes import ErrorCode
    codes = generate.Inputs(generate.Manifest.load()).error_codes()
    assert codes == sorted((int(e), e.name) for e in ErrorCode)
    assert (-1, "UNKNOWN_SERVER_ERROR") in codes and (0, "NONE") in codes
    with pytest.raises(ValueError):
        generate.kafka_error_codes(b"not a class file")
