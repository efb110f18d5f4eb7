"""bertaccel beyond one machine, on Ray: design-space sweeps, data-set inference and RTL
regressions.

::

    bertaccel sweep --model minilm --seq 32,128 --configs 4x4,8x8,16x16 [--synth]
    bertaccel run --model minilm --text-file texts.txt --output emb.npy --ray
    bertaccel regress --configs 2x2,4x8,8x8 --programs 200 --seed 1

Without an address Ray starts embedded on this machine's cores; ``--address`` (or
``$RAY_ADDRESS``) joins a cluster started with ``ray start``. The rooms: :mod:`.connect`
(joining Ray), :mod:`.tasks` (independent calls as tasks, failures as rows, retries of dead
workers), :mod:`.grid` (the sweep's points), :mod:`.sweep`, :mod:`.pareto` and :mod:`.table`
(the sweep, its front and its files), :mod:`.shard` (a text file over actors that hold the
model) and :mod:`.regress` (random programs on the RTL). Nothing here runs unless asked: the
rest of bertaccel does not import it, and ``ray`` is imported only when a sweep, a regression or
a sharded run starts.
"""

from .connect import ClusterError, connect
from .tasks import Failure

__all__ = ["ClusterError", "Failure", "connect"]
