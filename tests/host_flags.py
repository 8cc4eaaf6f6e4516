"""CPU flag sets as /proc/cpuinfo spells them, for each host class the target checks meet."""



# Flag sets as /proc/cpuinfo spells them. AMD_AVX2_VM is a 2-core AMD EPYC virtual machine whose
# kernel exposes AVX2 but no AVX-512 (LLVM still names its CPU znver4).
BASE = ("fpu sse sse2 pni ssse3 sse4_1 sse4_2 popcnt pclmulqdq aes movbe xsave avx f16c abm "
        "bmi1 bmi2 adx sha_ni rdrand rdseed").split()


AMD_AVX2_VM = frozenset(BASE + ["avx2", "fma", "vaes", "vpclmulqdq", "clzero"])


SKYLAKE_SERVER = frozenset(BASE + "avx2 fma avx512f avx512dq avx512cd avx512bw avx512vl".split())


VNNI_SERVER = SKYLAKE_SERVER | {"avx512_vnni"}


SSE_ONLY = frozenset("fpu sse sse2 pni ssse3 sse4_1 sse4_2 popcnt".split())
