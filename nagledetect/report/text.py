"""The terminal report: what was read, then the connection table (like `tshark -z conv,tcp`)."""

from __future__ import annotations

from typing import Any

CONNECTION_COLUMNS = (
    ("id", ">4"), ("client", "<28"), ("server", "<28"), ("pkts c>s", ">9"), ("pkts s>c", ">9"),
    ("bytes c>s", ">11"), ("bytes s>c", ">11"), ("MSS", ">6"), ("vantage", "<8"),
    ("RTT ms", ">8"), ("client/server side", ">19"), ("dur s", ">9"),
)


def _format_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _capture_lines(capture: dict[str, Any]) -> list[str]:
    lines = [f"Capture {capture['path']} ({capture['link_type_name']}, link type "
             f"{capture['link_type']})",
             f"  packets read {capture['packets']}, TCP packets used {capture['tcp_packets']}, "
             f"skipped {sum(capture['skipped'].values())}, connections {capture['connections']}"]
    lines += [f"  skipped {count:>8}  {reason}" for reason, count in capture["skipped"].items()]
    lines += [f"  warning: {warning}" for warning in capture["warnings"]]
    return lines


def _connection_row(connection: dict[str, Any]) -> list[str]:
    mss = f"{connection['mss']}{'~' if connection['mss_source'] == 'estimated' else ''}"
    client = connection["client"] + ("?" if connection["client_guessed"] else "")
    sides = (f"{_format_ms(connection['rtt_client_side_ms'])}/"
             f"{_format_ms(connection['rtt_server_side_ms'])}")
    return [str(connection["id"]), client, connection["server"],
            str(connection["packets"]["client_to_server"]),
            str(connection["packets"]["server_to_client"]),
            str(connection["bytes"]["client_to_server"]),
            str(connection["bytes"]["server_to_client"]), mss, connection["vantage"],
            _format_ms(connection["rtt_ms"]), sides, f"{connection['duration_s']:.3f}"]


def _table(rows: list[list[str]]) -> list[str]:
    header = " ".join(f"{name:{spec}}" for name, spec in CONNECTION_COLUMNS)
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(" ".join(f"{cell:{spec}}" for cell, (_, spec) in zip(row, CONNECTION_COLUMNS)))
    return lines


def render_text(document: dict[str, Any]) -> str:
    """The whole text report for a document built by `build_document`."""
    lines: list[str] = []
    for capture in document["captures"]:
        lines += _capture_lines(capture)
    lines.append("")
    if document["findings"]:
        lines.append(f"Findings: {len(document['findings'])}")
    else:
        lines.append("Findings: none.")
    lines.append("")
    lines.append(f"Connections ({len(document['connections'])})")
    lines += _table([_connection_row(c) for c in document["connections"]])
    lines.append("")
    lines.append("MSS~ = estimated (no handshake seen); client? = guessed by the port rule; "
                 "RTT sides = tap to client / tap to server.")
    return "\n".join(lines) + "\n"
