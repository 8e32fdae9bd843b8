"""Generate ``protocol/messages.py``, ``protocol/coordinator_records.py`` and ``protocol/error_codes.py`` from
Apache Kafka's schema files and error codes.

    python -m protocol.generate                 # regenerate both from the inputs the manifest names
    python -m protocol.generate --check         # exit 1 (saying what) when a committed module or an input differs
    python -m protocol.generate --add NAME.json [--jar kafka-clients]   # take one more schema into the manifest

The inputs are listed in ``protocol/schemas.toml``: each schema file (``common/message/NAME.json``), the
Kafka jar that carries it (Apache Kafka's released jars on Maven Central: ``kafka-clients`` for the APIs, the
coordinators' jars for their records) and the sha256 of its bytes; the jars themselves with their Maven
coordinates and sha256, and Kafka's version and commit. The JSON is read from the jars and never committed.
A jar is looked for in ``--jars DIR``, ``tests/kafka/lib`` (``./dev test`` copies Apache Kafka 4.4.0's
classpath there) and Maven's local repository (``~/.m2``), and otherwise fetched into it with
``mvn dependency:get``. ``tests/unit/test_protocol_generate.py`` runs the check.

Only wire facts are emitted (names, types, versions, tags, defaults); the schemas' prose and comments are not.
Every API (files with an ``apiKey``) gets a request and a response class; the header schemas are not generated
(``protocol/headers.py`` handles headers by hand). The error codes are read from the compiled ``Errors`` enum of
``kafka-clients`` (its static initializer: each constant's name and code), also listed in the manifest.
"""

import argparse
import hashlib
import json
import keyword
import os
import re
import shutil
import struct
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = Path(__file__).resolve().parent
MANIFEST = PACKAGE_DIR / "schemas.toml"
SCHEMA_DIR_IN_JAR = "common/message/"
KAFKA_GROUP = "org.apache.kafka"
DEFAULT_JAR_DIRS = (REPO_ROOT / "tests" / "kafka" / "lib",)

PRIMITIVES = {"int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool",
              "string", "bytes", "records", "uuid"}
INTEGERS = {"int8", "int16", "int32", "int64", "uint16", "uint32"}
IGNORED_FIELD_KEYS = {"about", "ignorable", "entityType", "mapKey", "zeroCopy"}
FIELD_KEYS = {"name", "type", "versions", "nullableVersions", "tag", "taggedVersions", "default", "fields"}
RESERVED_NAMES = {"decode", "decode_from", "encode", "encode_chunks"}

_COMMENT_OR_STRING = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*')
_SNAKE_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def load_schema_text(text: str) -> dict:
    """A schema file's JSON; Kafka's schema files carry // comments, dropped here (strings kept)."""
    return json.loads(_COMMENT_OR_STRING.sub(lambda m: m.group(0) if m.group(0)[0] == '"' else "", text))


def load_schema(path: Path) -> dict:
    return load_schema_text(path.read_text())


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


REGENERATE = "python -m protocol.generate  (inputs: protocol/schemas.toml)"
MODULES = {"messages": ("messages.py", "message schemas"),
           "records": ("coordinator_records.py", "coordinator record schemas")}


def generate_module(schemas: list[dict], what: str) -> str:
    """A module of message classes: one request and one response class per API (by api key), or one
    class per coordinator record (by record type), each with its nested structs."""
    out = [f"# Generated by protocol/generate.py from Apache Kafka's {what}; do not edit.",
           f"# Regenerate: {REGENERATE}",
           "",
           "from protocol.codec import Field as F, Message",
           ""]
    for schema in sorted((s for s in schemas if "apiKey" in s), key=lambda s: (s["apiKey"], s["type"])):
        out += ["", *message_lines(schema), ""]
    return "\n".join(out)


# ---- the manifest of inputs and the jars that carry them ----

@dataclass(frozen=True)
class Jar:
    artifact: str   # Maven artifact id under org.apache.kafka, e.g. kafka-clients
    version: str
    sha256: str

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    @property
    def coordinates(self) -> str:
        return f"{KAFKA_GROUP}:{self.artifact}:{self.version}"


