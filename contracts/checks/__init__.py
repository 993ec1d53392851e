"""One module per contract; importing this package registers them all (ids as in DESIGN.md)."""

from contracts.checks import key_naming, tensor_shapes  # noqa: F401
