"""The bundled sample traces: every lab scenario recorded once, with a README table.

`nagledetect lab regenerate sample_traces` rebuilds them all (a few minutes, root needed).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nagledetect.lab.runner import run_scenario
from nagledetect.lab.scenarios import SCENARIOS

README_HEAD = """# Sample traces

Real captures recorded by `nagledetect lab`: two network namespaces joined by a veth pair (MTU
1500), tcpdump with snaplen 128 on the side named below. Where a scenario needs a real round trip
or frames dropped or held back, the two are joined instead through the lab's user-space delay
line (`remote-*`, `rtt-hold`, the `cause-*` captures; the manifest's `path` block says how, and
which frames it acted on). The client is always Linux's own TCP
stack; the server is Linux too, except in the `classic-*` captures, where it is the lab's
user-space classic stack (200 ms global-tick delayed ACKs, classic Nagle). Each `NAME.pcap` has
a `NAME.json` manifest with the ground truth the application measured: every exchange's start
and latency, the writes on each side, the socket options (schema in `docs/lab.md`).

What Linux really does, recorded as it happened: Minshall's Nagle sends the small tail of one
large write at once, so Cheshire's 100,000-byte blocks do not stall on Linux; a Linux receiver
of a one-way stream ACKs at once, so the coalescing of Sun's "Small Packet TCP Traffic
Performance" appears only against the classic receiver (`classic-stream.pcap`); the first
exchange of a connection never stalls (quick-ACK mode).

Regenerate them all (root needed, a few minutes):

    sudo nagledetect lab regenerate sample_traces

| capture | what it shows | holds | captured at | scenario | what happened (application-measured) |
|---|---|---|---|---|---|
"""
README_TAIL = """
`merged-interfaces.pcapng` is not recorded by the lab: it is `seed003-nagle.pcap` (Ethernet,
snaplen 128, microseconds) merged with a capture of real Linux TCP over loopback taken with
`tcpdump -i any --time-stamp-precision=nano` (Linux cooked v2, snaplen 262144, nanoseconds;
three 2-byte writes then a 1-byte answer, ten times, 50 ms apart: 9 stalls of 41.7 ms), its
times shifted with `editcap -t -237876.369941130` so that the two interleave, then
`mergecap -F pcapng`. Its two interfaces differ in link type, snapshot length and timestamp
resolution, which libpcap (and so tcpdump) refuses after its first interface; nagledetect's
reader (`core/src/capture.rs`) reads it whole, as tshark does. Regenerating the lab's
captures leaves it as it is.

`vxlan-overlay.pcap` is not recorded by the lab either: real Linux TCP between two network
namespaces over a VXLAN overlay (`ip link add vx0 type vxlan id 42 dstport 4789`, overlay
192.168.77.0/24 over a veth pair 10.99.0.0/24), captured on the underlay veth with tcpdump, so
every TCP packet is inside UDP port 4789. The client writes a 100-byte header and a 100-byte
body, then reads a 50-byte answer, twenty times: the body waits for the server's delayed ACK
of the header (19 stalls of about 44 ms; the first exchange is ACKed at once, Linux's quick
ACKs at a connection's start).
"""


def _happened(manifest: dict[str, Any]) -> str:
    latencies = [e["latency_s"] for c in manifest["connections"] for e in c["exchanges"]
                 if e["server_writes_bytes"]]
    summary = manifest["summary"]
    if not latencies:
        text = f"{summary['connections']} connection(s), no request/response exchanges"
    else:
        text = (f"median exchange {statistics.median(latencies) * 1000:.1f} ms; "
                f"{summary['nagle_stalls']} of {len(latencies)} exchanges stalled "
                f"on {summary['connections']} connection(s)")
    slow = sum(c["expected"].get("slow_exchanges", 0) for c in manifest["connections"])
    if slow > summary["nagle_stalls"]:
        text += f" by Nagle, {slow} slow for other reasons"
    return text + "".join(_events(manifest))


def _events(manifest: dict[str, Any]) -> Iterator[str]:
    """What the delay line, the firewall and the client's giving up did, for the table."""
    acted = manifest.get("path", {}).get("acted", [])
    for action, done in (("drop", "dropped"), ("hold", "held back")):
        frames = [entry for entry in acted if entry["action"] == action]
        if frames:
            kinds = ", ".join(sorted({entry["kind"].replace("_", " ") for entry in frames}))
            yield f"; the delay line {done} {len(frames)} frame(s) ({kinds})"
    for connection in manifest["connections"]:
        connect = connection.get("connect")
        if connect and not connect["connected"]:
            waited_s = connect["gave_up_s"] - connect["started_s"]
            yield f"; {connection['client']} never answered, gave up after {waited_s:.1f} s"
        if "aborted_s" in connection and connection["exchanges"]:
            waited_s = connection["aborted_s"] - connection["exchanges"][0]["start_s"]
            yield f"; {connection['client']} aborted (RST) after {waited_s:.1f} s"


def regenerate_samples(directory: Path, progress: Callable[[str], None]) -> Iterator[str]:
    """Record every scenario into `directory`; yields one summary line per capture."""
    for name, scenario in SCENARIOS.items():
        progress(f"recording {name} ...")
        manifest = run_scenario(scenario, directory)
        yield f"{name}: {_happened(manifest)}"
    write_readme(directory)


def write_readme(directory: Path) -> None:
    """The README table, from the manifests beside the captures."""
    rows = []
    for name, scenario in SCENARIOS.items():
        manifest_path = directory / f"{name}.json"
        if manifest_path.exists():
            manifest = json.loads(manifest_path.read_text())
            rows.append(f"| `{name}.pcap` | {scenario.shows} | {scenario.holder or '-'} | "
                        f"{scenario.capture_side} | {scenario.description} | "
                        f"{_happened(manifest)} |")
    (directory / "README.md").write_text(README_HEAD + "\n".join(rows) + "\n" + _sources()
                                         + README_TAIL)


def _sources() -> str:
    """Which document each family of captures reproduces, by title and author."""
    families: dict[str, list[str]] = {}
    for name, scenario in SCENARIOS.items():
        if scenario.source:
            families.setdefault(scenario.source, []).append(f"`{name}`")
    lines = [f"- {', '.join(names)}: {source}" for source, names in families.items()]
    return "\nThe cases they reproduce:\n\n" + "\n".join(lines) + "\n"
