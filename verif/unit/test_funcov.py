"""The functional coverage model (verif/funcov.py): what a program hits, and the report."""

from collections import Counter

from bertaccel.hw import isa
from bertaccel.hw.config import PRESETS
from bertaccel.sw.hand_programs import hand_programs, load, matmul, raw_program, store
from verif import funcov

__all__ = []

CFG = PRESETS["2x2"]


def _hits(instrs, mode="free"):
    hits = {point: Counter() for point in funcov.bins()}
    funcov.sample(hits, CFG, raw_program(CFG, instrs), mode)
    return hits


def test_tokens_to_their_limit_and_back():
    hits = _hits(hand_programs(CFG)["tokens_full"], "backpressure")
    assert hits["token channel"] == {"l2e at limit": 1, "l2e back at 0": 1}
    assert hits["opcode x stall"] == {"LOAD / backpressure": 255, "MATMUL / backpressure": 255}
    assert hits["dependency flag"] == {"LOAD push_next": 255, "MATMUL pop_prev": 255}
    assert hits["wait"] == {}    # the cycle model is asked of free-running runs only


def test_waits_of_a_free_run():
    hits = _hits(hand_programs(CFG)["dispatch_blocked"])
    assert hits["wait"]["a queue full, dispatch blocked"] == 1


def test_fields_and_address_edges():
    last = CFG.acc_depth - 1
    hits = _hits([load(CFG.spad_depth), matmul(0),
                  isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=CFG.rows + 1, accumulate=True),
                  isa.Store(acc_addr=last, rows=1, strips=1, stride=1, op=isa.EpOp.GELU),
                  store(0), isa.Set(index=isa.Param.EPS, value=1)], "idle source")
    assert hits["address edge"] == {"scratchpad A first row": 1, "scratchpad A last row": 1,
                                    "accumulator first row": 1, "accumulator last row": 1}
    assert hits["MATMUL m_len"] == {"0": 1, "above rows": 1}
    assert hits["MATMUL mode"] == {"accumulate 0 shift 0": 1, "accumulate 1 shift 0": 1}
    assert hits["STORE shape"] == {"one row": 1, "one strip": 1, "empty": 1}
    assert hits["STORE op x stall"] == {"GELU / idle source": 1, "RAW / idle source": 1}
    assert hits["SET index"] == {"EPS": 1}


def test_report_counts_the_bins(tmp_path, capsys):
    assert funcov.main([str(tmp_path)]) == 2
    assert "run the suite first" in capsys.readouterr().err
    funcov.write(_hits([load(1)]), tmp_path / "gw0.json")
    funcov.write(_hits([load(1)], "idle source"), tmp_path / "gw1.json")
    text, hit, total = funcov.report(funcov.merged(tmp_path))
    assert total == sum(len(names) for names in funcov.bins().values())
    assert "      SPAD_A / free: 1" in text and "MISS SPAD_B / free: 0" in text
    # LOAD x 2 modes, SPAD_A x 2 modes, scratchpad A's first row
    assert hit == 5 and text.endswith(f"{hit} of {total} bins ({100 * hit / total:.1f} %)")
    assert funcov.main([str(tmp_path)]) == 0
