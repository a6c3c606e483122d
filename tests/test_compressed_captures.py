"""Captures compressed with gzip, bzip2 or xz are read as the captures they hold.

Each compressed capture is made here from a real sample trace with Python's own compressors,
and its document must be the plain capture's (only the path differs): the plain documents are
the ones the other tests check by hand. The cut stream was checked by hand too: the 3,000 bytes
kept of seed003-nagle.pcap compressed by `gzip` (the tool) decompress (zlib) to 13,527 bytes,
from which `tcpdump -r` prints 153 packets, then "truncated dump file; tried to read 68 captured
bytes, only got 61", and nagledetect reads the same 153 with the same warning.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import struct
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from nagledetect import _core
from nagledetect.analysis import analyze_capture
from nagledetect.errors import InputError
from nagledetect.read.compressed import DecompressedCopy, capture_bytes
from nagledetect.report.document import build_document
from tests.conftest import SAMPLE_TRACES

NAGLE = SAMPLE_TRACES / "seed003-nagle.pcap"
MERGED = SAMPLE_TRACES / "merged-interfaces.pcapng"
COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}


def nagledetect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nagledetect", *args], capture_output=True,
                          text=True, timeout=300)


def _compressed(plain: Path, suffix: str, folder: Path) -> Path:
    path = folder / f"{plain.name}.{suffix}"
    path.write_bytes(COMPRESSORS[suffix](plain.read_bytes()))
    return path


def _document(*args: str) -> dict:
    result = nagledetect("analyze", "--format", "json", *args)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    for capture in document["captures"]:
        capture["path"] = os.path.basename(capture["path"]).rsplit(".", 1)[0]
    return document


@pytest.mark.parametrize("suffix", COMPRESSORS)
@pytest.mark.parametrize("plain", [NAGLE, MERGED], ids=lambda p: p.name)
def test_a_compressed_capture_gives_the_plain_capture_s_document(tmp_path, plain: Path,
                                                                 suffix: str) -> None:
    compressed = _compressed(plain, suffix, tmp_path)
    plain_document = _document(str(plain))
    plain_document["captures"][0]["path"] = plain.name
    assert _document(str(compressed)) == plain_document


def test_a_compressed_capture_in_parts_is_split_by_its_decompressed_size(tmp_path) -> None:
    """gzip's trailer gives the decompressed size, so a compressed capture gets the parts its
    packets need (here 5, as the plain one), and the same findings as the plain one whole."""
    compressed = _compressed(SAMPLE_TRACES / "mixed.pcap", "gz", tmp_path)
    plain_bytes = os.path.getsize(SAMPLE_TRACES / "mixed.pcap")
    assert capture_bytes(str(compressed)) == plain_bytes
    whole = build_document([analyze_capture(str(SAMPLE_TRACES / "mixed.pcap"))])
    split = build_document([analyze_capture(str(compressed), part_bytes=plain_bytes // 5 + 1)])
    split["captures"][0]["path"] = whole["captures"][0]["path"]
    assert whole["findings"] and split == whole


def test_the_decompressed_size_of_a_gzip_capture_is_its_trailer_s(tmp_path) -> None:
    """Also for a capture so small that its gzip file is the larger (the file header alone:
    read as 4 GiB it would be split into hundreds of parts; an archive of small captures took
    ten times as long)."""
    plain = NAGLE.read_bytes()
    tiny = plain[:24]
    for content in (plain, tiny):
        path = tmp_path / "capture.pcap.gz"
        path.write_bytes(gzip.compress(content))
        assert capture_bytes(str(path)) == len(content)
    assert os.path.getsize(path) > len(tiny)


def _complete_records(plain: bytes) -> int:
    """The whole records in a pcap file's bytes (little-endian), walked header by header."""
    position, records = 24, 0
    while position + 16 <= len(plain):
        (captured,) = struct.unpack_from("<I", plain, position + 8)
        if position + 16 + captured > len(plain):
            break
        position += 16 + captured
        records += 1
    return records


