"""A compiled program: the instruction list plus the maps between tensors and the data streams.

A :class:`Program` is what the compiler (:mod:`bertaccel.sw.tiler`) produces and what every
device runs. Besides the instructions it carries two precomputed index tensors:

* the *pack index*, ``(n_data_beats, cfg.lanes)``, which says for every lane of every beat of the
  input data stream which element of the inputs it carries. It indexes the concatenation of the
  flattened inputs (in the order of :attr:`Program.inputs`), then the flattened constants the
  compiler baked into the program (:attr:`Program.constants`, e.g. the bytes of the epilogue
  parameter memory), followed by one zero, so index ``n_pack_elements`` is a padding lane;
* the *unpack index*, ``(n_out_beats, cfg.cols)``, which says for every lane of every beat of the
  output stream which element of the outputs it is. It indexes the concatenation of the flattened
  outputs (in the order of :attr:`Program.outputs`) followed by one discard slot, so index
  ``n_output_elements`` drops the lane (an edge tile's padding).

Packing and unpacking are therefore one gather and one scatter, whatever the program.
"""

import math

import numpy as np
import torch

from ..hw import isa, legal
from ..hw.config import AccelConfig
from .illegal import explain

__all__ = ["Program", "ProgramError", "OperandError", "to_int8"]


class ProgramError(ValueError):
    """A program breaks a rule of the machine, or a compiler cannot build one."""


class OperandError(ValueError):
    """An input (or output) tensor does not have the name, shape, dtype or values expected."""


_INT8_MIN, _INT8_MAX = -128, 127


def to_int8(name, value, shape=None):
    """``value`` as a CPU ``torch.int8`` tensor, checked.

    Parameters
    ----------
    name : str
        The operand's name, used in error messages.
    value : torch.Tensor or numpy.ndarray or array-like
        A ``torch.int8`` tensor, or any integer tensor or array whose values lie in
        ``[-128, 127]``. Floating-point and boolean values are refused even when they are whole.
    shape : tuple of int, optional
        The shape ``value`` must have.

    Returns
    -------
    torch.Tensor
        Contiguous ``torch.int8`` tensor on the CPU (``value`` itself when it already is one).

    Raises
    ------
    OperandError
        If the value is not integer, has the wrong shape, or holds a value outside int8. The
        message names the operand, the expected shape and dtype, and the value range found.
    """
    want = f"an int8-valued integer tensor{'' if shape is None else f' of shape {tuple(shape)}'}"
    if isinstance(value, torch.Tensor):
        tensor = value
    else:
        try:
            array = np.asarray(value)
        except Exception as error:  # noqa: BLE001 - any conversion failure is a bad operand
            raise OperandError(f"input {name!r} must be {want}, not {type(value).__name__} "
                               f"({error})") from None
        if array.dtype.kind not in "iu":
            raise OperandError(f"input {name!r} must be {want}, not an array of dtype "
                               f"{array.dtype}")
        if shape is not None and tuple(array.shape) != tuple(shape):
            raise OperandError(f"input {name!r} must be {want}, not of shape "
                               f"{tuple(array.shape)}")
        if array.size and (array.min() < _INT8_MIN or array.max() > _INT8_MAX):
            raise OperandError(f"input {name!r} must be {want}, but its values lie in "
                               f"[{array.min()}, {array.max()}], outside int8 "
                               f"[{_INT8_MIN}, {_INT8_MAX}]")
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.int8))
    if tensor.dtype == torch.bool or tensor.is_floating_point() or tensor.is_complex():
        raise OperandError(f"input {name!r} must be {want}, not a tensor of dtype {tensor.dtype}")
    if shape is not None and tuple(tensor.shape) != tuple(shape):
        raise OperandError(f"input {name!r} must be {want}, not of shape {tuple(tensor.shape)}")
    tensor = tensor.detach().cpu()
    if tensor.dtype != torch.int8:
        if tensor.numel():
            lo, hi = int(tensor.min()), int(tensor.max())
            if lo < _INT8_MIN or hi > _INT8_MAX:
                raise OperandError(f"input {name!r} must be {want}, but its values (dtype "
                                   f"{tensor.dtype}) lie in [{lo}, {hi}], outside int8 "
                                   f"[{_INT8_MIN}, {_INT8_MAX}]")
        tensor = tensor.to(torch.int8)
    return tensor.contiguous()


