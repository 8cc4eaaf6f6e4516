"""Step 1 of the data path: quantized models in, a Relay module out.

* :mod:`.loader` -- :func:`relay_ext.load_model`, the one loader: a built-in name or a model file
  of any format below, by its suffix;
* :mod:`.models` -- the built-in quantized PyTorch models (:mod:`.quantizable_nets`, random
  weights, calibrated on random data) and TorchScript files, as a
  :class:`~relay_ext.frontend.models.LoadedModel` (Relay module, params, the reference runtime and
  an example input);
* :mod:`.torch_quantized_ops` -- TVM's PyTorch import with the quantized ops TVM 0.19 lacks
  (FX's ``quantized::batch_norm2d``, functional packed convs, PyTorch's rounded average pool);
* :mod:`.onnx_import` -- QDQ (and QOperator) ONNX models made integer
  (``FakeQuantizationToInteger``), with ONNX Runtime (:mod:`.onnx_reference`) as their reference;
  :mod:`.onnx_export` -- a built-in model exported and quantized by ONNX Runtime;
  :mod:`.pt2e_import` -- PT2E programs (torch.export + torchao, ``.pt2``) converted to Relay QDQ
  and made integer the same way, with PyTorch running the program as their reference;
  :mod:`.pt2e_export` -- a float model quantized with PT2E;
  :mod:`.optional_deps` -- the one clear error when ``onnx``/``onnxruntime``/``torchao`` are missing.

Nothing here tunes or builds.
"""
