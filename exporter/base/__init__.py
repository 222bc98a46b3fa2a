"""What every stage shares: times, the records that cross stages, kinds, logs, output files."""
