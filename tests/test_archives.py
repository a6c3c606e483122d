"""Runs over archives as users keep them: folders of captures with other files among them, lists
of files too long for a command line, and a capture that cannot be read among many.

The archive is built from the real sample traces (Linux TCP from the lab). What each run must
give is checked against a run over the same captures named one by one, which the other tests
check against the traces: a folder, a list or a bad file among good ones must change nothing
about the captures analysed.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.conftest import SAMPLE_TRACES

NAGLE = "seed003-nagle.pcap"
RPC = "trap-rpc.pcap"
MERGED = "merged-interfaces.pcapng"


def nagledetect(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nagledetect", *args], capture_output=True,
                          text=True, input=stdin, timeout=300)


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """archive/: b-rpc.pcap, empty.pcap, notes.txt, old/older.pcap.zst, old/seed003.pcap.gz,
    old/z/a-nagle.pcap and old/z/merged.pcapng. Its captures, in the order a folder is read
    (each folder's own files, then its subfolders, names in order at each level, as `ls -R`
    lists them): b-rpc.pcap, old/seed003.pcap.gz, old/z/a-nagle.pcap, old/z/merged.pcapng.
    The zstd file (its magic and zeros) is not read: Python has no zstd decompressor here."""
    root = tmp_path / "archive"
    (root / "old" / "z").mkdir(parents=True)
    shutil.copy(SAMPLE_TRACES / RPC, root / "b-rpc.pcap")
    (root / "notes.txt").write_text("captured on the staging pair\n")
    (root / "empty.pcap").write_bytes(b"")
    (root / "old" / "seed003.pcap.gz").write_bytes(gzip.compress((SAMPLE_TRACES / NAGLE)
                                                                 .read_bytes()))
    (root / "old" / "older.pcap.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(60))
    shutil.copy(SAMPLE_TRACES / NAGLE, root / "old" / "z" / "a-nagle.pcap")
    shutil.copy(SAMPLE_TRACES / MERGED, root / "old" / "z" / "merged.pcapng")
    return root


def _captures_in(root: Path) -> list[str]:
    return [str(root / "b-rpc.pcap"), str(root / "old" / "seed003.pcap.gz"),
            str(root / "old" / "z" / "a-nagle.pcap"), str(root / "old" / "z" / "merged.pcapng")]


def _without_not_analysed(document: dict) -> dict:
    """The document less what names the captures left out: their list, and the headline's
    words and count of them."""
    kept = {key: value for key, value in document.items() if key != "not_analysed"}
    kept["headline"] = {key: value for key, value in document["headline"].items()
                        if key not in ("text", "not_analysed")}
    return kept


def test_a_folder_is_its_captures_in_name_order_and_lists_what_it_left_out(archive) -> None:
    by_folder = nagledetect("analyze", "--format", "json", "-j", "1", str(archive))
    by_name = nagledetect("analyze", "--format", "json", "-j", "1", *_captures_in(archive))
    assert by_folder.returncode == by_name.returncode == 0, by_folder.stderr
    folder_document = json.loads(by_folder.stdout)
    assert [c["path"] for c in folder_document["captures"]] == _captures_in(archive)
    assert _without_not_analysed(folder_document) == _without_not_analysed(
        json.loads(by_name.stdout))
    assert folder_document["not_analysed"] == [
        {"path": str(archive / "empty.pcap"), "reason": "empty file, not a capture",
         "error": False},
        {"path": str(archive / "notes.txt"), "reason": "not a pcap or pcapng capture",
         "error": False},
        {"path": str(archive / "old" / "older.pcap.zst"),
         "reason": "compressed with zstd: decompress it to analyse it (nagledetect reads gzip, "
                   "bzip2 and xz)", "error": False}]
    # One line: the compiled core reads the merged sample's mixed interfaces natively, with
    # nothing to warn of.
    assert by_folder.stderr.count("\n") == 1
    assert "left out 3 files of the folders named" in by_folder.stderr


def test_the_text_and_html_reports_list_the_files_left_out(archive, tmp_path) -> None:
    page = tmp_path / "report.html"
    result = nagledetect("analyze", "--html", str(page), str(archive))
    assert result.returncode == 0
    assert "NOT ANALYSED (3 files)" in result.stdout
    assert f"  left out: {archive / 'notes.txt'}: not a pcap or pcapng capture" in result.stdout
    assert result.stdout.splitlines()[0].endswith("(4 captures, 5 connections).")
    html = page.read_text()
    assert "<h2>Not analysed (3 files)</h2>" in html and "older.pcap.zst" in html


def test_files_from_a_list_or_standard_input_are_the_same_run(archive, tmp_path) -> None:
    listed = tmp_path / "list.txt"
    listed.write_text("\n".join([str(archive / "b-rpc.pcap"), "",
                                 str(archive / "old")]) + "\n")
    from_file = nagledetect("analyze", "--format", "json", "--files-from", str(listed))
    from_stdin = nagledetect("analyze", "--format", "json", "--files-from", "-",
                             stdin=listed.read_text())
    by_name = nagledetect("analyze", "--format", "json", *_captures_in(archive))
    assert from_file.returncode == from_stdin.returncode == by_name.returncode == 0
    assert from_file.stdout == from_stdin.stdout
    assert _without_not_analysed(json.loads(from_file.stdout)) == _without_not_analysed(
        json.loads(by_name.stdout))


def test_no_capture_named_is_a_usage_error() -> None:
    result = nagledetect("analyze")
    assert result.returncode == 2 and "name a capture or a folder" in result.stderr


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_unreadable_capture_among_others_is_named_and_the_others_reported(
        archive, tmp_path, jobs: str) -> None:
    """One error line, the others' document unchanged, the bad file listed, exit status 2
    (after the report, as a linter reports the files it could read)."""
    broken = tmp_path / "broken.pcap"
    broken.write_bytes((SAMPLE_TRACES / NAGLE).read_bytes()[:10])
    good = _captures_in(archive)
    with_bad = nagledetect("analyze", "--format", "json", "-j", jobs, good[0], str(broken),
                           *good[1:])
    without = nagledetect("analyze", "--format", "json", "-j", jobs, *good)
    assert with_bad.returncode == 2
    error_lines = [line for line in with_bad.stderr.splitlines() if "error" in line]
    assert error_lines == [f"nagledetect: error: {broken}: truncated pcap file header"]
    document = json.loads(with_bad.stdout)
    assert document["not_analysed"] == [{"path": str(broken), "reason": error_lines[0].split(
        f"{broken}: ", 1)[1], "error": True}]
    assert _without_not_analysed(document) == _without_not_analysed(json.loads(without.stdout))


def test_the_text_report_headline_says_a_capture_could_not_be_analysed(tmp_path) -> None:
    missing = tmp_path / "gone.pcap"
    result = nagledetect("analyze", str(SAMPLE_TRACES / NAGLE), str(missing))
    assert result.returncode == 2
    assert result.stdout.splitlines()[0] == (
        "39 Nagle/delayed-ACK stalls cost 1.619 s on 1 connection direction (1 capture, 1 "
        "connection; 1 could not be analysed).")
    assert f"  error: {missing}: no such file" in result.stdout


def test_one_reason_shared_by_many_captures_is_one_line(archive) -> None:
    result = nagledetect("analyze", "--filter", "tcp port banana", str(archive))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines()[0] == (
        f"nagledetect: error: {archive / 'b-rpc.pcap'} and 3 other files: invalid filter "
        "'tcp port banana': unknown port 'banana'")


def test_check_reports_an_unreadable_capture_as_an_error(tmp_path) -> None:
    """Within budget, but the gate cannot vouch for a capture it could not read: exit 2, an
    ERROR line, a JUnit testcase in error and a GitHub annotation."""
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    junit = tmp_path / "junit.xml"
    result = nagledetect("check", "--max-stalls", "0", "--junit", str(junit), "--github",
                         str(SAMPLE_TRACES / RPC), str(empty))
    assert result.returncode == 2
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"PASS {SAMPLE_TRACES / RPC}: 0 stalls")
    assert lines[1] == f"ERROR {empty}: empty file, not a capture"
    assert lines[2] == (f"::error file={empty},title=nagledetect readable::empty file, not a "
                        "capture")
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "0", "1")
    error = suite.find("testcase[@name='readable']/error")
    assert error is not None and error.get("message") == "empty file, not a capture"


def test_links_between_folders_are_followed_once_and_pipes_are_not_opened(archive) -> None:
    """A link back up the tree would walk forever; a named pipe opened to read its first bytes
    would wait forever."""
    (archive / "old" / "z" / "up").symlink_to(archive, target_is_directory=True)
    os.mkfifo(archive / "incoming")
    result = nagledetect("analyze", "--format", "json", str(archive))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [c["path"] for c in document["captures"]] == _captures_in(archive)
    assert {"path": str(archive / "incoming"), "reason": "not a regular file",
            "error": False} in document["not_analysed"]


def test_a_link_to_nothing_in_a_folder_is_an_error(archive, tmp_path) -> None:
    """A capture the archive points at but does not hold: the run cannot vouch for it."""
    (archive / "c-moved.pcap").symlink_to(tmp_path / "moved-away.pcap")
    result = nagledetect("analyze", "--format", "json", str(archive))
    assert result.returncode == 2
    assert f"nagledetect: error: {archive / 'c-moved.pcap'}: a link to nothing" in result.stderr
    document = json.loads(result.stdout)
    assert len(document["captures"]) == 4
    assert document["not_analysed"][0] == {"path": str(archive / "c-moved.pcap"),
                                           "reason": "a link to nothing", "error": True}


def test_capture_entries_made_when_read_are_the_same_in_any_order() -> None:
    """The document's capture entries are made a chunk at a time as they are read; read one by
    one across a chunk's edge, backwards, or as slices, each is its capture's."""
    import dataclasses

    from nagledetect.analysis import analyze_capture
    from nagledetect.chunked import RECORDS_PER_CHUNK
    from nagledetect.report.document import CaptureEntries
    from nagledetect.sent_tables import ColumnReader

    capture = analyze_capture(str(SAMPLE_TRACES / NAGLE)).capture
    count = RECORDS_PER_CHUNK + 5
    captures = [dataclasses.replace(capture, path=f"capture-{index}.pcap")
                for index in range(count)]
    entries = CaptureEntries(captures, ColumnReader())
    positions = [0, RECORDS_PER_CHUNK - 1, RECORDS_PER_CHUNK, count - 1, 3, RECORDS_PER_CHUNK + 2]
    assert [entries[p]["path"] for p in positions] == [f"capture-{p}.pcap" for p in positions]
    assert [entry["path"] for entry in entries[RECORDS_PER_CHUNK - 2:RECORDS_PER_CHUNK + 2]] == [
        f"capture-{p}.pcap" for p in range(RECORDS_PER_CHUNK - 2, RECORDS_PER_CHUNK + 2)]
    assert len(entries) == count and entries[-1]["packets"] == 246


def test_files_from_takes_nul_ended_names_as_find_print0_writes_them(archive, tmp_path) -> None:
    """A name with a line break in it survives a NUL-ended list."""
    odd = tmp_path / "rotated\nat midnight.pcap"
    shutil.copy(SAMPLE_TRACES / RPC, odd)
    listed = subprocess.run(["find", str(archive / "old"), str(odd), "-type", "f", "!", "-name",
                             "*.zst", "-print0"], capture_output=True, check=True).stdout
    result = nagledetect("analyze", "--format", "json", "--files-from", "-",
                         stdin=listed.decode())
    assert result.returncode == 0, result.stderr
    paths = sorted(capture["path"] for capture in json.loads(result.stdout)["captures"])
    assert paths == sorted([*_captures_in(archive)[1:], str(odd)])
