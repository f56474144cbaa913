"""The wire protocol: 64-byte messages over a kept-open TCP connection, and its failures."""

from __future__ import annotations

import asyncio
import errno
import resource
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hulk_probe import PROBE_SIZE, echo
from hulk_probe.echo import MAGIC, EchoClient, EchoServer, ProbeError, make_message


def refused_address() -> tuple[str, int]:
    """A loopback port that nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()


Served = tuple[tuple[str, int], asyncio.AbstractEventLoop]


@pytest.fixture
def threaded_server() -> Iterator[Served]:
    """An EchoServer on its own thread and event loop, so one side can stall alone."""
    loop = asyncio.new_event_loop()
    server = EchoServer("127.0.0.1", 0)
    address = loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield address, loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.run_until_complete(server.close())
    loop.close()


def timed(client: EchoClient, stall: Callable[[], object]) -> tuple[float, float]:
    """(measured round trip, wall time) of one probe after a first one, ``stall`` between."""

    async def main() -> tuple[float, float]:
        for _ in range(3):  # connected, and the kernel's timestamping switched on (lazily)
            await client.round_trip()
            await asyncio.sleep(0.02)
        stall()
        start = time.perf_counter()
        rtt = await client.round_trip()
        return rtt, time.perf_counter() - start

    return asyncio.run(main())


def test_our_own_scheduling_delay_is_not_counted(threaded_server: Served) -> None:
    address, _ = threaded_server
    client = EchoClient(address, timeout_s=1.0)
    # our loop stalls 50 ms right after sending: the reply's kernel timestamp does not
    rtt, wall = timed(client, lambda: asyncio.get_running_loop().call_soon(time.sleep, 0.05))
    assert wall >= 0.05 and rtt < 0.005, (rtt, wall)


def test_the_peers_scheduling_delay_is_not_counted(threaded_server: Served) -> None:
    address, server_loop = threaded_server
    client = EchoClient(address, timeout_s=1.0)

    stalled = threading.Event()

    def stall() -> None:
        stalled.set()
        time.sleep(0.05)

    def stall_server() -> None:
        server_loop.call_soon_threadsafe(stall)
        stalled.wait(5)

    # the server reports its 50 ms of dwell, which the client takes off
    rtt, wall = timed(client, stall_server)
    assert wall >= 0.04 and rtt < 0.005, (rtt, wall)


def test_server_reassembles_split_messages_and_reports_dwell(threaded_server: Served) -> None:
    address, _ = threaded_server
    message = make_message(7)
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(message[:30])
        time.sleep(0.02)
        sock.sendall(message[30:])
        reply = b""
        while len(reply) < PROBE_SIZE:
            reply += sock.recv(PROBE_SIZE - len(reply))
    assert reply[:24] == message[:24] and reply[32:] == message[32:]
    (dwell,) = struct.unpack("!q", reply[24:32])
    assert 0 <= dwell < 10_000_000  # counted from the second part's arrival: well under 10 ms


def test_message_is_64_bytes_and_unique() -> None:
    a, b = make_message(1), make_message(2)
    assert len(a) == len(b) == PROBE_SIZE == 64
    assert a.startswith(MAGIC) and a != b


def test_round_trips_reuse_one_connection() -> None:
    async def main() -> None:
        server = EchoServer("127.0.0.3", 0)
        address = await server.start()
        client = EchoClient(address, timeout_s=1.0, local_host="127.0.0.2")
        rtts = [await client.round_trip() for _ in range(20)]
        assert server.connections == 1
        assert all(0 < rtt < 0.5 for rtt in rtts)
        client.close()
        await server.close()

    asyncio.run(main())


def test_past_the_cap_connections_that_never_probed_give_way_and_peers_keep_theirs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Any host could open connections until the probe ran out of memory, and its peers
    then took its node as unreachable (a security review). Past ``max_connections`` a new
    connection takes the place of one that never sent a probe message, else of one idle
    for ``IDLE_EVICT_S``, else it is closed: a flood never pushes out a peer that probes,
    however fast it comes (a review: by recency alone, it did between two probes)."""

    async def main() -> None:
        server = EchoServer("127.0.0.1", 0, max_connections=4)
        address = await server.start()
        peers = [EchoClient(address, timeout_s=1.0) for _ in range(2)]
        for p in peers:
            await p.round_trip()
        flood = []
        for _ in range(8):  # connections that send nothing, faster than the peers probe
            flood.append(socket.create_connection(address))
            await asyncio.sleep(0.02)
        assert server.connections == 4 and server.refused == 0
        for p in peers:  # served on their kept connections, none pushed out
            assert 0 < await p.round_trip() < 0.5
        for s in flood[:6]:  # the oldest idle ones gave way to the newer
            s.settimeout(1.0)
            assert await asyncio.to_thread(s.recv, 1) == b""
        # full of peers that probe: a new connection is closed, unless one is long idle
        more = [EchoClient(address, timeout_s=1.0) for _ in range(2)]
        for p in more:  # (they take the two idle places)
            await p.round_trip()
        late = socket.create_connection(address)
        await asyncio.sleep(0.05)
        late.settimeout(1.0)
        assert await asyncio.to_thread(late.recv, 1) == b"" and server.refused == 1
        monkeypatch.setattr(echo, "IDLE_EVICT_S", 0.0)
        again = EchoClient(address, timeout_s=1.0)
        assert 0 < await again.round_trip() < 0.5  # the longest idle peer gave way
        assert server.connections == 4
        for s in [*flood, late]:
            s.close()
        for p in [*peers, *more, again]:
            p.close()
        await server.close()

    asyncio.run(main())
    assert echo.connection_cap(100) == echo.MAX_CONNECTIONS
    assert echo.connection_cap(10_000) == 20_000


