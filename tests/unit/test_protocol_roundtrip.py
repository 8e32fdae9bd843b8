"""encode -> decode -> equal, for every version of every request and response, with every field populated."""

import itertools
from uuid import UUID

import pytest

from protocol.apis import API_BY_KEY
from protocol.codec import parse_versions

UNKNOWN_TAG = 1000  # larger than any tag a schema uses
_FIXED_VALUES = {"int8": lambda n: -(n % 100) - 1, "int16": lambda n: -300 - n, "int32": lambda n: 123_456 + n,
                 "int64": lambda n: 2**40 + n, "uint16": lambda n: 65_000 + n % 500,
                 "uint32": lambda n: 4_000_000_000 + n, "float64": lambda n: n + 0.5, "bool": lambda n: True}


def _value(scope, type_name, version, counter, nullable, nulls):
    if nullable and nulls:
        return None
    if type_name.startswith("[]"):
        return [_value(scope, type_name[2:], version, counter, False, nulls) for _ in range(2)]
    n = next(counter)
    if type_name in _FIXED_VALUES:
        return _FIXED_VALUES[type_name](n)
    if type_name == "string":
        return f"s{n}-é"
    if type_name in ("bytes", "records"):
        return bytes([n % 256]) * (n % 5 + 1)
    if type_name == "uuid":
        return UUID(int=n * 0x1234567890ABCDEF + 1)
    return populate(getattr(scope, type_name), version, counter, nulls)


def populate(cls, version, counter, nulls=False):
    """An instance of cls with every field present in ``version`` set to a non-default value (or None if nulls)."""
    obj = cls()
    for f in cls.FIELDS:
        if version in parse_versions(f.versions):
            nullable = version in parse_versions(f.nullable)
            setattr(obj, f.name, _value(cls._scope, f.type, version, counter, nullable, nulls))
    return obj


def _cases():
    for spec in API_BY_KEY.values():
        for version in range(spec.min_version, spec.max_version + 1):
            for cls in (spec.request, spec.response):
                yield pytest.param(cls, version, id=f"{cls.__name__}-v{version}")


@pytest.mark.parametrize("cls,version", list(_cases()))
def test_round_trip(cls, version):
    for nulls in (False, True):
        message = populate(cls, version, itertools.count(1), nulls)
        if cls.FLEXIBLE_MIN is not None and version >= cls.FLEXIBLE_MIN:
            message._unknown_tagged = ((UNKNOWN_TAG, b"kept"),)
        encoded = message.encode(version)
        decoded = cls.decode(encoded, version)
        assert decoded == message
        assert decoded.encode(version) == encoded
    empty = cls()
    assert cls.decode(empty.encode(version), version) == empty


def test_every_api_has_both_classes():
    # every API protocol/schemas.toml names: the classic and share APIs, the ACL APIs, the SCRAM credential APIs,
    # the controller's and the quorum's APIs, the transaction APIs, the streams-group APIs, the client-quota APIs,
    # reassignment and elections (43, 45, 46), DescribeLogDirs (35), AddRaftVoter and RemoveRaftVoter (80, 81)
    assert len(API_BY_KEY) == 41 + 3 + 2 + 3 + 4 + 8 + 2 + 2 + 3 + 1 + 2
    for spec in API_BY_KEY.values():
        assert (spec.request.API_KEY, spec.response.API_KEY) == (spec.key, spec.key)
        assert spec.request.__name__ == f"{spec.name}Request"
