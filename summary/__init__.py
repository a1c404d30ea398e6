"""The summary's parts, one job a module (docs/summary.md's table), and the run's recipe and
plan, which profile_run.py drives (docs/profiling.md)."""


class Refused(Exception):
    """An input, an output, a recipe or a comparison that will not be used; the message is
    one line."""
