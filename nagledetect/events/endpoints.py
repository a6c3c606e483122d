"""How an endpoint is written everywhere: "ip:port", IPv6 in brackets ("[v6]:port")."""

from __future__ import annotations

import pandas as pd


def endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def direction_endpoints(connections: pd.DataFrame) -> dict[tuple[int, int], tuple[str, str]]:
    """(connection, direction) -> (sender endpoint, receiver endpoint); direction 0 = client's."""
    names: dict[tuple[int, int], tuple[str, str]] = {}
    for row in connections.itertuples(index=False):
        client = endpoint(row.client_address, row.client_port)
        server = endpoint(row.server_address, row.server_port)
        names[(int(row.id), 0)] = (client, server)
        names[(int(row.id), 1)] = (server, client)
    return names
