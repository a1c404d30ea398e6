"""The summary's parts, one job a module: reading captures (files), adding a run up (run),
the views beyond aorta's keys (views), the comparison of runs (compare), the records that
summary.json holds (records), the text tables (text), the page (page); and the run's
recipe (recipe) and plan (plan), which profile_run.py drives. docs/summary.md and
docs/profiling.md tell each.
"""


class Refused(Exception):
    """An input, an output, a recipe or a comparison that will not be used; the message is
    one line."""
