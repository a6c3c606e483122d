"""Which files a run reads: the captures named, and the captures inside the folders named.

Why: an archive is a folder of thousands of captures, often with other files among them (notes,
checksums), and more files than a command line can name. A folder stands for every capture
under it, in `ls -R` order; a capture compressed in a format read here (`compressed`) is a
capture; a file found there that is not a capture is left out and listed with the reason, so
that nothing is dropped silently. A file named on its own is always handed to the reader, which
says why it cannot be read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import BinaryIO, TextIO

from nagledetect.errors import InputError
from nagledetect.read.compressed import OPENERS, UNREAD_COMPRESSION, held_start

PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
"""The first bytes of a pcapng file (its section header block's type, in either byte order)."""
CAPTURE_MAGICS = (
    b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4",
    b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d",
    PCAPNG_MAGIC,
)
"""The first four bytes of a pcap file (microsecond or nanosecond, either byte order) and of a
pcapng file."""


STDIN_NAME = "-"
"""The capture name that stands for standard input, as for `tcpdump -r -`."""
STDIN_COPY_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class NotAnalysed:
    """A file of the run that was not analysed, and why. `error`: the run cannot vouch for
    what it holds (a capture that cannot be read, a folder that cannot be listed or has no
    capture), which makes the run's exit status 2; else it is simply not a capture (a note in
    an archive's folder)."""

    path: str
    reason: str
    error: bool


@dataclass
class CaptureList:
    """The captures to analyse, in order, and the files of the named folders left out."""

    paths: list[str] = field(default_factory=list)
    left_out: list[NotAnalysed] = field(default_factory=list)
    stdin_copy: str | None = None
    """The file standard input was copied to, when a capture was named `-`; reports name it
    `-`."""

    def shown_name(self, path: str) -> str:
        """The name a report gives the capture read from `path`."""
        return STDIN_NAME if path == self.stdin_copy else path

    def shown_text(self, text: str) -> str:
        """A message about the captures as a user reads it: the copy of standard input
        named `-`."""
        return text.replace(self.stdin_copy, STDIN_NAME) if self.stdin_copy else text


def stdin_capture(stream: BinaryIO) -> str:
    """Copy a capture on standard input to a file in the run's temporary folder, and return
    its path: a capture is read more than once (its size steers the split into parts, each
    part's worker opens it), which a pipe cannot be. The copy takes the capture's size on
    disk (a compressed one's, until it is read as any compressed file is)."""
    if stream.isatty():
        raise InputError(f"{STDIN_NAME}: standard input is a terminal; pipe a capture into it "
                         "(tcpdump -w - ... | nagledetect -)")
    with tempfile.NamedTemporaryFile(prefix="stdin-", suffix=".pcap", delete=False) as copy:
        shutil.copyfileobj(stream, copy, STDIN_COPY_CHUNK_BYTES)
    return copy.name


def capture_list(names: Iterable[str], stdin: BinaryIO | None = None) -> CaptureList:
    """Each name as it is, or, for a folder, the captures under it in name order (subfolders
    too; a folder reached twice through links is listed once); `-` is the capture on `stdin`
    (None: `-` is a file of that name), which can be read once."""
    found = CaptureList()
    for name in names:
        if name == STDIN_NAME and stdin is not None:
            if found.stdin_copy is not None:
                raise InputError(f"{STDIN_NAME}: standard input named twice; it holds one "
                                 "capture")
            found.stdin_copy = stdin_capture(stdin)
            found.paths.append(found.stdin_copy)
        elif os.path.isdir(name):
            _add_folder(name, found)
        else:
            found.paths.append(name)
    return found


def listed_names(stream: TextIO) -> list[str]:
    """The names in a list of files (`--files-from`): one a line, blank lines ignored, the line
    taken whole otherwise (a name may hold spaces); or, when the list holds a NUL character
    (`find -print0`), one per NUL-ended name (a name may then hold a line break)."""
    text = stream.read()
    if "\0" in text:
        return [name for name in text.split("\0") if name]
    return [line.rstrip("\r") for line in text.split("\n") if line.strip()]


def _add_folder(folder: str, found: CaptureList) -> None:
    """The captures under `folder`, depth first as `ls -R` lists them; each folder listed once
    (by device and inode), so that a link back up the tree does not walk forever."""
    before = len(found.paths)
    seen: set[tuple[int, int]] = set()
    listed_all = True
    pending = [folder]
    while pending:
        place = pending.pop()
        try:
            status = os.stat(place)
            if (status.st_dev, status.st_ino) in seen:
                continue
            seen.add((status.st_dev, status.st_ino))
            with os.scandir(place) as listing:
                entries = sorted(listing, key=attrgetter("name"))
        except OSError as error:
            found.left_out.append(NotAnalysed(place, f"cannot list this folder "
                                                     f"({error.strerror})", error=True))
            listed_all = False
            continue
        subfolders = [entry.path for entry in entries if entry.is_dir()]
        for entry in entries:
            if not entry.is_dir():
                _add_file(entry, found)
        pending += reversed(subfolders)
    if len(found.paths) == before and listed_all:
        found.left_out.append(NotAnalysed(folder, "no pcap or pcapng capture in this folder",
                                          error=True))


def _add_file(entry: os.DirEntry, found: CaptureList) -> None:
    """The file as a capture, or left out with the reason (a pipe or a device is not opened:
    reading one could wait forever)."""
    if not entry.is_file():
        found.left_out.append(
            NotAnalysed(entry.path, "a link to nothing", error=True) if entry.is_symlink()
            else NotAnalysed(entry.path, "not a regular file", error=False))
        return
    try:
        compression, start = held_start(entry.path)
    except OSError as error:
        found.left_out.append(NotAnalysed(entry.path, f"cannot be read ({error.strerror})",
                                          error=True))
        return
    if start in CAPTURE_MAGICS:
        found.paths.append(entry.path)
    elif compression is not None:
        found.left_out.append(NotAnalysed(entry.path, _compressed_reason(compression),
                                          error=False))
    else:
        found.left_out.append(NotAnalysed(entry.path, "empty file, not a capture" if not start
                                          else "not a pcap or pcapng capture", error=False))


def _compressed_reason(compression: str) -> str:
    if compression in OPENERS:
        return f"compressed with {compression}, not a pcap or pcapng capture inside"
    return f"compressed with {compression}: {UNREAD_COMPRESSION}"
