"""The runtimes a user could pick instead of TVM, each timed on the same input as TVM's builds and
checked against its own reference: PyTorch (TorchScript, PT2E eager), PyTorch Inductor, ONNX
Runtime and OpenVINO (with OpenVINO's per-layer counters, :mod:`.openvino_layers`)."""
