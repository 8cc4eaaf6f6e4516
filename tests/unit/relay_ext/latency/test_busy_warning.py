"""bench says when its figures are not trustworthy: load above the threads, a hypervisor stealing
the CPU (/proc/stat's steal), or one configuration's rounds far apart
(relay_ext.latency.result.BenchResult.busy_warning)."""

import os

from relay_ext.latency.result import SPREAD_WARNING, STOLEN_WARNING, BenchResult
from relay_ext.measure.timing import Timing, cpu_ticks, stolen_share


def _result(seconds=(0.004, 0.005, 0.0045), **kwargs) -> BenchResult:
    return BenchResult(model="m", input_shape=(1, 3, 8, 8), target="llvm", variant="none",
                       threads=2, repeats=3, number=1,
                       timings={"TVM tuned": Timing(list(seconds)),
                                "PyTorch int8": Timing([0.006, 0.0061, 0.0062])},
                       reference="PyTorch int8", max_steps=0.0, mean_steps=0.0,
                       fraction_equal=1.0, untuned_max_steps=0.0, machine="test", date="today",
                       **kwargs)


def test_a_quiet_run_has_no_warning_and_each_cause_is_named():
    assert _result(load_average=1.5, stolen_share=0.01).busy_warning is None
    assert _result().busy_warning is None  # nothing known: nothing to warn about

    loaded = _result(load_average=3.2).busy_warning
    assert "load average was 3.20" in loaded and "steal" not in loaded

    stolen = _result(stolen_share=STOLEN_WARNING + 0.04).busy_warning
    assert "hypervisor gave 9%" in stolen and "load average" not in stolen

    wide = _result(seconds=(0.004, 0.004 * SPREAD_WARNING * 1.1, 0.005)).busy_warning
    assert "rounds of TVM tuned were more than" in wide and "PyTorch int8" not in wide

    both = _result(load_average=3.0, stolen_share=0.2).busy_warning
    assert both.startswith("WARNING: ") and "load average" in both and "hypervisor" in both
    assert _result(stolen_share=0.2).to_dict()["stolen_share"] == 0.2


def test_stolen_share_from_proc_stat_ticks():
    assert stolen_share((1000, 10), (1200, 30)) == 0.1
    assert stolen_share(None, (1, 1)) is None and stolen_share((5, 0), (5, 0)) is None
    ticks = cpu_ticks()  # busy and stolen so far, stolen never above busy
    assert (ticks is None) == (not os.path.exists("/proc/stat"))
    assert ticks is None or 0 <= ticks[1] <= ticks[0] and ticks[0] > 0
