"""Sources: where a node's journal lines come from (dump files, the local journal, SSH)."""