@dataclass(frozen=True)
class Manifest:
    kafka_version: str
    kafka_commit: str
    jars: dict[str, Jar]                       # by the name the schema entries use
    schemas: dict[str, dict[str, tuple[str, str]]]   # module -> file name -> (jar name, sha256)
    errors: tuple[str, str, str]               # Kafka's Errors class: (path in its jar, jar name, sha256)

    @classmethod
    def load(cls, path: Path = MANIFEST) -> "Manifest":
        doc = tomllib.loads(path.read_text())
        jars = {name: Jar(j["artifact"], j["version"], j["sha256"]) for name, j in doc["jars"].items()}
        schemas = {module: {f: (e["jar"], e["sha256"]) for f, e in doc.get(module, {}).items()} for module in MODULES}
        errors = doc["errors"]
        return cls(doc["kafka"]["version"], doc["kafka"]["commit"], jars, schemas,
                   (errors["class"], errors["jar"], errors["sha256"]))

    def dump(self) -> str:
        lines = ["# The inputs of `python -m protocol.generate`: Apache Kafka's schema files, read from Kafka's released",
                 "# jars on Maven Central (never committed). Each schema names the jar that carries it under",
                 f"# {SCHEMA_DIR_IN_JAR} and the sha256 of its bytes; `python -m protocol.generate --check` verifies",
                 "# both and that the committed modules are what these inputs generate.", "",
                 "[kafka]", f'version = "{self.kafka_version}"',
                 f'commit = "{self.kafka_commit}"  # commitId in kafka/kafka-version.properties of kafka-clients', ""]
        for name, jar in self.jars.items():
            lines += [f"[jars.{name}]", f'artifact = "{jar.artifact}"', f'version = "{jar.version}"',
                      f'sha256 = "{jar.sha256}"', ""]
        for module, (file_name, _) in MODULES.items():
            lines += [f"[{module}]  # protocol/{file_name}"]
            lines += [f'"{f}" = {{ jar = "{j}", sha256 = "{h}" }}' for f, (j, h) in sorted(self.schemas[module].items())]
            lines.append("")
        lines += ["[errors]  # protocol/error_codes.py: the codes of Kafka's Errors enum, read from its class",
                  f'class = "{self.errors[0]}"', f'jar = "{self.errors[1]}"', f'sha256 = "{self.errors[2]}"', ""]
        return "\n".join(lines)


class InputError(RuntimeError):
    """An input is missing or not what the manifest says; the message says which and what to do."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def maven_repository() -> Path:
    """Maven's local repository: $MAVEN_REPO_LOCAL, else ~/.m2/repository."""
    return Path(os.environ.get("MAVEN_REPO_LOCAL") or Path.home() / ".m2" / "repository")


def maven_local_path(jar: Jar) -> Path:
    return maven_repository() / KAFKA_GROUP.replace(".", "/") / jar.artifact / jar.version / jar.file_name


