"""The epilogue: requantisation and the nonlinear ops on the accumulator drain
(:class:`Epilogue`, built of the stage components of this package), its pipeline's timing
(:class:`Schedule`) and its beat layout."""

from .schedule import Schedule, beat_layout
from .unit import Epilogue

__all__ = ["Epilogue", "Schedule", "beat_layout"]
