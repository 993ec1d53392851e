"""Imported once by the converter's fork server (``converter_trace.run``): the release's converter script and what it
imports (torch, transformers, gguf-py), so that each conversion, forked from that server, starts with them loaded.
The server does not inherit the parent's ``sys.path`` (Python 3.11's fork server ignores it), so the converter's
folder is put on it here."""

import sys

from contracts.engines.llamacpp.tree import SCRIPT, converter_dir

if str(converter_dir()) not in sys.path:
    sys.path.insert(0, str(converter_dir()))

__import__(SCRIPT.removesuffix(".py"))
