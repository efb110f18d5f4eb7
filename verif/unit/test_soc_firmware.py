"""The host side of the SoC's firmware (:mod:`bertaccel.soc.firmware`), without a simulator.

``image.h`` carries the image's own segments (so a patched program is what runs) and the
region sizes; the checksum is 32-bit FNV-1a as the firmware computes it; the report parser reads
the facts, the output dump (and refuses a gap in it) and the end line; an image too large for
the SoC's memories is refused with a message that says by how much. The firmware itself runs in
``verif/system/test_soc.py``.
"""

import re

import pytest
import torch

from bertaccel.hw.config import preset
from bertaccel.soc.build import SocError
from bertaccel.soc.firmware import ALIGN, check_image, checksum, image_header, parse_report
from bertaccel.sw.devices import axi as axi_host
from bertaccel.sw.tiler import compile_gemm

__all__ = []


def _image(m, k, n):
    cfg = preset("2x2")
    gen = torch.Generator().manual_seed(3)
    return axi_host.layout(compile_gemm(cfg, m, k, n), align=ALIGN,
                           a=torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8),
                           b=torch.randint(-128, 128, (k, n), generator=gen, dtype=torch.int8))


def _array(text, name):
    body = re.search(rf"{name}\[\d+\][^=]*= {{(.*?)}};", text, re.S)[1]
    return bytes(int(token, 16) for token in re.findall(r"0x([0-9a-f]{2})", body))


def test_image_header_carries_the_segments():
    image = _image(5, 7, 3)
    addr, prog = image.segments[0]
    image.segments[0] = (addr, bytes(16) + prog[16:])   # a patched first instruction
    text = image_header(image)
    assert _array(text, "image_prog") == image.segments[0][1]
    assert _array(text, "image_data") == image.segments[1][1]
    for name, value in (("PROG_LEN", image.prog_len), ("DATA_LEN", image.data_len),
                        ("OUT_LEN", image.out_len), ("OUT_BYTES", image.out_size)):
        assert f"#define IMAGE_{name} {value}u" in text
    assert f"#define IMAGE_BUS_BYTES {axi_host.bus_bytes(image.cfg)}" in text


def test_checksum_is_fnv1a():
    assert checksum(b"") == 0x811C9DC5
    assert checksum(b"a") == 0xE40C292C
    assert checksum(b"foobar") == 0xBF9CF968


def test_parse_report():
    text = ("[clocker] loaded\nbertaccel soc r2c2\nidentity ok\nwake irq\n"
            "irq_status 0x00000001\nout_count 2\ncycles 0x0000000000000123\n"
            "out 0000 01 02 03\nout 0003 ff\nchecksum 0x0000abcd\nend ok\n")
    report = parse_report(text)
    assert report.ok and report.error is None and report.wake == "irq"
    assert report.output == bytes([1, 2, 3, 255])
    assert report.facts == {"irq_status": 1, "out_count": 2, "cycles": 0x123,
                            "checksum": 0xABCD}
    failed = parse_report("fault 0x00000001\nend error fault: the run stopped\n")
    assert not failed.ok and failed.error == "fault: the run stopped"
    with pytest.raises(SocError, match="gap at byte 2"):
        parse_report("out 0000 01 02\nout 0003 04\n")


def test_an_image_too_large_is_refused():
    check_image(_image(9, 21, 11))
    with pytest.raises(ValueError, match=r"needs [\d,]+ bytes of the SoC's 65,536-byte ROM"):
        check_image(_image(64, 256, 64))
