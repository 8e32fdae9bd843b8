"""Kafka's listener configs: `listeners`, `advertised.listeners`, `listener.security.protocol.map`,
`inter.broker.listener.name` (or `security.inter.broker.protocol`), checked as Kafka checks them.

    listeners=SASL_SSL://0.0.0.0:9093,INTERNAL://[::1]:9094,PLAINTEXT://:9092
    listener.security.protocol.map=INTERNAL:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT

Listener names are upper-cased (Kafka's ListenerName.normalised) and each must be in the map,
which replaces Kafka's default map when set. An empty host binds every interface (and, when
advertised, stands for this machine's host name, which the shell fills in); IPv6 addresses are
written in brackets. Listener names are unique, and so are ports, except that two listeners may
share one port when one binds an IPv4 address and the other an IPv6 address (port 0, "any free
port", never clashes). `advertised.listeners` defaults to `listeners`, may repeat ports, may only
name listeners of `listeners`, and may not advertise a meta-address (0.0.0.0 or ::).
Beyond Kafka: a port must be 0..65535 and a listener may appear only once in the map.
"""
from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass, field
from typing import Any, Mapping

LISTENERS = "listeners"
ADVERTISED_LISTENERS = "advertised.listeners"
LISTENER_SECURITY_PROTOCOL_MAP = "listener.security.protocol.map"
INTER_BROKER_LISTENER_NAME = "inter.broker.listener.name"
SECURITY_INTER_BROKER_PROTOCOL = "security.inter.broker.protocol"

LISTENER_SECURITY_PROTOCOL_MAP_DEFAULT = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
SECURITY_INTER_BROKER_PROTOCOL_DEFAULT = "PLAINTEXT"
PORT_MAX = 65535
NON_ROUTABLE_HOSTS = ("0.0.0.0", "::")


class ListenerConfigError(ValueError):
    """A listener config Kafka would refuse; the message names the key and what to change."""


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)

    @classmethod
    def parse(cls, name: str, config_name: str) -> SecurityProtocol:
        try:
            return cls(name.strip().upper())
        except ValueError:
            raise ListenerConfigError(f"Invalid security protocol `{name.strip()}` defined in {config_name}: "
                                      f"use one of {', '.join(p.value for p in cls)}") from None


@dataclass(frozen=True)
class Listener:
    name: str  # upper case, as Kafka normalises it
    host: str  # "" = every interface
    port: int
    security_protocol: SecurityProtocol

    @property
    def binds_every_interface(self) -> bool:
        return self.host in ("",) + NON_ROUTABLE_HOSTS

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_security_protocol_map(text: str, config_name: str = LISTENER_SECURITY_PROTOCOL_MAP
                                ) -> dict[str, SecurityProtocol]:
    """`NAME:PROTOCOL,...` as Kafka's Csv.parseCsvMap reads it; names upper-cased."""
    mapping: dict[str, SecurityProtocol] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, colon, protocol = entry.partition(":")
        if not colon or not name.strip() or not protocol.strip():
            raise ListenerConfigError(f"Error parsing configuration property '{config_name}': entry {entry!r} "
                                      f"is not of the form LISTENER_NAME:SECURITY_PROTOCOL")
        name = name.strip().upper()
        if name in mapping:
            raise ListenerConfigError(f"{config_name} maps listener {name} twice: keep one entry")
        mapping[name] = SecurityProtocol.parse(protocol, config_name)
    return mapping


def _host_of(raw: str, entry: str, config_name: str) -> str:
    if raw.startswith("["):
        if not raw.endswith("]"):
            raise ListenerConfigError(f"{config_name}: {entry!r} opens '[' without closing it")
        host = raw[1:-1]
        try:
            if ipaddress.ip_address(host.split("%")[0]).version != 6:
                raise ValueError
        except ValueError:
            raise ListenerConfigError(f"{config_name}: {entry!r} has {host!r} in brackets, "
                                      f"which only an IPv6 address may use") from None
        return host
    if ":" in raw:
        raise ListenerConfigError(f"{config_name}: write an IPv6 address in brackets, as in "
                                  f"NAME://[::1]:9092, not {entry!r}")
    if any(not (c.isascii() and c.isalnum()) and c not in "-._" for c in raw):
        raise ListenerConfigError(f"{config_name}: {raw!r} in {entry!r} is not a host name or address")
    return raw


