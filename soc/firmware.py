"""The SoC's firmware: its image header, its compile, and the report it prints.

The firmware (``soc/firmware/main.c``) runs one program on the accelerator. The host writes
``image.h`` from a :class:`~bertaccel.sw.devices.axi.DramImage` (:func:`image_header`): the
program's instructions and packed input data as C arrays (in ``.data``, so LiteX's start-up
copies them from the ROM into main RAM, where the shell reads them), and the sizes of the three
regions. :func:`compile_firmware` compiles it with the build's generated headers (LiteX's
``generated/*.h`` and the shell's register map) into a flat binary for the ROM, and
:func:`parse_report` reads back what it printed on the UART.
"""

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..sw.devices import axi as axi_host
from .build import SocError

__all__ = ["FIRMWARE_DIR", "MARCH", "Report", "image_header", "check_image",
           "compile_firmware", "compile_board_firmware",
           "compile_layer_firmware", "layer_header", "parse_report",
           "checksum"]

#: The firmware's sources.
FIRMWARE_DIR = Path(__file__).resolve().parent / "firmware"
#: The ISA of the CPU (VexRiscv ``lite``: RV32IM, with the CSR instructions). The firmware
#: needs no libgcc (no 64-bit arithmetic), so GCC's multilib choice does not matter.
MARCH = ("-march=rv32im_zicsr", "-mabi=ilp32")
#: Alignment of the image's regions in memory (a multiple of every AXI data width).
ALIGN = 64
#: Bytes of the ROM and of main RAM kept for the firmware's own code, data and stack.
FIRMWARE_RESERVE = 0x2000
_GCC = "riscv64-unknown-elf-gcc"
_OBJCOPY = "riscv64-unknown-elf-objcopy"


def _c_bytes(name, data):
    rows = [", ".join(f"0x{b:02x}" for b in data[i:i + 16]) for i in range(0, len(data), 16)]
    body = ",\n\t".join(rows) if rows else "0"
    return (f"static uint8_t {name}[{max(len(data), 1)}] __attribute__((aligned(IMAGE_ALIGN))) "
            f"= {{\n\t{body}\n}};\n")


def image_header(image):
    """The text of ``image.h`` for ``image`` (a :class:`~bertaccel.sw.devices.axi.DramImage`):
    its regions' lengths and the bytes of its segments (a test may have patched them); where
    they lie is the linker's choice."""
    cfg = image.cfg
    segments = dict(image.segments)
    prog = segments[image.prog_addr]
    data = segments.get(image.data_addr, b"") if image.data_len else b""
    return "\n".join([
        "/* The accelerator's program and input data for the firmware (main.c), written by",
        " * bertaccel.soc.firmware.image_header. */",
        "#ifndef IMAGE_H", "#define IMAGE_H", "", "#include <stdint.h>", "",
        f'#define IMAGE_TAG "{cfg.tag}"',
        f"#define IMAGE_ALIGN {ALIGN}",
        f"#define IMAGE_BUS_BYTES {axi_host.bus_bytes(cfg)}",
        f"#define IMAGE_PROG_LEN {image.prog_len}u",
        f"#define IMAGE_DATA_LEN {image.data_len}u",
        f"#define IMAGE_OUT_LEN {image.out_len}u",
        f"#define IMAGE_OUT_BYTES {image.out_size}u", "",
        _c_bytes("image_prog", prog),
        _c_bytes("image_data", data),
        "#endif /* IMAGE_H */", ""])


