"""What AMX code needs to know of the tiles, stated once: the target features, the tile sizes and
the tile configuration that ``ldtilecfg`` loads.

AMX (Intel Advanced Matrix Extensions) has 8 tile registers of at most 16 rows of 64 bytes;
``tdpbusd`` multiplies a uint8 tile by an int8 tile into an int32 tile. Before any tile
instruction a thread loads a 64-byte configuration (palette 1: each tile's bytes per row and
rows)::

    config = tile_config({0: 14, 1: 14, 4: 14, 6: 16, 7: 16})   # tile -> rows, 64 bytes each
    config_words(config)   # the same as 16 little-endian 32-bit words

Used by the AMX conv intrinsics (:mod:`meta_rules.cpu.amx_intrinsics`), Relay's AMX layout and the
target checks (``relay_ext.lowering``), and ``benchmarks/amx_conv_probe.py``. Imports only
Python's standard library (and TVM inside :func:`target_has_amx`).
"""

from __future__ import annotations

from typing import List, Mapping, Optional

# The LLVM features quantfuse's AMX code uses (int8 tile products); a target has AMX for
# quantfuse when LLVM may emit both.
AMX_FEATURES = ("amx-tile", "amx-int8")
TILES = 8  # tile registers
TILE_ROWS = 16  # the most rows a tile has
TILE_BYTES = 64  # bytes per tile row
OC_TILES = 2  # accumulator tiles side by side in output channels (16 each)
CONFIG_BYTES = 64
PALETTE = 1


def tile_config(rows: Mapping[int, int],
                row_bytes: Optional[Mapping[int, int]] = None) -> List[int]:
    """The 64 bytes ``ldtilecfg`` loads (palette 1): ``rows`` maps a tile number (0-7) to its
    rows (1-16), ``row_bytes`` a tile to its bytes per row (1-64; a tile it does not name has 64);
    the other tiles are left unconfigured (zero)."""
    config = [0] * CONFIG_BYTES
    config[0] = PALETTE
    row_bytes = row_bytes or {}
    for tile, count in rows.items():
        width = row_bytes.get(tile, TILE_BYTES)
        if not 0 <= tile < TILES or not 1 <= count <= TILE_ROWS or not 1 <= width <= TILE_BYTES:
            raise ValueError(f"tile {tile} with {count} rows of {width} bytes: tiles are "
                             f"0-{TILES - 1}, rows 1-{TILE_ROWS}, bytes 1-{TILE_BYTES}")
        config[16 + 2 * tile] = width  # bytes per row, little-endian 16-bit
        config[48 + tile] = count
    return config


def config_words(config: List[int]) -> List[int]:
    """The configuration as 16 little-endian 32-bit words (what ``sttilecfg`` stores)."""
    return [int.from_bytes(bytes(config[i:i + 4]), "little") for i in range(0, CONFIG_BYTES, 4)]


def target_has_amx(target) -> bool:
    """Whether LLVM may emit AMX int8 tile instructions for ``target`` (a tvm Target: its -mcpu
    and -mattr)."""
    if target.kind.name != "llvm":
        return False
    from tvm.target.codegen import target_has_features  # pylint: disable=import-outside-toplevel

    return all(target_has_features(feature, target) for feature in AMX_FEATURES)
