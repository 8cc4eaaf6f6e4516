"""x86 code generation: AMX (the kernel's tile-data permission, the 64-channel conv layout) and
VNNI (dot products for LLVM 22, TOPI's conv with independent accumulators), all installed by
:func:`.x86_codegen.install`.
"""
