"""`--annotate`: the capture handed back to Wireshark, read back by tshark, capinfos and editcap.

Every check reads the written file with Wireshark's own tools, never with nagledetect's readers:
the comments tshark finds must be the report's evidence frames, one per role each frame plays,
and every frame's number, time and lengths must be the input's as tshark reads the input.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from nagledetect.analysis import analyze_capture
from nagledetect.report.annotate import FrameComments, connection_frames, write_annotated
from nagledetect.report.document import build_document
from tests import pcapng_builder as ng
from tests.conftest import SAMPLE_TRACES, corpus_file, require_tool

SEED003 = SAMPLE_TRACES / "seed003-nagle.pcap"
MERGED = SAMPLE_TRACES / "merged-interfaces.pcapng"
FRAME_FIELDS = ("frame.number", "frame.time_epoch", "frame.len", "frame.cap_len",
                "frame.interface_id", "frame.encap_type")
COMMENT_SEPARATOR = "|"
"""tshark's aggregator between a frame's comments (no comment holds one)."""
TSHARK_ROOT_NOTICE = "Running as user"
"""What Wireshark's tools print on stderr when run as root: about the user, not the file."""
NAGLE_FAMILY = ("nagle-delack-stall", "nagle-rtt-hold", "stream-coalescing")


def _nagledetect(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nagledetect", *args], input=stdin,
                          capture_output=True, timeout=300)


def _annotated(capture: Path | str, out: Path, *extra: str, stdin: bytes | None = None
               ) -> dict:
    """The JSON document of `analyze`, which also wrote `out`."""
    result = _nagledetect("analyze", "--format", "json", "--annotate", str(out), *extra,
                          str(capture), stdin=stdin)
    assert result.returncode == 0, result.stderr
    assert out.exists()
    return json.loads(result.stdout)