def check_image(image):
    """Raise ``ValueError`` (the message says by how much) if ``image`` cannot be linked into
    the firmware: its program and data are copied from the ROM into main RAM, where the output
    area lies too (:data:`bertaccel.soc.system.ROM_SIZE`, ``MAIN_RAM_SIZE``), beside
    :data:`FIRMWARE_RESERVE` bytes of the firmware's own."""
    from .system import MAIN_RAM_SIZE, ROM_SIZE

    segments = sum(-(-len(data) // ALIGN) * ALIGN for _, data in image.segments)
    for memory, size, need in (("ROM", ROM_SIZE, segments),
                               ("main RAM", MAIN_RAM_SIZE, segments + image.out_size)):
        if need + FIRMWARE_RESERVE > size:
            raise ValueError(f"the program needs {need:,} bytes of the SoC's {size:,}-byte "
                             f"{memory}, which keeps {FIRMWARE_RESERVE:,} for the firmware; "
                             f"use a smaller GEMM")


def _litex_includes():
    import litex

    root = Path(litex.__file__).resolve().parent / "soc"
    return [root / "software" / "include", root / "cores" / "cpu" / "vexriscv"]


def compile_firmware(build, image, folder):
    """Compile the firmware for ``image`` against ``build`` (a
    :class:`~bertaccel.soc.build.SocBuild`) in ``folder``; return the flat binary (bytes).

    Raises :class:`~bertaccel.soc.build.SocError` with the compiler's message if it fails.
    """
    return _compile(build, folder, ["main.c"], {"image.h": image_header(image)})


#: Where the board's C start-up calls ``sdram_start`` (``board.c``): before LiteX's crt0.S
#: copies ``.data`` into main RAM.
_CRT0_HOOK = "data_init:\n"


def compile_board_firmware(build, image, folder):
    """:func:`compile_firmware` for the board (:mod:`bertaccel.soc.board`): with ``board.c``,
    whose ``sdram_start`` a copy of LiteX's crt0.S calls first, to start the SDRAM."""
    text = (_litex_includes()[1] / "crt0.S").read_text()
    if text.count(_CRT0_HOOK) != 1:
        raise SocError(f"LiteX's crt0.S has no single {_CRT0_HOOK.strip()!r}: update "
                       f"soc/firmware.py for this LiteX")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    crt0 = folder / "crt0_board.S"
    crt0.write_text(text.replace(_CRT0_HOOK, "  call sdram_start\n" + _CRT0_HOOK))
    return _compile(build, folder, ["main.c", "board.c"], {"image.h": image_header(image)},
                    crt0=crt0)


def compile_layer_firmware(build, layer, folder):
    """Compile the layer firmware (``layer.c``) for ``layer`` (a
    :class:`~bertaccel.soc.layer.LayerImage`) against ``build`` in ``folder``; return the flat
    binary (bytes). Its image goes into main RAM (``run_soc(main_ram=...)``)."""
    return _compile(build, folder, ["layer.c"], {"layer.h": layer_header(layer)})


def layer_header(layer):
    """The text of ``layer.h`` for ``layer`` (a :class:`~bertaccel.soc.layer.LayerImage`):
    where its input, and each stage's program, input stream, output area and move table lie
    in main RAM, and the DMA window of each stage."""
    rows = []
    for stage in layer.stages:
        image = stage["image"]
        first, last = image.span()
        # Wait for the interrupt for 64 times the cycle model's count and a million cycles.
        ticks = min(64 * stage["model_cycles"] + 1_000_000, 0xFFFF_FFFF)
        rows.append(f'\t{{"{stage["name"]}", {image.prog_addr:#x}u, {image.data_addr:#x}u, '
                    f'{image.out_addr:#x}u, {stage["moves"]:#x}u,\n\t {image.prog_len}u, '
                    f'{image.data_len}u, {image.out_len}u, {stage["n_moves"]}u, {first:#x}u, '
                    f'{last:#x}u, {ticks}u}},')
    return "\n".join([
        "/* An encoder layer's image in main RAM for the layer firmware (layer.c), written by",
        " * bertaccel.soc.firmware.layer_header. */",
        "#ifndef LAYER_H", "#define LAYER_H", "",
        f'#define LAYER_TAG "{layer.cfg.tag}"',
        f"#define LAYER_IMAGE_BASE {layer.base:#x}u",
        f"#define LAYER_X_ADDR {layer.x_addr:#x}u",
        f"#define LAYER_STAGES {len(layer.stages)}",
        f"#define LAYER_OUT_BYTES {layer.last.out_size}u", "",
        "static const struct layer_stage layer_stages[LAYER_STAGES] = {", *rows, "};", "",
        "#endif /* LAYER_H */", ""])


def _compile(build, folder, sources, headers, crt0=None):
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in headers.items():
        (folder / name).write_text(text)
    crt0 = crt0 or _litex_includes()[1] / "crt0.S"
    elf, binary = folder / "firmware.elf", folder / "firmware.bin"
    includes = [build.include, *_litex_includes(), folder, build.header.parent]
    command = [_GCC, *MARCH, "-Os", "-g", "-Wall", "-Werror", "-ffreestanding", "-nostdlib",
               "-fno-builtin", "-fdata-sections", "-ffunction-sections",
               f'-DBERTACCEL_CSR_H="{build.header.name}"',
               *(f"-I{path}" for path in includes), f"-L{build.include}",
               "-T", str(FIRMWARE_DIR / "linker.ld"), "-Wl,--gc-sections",
               str(crt0), *(str(FIRMWARE_DIR / source) for source in sources),
               "-o", str(elf)]
    for step in (command, [_OBJCOPY, "-O", "binary", str(elf), str(binary)]):
        if shutil.which(step[0]) is None:
            raise SocError(f"{step[0]} is not on PATH (Debian: gcc-riscv64-unknown-elf)")
        result = subprocess.run(step, capture_output=True, text=True, check=False)
        if result.returncode:
            raise SocError(f"{Path(step[0]).name} failed on the firmware: "
                           f"{result.stderr.strip()}")
    return binary.read_bytes()


@dataclass
class Report:
    """What the firmware printed, parsed.

    Members
    -------
    ok : bool
        The last line was ``end ok``.
    error : str or None
        The reason of ``end error <reason>``.
    facts : dict of str to int
        The ``name value`` lines (``status``, ``cycles``, ``checksum``, ``out_count``, ...).
    wake : str or None
        ``"irq"`` or ``"poll"``: how the firmware learnt that the run had ended.
    output : bytes
        The output area as printed.
    text : str
        Everything printed.
    """
    ok: bool
    error: str
    facts: dict
    wake: str
    output: bytes
    text: str

    def outputs(self, image):
        """The program's outputs from the printed output area (``DramImage.outputs``)."""
        return image.outputs(self.output)


_FACT = re.compile(r"(?P<name>[a-z][a-z0-9_]*) (?P<value>0x[0-9a-f]+|\d+)")
_OUT = re.compile(r"out (?P<offset>[0-9a-f]{4}|[0-9a-f]{8})(?P<bytes>( [0-9a-f]{2})+)")


def parse_report(text):
    """Read the firmware's UART output ``text`` into a :class:`Report`."""
    facts, chunks, wake, error, ok = {}, {}, None, None, False
    for line in text.splitlines():
        line = line.strip()
        if match := _OUT.fullmatch(line):
            chunks[int(match["offset"], 16)] = bytes.fromhex(match["bytes"].replace(" ", ""))
        elif match := _FACT.fullmatch(line):
            facts[match["name"]] = int(match["value"], 0)
        elif line.startswith("wake "):
            wake = line.removeprefix("wake ")
        elif line == "end ok":
            ok = True
        elif line.startswith("end error "):
            error = line.removeprefix("end error ")
    output = bytearray()
    for offset in sorted(chunks):
        if offset != len(output):
            raise SocError(f"the firmware's output dump has a gap at byte {len(output)}")
        output += chunks[offset]
    return Report(ok=ok, error=error, facts=facts, wake=wake, output=bytes(output), text=text)


def checksum(data):
    """FNV-1a (32 bits) of ``data``: what the firmware prints as ``checksum``."""
    value = 2166136261
    for byte in data:
        value = ((value ^ byte) * 16777619) & 0xFFFF_FFFF
    return value
