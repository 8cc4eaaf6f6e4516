"""LLVM targets for this machine: chosen and checked from the CPU features the OS enables.

The name LLVM gives the host CPU says little about what it can execute: a virtual machine on an
AMD EPYC reports ``znver4`` (whose LLVM feature list includes AVX-512 VNNI) while its kernel
exposes only AVX2, and code built for ``-mcpu=znver4`` or ``cascadelake`` dies there with SIGILL.
What counts is what the OS enables: on Linux the ``flags`` line of ``/proc/cpuinfo`` (the kernel
clears a flag whose register state it does not save, such as AVX-512 under a hypervisor that
hides it).

    flags = host_cpu_flags()                  # frozenset of /proc/cpuinfo flags, None off Linux
    best_mcpu(flags)                          # "cascadelake" / "skylake-avx512" / "core-avx2" / None
    host_llvm_target(2)                       # Target("llvm -mcpu=... -num-cores 2")
    normalize_target("host")                  # what every public entry point does once
    tunable_target("llvm -mcpu=core-avx2", "ours")  # ... and checks MetaSchedule has rules for it
    check_runs_here("llvm -mcpu=cascadelake") # TargetNotRunnable naming the missing features

The target is normalised once, where it enters the library: public functions take a
:data:`~meta_rules.rule_sets.TargetLike` (a Target, a target string, or ``"host"``) and call
:func:`normalize_target`; the functions they call take that Target as it is.
"""

from __future__ import annotations

import functools
import logging
import platform
from pathlib import Path
from typing import FrozenSet, Iterable, List, Optional, Tuple

from tvm.target import Target, codegen

from meta_rules.cpu.amx_tiles import AMX_FEATURES
from meta_rules.rule_sets import TargetLike, as_target, schedule_rules

from relay_ext.lowering.x86 import amx_permission, x86_codegen

logger = logging.getLogger(__name__)

# ``--target host`` / ``target="host"``: this machine's best target (:func:`host_llvm_target`).
HOST = "host"
CPUINFO = Path("/proc/cpuinfo")
UNREADABLE_FLAGS = "a readable /proc/cpuinfo (the CPU's flags)"  # what missing_here then lacks

# The -mcpu picked for this host, best first: the first whose features the OS enables all of
# (names as /proc/cpuinfo spells them). TVM's x86 schedules and MetaSchedule's x86 rules key on
# these: VNNI dot products (cascadelake), AVX-512 (skylake-avx512), AVX2 + FMA (core-avx2).
MCPU_LADDER: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("cascadelake", ("avx512f", "avx512bw", "avx512_vnni")),
    ("skylake-avx512", ("avx512f", "avx512bw")),
    ("core-avx2", ("avx2", "fma")),
)

# LLVM's name of an instruction-set feature -> the /proc/cpuinfo flag of the same feature. Only
# features that change which instructions code may contain; LLVM's tuning flags (prefer-256-bit,
# fast-gather ...) and features without a cpuinfo flag are not checked.
LLVM_TO_CPUINFO = {
    "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "popcnt": "popcnt",
    "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c", "bmi": "bmi1", "bmi2": "bmi2",
    "lzcnt": "abm", "movbe": "movbe", "aes": "aes", "pclmul": "pclmulqdq", "sha": "sha_ni",
    "gfni": "gfni", "vaes": "vaes", "vpclmulqdq": "vpclmulqdq", "adx": "adx",
    "avx512f": "avx512f", "avx512bw": "avx512bw", "avx512dq": "avx512dq",
    "avx512cd": "avx512cd", "avx512vl": "avx512vl", "avx512vnni": "avx512_vnni",
    "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16", "avx512vbmi": "avx512vbmi",
    "avx512vbmi2": "avx512_vbmi2", "avx512ifma": "avx512ifma", "avx512bitalg": "avx512_bitalg",
    "avx512vpopcntdq": "avx512_vpopcntdq", "avxvnni": "avx_vnni", "amx-tile": "amx_tile",
    "amx-int8": "amx_int8", "amx-bf16": "amx_bf16",
}


