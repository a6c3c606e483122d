"""Read a whole capture into packet columns, with the accounting of every packet read."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nagledetect.read import skips
from nagledetect.read.decode import decode_batch
from nagledetect.read.libpcap import CaptureReader


@dataclass
class Accounting:
    """Packets read = TCP packets used + packets skipped, by reason; nothing is dropped silently."""

    path: str
    linktype: int
    packets_read: int = 0
    tcp_packets: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def add_skipped(self, reasons: dict[str, int]) -> None:
        for reason, count in reasons.items():
            self.skipped[reason] = self.skipped.get(reason, 0) + count

    @property
    def balanced(self) -> bool:
        return self.packets_read == self.tcp_packets + sum(self.skipped.values())


@dataclass
class PacketColumns:
    """Decoded TCP packets of one capture in file order, one numpy array per field."""

    columns: dict[str, np.ndarray]
    sack_blocks: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.columns["frame"])


def read_packets(path: str, bpf_filter: str | None = None) -> tuple[PacketColumns, Accounting]:
    """Decode every TCP packet of `path`; frame numbers are 1-based file positions (Wireshark)."""
    reader = CaptureReader(path, bpf_filter)
    accounting = Accounting(path=path, linktype=reader.linktype)
    parts: list[dict[str, np.ndarray]] = []
    sack_parts: list[dict[str, np.ndarray]] = []
    kept_before = 0
    for batch in reader.batches():
        accounting.packets_read += len(batch)
        accepted = reader.filter_mask(batch)
        accounting.add_skipped({skips.reason_text(skips.EXCLUDED_BY_FILTER): int((~accepted).sum())}
                               if not accepted.all() else {})
        selected = np.flatnonzero(accepted)
        decoded = decode_batch(batch.buf, batch.offsets[selected], batch.caplens[selected],
                               reader.linktype)
        accounting.add_skipped(decoded.skipped)
        if not decoded.columns:
            continue
        in_batch = selected[decoded.columns.pop("batch_index")]
        decoded.columns["frame"] = (batch.first_frame + in_batch).astype(np.uint32)
        decoded.columns["time_us"] = batch.time_us[in_batch]
        decoded.columns["captured_bytes"] = batch.caplens[in_batch].astype(np.uint32)
        parts.append(decoded.columns)
        sack = dict(decoded.sack_blocks)
        sack["row"] = sack["row"] + kept_before
        sack_parts.append(sack)
        kept_before += len(in_batch)
    accounting.tcp_packets = kept_before
    if reader.truncation:
        accounting.warnings.append(f"capture cut short ({reader.truncation}); "
                                   f"analysed the {accounting.packets_read} packets before it")
    return PacketColumns(_concatenate(parts), _concatenate(sack_parts)), accounting


def _concatenate(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if not parts:
        return {}
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
