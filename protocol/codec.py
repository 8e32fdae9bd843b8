"""Generic schema-driven codec behind the generated message classes.

A message class lists its fields in ``FIELDS`` (see ``Field``). For each (class, version) the codec compiles, once and
lazily, a ``_Plan``: a list of read steps and a list of write steps. Consecutive fixed-width fields share one
``struct`` call; nested structs, arrays and tagged fields get their own steps.

Wire rules applied: compact strings/bytes/arrays (uvarint N+1, 0 = null) and a tagged-field section after the regular
fields of every struct, in flexible versions only; tagged fields are written when their value differs from the
default, in tag order, merged with unknown tagged fields kept from decoding; a nullable struct is preceded by an int8
marker (-1 null, 1 present); ``records`` is nullable bytes decoded as a zero-copy memoryview.

Encoding a field that does not exist in the requested version silently skips it, whatever its value (Kafka would
raise for a non-default, non-ignorable one); decoding gives such fields their default.
"""

import struct
from operator import attrgetter
from typing import Any, NamedTuple

from protocol import primitives as p
from protocol.errors import MalformedMessage, UnsupportedVersion

MISSING = object()
_VERSION_MAX = 0x7FFF
_NO_TAGGED_FIELDS = b"\x00"
_FIXED_DEFAULTS = {"float64": 0.0, "bool": False}
_SCALAR_DEFAULTS = {"string": "", "bytes": b"", "records": None, "uuid": p.ZERO_UUID}


class Field(NamedTuple):
    """One schema field. Versions are schema ranges ("3+", "0-12", "5", "none"); ``type`` is a primitive name,
    a struct name of the enclosing message, or either prefixed with "[]" for an array."""
    name: str
    type: str
    versions: str
    nullable: str = "none"
    tag: int | None = None
    tagged: str = "none"
    default: Any = MISSING


def parse_versions(spec: str) -> range:
    if spec == "none":
        return range(0)
    if spec.endswith("+"):
        return range(int(spec[:-1]), _VERSION_MAX + 1)
    lo, _, hi = spec.partition("-")
    return range(int(lo), int(hi or lo) + 1)


class Message:
    """Base of generated message and struct classes."""
    __slots__ = ("_unknown_tagged",)
    FIELDS: tuple[Field, ...] = ()
    API_KEY: int | None = None
    MIN_VERSION = 0
    MAX_VERSION = _VERSION_MAX
    FLEXIBLE_MIN: int | None = None
    LATEST_VERSION_UNSTABLE = False

    def __init_subclass__(cls):
        cls._plans = {}
        cls._defaults = None
        cls._names = tuple(f.name for f in cls.FIELDS)
        cls._state = attrgetter("_unknown_tagged", *cls._names)
        cls._scope = cls
        for value in vars(cls).values():
            if isinstance(value, type) and issubclass(value, Message):
                value._scope = cls

    def __init__(self, **fields):
        for name, value, fresh in self._defaults or _build_defaults(type(self)):
            if name in fields:
                setattr(self, name, fields.pop(name))
            else:
                setattr(self, name, value() if fresh else value)
        if fields:
            raise TypeError(f"{type(self).__qualname__} has no field(s) {', '.join(fields)}")
        self._unknown_tagged = ()

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._state(self) == self._state(other)

    __hash__ = None

    def __repr__(self):
        body = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._names)
        return f"{type(self).__qualname__}({body})"

    @classmethod
    def decode(cls, buf, version: int) -> "Message":
        """Decode a message body. Bytes after the message are ignored, as Kafka does (librdkafka's mock broker
        appends a stray byte to some responses); use ``decode_from`` to see where the message ended."""
        return cls.decode_from(buf, 0, version)[0]

    @classmethod
    def decode_from(cls, buf, offset: int, version: int) -> tuple["Message", int]:
        plan = cls._plans.get(version) or _compile(cls, version)
        try:
            return plan.read(memoryview(buf), offset)
        except (struct.error, IndexError, UnicodeDecodeError) as e:
            raise MalformedMessage(f"{cls.__qualname__} v{version}: {e}") from None

    def encode_chunks(self, version: int) -> list:
        """The encoding as a list of bytes-like parts (records chunks included as given, uncopied)."""
        plan = self._plans.get(version) or _compile(type(self), version)
        out = []
        plan.write(out, self)
        return out

    def encode(self, version: int) -> bytes:
        return b"".join(self.encode_chunks(version))


# ---- defaults ----------------------------------------------------------------------------------------------------

def _struct_class(scope: type, type_name: str) -> type:
    return getattr(scope, type_name)


