"""Two network namespaces joined by a veth pair, torn down afterwards even on failure.

Addresses are private and live only inside the namespaces this lab creates (10.77.0.0/24 and
fd77::/64): no traffic leaves the machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

PREFIX = "ndlab"
CLIENT_V4, SERVER_V4 = "10.77.0.1", "10.77.0.2"
CLIENT_V6, SERVER_V6 = "fd77::1", "fd77::2"
OFFLOAD_FEATURES = ("tso", "gso", "gro")
REQUIRED_TOOLS = ("ip", "tcpdump", "ethtool")


class LabError(Exception):
    """The lab cannot run here; the message says why in one line."""


@dataclass(frozen=True)
class Lab:
    client_ns: str
    server_ns: str
    client_if: str
    server_if: str
    middle_ns: str | None = None
    bridge_if: str = "br0"
    delay_ifs: tuple[str, str] | None = None

    def namespace(self, side: str) -> str:
        if side == "middle" and self.middle_ns:
            return self.middle_ns
        return self.client_ns if side == "client" else self.server_ns

    def interface(self, side: str) -> str:
        if side == "middle" and self.middle_ns:
            return self.bridge_if
        return self.client_if if side == "client" else self.server_if

    def command(self, side: str, *argv: str) -> list[str]:
        """A command line that runs `argv` inside one side's namespace."""
        return ["ip", "netns", "exec", self.namespace(side), *argv]


def check_can_run() -> None:
    """Root and the tools the lab needs; LabError otherwise."""
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, veth, tcpdump): run it with sudo")
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        raise LabError(f"the lab needs {', '.join(missing)} (apt-get install iproute2 tcpdump ethtool)")


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {result.stderr.strip() or 'failed'}")


def remove_stale() -> None:
    """Delete namespaces left by an earlier run that was killed before it could clean up:
    those whose process (the number in their name) is gone. A lab another process runs at the
    same time keeps its namespaces."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listing.splitlines():
        name = line.split()[0] if line.split() else ""
        owner = _owner(name)
        if owner is not None and not _alive(owner):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _owner(namespace: str) -> int | None:
    """The process that made a lab namespace (`ndlab-c1234`: 1234), None for any other."""
    if not namespace.startswith(f"{PREFIX}-") or len(namespace) < len(PREFIX) + 3:
        return None
    digits = namespace[len(PREFIX) + 2:]
    return int(digits) if digits.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def lab_network(mtu: int = 1500, offload: bool = False, middle: bool = False,
                delay_line: bool = False) -> Iterator[Lab]:
    """Create the namespaces and veth pairs; always delete them on the way out.

    With `middle`, a third namespace bridges the two veth pairs, so a capture on its bridge sees
    the traffic in the middle of the path, as a tap or a switch's mirror port would. With
    `delay_line`, the third namespace joins them by nothing: the caller runs the delay line
    (`nagledetect.lab.delay_line`) on `Lab.delay_ifs` to carry frames across.
    """
    check_can_run()
    remove_stale()
    tag = str(os.getpid())
    joined = middle or delay_line
    lab = Lab(f"{PREFIX}-c{tag}", f"{PREFIX}-s{tag}", f"{PREFIX}c{tag}", f"{PREFIX}s{tag}",
              f"{PREFIX}-m{tag}" if joined else None,
              delay_ifs=(f"{PREFIX}mc{tag}", f"{PREFIX}ms{tag}") if delay_line else None)
    try:
        _run("ip", "netns", "add", lab.client_ns)
        _run("ip", "netns", "add", lab.server_ns)
        if joined:
            _middle(lab, tag, mtu, bridged=not delay_line)
        else:
            _run("ip", "link", "add", lab.client_if, "type", "veth", "peer", "name", lab.server_if)
        for side, v4, v6 in (("client", CLIENT_V4, CLIENT_V6), ("server", SERVER_V4, SERVER_V6)):
            _configure_side(lab, side, v4, v6, mtu, offload)
            if delay_line:
                # Frames cross the delay line as raw bytes: their checksums must be complete.
                _run(*lab.command(side, "ethtool", "-K", lab.interface(side), "tx", "off"))
        yield lab
    finally:
        for namespace in (lab.client_ns, lab.server_ns, lab.middle_ns):
            if namespace:
                subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", lab.client_if], capture_output=True)


def _middle(lab: Lab, tag: str, mtu: int, bridged: bool) -> None:
    """Two veth pairs whose middle ends are in the middle namespace, joined by a bridge or left
    for the delay line (then silent themselves: no IPv6, no offload, every frame taken)."""
    middle = lab.middle_ns or ""
    _run("ip", "netns", "add", middle)
    ends = (f"{PREFIX}mc{tag}", f"{PREFIX}ms{tag}")
    _run("ip", "link", "add", lab.client_if, "type", "veth", "peer", "name", ends[0])
    _run("ip", "link", "add", lab.server_if, "type", "veth", "peer", "name", ends[1])
    if not bridged:
        for scope in ("all", "default"):
            _run("ip", "netns", "exec", middle, "sysctl", "-qw",
                 f"net.ipv6.conf.{scope}.disable_ipv6=1")
    for end in ends:
        _run("ip", "link", "set", end, "netns", middle)
    if not bridged:
        for end in ends:
            _run("ip", "-n", middle, "link", "set", end, "mtu", str(mtu), "promisc", "on", "up")
            _run("ip", "netns", "exec", middle, "ethtool", "-K", end, "tso", "off", "gso", "off",
                 "gro", "off", "tx", "off")
        return
    _run("ip", "-n", middle, "link", "add", lab.bridge_if, "type", "bridge")
    for end in ends:
        _run("ip", "-n", middle, "link", "set", end, "master", lab.bridge_if, "up")
    _run("ip", "-n", middle, "link", "set", lab.bridge_if, "up")


def _configure_side(lab: Lab, side: str, v4: str, v6: str, mtu: int, offload: bool) -> None:
    namespace, interface = lab.namespace(side), lab.interface(side)
    _run("ip", "link", "set", interface, "netns", namespace)
    inside = ("ip", "-n", namespace)
    _run(*inside, "addr", "add", f"{v4}/24", "dev", interface)
    _run(*inside, "-6", "addr", "add", f"{v6}/64", "dev", interface, "nodad")
    _run(*inside, "link", "set", interface, "mtu", str(mtu), "up")
    _run(*inside, "link", "set", "lo", "up")
    state = "on" if offload else "off"
    features = [item for feature in OFFLOAD_FEATURES for item in (feature, state)]
    _run("ip", "netns", "exec", namespace, "ethtool", "-K", interface, *features)
