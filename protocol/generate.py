"""Generate ``protocol/messages.py``, ``protocol/coordinator_records.py`` and ``protocol/error_codes.py`` from
Kafka's schema files.

    python -m protocol.generate [--schemas DIR] [--extra-schemas DIR ...] [--records DIR] [--extra-records DIR ...]
                                [--errors FILE]

DIR defaults to ``../shared/kafka-protocol/messages`` relative to the repo root, the records DIR to
``DIR/../records`` (the coordinators' key/value records: their ``apiKey`` is the record type), FILE to
``DIR/../ERRORS.md``. ``--extra-schemas`` (repeatable) adds the APIs of more folders to ``messages.py``, and
``--extra-records`` the records of more folders to ``coordinator_records.py``; neither kind of file is in the
shared folder, and none is ever committed. Take them from Apache Kafka's ``clients/src/main/resources/common/message/``
into folders outside the repo:

- at trunk ``d79bd502ec7f`` (the commit of the shared folder; the ``confluentinc/kafka`` snapshot carries it):
  the ACL APIs (``{Create,Describe,Delete}Acls{Request,Response}.json``) and the transaction APIs of KIP-98,
  KIP-664 and KIP-890 (``AddPartitionsToTxn``, ``AddOffsetsToTxn``, ``EndTxn``, ``WriteTxnMarkers``,
  ``TxnOffsetCommit``, ``DescribeTransactions``, ``ListTransactions``, ``DescribeProducers``);
- at ``1eb7644349cb`` (the ``apache/kafka`` snapshot, Oct 2024): the SCRAM credential APIs of KIP-554
  (``DescribeUserScramCredentials``, ``AlterUserScramCredentials``) and the controller's and the metadata quorum's
  APIs (``BrokerRegistration``, ``BrokerHeartbeat``, ``AlterPartition``, ``Vote``, ``BeginQuorumEpoch``,
  ``EndQuorumEpoch``, ``DescribeQuorum``: KIP-631, KIP-595);
- from ``kafka-clients-4.4.0.jar`` (``common/message/``, the jar in ``tests/kafka/lib``): the streams-group APIs of
  KIP-1071 (``StreamsGroupHeartbeat``, ``StreamsGroupDescribe``);
- the records of ``__transaction_state`` (``TransactionLogKey``, ``TransactionLogValue``) from
  ``transaction-coordinator/src/main/resources/common/message/`` at ``d79bd502ec7f``;

and regenerate with

    python -m protocol.generate --extra-schemas /tmp/kray-extra-schemas --extra-records /tmp/kray-txn-records

Only wire facts are emitted (names, types, versions, tags, defaults); the schemas' prose and comments are not.
Every API (files with an ``apiKey``) gets a request and a response class; the header schemas are not generated
(``protocol/headers.py`` handles headers by hand).
"""

import argparse
import json
import keyword
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SCHEMAS_DIR = REPO_ROOT.parent / "shared" / "kafka-protocol" / "messages"
PACKAGE_DIR = Path(__file__).resolve().parent

PRIMITIVES = {"int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool",
              "string", "bytes", "records", "uuid"}
INTEGERS = {"int8", "int16", "int32", "int64", "uint16", "uint32"}
IGNORED_FIELD_KEYS = {"about", "ignorable", "entityType", "mapKey", "zeroCopy"}
FIELD_KEYS = {"name", "type", "versions", "nullableVersions", "tag", "taggedVersions", "default", "fields"}
RESERVED_NAMES = {"decode", "decode_from", "encode", "encode_chunks"}

_COMMENT_OR_STRING = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*')
_SNAKE_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def load_schema(path: Path) -> dict:
    text = _COMMENT_OR_STRING.sub(lambda m: m.group(0) if m.group(0)[0] == '"' else "", path.read_text())
    return json.loads(text)


def snake(name: str) -> str:
    """PascalCase to snake_case; an acronym stays one word (``ISRNodes`` -> ``isr_nodes``)."""
    return _SNAKE_BOUNDARY.sub("_", name).lower()


def first_version(spec: str) -> int | None:
    return None if spec == "none" else int(re.match(r"\d+", spec).group())


def element_type(type_name: str) -> str:
    return type_name[2:] if type_name.startswith("[]") else type_name


