"""How an endpoint is written everywhere: "ip:port", IPv6 in brackets ("[v6]:port")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from nagledetect.flows.connections import by_connection
from nagledetect.table import Table

if TYPE_CHECKING:
    import pandas as pd


def endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


class DirectionNames:
    """(connection, direction) -> (sender endpoint, receiver endpoint); direction 0 = client's.
    Written when asked for: detectors name the few directions they report, and naming every
    direction of a part's thousands of connections cost more than their findings."""

    def __init__(self, connections: Table | pd.DataFrame) -> None:
        self._connections = connections

    def __getitem__(self, key: tuple[int, int]) -> tuple[str, str]:
        connection, direction = key
        if direction not in (0, 1):
            raise KeyError(key)
        senders, receivers = self.of(np.array([connection]), np.array([direction]))
        return senders[0], receivers[0]

    def of(self, connection: np.ndarray, direction: np.ndarray) -> tuple[list[str], list[str]]:
        """The (senders, receivers) of many directions at once, column by column."""
        connection = np.asarray(connection, dtype=np.int64)
        client, server = ([endpoint(address, port) for address, port in zip(
            by_connection(self._connections, f"{side}_address", connection).tolist(),
            by_connection(self._connections, f"{side}_port", connection).tolist())]
            for side in ("client", "server"))
        from_client = (np.asarray(direction) == 0).tolist()
        return ([c if first else s for c, s, first in zip(client, server, from_client)],
                [s if first else c for c, s, first in zip(client, server, from_client)])
