"""The command line's arguments: ``build_parser()``; a parse error is :class:`BadInput`."""

from __future__ import annotations

import argparse
from importlib import metadata

USAGE = """\
the command line of quantfuse:

    quantfuse models                                   # the built-in quantized models
    quantfuse fusion --model resnet50 --target nvidia/nvidia-a100 [--json] [--out report.md]
    quantfuse tune --model resnet18 --target 'llvm -mcpu=core-avx2' --trials 200 --work-dir w
    quantfuse tune ... --minutes 15      # a wall-clock budget, alone or with --trials
    quantfuse tune ... --rpc 127.0.0.1:9190:cpu   # measure on a TVM RPC tracker's servers
    quantfuse bench --model resnet18 --target llvm --work-dir work   # vs PyTorch/ORT/OpenVINO/Inductor
    quantfuse bench --model resnet18 --target host   # no tuning: the no-search build vs the same
    quantfuse profile --model resnet18 --target host [--work-dir w] [--json] [--png p.png]
                                         # each fused op's time inside the model, vs OpenVINO's
    quantfuse demo [--work-dir D]        # fusion, short tune, accuracy, bench on tiny_resnet
    quantfuse export --model resnet18 --target host --work-dir w --out model.so   # + model.json
    quantfuse run --lib model.so --input x.npy [--out y.npy] [--repeat 20] [--rpc H:P:KEY]

--model takes a built-in name, a TorchScript file (then --input-shape 1,3,224,224) or a
quantized ONNX file (QDQ; its input shape is read from it, --input-shape fixes a dynamic one), or
a PT2E program saved with torch.export.save (.pt2; its input shape is its own; needs
quantfuse[pt2e]).
Bad input (unknown model, bad target, a target this machine cannot run, unwritable work dir,
trials <= 0, a work dir whose database is not MetaSchedule's, an unreachable RPC tracker) is one
line on stderr and exit code 2; --verbose adds the traceback and shows TVM's own log lines.
"""


class BadInput(Exception):
    """Wrong input from the user: one line on stderr, exit code 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print the usage and exit; we print one line
        raise BadInput(f"{message} (see '{self.prog} --help')")


# --- arguments ----------------------------------------------------------------------------------


def _positive(convert, noun: str):
    """An argparse type: ``convert(text)``, which must be a positive, finite ``noun``."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if not 0 < value < float("inf"):  # NaN fails this too
            raise argparse.ArgumentTypeError(f"must be a positive {noun.split()[-1]}, got {text}")
        return value

    return parse


positive_float = _positive(float, "a number")
positive_int = _positive(int, "an integer")


# command -> (one-line help, description of its --help)
COMMANDS = {
    "models": ("list the built-in quantized models",
               "List the built-in quantized models and what they are."),
    "fusion": ("static fusion report (no tuning)",
               "For each tuning task: its anchor op, the global-memory intermediates its design "
               "spaces leave under each variant (worst space) and the bytes of global traffic they "
               "cost (write + read); totals per variant. Nothing is tuned. A task whose design "
               "spaces TVM cannot generate is listed as failed, with TVM's reason."),
    "tune": ("tune with MetaSchedule into a work dir (resumable)",
             "Tune the model's tasks with MetaSchedule; the JSON database goes to --work-dir, "
             "progress (trials, tasks measured, estimated latency) to stderr. --trials is the total "
             "budget of the work dir, spread over the tasks: running the same command again "
             "continues from the records it holds and never measures a recorded candidate again. "
             "Ctrl-C finishes the candidates in flight, keeps every record and exits 130 (twice: "
             "stop at once). --minutes M stops the same way once M minutes have passed, and "
             "exits 0; run the same command again to tune M more minutes. A task whose design "
             "space is exhausted ends early and leaves its trials to the others. A half-written last line (a killed run) is set aside in "
             "<file>.broken-<time> with a warning."),
    "bench": ("latency: TVM tuned (or no-search) vs untuned vs PyTorch / ONNX Runtime / "
              "OpenVINO / Inductor int8",
              "Compile the model with the work dir's tuned database (without --work-dir: the "
              "no-search build, quantfuse's rules with no tuning), check its output against "
              "its reference runtime (PyTorch for TorchScript, ONNX Runtime for ONNX; in output "
              "quantization steps), time TVM (time_evaluator), TVM's untuned default build and "
              "the reference (for a built-in model PyTorch and an ONNX Runtime export of it) "
              "and the peers (OpenVINO on the same ONNX file, PyTorch Inductor on a PT2E "
              "program; each compiled once, its output checked, or one line saying why it "
              "did not run) in interleaved rounds on the same input with "
              "the same thread count; print a table with ratios and the fastest peer, and write "
              "report.md and latency.png into the work dir (none without one)."),
    "profile": ("where the time goes: each fused op's time inside the model, vs OpenVINO's "
                "layers",
                "Build the model as bench builds its main row (the work dir's tuned records when "
                "it holds them, else the no-search build), run it in TVM's debug executor and "
                "print each fused op's time inside the model (all its calls, median of --rounds "
                "runs) and share of the run, slowest first, with the convolution it runs, what "
                "scheduled it and the int8 instructions in its code; the executor's own time "
                "between kernels; the whole model's latency without the profiler. Where "
                "OpenVINO is installed and reads the model (an ONNX file, or a built-in model's "
                "ONNX export), its own per-layer counters beside: each TVM convolution paired "
                "with OpenVINO's of the same shape. Where a conv's kernel uses AVX-512 VNNI, each "
                "such conv's share of this CPU's VNNI peak (measured on the same threads). "
                "A bar chart goes to --png, else "
                "profile.png in the work dir."),
    "export": ("write what bench timed as model.so + model.json (TVM runtime only)",
               "Build the model exactly as 'quantfuse bench' builds its tuned row (the work dir's "
               "records under the per-task choice, timed with --threads threads; without "
               "--work-dir: TVM's untuned build) and write it with TVM's export_library as --out "
               "(a .so), with a .json beside it: inputs (name, shape, dtype), outputs (shape, "
               "dtype, scale, zero point), target, versions and the records used. Both files "
               "appear only once complete. TVM's runtime alone loads it ('quantfuse run', "
               "relay_ext.load, or C++: docs/deploy.md)."),
    "run": ("run an exported model.so on a .npy input (TVM runtime only)",
            "Load a library that 'quantfuse export' wrote through TVM's runtime alone (neither "
            "PyTorch nor Relay is imported), check the input against its .json (shape, dtype), "
            "run it and write the output (--out, .npy) or summarise it; --repeat N prints the "
            "median latency of N runs; --rpc runs it on a server of a TVM RPC tracker (the "
            "library is uploaded, the output downloaded)."),
    "demo": ("the whole job on tiny_resnet, in a few minutes",
             "On the built-in tiny_resnet: fusion report (nvidia/nvidia-a100, all variants), a "
             "short tune on this machine's host target, compile, accuracy check against PyTorch "
             "and the latency bench."),
}


