"""Making the environments every engine release and trainer release runs in: a recipe derived from the release's own
metadata (``recipes``), the cached environment built from it with the import closure its EAGLE-3 path or its
build needs (``engines``, ``trainers``).

A package of its own, below the engines and the trainers (``tests/test_architecture.py``'s floors): the engine
adapters, the subject's trainer references, ``accept``, the converged builds and the tables all ask it for an
interpreter, and it imports none of them (an engine's own recipe rule and source unpacking are named in its profile
and resolved by name; a build or a probe runs in the environment it made, as a process of its own).
"""
