"""Side-by-side timings: the bare call, ours and the peers, in one run. Run with ``make bench``."""
