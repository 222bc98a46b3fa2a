"""Sources: where a node's journal lines come from, one module per source kind."""
