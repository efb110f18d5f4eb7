"""bertaccel: generator, host driver and verification for an int8 BERT accelerator."""

__version__ = "0.1.0"
__all__ = ["__version__"]