@pytest.mark.parametrize("kept_bytes", [2000, 3000])
def test_a_cut_gzip_stream_gives_what_it_held_and_says_so(tmp_path, kept_bytes: int) -> None:
    """The records a cut stream holds are counted here from zlib's own decompression of the
    bytes kept (3,000 bytes: 155 records, all whole, as `tcpdump -r` reads them too)."""
    kept = gzip.compress(NAGLE.read_bytes())[:kept_bytes]
    cut = tmp_path / "cut.pcap.gz"
    cut.write_bytes(kept)
    result = nagledetect("analyze", "--format", "json", str(cut))
    assert result.returncode == 0
    capture = json.loads(result.stdout)["captures"][0]
    assert capture["packets"] == _complete_records(zlib.decompressobj(31).decompress(kept)) > 50
    assert capture["warnings"][0] == ("compressed capture cut short (the gzip stream ends "
                                      "before its end marker); analysed what it held")


@pytest.mark.parametrize(("content", "reason"), [
    (b"\x28\xb5\x2f\xfd" + bytes(40), "compressed with zstd: decompress it to analyse it "
                                      "(nagledetect reads gzip, bzip2 and xz)"),
    (b"\x1f\x8b" + bytes(40), "damaged gzip data"),
    (gzip.compress(b"not a capture at all", mtime=0), "not a pcap or pcapng capture (once decompressed "
                                             "from gzip)"),
])
def test_what_cannot_be_read_is_one_line(tmp_path, content: bytes, reason: str) -> None:
    path = tmp_path / "capture.pcap.gz"
    path.write_bytes(content)
    result = nagledetect(str(path))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"nagledetect: error: {path}: {reason}")
    assert len(result.stderr.splitlines()) == 1


def test_an_annotated_compressed_capture_leaves_no_decompressed_copy(tmp_path) -> None:
    """The annotated copy of a compressed capture is written from a decompressed temporary
    copy (`DecompressedCopy`), removed once written; the annotated file holds every frame
    (246, `capinfos -c seed003-nagle.pcap`)."""
    compressed = _compressed(NAGLE, "gz", tmp_path)
    copies = tmp_path / "copies"
    copies.mkdir()
    annotated = tmp_path / "annotated.pcapng"
    result = subprocess.run([sys.executable, "-m", "nagledetect", "analyze", "--annotate",
                             str(annotated), str(compressed)], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "TMPDIR": str(copies)})
    assert result.returncode == 0, result.stderr
    assert list(copies.iterdir()) == []
    assert len(_core.decode_file(str(annotated))["packets"]["frame"]) == 246


def test_a_folder_s_compressed_captures_are_captures(tmp_path) -> None:
    folder = tmp_path / "rotated"
    folder.mkdir()
    _compressed(NAGLE, "gz", folder)
    (folder / "notes.txt.gz").write_bytes(gzip.compress(b"pair 3, staging\n"))
    result = nagledetect("analyze", "--format", "json", str(folder))
    assert result.returncode == 0
    document = json.loads(result.stdout)
    assert [c["path"] for c in document["captures"]] == [str(folder / "seed003-nagle.pcap.gz")]
    assert document["not_analysed"] == [{
        "path": str(folder / "notes.txt.gz"),
        "reason": "compressed with gzip, not a pcap or pcapng capture inside", "error": False}]


def test_a_damaged_stream_leaves_no_decompressed_copy(tmp_path, monkeypatch) -> None:
    """A gzip stream damaged from its first block (the magic, then zeros) cannot be copied: the
    error names it, and the empty copy begun in the temporary folder is removed."""
    path = tmp_path / "damaged.pcap.gz"
    path.write_bytes(b"\x1f\x8b" + bytes(40))
    copies = tmp_path / "copies"
    copies.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(copies))
    with pytest.raises(InputError, match="damaged gzip data"):
        DecompressedCopy(str(path), "gzip")
    assert list(copies.iterdir()) == []
