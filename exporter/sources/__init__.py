"""Sources: where a node's journal lines come from; each source kind a record, its reader apart."""
