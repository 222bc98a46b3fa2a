"""The optional C fast paths and the one switch that picks them or their Python references."""