def _default(scope: type, f: Field) -> tuple[Any, bool]:
    """(value, fresh): when fresh, value is a factory called per instance."""
    if f.default is not MISSING:
        return f.default, False
    if f.type.startswith("[]"):
        return list, True
    if f.type in p.FIXED_FORMATS:
        return _FIXED_DEFAULTS.get(f.type, 0), False
    if f.type in _SCALAR_DEFAULTS:
        return _SCALAR_DEFAULTS[f.type], False
    return _struct_class(scope, f.type), True


def _build_defaults(cls: type) -> list:
    cls._defaults = [(f.name, *_default(cls._scope, f)) for f in cls.FIELDS]
    return cls._defaults


# ---- plans -------------------------------------------------------------------------------------------------------

class _Plan:
    __slots__ = ("cls", "defaults", "read_steps", "write_steps")

    def __init__(self, cls, defaults, read_steps, write_steps):
        self.cls = cls
        self.defaults = defaults
        self.read_steps = read_steps
        self.write_steps = write_steps

    def read(self, buf, pos):
        obj = self.cls.__new__(self.cls)
        for name, value, fresh in self.defaults:
            setattr(obj, name, value() if fresh else value)
        obj._unknown_tagged = ()
        for step in self.read_steps:
            pos = step(buf, pos, obj)
        return obj, pos

    def write(self, out, obj):
        for step in self.write_steps:
            step(out, obj)


def _compile(cls: type, version: int) -> _Plan:
    scope = cls._scope
    if not scope.MIN_VERSION <= version <= scope.MAX_VERSION:
        raise UnsupportedVersion(f"{cls.__qualname__} supports versions {scope.MIN_VERSION}-{scope.MAX_VERSION}, "
                                 f"not {version}")
    flexible = scope.FLEXIBLE_MIN is not None and version >= scope.FLEXIBLE_MIN
    defaults = {f.name: _default(scope, f) for f in cls.FIELDS}
    regular, tagged = [], []
    for f in cls.FIELDS:
        if version not in parse_versions(f.versions):
            continue
        if flexible and version in parse_versions(f.tagged):
            tagged.append(f)
        else:
            regular.append(f)
            del defaults[f.name]  # always read; no need to pre-set
    read_steps, write_steps = _regular_steps(scope, regular, version, flexible)
    if flexible:
        read_step, write_step = _tagged_steps(scope, tagged, version)
        read_steps.append(read_step)
        write_steps.append(write_step)
    plan = _Plan(cls, [(n, *d) for n, d in defaults.items()], read_steps, write_steps)
    cls._plans[version] = plan
    return plan


def _regular_steps(scope, fields, version, flexible):
    read_steps, write_steps = [], []
    run = []

    def flush_run():
        if run:
            read_steps.append(_fixed_read_step(run))
            write_steps.append(_fixed_write_step(run))
            run.clear()

    for f in fields:
        if f.type in p.FIXED_FORMATS:
            run.append(f)
            continue
        flush_run()
        read, write = _value_codec(scope, f, version, flexible)
        read_steps.append(_value_read_step(f.name, read))
        write_steps.append(_value_write_step(f.name, write))
    flush_run()
    return read_steps, write_steps


def _fixed_read_step(fields):
    s = struct.Struct(">" + "".join(p.FIXED_FORMATS[f.type] for f in fields))
    unpack, size = s.unpack_from, s.size
    names = tuple(f.name for f in fields)
    if len(names) == 1:
        name = names[0]

        def read_one(buf, pos, obj):
            setattr(obj, name, unpack(buf, pos)[0])
            return pos + size
        return read_one

    def read_run(buf, pos, obj):
        for name, value in zip(names, unpack(buf, pos)):
            setattr(obj, name, value)
        return pos + size
    return read_run


def _fixed_write_step(fields):
    pack = struct.Struct(">" + "".join(p.FIXED_FORMATS[f.type] for f in fields)).pack
    get = attrgetter(*(f.name for f in fields))
    if len(fields) == 1:
        return lambda out, obj: out.append(pack(get(obj)))
    return lambda out, obj: out.append(pack(*get(obj)))


def _value_read_step(name, read):
    def step(buf, pos, obj):
        value, pos = read(buf, pos)
        setattr(obj, name, value)
        return pos
    return step


def _value_write_step(name, write):
    get = attrgetter(name)
    return lambda out, obj: write(out, get(obj))


