"""How an endpoint is written everywhere: "ip:port", IPv6 in brackets ("[v6]:port")."""

from __future__ import annotations

from nagledetect.flows.connections import ConnectionRows


def endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


class DirectionNames:
    """(connection, direction) -> (sender endpoint, receiver endpoint); direction 0 = client's.
    Written when asked for: detectors name the few directions they report, and naming every
    direction of a part's thousands of connections cost more than their findings."""

    def __init__(self, rows: ConnectionRows) -> None:
        self._rows = rows

    def __getitem__(self, key: tuple[int, int]) -> tuple[str, str]:
        connection, direction = key
        position, value = self._rows.position(connection), self._rows.value
        client = endpoint(value("client_address", position), value("client_port", position))
        server = endpoint(value("server_address", position), value("server_port", position))
        if direction == 0:
            return client, server
        if direction == 1:
            return server, client
        raise KeyError(key)
