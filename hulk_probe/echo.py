"""Both ends of the probe's wire protocol: a TCP echo server and a client that times one
64-byte round trip over a kept-open connection.

A probe message is exactly 64 bytes: ``magic(8) seq(8) sent_ns(8) dwell_ns(8) pad(32)``.
The server sends each 64-byte message back with ``dwell_ns`` filled in: the time the
message spent in the server, from the kernel's receive timestamp to the reply. The
client takes its own kernel receive timestamp of the reply too (``SO_TIMESTAMPNS``), so

    round trip = (kernel receive time of the reply - send time) - server dwell

is the time on the wire and in the kernels only: a process that waits for a core (on a
busy machine, with 50 agents on two cores) does not inflate the sample, as it would with
user-space clocks. This is how TWAMP reflectors report their own turnaround. Without
kernel timestamps (not Linux) the client falls back to its own clock and a dwell of 0.

Connections stay open between probes (TCP_NODELAY), so a sample is one message's round
trip, never a handshake; a failed or timed-out probe closes the connection and the next
probe opens a new one. Both ends run as event-loop callbacks, without tasks or streams.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
import struct
import time

from hulk_probe import PROBE_SIZE

MAGIC = b"HULKPRB1"
_HEADER = struct.Struct("!8sQqq")  # magic, seq, sent_ns, dwell_ns
_DWELL = slice(24, 32)
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_CMSG_SPACE = socket.CMSG_SPACE(16)


def make_message(seq: int) -> bytes:
    header = _HEADER.pack(MAGIC, seq & 0xFFFFFFFFFFFFFFFF, time.time_ns(), 0)
    return header + b"\0" * (PROBE_SIZE - len(header))


log = logging.getLogger(__name__)
# after the process ran out of descriptors, how long the listener rests before it accepts
# again (its pending connection stays queued, and a level-triggered wake-up would spin)
ACCEPT_PAUSE_S = 1.0
# a peer gone without a FIN (a crash, a partition) is found by TCP keepalive in about
# IDLE + INTERVAL * COUNT seconds; before, its connection and descriptor stayed for good
KEEPALIVE = {"TCP_KEEPIDLE": 30, "TCP_KEEPINTVL": 10, "TCP_KEEPCNT": 3}
# Connections the echo server keeps at most (a peer keeps one open; the agent raises it
# to twice the agents it knows of, ``connection_cap``). Before, any host could open
# connections until the probe's memory limit killed it, and its peers then reported its
# node unreachable (a security review). Past it a new connection takes the place of the
# least recently active one that never sent a probe message, else of one idle for
# ``IDLE_EVICT_S``, else it is closed: a flood of connections does not push out peers
# that probe (a review: pure recency did, between two of their probes).
MAX_CONNECTIONS = 8192
IDLE_EVICT_S = 300.0  # (the longest --interval a peer probes at, and more)


def connection_cap(agents: int) -> int:
    """The echo server's cap where ``agents`` agents may probe it."""
    return max(MAX_CONNECTIONS, 2 * agents)


def raise_open_files_limit() -> int:
    """Raises the soft limit on open descriptors to the hard one and returns it: an agent
    holds two connections per peer (its own probes, and theirs), which a soft limit of
    1,024 ran out of at about 500 nodes (Go programs raise it themselves; a review)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ValueError, OSError):
        return soft
    return want


def _prepare(sock: socket.socket, keepalive: bool = False) -> None:
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        pass  # no kernel timestamps here: user-space clocks it is
    if keepalive:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in KEEPALIVE.items():
            if hasattr(socket, name):  # (Linux's; others keep the system's timers)
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def _receive(sock: socket.socket, size: int) -> tuple[bytes, int]:
    """Up to ``size`` bytes and when the kernel received them (ns, CLOCK_REALTIME)."""
    data, ancillary, _flags, _address = sock.recvmsg(size, _CMSG_SPACE)
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(payload) >= 16:
            seconds, nanoseconds = struct.unpack("@qq", payload[:16])
            return data, seconds * 1_000_000_000 + nanoseconds
    return data, time.time_ns()


class EchoServer:
    """Answers every 64-byte probe message on as many connections as peers open."""

    def __init__(self, host: str, port: int, max_connections: int = MAX_CONNECTIONS) -> None:
        self.host, self.port = host, port
        self.max_connections = max_connections
        self._listener: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # each connection's unanswered bytes, least recently active first
        self._conns: dict[socket.socket, bytearray] = {}
        self._seen: dict[socket.socket, float] = {}  # a probe message's last arrival
        self.refused = 0  # connections closed at once: the cap reached, none to give way

    async def start(self) -> tuple[str, int]:
        """Listen; returns the bound (host, port), which tells an ephemeral port."""
        self._loop = asyncio.get_running_loop()
        family, _, _, _, address = (
            await self._loop.getaddrinfo(
                self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
        )[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._listener = sock
        self._loop.add_reader(sock.fileno(), self._accept)
        bound = sock.getsockname()
        return bound[0], bound[1]

    @property
    def serving(self) -> bool:
        return self._listener is not None

    @property
    def connections(self) -> int:
        return len(self._conns)

    async def close(self) -> None:
        if self._listener is not None and self._loop is not None:
            self._loop.remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
        for conn in list(self._conns):
            self._drop(conn)

    def _accept(self) -> None:
        assert self._listener is not None and self._loop is not None
        try:
            conn, _ = self._listener.accept()
        except OSError as exc:  # BlockingIOError (another wake-up took it), ECONNABORTED
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                # out of descriptors: rest, as asyncio's own servers do (before, the queued
                # connection woke the loop at once, again and again: a core spun; a review)
                log.warning("cannot accept a peer's connection (%s); pausing %.0f s",
                            exc.strerror, ACCEPT_PAUSE_S)  # fmt: skip
                self._loop.remove_reader(self._listener.fileno())
                self._loop.call_later(ACCEPT_PAUSE_S, self._resume)
            return
        if len(self._conns) >= self.max_connections and not self._make_room():
            self.refused += 1
            conn.close()
            return
        _prepare(conn, keepalive=True)
        self._conns[conn] = bytearray()
        self._loop.add_reader(conn.fileno(), self._on_data, conn)

    def _make_room(self) -> bool:
        """Closes the least recently active connection that never sent a probe message,
        else the least recently active one idle for ``IDLE_EVICT_S``; False if none."""
        victim = next((c for c in self._conns if c not in self._seen), None)
        if victim is None:
            oldest = next(iter(self._conns), None)
            idle = oldest is not None and time.monotonic() - self._seen[oldest] >= IDLE_EVICT_S
            victim = oldest if idle else None
        if victim is None:
            return False
        self._drop(victim)
        return True

    def _resume(self) -> None:
        if self._listener is not None and self._loop is not None:
            self._loop.add_reader(self._listener.fileno(), self._accept)

    def _drop(self, conn: socket.socket) -> None:
        self._seen.pop(conn, None)
        if self._conns.pop(conn, None) is not None and self._loop is not None:
            self._loop.remove_reader(conn.fileno())
        conn.close()

    def _on_data(self, conn: socket.socket) -> None:
        try:
            data, received = _receive(conn, 4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        if not data:
            self._drop(conn)
            return
        buf = self._conns.pop(conn)
        self._conns[conn] = buf  # (the most recently active now)
        buf += data
        replies = bytearray()
        while len(buf) >= PROBE_SIZE:
            message = bytearray(buf[:PROBE_SIZE])
            del buf[:PROBE_SIZE]
            if message.startswith(MAGIC):
                message[_DWELL] = struct.pack("!q", max(0, time.time_ns() - received))
                self._seen[conn] = time.monotonic()
            replies += message
        if replies:
            try:
                complete = conn.send(replies) == len(replies)
            except OSError:
                complete = False
            if not complete:  # a peer that does not read its echoes: let it go
                self._drop(conn)


PROBE_ERROR_REASONS = ("connect", "timeout", "io", "garbled")
# a probe that could not be made for want of our own descriptors: no fault of the peer's
LOCAL = "local"
_LOCAL_ERRNOS = (errno.EMFILE, errno.ENFILE)


class ProbeError(Exception):
    """A failed probe; ``reason`` is one of ``PROBE_ERROR_REASONS``, or ``LOCAL``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