def parse_default(field: dict):
    raw, type_name = field["default"], field["type"]
    if raw == "null":
        return None
    if type_name in INTEGERS:
        return int(raw, 0) if isinstance(raw, str) else int(raw)
    if type_name == "bool":
        return raw in (True, "true")
    if type_name == "float64":
        return float(raw)
    if type_name == "string":
        return raw
    raise ValueError(f"{field['name']}: unsupported default {raw!r} for type {type_name}")


class _Structs:
    """Struct definitions of one message by type name; a name must not be defined twice (as in Kafka)."""

    def __init__(self, message: str):
        self.message = message
        self.by_name: dict[str, list] = {}

    def define(self, name: str, fields: list) -> None:
        if name in self.by_name:
            raise ValueError(f"{self.message}: struct {name} defined more than once")
        self.by_name[name] = fields
        self.collect(fields)

    def collect(self, fields: list) -> None:
        for field in fields:
            if "fields" in field:
                self.define(element_type(field["type"]), field["fields"])


def check_field(message: str, field: dict, structs: dict) -> None:
    where = f"{message}.{field['name']}"
    unknown = set(field) - FIELD_KEYS - IGNORED_FIELD_KEYS
    if unknown:
        raise ValueError(f"{where}: unsupported keys {sorted(unknown)}")
    if ("tag" in field) != ("taggedVersions" in field):
        raise ValueError(f"{where}: tag and taggedVersions go together")
    base = element_type(field["type"])
    if base not in PRIMITIVES and base not in structs:
        raise ValueError(f"{where}: unknown type {field['type']}")
    name = snake(field["name"])
    if keyword.iskeyword(name) or name in RESERVED_NAMES or name.startswith("_"):
        raise ValueError(f"{where}: attribute name {name!r} is not usable")


def field_versions(field: dict) -> str:
    """A field's versions; a tagged field may leave them out: they are then its tagged versions (as in Kafka)."""
    if "versions" in field:
        return field["versions"]
    if "taggedVersions" in field:
        return field["taggedVersions"]
    raise ValueError(f"{field['name']}: no versions")


def field_line(field: dict) -> str:
    args = [repr(snake(field["name"])), repr(field["type"]), repr(field_versions(field))]
    if field.get("nullableVersions", "none") != "none":
        args.append(f"nullable={field['nullableVersions']!r}")
    if "tag" in field:
        args.append(f"tag={int(field['tag'])!r}, tagged={field['taggedVersions']!r}")  # (a few schemas write it as a string)
    if "default" in field:
        args.append(f"default={parse_default(field)!r}")
    return f"F({', '.join(args)}),"


def class_lines(message: str, name: str, fields: list, structs: dict, header: list[str]) -> list[str]:
    names = [snake(f["name"]) for f in fields]
    if len(set(names)) != len(names):
        raise ValueError(f"{message}.{name}: two fields map to one attribute name")
    for field in fields:
        check_field(message, field, structs)
    lines = [f"class {name}(Message):", *(f"    {line}" for line in header)]
    lines.append(f"    __slots__ = {tuple(names)!r}")
    lines.append("    FIELDS = (")
    lines += [f"        {field_line(f)}" for f in fields]
    lines.append("    )")
    return lines


def message_lines(schema: dict) -> list[str]:
    message = schema["name"]
    registry = _Structs(message)
    for common in schema.get("commonStructs", []):
        registry.define(common["name"], common["fields"])
    registry.collect(schema["fields"])
    structs = registry.by_name
    if message in structs:
        raise ValueError(f"{message}: a struct is named like its message")
    valid = schema["validVersions"]
    header = [f"API_KEY = {schema['apiKey']}",
              f"MIN_VERSION = {first_version(valid)}",
              f"MAX_VERSION = {int(valid.split('-')[-1])}",
              f"FLEXIBLE_MIN = {first_version(schema['flexibleVersions'])}"]
    if schema.get("latestVersionUnstable"):
        header.append("LATEST_VERSION_UNSTABLE = True")
    lines = class_lines(message, message, schema["fields"], structs, header)
    for struct_name, fields in structs.items():
        lines.append("")
        lines += [f"    {line}" for line in class_lines(message, struct_name, fields, structs, [])]
    return lines