def test_refused_connection_is_a_connect_failure() -> None:
    async def main() -> None:
        client = EchoClient(refused_address(), timeout_s=1.0)
        with pytest.raises(ProbeError) as info:
            await client.round_trip()
        assert info.value.reason == "connect"

    asyncio.run(main())


def test_silent_peer_times_out_and_reconnects_next_time() -> None:
    async def main() -> None:
        accepted: list[asyncio.StreamWriter] = []

        async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append(writer)  # read nothing, answer nothing

        server = await asyncio.start_server(mute, "127.0.0.1", 0)
        client = EchoClient(server.sockets[0].getsockname(), timeout_s=0.2)
        for _ in range(2):
            with pytest.raises(ProbeError) as info:
                await client.round_trip()
            assert info.value.reason == "timeout"
        assert len(accepted) == 2  # the timed-out connection was dropped, a new one opened
        server.close()

    asyncio.run(main())


def test_garbled_echo_is_detected() -> None:
    async def liar(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.readexactly(PROBE_SIZE)
        writer.write(bytes(reversed(data)))
        await writer.drain()

    async def main() -> None:
        server = await asyncio.start_server(liar, "127.0.0.1", 0)
        client = EchoClient(server.sockets[0].getsockname(), timeout_s=1.0)
        with pytest.raises(ProbeError) as info:
            await client.round_trip()
        assert info.value.reason == "garbled"
        server.close()

    asyncio.run(main())


def test_the_servers_connections_find_a_vanished_peer_by_keepalive() -> None:
    """A peer gone without a FIN (a crash, a partition) kept its connection, and a
    descriptor, for good (a review): the server's side of each has TCP keepalive on."""

    async def main() -> tuple[int, int]:
        server = EchoServer("127.0.0.1", 0)
        address = await server.start()
        client = EchoClient(address, timeout_s=1.0)
        await client.round_trip()
        (conn,) = list(server._conns)
        on = conn.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
        idle = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
        client.close()
        await server.close()
        return on, idle

    assert asyncio.run(main()) == (1, echo.KEEPALIVE["TCP_KEEPIDLE"])


def test_out_of_descriptors_the_server_rests_and_accepts_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EMFILE on accept left the queued connection to wake the loop at once, again and
    again: a core spun (a review). The listener rests ACCEPT_PAUSE_S, then accepts."""
    monkeypatch.setattr(echo, "ACCEPT_PAUSE_S", 0.2)

    class Full:  # the listening socket of a process out of descriptors
        def __init__(self, real: socket.socket) -> None:
            self.real, self.calls = real, 0

        def accept(self) -> Any:
            self.calls += 1
            raise OSError(errno.EMFILE, "Too many open files")

        def fileno(self) -> int:
            return self.real.fileno()

    async def main() -> tuple[int, int, float]:
        server = EchoServer("127.0.0.1", 0)
        address = await server.start()
        real = server._listener
        assert real is not None
        full = Full(real)
        server._listener = full  # type: ignore[assignment]
        client = EchoClient(address, timeout_s=2.0)
        probe = asyncio.create_task(client.round_trip())
        await asyncio.sleep(0.1)
        calls = full.calls  # one wake-up, then the pause (before: hundreds)
        server._listener = real  # descriptors free again
        rtt = await probe  # accepted after the pause
        client.close()
        await server.close()
        return calls, full.calls, rtt

    calls, later, rtt = asyncio.run(main())
    assert calls == 1 and later == 1, (calls, later)
    assert 0 < rtt < 1


def test_a_probe_our_own_descriptors_cannot_make_is_no_failure_of_the_peer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """socket() failing with EMFILE was told as the peer's connect failure, and after a
    few the healthy peer was published unreachable, barring its links (a review)."""
    from hulk_probe.config import ProbeSettings
    from hulk_probe.measurer import Measurer

    def no_descriptors(*_: Any) -> socket.socket:
        raise OSError(errno.EMFILE, "Too many open files")

    async def main() -> Any:
        server = EchoServer("127.0.0.1", 0)
        address = await server.start()
        settings = ProbeSettings(interval_s=0.05, timeout_s=0.1, window=10, failures=2, jitter=0.1)
        measurer = Measurer("me", settings, None, rng=None)
        measurer.set_peers({"peer": address})
        with pytest.raises(ProbeError) as exc:
            await EchoClient(address, timeout_s=1.0).round_trip()
        task = asyncio.create_task(measurer.run())
        await asyncio.sleep(0.5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await server.close()
        return exc.value.reason, measurer.estimates()["peer"]

    monkeypatch.setattr(echo, "_new_socket", no_descriptors)
    reason, estimate = asyncio.run(main())
    assert reason == echo.LOCAL
    assert estimate.reachable is None and estimate.consecutive_failures == 0, estimate


def test_the_soft_limit_on_descriptors_is_raised_to_the_hard_one() -> None:
    code = (
        "import resource\n"
        "from hulk_probe.echo import raise_open_files_limit\n"
        "raised = raise_open_files_limit()\n"
        "print(raised, *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(256, soft)

    def lowered() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))

    out = subprocess.run(
        [sys.executable, "-c", code], preexec_fn=lowered, capture_output=True, text=True,
        check=True, timeout=60,
    ).stdout.split()  # fmt: skip
    raised, now_soft, now_hard = map(int, out)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    assert raised == now_soft == want and now_hard == hard, (low, out)


def test_ports_reserved_together_are_distinct() -> None:
    """Two ``free_port`` calls may return one number (the kernel hands a closed port out
    again): an agent's echo and metrics ports were once the same, and it could not listen
    (a CI run). Reserved together they never are."""
    from hulk_probe.harness import reserve
    from hulk_probe.toxiproxy import free_ports

    for _ in range(50):
        a, b = free_ports("127.0.0.1", 2)
        assert a != b
    slots = reserve(3)
    assert all(s.port != s.metrics_port for s in slots)
