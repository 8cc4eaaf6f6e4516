"""The AMX conv probe (benchmarks/amx_conv_probe.py): its layouts, its kernel, its guard.

The layouts are checked on every host by a numpy model of what the kernel's tile instructions
compute; the kernel itself only runs where the OS enables AMX int8 and the kernel grants tile
data to the process (elsewhere that test is skipped, and says why)."""

import numpy as np
import pytest

from benchmarks import amx_conv_probe as probe
from relay_ext.lowering.x86.amx import request_amx_tile_data

AVX2_HOST = frozenset({"sse4_2", "avx", "avx2", "fma", "bmi2"})
AMX_HOST = frozenset({"avx2", "avx512f", "avx512bw", "avx512_vnni", "amx_tile", "amx_int8"})


def layer(channels: int, height: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (1, channels, height, height), dtype=np.uint8)
    weight = rng.integers(-128, 128, (channels, channels, 3, 3), dtype=np.int8)
    scale, zero_point = 4.0 / (channels * 9 * 64), -2
    return data, weight, scale, zero_point


def tiles_in_numpy(flat, packed, channels: int, height: int, scale: float, zero_point: int):
    """What the kernel computes, tile by tile: ``tdpbusd`` adds A[m, 4k+j] * B[k, 4n+j] over k, j
    to C[m, n], A a tile of 16 pixels x 64 input channels, B one of 16 rows x (16 output channels x
    4 input channels). Same block, tap and address arithmetic as the kernel."""
    width = height + 2
    blocks = -(-height * width // probe.BLOCK_PIXELS)
    k_blocks, oc_tiles = channels // probe.TILE_BYTES, channels // probe.TILE_ROWS
    data = flat.reshape(-1, channels).astype(np.int64)
    tiles = packed.reshape(-1, 16, 16, 4).astype(np.int64)  # [tile, k, n, j]
    out = np.zeros((blocks * probe.BLOCK_PIXELS, channels), np.int64)
    for block in range(blocks):
        for oc_tile in range(oc_tiles):
            acc = np.zeros((probe.BLOCK_PIXELS, 16), np.int64)
            for tap in range(9):
                first = block * probe.BLOCK_PIXELS + tap // 3 * width + tap % 3
                for kb in range(k_blocks):
                    a = data[first:first + probe.BLOCK_PIXELS, kb * 64:(kb + 1) * 64]
                    b = tiles[(tap * k_blocks + kb) * oc_tiles + oc_tile]
                    acc += np.einsum("mkj,knj->mn", a.reshape(-1, 16, 4), b)
            out[block * probe.BLOCK_PIXELS:(block + 1) * probe.BLOCK_PIXELS,
                oc_tile * 16:(oc_tile + 1) * 16] = acc
    return np.clip(np.round(out * scale) + zero_point, -128, 127).astype(np.int8).reshape(-1)


@pytest.mark.parametrize("channels,height", [(64, 7), (128, 5)])
def test_the_kernels_layouts_compute_the_convolution(channels, height):
    data, weight, scale, zero_point = layer(channels, height)
    image, packed = probe.pack_inputs(data, weight)
    flat = probe.padded_pixels(image, channels, height)
    out = tiles_in_numpy(flat, packed, channels, height, scale, zero_point)
    got = probe.unpack_output(out, channels, height)
    expected = probe.reference(data, weight, scale, zero_point)
    assert got.shape == expected.shape == (1, channels, height, height)
    assert np.array_equal(got, expected)


def test_the_kernel_refuses_channels_that_do_not_fill_a_tile_row():
    with pytest.raises(ValueError, match="multiples of 64"):
        probe.amx_conv3x3(48, 7, 0.01, 0)


def test_the_probe_runs_nothing_where_the_os_does_not_enable_amx(monkeypatch, capsys):
    built = []
    monkeypatch.setattr(probe, "host_cpu_flags", lambda: AVX2_HOST)
    monkeypatch.setattr(probe, "probe", lambda *args: built.append(args) or [])
    assert probe.main(["--layers", "64x7"]) == 2
    assert built == []
    assert "does not enable amx_tile and amx_int8" in capsys.readouterr().err


def test_the_probe_runs_nothing_where_the_kernel_refuses_tile_data(monkeypatch, capsys):
    built = []
    monkeypatch.setattr(probe, "host_cpu_flags", lambda: AMX_HOST)
    monkeypatch.setattr(probe, "request_amx_tile_data", lambda flags: False)
    monkeypatch.setattr(probe, "probe", lambda *args: built.append(args) or [])
    assert probe.main(["--layers", "64x7"]) == 2
    assert built == []
    assert "did not grant AMX tile data" in capsys.readouterr().err


def test_the_amx_kernel_matches_numpy_on_an_amx_host():
    if not request_amx_tile_data():
        pytest.skip("this host's OS does not enable AMX int8 or the kernel grants no tile data: "
                    "the AMX kernel cannot run here")
    for channels, height, accumulators in [(64, 7, "tiles"), (128, 5, "tiles"),
                                           (128, 5, "memory")]:
        lib, _, wrong, outputs = probe.amx_layer(channels, height, seed=3,
                                                 accumulators=accumulators)
        assert outputs == channels * height * height
        assert wrong == 0
        assert "tdpbusd" in lib.get_source("asm")