# The /proc/cpuinfo flags that decide which int8 code quantfuse can build for a host (bench's
# "host_flags"): vector widths, the dot-product instructions (VNNI) and AMX.
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl",
                "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8",
                "amx_bf16")


class TargetNotRunnable(ValueError):
    """A target whose code this machine cannot execute (measuring it here would crash)."""


# --- what the OS enables --------------------------------------------------------------------------


def parse_cpu_flags(cpuinfo_text: str) -> Optional[FrozenSet[str]]:
    """The flags of the first ``flags`` line of a /proc/cpuinfo text (None when it has none)."""
    for line in cpuinfo_text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None


@functools.lru_cache(maxsize=None)
def host_cpu_flags() -> Optional[FrozenSet[str]]:
    """The CPU flags the OS enables on this machine (Linux), or None where it does not say."""
    try:
        return parse_cpu_flags(CPUINFO.read_text())
    except OSError:
        return None


def vector_flags(flags: Optional[Iterable[str]] = None) -> List[str]:
    """The :data:`VECTOR_FLAGS` in ``flags`` (default: this host's), in order; empty if unknown."""
    flags = host_cpu_flags() if flags is None else frozenset(flags)
    return [flag for flag in VECTOR_FLAGS if flag in (flags or ())]


def best_mcpu(flags: Optional[Iterable[str]]) -> Optional[str]:
    """The best ``-mcpu`` of :data:`MCPU_LADDER` whose features (the rung's, and all that LLVM's
    ``-mcpu`` implies) are all in ``flags`` (cpuinfo names); None when none is, or when the flags
    are unknown (the conservative choice)."""
    if flags is None:
        return None
    flags = set(flags)
    for mcpu, needed in MCPU_LADDER:
        # The rung's own flags, and every other feature LLVM's -mcpu implies (movbe, bmi2,
        # avx512cd...): a VM that hides one of them cannot run that -mcpu's code.
        if flags.issuperset(needed) and not missing_features(f"llvm -mcpu={mcpu}", flags):
            return mcpu
    return None


def host_llvm_target(num_cores: Optional[int] = None,
                     flags: Optional[Iterable[str]] = None) -> Target:
    """An llvm target this machine can execute, for its vector extensions: ``-mcpu=cascadelake``
    with AVX-512 VNNI, ``skylake-avx512`` with AVX-512 (BW) only, ``core-avx2`` with AVX2 and FMA,
    else plain llvm (generic x86-64; int8 code ~25x slower); plus ``-mattr=+amx-tile,+amx-int8``
    where the OS enables AMX int8 and this process gets the kernel's permission for tile data
    (quantfuse's AMX int8 3x3 convs, :mod:`meta_rules.cpu.amx_conv`). ``flags`` defaults to
    :func:`host_cpu_flags`; off x86 or where the OS does not list its flags, plain llvm.

    VNNI is preferred to AVX-512 alone: int8 models run faster with it, tuned
    (docs/BENCHMARKS.md) and untuned with :mod:`relay_ext.lowering.x86.vnni_conv_schedule`
    (docs/vnni.md)."""
    flags = _host_flags(flags)
    amx = flags is not None and amx_permission.request_tile_data(flags)  # asks the kernel now
    return Target(host_target_text(num_cores, flags, amx=amx))


def host_target_text(num_cores: Optional[int] = None, flags: Optional[Iterable[str]] = None,
                     amx: Optional[bool] = None) -> str:
    """:func:`host_llvm_target` as the short string a person types: ``llvm -mcpu=X -num-cores N``,
    plus ``-mattr=+amx-tile,+amx-int8`` where ``amx``. ``amx`` None (the text in a message):
    whether the OS enables AMX int8 and this process already holds the kernel's permission for
    tile data; nothing is asked of the kernel to format a message."""
    flags = _host_flags(flags)
    mcpu = best_mcpu(flags)
    if amx is None:
        amx = (flags is not None and set(amx_permission.AMX_INT8_FLAGS) <= set(flags)
               and amx_permission.amx_tile_data_granted())
    mattr = f" -mattr={','.join('+' + f for f in AMX_FEATURES)}" if mcpu and amx else ""
    return (f"llvm{f' -mcpu={mcpu}' if mcpu else ''}{mattr} "
            f"-num-cores {int(num_cores or _physical_cores())}")


