"""Step 1 of the data path: quantized models in, a Relay module out.

:mod:`.models` builds the built-in quantized PyTorch models (:mod:`.quantizable_nets`, random
weights, calibrated on random data) and imports TorchScript files with TVM's PyTorch frontend,
returning a :class:`~relay_ext.frontend.models.LoadedModel` (Relay module, params, the reference
module and its example input). Nothing here tunes or builds.
"""
