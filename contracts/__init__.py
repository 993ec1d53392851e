"""eagle3-contracts: executable contracts between EAGLE-3 draft trainers and inference engines."""

__version__ = "0.1.0"