def _host_flags(flags: Optional[Iterable[str]]) -> Optional[FrozenSet[str]]:
    """``flags``, or where None this host's (None off x86 or where the OS does not list them)."""
    if flags is None:
        return host_cpu_flags() if _host_is_x86() else None
    return frozenset(flags)


# --- checking a target ---------------------------------------------------------------------------


def resolve_target(target: TargetLike) -> Target:
    """``target`` as a Target, ``"host"`` resolved to :func:`host_llvm_target` (which asks the
    kernel for AMX tile data); else :func:`meta_rules.rule_sets.as_target`: a string TVM cannot
    parse is a ValueError with TVM's reason. Nothing is checked or added (:func:`normalize_target`
    does that)."""
    if is_host(target):
        return host_llvm_target()
    return as_target(target)


def is_host(target: TargetLike) -> bool:
    """Whether ``target`` is the word ``host`` (any case, spaces around): this machine's target."""
    return isinstance(target, str) and target.strip().lower() == HOST


def normalize_target(target: TargetLike) -> Target:
    """``target`` as a Target, checked: an llvm ``-mcpu`` LLVM does not know is a ValueError (LLVM
    itself only logs an error and builds for a generic CPU); an llvm target without ``-num-cores``
    gets this machine's physical cores (MetaSchedule's CPU rules need the core count). ``"host"``
    is :func:`host_llvm_target`; a target whose code could use AMX keeps only the AMX quantfuse
    uses (``amx-tile``, ``amx-int8``), and only where this process can run it
    (:func:`supported_amx`); one whose convs become int16 pairs gets the LLVM options their code
    is built with (:func:`relay_ext.lowering.x86.x86_codegen.with_llvm_options`)."""
    if is_host(target):
        return x86_codegen.with_llvm_options(host_llvm_target())
    target = as_target(target)
    if target.kind.name != "llvm":
        return target
    check_known_mcpu(target)
    target = supported_amx(target)
    if "num-cores" not in target.attrs:
        config = dict(target.export())
        config["num-cores"] = _physical_cores()
        target = Target(config, host=target.host)
    return x86_codegen.with_llvm_options(target)


def tunable_target(target: TargetLike, variant: str = "ours") -> Target:
    """:func:`normalize_target`, and a ValueError when MetaSchedule has no default rules for its
    kind (so nothing could tune or schedule it; the message lists the kinds that have them) or
    ``variant`` is not a variant of :data:`meta_rules.VARIANTS`."""
    target = normalize_target(target)
    schedule_rules(target, variant)
    return target


def check_known_mcpu(target: Target) -> None:
    """ValueError when ``target``'s ``-mcpu`` is not a CPU that LLVM knows for its triple."""
    mcpu = target.attrs.get("mcpu")
    if not mcpu:
        return
    known = _known_cpus(str(target.attrs.get("mtriple", "")))
    if known and str(mcpu) not in known:
        examples = [c for c in ("cascadelake", "skylake-avx512", "core-avx2") if c in known]
        raise ValueError(
            f"LLVM {codegen.llvm_version_major()} does not know -mcpu={mcpu}; use one of its CPU "
            f"names ({', '.join(examples or sorted(known)[:5])}, ...), or '{host_target_text()}' "
            "for this machine")


def missing_features(target: TargetLike, flags: Optional[Iterable[str]] = None) -> List[str]:
    """The instruction-set features ``target``'s code may use that the OS of this machine does
    not enable, by LLVM name (empty when it can run here, or when the host's flags are unknown)."""
    return _missing_features(resolve_target(target), flags)


def missing_here(target: TargetLike) -> List[str]:
    """:func:`missing_features` for callers that run the code (a measurement, a test): where the
    OS does not list its CPU flags, :data:`UNREADABLE_FLAGS` instead of nothing."""
    flags = host_cpu_flags()
    return [UNREADABLE_FLAGS] if flags is None else missing_features(target, flags)


