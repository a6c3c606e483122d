"""How an endpoint is written everywhere: "ip:port", IPv6 in brackets ("[v6]:port")."""

from __future__ import annotations

import numpy as np

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

    def of(self, connection: np.ndarray, direction: np.ndarray) -> tuple[list[str], list[str]]:
        """The (senders, receivers) of many directions at once, column by column."""
        client, server = ([endpoint(address, port) for address, port in
                           zip(self._rows.column(f"{side}_address", connection),
                               self._rows.column(f"{side}_port", connection))]
                          for side in ("client", "server"))
        from_client = (np.asarray(direction) == 0).tolist()
        return ([c if first else s for c, s, first in zip(client, server, from_client)],
                [s if first else c for c, s, first in zip(client, server, from_client)])