EXTRA_MARKER = "# ---- APIs from --extra-schemas folders (their schemas are not in the shared folder) ----"
EXTRA_RECORDS_MARKER = "# ---- records from --extra-records folders (their schemas are not in the shared folder) ----"
REGENERATE = ("python -m protocol.generate --extra-schemas DIR --extra-records DIR2  "
              "(the schemas outside the shared folder, see protocol/generate.py)")
REGENERATE_MESSAGES = REGENERATE


def _api_schemas(paths: list[Path]) -> list[dict]:
    schemas = [load_schema(path) for path in paths]
    return sorted((s for s in schemas if "apiKey" in s), key=lambda s: (s["apiKey"], s["type"]))


def generate_messages(schemas_dir: Path, what: str = "message schemas", extra_dirs: list[Path] = (),
                      regenerate: str = "python -m protocol.generate", marker: str = EXTRA_MARKER) -> str:
    """The module text; the schemas of `extra_dirs` (not already in `schemas_dir`) follow `marker`, so
    that what the shared folder yields can be checked without the extra files."""
    paths = sorted(schemas_dir.glob("*.json"))
    names = {path.name for path in paths}
    extra_paths = []
    for extra in extra_dirs:
        found = sorted(extra.glob("*.json"))
        if not found:
            raise ValueError(f"{extra}: no *.json schema files")
        extra_paths += [path for path in found if path.name not in names]
        names |= {path.name for path in found}
    out = [f"# Generated by protocol/generate.py from Apache Kafka's {what}; do not edit.",
           f"# Regenerate: {regenerate}",
           "",
           "from protocol.codec import Field as F, Message",
           ""]
    for schema in _api_schemas(paths):
        out += ["", *message_lines(schema), ""]
    if extra_paths:
        out += ["", marker, ""]
        for schema in _api_schemas(extra_paths):
            out += ["", *message_lines(schema), ""]
    return "\n".join(out)


def generate_error_codes(errors_md: Path) -> str:
    rows = re.findall(r"^\|\s*(-?\d+)\s*\|\s*`([A-Z0-9_]+)`\s*\|", errors_md.read_text(), re.M)
    codes = sorted((int(code), name) for code, name in rows)
    if len({code for code, _ in codes}) != len(codes) or len({name for _, name in codes}) != len(codes):
        raise ValueError(f"{errors_md}: duplicate error code or name")
    return "\n".join(["# Generated by protocol/generate.py from ERRORS.md (Kafka's error codes); do not edit.",
                      "# Regenerate: python -m protocol.generate [--errors FILE]",
                      "",
                      "from enum import IntEnum",
                      "",
                      "",
                      "class ErrorCode(IntEnum):",
                      *(f"    {name} = {code}" for code, name in codes),
                      ""])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m protocol.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", type=Path, default=DEFAULT_SCHEMAS_DIR, help="folder of *Request/*Response.json")
    parser.add_argument("--extra-schemas", type=Path, action="append", default=[], metavar="DIR",
                        help="another folder of *Request/*Response.json (repeatable; e.g. the ACL, SCRAM and "
                             "transaction APIs)")
    parser.add_argument("--records", type=Path, default=None, help="folder of coordinator record schemas")
    parser.add_argument("--extra-records", type=Path, action="append", default=[], metavar="DIR",
                        help="another folder of coordinator record schemas (repeatable; e.g. __transaction_state's)")
    parser.add_argument("--errors", type=Path, default=None, help="ERRORS.md (default: DIR/../ERRORS.md)")
    args = parser.parse_args(argv)
    errors_md = args.errors or args.schemas.parent / "ERRORS.md"
    records_dir = args.records or args.schemas.parent / "records"
    (PACKAGE_DIR / "messages.py").write_text(generate_messages(args.schemas, extra_dirs=args.extra_schemas,
                                                               regenerate=REGENERATE_MESSAGES))
    (PACKAGE_DIR / "coordinator_records.py").write_text(generate_messages(
        records_dir, "coordinator record schemas", extra_dirs=args.extra_records,
        regenerate=REGENERATE,
        marker=EXTRA_RECORDS_MARKER))
    (PACKAGE_DIR / "error_codes.py").write_text(generate_error_codes(errors_md))


if __name__ == "__main__":
    main()
