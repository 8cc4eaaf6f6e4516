"""Running and timing compiled code: a compiled module run on numpy inputs (:mod:`.run`), the
timing toolkit (:mod:`.timing`), each fused op timed inside the whole model (:mod:`.in_model`), and
measuring on a TVM RPC tracker's devices (:mod:`.rpc_tracker`, :mod:`.rpc_server`)."""
