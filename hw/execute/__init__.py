"""The execute unit (:class:`ExecuteUnit`): MATMULs through the mesh in two stages
(:class:`PreloadStage`, :class:`StreamStage`) and the accumulator path (:class:`AccumulatePath`).
"""

from .accumulate import AccumulatePath
from .preload import PreloadStage
from .read import OPERAND_DELAY
from .stream import StreamStage
from .unit import ExecuteUnit

__all__ = ["ExecuteUnit", "PreloadStage", "StreamStage", "AccumulatePath", "OPERAND_DELAY"]
