"""The command line: a thin layer over `analyze_capture` and the reporters.

`nagledetect CAPTURE...` is the same as `nagledetect analyze CAPTURE...`. Results go to stdout,
progress and errors to stderr; bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import re
import shutil
import signal
import socket
import sys
import tempfile
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, Future, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import click

from nagledetect import __version__
from nagledetect.analysis import (
    Analysis,
    RunKeeping,
    Wanted,
    analyze_capture,
    analyze_together,
    capture_groups,
    capture_sizes,
    for_another_process,
    handed_over,
    spills_read_by,
)
from nagledetect.detectors.kinds import ALL_KINDS, CONFIDENCE_LEVELS
from nagledetect.errors import InputError
from nagledetect.live import (
    DEFAULT_SNAPLEN,
    LiveCaptureList,
    LiveError,
    LiveOptions,
    add_capture_warnings,
    capture_live,
)
from nagledetect.memory import ordinary_pages_for_arrays
from nagledetect.part_sizes import PARTS_MEMORY_BYTES
from nagledetect.progress import ProgressLine
from nagledetect.read.inputs import (
    STDIN_NAME,
    CaptureList,
    NotAnalysed,
    capture_list,
    listed_names,
)
from nagledetect.report.document import SCHEMA, build_document, write_json
from nagledetect.report.text import LANGUAGES, render_text
from nagledetect.stored import SpillFile
from nagledetect.workers import kill_children, worker_pool

if TYPE_CHECKING:
    from nagledetect.gate import RuleResult

JOBS_OPTION = click.option("-j", "--jobs", type=click.IntRange(1),
                           help="Parallel processes: one per capture, or per part of one large "
                                "capture (default: all cores; one for several captures of less "
                                "than 64 MB in all, where starting more costs more).")
DASK_OPTION = click.option("--dask", "dask_address", metavar="SCHEDULER_ADDRESS",
                           help="Run the per-file analysis on this Dask cluster (tcp://host:8786).")
FILES_FROM_OPTION = click.option(
    "--files-from", type=click.File("r", encoding="utf-8", errors="surrogateescape"),
    metavar="FILE", help="Also the captures or folders listed in FILE, one a line, or NUL-ended "
                         "as find -print0 writes them ('-': standard input): for archives too "
                         "large to name on the command line.")
CAPTURES_ARGUMENT = click.argument("captures", nargs=-1, type=click.Path())
ANNOTATE_OPTION = click.option(
    "--annotate", "annotate_path", type=click.Path(path_type=Path), metavar="OUT.pcapng",
    help="Also write the capture as pcapng with a packet comment on every evidence frame, one "
         "per finding and role (e.g. 'nagle-delack-stall 1/39 on connection 0: held segment, "
         "released 22 us after the delayed ACK in frame 41 (+41.0 ms hold); ...'): in "
         "Wireshark or "
         "tshark, frame.comment contains \"nagle\" finds them. Frames, timestamps, link types "
         "and interfaces are kept as they are: frame N is the capture's frame N. One capture "
         "only.")
ANNOTATE_ONLY_FINDINGS_OPTION = click.option(
    "--annotate-only-findings", is_flag=True,
    help="With --annotate: write only the packets of connections that have findings; frames "
         "are then numbered anew, and the comments still cite the capture's own frame "
         "numbers (as the report does).")
BYTE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class ByteSize(click.ParamType):
    """A size in bytes written as sort(1) and Docker take it: 800M, 1.5G, 4096."""

    name = "size"

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", str(value), re.I)
        size = float(found[1]) * BYTE_UNITS[found[2].upper()] if found else 0.0
        if size < 1:
            self.fail(f"{value!r} is not a size (e.g. 800M, 4G)", param, ctx)
        return int(size)


MEMORY_OPTION = click.option(
    "--memory", "parts_memory", type=ByteSize(), default=PARTS_MEMORY_BYTES, metavar="SIZE",
    help=f"About what the analysis of a capture may take (default {PARTS_MEMORY_BYTES >> 20}M), "
         "with -j each capture analysed at once. A capture whose whole analysis fits (about 6 "
         "bytes a byte of capture) is analysed whole; a larger one a batch of finished "
         "connections at a time, half of it for the batch, half for the connections still "
         "open (about 200 bytes a packet they hold; the events they keep are the findings' "
         "evidence and are not counted), or in parts where those need more. More "
         "lets the parts of a few huge connections run at once, each counted at about 240 "
         "bytes a packet of its connections (read a slice at a time, such a part takes up to "
         "about 190, a bulk transfer almost nothing).")
DASK_CONNECT_TIMEOUT_S = 30
ONE_PROCESS_BYTES = 64 * 1024 * 1024
"""Captures of fewer bytes in all are analysed in this process unless -j is given: a run over
them takes about a second, and worker processes would cost it more in starting and handing
results back than they save (the corpora, 1,618 captures of 34 MB: 0.56 s in one process, 0.63
s in two; five times as many: 1.98 and 1.93 s)."""
EXIT_BUDGET_EXCEEDED = 1
REPORT_MODE = 0o644
EXIT_INPUT_ERROR = 2
PROGRESS_TICK_S = 0.5
"""How often a parallel run's progress line is drawn again while no capture finishes."""
RUN_FOLDER_PREFIX = "nagledetect-run-"
"""Every temporary file of a run goes in one folder of this name in TMPDIR."""
HANDOVER_PREFIX = "nagledetect-handover-"
USER_TEMPORARY_ROOT = tempfile.gettempdir()
"""Where temporary files go, as the user set it (TMPDIR), before the run's folder in it."""
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
TERMINATED_EXIT = 128 + signal.SIGTERM
"""The exit status of a run stopped by SIGTERM, as the shell reports a process it ended."""
KILLED_WORKER_TEXT = ("a worker process was killed (out of memory, or by a signal); "
                      "fewer jobs (-j) need less memory")


