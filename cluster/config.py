"""Loading a broker's configuration as Kafka users bring it: a file (`--config`; `configs/local.toml`
by default for `kray start`) in Kafka's `server.properties` format or in TOML, and `--override
key=value` flags, over Kafka's defaults. The schema (defaults, types, ranges, `ConfigError`) is
actors/config_schema.py; this module reads files, resolves Kafka's alternative key spellings
(log.retention.hours/minutes/ms, log.dir/log.dirs, node.id/broker.id) as Kafka does, checks every
value before anything starts, and says what it read and where a problem is:

    kray start: server.properties (read as Kafka properties): num.partitions must be an integer, not 'three'

A key Kafka 4.4 knows but Kray does not use is ignored with a note; a key neither knows is refused,
with the nearest known keys as a suggestion.
"""
from __future__ import annotations

import difflib
import re
import tomllib
from pathlib import Path
from typing import Any

from actors.config_schema import (BROKER_DEFAULTS, LISTENER_PREFIX, ConfigError, base_key, broker_value,
                                  parse_config_value)
from actors.controller.quorum_shell.settings import combined_voters
from cluster.kafka_broker_configs import KAFKA_BROKER_CONFIG_TYPES

DEFAULT_LOCAL_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "local.toml"

# Kray's switch while the metadata quorum was new: true is accepted (and ignored), false refused
RETIRED_QUORUM_SWITCH = "kray.metadata.quorum.enable"
PROPERTIES, TOML = "Kafka properties", "TOML"

# Kafka's several spellings of one setting, as KafkaConfig reads them: the first one set wins, its
# value times the factor (a negative retention is unlimited: -1)
ALIASES: dict[str, tuple[tuple[str, int | None], ...]] = {
    "log.retention.ms": (("log.retention.ms", 1), ("log.retention.minutes", 60_000),
                         ("log.retention.hours", 3_600_000)),
    "log.roll.ms": (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
    "log.roll.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)),
    "log.dirs": (("log.dirs", None), ("log.dir", None)),
}
NEGATIVE_IS_UNLIMITED = {"log.retention.ms"}


def detect_format(path: Path, text: str) -> tuple[str, str]:
    """(format, why): by the file's extension (.properties, .toml), else by its content: a
    [section] line or a quoted key or value is TOML, `key=value` lines are Kafka properties."""
    suffix = path.suffix.lower()
    if suffix in (".properties", ".props", ".conf", ".cfg"):
        return PROPERTIES, f"by its {suffix} extension"
    if suffix == ".toml":
        return TOML, "by its .toml extension"
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        if line.startswith("[") or line.startswith('"') or re.match(r"^[^=]*=\s*[\"'\[{]", line):
            return TOML, "by its content"
    return PROPERTIES, "by its content"


def parse_properties(text: str) -> dict[str, str]:
    """java.util.Properties' format: `key=value`, `key: value` or `key value`; # and ! comments;
    a trailing backslash continues a line; \\t \\n \\uXXXX and other escapes."""
    out: dict[str, str] = {}
    logical: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        if _continues(line):
            line = line[:-1]
        logical.append(line)
    for line in logical:
        key_chars, j = [], 0
        while j < len(line):
            c = line[j]
            if c == "\\" and j + 1 < len(line):
                key_chars.append(line[j:j + 2])
                j += 2
                continue
            if c in "=: \t\f":
                break
            key_chars.append(c)
            j += 1
        rest = line[j:].lstrip(" \t\f")
        if rest[:1] in ("=", ":") and j < len(line) and line[j] not in "=:":
            rest = rest[1:].lstrip(" \t\f")
        elif j < len(line) and line[j] in "=:":
            rest = line[j + 1:].lstrip(" \t\f")
        out[_unescape("".join(key_chars))] = _unescape(rest)
    return out


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(text: str) -> str:
    def one(m: re.Match) -> str:
        c = m.group(1)
        if c.startswith("u"):
            return chr(int(c[1:], 16))
        return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c)
    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", one, text)


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML's dotted keys (`num.partitions = 3`, unquoted) are nested tables: back to Kafka's names."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def read_config_file(path: Path) -> tuple[dict[str, Any], str]:
    """The key/value pairs of a broker config file and a name for it in messages (the path and the
    format it was read as). Raises ConfigError naming the file when it cannot be read or parsed."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the config file {path}: {e}") from None
    fmt, why = detect_format(Path(path), text)
    where = f"{path} (read as {fmt} {why})"
    if fmt == PROPERTIES:
        return parse_properties(text), f"{path} (read as {fmt})"
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        hint = ("; a Kafka server.properties file is read as such when its name ends in .properties"
                if "=" in text else "")
        raise ConfigError(f"{where}: not valid TOML: {e}{hint}") from None
    sectioned = isinstance(doc.get("broker"), dict) and re.search(r'(?m)^\s*\[\s*"?broker"?\s*\]', text)
    root = dict(doc["broker"]) if sectioned else doc
    if sectioned:
        root.update({k: v for k, v in doc.items() if k != "broker"})
    return _flatten(root), f"{path} (read as {fmt})"


def _known(key: str) -> bool:
    return key in BROKER_DEFAULTS or base_key(key) is not None


def _kafka_type(key: str) -> str | None:
    """Kafka 4.4's type of a broker config (a listener.name.<l>. prefixed one: of its suffix)."""
    if key in KAFKA_BROKER_CONFIG_TYPES:
        return KAFKA_BROKER_CONFIG_TYPES[key]
    if key.startswith(LISTENER_PREFIX):
        rest = key[len(LISTENER_PREFIX):].split(".", 1)[-1]
        rest = re.sub(r"^[a-z0-9-]+\.(sasl\.jaas\.config)$", r"\1", rest)
        return KAFKA_BROKER_CONFIG_TYPES.get(rest)
    return None


