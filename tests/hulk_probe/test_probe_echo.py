"""The wire protocol: 64-byte messages over a kept-open TCP connection, and its failures."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from hulk_probe import PROBE_SIZE
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
