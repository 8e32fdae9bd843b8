"""The feature levels (KIP-584) every Kray broker supports and has finalized, as ApiVersions v3+ answers them.

Kafka keeps finalized levels in its metadata log (kafka-features.sh upgrades them); Kray's are fixed by its code:
a feature appears here once Kray implements what its level means. Kafka 4.4 finalizes streams.version=1, and a
Kafka Streams application with group.protocol=streams looks for it (KIP-1071, actors/group_coordinator/
streams_group.py).
"""
from __future__ import annotations

# feature name -> (min supported level, max supported level, finalized level)
FEATURES: dict[str, tuple[int, int, int]] = {
    "streams.version": (0, 1, 1),
}
FINALIZED_FEATURES_EPOCH = 0   # Kafka's is the metadata offset of the last change; Kray's levels never change
