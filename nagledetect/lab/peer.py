"""The lab's application programs: a server and a client on real sockets, driven by a spec.

    python -m nagledetect.lab.peer server SPEC.json
    python -m nagledetect.lab.peer client SPEC.json RESULT.json

The client measures each exchange itself (wall clock, the same clock tcpdump stamps packets
with) and writes the ground truth: start time, latency, the writes made on each side.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import sys
import threading
import time
from typing import Any

BASE_PORT = 9000
KEEPALIVE_IDLE_S = 1
KEEPALIVE_RUN_S = 4.5
NEVER_S = 3600.0
OPTION_CONSTANTS = {"nodelay": socket.TCP_NODELAY, "cork": socket.TCP_CORK,
                    "quickack": socket.TCP_QUICKACK}


def _set(sock: socket.socket, option: str, value: int) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, OPTION_CONSTANTS[option], value)


def _receive_exactly(sock: socket.socket, count: int, quickack: bool) -> int:
    """Read `count` bytes (less only at EOF), re-arming TCP_QUICKACK after every read."""
    received = 0
    while received < count:
        chunk = sock.recv(min(count - received, 1 << 20))
        if quickack:
            _set(sock, "quickack", 1)
        if not chunk:
            break
        received += len(chunk)
    return received


def _write_message(sock: socket.socket, sizes: list[int], options: list[str],
                   waits_s: list[float]) -> tuple[list[float], list[float]]:
    """The message as separate writes, `waits_s[i]` apart, corked around them when asked.

    Returns when each write began (UNIX time, tcpdump's clock) and how long the application
    really slept between writes (what a trace cannot show)."""
    if "cork" in options:
        _set(sock, "cork", 1)
    write_times_s: list[float] = []
    slept_s: list[float] = []
    for index, size in enumerate(sizes):
        if index and waits_s[index - 1]:
            before_s = time.monotonic()
            time.sleep(waits_s[index - 1])
            slept_s.append(time.monotonic() - before_s)
        elif index:
            slept_s.append(0.0)
        write_times_s.append(time.time())
        sock.sendall(b"x" * size)
    if "cork" in options:
        _set(sock, "cork", 0)
    return write_times_s, slept_s


def _apply_options(sock: socket.socket, options: list[str]) -> None:
    if "nodelay" in options:
        _set(sock, "nodelay", 1)


def _serve_connection(conn: socket.socket, flow: dict[str, Any]) -> None:
    _apply_options(conn, flow["server_options"])
    quickack = "quickack" in flow["server_options"]
    request_bytes = sum(flow["client_writes_bytes"])
    with conn:
        if flow["one_way"] or flow["keepalive_only"]:
            _read_one_way(conn, flow, quickack)
            return
        for exchange in range(flow["exchanges"]):
            if _receive_exactly(conn, request_bytes, quickack) < request_bytes:
                return
            if flow["think_time_s"]:
                time.sleep(flow["think_time_s"])
            writes = flow["server_writes"][exchange]
            _write_message(conn, writes, flow["server_options"], [0.0] * len(writes))
        _receive_exactly(conn, 1, quickack)


def _read_one_way(conn: socket.socket, flow: dict[str, Any], quickack: bool) -> None:
    """Read a one-way stream to its end: at once, after a pause (never, when the pause is
    negative: the receive buffer fills and the window closes), or slowly, a chunk at a time."""
    if flow["server_read_delay_s"] < 0:
        time.sleep(NEVER_S)
        return
    time.sleep(flow["server_read_delay_s"])
    chunk = flow["server_read_chunk_bytes"] or 1 << 16
    while _receive_exactly(conn, chunk, quickack) == chunk:
        if flow["server_read_interval_s"]:
            time.sleep(flow["server_read_interval_s"])


def _listener(spec: dict[str, Any], family: int, index: int, flow: dict[str, Any]) -> socket.socket:
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if flow["server_rcvbuf_bytes"]:
        # Before listen, so the handshake's window and window scale follow it.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, flow["server_rcvbuf_bytes"])
    listener.bind((spec["server_address"], BASE_PORT + index))
    listener.listen(64)
    return listener


def serve(spec: dict[str, Any]) -> None:
    """Listen on one port per flow, answer every connection in its own thread."""
    family = socket.AF_INET6 if ":" in spec["server_address"] else socket.AF_INET
    listeners = []
    for index, flow in enumerate(spec["flows"]):
        listeners.append((_listener(spec, family, index, flow), flow))
    print("ready", flush=True)
    threads = []
    for listener, flow in listeners:
        for _ in range(0 if flow["unanswered"] else flow["connections"]):
            conn, _ = listener.accept()
            thread = threading.Thread(target=_serve_connection, args=(conn, flow), daemon=True)
            thread.start()
            threads.append(thread)
    for thread in threads:
        thread.join()


def _endpoint(address: tuple) -> str:
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _keepalive_only(sock: socket.socket) -> list[dict[str, Any]]:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_IDLE_S)
    time.sleep(KEEPALIVE_RUN_S)
    return []


def _run_exchanges(sock: socket.socket, flow: dict[str, Any], pauses_s: list[float],
                   waits_s: list[list[float]]) -> list[dict]:
    quickack = "quickack" in flow["client_options"]
    exchanges = []
    for index in range(flow["exchanges"]):
        if pauses_s[index]:
            time.sleep(pauses_s[index])
        server_writes = [] if flow["one_way"] else flow["server_writes"][index]
        start_s = time.time()
        try:
            write_times_s, slept_s = _write_message(sock, flow["client_writes_bytes"],
                                                    flow["client_options"], waits_s[index])
            received = _receive_exactly(sock, sum(server_writes), quickack) if server_writes else 0
        except TimeoutError:
            exchanges.append({"index": index, "start_s": start_s, "gave_up_s": time.time(),
                              "client_writes_bytes": flow["client_writes_bytes"],
                              "server_writes_bytes": server_writes})
            break
        latency_s = time.time() - start_s
        exchanges.append({
            "index": index, "start_s": start_s, "latency_s": latency_s,
            "client_writes_bytes": flow["client_writes_bytes"], "server_writes_bytes": server_writes,
            "client_write_times_s": write_times_s, "client_waits_s": slept_s,
            "think_time_s": flow["think_time_s"], "pause_before_s": pauses_s[index],
            "response_complete": received == sum(server_writes),
        })
    return exchanges


def _unanswered(spec: dict[str, Any], index: int, flow: dict[str, Any]) -> dict[str, Any]:
    """Try to connect and give up after `client_give_up_s`; the kernel retransmits the SYN
    meanwhile. The local port is read while the attempt is in progress (a failed connect
    forgets it)."""
    family = socket.AF_INET6 if ":" in spec["server_address"] else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setblocking(False)
        started_s = time.time()
        sock.connect_ex((spec["server_address"], BASE_PORT + index))
        client = _endpoint(sock.getsockname())
        _, writable, _ = select.select([], [sock], [], flow["client_give_up_s"])
        connected = bool(writable) and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        server = _endpoint((spec["server_address"], BASE_PORT + index))
        return {"flow": flow["name"], "client": client, "server": server, "exchanges": [],
                "connect": {"started_s": started_s, "gave_up_s": time.time(),
                            "connected": connected}}


def _client_connection(spec: dict[str, Any], index: int, flow: dict[str, Any], copy: int,
                       results: list[dict[str, Any]]) -> None:
    if flow["unanswered"]:
        results.append(_unanswered(spec, index, flow))
        return
    sock = socket.create_connection((spec["server_address"], BASE_PORT + index))
    _apply_options(sock, flow["client_options"])
    if flow["client_give_up_s"]:
        sock.settimeout(flow["client_give_up_s"])
    pauses_s = flow["pauses_s"][copy]
    with sock:
        exchanges = (_keepalive_only(sock) if flow["keepalive_only"]
                     else _run_exchanges(sock, flow, pauses_s, flow["waits_s"][copy]))
        result = {"flow": flow["name"], "client": _endpoint(sock.getsockname()),
                  "server": _endpoint(sock.getpeername()), "exchanges": exchanges}
        results.append(result)
        try:
            if exchanges and "gave_up_s" in exchanges[-1]:
                raise TimeoutError
            if not flow["one_way"] and not flow["keepalive_only"]:
                sock.sendall(b"!")
            sock.shutdown(socket.SHUT_WR)
            _receive_exactly(sock, 1, False)
        except TimeoutError:
            # The peer took nothing for client_give_up_s: abort. A close with unsent data and
            # a zero linger time sends a RST at once.
            result["aborted_s"] = time.time()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def run_client(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Run every connection of every flow concurrently; return what each measured."""
    results: list[dict[str, Any]] = []
    threads = [threading.Thread(target=_client_connection, args=(spec, index, flow, copy, results))
               for index, flow in enumerate(spec["flows"]) for copy in range(flow["connections"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def main(argv: list[str]) -> int:
    role, spec_path = argv[0], argv[1]
    with open(spec_path) as handle:
        spec = json.load(handle)
    if role == "server":
        serve(spec)
        return 0
    results = run_client(spec)
    with open(argv[2], "w") as handle:
        json.dump(results, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
