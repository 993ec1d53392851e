"""Adapters over the real training libraries: each builds and saves tiny drafts with the trainer's own code.

Each module here runs only inside its trainer's tox environment (``fixtures-<trainer>``); the checks never
import them.
"""