def _suggestions(key: str) -> str:
    names = set(BROKER_DEFAULTS) | set(KAFKA_BROKER_CONFIG_TYPES)
    close = difflib.get_close_matches(key, sorted(names), n=3, cutoff=0.75)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def _layer(values: dict[str, Any], where: str, notes: list[str]) -> dict[str, Any]:
    """One layer's settings (a file's, or the overrides'): checked, Kafka's alternative spellings
    resolved within it, keys Kafka knows but Kray does not use dropped with a note."""
    problems, out = [], {}
    for key, value in values.items():
        key = key.strip()
        try:
            if _known(key) or key == RETIRED_QUORUM_SWITCH:
                out[key] = broker_value(key, value) if key != RETIRED_QUORUM_SWITCH else value
            elif (kind := _kafka_type(key)) is not None:
                parse_config_value(key, value, kind)  # Kafka would refuse a bad value: so does Kray
                out[key] = value
            else:
                problems.append(f"unknown broker config {key}{_suggestions(key)}")
        except ConfigError as e:
            problems.append(str(e))
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))
    for target, spellings in ALIASES.items():
        chosen = next(((name, factor) for name, factor in spellings if name in out), None)
        if chosen is None:
            continue
        name, factor = chosen
        value = out[name]
        if factor is not None:
            value = int(value) * factor
            if target in NEGATIVE_IS_UNLIMITED and value < 0:
                value = -1
        for other, _ in spellings:
            out.pop(other, None)
        out[target] = broker_value(target, value)
    if "node.id" in out:  # Kafka's name of the broker's id (KRaft); broker.id its older one
        node_id = int(parse_config_value("node.id", out.pop("node.id"), "int", at_least=0))
        if "broker.id" in out and out["broker.id"] != node_id:
            raise ConfigError(f"{where}: broker.id ({out['broker.id']}) and node.id ({node_id}) must be equal: "
                              f"set one of them")
        out["broker.id"] = node_id
    unused = sorted(k for k in out if not _known(k) and k != RETIRED_QUORUM_SWITCH)
    if unused:
        for key in unused:
            out.pop(key)
        notes.append(f"{where}: Kafka config{'s' if len(unused) > 1 else ''} that Kray does not use, ignored: "
                     f"{', '.join(unused)}")
    return out


def load_broker_config(path: Path | None = None, overrides: list[str] = (),
                       notes: list[str] | None = None) -> dict[str, Any]:
    """Kafka's defaults, then the file's settings, then the overrides (each `key=value`), every
    value checked before anything starts. `notes` collects what is worth telling (keys ignored).
    Raises ConfigError naming the file (and the format it was read as) or the override."""
    notes = [] if notes is None else notes
    config = dict(BROKER_DEFAULTS)
    set_by_user: set[str] = set()
    if path is not None:
        values, where = read_config_file(Path(path))
        layer = _layer(values, where, notes)
        _refuse_both_inter_broker_keys(layer, where)
        config.update(layer)
        set_by_user |= set(layer)
    if overrides:
        values = {}
        for text in overrides:
            key, sep, raw = text.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"override {text!r} is not key=value (example: --override num.partitions=3)")
            values[key.strip()] = raw.strip()
        layer = _layer(values, "--override", notes)
        _refuse_both_inter_broker_keys(layer, "--override")
        if "inter.broker.listener.name" in layer:  # (a file's protocol gives way to a named listener)
            config["security.inter.broker.protocol"] = BROKER_DEFAULTS["security.inter.broker.protocol"]
            set_by_user.discard("security.inter.broker.protocol")
        if "security.inter.broker.protocol" in layer:
            config["inter.broker.listener.name"] = None
        config.update(layer)
        set_by_user |= set(layer)
    if str(config.pop(RETIRED_QUORUM_SWITCH, True)).strip().lower() != "true":
        raise ConfigError(f"{RETIRED_QUORUM_SWITCH}=false is no longer possible: the metadata quorum always keeps "
                          f"the metadata (an older Kray's metadata file is imported into it at the first start); "
                          f"remove the setting")
    try:
        combined_voters(config)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return config


def _refuse_both_inter_broker_keys(layer: dict[str, Any], where: str) -> None:
    """Kafka refuses a config that sets both inter.broker.listener.name and
    security.inter.broker.protocol (whatever their values); setting one is fine, although
    security.inter.broker.protocol always has a default."""
    if layer.get("inter.broker.listener.name") is not None and "security.inter.broker.protocol" in layer:
        raise ConfigError(f"{where}: Only one of inter.broker.listener.name and security.inter.broker.protocol "
                          f"should be set.")