def find_jar(jar: Jar, jar_dirs: tuple[Path, ...] = DEFAULT_JAR_DIRS, fetch: bool = True) -> Path:
    """The jar's path, checked against its sha256: from `jar_dirs`, Maven's local repository, or fetched
    into it with `mvn dependency:get` (Maven Central)."""
    candidates = [d / jar.file_name for d in jar_dirs] + [maven_local_path(jar)]
    for path in candidates:
        if path.is_file():
            found = sha256(path.read_bytes())
            if found != jar.sha256:
                raise InputError(f"{path}: sha256 {found}, the manifest says {jar.sha256}: a different "
                                 f"{jar.file_name}; delete it and run again to fetch it from Maven Central")
            return path
    if not fetch:
        raise InputError(f"{jar.file_name} not found in {', '.join(map(str, candidates))}")
    if shutil.which("mvn") is None:
        raise InputError(f"{jar.file_name} not found in {', '.join(map(str, candidates))}, and mvn is not "
                         f"installed to fetch {jar.coordinates} from Maven Central")
    result = subprocess.run(["mvn", "-q", "-B", "dependency:get", f"-Dartifact={jar.coordinates}", "-Dtransitive=false",
                             f"-Dmaven.repo.local={maven_repository()}"], capture_output=True, text=True)
    if result.returncode != 0 or not maven_local_path(jar).is_file():
        raise InputError(f"mvn could not fetch {jar.coordinates}:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return find_jar(jar, jar_dirs, fetch=False)


class Inputs:
    """The schema files of a manifest, read from their jars and checked against their sha256."""

    def __init__(self, manifest: Manifest, jar_dirs: tuple[Path, ...] = DEFAULT_JAR_DIRS):
        self.manifest, self.jar_dirs = manifest, jar_dirs
        self._zips: dict[str, zipfile.ZipFile] = {}

    def raw(self, jar_name: str, file_name: str, directory: str = SCHEMA_DIR_IN_JAR) -> bytes:
        if jar_name not in self._zips:
            self._zips[jar_name] = zipfile.ZipFile(find_jar(self.manifest.jars[jar_name], self.jar_dirs))
        try:
            return self._zips[jar_name].read(directory + file_name)
        except KeyError:
            raise InputError(f"{self.manifest.jars[jar_name].file_name} has no {directory}{file_name}") from None

    def error_codes(self) -> list[tuple[int, str]]:
        class_path, jar_name, expected = self.manifest.errors
        data = self.raw(jar_name, class_path, directory="")
        if sha256(data) != expected:
            raise InputError(f"{class_path} in {self.manifest.jars[jar_name].file_name}: sha256 {sha256(data)}, "
                             f"the manifest says {expected}")
        return kafka_error_codes(data)

    def schemas(self, module: str) -> list[dict]:
        out = []
        for file_name, (jar_name, expected) in sorted(self.manifest.schemas[module].items()):
            data = self.raw(jar_name, file_name)
            if sha256(data) != expected:
                raise InputError(f"{file_name} in {self.manifest.jars[jar_name].file_name}: sha256 {sha256(data)}, "
                                 f"the manifest says {expected}")
            out.append(load_schema_text(data.decode()))
        return out

    def modules(self) -> dict[str, str]:
        """File name in protocol/ -> the text the inputs generate."""
        return {file_name: generate_module(self.schemas(module), what)
                for module, (file_name, what) in MODULES.items()} | {"error_codes.py": generate_error_codes(self.error_codes())}


def differing_classes(committed: str, generated: str) -> list[str]:
    def classes(text: str) -> dict[str, str]:
        parts = re.split(r"^(?=class \w+\(Message\):)", text, flags=re.M)
        return {re.match(r"class (\w+)", p).group(1): p.strip() for p in parts if p.startswith("class ")}
    old, new = classes(committed), classes(generated)
    return sorted(n for n in old.keys() | new.keys() if old.get(n) != new.get(n))


def check(inputs: Inputs) -> list[str]:
    """What differs between the committed modules and what the manifest's inputs generate."""
    problems = []
    for file_name, text in inputs.modules().items():
        committed = (PACKAGE_DIR / file_name).read_text()
        if committed != text:
            classes = differing_classes(committed, text)
            problems.append(f"protocol/{file_name} is not what protocol/schemas.toml generates"
                            + (f" (classes: {', '.join(classes)})" if classes else " (layout)"))
    return problems


def add_schema(manifest: Manifest, file_name: str, jar_name: str, jar_dirs: tuple[Path, ...]) -> Manifest:
    inputs = Inputs(manifest, jar_dirs)
    schema = load_schema_text(inputs.raw(jar_name, file_name).decode())
    module = "messages" if schema.get("type") in ("request", "response") else "records"
    entries = dict(manifest.schemas[module]) | {file_name: (jar_name, sha256(inputs.raw(jar_name, file_name)))}
    return Manifest(manifest.kafka_version, manifest.kafka_commit, manifest.jars, manifest.schemas | {module: entries},
                    manifest.errors)


def kafka_error_codes(class_bytes: bytes) -> list[tuple[int, str]]:
    """(code, name) of every constant of Kafka's Errors enum, read from its compiled class: the static
    initializer constructs each as `new Errors; dup; ldc NAME; <ordinal>; <code>; ...`."""
    data = class_bytes
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a class file")
    count = struct.unpack_from(">H", data, 8)[0]
    pool, pos, i = [None] * count, 10, 1
    sizes = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2, 17: 4, 18: 4, 19: 2, 20: 2}
    while i < count:
        tag = data[pos]
        if tag == 1:
            length = struct.unpack_from(">H", data, pos + 1)[0]
            pool[i] = (1, data[pos + 3:pos + 3 + length].decode("utf-8", "replace"))
            pos += 3 + length
        else:
            pool[i] = (tag, data[pos + 1:pos + 1 + sizes[tag]])
            pos += 1 + sizes[tag]
        i += 2 if tag in (5, 6) else 1
    def utf8(index): return pool[index][1]
    def string(index):
        entry = pool[index]
        return utf8(struct.unpack(">H", entry[1])[0]) if entry and entry[0] == 8 else None
    this_class = struct.unpack_from(">H", data, pos + 2)[0]
    # the code: scan for `new #this_class; dup; ldc(_w) String; int; int`
    def push_int(at):
        op = data[at]
        if 0x02 <= op <= 0x08: return op - 0x03, at + 1
        if op == 0x10: return struct.unpack_from(">b", data, at + 1)[0], at + 2
        if op == 0x11: return struct.unpack_from(">h", data, at + 1)[0], at + 3
        return None, at
    out, needle = [], b"\xbb" + struct.pack(">H", this_class) + b"\x59"
    at = data.find(needle, pos)
    while at != -1:
        p = at + len(needle)
        name = None
        if data[p] == 0x12: name, p = string(data[p + 1]), p + 2
        elif data[p] == 0x13: name, p = string(struct.unpack_from(">H", data, p + 1)[0]), p + 3
        if name is not None:
            ordinal, p = push_int(p)
            code, p = push_int(p) if ordinal is not None else (None, p)
            if code is not None:
                out.append((code, name))
        at = data.find(needle, at + 1)
    return sorted(out)


