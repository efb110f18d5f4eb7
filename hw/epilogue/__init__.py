"""The epilogue: requantisation and the nonlinear ops on the accumulator drain
(:class:`Epilogue`), its pipeline's timing (:class:`Schedule`) and its beat layout."""

from .unit import Epilogue, Schedule, beat_layout

__all__ = ["Epilogue", "Schedule", "beat_layout"]
