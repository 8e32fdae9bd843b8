"""Fuzz: random bytes and mutated capture frames either decode or raise MalformedMessage, quickly."""

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from protocol.apis import API_BY_KEY
from protocol.errors import MalformedMessage
from protocol.headers import decode_request_header, decode_response_header

CAPTURES = Path(__file__).resolve().parents[3] / "shared/kafka-protocol/captures/librdkafka-2.16.0-client-and-mock.jsonl"
FRAMES = ([json.loads(line) for line in CAPTURES.read_text().splitlines() if line.strip()]
          if CAPTURES.exists() else [])
REQUEST_BODIES = [bytes.fromhex(f["hex"])[4:] for f in FRAMES if f["dir"] == "request"]
RESPONSES = [(f["api_key"], f["api_version"], bytes.fromhex(f["hex"])[4:]) for f in FRAMES if f["dir"] == "response"]
FUZZ = settings(max_examples=400, deadline=200, suppress_health_check=[HealthCheck.too_slow])


def decode_request(body: bytes) -> None:
    """What the gateway does with a frame body; only MalformedMessage may escape."""
    try:
        header, offset = decode_request_header(body)
        spec = API_BY_KEY[header.api_key]
        if spec.min_version <= header.api_version <= spec.max_version:  # else: answer UNSUPPORTED_VERSION
            spec.request.decode(memoryview(body)[offset:], header.api_version)
    except MalformedMessage:
        pass


def decode_response(api_key: int, api_version: int, body: bytes) -> None:
    try:
        offset = decode_response_header(body, api_key, api_version)[1]
        API_BY_KEY[api_key].response.decode(memoryview(body)[offset:], api_version)
    except MalformedMessage:
        pass


@st.composite
def mutated(draw, originals):
    data = bytearray(draw(st.sampled_from(originals)))
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "truncate":
            del data[i:]
        elif op == "delete" and data:
            del data[i]
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=4))
        elif data:
            data[i] = draw(st.integers(0, 255)) if op == "set" else data[i] ^ (1 << draw(st.integers(0, 7)))
    return bytes(data)


@FUZZ
@given(st.binary(max_size=512))
def test_random_request_bytes(body):
    decode_request(body)


@FUZZ
@given(st.sampled_from(sorted(API_BY_KEY)), st.integers(0, 20), st.binary(max_size=256))
def test_random_request_bodies_for_every_api(api_key, api_version, payload):
    header = api_key.to_bytes(2, "big") + api_version.to_bytes(2, "big") + b"\x00\x00\x00\x01\xff\xff\x00"
    decode_request(header + payload)


@FUZZ
@given(mutated(REQUEST_BODIES or [b""]))
def test_mutated_capture_requests(body):
    decode_request(body)


@FUZZ
@given(st.data())
def test_mutated_capture_responses(data):
    if not RESPONSES:
        return
    api_key, api_version, body = data.draw(st.sampled_from(RESPONSES))
    decode_response(api_key, api_version, data.draw(mutated([body])))
