"""Run a scenario in the lab: server, capture, client; then write the capture's manifest.

The manifest is ground truth from the application, not from the trace: each exchange's start
and latency as the client measured them, the writes on each side and the socket options. An
exchange counts as stalled when its latency exceeds what the scenario itself explains (server
think time plus the client's pacing) by STALL_EXCESS_S or more.
"""

from __future__ import annotations

import contextlib
import json
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from nagledetect.lab.netns import (
    CLIENT_V4,
    CLIENT_V6,
    SERVER_V4,
    SERVER_V6,
    Lab,
    LabError,
    lab_network,
)
from nagledetect.lab.peer import BASE_PORT
from nagledetect.lab.scenarios import Flow, Scenario

SNAPLEN = 128
STALL_EXCESS_S = 0.01
START_TIMEOUT_S = 10.0
RUN_TIMEOUT_S = 300.0
CAPTURE_DRAIN_S = 0.5
SERVER_EXIT_S = 3.0
MANIFEST_SCHEMA = "nagledetect-lab/1"
DELAY_LINE_PRIORITY = 20


def _wait_for_line(process: subprocess.Popen, stream_name: str, needle: str) -> None:
    stream = getattr(process, stream_name)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], 0.2)
        if ready:
            line = stream.readline()
            if needle in line:
                return
            if not line and process.poll() is not None:
                break
    process.kill()
    raise LabError(f"{process.args[3] if len(process.args) > 3 else process.args}: did not start")


def _pauses(flow: Flow, rng: random.Random) -> list[list[float]]:
    """Pause before each exchange of each connection copy (none before the first)."""
    def one(index: int) -> float:
        if index == 0:
            return 0.0
        if flow.pause_range_s:
            return rng.uniform(*flow.pause_range_s)
        return flow.pause_s
    return [[one(i) for i in range(flow.exchanges)] for _ in range(flow.connections)]


def _waits(flow: Flow, rng: random.Random) -> list[list[list[float]]]:
    """The client's sleep between consecutive writes of each exchange of each connection copy:
    `pacing_s`, or drawn from `pacing_range_s`."""
    def one() -> float:
        return rng.uniform(*flow.pacing_range_s) if flow.pacing_range_s else flow.pacing_s
    gaps = max(len(flow.client_writes_bytes) - 1, 0)
    return [[[one() for _ in range(gaps)] for _ in range(flow.exchanges)]
            for _ in range(flow.connections)]


def peer_spec(scenario: Scenario, seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)
    flows = []
    for flow in scenario.flows:
        entry = asdict(flow)
        entry["server_writes"] = [flow.server_writes_for(i) for i in range(flow.exchanges)]
        entry["pauses_s"] = _pauses(flow, rng)
        entry["waits_s"] = _waits(flow, rng)
        flows.append(entry)
    return {"server_address": SERVER_V6 if scenario.ipv6 else SERVER_V4, "flows": flows}


