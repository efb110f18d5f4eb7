"""The AXI4 shell: the core behind an AXI4-Lite register slave and an AXI4 DMA master.

One component a module: :mod:`.signature` (the interfaces), :mod:`.width` (gearboxes),
:mod:`.dma` (the read and write engines), :mod:`.csr` (the register map, plain Python),
:mod:`.csr_bank` (its AXI4-Lite slave) and :mod:`.shell` (:class:`AxiShell`, the top level).
"""

from .csr_bank import CsrBank
from .dma import ReadEngine, WriteEngine
from .shell import AxiShell
from .signature import (
                        DATA_ID,
                        INSTR_ID,
                        MAX_BURST,
                        AXI4LiteSignature,
                        AXI4Signature,
                        Burst,
                        Resp,
)
from .width import Downsizer, Upsizer

__all__ = ["AxiShell", "CsrBank", "ReadEngine", "WriteEngine", "Downsizer", "Upsizer",
           "AXI4LiteSignature", "AXI4Signature", "Burst", "Resp", "INSTR_ID", "DATA_ID",
           "MAX_BURST"]
