"""The summary's parts, which parse_hatchet.py assembles: reading captures, adding a run up,
the views beyond aorta's keys, the comparison of runs, and the page."""