def _start_capture(lab: Lab, side: str, pcap: Path) -> subprocess.Popen:
    process = subprocess.Popen(
        lab.command(side, "tcpdump", "-i", lab.interface(side), "-s", str(SNAPLEN), "-U",
                    "--immediate-mode", "-n", "-Z", "root", "-w", str(pcap)),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for_line(process, "stderr", "listening on")
    return process


def _stop(process: subprocess.Popen, sig: int = signal.SIGINT) -> None:
    if process.poll() is None:
        process.send_signal(sig)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _server_command(lab: Lab, scenario: Scenario, spec_path: Path, holds_path: Path) -> list[str]:
    """Linux's own stack, or the scapy classic peer with the kernel's RSTs for its ports dropped."""
    if all(flow.stack == "linux" for flow in scenario.flows):
        return lab.command("server", sys.executable, "-m", "nagledetect.lab.peer", "server",
                           str(spec_path))
    if scenario.ipv6:
        raise LabError("the classic (scapy) peer speaks IPv4 only")
    for index in range(len(scenario.flows)):
        subprocess.run(lab.command("server", "iptables", "-A", "OUTPUT", "-p", "tcp", "--sport",
                                   str(BASE_PORT + index), "--tcp-flags", "RST", "RST", "-j", "DROP"),
                       check=True, capture_output=True)
    return lab.command("server", sys.executable, "-m", "nagledetect.lab.classic_peer",
                       str(spec_path), lab.interface("server"), str(holds_path))


def run_in_lab(scenario: Scenario, pcap: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                      list[dict[str, Any]]]:
    """Run the scenario's traffic while capturing it; returns what the client measured, the
    holds the classic peer made as a sender (none for Linux's own server) and the frames the
    delay line dropped or held back."""
    if scenario.delay_line and scenario.capture_side == "middle":
        raise LabError("a capture in the middle and the delay line cannot be combined")
    with lab_network(scenario.mtu, scenario.offload, scenario.capture_side == "middle",
                     scenario.delay_line) as lab, tempfile.TemporaryDirectory() as folder:
        spec_path = Path(folder) / "spec.json"
        result_path = Path(folder) / "result.json"
        holds_path = Path(folder) / "holds.json"
        acted_path = Path(folder) / "acted.json"
        spec_path.write_text(json.dumps(peer_spec(scenario)))
        with contextlib.ExitStack() as stack:
            if scenario.delay_line:
                line = stack.enter_context(_start_delay_line(lab, scenario, Path(folder), acted_path))
                stack.callback(_stop, line, signal.SIGTERM)
            _run_traffic(lab, scenario, spec_path, result_path, holds_path, pcap)
        holds = json.loads(holds_path.read_text()) if holds_path.exists() else []
        acted = json.loads(acted_path.read_text()) if acted_path.exists() else []
        return json.loads(result_path.read_text()), holds, acted


def _run_traffic(lab: Lab, scenario: Scenario, spec_path: Path, result_path: Path,
                 holds_path: Path, pcap: Path) -> None:
    for command in scenario.server_firewall:
        _run_nft(lab, "server", command)
    with subprocess.Popen(_server_command(lab, scenario, spec_path, holds_path),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as server:
        try:
            _wait_for_line(server, "stdout", "ready")
            with _start_capture(lab, scenario.capture_side, pcap) as capture:
                try:
                    _run_client(lab, spec_path, result_path)
                finally:
                    _stop(capture)
        finally:
            _finish(server)


def _run_nft(lab: Lab, side: str, command: str) -> None:
    result = subprocess.run(lab.command(side, "nft", *command.split()), capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise LabError(f"nft {command}: {result.stderr.strip() or 'failed'}")


def _start_delay_line(lab: Lab, scenario: Scenario, folder: Path, acted_path: Path
                      ) -> subprocess.Popen:
    """The delay line in the middle namespace, half the round trip each way."""
    rules_path = folder / "rules.json"
    rules_path.write_text(json.dumps(list(scenario.delay_rules)))
    client_end, server_end = lab.delay_ifs or ("", "")
    # Real-time priority keeps its departures on time on a busy machine (within about 1 ms).
    realtime = ["chrt", "-f", str(DELAY_LINE_PRIORITY)] if shutil.which("chrt") else []
    process = subprocess.Popen(
        lab.command("middle", *realtime, sys.executable, "-m", "nagledetect.lab.delay_line",
                    client_end, server_end, str(scenario.rtt_ms / 2), str(rules_path),
                    str(acted_path), str(scenario.jitter_ms)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_line(process, "stdout", "ready")
    return process


def _run_client(lab: Lab, spec_path: Path, result_path: Path) -> None:
    """The client's side of the traffic, then a moment for the capture to take its last packets."""
    client = subprocess.run(lab.command("client", sys.executable, "-m", "nagledetect.lab.peer",
                                        "client", str(spec_path), str(result_path)),
                            capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if client.returncode != 0:
        raise LabError(f"client failed: {client.stderr.strip().splitlines()[-1:]}")
    time.sleep(CAPTURE_DRAIN_S)


def _finish(server: subprocess.Popen) -> None:
    """Let the server exit by itself (the classic peer writes its holds then), else stop it."""
    try:
        server.wait(timeout=SERVER_EXIT_S)
    except subprocess.TimeoutExpired:
        _stop(server, signal.SIGTERM)


def _holder(flow: Flow) -> str:
    """The side whose data Nagle can hold: the one writing a message in several pieces."""
    if len(flow.client_writes_bytes) > 1:
        return "client"
    if len(flow.server_writes_for(0)) > 1:
        return "server"
    return "client" if sum(flow.client_writes_bytes) >= sum(flow.server_writes_for(0)) else "server"


NAGLE_OFF_OPTIONS = ("nodelay", "cork")
"""Options on the holding side under which Nagle holds nothing (TCP_CORK holds a message until
the application uncorks it, its own choice)."""


def _nagle_can_hold(flow: Flow) -> bool:
    """Whether Nagle may hold the flow's data: not where its holder disabled it, nor, on Linux,
    where each side writes its message whole. Linux's Nagle (Minshall's variant) holds a small
    segment only while an earlier small one is unacknowledged; an exchange that waits for its
    answer has had everything before it acknowledged, so a whole write's tail leaves at once
    (an exchange slower than its path there waited for the congestion window, or the machine)."""
    holder_options = flow.client_options if _holder(flow) == "client" else flow.server_options
    if set(holder_options) & set(NAGLE_OFF_OPTIONS):
        return False
    return flow.stack != "linux" or _written_in_pieces(flow)


def _written_in_pieces(flow: Flow) -> bool:
    """Whether either side writes a message in more than one write."""
    return len(flow.client_writes_bytes) > 1 or any(
        len(flow.server_writes_for(exchange)) > 1 for exchange in range(flow.exchanges))


def _explained_s(flow: Flow, exchange: dict[str, Any], rtt_s: float) -> float:
    """What an exchange costs without any hold: the server's thinking, the client's own waits
    between its writes (as it measured them) and one round trip of the path."""
    waits_s = exchange.get("client_waits_s")
    if waits_s is None:
        waits_s = [flow.pacing_s] * max(len(flow.client_writes_bytes) - 1, 0)
    return flow.think_time_s + sum(waits_s) + rtt_s


def _connection_truth(result: dict[str, Any], flow: Flow, holds: list[dict[str, Any]],
                      scenario: Scenario) -> dict[str, Any]:
    # A round trip at its longest: the jitter may hold a frame each way.
    rtt_s = (scenario.rtt_ms + 2 * scenario.jitter_ms) / 1000
    exchanges = result["exchanges"]
    slow = [e for e in exchanges if not flow.one_way and "latency_s" in e
            and e["latency_s"] - _explained_s(flow, e, rtt_s) >= STALL_EXCESS_S]
    # A slow exchange where Nagle is off is slow for another reason (the machine, the path).
    stalled = slow if scenario.stall_kind and _nagle_can_hold(flow) else []
    stall_ms = [(e["latency_s"] - _explained_s(flow, e, rtt_s)) * 1000 for e in stalled]
    round_trip = "one round trip" + (" with the jitter each way" if scenario.jitter_ms else "")
    stall_rule = (f"latency - (think time + the client's waits + {round_trip}) >= "
                  f"{STALL_EXCESS_S * 1000:.0f} ms")
    if flow.stack != "linux" and _holder(flow) == "server":
        stalled = [h for h in holds if h["client"] == result["client"]
                   and h["released_s"] - h["held_s"] >= STALL_EXCESS_S]
        stall_ms = [(h["released_s"] - h["held_s"]) * 1000 for h in stalled]
        stall_rule = (f"the classic peer's own log of Nagle holds of {STALL_EXCESS_S * 1000:.0f} ms "
                      "or more (transfer time by a user-space sender hides them in latency)")
    latencies = [e["latency_s"] for e in exchanges if not flow.one_way and "latency_s" in e]
    excess_ms = [max(0.0, e["latency_s"] - _explained_s(flow, e, rtt_s)) * 1000
                 for e in exchanges if not flow.one_way and "latency_s" in e]
    return {
        "flow": flow.name, "client": result["client"], "server": result["server"],
        "stack": flow.stack,
        "client_options": [f"TCP_{o.upper()}" for o in flow.client_options],
        "server_options": [f"TCP_{o.upper()}" for o in flow.server_options],
        "exchanges": exchanges,
        **{key: result[key] for key in ("connect", "aborted_s") if key in result},
        "expected": {
            "slow_exchanges": len(slow),
            "nagle_stalls": len(stalled),
            "stall_kind": scenario.stall_kind if stalled else None,
            "holder": _holder(flow) if stalled else None,
            "clean": not stalled,
            "median_latency_ms": round(statistics.median(latencies) * 1000, 3) if latencies else None,
            "excess_ms_total": round(sum(excess_ms), 3),
            "stall_ms_total": round(sum(stall_ms), 3),
            "excess_ms_median_of_stalls": (round(statistics.median(
                (e["latency_s"] - _explained_s(flow, e, rtt_s)) * 1000 for e in stalled), 3)
                if stalled and flow.stack == "linux" else None),
            "stall_rule": stall_rule,
        },
    }


def build_manifest(scenario: Scenario, pcap: Path, results: list[dict[str, Any]],
                   holds: list[dict[str, Any]] | None = None,
                   acted: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    flows = {flow.name: flow for flow in scenario.flows}
    connections = sorted((_connection_truth(r, flows[r["flow"]], holds or [], scenario)
                          for r in results), key=lambda c: c["client"])
    stalls = sum(c["expected"]["nagle_stalls"] for c in connections)
    stall_ms = sum(c["expected"]["stall_ms_total"] for c in connections)
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "scenario": scenario.name, "shows": scenario.shows, "source": scenario.source,
        "description": scenario.description, "expectation": scenario.expectation,
        "holder": scenario.holder,
        "capture": {"file": pcap.name, "side": scenario.capture_side, "interface": "veth",
                    "snaplen": SNAPLEN, "mtu": scenario.mtu, "offload": scenario.offload},
        "hosts": {"client": {"ipv4": CLIENT_V4, "ipv6": CLIENT_V6},
                  "server": {"ipv4": SERVER_V4, "ipv6": SERVER_V6}},
        "connections": connections,
        "summary": {"connections": len(connections), "nagle_stalls": stalls,
                    "stall_ms_total": round(stall_ms, 3),
                    "exchanges": sum(len(c["exchanges"]) for c in connections)},
    }
    if scenario.variant is not None:
        option, side = scenario.variant
        manifest["variant"] = {"option": f"TCP_{option.upper()}", "side": side}
    if scenario.delay_line:
        manifest["path"] = {"rtt_ms": scenario.rtt_ms, "one_way_delay_ms": scenario.rtt_ms / 2,
                            "jitter_ms": scenario.jitter_ms,
                            "delay_line": "nagledetect.lab.delay_line",
                            "rules": list(scenario.delay_rules), "acted": acted or []}
    if scenario.server_firewall:
        manifest["server_firewall"] = list(scenario.server_firewall)
    if scenario.expected is not None:
        manifest["expected"] = scenario.expected
    return manifest


def run_scenario(scenario: Scenario, out_dir: Path, name: str | None = None) -> dict[str, Any]:
    """Capture the scenario into OUT_DIR/NAME.pcap and write OUT_DIR/NAME.json beside it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    name = name or scenario.name
    pcap = out_dir / f"{name}.pcap"
    results, holds, acted = run_in_lab(scenario, pcap)
    manifest = build_manifest(scenario, pcap, results, holds, acted)
    (out_dir / f"{name}.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def shortened(scenario: Scenario, exchanges: int) -> Scenario:
    """The same scenario with at most `exchanges` exchanges per connection."""
    return replace(scenario, flows=tuple(replace(f, exchanges=min(f.exchanges, exchanges))
                                         for f in scenario.flows))