def _tshark(capture: Path, *args: str) -> list[str]:
    result = subprocess.run([require_tool("tshark"), "-r", str(capture), *args],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def _frames(capture: Path) -> list[str]:
    """Each frame's number, time, lengths and interface as tshark reads them."""
    return _tshark(capture, "-T", "fields", *(arg for name in FRAME_FIELDS for arg in ("-e", name)))


def _assert_same_frames(out: Path, capture: Path) -> None:
    """Every frame of `out` is the capture's frame of the same number: time, lengths, link
    type, and interface (a pcap's frames, which tshark gives none, are on the one interface
    written for them, 0)."""
    expected = [line.split("\t") for line in _frames(capture)]
    for fields in expected:
        fields[FRAME_FIELDS.index("frame.interface_id")] = (
            fields[FRAME_FIELDS.index("frame.interface_id")] or "0")
    assert [line.split("\t") for line in _frames(out)] == expected


def _comments(capture: Path) -> dict[int, list[str]]:
    lines = _tshark(capture, "-Y", "frame.comment", "-T", "fields", "-e", "frame.number",
                    "-e", "frame.comment", "-E", f"aggregator={COMMENT_SEPARATOR}")
    return {int(number): text.split(COMMENT_SEPARATOR)
            for number, text in (line.split("\t", 1) for line in lines)}


def _roles(document: dict) -> Counter[int]:
    """How many roles each frame plays in the document's evidence: a stall's last data, ACK
    and released data; a gap's last and next data (its ACK frame is its next data)."""
    roles: Counter[int] = Counter()
    for finding in document["findings"]:
        for event in finding["events"]:
            frames = {event["last_data_frame"], event["delayed_ack_frame"],
                      event["released_frame"]}
            roles.update(frames)
    return roles


def _assert_clean_for_wireshark(capture: Path, tmp_path: Path) -> None:
    """capinfos and editcap read it whole, with nothing on stderr but the notice about root."""
    for command in ([require_tool("capinfos"), str(capture)],
                    [require_tool("editcap"), str(capture), str(tmp_path / "copy.pcapng")]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        complaints = [line for line in result.stderr.splitlines()
                      if line.strip() and TSHARK_ROOT_NOTICE not in line]
        assert complaints == [], complaints


def _capinfos(capture: Path) -> list[str]:
    """capinfos's lines about the file's sections, interfaces and packets (not its name, size
    or checksums)."""
    result = subprocess.run([require_tool("capinfos"), str(capture)], capture_output=True,
                            text=True, timeout=120)
    skipped = ("File name", "File size", "SHA256", "RIPEMD160", "SHA1", "Data byte rate",
               "Data bit rate", "Average packet rate")
    return [line for line in result.stdout.splitlines() if not line.startswith(skipped)]


CAPTURES = [
    pytest.param(lambda: SEED003, id="seed003-nagle.pcap"),
    pytest.param(lambda: MERGED, id="merged-interfaces.pcapng"),
    pytest.param(lambda: corpus_file("zeek/irc-dcc-send.pcapng"), id="irc-dcc-send.pcapng"),
    pytest.param(lambda: corpus_file("zeek/ldap__gap-data-missing.pcapng"),
                 id="ldap-gap-data-missing.pcapng"),
]


@pytest.mark.parametrize("capture_of", CAPTURES)
def test_every_evidence_frame_carries_one_comment_per_role(capture_of, tmp_path) -> None:
    """The frames tshark finds comments on are the report's evidence frames, each with one
    comment per role it plays; every frame keeps its number, time, lengths and interface."""
    capture = capture_of()
    out = tmp_path / "annotated.pcapng"
    document = _annotated(capture, out)
    roles = _roles(document)
    assert roles, "the capture must have evidence for this test to say anything"
    comments = _comments(out)
    assert {frame: len(texts) for frame, texts in comments.items()} == dict(roles)
    kinds = {finding["kind"] for finding in document["findings"]}
    assert all(text.split(" ", 1)[0] in kinds for texts in comments.values() for text in texts)
    _assert_same_frames(out, capture)
    _assert_clean_for_wireshark(out, tmp_path)


@pytest.mark.parametrize("capture_of", CAPTURES[:2])
def test_a_filter_on_nagle_finds_the_nagle_evidence(capture_of, tmp_path) -> None:
    """`frame.comment contains "nagle"` shows exactly the frames of the Nagle family's
    evidence (both samples hold Nagle/delayed-ACK stalls, and idle gaps beside them)."""
    out = tmp_path / "annotated.pcapng"
    document = _annotated(capture_of(), out)
    nagle = _roles({"findings": [finding for finding in document["findings"]
                                 if finding["kind"] in NAGLE_FAMILY]})
    shown = _tshark(out, "-Y", 'frame.comment contains "nagle"', "-T", "fields",
                    "-e", "frame.number")
    assert sorted(int(line) for line in shown) == sorted(nagle)


def test_the_first_stall_of_seed003_in_wireshark_words(tmp_path) -> None:
    """Checked by hand with tshark on the input: frame 40 is the client's last data (2 bytes,
    10.77.0.1 -> 10.77.0.2), frame 41 the server's pure ACK 41.050 ms later (the receiver's
    hold, 41.048 ms in the report, plus the 2 us round trip from the tap to the server), frame
    42 the client's 28 held bytes 22 us after that. The comments say so, and frame 40 also ends
    the idle gap after frame 38 (the report's first idle event): two findings, two comments."""
    out = tmp_path / "annotated.pcapng"
    _annotated(SEED003, out)
    rows = _tshark(SEED003, "-Y", "frame.number >= 40 && frame.number <= 42", "-T", "fields",
                   "-e", "ip.src", "-e", "tcp.len", "-e", "frame.time_epoch")
    (client, data_bytes, last_s), (server, ack_bytes, ack_s), (_, held_bytes, held_s) = (
        row.split("\t") for row in rows)
    assert (client, server, data_bytes, ack_bytes, held_bytes) == ("10.77.0.1", "10.77.0.2",
                                                                     "2", "0", "28")
    gap_us = round((float(ack_s) - float(last_s)) * 1e6)
    reaction_us = round((float(held_s) - float(ack_s)) * 1e6)
    assert (gap_us, reaction_us) == (41_050, 22)
    comments = _comments(out)
    assert comments[42] == ["nagle-delack-stall 1/39 on connection 0: held segment, released "
                            "22 us after the delayed ACK in frame 41 (+41.0 ms hold); stall "
                            "41.1 ms since the last data in frame 40"]
    assert comments[41][0].startswith("nagle-delack-stall 1/39 on connection 0: delayed ACK "
                                      "(+41.0 ms hold) of the data up to frame 40")
    assert [text.split(":")[0] for text in comments[40]] == [
        "nagle-delack-stall 1/39 on connection 0", "idle 1/39 on connection 0"]


def test_pcap_becomes_one_interface_of_its_link_type_and_snaplen(tmp_path) -> None:
    """capinfos of the input: Ethernet, file header snapshot length 128, microseconds; the
    output's one interface says the same."""
    out = tmp_path / "annotated.pcapng"
    _annotated(SEED003, out)
    described = _capinfos(out)
    assert "Number of interfaces in file: 1" in described
    for line in ("Encapsulation = Ethernet (1 - ether)", "Capture length = 128",
                 "Time precision = microseconds (6)"):
        assert any(line in text for text in described), line


def test_pcapng_keeps_its_sections_and_interfaces(tmp_path) -> None:
    """The merged sample's two interfaces (Ethernet, microseconds, snaplen 128; Linux cooked
    v2, nanoseconds, if_tsresol 9) and its section's options (mergecap's application and
    OS) read the same in capinfos: everything but the file's name, size and checksums."""
    out = tmp_path / "annotated.pcapng"
    _annotated(MERGED, out)
    assert _capinfos(out) == _capinfos(MERGED)


def test_nanosecond_pcap_keeps_every_nanosecond(tmp_path) -> None:
    """tcpdump's corpus holds a nanosecond pcap whose times end in ...505488, ...027262 and
    ...115157 ns (tshark -e frame.time_epoch): written with if_tsresol 9, they read the same."""
    capture = corpus_file("tcpdump/tcp-handshake-nano.pcap")
    out = tmp_path / "annotated.pcapng"
    _annotated(capture, out)
    times = [line.split("\t")[1] for line in _frames(out)]
    assert times == ["1418145369.924505488", "1418145370.052027262", "1418145370.052115157"]
    _assert_same_frames(out, capture)
    assert any("Time resolution = 0x09" in line for line in _capinfos(out))
    _assert_clean_for_wireshark(out, tmp_path)


def test_compressed_nanosecond_capture_on_standard_input(tmp_path) -> None:
    """seed003 converted by editcap to a nanosecond pcap, gzipped, piped in as `-`: the same
    frames and times as tshark reads from the converted file, the same comments as from the
    original."""
    nanosecond = tmp_path / "seed003-ns.pcap"
    subprocess.run([require_tool("editcap"), "-F", "nsecpcap", str(SEED003), str(nanosecond)],
                   check=True, capture_output=True)
    out = tmp_path / "from-stdin.pcapng"
    _annotated("-", out, stdin=gzip.compress(nanosecond.read_bytes()))
    reference = tmp_path / "reference.pcapng"
    _annotated(SEED003, reference)
    _assert_same_frames(out, nanosecond)
    assert _comments(out) == _comments(reference)


def _pcap_records(capture: Path) -> list[tuple[int, int, bytes, int]]:
    """The records of a little-endian microsecond pcap: seconds, microseconds, data, length
    on the wire."""
    raw = capture.read_bytes()
    assert raw[:4] == b"\xd4\xc3\xb2\xa1"
    records, position = [], 24
    while position + 16 <= len(raw):
        seconds, micro, captured, wire = struct.unpack_from("<IIII", raw, position)
        records.append((seconds, micro, raw[position + 16:position + 16 + captured], wire))
        position += 16 + captured
    return records


def test_big_endian_pcapng_with_comments_of_its_own(tmp_path) -> None:
    """No tool here writes a big-endian pcapng, so seed003's real packets are put in one by
    hand (tests/pcapng_builder), with a comment of the file's own on frame 1. Read back: the
    same frames and evidence comments as the pcap's, frame 1's own comment kept."""
    records = _pcap_records(SEED003)
    capture = tmp_path / "seed003-big-endian.pcapng"
    capture.write_bytes(ng.section(">") + ng.interface(1, "veth0", order=">", snaplen=128)
                        + b"".join(ng.packet(data, seconds * 1_000_000 + micro, order=">",
                                             wire_bytes=wire,
                                             comment="the file's own" if index == 0 else "")
                                   for index, (seconds, micro, data, wire) in enumerate(records)))
    out = tmp_path / "annotated.pcapng"
    reference = tmp_path / "reference.pcapng"
    _annotated(capture, out)
    _annotated(SEED003, reference)
    comments = _comments(out)
    assert comments.pop(1) == ["the file's own"]
    assert comments == _comments(reference)
    assert [line.split("\t")[:4] for line in _frames(out)] == [
        line.split("\t")[:4] for line in _frames(SEED003)]
    _assert_clean_for_wireshark(out, tmp_path)


@pytest.mark.parametrize("relative", ["zeek/krb__kerberos_tso.pcapng",
                                      "tcpdump/of13_ericsson.pcapng"])
def test_only_the_connections_with_findings(relative, tmp_path) -> None:
    """The findings name some of the capture's connections (Wireshark's tcp.stream numbers: 4
    of 11 in the Kerberos capture, 14 of 21 in the OpenFlow one); tshark lists their frames in
    the input. The output holds exactly those frames, in order, with their times and lengths,
    and its comments cite the input's frame numbers."""
    capture = corpus_file(relative)
    out = tmp_path / "annotated.pcapng"
    document = _annotated(capture, out, "--annotate-only-findings")
    streams = sorted({finding["connection"] for finding in document["findings"]})
    assert len(streams) < len(document["connections"])
    kept = _tshark(capture, "-Y", " || ".join(f"tcp.stream == {stream}" for stream in streams),
                   "-T", "fields", "-e", "frame.number")
    everything = _frames(capture)
    assert len(kept) < len(everything)
    written = _frames(out)
    assert [line.split("\t")[1:4] for line in written] == [
        everything[int(number) - 1].split("\t")[1:4] for number in kept]
    roles = _roles(document)
    cited = {int(number) for texts in _comments(out).values() for text in texts
             for number in _frames_named(text)}
    assert cited <= set(roles) and set(int(number) for number in kept) >= set(roles)
    _assert_clean_for_wireshark(out, tmp_path)


def _frames_named(text: str) -> list[str]:
    words = text.replace(";", " ").replace(":", " ").split()
    return [words[index + 1] for index, word in enumerate(words[:-1]) if word == "frame"]


@pytest.mark.parametrize("only_findings", [False, True])
def test_a_capture_in_parts_is_annotated_as_whole(only_findings, tmp_path) -> None:
    """The Kerberos capture analysed in 8 parts (its packet table then read part by part from
    disk) gives the same annotated file, byte for byte, as analysed whole."""
    capture = str(corpus_file("zeek/krb__kerberos_tso.pcapng"))
    written = []
    for part_bytes in (None, os.path.getsize(capture) // 8 + 1):
        analysis = (analyze_capture(capture, keep_tables=True) if part_bytes is None
                    else analyze_capture(capture, keep_tables=True, part_bytes=part_bytes))
        assert (analysis.part_tables is None) == (part_bytes is None)
        comments = FrameComments(build_document([analysis])["findings"])
        kept = connection_frames(analysis, comments.connections) if only_findings else None
        out = tmp_path / f"{part_bytes}.pcapng"
        write_annotated(capture, out, comments, kept)
        written.append(out.read_bytes())
    assert written[0] == written[1]


def test_report_writes_the_same_annotation(tmp_path) -> None:
    out = tmp_path / "from-report.pcapng"
    result = _nagledetect("report", str(SEED003), "-o", str(tmp_path / "r.html"),
                          "--annotate", str(out))
    assert result.returncode == 0, result.stderr
    reference = tmp_path / "reference.pcapng"
    _annotated(SEED003, reference)
    assert _comments(out) == _comments(reference)


def _assert_one_line_error(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert result.stdout == b""


def test_an_output_that_cannot_be_written(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    _assert_one_line_error(_nagledetect("analyze", "--annotate", str(blocker / "out.pcapng"),
                                        str(SEED003)), "cannot write the annotated capture")
    _assert_one_line_error(_nagledetect("analyze", "--annotate", str(tmp_path), str(SEED003)),
                           "is a folder")
    own = tmp_path / "own.pcap"
    own.write_bytes(SEED003.read_bytes())
    _assert_one_line_error(_nagledetect("analyze", "--annotate", str(own), str(own)),
                           "is the capture itself")
    assert own.read_bytes() == SEED003.read_bytes()


def test_several_captures_are_a_usage_error(tmp_path) -> None:
    """One output numbers frames as one capture does: a folder of two captures is refused
    before anything is analysed."""
    folder = tmp_path / "two"
    folder.mkdir()
    for name in ("seed003-nagle.pcap", "seed003-nodelay.pcap"):
        (folder / name).write_bytes((SAMPLE_TRACES / name).read_bytes())
    _assert_one_line_error(_nagledetect("analyze", "--annotate", str(tmp_path / "o.pcapng"),
                                        str(folder)), "one capture")
    assert not (tmp_path / "o.pcapng").exists()


def test_only_findings_needs_an_output() -> None:
    _assert_one_line_error(_nagledetect("analyze", "--annotate-only-findings", str(SEED003)),
                           "needs --annotate")