def _missing_features(target: Target, flags: Optional[Iterable[str]]) -> List[str]:
    flags = host_cpu_flags() if flags is None else frozenset(flags)
    if flags is None or target.kind.name != "llvm" or not _is_x86(target):
        return []
    check_known_mcpu(target)
    wanted = codegen.llvm_get_cpu_features(target)
    return sorted(f for f in wanted if f in LLVM_TO_CPUINFO and LLVM_TO_CPUINFO[f] not in flags)


def check_runs_here(target: TargetLike, flags: Optional[Iterable[str]] = None) -> None:
    """Raise :class:`TargetNotRunnable` when code built for ``target`` cannot execute on this
    machine: an llvm target for another architecture, or one that uses instruction-set features
    the OS does not enable. Call it before measuring or running locally; a target that describes
    remote devices (RPC) is not this machine's business."""
    target = resolve_target(target)
    if target.kind.name != "llvm":
        raise TargetNotRunnable(f"target {target} is not a CPU target; this machine runs only llvm "
                                "targets (measure others on their devices with --rpc)")
    if _host_is_x86() and not _is_x86(target):
        raise TargetNotRunnable(f"target {target} builds for {target.attrs.get('mtriple')}, and "
                                f"this machine is {platform.machine()}; measure it with --rpc")
    missing = _missing_features(target, flags)
    if missing:
        raise TargetNotRunnable(
            f"this machine cannot run code for {target}: its OS does not enable "
            f"{', '.join(missing)}; use --target '{host_target_text(_num_cores_of(target), flags)}' "
            "here, or measure on a machine that has them with --rpc")


def is_generic_x86(target: Target) -> bool:
    """An x86 llvm target without ``-mcpu``: TVM compiles it for generic x86-64 (no AVX)."""
    return target.kind.name == "llvm" and "mcpu" not in target.attrs and _is_x86(target)


# --- AMX: quantfuse's own AMX code only (docs/cpu.md, relay_ext/lowering/x86/amx.py) ----------------

# The AMX features quantfuse's code uses are meta_rules.cpu.amx_tiles.AMX_FEATURES (int8 3x3 convs
# on tiles). The others an -mcpu implies (amx-bf16, amx-fp16 ...) are dropped: nothing of ours
# uses them, and TOPI's own AMX schedules, which TVM 0.19 picks by feature, crash or fail to build.


def amx_features(target) -> List[str]:
    """The AMX features (LLVM names: amx-tile, amx-int8, ...) that code built for ``target`` may
    use: those of its ``-mcpu`` and ``-mattr`` as LLVM resolves them. Empty for non-llvm targets
    and other architectures."""
    target = target if isinstance(target, Target) else Target(target)
    if target.kind.name != "llvm" or not _is_x86(target):
        return []
    return sorted(str(f) for f in codegen.llvm_get_cpu_features(target) if str(f).startswith("amx"))


CANNOT_RUN_AMX = ("this process cannot run AMX code (the OS does not enable amx_tile and amx_int8, "
                  "or the kernel refused AMX tile data)")


def without_amx(target: Target, quiet: bool = False, reason: str = CANNOT_RUN_AMX) -> Target:
    """``target`` unchanged when its code may not use AMX; else the same target without it: AMX
    entries dropped from ``-mattr``, and an ``-mcpu`` whose LLVM features include AMX replaced by
    the best ``-mcpu`` of :data:`~relay_ext.lowering.targets.MCPU_LADDER` that its features cover
    (sapphirerapids, graniterapids ... -> cascadelake; the ladder's order is what measured
    fastest here), with one warning giving ``reason`` unless ``quiet``. Other attributes
    (``-num-cores`` ...) are kept."""
    amx = amx_features(target)
    if not amx:
        return target
    config = dict(target.export())
    mattr = [str(a) for a in config.get("mattr", [])]
    kept_mattr = [a for a in mattr if not a.lstrip("+-").startswith("amx")]
    if kept_mattr:
        config["mattr"] = kept_mattr
    else:
        config.pop("mattr", None)
    mcpu = config.get("mcpu")
    if mcpu and amx_features(Target({"kind": "llvm", "mcpu": mcpu,
                                     **({"mtriple": config["mtriple"]} if "mtriple" in config
                                        else {})})):
        features = codegen.llvm_get_cpu_features(target)
        replacement = best_mcpu(LLVM_TO_CPUINFO[str(f)] for f in features
                                if str(f) in LLVM_TO_CPUINFO and not str(f).startswith("amx"))
        if replacement:
            config["mcpu"] = replacement
        else:
            config.pop("mcpu")
    mapped = Target(config, host=target.host)
    if not quiet:
        logger.warning("%s: compiling for '%s' instead of '%s' (no %s); see docs/cpu.md", reason,
                       short_text(mapped), short_text(target), ", ".join(amx))
    return mapped


