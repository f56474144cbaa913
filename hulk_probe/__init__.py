"""Hulk's latency probe: an agent on every node that measures the one-way time of a
64-byte message to each peer node and publishes it as a ``NodeLatency`` object.

The package must stay small: it never imports torch nor the planner, so the agent's
resident memory stays under 60 MB. See ``docs/probe.md``.
"""

from __future__ import annotations

GROUP = "hulk.dev"
VERSION = "v1alpha1"
PLURAL = "nodelatencies"
KIND = "NodeLatency"
API_VERSION = f"{GROUP}/{VERSION}"

#: Annotation on each Node object: where that node's probe agent answers echoes.
ADDRESS_ANNOTATION = "hulk.dev/probe-address"

#: Bytes in every probe message, as the Hulk paper measures (time to send 64 bytes).
PROBE_SIZE = 64

#: Content type of the JSON merge patches the agent sends.
MERGE_PATCH = "application/merge-patch+json"

#: (connect, read) seconds for every API call: a hung API server must not hang the agent.
API_TIMEOUT = (5, 15)
