"""The exit codes of `machine` and of job children (`python -m machine_lsp.jobs`), in one place: the CLI's verbs,
the job runner and the editor's job manager (which reads a child's code) mean the same thing by each number."""

EXIT_OK = 0
# The command ran and its answer is no: findings in the data, a refused tag, a failed or gated-out job.
EXIT_FAILED = 1
EXIT_USAGE = 2  # bad arguments, a missing or malformed input file: one line saying which
EXIT_STORE = 3  # the .machine store is unreadable or refused (a symlink, a lock held, a bad row)
EXIT_CANCELLED = 130  # SIGTERM/SIGINT: the shell's 128 + SIGINT
EXIT_BROKEN_PIPE = 141  # the reader went away (`machine tagged --json | head`): the shell's 128 + SIGPIPE


class UsageError(Exception):
    """Bad usage (an argument, a missing input file): the CLI prints it as one line and exits EXIT_USAGE."""
