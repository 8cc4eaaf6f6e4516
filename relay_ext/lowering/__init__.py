"""Step 2 of the data path: how a Relay module becomes TIR and machine code.

* :mod:`.targets` -- llvm targets for this machine (chosen from the CPU flags the OS enables),
  checked and normalised in one place;
* :mod:`.config` -- the one pass-context configuration that extraction, tuning and compilation
  share (the variant's TE->TIR converter, the build options);
* :mod:`.tir_converter` -- the ``inline_constants`` TE->TIR converter that annotates Relay's
  scalar constant blocks (``patches/`` holds the same change as a TVM C++ patch);
* :mod:`.inline_vector_lets`, :mod:`.x86.vnni_intrinsics` -- workarounds that make TVM 0.19 build
  with the LLVM 22 this wheel links;
* :mod:`.zero_based_loops` -- loops a partition left starting elsewhere than 0 moved back to 0,
  the only loops TVM's CPU code generator takes;
* :mod:`.cached_libinfo` -- Relay's lowering reads TVM's build settings once, not per dimension;
* :mod:`.table_lookup_index` -- QNN table lookups (sigmoid, hardswish ...) indexed in int32, not
  in the uint8 whose covering range wraps in TVM's arithmetic;
* :mod:`.x86.vnni_conv_schedule` -- TOPI's default VNNI conv with independent accumulators;
* :mod:`.x86.amx`, :mod:`.x86.amx_permission`, :mod:`.x86.amx_layout` -- AMX: the kernel's tile-data
  permission, which targets keep AMX, the 64-channel conv layout (the rule itself is
  :mod:`meta_rules.cpu.amx_conv`).

Kept light on purpose: every MetaSchedule builder worker imports :mod:`.config`.
"""
