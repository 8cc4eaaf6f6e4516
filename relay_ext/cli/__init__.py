"""``quantfuse``, the command line: arguments in, tables and files out.

The package reads arguments (:mod:`.parser`, whose ``USAGE`` is what ``quantfuse --help`` shows),
checks them once where they come in (:mod:`.inputs`: the run description; bad input is one line
and exit code 2), calls the library (:mod:`.commands`, :mod:`.demo`) and prints for people;
:mod:`.entry_point` maps failures to exit codes and keeps TVM's native log lines out of the terminal
(:mod:`.native_log`). Nothing here is needed to use quantfuse from Python.
"""

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C


def main(argv=None) -> int:
    """``quantfuse`` (the console script): run the command in ``argv``; the exit code."""
    from relay_ext.cli.entry_point import run  # pylint: disable=import-outside-toplevel

    return run(argv)