class _DefaultToAnalyze(click.Group):
    """A group whose first argument, when it is not a command, is a capture for `analyze`.
    `lab` is imported when it is named (or listed): its scenarios and runner cost a small
    capture's run a twentieth of its time."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), "lab"])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name == "lab":
            from nagledetect.lab.cli import lab

            return lab
        return super().get_command(ctx, name)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        known = (*self.commands, "lab")
        if args and args[0] not in known and not args[0].startswith("-"):
            args = ["analyze", *args]
        elif args and args[0].startswith("-") and args[0] not in ("--help", "-h", "--version"):
            args = ["analyze", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultToAnalyze, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nagledetect")
def main() -> None:
    """Find TCP stalls caused by Nagle's algorithm meeting delayed ACKs.

    \b
    Examples:
      nagledetect capture.pcap                      # same as: nagledetect analyze capture.pcap
      nagledetect analyze --format json a.pcap b.pcapng
      nagledetect analyze --filter 'tcp port 443' capture.pcap
    """
    ordinary_pages_for_arrays()
    context = click.get_current_context()
    run_folder = context.with_resource(tempfile.TemporaryDirectory(prefix=RUN_FOLDER_PREFIX))
    # Every temporary file of the run goes in its folder; the next run in this process (a test,
    # a program calling `main`) makes its own where the first did.
    context.call_on_close(partial(setattr, tempfile, "tempdir", tempfile.tempdir))
    tempfile.tempdir = run_folder
    signal.signal(signal.SIGTERM, partial(_terminate_cleanly, os.getpid(), run_folder))
    os.register_at_fork(after_in_child=_default_sigterm)


def _terminate_cleanly(main_pid: int, run_folder: str, signum: int, frame: object) -> None:
    """SIGTERM (a CI job's time limit, `timeout`, a cancelled run): kill the worker processes,
    remove the run's temporary files (80 bytes a packet of a large capture, all in one folder),
    then end. Unwinding instead, from wherever the signal came, could stop in a lock held at a
    fork. The workers are killed outright (`workers.kill_children`). A worker signalled before
    `_default_sigterm` ran in it just ends."""
    if os.getpid() == main_pid:
        kill_children()
        shutil.rmtree(run_folder, ignore_errors=True)
    os._exit(TERMINATED_EXIT)


def _default_sigterm() -> None:
    """A forked worker ends at SIGTERM as any process does (its pool may terminate it): with the
    handler above it would end only once it ran Python again, and one waiting on a lock would
    not, and hang its pool."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@main.command()
@CAPTURES_ARGUMENT
@click.option("--filter", "bpf_filter", metavar="EXPR",
              help="BPF expression, as in tcpdump (e.g. 'host 10.0.0.1 and tcp port 80').")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Report format on stdout.")
@click.option("-v", "--verbose", is_flag=True,
              help="List every finding, stall event, host and connection (by default the top 10 "
                   "findings with 3 events each, 20 hosts and 50 connections).")
@click.option("--fixes", "all_fixes", is_flag=True,
              help="Show every fix with its code in all languages (by default each finding "
                   "names one fix and the side that must change).")
@click.option("--lang", "language", type=click.Choice(LANGUAGES, case_sensitive=False),
              help="Show every fix with its code in this language only.")
@click.option("--tables", "tables_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also write packets, connections, messages and findings tables into this folder.")
@click.option("--tables-format", type=click.Choice(["csv", "parquet"]), default="csv",
              show_default=True, help="Format of --tables (parquet needs pyarrow).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the self-contained HTML report to this file.")
@ANNOTATE_OPTION
@ANNOTATE_ONLY_FINDINGS_OPTION
@JOBS_OPTION
@MEMORY_OPTION
@DASK_OPTION
@FILES_FROM_OPTION
def analyze(captures: tuple[str, ...], bpf_filter: str | None, output_format: str,
            verbose: bool, all_fixes: bool, language: str | None, tables_dir: Path | None,
            tables_format: str, html_path: Path | None, annotate_path: Path | None,
            annotate_only_findings: bool, jobs: int | None, parts_memory: int,
            dask_address: str | None, files_from: TextIO | None) -> None:
    """Analyse pcap/pcapng CAPTURES and print the diagnosis ('-': a capture on standard
    input, as for tcpdump -r -).

    A folder stands for every capture under it; captures compressed with gzip, bzip2 or xz
    are read as they are. Frame numbers are 1-based positions in the file, as Wireshark shows
    them (also with --filter: packets the filter excludes are counted
    as skipped, not renumbered). A capture that cannot be read is named on stderr and the run
    goes on with the others, then ends with exit status 2.

    \b
    Examples:
      nagledetect analyze sample_traces/seed003-nagle.pcap
      nagledetect analyze --lang python sample_traces/seed003-nagle.pcap
      tcpdump -i eth0 -s 128 -w - 'tcp port 8080' | nagledetect -
      nagledetect analyze --format json capture.pcapng > result.json
      nagledetect analyze -j 8 --html archive.html /srv/captures/
      find /srv/captures -mtime -1 -print0 | nagledetect analyze --files-from -
      nagledetect analyze --annotate evidence.pcapng capture.pcap.gz
    """
    found = _capture_list(captures, files_from)
    _check_annotate(annotate_path, annotate_only_findings, found)
    run = _analyze_all(found, bpf_filter, jobs, dask_address,
                       Wanted(tables=bool(tables_dir) or annotate_only_findings,
                              charts=bool(html_path)),
                       parts_memory=parts_memory)
    document = build_document(run.analyses, run.not_analysed)
    if tables_dir:
        _write_tables(run.analyses, tables_dir, tables_format)
    _report(document, run, found, _Outputs(
        output_format, html_path, annotate_path, annotate_only_findings, jobs,
        verbose=verbose, languages=LANGUAGES if all_fixes else _chosen_language(language)))


INTERFACE_OPTION = click.option("-i", "--interface", metavar="IFACE",
                                help="The interface to capture on (as tcpdump -i; 'any': all).")
DURATION_OPTION = click.option("--duration", "duration_s", type=click.FloatRange(0, min_open=True),
                               metavar="SECONDS", help="Capture for this long.")
PACKETS_OPTION = click.option("--packets", type=click.IntRange(1), metavar="N",
                              help="Capture this many packets.")
SNAPLEN_OPTION = click.option(
    "--snaplen", type=click.IntRange(1, DEFAULT_SNAPLEN), default=DEFAULT_SNAPLEN,
    show_default=True, metavar="BYTES",
    help="Bytes kept of each packet (tcpdump's -s); 128 is enough for the analysis, which "
         "reads only headers.")
WRITE_OPTION = click.option(
    "--write", "write_path", type=click.Path(dir_okay=False), metavar="FILE.pcap",
    help="Keep the packets captured in this pcap file (as tcpdump -w writes it); by default "
         "they go to a temporary file, removed at the end.")


@main.command()
@INTERFACE_OPTION
@click.option("--filter", "bpf_filter", metavar="EXPR",
              help="BPF expression, as in tcpdump, applied while capturing.")
@DURATION_OPTION
@PACKETS_OPTION
@SNAPLEN_OPTION
@WRITE_OPTION
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Report format on stdout.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the self-contained HTML report to this file.")
@ANNOTATE_OPTION
@ANNOTATE_ONLY_FINDINGS_OPTION
@MEMORY_OPTION
def live(interface: str | None, bpf_filter: str | None, duration_s: float | None,
         packets: int | None, snaplen: int, write_path: str | None, output_format: str,
         html_path: Path | None, annotate_path: Path | None,
         annotate_only_findings: bool, parts_memory: int) -> None:
    """Capture on an interface, show the stalls found so far, then report as analyze does.

    Needs root, or CAP_NET_RAW and CAP_NET_ADMIN. On a terminal a view refreshes about once
    a second: packets and drops so far, connections, the Nagle-family stalls found so far and
    the worst connections (it analyses the file written so far, no more than about a third of
    the time). The capture ends after --duration, after --packets, or at Ctrl-C; then the
    report is exactly what 'nagledetect analyze' prints for the packets captured (--write
    keeps them), and one line on stderr gives libpcap's counts of packets captured and
    dropped. Dropped packets are named in the report's warnings.

    \b
    Examples:
      sudo nagledetect live -i eth0 --filter 'tcp port 8080' --snaplen 128
      sudo nagledetect live -i eth0 --duration 60 --write staging.pcap --format json
    """
    options = _live_options(interface, bpf_filter, duration_s, packets, snaplen, write_path,
                            parts_memory)
    _check_annotate(annotate_path, annotate_only_findings, CaptureList())
    if annotate_path and write_path and os.path.abspath(annotate_path) == os.path.abspath(
            write_path):
        _fail(f"{annotate_path}: is the capture itself; --annotate writes a new file")
    found, run = _live_run(options, Wanted(tables=annotate_only_findings,
                                           charts=bool(html_path)))
    document = build_document(run.analyses, run.not_analysed)
    _report(document, run, found, _Outputs(output_format, html_path, annotate_path,
                                           annotate_only_findings, None))


def _live_options(interface: str | None, bpf_filter: str | None, duration_s: float | None,
                  packets: int | None, snaplen: int, write_path: str | None,
                  parts_memory: int) -> LiveOptions:
    if not interface:
        raise click.UsageError("name the interface to capture on: -i IFACE")
    return LiveOptions(interface, bpf_filter, duration_s, packets, snaplen, write_path,
                       parts_memory)


def _live_run(options: LiveOptions, wanted: Wanted | None = None) -> tuple[CaptureList, _Run]:
    """Capture (`nagledetect.live`), say libpcap's counts, and analyse the file written, with
    the capture's drops in its warnings. The filter was applied while capturing."""
    try:
        captured = capture_live(options)
    except LiveError as error:
        _fail(str(error))
    click.echo(captured.stats_line(), err=True)
    found = LiveCaptureList(captured.path, options.interface, not options.write_path)
    run = _analyze_all(found, None, wanted=wanted, parts_memory=options.memory_bytes)
    for analysis in run.analyses:
        add_capture_warnings(analysis, captured)
    return found, run


def _chosen_language(language: str | None) -> tuple[str, ...]:
    """The language as HOW TO FIX spells it (click matched it case-insensitively), or none."""
    return tuple(name for name in LANGUAGES if language and name.lower() == language.lower())


@dataclass(frozen=True)
class _Outputs:
    """What a run of `analyze` or `live` writes besides its tables."""

    output_format: str
    html_path: str | None
    annotate_path: Path | None
    annotate_only_findings: bool
    jobs: int | None
    verbose: bool = False
    languages: Sequence[str] = ()


def _report(document: dict, run: _Run, found: CaptureList, outputs: _Outputs) -> None:
    """Write the annotated capture and the HTML report where asked, then the JSON document or
    the text report; exit as a run with captures that could not be read exits."""
    if outputs.annotate_path:
        _write_annotated(document, run, found, outputs.annotate_path,
                         outputs.annotate_only_findings)
    if outputs.html_path:
        _write_html(document, run.analyses, outputs.html_path)
    if outputs.output_format == "json":
        _write_document(document, outputs.jobs)
    else:
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        click.echo(render_text(document, verbose=outputs.verbose, colour=colour,
                               languages=outputs.languages), nl=False, color=colour)
    run.exit_if_failed()


def _write_document(document: dict, jobs: int | None) -> None:
    """The JSON document on stdout; a failure is one line (a closed pipe stays quiet, as for
    any filter)."""
    try:
        write_json(document, sys.stdout.buffer, workers=jobs or os.cpu_count() or 1)
    except BrokenExecutor:
        _fail(f"{KILLED_WORKER_TEXT}: the JSON document on stdout is incomplete")
    except BrokenPipeError:
        raise
    except OSError as error:
        _fail(f"cannot write the JSON document to stdout ({error.strerror})")


def _capture_list(captures: tuple[str, ...], files_from: TextIO | None) -> CaptureList:
    """The captures of the command line (`-`: the one on standard input) and of
    `--files-from`, folders expanded."""
    if not captures and not files_from:
        raise click.UsageError("name a capture or a folder of captures, or give --files-from "
                               "FILE")
    if STDIN_NAME in captures and files_from is not None and _reads_stdin(files_from):
        raise click.UsageError("'-' and '--files-from -' both read standard input; name one")
    try:
        found = capture_list(captures, sys.stdin.buffer)
    except InputError as error:
        _fail(str(error))
    except OSError as error:
        _fail(f"{STDIN_NAME}: cannot copy standard input to {USER_TEMPORARY_ROOT} "
              f"({error.strerror}); set TMPDIR to a folder with room for the capture")
    if files_from:
        listed = capture_list(listed_names(files_from))
        found.paths += listed.paths
        found.left_out += listed.left_out
    return found


def _reads_stdin(stream: TextIO) -> bool:
    try:
        return stream.fileno() == sys.stdin.fileno()
    except (OSError, ValueError):
        return False


@dataclass
class _Run:
    """The analyses of a run's captures, in the order given, and the files it could not
    analyse or left out."""

    analyses: list[Analysis]
    not_analysed: list[NotAnalysed]

    def exit_if_failed(self) -> None:
        """Exit status 2 once the reports are out, when a file could not be analysed."""
        if any(entry.error for entry in self.not_analysed):
            sys.exit(EXIT_INPUT_ERROR)


def _analyze_all(captures: CaptureList, bpf_filter: str | None, jobs: int | None = None,
                 dask_address: str | None = None, wanted: Wanted | None = None,
                 parts_memory: int = PARTS_MEMORY_BYTES) -> _Run:
    """Analyse every capture, in parallel processes when there are several (one per core by
    default) or on a Dask cluster; results come back in the order given, each identical to a
    single-file run. `wanted`: what the command's reporters need besides the document;
    `parts_memory`: what the analysis of a capture may take (`analyze_capture`'s
    `parts_memory_bytes`), in this process, a worker or a Dask task. A capture that cannot be
    analysed is one error line here, and the others go on; the run fails whole only when no
    capture is left, or when the machine fails it (a killed worker, a full disk)."""
    wanted = wanted or Wanted()
    paths = captures.paths
    workers = min(jobs or os.cpu_count() or 1, len(paths))
    sizes = capture_sizes(paths) if len(paths) > 1 else None
    if jobs is None and sizes and sum(sizes) < ONE_PROCESS_BYTES:
        workers = 1
    try:
        if not paths:
            results: list[Analysis | InputError] = []
        elif dask_address:
            results = _analyze_on_dask(paths, bpf_filter, dask_address, wanted, parts_memory,
                                       sizes)
        elif len(paths) == 1:
            results = [_analyze_lone(paths[0], bpf_filter, wanted, jobs or os.cpu_count() or 1,
                                     parts_memory, alone=not captures.left_out)]
        elif workers <= 1:
            results = _analyze_one_by_one(paths, bpf_filter, wanted, parts_memory, sizes)
        else:
            results = _analyze_in_processes(paths, bpf_filter, wanted, workers, parts_memory,
                                            sizes)
    except InputError as error:
        _fail(captures.shown_text(str(error)))
    except OSError as error:
        _fail(captures.shown_text(str(_os_error(_first_and_others(paths), error))))
    return _run_of([captures.shown_name(path) for path in paths],
                   [_shown_as(result, captures) for result in results], captures.left_out)


def _shown_as(result: Analysis | InputError, captures: CaptureList) -> Analysis | InputError:
    """A result as the reports name its capture (standard input's copy as `-`)."""
    if isinstance(result, InputError):
        return InputError(captures.shown_text(str(result)))
    shown = captures.shown_name(result.capture.path)
    result.capture.path = result.capture.accounting.path = shown
    return result


def _analyze_lone(path: str, bpf_filter: str | None, wanted: Wanted, workers: int,
                  parts_memory: int, alone: bool) -> Analysis | InputError:
    """The one capture of a run, its parts on `workers` processes; its error ends the run at
    once when it is `alone` (the run names no other file), else it is its result."""
    try:
        return _analyze_one(path, bpf_filter, wanted, workers, parts_memory=parts_memory)
    except InputError as error:
        if alone:
            raise
        return error


def _run_of(paths: list[str], results: list[Analysis | InputError],
            left_out: list[NotAnalysed]) -> _Run:
    """The run's analyses and what it did not analyse, said on stderr (status 2 at once when
    no capture could be analysed)."""
    failed = [NotAnalysed(path, str(result).removeprefix(f"{path}: "), error=True)
              for path, result in zip(paths, results) if isinstance(result, InputError)]
    not_analysed = [entry for entry in left_out if entry.error] + failed
    _say_errors(not_analysed)
    analysed = [(path, result) for path, result in zip(paths, results)
                if not isinstance(result, InputError)]
    if not analysed:
        sys.exit(EXIT_INPUT_ERROR)
    skipped = [entry for entry in left_out if not entry.error]
    _say_left_out(skipped)
    for path, analysis in analysed:
        for warning in analysis.capture.accounting.warnings:
            click.echo(f"nagledetect: warning: {path}: {warning}", err=True)
    return _Run([analysis for _, analysis in analysed], not_analysed + skipped)


def _say_errors(not_analysed: list[NotAnalysed]) -> None:
    """An error line for each reason files could not be analysed."""
    for reason, entries in _by_reason(not_analysed).items():
        click.echo(f"nagledetect: error: {_first_and_others([e.path for e in entries], 'file')}: "
                   f"{reason}", err=True)


def _say_left_out(skipped: list[NotAnalysed]) -> None:
    """One warning line for the files of the folders named that are not captures."""
    if skipped:
        several = len(skipped) > 1
        click.echo(f"nagledetect: warning: left out {len(skipped)} file{'s' if several else ''} "
                   f"of the folders named (the first, {skipped[0].path}: {skipped[0].reason}); "
                   f"the report lists {'them' if several else 'it'} and why", err=True)


@main.command()
@CAPTURES_ARGUMENT
@click.option("-o", "--output", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("nagledetect-report.html"), show_default=True, help="The HTML file.")
@click.option("--filter", "bpf_filter", metavar="EXPR", help="BPF expression, as in tcpdump.")
@ANNOTATE_OPTION
@ANNOTATE_ONLY_FINDINGS_OPTION
@JOBS_OPTION
@MEMORY_OPTION
@DASK_OPTION
@FILES_FROM_OPTION
def report(captures: tuple[str, ...], html_path: Path, bpf_filter: str | None,
           annotate_path: Path | None, annotate_only_findings: bool, jobs: int | None,
           parts_memory: int, dask_address: str | None, files_from: TextIO | None) -> None:
    """Write a self-contained HTML report (works offline) for ops teams.

    A folder stands for every capture under it.

    \b
    Examples:
      nagledetect report capture.pcap -o report.html
      nagledetect report traces/ -o nagle.html
      nagledetect report capture.pcapng -o report.html --annotate evidence.pcapng
    """
    found = _capture_list(captures, files_from)
    _check_annotate(annotate_path, annotate_only_findings, found)
    run = _analyze_all(found, bpf_filter, jobs, dask_address,
                       Wanted(tables=annotate_only_findings, charts=True),
                       parts_memory=parts_memory)
    document = build_document(run.analyses, run.not_analysed)
    if annotate_path:
        _write_annotated(document, run, found, annotate_path, annotate_only_findings)
    _write_html(document, run.analyses, html_path)
    run.exit_if_failed()


def _check_annotate(path: Path | None, only_findings: bool, found: CaptureList) -> None:
    """Before any analysis: --annotate names a file that can be written, for one capture (a
    file of several captures would number their frames anew, and the comments' frame numbers
    would no longer be Wireshark's)."""
    if path is None:
        if only_findings:
            _fail("--annotate-only-findings needs --annotate OUT.pcapng")
        return
    if len(found.paths) > 1:
        _fail(f"--annotate writes one capture's frames, and {len(found.paths)} captures were "
              f"named ({_first_and_others([found.shown_name(p) for p in found.paths])}); "
              "annotate them one at a time")
    if path.is_dir():
        _fail(f"{path}: is a folder; --annotate needs a file name (OUT.pcapng)")
    if found.paths and path.exists() and os.path.samefile(path, found.paths[0]):
        _fail(f"{path}: is the capture itself; --annotate writes a new file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        _fail(f"{path}: cannot write the annotated capture here ({error.strerror})")
    if not os.access(path.parent, os.W_OK):
        _fail(f"{path}: cannot write the annotated capture here (permission denied)")


def _write_annotated(document: dict, run: _Run, found: CaptureList, path: Path,
                     only_findings: bool) -> None:
    """The capture with its evidence commented (`annotate`), said on stderr. Its module is
    imported only here, as the report's are: a run without --annotate does not need it."""
    from nagledetect.report.annotate import FrameComments, connection_frames, write_annotated

    comments = FrameComments(document["findings"])
    kept = (connection_frames(run.analyses[0], comments.connections) if only_findings
            else None)
    try:
        written = write_annotated(found.paths[0], path, comments, kept)
    except InputError as error:
        _fail(found.shown_text(str(error)))
    except OSError as error:
        _fail(f"{path}: cannot write the annotated capture ({error.strerror})")
    for warning in written.warnings:
        click.echo(f"nagledetect: warning: {path}: {warning}", err=True)
    click.echo(f"nagledetect: wrote {path} ({written.frames} frames, {written.comments} "
               f"comments on {written.commented_frames} evidence frames)", err=True)


def _write_html(document: dict, analyses: list[Analysis], path: Path) -> None:
    """Write via a temporary file in the same folder, then rename: never a half-written report.
    The report's modules (pandas, plotly) are imported only here: the text and JSON paths
    need neither, and importing them cost a small capture most of its run."""
    from nagledetect.report.html import render_html

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False,
                                         encoding="utf-8") as handle:
            try:
                handle.write(render_html(document, analyses))
            except BaseException:
                os.unlink(handle.name)
                raise
        os.chmod(handle.name, REPORT_MODE)
        os.replace(handle.name, path)
    except OSError as error:
        _fail(f"{path}: cannot write the report ({error.strerror})")
    click.echo(f"nagledetect: wrote {path}", err=True)


def _refuse_a_closed_port(address: str) -> None:
    """Fail at once where nothing listens at a tcp:// scheduler address: Dask's client would
    retry for DASK_CONNECT_TIMEOUT_S before it said so."""
    parsed = urllib.parse.urlsplit(address)
    if parsed.scheme != "tcp" or not parsed.hostname:
        return
    try:
        port = parsed.port
        with socket.create_connection((parsed.hostname, port or 8786), timeout=5):
            pass
    except ValueError:
        _fail(f"cannot reach the Dask scheduler at {address}: not a valid port")
    except OSError as error:
        _fail(f"cannot reach the Dask scheduler at {address}: "
              f"{error.strerror or error.__class__.__name__}")


def _analyze_on_dask(captures: list[str], bpf_filter: str | None, address: str,
                     wanted: Wanted, parts_memory: int = PARTS_MEMORY_BYTES,
                     sizes: list[int] | None = None) -> list[Analysis | InputError]:
    """Send the files to an existing Dask cluster, a group of captures a task
    (`capture_groups`: small ones together, each other alone; the files must be readable by its
    workers at the same paths); take the results here as they come (each one's findings and
    tables spilled to disk), and return them in order, a failing capture's as its error."""
    try:
        from distributed import Client, KilledWorker, as_completed
    except ImportError:
        _fail("--dask needs the distributed package: pip install distributed (or, from a "
              "checkout, pip install -e '.[dask]')")
    _refuse_a_closed_port(address)
    try:
        with Client(address, timeout=DASK_CONNECT_TIMEOUT_S) as client:
            groups = capture_groups(captures, max(1, sum(client.nthreads().values())), sizes)
            futures = client.map(_analyze_group_pickled,
                                 [[captures[index] for index in group] for group in groups],
                                 [bpf_filter] * len(groups), [wanted] * len(groups),
                                 [parts_memory] * len(groups), pure=False)
            group_of = {future.key: group for future, group in zip(futures, groups)}
            keeping = RunKeeping(SpillFile())
            results: dict[int, Analysis | InputError] = {}
            for future in as_completed(futures):
                group = group_of[future.key]
                try:
                    found = pickle.loads(future.result())  # noqa: S301 - our own worker's
                except KilledWorker:
                    raise InputError(
                        f"{_first_and_others([captures[index] for index in group])}: the Dask "
                        f"workers analysing {'it' if len(group) == 1 else 'them'} died (out of "
                        "memory, or by a signal)") from None
                results.update((index, _kept(result, keeping))
                               for index, result in zip(group, found, strict=True))
    except OSError as error:
        _fail(f"cannot reach the Dask scheduler at {address}: {error}")
    return [results[index] for index in range(len(captures))]


def _first_and_others(captures: Sequence[str], noun: str = "capture") -> str:
    """Captures named by the first and how many others (an archive's thousands in one line
    would bury the message)."""
    others = len(captures) - 1
    return captures[0] + (f" and {others} other {noun}{'s' if others > 1 else ''}"
                          if others else "")


def _by_reason(entries: list[NotAnalysed]) -> dict[str, list[NotAnalysed]]:
    """Entries grouped by their reason, in order of first mention (a filter that no capture
    can take, or a disk full, is one line however many captures it stopped)."""
    grouped: dict[str, list[NotAnalysed]] = {}
    for entry in entries:
        grouped.setdefault(entry.reason, []).append(entry)
    return grouped


def _write_tables(analyses: list[Analysis], folder: Path, table_format: str) -> None:
    from nagledetect.report.tables import write_tables

    try:
        written = write_tables(analyses, folder, table_format)
    except InputError as error:
        _fail(str(error))
    except OSError as error:
        _fail(f"{folder}: cannot write the tables ({error.strerror})")
    click.echo(f"nagledetect: wrote {', '.join(str(p) for p in written)}", err=True)


@main.command()
@CAPTURES_ARGUMENT
@click.option("--filter", "bpf_filter", metavar="EXPR", help="BPF expression, as in tcpdump.")
@click.option("--max-stalls", type=click.IntRange(0),
              help="Most Nagle-family stalls per capture (default 0 when no budget is set).")
@click.option("--max-stall-time", type=click.FloatRange(0), metavar="SECONDS",
              help="Most seconds lost to Nagle-family stalls per capture.")
@click.option("--max-stall-share", type=click.FloatRange(0, 1), metavar="FRACTION",
              help="Largest share of any connection's time lost to Nagle-family stalls.")
@click.option("--fail-on", metavar="KIND[,KIND]",
              help=f"Fail on any finding of these kinds: {', '.join(ALL_KINDS)}.")
@click.option("--baseline", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="An earlier 'analyze --format json' document: fail only on regressions.")
@click.option("--tolerance", type=click.FloatRange(0), help="Regression tolerance (default 0.1).")
@click.option("--min-confidence", type=click.Choice(CONFIDENCE_LEVELS),
              help="Count only findings of this confidence or higher toward every budget "
                   "(default low: all); the verdict says how many were left out.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Write JUnit XML here.")
@click.option("--github", is_flag=True,
              help="Print GitHub Actions annotations for failures and warnings.")
@click.option("--live", "live_capture", is_flag=True,
              help="Check a live capture on -i IFACE instead of files (as 'live' captures: "
                   "root or CAP_NET_RAW and CAP_NET_ADMIN), ended by --duration or --packets.")
@INTERFACE_OPTION
@DURATION_OPTION
@PACKETS_OPTION
@SNAPLEN_OPTION
@WRITE_OPTION
@JOBS_OPTION
@MEMORY_OPTION
@DASK_OPTION
@FILES_FROM_OPTION
def check(captures: tuple[str, ...], bpf_filter: str | None, max_stalls: int | None,
          max_stall_time: float | None, max_stall_share: float | None, fail_on: str | None,
          baseline: Path | None, tolerance: float | None, min_confidence: str | None,
          junit: Path | None, github: bool,
          live_capture: bool, interface: str | None, duration_s: float | None,
          packets: int | None, snaplen: int, write_path: str | None,
          jobs: int | None, parts_memory: int, dask_address: str | None,
          files_from: TextIO | None) -> None:
    """Gate CI on recorded CAPTURES: exit 1 when a budget is exceeded.

    Stalls are the Nagle family: nagle-delack-stall, nagle-rtt-hold and stream-coalescing
    findings, counted alike by every budget and output. With no budget configured (no
    --max-*, no --fail-on, no --baseline, none in the config file) the budget is --max-stalls
    0: any Nagle-family stall fails. Budgets also come from nagledetect.toml in the current
    folder, else from [tool.nagledetect] in its pyproject.toml (same names as the flags);
    flags win. A folder stands for every capture under it. A capture's warnings (such as
    connections seen one way only, where no stall can be seen) follow its verdict.

    \b
    Exit status:
      0  every capture within budget
      1  a budget exceeded
      2  usage or input error: an unknown kind or bad value (flag or config file), a capture
         that cannot be read, has no packets, or no TCP packet (none in it, or none left
         by --filter); the other captures are still checked

    \b
    Examples:
      nagledetect check traces/*.pcap               # no budget set: any Nagle-family stall fails
      nagledetect check --max-stall-time 0.5 --junit nagle.xml --github traces/*.pcap
      nagledetect check --baseline main.json --fail-on tinygram-flood traces/*.pcap
      nagledetect check --min-confidence medium traces/*.pcap   # unproven stalls pass
      sudo nagledetect check --live -i eth0 --duration 30 --max-stall-time 0.5
    """
    from nagledetect.gate import budgets_from, evaluate, load_config

    flags = {"max-stalls": max_stalls, "max-stall-time": max_stall_time,
             "max-stall-share": max_stall_share, "fail-on": fail_on, "tolerance": tolerance,
             "min-confidence": min_confidence}
    try:
        budgets = budgets_from(load_config(Path.cwd()), flags).with_default(bool(baseline))
        previous = _read_baseline(baseline) if baseline else None
    except InputError as error:
        _fail(str(error))
    if not live_capture and (interface or duration_s or packets or write_path):
        raise click.UsageError("-i, --duration, --packets and --write go with --live")
    if live_capture:
        if captures or files_from:
            raise click.UsageError("--live checks a live capture: name no capture files")
        _, run = _live_run(_live_options(interface, bpf_filter, duration_s, packets, snaplen,
                                         write_path, parts_memory))
    else:
        run = _analyze_all(_capture_list(captures, files_from), bpf_filter, jobs,
                           dask_address, parts_memory=parts_memory)
    document = build_document(run.analyses, run.not_analysed)
    results = evaluate(document, budgets, previous, bpf_filter)
    _say_checks(results, run, document, junit, github)


def _say_checks(results: list[RuleResult], run: _Run, document: dict, junit: Path | None,
                github: bool) -> None:
    """The gate's verdicts on stdout (and in JUnit and GitHub annotations when asked), an
    error line on stderr for each reason captures had nothing to check, then the exit status:
    2 when a capture could not be analysed or checked, else 1 when a budget is exceeded. The
    gate's reporters are imported here: a run without `check` needs none of them."""
    from nagledetect.report.ci import github_annotations, junit_xml, summary_lines

    unreadable = [entry for entry in run.not_analysed if entry.error]
    paths = [capture["path"] for capture in document["captures"]]
    warnings = [capture["warnings"] for capture in document["captures"]]
    for line in summary_lines(results, paths, unreadable, warnings):
        click.echo(line)
    if github:
        for line in github_annotations(results, unreadable, paths, warnings):
            click.echo(line)
    if junit:
        junit.write_bytes(junit_xml(results, unreadable, warnings))
    unchecked = [NotAnalysed(r.capture, r.message, error=True) for r in results if r.error]
    _say_errors(unchecked)
    if unchecked:
        sys.exit(EXIT_INPUT_ERROR)
    run.exit_if_failed()
    sys.exit(EXIT_BUDGET_EXCEEDED if any(not r.passed for r in results) else 0)


def _read_baseline(path: Path) -> dict:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: not a readable JSON document ({error})") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise InputError(f"{path}: not an 'analyze --format json' document (schema {SCHEMA})")
    return document


def _analyze_one_by_one(captures: list[str], bpf_filter: str | None, wanted: Wanted,
                        parts_memory: int = PARTS_MEMORY_BYTES, sizes: list[int] | None = None
                        ) -> list[Analysis | InputError]:
    """Each group of captures in turn (`capture_groups`), in this process; their results kept
    as `RunKeeping` keeps them, in one spill file (not one open file per capture in parts).
    A capture that fails is its error, in its place."""
    keeping = RunKeeping(SpillFile())
    alone = partial(_analyze_one, bpf_filter=bpf_filter, wanted=wanted, spill=keeping.spill,
                    parts_memory=parts_memory)
    results: dict[int, Analysis | InputError] = {}
    for group in capture_groups(captures, 1, sizes):
        found = _analyze_group([captures[index] for index in group], bpf_filter, wanted, alone)
        results.update((index, _kept(result, keeping))
                       for index, result in zip(group, found, strict=True))
    return [results[index] for index in range(len(captures))]


def _analyze_group(paths: list[str], bpf_filter: str | None, wanted: Wanted,
                   alone: Callable[[str], Analysis]) -> list[Analysis | InputError]:
    """Each capture's analysis or its one-line error: several analysed together, else (or
    when analysing them together fails for any reason) each by `alone`, so that an error names
    its capture and the others are still analysed."""
    if len(paths) > 1:
        try:
            return analyze_together(paths, bpf_filter, wanted)
        except Exception:  # noqa: BLE001, S110 - each capture alone names the one that fails
            pass
    results: list[Analysis | InputError] = []
    for path in paths:
        try:
            results.append(alone(path))
        except InputError as error:
            results.append(error)
    return results


def _analyze_in_processes(captures: list[str], bpf_filter: str | None, wanted: Wanted,
                          workers: int, parts_memory: int = PARTS_MEMORY_BYTES,
                          sizes: list[int] | None = None) -> list[Analysis | InputError]:
    """One process per capture, `workers` at a time, each analysis within `parts_memory`.
    The workers draw no progress line of their own (several would fight over one line): this
    process counts the captures done. Each result is taken as it comes, its findings (and
    tables, if wanted) spilled to disk, so that memory here grows with the captures'
    connections and hosts, not with their findings or packets. A failing capture's result is
    its error."""

    results: dict[int, Analysis | InputError] = {}
    spill = SpillFile()
    try:
        with (tempfile.TemporaryDirectory(prefix=HANDOVER_PREFIX) as handover,
              worker_pool(max_workers=workers, initializer=_temporaries_in,
                          initargs=(handover,)) as pool):
            pending = {pool.submit(_analyze_group_for_parent,
                                   [captures[index] for index in group], bpf_filter, wanted,
                                   handover, parts_memory): group
                       for group in capture_groups(captures, workers, sizes)}
            _take_results(pending, RunKeeping(spill), results)
    except BrokenExecutor:
        raise InputError(KILLED_WORKER_TEXT) from None
    return [results[index] for index in range(len(captures))]


def _take_results(pending: dict[Future, list[int]], keeping: RunKeeping,
                  results: dict[int, Analysis | InputError]) -> None:
    """Each group's results as they come (a group's positions among the captures, each its
    analysis or its failure), kept (`RunKeeping`), the captures done counted on the progress
    line."""
    total = sum(len(group) for group in pending.values())
    done_captures = 0
    progress = ProgressLine(f"{total} captures")
    try:
        progress.stage("analysed", 0, total)
        while pending:
            done, _ = wait(pending, timeout=PROGRESS_TICK_S, return_when=FIRST_COMPLETED)
            for future in done:
                group = pending.pop(future)
                results.update((index, _kept(result, keeping))
                               for index, result in zip(group, future.result(), strict=True))
                done_captures += len(group)
            progress.stage("analysed", done_captures, total)
    finally:
        progress.done()


def _kept(result: Analysis | InputError, keeping: RunKeeping) -> Analysis | InputError:
    """A capture's result as the run keeps it (`RunKeeping`), or the capture's error."""
    return result if isinstance(result, InputError) else keeping.kept(result)


def _temporaries_in(folder: str) -> None:
    """A worker's temporary files (its part files and spill file) all go in the run's folder,
    which the run removes at its end, also when a worker was killed and could not."""
    tempfile.tempdir = folder


def _analyze_group_for_parent(paths: list[str], bpf_filter: str | None, wanted: Wanted,
                              handover_folder: str | None = None,
                              parts_memory: int = PARTS_MEMORY_BYTES
                              ) -> list[Analysis | InputError]:
    """`_analyze_group` in a worker process (or on Dask): each result as `_analyze_for_parent`
    sends it, the findings and tables of a group (with a `handover_folder`) in one file the
    parent takes over."""
    alone = partial(_analyze_for_parent, bpf_filter=bpf_filter, wanted=wanted,
                    handover_folder=handover_folder, parts_memory=parts_memory)
    sent = _analyze_group(paths, bpf_filter, wanted, alone)
    if handover_folder:
        try:
            return handed_over(sent, SpillFile(handover_folder))
        except OSError as error:
            return [_os_error(path, error) for path in paths]
    return sent


def _analyze_group_pickled(paths: list[str], bpf_filter: str | None, wanted: Wanted,
                           parts_memory: int) -> bytes:
    """`_analyze_group_for_parent` on a Dask worker, its results pickled as one message. Dask
    pickles a list item by item, and each of a group's results would then carry the whole
    group's connection table again (`sent_tables.TableRows`)."""
    return pickle.dumps(_analyze_group_for_parent(paths, bpf_filter, wanted,
                                                  parts_memory=parts_memory),
                        protocol=pickle.HIGHEST_PROTOCOL)


def _analyze_for_parent(path: str, bpf_filter: str | None, wanted: Wanted, workers: int = 1,
                        show_progress: bool = False, handover_folder: str | None = None,
                        parts_memory: int = PARTS_MEMORY_BYTES) -> Analysis:
    """`_analyze_one` in a worker process (or on Dask): only what the reporters read goes back.
    With a `handover_folder` (a worker on the parent's machine), a capture in parts spills to a
    named file there that the parent takes over: its findings, hosts and tables go back as
    where they lie, not pickled once more and copied through the pipe."""
    spill = SpillFile(handover_folder) if handover_folder else None
    analysis = None
    try:
        analysis = _analyze_one(path, bpf_filter, wanted, workers, show_progress, spill,
                                parts_memory)
        return for_another_process(analysis, wanted.tables)
    finally:
        if spill is not None and (analysis is None or spill not in spills_read_by(analysis)):
            spill.discard()


def _analyze_one(path: str, bpf_filter: str | None, wanted: Wanted | None = None,
                 workers: int = 1, show_progress: bool = True,
                 spill: SpillFile | None = None,
                 parts_memory: int = PARTS_MEMORY_BYTES) -> Analysis:
    """Load and analyse one capture. Every way it can fail is raised as one line's InputError,
    so that a worker process or a Dask worker hands it back rather than exiting."""
    progress = ProgressLine(path, quiet=not show_progress)
    try:
        wanted = wanted or Wanted()
        return analyze_capture(path, bpf_filter, progress, wanted.tables, workers=workers,
                               stages=progress.stage, charts=wanted.charts, spill=spill,
                               parts_memory_bytes=parts_memory)
    except InputError:
        raise
    except MemoryError:
        raise InputError(f"{path}: out of memory while analysing") from None
    except BrokenExecutor:
        raise InputError(f"{path}: {KILLED_WORKER_TEXT}") from None
    except OSError as error:
        raise _os_error(path, error) from None
    except Exception as error:  # noqa: BLE001 - the promise is one line, never a traceback
        raise _unexpected(path, error) from None
    finally:
        progress.done()


def _os_error(path: str, error: OSError) -> InputError:
    """A full disk (or a file size limit) for the temporary files is the user's to mend; any
    other system error while analysing is ours."""
    if error.errno not in NO_SPACE_ERRNOS:
        return _unexpected(path, error)
    return InputError(f"{path}: no room for temporary files in {USER_TEMPORARY_ROOT} "
                      f"({error.strerror}); set TMPDIR to a folder with about 80 bytes a packet "
                      "free, and room for a compressed capture decompressed")


def _unexpected(path: str, error: Exception) -> InputError:
    return InputError(f"{path}: cannot analyse ({type(error).__name__}: {error}); "
                      "please report this")


def _fail(message: str) -> None:
    click.echo(f"nagledetect: error: {message}", err=True)
    sys.exit(EXIT_INPUT_ERROR)

