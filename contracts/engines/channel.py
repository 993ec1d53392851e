"""The results line of a process an engine runs in (an engine worker, a probe, a serving-loop job): stdout kept for the
results alone, the engine's own prints sent to stderr."""

from __future__ import annotations

import os
import sys


def result_channel():
    """This process's stdout kept for its results alone, and file descriptor 1 sent to stderr: whatever the engine, or
    a process it starts (vLLM's ranks), prints lands there, never among the results a parent reads."""
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return channel
