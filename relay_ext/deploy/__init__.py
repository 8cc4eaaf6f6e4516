"""Step 6 of the data path: what was tuned, taken out as one file a user can ship.

* :mod:`.export` -- ``relay_ext.export``: a build of ``relay_ext.compile`` (:mod:`relay_ext.build`:
  the builds ``quantfuse bench`` times) written with TVM's ``export_library`` as
  ``model.so``, with ``model.json`` beside it (inputs, outputs, target, versions, the records
  used), both written atomically;
* :mod:`.runtime` -- ``relay_ext.load``: an exported ``model.so`` loaded and run through TVM's
  runtime alone (it imports only ``tvm.runtime``, numpy, json and the standard library: no
  Relay, no PyTorch), its input checked against ``model.json``;
* :mod:`.remote` -- the same model run on a server of a TVM RPC tracker (upload, run, download).

This ``__init__`` imports nothing, so that importing :mod:`.runtime` stays light.
"""
