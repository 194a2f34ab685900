"""gpu-preflight: prove a GPU node and its cluster are fit to train, then hand off to training."""

__version__ = "0.1.0"
__all__ = ["__version__"]
