"""A small blocking Kafka client for Kray's tools: one connection, ApiVersions negotiation, and
typed requests from `protocol.messages`. No Python Kafka library speaks the share-group admin APIs,
so Kray's own tools use this.

Security, as Kafka's tools take it from `--command-config client.properties` (Java properties):
`security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), `sasl.mechanism` PLAIN,
SCRAM-SHA-256 or SCRAM-SHA-512 with `sasl.jaas.config` (the PlainLoginModule's or ScramLoginModule's
username/password; librdkafka's `sasl.username` and `sasl.password` also work), TLS from PEM files: `ssl.truststore.location` (or librdkafka's
`ssl.ca.location`), a client certificate from `ssl.keystore.location` (key and chain in one PEM,
`ssl.key.password`) or `ssl.certificate.location` + `ssl.key.location`;
`ssl.endpoint.identification.algorithm=` (empty) skips the host name check. `configure()` sets
them for every connection the process opens (the tools connect to several brokers).
"""
from __future__ import annotations

import itertools
import re
import socket
import ssl
from typing import Any

from protocol.apis import API_BY_KEY
from protocol.framing import FrameDecoder
from protocol.headers import RequestHeader, decode_response_header, encode_request
from protocol.messages import (ApiVersionsRequest, ApiVersionsResponse, SaslAuthenticateRequest,
                               SaslHandshakeRequest)
from actors.security.scram import ScramClient, ScramClientError, ScramMechanism

RESPONSE_BYTES_MAX = 100 * 1024 * 1024
# with several bootstrap addresses, how long connecting to one may take before the next is tried
# (a host cut off from the network drops the connection attempt silently)
CONNECT_TIMEOUT_S_EACH = 10.0
RECV_CHUNK_BYTES = 256 * 1024


class AdminError(RuntimeError):
    """The broker could not be reached or answered something unusable; the message says what to try."""


def parse_bootstrap_servers(bootstrap: str) -> list[tuple[str, int]]:
    """Every HOST:PORT of a comma-separated bootstrap list, in order."""
    addresses = []
    for part in bootstrap.split(","):
        if not part.strip():
            continue
        host, sep, port = part.strip().rpartition(":")
        if not sep or not port.isdigit():
            raise AdminError(f"--bootstrap-server {bootstrap!r}: {part.strip()!r} is not HOST:PORT "
                             f"(example: 127.0.0.1:9092,127.0.0.2:9092)")
        addresses.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not addresses:
        raise AdminError(f"--bootstrap-server {bootstrap!r} names no broker (example: 127.0.0.1:9092)")
    return addresses


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    """The first HOST:PORT of a bootstrap list."""
    return parse_bootstrap_servers(bootstrap)[0]


COMMAND_CONFIG_HELP = ("client properties (Java .properties, as Kafka's tools): security.protocol, sasl.mechanism "
                       "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), sasl.jaas.config, ssl.truststore.location, "
                       "ssl.keystore.location (PEM)")
