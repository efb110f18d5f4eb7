"""Registered multipliers, mapped onto an FPGA's DSP block where the target is known.

Every multiplier of the design (the PEs' MACs and the epilogue's tiles) is a product register
fed by a multiply of register outputs: ``product <= a * b``. Synthesis tools map the multiply to
a DSP block but, for ECP5, yosys leaves the register in the fabric, so the path runs from a
flip-flop through routing into the DSP, through its combinational multiplier (3.9 ns in
nextpnr's model of speed grade 6) and through routing again into a flip-flop: about 116 MHz.
The MULT18X18D has an output register of its own; using it ends the path at the DSP.

:func:`product_register` builds the register either way. With ``platform`` an ECP5 (its
``family`` is ``"ecp5"``: amaranth's Lattice platforms, and :data:`ECP5` for the synthesis
flow's plain Verilog) it instantiates a MULT18X18D with ``REG_OUTPUT_CLK = "CLK0"``; otherwise
(simulation, lint, any other target) it is the portable ``m.d.sync += product.eq(a * b)``. Both
give the product of the operands of cycle *t* in cycle *t* + 1, with the same reset, so the
cycle timing is the same; the simulation tests run the portable form.
"""

from amaranth import ClockSignal, Instance, ResetSignal, Signal

__all__ = ["ECP5", "KEEP", "KEEP_REGISTERS", "uses_ecp5_dsp", "product_register"]

#: Attributes of a register that synthesis must not merge with an equivalent one (a pipeline
#: copy kept local on purpose). yosys does not look at ``keep`` on a wire when it merges
#: flip-flops, so the flows run :data:`KEEP_REGISTERS` right after reading the design.
KEEP = {"keep": 1}

#: yosys commands that give the flip-flops of wires marked with :data:`KEEP` the ``keep``
#: attribute themselves, which ``opt_merge`` respects.
KEEP_REGISTERS = "proc; setattr -set keep 1 a:keep %ci1:+$dff[Q] t:$dff %i"

#: MULT18X18D operand width (signed).
_WIDTH = 18


class _ECP5Target:
    """Stands in for an Amaranth platform when Verilog is written for an ECP5 flow without one
    (``bertaccel synth``): generators that look at ``platform.family`` see ``"ecp5"``."""

    family = "ecp5"

    def __repr__(self):
        return "ECP5"


#: Pass as ``platform`` to :func:`bertaccel.hw.verilog.convert` for ECP5 synthesis.
ECP5 = _ECP5Target()


def uses_ecp5_dsp(platform):
    """Whether generators instantiate ECP5 DSP primitives for ``platform``."""
    return getattr(platform, "family", None) == "ecp5"


def product_register(m, a, b, *, platform, name, reset_less=False, input_registers=False):
    """A register that holds ``a * b`` of the cycle before: ``product <= a * b``.

    With ``input_registers`` the operands are registered first and the product holds ``a * b``
    of two cycles before (the MULT18X18D's input registers on an ECP5).

    Parameters
    ----------
    m : Module
    a, b : Value
        At most 18 bits each, signed or unsigned, for the ECP5 primitive; wider operands
        always take the portable form.
    platform
        The ``platform`` given to ``elaborate``.
    name : str
    reset_less : bool
        As for :class:`~amaranth.hdl.Signal`; otherwise the product clears with the ``sync``
        domain's reset, if it has one (the DSP's synchronous RST0; a board platform's default
        domain has none).
    input_registers : bool
        Register both operands before the multiply (one more cycle of latency).

    Returns
    -------
    Signal
        Of the shape of ``a * b``.
    """
    shape = (a * b).shape()
    product = Signal(shape, name=name, reset_less=reset_less)
    # Bits each operand needs as a signed number (an unsigned one gains a zero sign bit).
    bits_a, bits_b = (len(x) + (not x.shape().signed) for x in (a, b))
    if not (uses_ecp5_dsp(platform) and bits_a <= _WIDTH and bits_b <= _WIDTH):
        if input_registers:
            a_reg = Signal(a.shape(), name=f"{name}_a", reset_less=reset_less)
            b_reg = Signal(b.shape(), name=f"{name}_b", reset_less=reset_less)
            m.d.sync += [a_reg.eq(a), b_reg.eq(b)]
            a, b = a_reg, b_reg
        m.d.sync += product.eq(a * b)
        return product

    # Both operands are multiplied as signed 18-bit numbers (an unsigned one gains a zero sign
    # bit), each placed at the top of its port with zeros below it: a narrow operand then uses
    # only its own pins, since nextpnr ties a DSP input held at a constant inside the tile
    # instead of routing a copy of the sign bit to every upper pin (an int8 PE saves 20 routed
    # pins). The product sits above the two shifts in the 36-bit output.
    shift_a, shift_b = _WIDTH - bits_a, _WIDTH - bits_b
    assert shift_a + shift_b + len(product) <= 2 * _WIDTH
    a18 = Signal(_WIDTH, name=f"{name}_a")
    b18 = Signal(_WIDTH, name=f"{name}_b")
    p36 = Signal(2 * _WIDTH, name=f"{name}_p")
    m.d.comb += [a18.eq(a << shift_a), b18.eq(b << shift_b)]    # then extended by signedness
    ports = []
    for i in range(_WIDTH):
        ports += [("i", f"A{i}", a18[i]), ("i", f"B{i}", b18[i]), ("i", f"C{i}", 0)]
    for i in range(2 * _WIDTH):
        ports.append(("o", f"P{i}", p36[i]))
    for k in range(4):
        ports += [("i", f"CE{k}", 1), ("i", f"CLK{k}", ClockSignal("sync") if k == 0 else 0),
                  ("i", f"RST{k}", 0 if (k or reset_less)
                                         else ResetSignal("sync", allow_reset_less=True))]
    ports += [("i", "SIGNEDA", 1), ("i", "SIGNEDB", 1), ("i", "SOURCEA", 0), ("i", "SOURCEB", 0)]
    registers = ["OUTPUT"] + (["INPUTA", "INPUTB"] if input_registers else [])
    params = {}
    for reg in registers:
        params.update({f"p_REG_{reg}_CLK": "CLK0", f"p_REG_{reg}_CE": "CE0",
                       f"p_REG_{reg}_RST": "RST0"})
    m.submodules[f"{name}_dsp"] = Instance("MULT18X18D", *ports, p_RESETMODE="SYNC", **params)
    m.d.comb += product.eq(p36[shift_a + shift_b:][:len(product)])
    return product