def generate_error_codes(codes: list[tuple[int, str]]) -> str:
    if len({code for code, _ in codes}) != len(codes) or len({name for _, name in codes}) != len(codes):
        raise ValueError("duplicate error code or name")
    return "\n".join(["# Generated by protocol/generate.py from Apache Kafka's error codes (its Errors class); do not edit.",
                      f"# Regenerate: {REGENERATE}",
                      "",
                      "from enum import IntEnum",
                      "",
                      "",
                      "class ErrorCode(IntEnum):",
                      *(f"    {name} = {code}" for code, name in codes),
                      ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m protocol.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a committed module or an "
                                                             "input is not what protocol/schemas.toml says")
    parser.add_argument("--add", metavar="NAME.json", action="append", default=[],
                        help="take this schema file of --jar into the manifest, then regenerate (repeatable)")
    parser.add_argument("--jar", default="kafka-clients", help="the manifest's name of the jar for --add")
    parser.add_argument("--jars", type=Path, action="append", default=[], metavar="DIR",
                        help="look for the jars here first (default: tests/kafka/lib, then ~/.m2)")
    args = parser.parse_args(argv)
    jar_dirs = tuple(args.jars) + DEFAULT_JAR_DIRS
    try:
        manifest = Manifest.load()
        if args.check:
            problems = check(Inputs(manifest, jar_dirs))
            for problem in problems:
                print(problem, file=sys.stderr)
            if problems:
                print("regenerate with: python -m protocol.generate", file=sys.stderr)
                return 1
            print(f"protocol/ is what protocol/schemas.toml generates (Apache Kafka {manifest.kafka_version})")
            return 0
        for file_name in args.add:
            manifest = add_schema(manifest, file_name, args.jar, jar_dirs)
        if args.add:
            MANIFEST.write_text(manifest.dump())
        for file_name, text in Inputs(manifest, jar_dirs).modules().items():
            (PACKAGE_DIR / file_name).write_text(text)
    except InputError as e:
        print(f"python -m protocol.generate: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