CLIENT_PROPERTIES: dict[str, str] = {}  # --command-config: every connection of this process uses them
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:\\.|[^"\\])*)"')


def load_properties(path: str) -> dict[str, str]:
    """A Java .properties file as Kafka's tools read `--command-config` (key=value or key: value,
    # and ! comments, backslash line continuations)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise AdminError(f"--command-config {path}: {e}") from None
    props: dict[str, str] = {}
    for line in re.sub(r"\\\n\s*", "", text).splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"([^=:\s]+)\s*[=:\s]?\s*(.*)$", line)
        key, value = match.group(1), match.group(2)
        props[key] = value
    return props


def configure(properties: dict[str, str]) -> None:
    """Use these client properties for every connection from now on (checked here)."""
    protocol = properties.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise AdminError(f"security.protocol={protocol}: use one of {', '.join(SECURITY_PROTOCOLS)}")
    if protocol.startswith("SASL"):
        mechanism = properties.get("sasl.mechanism", "GSSAPI").upper()
        if mechanism not in SASL_MECHANISMS:
            raise AdminError(f"sasl.mechanism={mechanism}: Kray's tools log in with {', '.join(SASL_MECHANISMS)}")
        _sasl_credentials(properties)
    CLIENT_PROPERTIES.clear()
    CLIENT_PROPERTIES.update(properties)


def _sasl_mechanism(properties: dict[str, str]) -> str:
    return properties.get("sasl.mechanism", "PLAIN").upper()


def _sasl_credentials(properties: dict[str, str]) -> tuple[str, str]:
    if "sasl.username" in properties:
        return properties["sasl.username"], properties.get("sasl.password", "")
    options = dict(_JAAS_OPTION.findall(properties.get("sasl.jaas.config", "")))
    if "username" not in options:
        mechanism = _sasl_mechanism(properties)
        raise AdminError(f'SASL/{mechanism} needs sasl.jaas.config={LOGIN_MODULES.get(mechanism, "…")} '
                         f'required username="…" password="…";')
    unescape = lambda v: re.sub(r"\\(.)", r"\1", v)  # noqa: E731
    return unescape(options["username"]), unescape(options.get("password", ""))


def librdkafka_config(properties: dict[str, str] | None = None) -> dict[str, str]:
    """The same security settings for confluent-kafka (librdkafka's names)."""
    properties = CLIENT_PROPERTIES if properties is None else properties
    out: dict[str, str] = {}
    protocol = properties.get("security.protocol", "PLAINTEXT").upper()
    if protocol != "PLAINTEXT":
        out["security.protocol"] = protocol
    if protocol.startswith("SASL"):
        out["sasl.mechanism"] = _sasl_mechanism(properties)
        out["sasl.username"], out["sasl.password"] = _sasl_credentials(properties)
    if protocol.endswith("SSL"):
        ca = properties.get("ssl.truststore.location") or properties.get("ssl.ca.location")
        if ca:
            out["ssl.ca.location"] = ca
        keystore = properties.get("ssl.keystore.location")
        certificate = properties.get("ssl.certificate.location") or keystore
        if certificate:
            out["ssl.certificate.location"] = certificate
            out["ssl.key.location"] = properties.get("ssl.key.location") or keystore or certificate
        if properties.get("ssl.key.password"):
            out["ssl.key.password"] = properties["ssl.key.password"]
        if properties.get("ssl.endpoint.identification.algorithm", "https") == "":
            out["ssl.endpoint.identification.algorithm"] = "none"
    return out


def _client_ssl_context(properties: dict[str, str]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=properties.get("ssl.truststore.location")
                                         or properties.get("ssl.ca.location"))
    if properties.get("ssl.endpoint.identification.algorithm", "https") == "":
        context.check_hostname = False
    password = properties.get("ssl.key.password")
    if properties.get("ssl.keystore.location"):
        context.load_cert_chain(properties["ssl.keystore.location"], password=password)
    elif properties.get("ssl.certificate.location"):
        context.load_cert_chain(properties["ssl.certificate.location"], properties.get("ssl.key.location"),
                                password=password)
    return context


class KafkaConnection:
    def __init__(self, bootstrap: str, *, client_id: str = "kray-admin", timeout_s: float = 30.0,
                 properties: dict[str, str] | None = None):
        """Connects to the first broker of the comma-separated `bootstrap` list that answers
        (ApiVersions), trying each in turn, as Kafka's clients use every bootstrap server."""
        addresses = parse_bootstrap_servers(bootstrap)
        self.client_id = client_id
        properties = CLIENT_PROPERTIES if properties is None else properties
        protocol = properties.get("security.protocol", "PLAINTEXT").upper()
        connect_timeout_s = timeout_s if len(addresses) == 1 else min(timeout_s, CONNECT_TIMEOUT_S_EACH)
        failures = []
        for address in addresses:
            self.address = address
            try:
                self.sock = socket.create_connection(address, timeout=connect_timeout_s)
            except OSError as e:
                failures.append(f"{address[0]}:{address[1]}: {e}")
                continue
            try:
                self.sock.settimeout(timeout_s)
                if protocol in ("SSL", "SASL_SSL"):
                    self.sock = _client_ssl_context(properties).wrap_socket(self.sock, server_hostname=address[0])
                self.decoder = FrameDecoder(RESPONSE_BYTES_MAX)
                self.correlation_ids = itertools.count(1)
                self.versions = self._negotiate()
                break
            except (OSError, ssl.SSLError, AdminError) as e:
                self.sock.close()
                failures.append(f"{address[0]}:{address[1]}: {e}")
        else:
            raise AdminError(f"cannot connect to {'; '.join(failures)} ({protocol}); is the broker running "
                             f"(kray start), and is this its {protocol} listener?")
        if protocol.startswith("SASL"):
            self._login(_sasl_mechanism(properties), *_sasl_credentials(properties))

    def _login(self, mechanism: str, username: str, password: str) -> None:
        handshake = self._call(SaslHandshakeRequest(mechanism=mechanism), 17, 1)
        if handshake.error_code:
            raise AdminError(f"the broker refused SASL/{mechanism} (enabled: {', '.join(handshake.mechanisms)}); "
                             f"set sasl.mechanism to one of those")
        scram = ScramMechanism.from_name(mechanism)
        if scram is None:
            self._authenticate(mechanism, username, f"\0{username}\0{password}".encode())
            return
        client = ScramClient(scram, username, password)
        try:
            server_first = self._authenticate(mechanism, username, client.first_message())
            server_final = self._authenticate(mechanism, username, client.final_message(server_first))
            client.verify(server_final)
        except ScramClientError as e:
            raise AdminError(f"SASL/{mechanism} login as {username} failed: {e}") from None

    def _authenticate(self, mechanism: str, username: str, auth_bytes: bytes) -> bytes:
        answer = self._call(SaslAuthenticateRequest(auth_bytes=auth_bytes), 36, 2)
        if answer.error_code:
            raise AdminError(f"SASL/{mechanism} login as {username} failed: {answer.error_message}")
        return bytes(answer.auth_bytes or b"")

    def _negotiate(self) -> dict[int, tuple[int, int]]:
        # Kafka refuses an empty ClientSoftwareName (INVALID_REQUEST, no api keys): name the tool
        response = self._call(ApiVersionsRequest(client_software_name="kray-admin", client_software_version="0.1.0"),
                              18, 3)
        if response.error_code == 35:  # an older broker: ask again in v0
            response = self._call(ApiVersionsRequest(), 18, 0)
        return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    def version_for(self, api_key: int) -> int:
        spec = API_BY_KEY[api_key]
        if api_key not in self.versions:
            raise AdminError(f"the broker does not support {spec.name}")
        lo, hi = self.versions[api_key]
        version = min(hi, spec.max_version if not spec.latest_version_unstable else spec.max_version - 1)
        if version < max(lo, spec.min_version):
            raise AdminError(f"no common version of {spec.name} with the broker")
        return version

    def send(self, request: Any, version: int | None = None) -> Any:
        version = self.version_for(request.API_KEY) if version is None else version
        return self._call(request, request.API_KEY, version)

    def _call(self, request: Any, api_key: int, version: int) -> Any:
        correlation_id = next(self.correlation_ids)
        header = RequestHeader(api_key, version, correlation_id, self.client_id)
        self.sock.sendall(encode_request(header, request.encode(version)))
        body = self._receive()
        got_id, offset = decode_response_header(body, api_key, version)
        if got_id != correlation_id:
            raise AdminError(f"response correlation id {got_id} does not match request {correlation_id}")
        response_cls = API_BY_KEY[api_key].response
        if api_key == 18 and version > 0 and len(body) - offset >= 2 and body[offset:offset + 2] == b"\x00\x23":
            return ApiVersionsResponse.decode(body[offset:], 0)  # UNSUPPORTED_VERSION comes back as v0
        return response_cls.decode(body[offset:], version)

    def _receive(self) -> memoryview:
        while True:
            chunk = self.sock.recv(RECV_CHUNK_BYTES)
            if not chunk:
                raise AdminError("the broker closed the connection")
            frames = self.decoder.feed(chunk)
            if frames:
                return memoryview(frames[0])

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "KafkaConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
