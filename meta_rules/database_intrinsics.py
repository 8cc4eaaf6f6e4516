"""Every TensorIntrin a tuning database's records may name, registered before TVM loads it.

TVM replays every record's trace while it loads a database, and a trace that names an intrinsic
not registered fails the whole load. The records name TVM's own intrinsics (the families of the
target, :mod:`meta_rules.generic.tensor_intrinsics`) and quantfuse's AMX conv intrinsics, one per
conv shape (:mod:`meta_rules.cpu.amx_intrinsics`)::

    register_database_intrinsics("llvm -mcpu=sapphirerapids", "work/")   # before ms.Database
"""

from __future__ import annotations

import os
from typing import List, Union

from tvm.target import Target

from meta_rules.cpu.amx_intrinsics import register_intrinsics_named_in
from meta_rules.generic.tensor_intrinsics import register_tensor_intrinsics


def register_database_intrinsics(target: Union[str, Target, None],
                                 work_dir: Union[str, os.PathLike]) -> List[str]:
    """Register the intrinsic families of ``target`` (all of them where None) and the AMX conv
    intrinsics the records in ``work_dir`` name; return the AMX names."""
    register_tensor_intrinsics(target)
    return register_intrinsics_named_in(work_dir)
