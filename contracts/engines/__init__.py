"""Adapters over inference engines' real code. Each engine adapter takes paths in and gives plain,
serialisable observations out (see ``contracts.observations``); the checks never import an engine."""
