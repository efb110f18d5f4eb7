"""Test tiers, markers and shared fixtures.

Tiers
-----
The tests live in four folders:

``verif/unit``
    Pure Python: config, ISA, programs, tiler, cycle model, software device, integer ops, BERT
    on the software device, the analysis tools. No simulator.
``verif/block``
    One block at a time: the Amaranth simulator, cocotb on a Verilator build of one component,
    the build layer, Verilator lint and yosys checks of the emitted Verilog.
``verif/formal``
    SymbiYosys proofs of components' properties (k-induction, or bounded to a stated depth),
    each with covers that show it is not vacuous; the runner is ``verif/tb/formal.py``.
``verif/system``
    End to end: programs compiled by the real driver run on the whole core (the Verilated
    harness through :class:`~bertaccel.sw.devices.rtl.RtlDevice`), bit-exact with the software
    device and cycle-exact with the cycle model.

Markers
-------
Each test gets the marker of its tier (``unit``, ``block``, ``formal``, ``system``) from its
folder, and ``slow`` when it takes long on a small machine: every ``system`` test, and the
others marked ``@pytest.mark.slow`` in their own file (the yosys runs of the ECP5 flow in
``block/test_synth.py``, the whole core behind the UART in ``block/test_ulx3s.py``, MiniLM on
the software device and ``bench bert`` in ``unit/``). The markers are registered in
``pyproject.toml``, where ``--strict-markers`` refuses any other::

    pytest -q                       # everything (make test: -n 2 --dist loadfile)
    pytest -q -m "not slow"         # pure Python and block tests: a few minutes on 2 cores
    pytest -q -m unit               # pure Python only
    pytest -q -m system             # end to end only

No test asserts a wall-clock time (how fast something runs is measured by the scripts in
``bench/``). Test files import shared helpers from ``verif/helpers.py``, never from one another;
a cocotb test module names itself (``MODULE = "verif.block.test_x"``) by its own dotted path,
which the simulator imports through pytest's ``pythonpath``.

Fixtures
--------
``functional_coverage``
    Session-wide and automatic: every program an RTL device runs to completion is sampled into
    the coverpoints of ``verif/funcov.py``, and each worker writes its hits to
    ``build/coverage/functional/`` at the end; ``python -m verif.funcov`` prints them.
``sim_root``
    The folder for simulation builds, ``<repo>/build/sim`` whatever the working directory; build
    folders inside it are named ``<design>-<cfg.tag>``::

        sim = build(lambda: PE(cfg), name="pe", build_dir=sim_root / f"pe-{cfg.tag}")

``rtl_device``
    A factory of :class:`~bertaccel.sw.devices.rtl.RtlDevice` objects shared by the whole
    session: one simulator per (config, settings), started on first use and closed when the
    session ends::

        def test_gemm(rtl_device):
            device = rtl_device(preset("4x4"), sink_stall=64)
            result = gemm(device, a, b)

    Devices keep their memories between tests (as the hardware would), which the compiled
    programs never rely on.
"""

from pathlib import Path

import pytest

__all__ = []

#: The tier folders, each also the name of the marker its tests get.
TIERS = ("unit", "block", "formal", "system")
#: The tiers whose every test is ``slow``.
SLOW_TIERS = ("system",)


def pytest_collection_modifyitems(config, items):
    """Mark each test with its tier, and the tests of a slow tier ``slow``."""
    here = Path(__file__).resolve().parent
    for item in items:
        try:
            tier = Path(item.path).resolve().relative_to(here).parts[0]
        except ValueError:
            continue
        if tier in TIERS:
            item.add_marker(tier)
        if tier in SLOW_TIERS:
            item.add_marker("slow")


def pytest_sessionstart(session):
    """The functional coverage of this run starts empty (in the controller, before any
    worker writes: see :func:`functional_coverage`)."""
    if hasattr(session.config, "workerinput"):
        return
    from verif import funcov

    for path in (session.config.rootpath / funcov.FOLDER).glob("*.json"):
        path.unlink()


@pytest.fixture(autouse=True, scope="session")
def functional_coverage(request):
    """Sample every program an RTL device runs to completion into the coverpoints of
    ``verif/funcov.py``; write this worker's hits when the session ends."""
    import os
    from collections import Counter

    from bertaccel.sw.devices.rtl import RtlDevice
    from verif import funcov

    hits = {point: Counter() for point in funcov.bins()}
    run = RtlDevice.run

    def sampled(self, program, **inputs):
        result = run(self, program, **inputs)
        funcov.sample(hits, self.cfg, program, funcov.stall_mode(self))
        return result

    patch = pytest.MonkeyPatch()
    patch.setattr(RtlDevice, "run", sampled)
    yield hits
    patch.undo()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    funcov.write(hits, request.config.rootpath / funcov.FOLDER / f"{worker}.json")


@pytest.fixture(autouse=True, scope="session")
def compile_cache(tmp_path_factory):
    """The compile cache of every test, in a folder of the session (not the user's)."""
    folder = tmp_path_factory.mktemp("compile-cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("BERTACCEL_CACHE", str(folder))
    yield folder
    patch.undo()


@pytest.fixture(scope="module")
def one_thread():
    """torch on one intra-op thread for a module: its tensors are small, and extra threads
    only add synchronisation, which costs seconds on a loaded machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def sim_root(request):
    """``<repo>/build/sim``."""
    return request.config.rootpath / "build" / "sim"


@pytest.fixture(scope="session")
def rtl_device(sim_root):
    """``rtl_device(cfg, *, seed=0, src_idle=0, sink_stall=0, **options)`` -> shared RtlDevice."""
    from bertaccel.sw.devices.rtl import RtlDevice

    devices = {}

    def get(cfg, *, seed=0, src_idle=0, sink_stall=0, **options):
        key = (cfg, seed, src_idle, sink_stall, tuple(sorted(options.items())))
        device = devices.get(key)
        if device is None:
            device = devices[key] = RtlDevice(cfg, build_root=sim_root, seed=seed,
                                              src_idle=src_idle, sink_stall=sink_stall,
                                              **options)
        return device

    yield get
    for device in devices.values():
        device.close()
