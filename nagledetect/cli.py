"""The command line: a thin layer over `load_capture` and the reporters.

`nagledetect CAPTURE...` is the same as `nagledetect analyze CAPTURE...`. Results go to stdout,
progress and errors to stderr; bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import json
import os
import sys

import click

from nagledetect import __version__
from nagledetect.analysis import Analysis, run_detectors
from nagledetect.api import load_capture
from nagledetect.errors import InputError
from nagledetect.lab.cli import lab
from nagledetect.report.document import build_document
from nagledetect.report.text import render_text

EXIT_INPUT_ERROR = 2


class _DefaultToAnalyze(click.Group):
    """A group whose first argument, when it is not a command, is a capture for `analyze`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
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


@main.command()
@click.argument("captures", nargs=-1, required=True, type=click.Path())
@click.option("--filter", "bpf_filter", metavar="EXPR",
              help="BPF expression, as in tcpdump (e.g. 'host 10.0.0.1 and tcp port 80').")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Report format on stdout.")
@click.option("-v", "--verbose", is_flag=True, help="List every stall event, not the first three.")
def analyze(captures: tuple[str, ...], bpf_filter: str | None, output_format: str,
            verbose: bool) -> None:
    """Analyse pcap/pcapng CAPTURES and print the diagnosis.

    Frame numbers are 1-based positions in the file, as Wireshark shows them (also with
    --filter: packets the filter excludes are counted as skipped, not renumbered).

    \b
    Examples:
      nagledetect analyze sample_traces/seed003-nagle.pcap
      nagledetect analyze --format json capture.pcapng > result.json
    """
    analyses = []
    for path in captures:
        analysis = _analyze_or_exit(path, bpf_filter)
        for warning in analysis.capture.accounting.warnings:
            click.echo(f"nagledetect: warning: {path}: {warning}", err=True)
        analyses.append(analysis)
    document = build_document(analyses)
    if output_format == "json":
        click.echo(json.dumps(document, indent=2))
    else:
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        click.echo(render_text(document, verbose=verbose, colour=colour), nl=False, color=colour)


def _analyze_or_exit(path: str, bpf_filter: str | None) -> Analysis:
    """Load and analyse one capture; any failure is one line on stderr and exit status 2."""
    try:
        return run_detectors(load_capture(path, bpf_filter))
    except InputError as error:
        _fail(str(error))
    except MemoryError:
        _fail(f"{path}: out of memory while analysing")
    except Exception as error:  # noqa: BLE001 - the promise is one line, never a traceback
        _fail(f"{path}: cannot analyse ({type(error).__name__}: {error}); please report this")


def _fail(message: str) -> None:
    click.echo(f"nagledetect: error: {message}", err=True)
    sys.exit(EXIT_INPUT_ERROR)


main.add_command(lab)