def _parse_entry(entry: str, protocol_map: Mapping[str, SecurityProtocol], config_name: str) -> Listener:
    name, sep, rest = entry.partition("://")
    if not sep or not name:
        raise ListenerConfigError(f"{config_name}: unable to parse {entry!r} to a broker endpoint; "
                                  f"write NAME://host:port, as in PLAINTEXT://localhost:9092")
    raw_host, colon, port_text = rest.rpartition(":")
    if not colon or not port_text.isdigit():
        raise ListenerConfigError(f"{config_name}: {entry!r} needs a port number after the last ':'")
    port = int(port_text)
    if port > PORT_MAX:
        raise ListenerConfigError(f"{config_name}: port {port} in {entry!r} is above {PORT_MAX}")
    name = name.upper()
    if name not in protocol_map:
        raise ListenerConfigError(f"{config_name}: no security protocol defined for listener {name}: add "
                                  f"{name}:<protocol> to {LISTENER_SECURITY_PROTOCOL_MAP} "
                                  f"(it maps {', '.join(protocol_map) or 'nothing'})")
    return Listener(name, _host_of(raw_host, entry, config_name), port, protocol_map[name])


def _ip_version(host: str) -> int | None:
    try:
        return ipaddress.ip_address(host.split("%")[0]).version
    except ValueError:
        return None


def _check_distinct(listeners: list[Listener], text: str, config_name: str, require_distinct_ports: bool) -> None:
    names = [listener.name for listener in listeners]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ListenerConfigError(f"{config_name}: each listener must have a different name; "
                                  f"{', '.join(repeated)} appears more than once in {text!r}")
    if not require_distinct_ports:
        return
    by_port: dict[int, list[Listener]] = {}
    for listener in listeners:
        if listener.port != 0:
            by_port.setdefault(listener.port, []).append(listener)
    for port, sharing in sorted(by_port.items()):
        if len(sharing) == 1:
            continue
        versions = sorted(_ip_version(listener.host) or 0 for listener in sharing)
        if versions != [4, 6]:
            raise ListenerConfigError(
                f"{config_name}: each listener must have a different port unless exactly two share it, one on "
                f"an IPv4 address and the other on an IPv6 address; port {port} is used by "
                f"{', '.join(listener.name for listener in sharing)}")


def parse_listener_list(text: str, protocol_map: Mapping[str, SecurityProtocol], *,
                        config_name: str = LISTENERS, require_distinct_ports: bool = True) -> list[Listener]:
    entries = [e.strip() for e in text.strip().split(",") if e.strip()]
    listeners = [_parse_entry(entry, protocol_map, config_name) for entry in entries]
    _check_distinct(listeners, text, config_name, require_distinct_ports)
    return listeners


@dataclass(frozen=True)
class ListenerConfig:
    listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...]
    inter_broker_listener_name: str
    security_protocol_map: dict[str, SecurityProtocol] = field(repr=False)

    def listener(self, name: str) -> Listener:
        return next(listener for listener in self.listeners if listener.name == name.upper())

    def advertised(self, name: str) -> Listener:
        """The address to give a client that came in on listener `name` (Metadata, FindCoordinator)."""
        return next(listener for listener in self.advertised_listeners if listener.name == name.upper())

    @property
    def inter_broker_listener(self) -> Listener:
        return self.listener(self.inter_broker_listener_name)


