"""Pure-Python tests of AccelConfig: invariants name the bad field, presets, serialisation."""

import dataclasses
import json

import pytest

from bertaccel.hw.config import PRESETS, AccelConfig, ConfigError, load_config, preset


def test_defaults_and_presets_are_valid():
    assert AccelConfig().name == "8x8"
    for name, cfg in PRESETS.items():
        assert cfg.name == name
        assert cfg.lanes == max(cfg.rows, cfg.cols)
        assert cfg.macs_per_cycle == cfg.rows * cfg.cols
        assert cfg.mesh_latency == cfg.rows + cfg.cols + 2
        assert cfg.spad_addr_width == (cfg.spad_depth - 1).bit_length()
        assert cfg.ep_lanes * cfg.ep_ratio == cfg.cols


@pytest.mark.parametrize("fields, field, value", [
    ({"rows": 3}, "rows", "3"),
    ({"rows": 128}, "rows", "128"),
    ({"rows": 1}, "rows", "1"),
    ({"cols": 96}, "cols", "96"),
    ({"cols": 8.0}, "cols", "8.0"),
    ({"spad_depth": 100}, "spad_depth", "100"),
    ({"spad_depth": 32}, "spad_depth", "32"),
    ({"acc_depth": 1 << 17}, "acc_depth", str(1 << 17)),
    ({"in_width": 4}, "in_width", "4"),
    ({"acc_width": 16}, "acc_width", "16"),
    ({"queue_depth": 3}, "queue_depth", "3"),
    ({"clock_mhz": 0}, "clock_mhz", "0"),
    ({"clock_mhz": float("nan")}, "clock_mhz", "nan"),
    ({"rows": 64, "spad_depth": 64}, "spad_depth", "64"),
    ({"cols": 4, "epilogue_lanes": 8}, "epilogue_lanes", "8"),
    ({"epilogue_lanes": 3}, "epilogue_lanes", "3"),
    ({"epilogue_lanes": 1}, "epilogue_lanes", "1"),
    ({"epilogue_lanes": True}, "epilogue_lanes", "True"),
    ({"lut_pes": -1}, "lut_pes", "-1"),
    ({"rows": 2, "cols": 4, "lut_pes": 9}, "lut_pes", "9"),
    ({"lut_pes": 2.0}, "lut_pes", "2.0"),
    ({"lut_pes": True}, "lut_pes", "True"),
])
def test_bad_field_is_named(fields, field, value):
    with pytest.raises(ConfigError, match=field) as info:
        AccelConfig(**fields)
    assert value in str(info.value)
    assert isinstance(info.value, ValueError)


def test_unknown_preset_is_named_and_presets_listed():
    with pytest.raises(ConfigError, match="'9x9'") as info:
        preset("9x9")
    for name in PRESETS:
        assert name in str(info.value)
    assert preset("4x8") is PRESETS["4x8"]
    assert load_config("2x2") is PRESETS["2x2"]


def test_epilogue_lanes():
    cfg = AccelConfig(rows=8, cols=8)
    assert (cfg.ep_lanes, cfg.ep_ratio) == (8, 1)
    narrow = dataclasses.replace(cfg, epilogue_lanes=2)
    assert (narrow.ep_lanes, narrow.ep_ratio) == (2, 4)
    # named in the tag only when it differs from cols, so other builds keep their folders
    assert dataclasses.replace(cfg, epilogue_lanes=8).tag == cfg.tag
    assert narrow.tag == cfg.tag + "_el2"


def test_lut_pes_are_the_last_columns():
    cfg = PRESETS["4x4"]
    assert not any(cfg.is_lut_pe(r, c) for r in range(4) for c in range(4))
    assert cfg.tag + "_lut6" == dataclasses.replace(cfg, lut_pes=6).tag
    six = dataclasses.replace(cfg, lut_pes=6)
    # Column 3 whole, and the bottom rows of column 2.
    assert {(r, c) for r in range(4) for c in range(4) if six.is_lut_pe(r, c)} \
        == {(0, 3), (1, 3), (2, 3), (3, 3), (2, 2), (3, 2)}
    every = dataclasses.replace(cfg, lut_pes=16)
    assert all(every.is_lut_pe(r, c) for r in range(4) for c in range(4))
    assert six.label == "4x4 (custom: lut_pes 6)"


def test_from_dict_unknown_field_is_named():
    with pytest.raises(ConfigError, match="'rowz'"):
        AccelConfig.from_dict({"rowz": 8})


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_json_round_trip(name, tmp_path):
    cfg = PRESETS[name]
    assert AccelConfig.from_dict(json.loads(cfg.to_json())) == cfg
    path = tmp_path / f"{cfg.tag}.json"
    path.write_text(cfg.to_json())
    assert load_config(str(path)) == cfg


def test_load_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        load_config(str(bad))
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="JSON object"):
        load_config(str(listed))


def test_config_is_frozen_and_tag_tracks_hardware_fields():
    cfg = PRESETS["8x8"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.rows = 4
    tags = {cfg.tag,
            dataclasses.replace(cfg, spad_depth=2048).tag,
            dataclasses.replace(cfg, acc_depth=512).tag,
            dataclasses.replace(cfg, queue_depth=4).tag,
            dataclasses.replace(cfg, cols=16).tag}
    assert len(tags) == 5
    # The clock does not change the hardware, so it does not change the tag.
    assert dataclasses.replace(cfg, clock_mhz=100.0).tag == cfg.tag


def test_from_dict_needs_every_field_or_a_base():
    """A config left partly out is refused with what is missing, never filled from the class
    defaults (which match no preset); with ``"base"`` the preset fills the rest."""
    with pytest.raises(ConfigError, match="leaves out cols, in_width, acc_width, spad_depth"):
        AccelConfig.from_dict({"rows": 16})
    with pytest.raises(ConfigError, match="leaves out rows, cols,"):
        AccelConfig.from_dict({})
    cfg = AccelConfig.from_dict({"base": "8x8", "acc_depth": 4096})
    assert cfg == dataclasses.replace(PRESETS["8x8"], acc_depth=4096)
    assert AccelConfig.from_dict({"base": "4x8"}) == PRESETS["4x8"]
    with pytest.raises(ConfigError, match="unknown preset '9x9'"):
        AccelConfig.from_dict({"base": "9x9"})
    with pytest.raises(ConfigError, match="base must be a preset's name"):
        AccelConfig.from_dict({"base": 8})


def test_load_config_names_the_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("{}")
    with pytest.raises(ConfigError, match=f"config file {str(path)!r}: the config leaves out"):
        load_config(str(path))


def test_label_says_what_is_custom():
    assert all(cfg.label == name for name, cfg in PRESETS.items())
    custom = dataclasses.replace(PRESETS["8x8"], acc_depth=4096)
    assert custom.name == "8x8" and custom.label == "8x8 (custom: acc_depth 4096)"
    lanes = dataclasses.replace(PRESETS["8x8"], epilogue_lanes=None, queue_depth=4)
    assert lanes.label == "8x8 (custom: queue_depth 4, epilogue_lanes None)"
    odd = AccelConfig(rows=16, cols=8)
    assert odd.label == f"16x8 (custom: {odd.tag})"
