"""The command line's entry: `python -m nagledetect` and the `nagledetect` script."""

import os


def run() -> None:
    """Run the command line. numpy's OpenBLAS would start a thread per core that spins
    between calls, taking a core from the analysis (a fifth of the CPU time of a capture of
    a million packets) and from `-j` workers; the analysis makes no BLAS call. A setting the
    user made is kept."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from nagledetect.cli import main

    main()


if __name__ == "__main__":
    run()
