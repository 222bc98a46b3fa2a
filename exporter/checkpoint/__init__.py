"""The checkpoint: positions and counters kept across restarts."""