def _tagged_steps(scope, fields, version):
    fields = sorted(fields, key=lambda f: f.tag)
    codecs = {f.tag: (f.name, *_value_codec(scope, f, version, True)) for f in fields}
    known = [(f.tag, f.name, _comparable_default(scope, f), codecs[f.tag][2]) for f in fields]
    where = f"{scope.__qualname__} v{version} tagged field"

    def read_tagged(buf, pos, obj):
        raw, pos = p.read_tagged_fields(buf, pos)
        unknown = []
        for tag, data in raw:
            codec = codecs.get(tag)
            if codec is None:
                unknown.append((tag, bytes(data)))
                continue
            name, read, _ = codec
            value, end = read(data, 0)
            if end != len(data):
                raise MalformedMessage(f"{where} {tag}: size {len(data)} but value used {end} bytes")
            setattr(obj, name, value)
        if unknown:
            obj._unknown_tagged = tuple(unknown)
        return pos

    def write_tagged(out, obj):
        items = []
        for tag, name, default, write in known:
            value = getattr(obj, name)
            if value != default:
                parts = []
                write(parts, value)
                items.append((tag, b"".join(parts)))
        if obj._unknown_tagged:
            items.extend(obj._unknown_tagged)
            items.sort(key=lambda item: item[0])
        elif not items:
            out.append(_NO_TAGGED_FIELDS)
            return
        p.write_tagged_fields(out, items)
    return read_tagged, write_tagged


def _comparable_default(scope, f):
    value, fresh = _default(scope, f)
    return value() if fresh else value


# ---- value codecs: (read(buf, pos) -> (value, pos), write(out, value)) --------------------------------------------

def _value_codec(scope, f: Field, version: int, flexible: bool):
    nullable = version in parse_versions(f.nullable)
    return _type_codec(scope, f.type, version, flexible, nullable)


def _type_codec(scope, type_name, version, flexible, nullable):
    if type_name.startswith("[]"):
        return _array_codec(scope, type_name[2:], version, flexible, nullable)
    if type_name in p.FIXED_FORMATS:
        return _fixed_codec(p.FIXED_FORMATS[type_name])
    if type_name == "string":
        return p.string_reader(flexible, nullable), p.string_writer(flexible, nullable)
    if type_name == "bytes":
        read = p.bytes_reader(flexible, nullable)

        def read_copy(buf, pos):
            value, pos = read(buf, pos)
            return (None if value is None else bytes(value)), pos
        return read_copy, p.bytes_writer(flexible, nullable)
    if type_name == "records":
        return p.bytes_reader(flexible, nullable), p.bytes_writer(flexible, nullable)
    if type_name == "uuid":
        return p.read_uuid, p.write_uuid
    return _struct_codec(_struct_class(scope, type_name), version, nullable)


def _fixed_codec(fmt):
    s = struct.Struct(">" + fmt)
    unpack, pack, size = s.unpack_from, s.pack, s.size

    def read(buf, pos):
        return unpack(buf, pos)[0], pos + size
    return read, lambda out, value: out.append(pack(value))


def _struct_codec(cls, version, nullable):
    plan = cls._plans.get(version) or _compile(cls, version)
    if not nullable:
        return plan.read, plan.write

    def read(buf, pos):
        marker = p.INT8.unpack_from(buf, pos)[0]
        return (None, pos + 1) if marker < 0 else plan.read(buf, pos + 1)

    def write(out, value):
        if value is None:
            out.append(b"\xff")
        else:
            out.append(b"\x01")
            plan.write(out, value)
    return read, write


def _array_codec(scope, elem_type, version, flexible, nullable):
    read_len, pack_len = p.length_codec(flexible, True)
    null = pack_len(-1)
    what = f"[]{elem_type}"
    if elem_type in p.FIXED_FORMATS:
        fmt = p.FIXED_FORMATS[elem_type]

        def read_items(buf, pos, n):
            s = struct.Struct(f">{n}{fmt}")
            return list(s.unpack_from(buf, pos)), pos + s.size

        def write_items(out, items):
            out.append(struct.pack(f">{len(items)}{fmt}", *items))
    else:
        read_elem, write_elem = _type_codec(scope, elem_type, version, flexible, False)

        def read_items(buf, pos, n):
            items = []
            for _ in range(n):
                item, pos = read_elem(buf, pos)
                items.append(item)
            return items, pos

        def write_items(out, items):
            for item in items:
                write_elem(out, item)

    def read(buf, pos):
        n, pos = read_len(buf, pos)
        if n < 0:
            return p.null_length(n, nullable, what), pos
        if n > len(buf) - pos:
            raise p.past_end(what, n, buf, pos)
        return read_items(buf, pos, n)

    def write(out, items):
        if items is None:
            if not nullable:
                raise ValueError(f"None for non-nullable {what}")
            out.append(null)
            return
        out.append(pack_len(len(items)))
        write_items(out, items)
    return read, write
