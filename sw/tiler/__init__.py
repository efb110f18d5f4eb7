"""The GEMM tiler: ``C = A @ B`` (with an optional fused epilogue) on the weight-stationary
array, double buffered. docs/tiler.md describes what it does: the blocking, the tokens, the
high rows, batches, epilogues and where their data lives, and how a blocking is chosen.

One job a module, each importing only those before it:

* :mod:`.steps`: how a plan cuts the GEMM (K tiles, M blocks, N strips) into steps;
* :mod:`.layout`: where a plan puts the epilogue's data;
* :mod:`.cost`: the cost model (closed forms, the step-by-step timeline, the program's size);
* :mod:`.groups`: the instructions of a plan, group by group;
* :mod:`.plan`: :class:`TilePlan` and the search of :func:`plan_gemm`;
* :mod:`.emit`: :class:`GemmGroups`, :func:`compile_gemm` and :func:`rebind`.
"""

from .cost import program_size
from .emit import GemmGroups, compile_gemm, rebind
from .plan import TilePlan, plan_gemm
from .steps import k_tiles

__all__ = ["TilePlan", "plan_gemm", "compile_gemm", "program_size", "rebind", "GemmGroups",
           "k_tiles"]