def _shape(name, shape):
    try:
        out = tuple(int(d) for d in shape)
    except TypeError:
        raise ProgramError(f"the shape of {name!r} must be a tuple of ints, "
                           f"not {shape!r}") from None
    if any(d < 0 for d in out):
        raise ProgramError(f"the shape of {name!r} must not have negative sizes, not {out}")
    return out


def _numel(shape):
    return math.prod(shape)


#: The integer fields of each instruction, all ``isa.FIELD_WIDTH`` bits wide.
_FIELDS = {
    isa.Load: ("addr", "count"),
    isa.Matmul: ("a_addr", "b_addr", "acc_addr", "m_len"),
    isa.Store: ("acc_addr", "rows", "strips", "stride", "dest_addr", "param_addr", "aux_addr"),
    isa.Set: (),
}


def _check_fields(number, instr):
    """The type of ``instr``, an ISA instruction whose integer fields are all in range."""
    kind = type(instr)
    fields = _FIELDS.get(kind)
    if fields is None:
        raise ProgramError(f"instruction {number} is not an ISA instruction "
                           f"(isa.Load, isa.Matmul, isa.Store or isa.Set): {instr!r}")
    field_max = isa.FIELD_MAX
    for name in fields:
        value = getattr(instr, name)
        if type(value) is not int or not 0 <= value <= field_max:
            if (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                    or not 0 <= value <= field_max):
                raise ProgramError(f"instruction {number} ({kind.opcode.name}): {name} "
                                   f"must be an int from 0 to {field_max}, not {value!r}")
    for name, enum_type, fault in _ENUMS.get(kind, ()):
        if not isinstance(getattr(instr, name), enum_type):
            raise ProgramError(explain(None, fault, number, instr, None))
    return kind


#: The enum fields of each instruction: a host program holds their members, not raw ints.
_ENUMS = {
    isa.Load: [("target", isa.Target, legal.Fault.TARGET)],
    isa.Store: [("op", isa.EpOp, legal.Fault.STORE_OP),
                ("dest", isa.Dest, legal.Fault.STORE_DEST)],
    isa.Set: [("index", isa.Param, legal.Fault.SET_INDEX)],
}


def _check_set_value(number, instr):
    """The value of SET ``instr`` is an int of the SET's width (its register's: a rule)."""
    value = instr.value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or not 0 <= value < 1 << isa.SET_VALUE_WIDTH:
        raise ProgramError(f"instruction {number} (SET): value must be an int from 0 to "
                           f"2**{isa.SET_VALUE_WIDTH}-1, not {value!r}")


