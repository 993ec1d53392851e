"""One module per contract; importing this package registers them all, in DESIGN.md's order."""

from contracts.checks import key_naming  # noqa: F401  (isort: skip)
from contracts.checks import tensor_shapes  # noqa: F401  (isort: skip)
from contracts.checks import d2t_semantics  # noqa: F401  (isort: skip)
from contracts.checks import hidden_width  # noqa: F401  (isort: skip)
from contracts.checks import embed_head  # noqa: F401  (isort: skip)
from contracts.checks import config  # noqa: F401  (isort: skip)
from contracts.checks import forward_parity  # noqa: F401  (isort: skip)
