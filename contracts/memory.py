"""Freed buffers of a megabyte or more go back to the system at once.

glibc raises its mmap threshold to the size of each large block freed (up to 32 MB), so after the first one every
later 8-16 MB buffer comes from the heap and stays there: a check streaming a 1 GB embedding in 16 MB row chunks
(``contracts.fingerprint``) kept 220 MB resident after the last chunk was gone. Setting the threshold once fixes it
at 1 MB: each larger block is its own mapping, returned when freed. Called at the start of the CLI and of each
engine worker; a C library without ``mallopt`` (not glibc) is left as it is.
"""

from __future__ import annotations

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
THRESHOLD = 1 << 20


def return_large_frees() -> bool:
    import ctypes

    try:
        return bool(ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, THRESHOLD))
    except (AttributeError, OSError):
        return False
