"""``quantfuse``, the command line: arguments in, tables and files out.

The package reads arguments (:mod:`.parser`, whose ``USAGE`` is what ``quantfuse --help`` shows),
checks them once where they come in (:mod:`.inputs`: the run description; bad input is one line
and exit code 2), calls the library (:mod:`.commands`, :mod:`.demo`) and prints for people;
:mod:`.entry_point` maps failures to exit codes and keeps TVM's native log lines out of the terminal
(:mod:`.native_log`); a crash in native code is one line too (:mod:`.crash_report`). Nothing here
is needed to use quantfuse from Python.
"""

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C


def main(argv=None) -> int:
    """``quantfuse`` (the console script): run the command in ``argv``; the exit code.

    Without ``argv`` (the console script, ``python -m relay_ext.cli``) the command in
    ``sys.argv[1:]`` runs in a watched child process, so that a crash in native code still ends
    with one line naming it (:mod:`.crash_report`); with ``argv`` it runs in this process."""
    # pylint: disable=import-outside-toplevel
    from relay_ext.cli import crash_report

    if argv is None and crash_report.can_watch():
        import sys

        code = crash_report.watched(sys.argv[1:])
        if code is not None:
            return code
    crash_report.enter_child()
    from relay_ext.cli.entry_point import run

    return run(argv)