def _inter_broker_name(configs: Mapping[str, Any], protocol_map: Mapping[str, SecurityProtocol]) -> str:
    name = configs.get(INTER_BROKER_LISTENER_NAME)
    if name is not None:
        if SECURITY_INTER_BROKER_PROTOCOL in configs:
            raise ListenerConfigError(f"Only one of {INTER_BROKER_LISTENER_NAME} and "
                                      f"{SECURITY_INTER_BROKER_PROTOCOL} should be set.")
        name = str(name).strip().upper()
        if name not in protocol_map:
            raise ListenerConfigError(f"Listener with name {name} defined in {INTER_BROKER_LISTENER_NAME} not found "
                                      f"in {LISTENER_SECURITY_PROTOCOL_MAP}.")
        return name
    protocol = configs.get(SECURITY_INTER_BROKER_PROTOCOL, SECURITY_INTER_BROKER_PROTOCOL_DEFAULT)
    return SecurityProtocol.parse(str(protocol), SECURITY_INTER_BROKER_PROTOCOL).value


def set_keys(config: Mapping[str, Any]) -> dict[str, Any]:
    """The keys a broker config sets: unset keys dropped, and the default security.inter.broker.protocol when the listener is named
    (Kafka refuses both set; here the default is always present)."""
    out = {k: v for k, v in config.items() if v is not None}
    if "inter.broker.listener.name" in out and out.get("security.inter.broker.protocol") == "PLAINTEXT":
        out.pop("security.inter.broker.protocol")
    return out


def listener_config(configs: Mapping[str, Any]) -> ListenerConfig:
    """Read and check the listener keys of a broker config (Kafka's names, Kafka's defaults)."""
    protocol_map = parse_security_protocol_map(
        str(configs.get(LISTENER_SECURITY_PROTOCOL_MAP, LISTENER_SECURITY_PROTOCOL_MAP_DEFAULT)))
    listeners = parse_listener_list(str(configs.get(LISTENERS, "PLAINTEXT://:9092")), protocol_map)
    if not listeners:
        raise ListenerConfigError(f"{LISTENERS} is empty: name at least one, as in PLAINTEXT://:9092")
    advertised_text = configs.get(ADVERTISED_LISTENERS)
    advertised = listeners if advertised_text in (None, "") else parse_listener_list(
        str(advertised_text), protocol_map, config_name=ADVERTISED_LISTENERS, require_distinct_ports=False)
    names = [listener.name for listener in listeners]
    advertised_names = [listener.name for listener in advertised]
    unknown = [n for n in advertised_names if n not in names]
    if unknown:
        raise ListenerConfigError(f"{ADVERTISED_LISTENERS} listener names must be equal to or a subset of the ones "
                                  f"defined in {LISTENERS}. Found {','.join(advertised_names)}. The valid options "
                                  f"based on the current configuration are {','.join(names)}")
    for listener in advertised:
        if listener.host in NON_ROUTABLE_HOSTS:
            if advertised is listeners:  # advertised.listeners unset: Kafka advertises `listeners`
                raise ListenerConfigError(
                    f"{ADVERTISED_LISTENERS} is unset, so {LISTENERS} is advertised, and it cannot use the "
                    f"nonroutable meta-address {listener.host} ({listener.connection_string}). To listen on every "
                    f"interface and advertise each broker's own address, leave the host empty: "
                    f"{listener.name}://:{listener.port}; or set {ADVERTISED_LISTENERS}.")
            raise ListenerConfigError(f"{ADVERTISED_LISTENERS} cannot use the nonroutable meta-address "
                                      f"{listener.host} ({listener.connection_string}). Use a routable IP address "
                                      f"or host name.")
    inter_broker = _inter_broker_name(configs, protocol_map)
    if inter_broker not in advertised_names:
        raise ListenerConfigError(f"{INTER_BROKER_LISTENER_NAME} must be a listener name defined in "
                                  f"{ADVERTISED_LISTENERS}. The valid options based on currently configured "
                                  f"listeners are {','.join(advertised_names)}")
    return ListenerConfig(tuple(listeners), tuple(advertised), inter_broker, dict(protocol_map))
