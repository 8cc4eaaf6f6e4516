"""The runtimes a user could pick instead of TVM, each behind one interface
(:class:`relay_ext.peers.base.Peer`: ``name``, ``version``, ``available()``, ``prepare(model)``
giving a timer of one round and its output check), timed by bench on the same input as TVM's
builds:

* :mod:`.pytorch` -- PyTorch running the model itself: a TorchScript module's int8 kernels, or a
  PT2E program run eagerly (the model's reference);
* :mod:`.onnx_runtime` -- ONNX Runtime's int8 session on a QDQ ONNX file (the model's own, or a
  built-in model's export);
* :mod:`.openvino` -- OpenVINO's CPU plugin on the same ONNX file, checked against ONNX Runtime
  running it as written; :mod:`.openvino_layers` -- its per-layer counters;
* :mod:`.inductor` -- PyTorch Inductor (``torch.compile`` with freezing) on a PT2E program,
  checked against the program run eagerly;
* :mod:`.registry` -- every peer in bench's table order.

A peer that cannot run (its package missing, torchao's quantizer failing on the network, no C++
compiler, no ONNX file to read) says why in one line (:class:`~relay_ext.peers.base.PeerUnavailable`),
and bench goes on without it.
"""
