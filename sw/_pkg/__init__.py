"""bertaccel: generator, host driver and verification for an int8 BERT accelerator.

The API an ML user reaches for first is :class:`Encoder` (``bertaccel.sw.bert.encoder``)::

    from bertaccel import Encoder
    emb = Encoder("minilm", config="8x8").encode(["A sentence."])
"""

import importlib.metadata

__version__ = importlib.metadata.version("bertaccel")
__all__ = ["__version__", "Encoder"]


def __getattr__(name):
    # Imported on first use: the package itself stays light (no torch, no Amaranth).
    if name == "Encoder":
        from .sw.bert.encoder import Encoder
        return Encoder
    raise AttributeError(f"module 'bertaccel' has no attribute {name!r}")
