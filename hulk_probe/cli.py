"""``hulk probe``: run the latency probe agent on this node.

Example (one agent impersonating node beijing-0 on a loopback address)::

    hulk probe --node-name beijing-0 --listen 127.0.0.2:7471 --metrics 127.0.0.2:7472 \\
        --kubeconfig .sandbox/kubeconfig --interval 2
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from hulk_probe import config as probe_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Measure the one-way latency (round trip / 2) of a 64-byte message to every peer "
        "node, publish it as this node's NodeLatency object, and export it on /metrics."
    )
    parser.epilog = (
        "Every flag can also be set through the environment variable shown in "
        "brackets; a flag on the command line wins."
    )
    probe_config.add_arguments(parser)


def _error(message: str) -> int:
    print(f"hulk probe: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    try:
        cfg = probe_config.resolve(args)
    except probe_config.ConfigError as exc:
        return _error(str(exc))
    logging.basicConfig(
        level=cfg.log_level,
        stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s hulk-probe[{cfg.node_name}] %(message)s",
    )
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retries: we log our own

    from hulk_probe.agent import Agent, StartupError

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await Agent(cfg).run(stop)

    try:
        asyncio.run(main())
    except (StartupError, OSError) as exc:  # OSError: typically an address already taken
        _error(str(exc))
        return 1
    except KeyboardInterrupt:
        pass
    return 0
