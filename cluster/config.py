"""Loading a broker's configuration: a TOML file (`configs/local.toml` by default for
`kray start`) and `--override key=value` flags over Kafka's defaults. The schema (defaults,
validators, `TopicConfig`, `ShareGroupLimits`, `ConfigError`) is actors/config_schema.py.
"""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from actors.config_schema import BROKER_DEFAULTS, ConfigError, base_key, parse_override
from actors.controller.quorum_shell.settings import combined_voters

DEFAULT_LOCAL_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "local.toml"

# Kray's switch while the metadata quorum was new: true is accepted (and ignored), false refused
RETIRED_QUORUM_SWITCH = "kray.metadata.quorum.enable"


def load_broker_config(path: Path | None = None, overrides: list[str] = ()) -> dict[str, Any]:
    config = dict(BROKER_DEFAULTS)
    if path is not None:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
        config.update(doc.get("broker", doc))
    for text in overrides:
        key, value = parse_override(text)
        config[key] = value
    if str(config.pop(RETIRED_QUORUM_SWITCH, True)).strip().lower() != "true":
        raise ConfigError(f"{RETIRED_QUORUM_SWITCH}=false is no longer possible: the metadata quorum always keeps "
                          f"the metadata (an older Kray's metadata file is imported into it at the first start); "
                          f"remove the setting")
    unknown = sorted(k for k in set(config) - set(BROKER_DEFAULTS) if base_key(k) is None)
    if unknown:
        raise ConfigError(f"unknown broker config {', '.join(unknown)}; known keys: see configs/local.toml")
    try:
        combined_voters(config)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return config