_new_socket = socket.socket  # (a test runs it out of descriptors)


class EchoClient:
    """A kept-open connection to one peer's echo server."""

    def __init__(
        self, address: tuple[str, int], timeout_s: float, local_host: str | None = None
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.local_host = local_host
        self._sock: socket.socket | None = None
        self._seq = 0

    async def _connect(self) -> socket.socket:
        loop = asyncio.get_running_loop()
        family, _, _, _, address = (await loop.getaddrinfo(*self.address, type=socket.SOCK_STREAM))[
            0
        ]
        sock = _new_socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            if self.local_host:
                sock.bind((self.local_host, 0))
            await loop.sock_connect(sock, address)
            _prepare(sock)
        except BaseException:
            sock.close()
            raise
        return sock

    async def _exchange(self, sock: socket.socket, message: bytes) -> tuple[bytes, int, int]:
        """Send; returns the reply, our send time and the reply's receive time (ns)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        reply = bytearray()
        received = [0]

        def readable() -> None:
            try:
                data, received[0] = _receive(sock, PROBE_SIZE - len(reply))
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if not done.done():
                    done.set_exception(exc)
                return
            if not data and not done.done():
                done.set_exception(ConnectionResetError("connection closed by the peer"))
            reply.extend(data)
            if len(reply) >= PROBE_SIZE and not done.done():
                done.set_result(None)

        fd = sock.fileno()  # (the loop's key: a socket closed meanwhile has fileno() -1)
        loop.add_reader(fd, readable)
        try:
            sent = time.time_ns()
            if sock.send(message) != len(message):
                raise ConnectionError("short send")
            await done
        finally:
            loop.remove_reader(fd)
        return bytes(reply), sent, received[0]

    async def round_trip(self) -> float:
        """Seconds for one 64-byte message to go to the peer and come back."""
        stage = "connect"
        try:
            async with asyncio.timeout(self.timeout_s):
                if self._sock is None:
                    self._sock = await self._connect()
                stage = "io"
                self._seq += 1
                message = make_message(self._seq)
                start = time.perf_counter()
                reply, sent, received = await self._exchange(self._sock, message)
                elapsed = time.perf_counter() - start
        except TimeoutError:
            self.close()
            raise ProbeError("timeout", f"no answer within {self.timeout_s:g}s") from None
        except asyncio.CancelledError:  # mid-exchange: its echo may still come, and would
            self.close()  # be read as the next probe's
            raise
        except OSError as exc:
            self.close()
            reason = LOCAL if exc.errno in _LOCAL_ERRNOS else stage
            raise ProbeError(reason, str(exc) or type(exc).__name__) from None
        if reply[:24] != message[:24] or reply[32:] != message[32:]:
            self.close()
            raise ProbeError("garbled", "the echo differs from the message sent")
        (dwell,) = struct.unpack("!q", reply[_DWELL])
        total = (received - sent) / 1e9
        if not 0 < total <= elapsed + 0.001:  # the wall clock jumped: trust only our own
            return elapsed
        return total - dwell / 1e9 if 0 <= dwell / 1e9 < total else total

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None