def with_amx(target: Target) -> Target:
    """``target`` plus ``-mattr=+amx-tile,+amx-int8`` (what :data:`AMX_FEATURES` names)."""
    config = dict(target.export())
    mattr = [str(a) for a in config.get("mattr", []) if not str(a).lstrip("+-").startswith("amx")]
    config["mattr"] = mattr + [f"+{feature}" for feature in AMX_FEATURES]
    return Target(config, host=target.host)


def supported_amx(target: Target, can_run: Optional[bool] = None) -> Target:
    """``target`` with the AMX quantfuse uses, and no other: unchanged when it has no AMX
    feature; where this process can run AMX code (``can_run``, default: it asks the kernel for
    AMX tile data now, :mod:`relay_ext.lowering.x86.amx_permission`) and the target has
    both of :data:`AMX_FEATURES`, the best non-AMX ``-mcpu`` plus ``-mattr=+amx-tile,+amx-int8`` (a
    warning names what was dropped, if anything); otherwise :func:`without_amx`."""
    amx = amx_features(target)
    if not amx:
        return target
    if can_run is None:
        can_run = amx_permission.request_tile_data(host_cpu_flags() or ())
    if not can_run:
        return without_amx(target)
    if not set(AMX_FEATURES) <= set(amx):
        return without_amx(target, reason="quantfuse's AMX code needs both amx-tile and amx-int8")
    mapped = with_amx(without_amx(target, quiet=True))
    dropped = sorted(set(amx) - set(AMX_FEATURES))
    if short_text(mapped) != short_text(target):
        logger.warning("compiling for '%s' instead of '%s': quantfuse uses AMX for int8 3x3 "
                       "convs (%s)%s; see docs/cpu.md", short_text(mapped), short_text(target),
                       ", ".join(AMX_FEATURES), f", not {', '.join(dropped)}" if dropped else "")
    return mapped


def short_text(target: Target) -> str:
    """``llvm -mcpu=X -num-cores N [-mattr=...]``: what a person would type for ``target``."""
    parts = [target.kind.name]
    for key in ("mtriple", "mcpu", "mattr", "num-cores"):
        value = target.attrs.get(key)
        if value is None or (key == "mattr" and not list(value)):
            continue
        parts.append(f"-{key}={','.join(map(str, value))}" if key == "mattr"
                     else f"-{key} {value}" if key == "num-cores" else f"-{key}={value}")
    return " ".join(parts)


# --- small helpers -------------------------------------------------------------------------------


def _is_x86(target: Target) -> bool:
    # TVM fills in the host's triple for an llvm target that names none.
    return str(target.attrs.get("mtriple", "x86_64")).startswith(("x86_64", "i686", "i386"))


def _host_is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def _num_cores_of(target: Target) -> Optional[int]:
    return int(target.attrs["num-cores"]) if "num-cores" in target.attrs else None


def _physical_cores() -> int:
    from tvm.meta_schedule.utils import cpu_count  # pylint: disable=import-outside-toplevel

    return int(cpu_count(logical=False))


@functools.lru_cache(maxsize=None)
def _known_cpus(mtriple: str) -> FrozenSet[str]:
    probe = Target(f"llvm -mtriple={mtriple}") if mtriple else Target("llvm")
    return frozenset(str(c) for c in codegen.llvm_get_cpu_archlist(probe))