def package_version() -> str:
    """The installed quantfuse distribution's version (pyproject.toml's ``version``)."""
    try:
        return metadata.version("quantfuse")
    except metadata.PackageNotFoundError:  # run from a checkout that pip never installed
        return "unknown (not installed; pip install -e .)"


def build_parser() -> argparse.ArgumentParser:
    common = Parser(add_help=False)
    common.add_argument("--verbose", action="store_true",
                        help="debug logging, tracebacks on errors, TVM's log lines as they come")
    model = Parser(add_help=False)
    model.add_argument("--model", required=True,
                       help="a built-in model (see 'quantfuse models'), a TorchScript file, a "
                            "quantized ONNX file or a PT2E program (.pt2)")
    model.add_argument("--input-shape", help="the input shape of a TorchScript file (e.g. "
                       "1,3,224,224), or of an ONNX file whose input is dynamic")
    model.add_argument("--image-size", type=positive_int, default=224,
                       help="input image size of a built-in image model (default 224)")
    model.add_argument("--layout", default="NCHW", choices=["NCHW", "NHWC"],
                       help="conv2d data layout of the Relay module (default NCHW)")
    model.add_argument("--target", required=True,
                       help="a TVM target: host (this CPU's best target, from the flags its "
                            "OS enables), 'llvm -mcpu=core-avx2', 'llvm -num-cores 4', "
                            "nvidia/nvidia-a100, 'cuda -arch=sm_80' ...")

    parser = Parser(prog="quantfuse", description=USAGE, parents=[common],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"quantfuse {package_version()}",
                        help="print the version of quantfuse and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    def command(name, *parents):
        return sub.add_parser(name, parents=[common, *parents], help=COMMANDS[name][0],
                              description=COMMANDS[name][1])

    command("models")
    fusion = command("fusion", model)
    fusion.add_argument("--variants", default="legacy,upstream,ours",
                        help="comma-separated variants to compare (default legacy,upstream,ours)")
    fusion.add_argument("--json", action="store_true", help="print the report as JSON")
    fusion.add_argument("--out", help="also write the report as a Markdown table to this file")
    tune = command("tune", model)
    tune.add_argument("--trials", type=positive_int, default=None,
                      help="total number of measured candidates for the work dir (--trials, "
                           "--minutes or both)")
    tune.add_argument("--minutes", type=positive_float, default=None,
                      help="wall-clock budget of this run in minutes, start-up included; when "
                           "it runs out the batches in flight are stored and tune exits 0")
    tune.add_argument("--work-dir", required=True, help="directory of the tuning database")
    tune.add_argument("--variant", default="ours", help="rule set: ours (default), upstream, legacy")
    tune.add_argument("--seed", type=int, default=None, help="random seed of the search")
    tune.add_argument("--rpc", metavar="HOST:PORT:KEY", default=None,
                      help="measure on the servers registered under KEY with the TVM RPC tracker "
                           "at HOST:PORT (default: measure on this machine)")
    tune.add_argument("--candidate-timing", choices=("cold", "warm"), default=None,
                      help="cold: each timed run of a candidate follows a flush of its weights "
                           "and outputs from the caches, as inside a model; warm: it runs again "
                           "and again, its weights cached (default: what the work dir was tuned "
                           "with, else cold for a CPU target and warm for a GPU)")
    bench = command("bench", model)
    bench.add_argument("--work-dir", default=None,
                       help="a work dir that 'quantfuse tune' filled: its tuned build is timed, "
                            "report.md and latency.png go there (default: none; the no-search "
                            "build and TVM's untuned one are timed, no report is written)")
    bench.add_argument("--variant", default="ours", help="rule set it was tuned with (default ours)")
    bench.add_argument("--repeats", type=positive_int, default=10,
                       help="timed repeats; the median is reported (default 10)")
    bench.add_argument("--number", type=positive_int, default=10,
                       help="runs per repeat (default 10)")
    bench.add_argument("--threads", type=positive_int, default=None,
                       help="threads for TVM and the reference runtimes (default: all CPUs)")
    bench.add_argument("--keep-slower-records", action="store_true",
                       help="compile every task with its best record, also where it ran slower "
                            "than TVM's default schedule of the task (default: such a task is "
                            "timed both ways here and compiled with the default; skipping that "
                            "saves a second build of each tuned task)")
    bench.add_argument("--no-peers", action="store_true",
                       help="skip the OpenVINO and PyTorch Inductor rows (each is compiled once "
                            "before timing; Inductor's compile of a ResNet takes tens of seconds)")
    bench.add_argument("--json", action="store_true",
                       help="print the result as one JSON object on stdout (model, target, "
                            "threads, host_flags, rows with median/min/max ms, max_steps ...)")
    add_profile_command(command, model)
    add_deploy_commands(command, model)
    demo = command("demo")
    demo.add_argument("--work-dir", default=None,
                      help="where the tuning database and report go (default: a new temp dir)")
    demo.add_argument("--trials", type=positive_int, default=None,
                      help="tuning budget (default: 2 per task)")
    demo.add_argument("--image-size", type=positive_int, default=32,
                      help="input image size (default 32)")
    return parser


def add_profile_command(command, model) -> None:
    """``profile``: ``command(name, *parents)`` adds a subcommand."""
    profile = command("profile", model)
    profile.add_argument("--work-dir", default=None,
                         help="a work dir: its tuned build is profiled when 'quantfuse tune' "
                              "filled it (else the no-search build); profile.png goes there "
                              "(default: none, no chart unless --png)")
    profile.add_argument("--variant", default="ours", help="rule set it was tuned with "
                         "(default ours)")
    profile.add_argument("--threads", type=positive_int, default=None,
                         help="threads for TVM and OpenVINO (default: all CPUs)")
    profile.add_argument("--rounds", type=positive_int, default=10,
                         help="profiled runs; each op's median is reported (default 10)")
    profile.add_argument("--png", default=None,
                         help="write the bar chart here (default: profile.png in --work-dir)")
    profile.add_argument("--no-openvino", action="store_true",
                         help="TVM's side only (OpenVINO's column needs openvino and an ONNX "
                              "model or a built-in model's export)")
    profile.add_argument("--keep-slower-records", action="store_true",
                         help="build as 'bench --keep-slower-records': no task timed against "
                              "TVM's default schedule first")
    profile.add_argument("--json", action="store_true",
                         help="print the profile as one JSON object on stdout (rows with name, "
                              "calls, ms, share, layer, schedule, kernel, openvino_ms ...)")


def add_deploy_commands(command, model) -> None:
    """``export`` and ``run``: ``command(name, *parents)`` adds a subcommand."""
    export = command("export", model)
    export.add_argument("--out", required=True, help="the library to write (a .so); its "
                        "description goes beside it with .json (model.so -> model.json)")
    export.add_argument("--work-dir", default=None,
                        help="a work dir that 'quantfuse tune' filled (default: none, TVM's "
                             "untuned build, as bench's 'TVM untuned' row)")
    export.add_argument("--variant", default="ours", help="rule set it was tuned with "
                        "(default ours)")
    export.add_argument("--threads", type=positive_int, default=None,
                        help="threads the per-task choice times each task with, as bench "
                             "(default: all CPUs)")
    export.add_argument("--keep-slower-records", action="store_true",
                        help="every task with its best record, as bench --keep-slower-records")
    run = command("run")
    run.add_argument("--lib", required=True, help="the .so that 'quantfuse export' wrote (its "
                     ".json beside it)")
    run.add_argument("--input", required=True, help="the input as a NumPy .npy file of the "
                     "shape and dtype in the .json")
    run.add_argument("--out", default=None, help="write the (first) output here as .npy "
                     "(default: print a summary of it)")
    run.add_argument("--repeat", type=positive_int, default=None,
                     help="time N runs and print the median latency")
    run.add_argument("--rpc", metavar="HOST:PORT:KEY", default=None,
                     help="run on a server registered under KEY with the TVM RPC tracker at "
                          "HOST:PORT (default: here)")
