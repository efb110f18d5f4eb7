"""Shared pytest fixtures for the simulation tests.

``sim_root``
    The folder for simulation builds, ``<repo>/build/sim`` whatever the working directory; build
    folders inside it are named ``<design>-<cfg.tag>``::

        sim = build(lambda: PE(cfg), name="pe", build_dir=sim_root / f"pe-{cfg.tag}")

``rtl_device``
    A factory of :class:`~bertaccel.sw.devices.rtl.RtlDevice` objects shared by the whole session: one
    simulator per (config, settings), started on first use and closed when the session ends::

        def test_gemm(rtl_device):
            device = rtl_device(preset("4x4"), sink_stall=64)
            result = gemm(device, a, b)

    Devices keep their memories between tests (as the hardware would), which the compiled
    programs never rely on.
"""

import pytest

__all__ = []


@pytest.fixture(autouse=True, scope="session")
def compile_cache(tmp_path_factory):
    """The compile cache of every test, in a folder of the session (not the user's)."""
    folder = tmp_path_factory.mktemp("compile-cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("BERTACCEL_CACHE", str(folder))
    yield folder
    patch.undo()


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
