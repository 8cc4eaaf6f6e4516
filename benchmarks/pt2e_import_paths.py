"""Which import of a PT2E program keeps more of the graph integer: quantfuse's converter, or
``torch.onnx.export`` of the program into the ONNX path.

    python -m benchmarks.pt2e_import_paths [--model tiny_resnet] [--image-size 32]
        [--exporter-pythonpath DIR]

One built-in network (random weights from a fixed seed, :func:`relay_ext.load_model`'s),
quantized with PT2E (:func:`relay_ext.frontend.pt2e_export.quantize_pt2e`, calibration on random
batches), then imported twice:

* converter: :func:`relay_ext.frontend.pt2e_import.from_exported_program`;
* ONNX: ``torch.onnx.export(program, dynamo=True)`` (the only exporter that takes an
  ExportedProgram; it needs onnxscript, which needs onnx >= 1.17, while TVM 0.19's ONNX frontend
  needs onnx < 1.17). So the export runs in a child process whose ``PYTHONPATH`` starts with
  ``--exporter-pythonpath`` (a directory with onnxscript and a newer onnx, e.g. from
  ``pip install --target DIR --no-deps onnxscript onnx_ir onnx ml_dtypes``); the ONNX file is then
  imported here with :func:`relay_ext.load_model`.

For each import it prints the Relay module's conv/dense ops after the import made it integer:
``qnn.conv2d`` / ``qnn.dense`` (int8) against ``nn.conv2d`` / ``nn.dense`` (left float32), and the
step error of TVM's untuned build against PyTorch running the program.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

COUNTED = ("qnn.conv2d", "nn.conv2d", "qnn.dense", "nn.dense", "qnn.requantize", "qnn.quantize", "qnn.dequantize")

_EXPORT = """
import sys, torch
import torchao.quantization.pt2e.quantize_pt2e  # registers the quantized_decomposed ops
program = torch.export.load(sys.argv[1])
example = (torch.zeros(tuple(int(d) for d in sys.argv[3].split(","))),)
torch.onnx.export(program, example, sys.argv[2], dynamo=True, input_names=["input"],
                  opset_version=int(sys.argv[4]))
"""


def parse_args(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny_resnet", help="a built-in image model")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--opset", type=int, default=17,
                        help="ONNX opset of the export (default 17; the exporter's own default is 18)")
    parser.add_argument("--exporter-pythonpath", default=None,
                        help="a directory with onnxscript and onnx >= 1.17 for the ONNX export")
    return parser.parse_args(argv)


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    import torch

    import relay_ext
    from meta_rules.base.tvm_errors import tvm_error_message
    from relay_ext.frontend import eager_quantization, models, pt2e_export
    from relay_ext.frontend.onnx_import import op_counts
    from relay_ext.frontend.pt2e_import import from_exported_program
    from relay_ext.report.accuracy import step_error

    spec = models.MODELS[args.model]
    shape = spec.input_shape(1, args.image_size)
    float_model = eager_quantization.seeded_float_model(spec.build, args.seed)
    calibration = [batch.numpy() for batch in eager_quantization.random_batches(
        shape, models.CALIBRATION_BATCHES, args.seed + 1)]
    program = pt2e_export.quantize_pt2e(float_model, calibration[0][:1], [b[:1] for b in calibration])
    rows: Dict[str, Dict[str, object]] = {}

    def measure(label: str, loaded) -> None:
        counts = op_counts(loaded.mod)
        untuned = relay_ext.compile(loaded, target="llvm", schedule="default", opt_level=2)
        output = relay_ext.run_module(untuned, loaded.inputs)[0]
        reference = from_exported_program(program).reference(loaded.example_input)
        steps = step_error(output, reference, loaded.output_scale).max_steps if loaded.output_scale else None
        rows[label] = {**{op: counts.get(op, 0) for op in COUNTED}, "steps": steps}

    measure("converter (pt2e_import)", from_exported_program(program, name=args.model))
    with tempfile.TemporaryDirectory() as scratch:
        pt2 = Path(scratch) / "program.pt2"
        onnx_path = Path(scratch) / "program.onnx"
        torch.export.save(program, str(pt2))
        env = dict(os.environ)
        if args.exporter_pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.exporter_pythonpath, env.get("PYTHONPATH")]))
        child = subprocess.run([sys.executable, "-c", _EXPORT, str(pt2), str(onnx_path), ",".join(map(str, shape)),
                                str(args.opset)],
                               env=env, capture_output=True, text=True, check=False)
        if child.returncode != 0:
            last = (child.stderr.strip().splitlines() or ["?"])[-1]
            print(f"torch.onnx.export of the program failed: {last}")
        else:
            try:
                measure("torch.onnx.export -> onnx_import", relay_ext.load_model(onnx_path))
            except Exception as error:  # report, do not hide, what the ONNX path makes of it
                print(f"ONNX import failed: {tvm_error_message(error)}")
    print(f"{args.model}, input {shape}, PT2E (X86InductorQuantizer), ONNX opset {args.opset}:")
    print("| import | " + " | ".join(COUNTED) + " | max steps vs PyTorch (untuned build) |")
    print("|---" * (len(COUNTED) + 2) + "|")
    for label, row in rows.items():
        steps = row["steps"]
        print(f"| {label} | " + " | ".join(str(row[op]) for op in COUNTED)
              + f" | {'-' if steps is None else f'{steps:.2f}'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
