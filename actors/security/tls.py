"""TLS for Kray's listeners, read from a broker config as Kafka reads it: the server context a TLS
listener serves with, the client context a broker connects to another broker's TLS listener with,
and `listener_value`, the per-listener override of a key (`listener.name.<listener>.<key>`). The
rest of a listener's security (SASL, the authorizer) is settings.py.
"""
from __future__ import annotations

import os
import ssl
import tempfile
from typing import Any, Mapping

LISTENER_PREFIX = "listener.name."
CLIENT_AUTH_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class SecurityConfigError(ValueError):
    """A security config Kray cannot serve; the message names the key and what to set."""


def listener_value(config: Mapping[str, Any], listener_name: str, key: str, default: Any = None) -> Any:
    """`listener.name.<listener>.<key>` if set (listener name in any case), else `key`, else default."""
    wanted = f"{LISTENER_PREFIX}{listener_name.lower()}.{key}"
    for name, value in config.items():
        if value is not None and name.startswith(LISTENER_PREFIX) and name.lower() == wanted \
                and name[len(LISTENER_PREFIX) + len(listener_name) + 1:] == key:
            return value
    value = config.get(key)
    return default if value is None else value


def broker_client_ssl_context(config: Mapping[str, Any], name: str) -> ssl.SSLContext:
    """How a broker connects, as a client, to another broker's TLS listener `name` (its followers
    fetching): it trusts the listener's truststore, checks the host name unless
    ssl.endpoint.identification.algorithm is empty (Kafka's rule), and shows the listener's own
    keystore as its client certificate (for ssl.client.auth=requested/required)."""
    def get(key, default=None):
        return listener_value(config, name, key, default)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    truststore, certificates = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    if truststore:
        context.load_verify_locations(cafile=str(truststore))
    elif certificates:
        context.load_verify_locations(cadata=str(certificates))
    else:
        context.load_default_certs()
    context.check_hostname = bool(str(get("ssl.endpoint.identification.algorithm", "https") or "").strip())
    password = get("ssl.key.password")
    location = get("ssl.keystore.location")
    if location:
        context.load_cert_chain(str(location), password=str(password) if password is not None else None)
    return context


def server_ssl_context(config: Mapping[str, Any], name: str, client_auth: str = "none") -> ssl.SSLContext:
    def get(key, default=None):
        return listener_value(config, name, key, default)

    for kind in ("keystore", "truststore"):
        store_type = str(get(f"ssl.{kind}.type", "JKS")).upper()
        if store_type != "PEM" and (kind == "keystore" or client_auth != "none"):
            raise SecurityConfigError(
                f"listener {name}: ssl.{kind}.type={store_type}: Kray reads PEM {kind}s only; set "
                f"ssl.{kind}.type=PEM with ssl.{kind}.location" +
                (" or ssl.keystore.certificate.chain and ssl.keystore.key" if kind == "keystore" else
                 " or ssl.truststore.certificates"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [v.strip() for v in str(get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3")).split(",") if v.strip()]
    known = sorted(TLS_VERSIONS[v] for v in versions if v in TLS_VERSIONS)
    if not known:
        raise SecurityConfigError(f"listener {name}: ssl.enabled.protocols={','.join(versions)}: enable TLSv1.2 "
                                  f"and/or TLSv1.3")
    context.minimum_version, context.maximum_version = known[0], known[-1]
    password = get("ssl.key.password")
    location, chain, key = get("ssl.keystore.location"), get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    if location and (chain or key):
        raise SecurityConfigError(f"listener {name}: set either ssl.keystore.location or "
                                  f"ssl.keystore.certificate.chain and ssl.keystore.key, not both")
    if location:
        context.load_cert_chain(str(location), password=str(password) if password is not None else None)
    elif chain and key:
        with tempfile.TemporaryDirectory(prefix="kray-pem-") as directory:  # ssl loads PEM from files only
            paths = []
            for label, text in (("chain", chain), ("key", key)):
                path = os.path.join(directory, f"{label}.pem")
                with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                    f.write(str(text))
                paths.append(path)
            context.load_cert_chain(paths[0], paths[1], password=str(password) if password is not None else None)
    else:
        raise SecurityConfigError(f"listener {name} uses TLS: set ssl.keystore.type=PEM and ssl.keystore.location "
                                  f"(a PEM file with the private key and certificate chain), or "
                                  f"ssl.keystore.certificate.chain and ssl.keystore.key")
    context.verify_mode = CLIENT_AUTH_MODES[client_auth]
    if client_auth != "none":
        trusted_file, trusted_text = get("ssl.truststore.location"), get("ssl.truststore.certificates")
        if trusted_file:
            context.load_verify_locations(cafile=str(trusted_file))
        if trusted_text:
            context.load_verify_locations(cadata=str(trusted_text))
        if not trusted_file and not trusted_text:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return context