class Program:
    """A compiled program for one :class:`~bertaccel.hw.config.AccelConfig`.

    Parameters
    ----------
    cfg : AccelConfig
        The build the program is compiled for. A device refuses a program for another build.
    instrs : sequence of isa.Load, isa.Matmul, isa.Store
        The instructions, in program order.
    inputs : dict of str to tuple of int
        Name and shape of every input tensor, in the order the pack index concatenates them.
    outputs : dict of str to tuple of int
        Name and shape of every output tensor, in the order the unpack index concatenates them.
    pack_index : torch.Tensor or numpy.ndarray
        ``(n_data_beats, cfg.lanes)`` integer index into the flattened inputs plus one zero.
    unpack_index : torch.Tensor or numpy.ndarray
        ``(n_out_beats, cfg.cols)`` integer index into the flattened outputs plus one discard slot.
    constants : dict of str to tensor, optional
        Data the program carries itself (the compiler's epilogue parameters), packed after the
        inputs: int8-valued tensors by name, in the order the pack index concatenates them.
    meta : dict, optional
        Free-form facts from the compiler (the tiling plan, estimates); not used to run.

    Members
    -------
    cfg, instrs, inputs, outputs, pack_index, unpack_index, constants, meta
        As given; ``pack_index`` and ``unpack_index`` as ``torch.int64`` tensors, ``constants``
        as ``torch.int8`` tensors.

    Notes
    -----
    Nothing is checked at construction beyond types; call :meth:`validate` (every device does
    before it runs anything).
    """

    def __init__(self, cfg, instrs, *, inputs, outputs, pack_index, unpack_index, constants=None,
                 meta=None):
        if not isinstance(cfg, AccelConfig):
            raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
        self.cfg = cfg
        self.instrs = list(instrs)
        self.inputs = {str(name): _shape(name, shape) for name, shape in inputs.items()}
        self.outputs = {str(name): _shape(name, shape) for name, shape in outputs.items()}
        self.pack_index = torch.as_tensor(pack_index, dtype=torch.int64).cpu().contiguous()
        self.unpack_index = torch.as_tensor(unpack_index, dtype=torch.int64).cpu().contiguous()
        self.constants = {str(name): to_int8(f"constant {name}", value)
                          for name, value in (constants or {}).items()}
        clash = sorted(set(self.constants) & set(self.inputs))
        if clash:
            raise ProgramError(f"constant(s) {', '.join(map(repr, clash))} have the name of an "
                               f"input")
        self.meta = dict(meta or {})

    # -- sizes ------------------------------------------------------------------------------------

    @property
    def n_data_beats(self):
        """Beats of the input data stream: the sum of the LOAD counts."""
        return sum(instr.count for instr in self.instrs if isinstance(instr, isa.Load))

    @property
    def n_out_beats(self):
        """Beats of the output stream: the sum of the STORE counts."""
        return sum(instr.count for instr in self.instrs if isinstance(instr, isa.Store))

    @property
    def n_input_elements(self):
        """Elements in all inputs together (the constants follow them in the pack index)."""
        return sum(_numel(shape) for shape in self.inputs.values())

    @property
    def n_pack_elements(self):
        """Elements in all inputs and constants together; the pack index's padding index."""
        return self.n_input_elements + sum(c.numel() for c in self.constants.values())

    @property
    def n_output_elements(self):
        """Elements in all outputs together; the unpack index's discard index."""
        return sum(_numel(shape) for shape in self.outputs.values())

    def __len__(self):
        return len(self.instrs)

    def __repr__(self):
        return (f"<Program {len(self.instrs)} instructions for {self.cfg.name} "
                f"({self.cfg.tag}), inputs {self.inputs}, outputs {self.outputs}>")

    def counts(self):
        """Instructions of each opcode: ``{"LOAD": .., "MATMUL": .., "STORE": ..}``, plus
        ``"SET"`` when the program has any."""
        out = {"LOAD": 0, "MATMUL": 0, "STORE": 0}
        for instr in self.instrs:
            out[instr.opcode.name] = out.get(instr.opcode.name, 0) + 1
        return out

    def listing(self):
        """A human-readable listing, one instruction a line, with the dependency flags."""
        lines = []
        for number, instr in enumerate(self.instrs):
            flags = [name for name in ("pop_prev", "pop_next", "push_prev", "push_next")
                     if getattr(instr, name)]
            if isinstance(instr, isa.Load):
                body = f"{instr.target.name} addr={instr.addr} count={instr.count}"
            elif isinstance(instr, isa.Matmul):
                body = (f"a={instr.a_addr} b={instr.b_addr} acc={instr.acc_addr} "
                        f"m_len={instr.m_len}{' acc' if instr.accumulate else ''}"
                        f"{' shift' if instr.shift else ''}")
            elif isinstance(instr, isa.Set):
                body = f"{getattr(instr.index, 'name', instr.index)}={instr.value}"
            elif instr.op == isa.EpOp.RAW:
                body = f"acc={instr.acc_addr} count={instr.count}"
            else:
                body = (f"acc={instr.acc_addr} rows={instr.rows} strips={instr.strips} "
                        f"stride={instr.stride} op={instr.op.name} param={instr.param_addr}"
                        + (f" aux={instr.aux_addr}" if instr.op == isa.EpOp.LAYERNORM else ""))
            lines.append(f"{number:6d} {instr.opcode.name:6s} {body} {' '.join(flags)}".rstrip())
        return "\n".join(lines)

    # -- the instruction stream ---------------------------------------------------------------

    def words(self):
        """The instructions encoded with :func:`bertaccel.hw.isa.encode`, as 128-bit ints."""
        return [isa.encode(instr) for instr in self.instrs]

    # -- checking -------------------------------------------------------------------------------

    def validate(self):
        """Check the program against the rules of the machine: the host's own (types, the
        streams' indexes, channels that end at 0) and those of :mod:`bertaccel.hw.legal`,
        which the core checks too (the first instruction that breaks one, in words by
        :func:`bertaccel.sw.illegal.explain`).

        Raises
        ------
        ProgramError
            Naming the instruction index and field, if an instruction is not an ISA instruction;
            a field is negative or over ``isa.FIELD_MAX``; an address range runs past its memory
            (LOAD ``addr + count > spad_depth``, or into PMEM ``addr + count / beats_per_row >
            pmem_depth``; MATMUL ``b_addr + rows`` or ``a_addr + m_len`` past ``spad_depth``,
            ``acc_addr + m_len`` past ``acc_depth``; STORE ``acc_addr + (strips-1)*stride +
            rows > acc_depth``, and for an epilogue op ``param_addr + strips > pmem_depth``, for
            LAYERNORM ``aux_addr + strips*rows > spad_depth``); a LOAD into PMEM whose count is
            not a multiple of ``cfg.pmem_beats_per_row``; a SET whose index is not an
            ``isa.Param`` or whose value does not fit its register; a STORE whose op is not an
            ``isa.EpOp`` or whose destination is not HOST; a SOFTMAX or LAYERNORM STORE whose row
            (``strips * cols`` columns) is longer than ``golden.intops.MAX_ROW``, or whose
            ``row_len`` -- as set by the SETs before it, in program order; 0 when none did --
            is not from 1 to ``strips * cols``; a LAYERNORM STORE with ``SHIFT1`` (gshift)
            below 8. Also a dependency flag that names a unit that does not exist; executed in
            program order, a pop that finds its channel empty or a push that takes a channel
            past ``isa.TOKEN_MAX``; a channel that does not end at 0. Also if the pack or unpack
            index disagrees with the LOAD or STORE counts, points outside its tensors, or does
            not write every output element exactly once.
        """
        cfg = self.cfg
        n_data = n_out = 0
        for number, instr in enumerate(self.instrs):
            kind = _check_fields(number, instr)
            if kind is isa.Load:
                n_data += instr.count
            elif kind is isa.Set:
                _check_set_value(number, instr)
            elif kind is isa.Store:
                n_out += instr.count
        words = self.words()
        fault, number, state = legal.first_fault(cfg, words)
        if fault is not legal.Fault.NONE:
            raise ProgramError(explain(cfg, fault, number, self.instrs[number], state))
        left = {channel: count for channel, count in legal.tokens_after(words).items() if count}
        if left:
            raise ProgramError(f"token channel(s) do not end at 0: "
                               f"{', '.join(f'{c} holds {n}' for c, n in left.items())}")

        self._check_index("pack index", self.pack_index, (n_data, cfg.lanes),
                          "the sum of the LOAD counts", self.n_pack_elements)
        self._check_index("unpack index", self.unpack_index, (n_out, cfg.cols),
                          "the sum of the STORE counts", self.n_output_elements)
        self._check_written_once()

    def _check_written_once(self):
        """The unpack index writes every output element exactly once."""
        n_elems = self.n_output_elements
        # numpy, not torch: torch's reductions are slow on small machines.
        hits = np.bincount(self.unpack_index.numpy().reshape(-1), minlength=n_elems + 1)
        hits = hits[:n_elems]
        if n_elems and (hits.min() != 1 or hits.max() != 1):
            bad = int(np.flatnonzero(hits != 1)[0])
            raise ProgramError(f"the unpack index must write every output element exactly once, "
                               f"but output element {bad} is written {int(hits[bad])} times")

    @staticmethod
    def _check_index(what, index, shape, counted, n_elems):
        if tuple(index.shape) != shape:
            raise ProgramError(f"the {what} has shape {tuple(index.shape)}, but {counted} "
                               f"needs {shape}")
        if index.numel():
            values = index.numpy()
            lo, hi = int(values.min()), int(values.max())
            if lo < 0 or hi > n_elems:
                raise ProgramError(f"the {what} holds values in [{lo}, {hi}], outside "
                                   f"[0, {n_elems}]")

    # -- data -----------------------------------------------------------------------------------

    def pack(self, **tensors):
        """The input data stream for the given inputs.

        Parameters
        ----------
        **tensors
            One tensor per name of :attr:`inputs`, each int8-valued (see :func:`to_int8`).

        Returns
        -------
        torch.Tensor
            ``(n_data_beats, cfg.lanes)`` ``torch.int8`` tensor; padding lanes are zero.

        Raises
        ------
        OperandError
            If an input is missing or unknown, or has the wrong shape, dtype or values.
        """
        missing = [name for name in self.inputs if name not in tensors]
        unknown = [name for name in tensors if name not in self.inputs]
        if missing or unknown:
            raise OperandError(
                f"the program takes inputs {', '.join(map(repr, self.inputs))}"
                + (f"; missing {', '.join(map(repr, missing))}" if missing else "")
                + (f"; unknown {', '.join(map(repr, unknown))}" if unknown else ""))
        flat = [to_int8(name, tensors[name], shape).reshape(-1)
                for name, shape in self.inputs.items()]
        flat.extend(constant.reshape(-1) for constant in self.constants.values())
        flat.append(torch.zeros(1, dtype=torch.int8))
        return torch.take(torch.cat(flat), self.pack_index)

    def unpack(self, out_beats):
        """The outputs carried by an output stream.

        Parameters
        ----------
        out_beats : torch.Tensor
            ``(n_out_beats, cfg.cols)`` ``torch.int32`` tensor, the beats in the order they left.

        Returns
        -------
        dict of str to torch.Tensor
            Each output of :attr:`outputs`, ``torch.int32``, in its shape.

        Raises
        ------
        OperandError
            If ``out_beats`` is not an int32 tensor of the expected shape.
        """
        want = (self.unpack_index.shape[0], self.cfg.cols)
        if not isinstance(out_beats, torch.Tensor) or out_beats.dtype != torch.int32:
            raise OperandError(f"out_beats must be a torch.int32 tensor of shape {want}, not "
                               f"{getattr(out_beats, 'dtype', type(out_beats).__name__)}")
        if tuple(out_beats.shape) != want:
            raise OperandError(f"out_beats must have shape {want} (n_out_beats, cols), not "
                               f"{tuple(out_beats.shape)}")
        n_elems = self.n_output_elements
        buffer = torch.zeros(n_elems + 1, dtype=torch.int32)
        # Only the discard slot can be written twice, so the scatter is deterministic.
        buffer[self.unpack_index.reshape(-1)] = out_beats.detach().cpu().reshape(-1)
        sizes = [_numel(shape) for shape in self.outputs.values()]
        parts = torch.split(buffer[:n_elems], sizes)
        return {name: part.view(shape)
                for (name, shape), part in zip(self.outputs.items(), parts)}
